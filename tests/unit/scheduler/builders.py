"""Tiny builders for scheduler snapshots, so tests read like the scenario they describe."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from operators.scheduler import run_session
from operators.scheduler.decisions import Bind, Evict, Nominate
from operators.scheduler.snapshot import (
    GPU,
    GpuTopology,
    GroupPhase,
    LabelSelector,
    Node,
    PodGroup,
    Pool,
    ReplicaSpec,
    Snapshot,
    Task,
    TaskStatus,
)

from .simulate import advance

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping, Sequence

    from operators.scheduler.session import SessionConfig, SessionResult

GiB = 2**30


def node(
    name: str,
    cpu: int = 8,
    gpus: int = 0,
    memory: int = 64 * GiB,
    pods: int = 110,
    labels: Mapping[str, str] | None = None,
    layout: GpuTopology | None = None,
    **kwargs: object,
) -> Node:
    alloc = {"cpu": cpu * 1000, "memory": memory, "pods": pods}
    if gpus:
        alloc[GPU] = gpus
    return Node(
        name=name,
        allocatable=alloc,
        labels=dict(labels or {}),
        gpu_topology=layout or GpuTopology(),
        **kwargs,  # type: ignore[arg-type]
    )


def group(
    uid: str,
    queue: str = "default",
    min_member: int = 1,
    phase: GroupPhase = GroupPhase.INQUEUE,
    **kwargs: object,
) -> PodGroup:
    return PodGroup(
        uid=uid,
        namespace="ns",
        name=uid,
        queue=queue,
        min_member=min_member,
        phase=phase,
        **kwargs,  # type: ignore[arg-type]
    )


def elastic(
    uid: str,
    low: int,
    high: int,
    replica_priority: int = 0,
    queue: str = "default",
    phase: GroupPhase = GroupPhase.RUNNING,
    **kwargs: object,
) -> PodGroup:
    """An elastic group (running, unless told) of one replica type ``w``, ``low``..``high``
    replicas."""
    spec = ReplicaSpec("w", low, high, priority=replica_priority)
    return group(uid, queue, low, phase, replica_specs=(spec,), **kwargs)


def pools(*names: str, **flags: bool) -> tuple[Pool, ...]:
    """One pool per name, holding the nodes labelled ``pool=<name>``."""
    return tuple(Pool(name, LabelSelector({"pool": name}), **flags) for name in names)


def tasks(
    group_uid: str,
    count: int,
    cpu: int = 1,
    gpus: int = 0,
    gpu_milli: int = 0,
    role: str = "",
    on: list[str] | None = None,
    start: int = 0,
    **kwargs: object,
) -> list[Task]:
    """``count`` tasks; with ``on`` they are bound to those nodes (cycled)."""
    out = []
    for i in range(count):
        requests = {"cpu": cpu * 1000}
        if gpus:
            requests[GPU] = gpus
        bound = on[i % len(on)] if on else None
        out.append(
            Task(
                uid=f"{group_uid}-{role}{start + i}",
                group=group_uid,
                namespace="ns",
                name=f"{group_uid}-{role}{start + i}",
                role=role,
                index=start + i,
                requests=requests,
                gpu_milli=gpu_milli,
                status=TaskStatus.BOUND if bound else TaskStatus.PENDING,
                node=bound,
                **kwargs,  # type: ignore[arg-type]
            )
        )
    return out


def replicas(
    uid: str,
    roles: Sequence[str],
    requests: Mapping[str, int],
    gpu_milli: int = 0,
    namespace: str = "ns",
) -> list[Task]:
    """Pending pods ``<uid>-<i>``, one per role given, sharing one requests object (as a job
    controller's replicas do)."""
    return [
        Task(
            uid=f"{uid}-{i}",
            group=uid,
            namespace=namespace,
            name=f"{uid}-{i}",
            role=role,
            index=i,
            requests=requests,
            gpu_milli=gpu_milli,
        )
        for i, role in enumerate(roles)
    ]


Jobs = tuple[list[PodGroup], list[Task]]


def one_pod_jobs(
    prefix: str, count: int, requests: Mapping[str, int], created: float = 0.0, **kwargs: object
) -> Jobs:
    """``count`` pending one-pod groups ``<prefix><i>`` (plain Deployment-like pods), created
    one second apart from ``created``."""
    groups = [
        PodGroup(
            uid=f"{prefix}{i}",
            namespace="ns",
            name=f"{prefix}{i}",
            created=created + i,
            **kwargs,  # type: ignore[arg-type]
        )
        for i in range(count)
    ]
    return groups, [t for g in groups for t in replicas(g.uid, [""], requests)]


def arrive(snap: Snapshot, jobs: Jobs) -> Snapshot:
    """``snap`` with more groups and their pods."""
    return dataclasses.replace(snap, groups=(*snap.groups, *jobs[0]), tasks=(*snap.tasks, *jobs[1]))


def sessions(
    snap: Snapshot,
    count: int,
    *,
    releasing: bool = True,
    every: float = 1.0,
    config: SessionConfig | None = None,
) -> Iterator[tuple[SessionResult, Snapshot]]:
    """Run ``count`` sessions ``every`` seconds apart, each on the snapshot the previous one's
    decisions lead to (evicted pods terminate for a session with ``releasing``); yields each
    result with the snapshot that follows it."""
    for _ in range(count):
        result = run_session(snap, config)
        snap = advance(snap, result, now=snap.now + every, releasing=releasing)
        yield result, snap


def binds(result: SessionResult) -> list[Bind]:
    return [d for d in result.decisions if isinstance(d, Bind)]


def nominations(result: SessionResult) -> list[Nominate]:
    return [d for d in result.decisions if isinstance(d, Nominate)]


def evictions(result: SessionResult) -> list[Evict]:
    return [d for d in result.decisions if isinstance(d, Evict)]


def bound_groups(result: SessionResult) -> set[str]:
    return {b.group for b in binds(result)}
