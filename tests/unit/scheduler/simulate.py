"""Carry a session's decisions forward into the next snapshot, as the runtime would.

Pods of evicted groups are deleted and re-created pending (as a job controller would); binds
become bound tasks; nominations and delayed-preemption marks are written back.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from typing import TYPE_CHECKING

from operators.scheduler.decisions import (
    Bind,
    Evict,
    EvictReason,
    MarkPrivileged,
    MarkWillEvict,
    Nominate,
    RevertDelayedPreemption,
    SetGroupPhase,
)
from operators.scheduler.snapshot import (
    GPU,
    GPU_MILLI_PER_CARD,
    PreemptionMark,
    PreemptionRole,
    Snapshot,
    TaskStatus,
)

if TYPE_CHECKING:
    from operators.scheduler.session import SessionResult
    from operators.scheduler.snapshot import PodGroup, Task


def advance(
    snap: Snapshot, result: SessionResult, now: float, *, releasing: bool = False
) -> Snapshot:
    """With ``releasing``, evicted pods terminate for one session (Releasing, still holding
    their room) before they come back Pending; otherwise they come back Pending at once."""
    tasks = {t.uid: t for t in snap.tasks}
    groups = {g.uid: g for g in snap.groups}
    if releasing:
        for t in snap.tasks:
            if t.status == TaskStatus.RELEASING:
                tasks[t.uid] = dataclasses.replace(
                    t, status=TaskStatus.PENDING, node=None, gpu_ids=(), nominated_node=None
                )
    evicted = {d.group for d in result.decisions if isinstance(d, Evict)}
    for d in result.decisions:
        if isinstance(d, Bind):
            tasks[d.task] = dataclasses.replace(
                tasks[d.task], status=TaskStatus.BOUND, node=d.node, gpu_ids=d.gpu_ids
            )
            if d.group not in evicted:  # placed again: the runtime ends its move (placed_again)
                groups[d.group] = dataclasses.replace(groups[d.group], consolidated_to=())
        elif isinstance(d, Nominate):
            tasks[d.task] = dataclasses.replace(tasks[d.task], nominated_node=d.node)
        elif isinstance(d, Evict):
            if d.reason is EvictReason.CONSOLIDATED:  # the runtime's `Consolidated` condition
                groups[d.group] = dataclasses.replace(
                    groups[d.group], consolidated_at=now, consolidated_to=d.moved_to
                )
            for uid in d.tasks:
                if releasing:
                    tasks[uid] = dataclasses.replace(tasks[uid], status=TaskStatus.RELEASING)
                else:
                    tasks[uid] = dataclasses.replace(
                        tasks[uid], status=TaskStatus.PENDING, node=None, gpu_ids=()
                    )
        elif isinstance(d, SetGroupPhase):
            groups[d.group] = dataclasses.replace(groups[d.group], phase=d.phase)
        elif isinstance(d, MarkPrivileged):
            mark = PreemptionMark(PreemptionRole.PRIVILEGED, d.victims, d.deadline)
            groups[d.preemptor] = dataclasses.replace(groups[d.preemptor], preemption=mark)
        elif isinstance(d, MarkWillEvict):
            mark = PreemptionMark(PreemptionRole.WILL_EVICT, (d.preemptor,), d.deadline)
            groups[d.victim] = dataclasses.replace(groups[d.victim], preemption=mark)
        elif isinstance(d, RevertDelayedPreemption):
            for uid in d.groups:
                if uid in groups:
                    groups[uid] = dataclasses.replace(groups[uid], preemption=None)
    return dataclasses.replace(
        snap, now=now, groups=tuple(groups.values()), tasks=tuple(tasks.values())
    )


def holdings(snap: Snapshot, result: SessionResult) -> dict[str, list[Task]]:
    """Node -> tasks holding room there once the decisions are carried out (nominations too:
    their room is reserved)."""
    evicted = {uid for d in result.decisions if isinstance(d, Evict) for uid in d.tasks}
    by_uid = {t.uid: t for t in snap.tasks}
    out: dict[str, list[Task]] = defaultdict(list)
    for t in snap.tasks:
        if t.status in (TaskStatus.BOUND, TaskStatus.RELEASING) and t.node and t.uid not in evicted:
            out[t.node].append(t)
    for d in result.decisions:
        if isinstance(d, Bind | Nominate):
            out[d.node].append(dataclasses.replace(by_uid[d.task], node=d.node, gpu_ids=d.gpu_ids))
    return out


def assert_no_node_overcommitted(snap: Snapshot, result: SessionResult) -> None:
    nodes = {n.name: n for n in snap.nodes}
    for name, held in holdings(snap, result).items():
        node = nodes[name]
        for resource in ("cpu", "memory"):
            used = sum(t.requests.get(resource, 0) for t in held)
            assert used <= node.allocatable.get(resource, 0), (name, resource, used)
        assert len(held) <= node.allocatable.get("pods", 10**9), name
        cards: dict[int, int] = defaultdict(int)
        for t in held:
            share = t.gpu_milli if not t.requests.get(GPU) else GPU_MILLI_PER_CARD
            want = t.requests.get(GPU, 0) or (1 if t.gpu_milli else 0)
            assert len(t.gpu_ids) == want, (t.uid, t.gpu_ids)
            assert len(set(t.gpu_ids)) == len(t.gpu_ids)
            for card in t.gpu_ids:
                assert 0 <= card < node.gpu_count
                cards[card] += share
        assert all(v <= GPU_MILLI_PER_CARD for v in cards.values()), (name, dict(cards))


def assert_gangs_all_or_nothing(snap: Snapshot, result: SessionResult) -> None:
    touched = {d.group for d in result.decisions if isinstance(d, Bind | Nominate)}
    held_by_group: dict[str, list[Task]] = defaultdict(list)
    for held in holdings(snap, result).values():
        for t in held:
            held_by_group[t.group].append(t)
    groups = {g.uid: g for g in snap.groups}
    for uid in touched:
        g: PodGroup = groups[uid]
        held = held_by_group[uid]
        assert len(held) >= g.min_member, (uid, len(held), g.min_member)
        mins = dict(g.min_task_member)
        for spec in g.replica_specs:
            mins[spec.name] = max(mins.get(spec.name, 0), spec.min_replicas)
        for role, need in mins.items():
            assert sum(1 for t in held if t.role == role) >= need, (uid, role)
