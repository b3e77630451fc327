"""Tiny builders for scheduler snapshots, so tests read like the scenario they describe."""

from __future__ import annotations

from typing import TYPE_CHECKING

from operators.scheduler.decisions import Bind, Evict, Nominate
from operators.scheduler.snapshot import (
    GPU,
    GpuTopology,
    GroupPhase,
    Node,
    PodGroup,
    Task,
    TaskStatus,
)

if TYPE_CHECKING:
    from collections.abc import Mapping

    from operators.scheduler.session import SessionResult

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


def binds(result: SessionResult) -> list[Bind]:
    return [d for d in result.decisions if isinstance(d, Bind)]


def nominations(result: SessionResult) -> list[Nominate]:
    return [d for d in result.decisions if isinstance(d, Nominate)]


def evictions(result: SessionResult) -> list[Evict]:
    return [d for d in result.decisions if isinstance(d, Evict)]


def bound_groups(result: SessionResult) -> set[str]:
    return {b.group for b in binds(result)}
