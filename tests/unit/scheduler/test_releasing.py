"""Pods on their way out: guarantees at every level of a deep tree, and delayed preemption,
while evicted pods terminate (a session each, as the simulator carries them)."""

from __future__ import annotations

from operators.scheduler.decisions import Bind, MarkWillEvict
from operators.scheduler.snapshot import GroupPhase, Queue, Snapshot, TaskStatus

from .builders import arrive, evictions, group, node, one_pod_jobs, sessions, tasks
from .invariants import check_session
from .simulate import assert_no_node_overcommitted


def _kept(snap: Snapshot, prefix: str) -> int:
    return sum(
        t.requests["cpu"] // 1000
        for t in snap.tasks
        if t.group.startswith(prefix) and t.status == TaskStatus.BOUND
    )


def test_every_level_of_a_three_level_tree_keeps_its_guarantee_under_repeated_reclaim() -> None:
    """org (guarantee 8) > dept (6) > team (4): team holds the whole 16-cpu cluster; a rival
    top-level queue, weighted to deserve everything else, reclaims one pod at a time over many
    sessions while the evicted pods terminate. The tightest floor is org's: team, the only
    holder under it, never drops below 8 cpu. (The rival deserves a sliver under 8 cpu, as
    org's weight takes its part of the rest: it ends with 7 and team with 9.)"""
    queues = (
        Queue("org", guarantee={"cpu": 8000}),
        Queue("dept", parent="org", guarantee={"cpu": 6000}),
        Queue("team", parent="dept", guarantee={"cpu": 4000}),
        Queue("team2", parent="dept"),
        Queue("dept2", parent="org"),
        Queue("rival", weight=1000),
    )
    holders = [group(f"t{i}", queue="team", phase=GroupPhase.RUNNING) for i in range(16)]
    start = arrive(
        Snapshot(
            now=0.0,
            nodes=(node("n0", cpu=8), node("n1", cpu=8)),
            queues=queues,
            groups=tuple(holders),
            tasks=tuple(t for i in range(16) for t in tasks(f"t{i}", 1, on=[f"n{i % 2}"])),
        ),
        one_pod_jobs("r", 16, {"cpu": 1000}, 100.0, queue="rival"),
    )
    before = start
    for result, snap in sessions(start, 6):
        assert_no_node_overcommitted(before, result)
        check_session(before, result)  # no level below its guarantee, at any session
        assert _kept(snap, "t") >= 8, _kept(snap, "t")
        before = snap
    assert (_kept(snap, "t"), _kept(snap, "r")) == (9, 7)


def test_a_delayed_victim_terminating_keeps_its_room_for_the_preemptor_only() -> None:
    """v has a 30 s grace period; p (priority 10) marks it, evicts it at the deadline and is
    nominated. While v terminates, t (priority 5, arriving meanwhile) neither takes the room
    nor evicts anyone; p binds once v is gone. One mark, one eviction, whatever t does."""
    start = Snapshot(
        now=0.0,
        nodes=(node("n0", cpu=4),),
        groups=(
            group("v", min_member=4, phase=GroupPhase.RUNNING, preemption_grace=30.0),
            group("p", min_member=4, priority=10),
        ),
        tasks=(*tasks("v", 4, cpu=1, on=["n0"]), *tasks("p", 4, cpu=1)),
    )
    marks = evicted = 0
    third = arrive(start, ([group("t", priority=5)], tasks("t", 1, cpu=1)))
    bound: dict[str, int] = {}
    before = third
    for result, snap in sessions(third, 6, every=20.0):
        check_session(before, result)
        assert_no_node_overcommitted(before, result)
        marks += sum(1 for d in result.decisions if isinstance(d, MarkWillEvict))
        evicted += len(evictions(result))
        for d in result.decisions:
            if isinstance(d, Bind):
                bound[d.group] = bound.get(d.group, 0) + 1
        before = snap
    assert (marks, evicted) == (1, 1)
    assert bound == {"p": 4}, bound
