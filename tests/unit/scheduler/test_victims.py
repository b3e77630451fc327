"""Which running work may go for whom, and in what order: relevance, job priority before
job-internal order, per-job disruption budgets, equal priority, overcommit, disablePreemption."""

from __future__ import annotations

import dataclasses

import pytest

from operators.scheduler import run_session
from operators.scheduler.snapshot import (
    GroupPhase,
    Queue,
    Snapshot,
    TaskStatus,
)

from .builders import elastic, evictions, group, node, nominations, pools, tasks


def _evicted(result: object) -> list[str]:
    return [uid for e in evictions(result) for uid in e.tasks]  # type: ignore[arg-type]


def test_victims_that_cannot_help_do_not_use_up_the_victim_bound() -> None:
    snap = Snapshot(
        now=0.0,
        nodes=(node("cpu0", cpu=100), node("g0", cpu=8, gpus=1)),
        groups=(
            elastic("elastic", 1, 100),
            group("gpujob", phase=GroupPhase.RUNNING),
            group("p", priority=100),
        ),
        tasks=(
            *tasks("elastic", 70, cpu=1, role="w", on=["cpu0"]),
            *tasks("gpujob", 1, cpu=1, gpus=1, on=["g0"]),
            *tasks("p", 1, cpu=1, gpus=1),
        ),
    )
    result = run_session(snap)
    assert [e.group for e in evictions(result)] == ["gpujob"]
    assert {n.group for n in nominations(result)} == {"p"}


def test_surplus_of_a_lower_priority_job_goes_before_a_higher_priority_jobs_surplus() -> None:
    snap = Snapshot(
        now=0.0,
        nodes=(node("n0", cpu=8),),
        groups=(
            elastic("important", 1, 4, priority=50),
            elastic("cheap", 1, 4, replica_priority=1, priority=1),
            group("p", priority=100),
        ),
        tasks=(
            *tasks("important", 4, cpu=1, role="w", on=["n0"]),
            *tasks("cheap", 4, cpu=1, role="w", on=["n0"]),
            *tasks("p", 1, cpu=1),
        ),
    )
    result = run_session(snap)
    assert [e.group for e in evictions(result)] == ["cheap"]
    assert len(_evicted(result)) == 1


def test_borrowed_surplus_goes_before_own_surplus_whatever_the_replica_priority() -> None:
    snap = Snapshot(
        now=0.0,
        nodes=(node("n0", cpu=8, labels={"pool": "a"}),),
        pools=pools("a", "b"),
        groups=(
            elastic("home", 1, 4, pool="a"),
            elastic("guest", 1, 4, replica_priority=5, pool="b"),
            group("p", pool="a", priority=100),
        ),
        tasks=(
            *tasks("home", 4, cpu=1, role="w", on=["n0"]),
            *tasks("guest", 4, cpu=1, role="w", on=["n0"]),
            *tasks("p", 1, cpu=1),
        ),
    )
    result = run_session(snap)
    assert [e.group for e in evictions(result)] == ["guest"]


def _budgeted(releasing: int = 0) -> Snapshot:
    running = tasks("j", 4, cpu=1, on=["n0"])
    running = [
        dataclasses.replace(t, status=TaskStatus.RELEASING) if i < releasing else t
        for i, t in enumerate(running)
    ]
    return Snapshot(
        now=0.0,
        nodes=(node("n0", cpu=4),),
        groups=(
            group("j", min_member=1, phase=GroupPhase.RUNNING, max_unavailable=1),
            group("p", priority=100),
        ),
        tasks=(*running, *tasks("p", 1, cpu=3)),
    )


def test_max_unavailable_bounds_what_one_job_loses_per_session() -> None:
    result = run_session(_budgeted())
    assert len(_evicted(result)) <= 1
    assert not evictions(result)  # one pod would not make room: nothing goes in vain


def test_max_unavailable_counts_pods_already_terminating() -> None:
    snap = _budgeted(releasing=1)
    snap = dataclasses.replace(
        snap,
        groups=(snap.groups[0], group("p", priority=100)),
        tasks=(*snap.tasks[:4], *tasks("p", 1, cpu=1)),
    )
    assert not evictions(run_session(snap))


def test_control_max_unavailable_allows_one_pod() -> None:
    snap = _budgeted()
    snap = dataclasses.replace(snap, tasks=(*snap.tasks[:4], *tasks("p", 1, cpu=1)))
    result = run_session(snap)
    assert len(_evicted(result)) == 1


@pytest.mark.parametrize(("is_elastic", "expected"), [(False, 0), (True, 1)])
def test_pods_above_min_member_go_only_to_strictly_higher_priority_unless_elastic(
    is_elastic: bool, expected: int
) -> None:
    snap = Snapshot(
        now=0.0,
        nodes=(node("n0", cpu=2),),
        groups=(
            elastic("j", 1, 2) if is_elastic else group("j", phase=GroupPhase.RUNNING),
            group("p"),
        ),
        tasks=(*tasks("j", 2, cpu=1, role="w", on=["n0"]), *tasks("p", 1, cpu=1)),
    )
    assert len(_evicted(run_session(snap))) == expected


def test_overcommitted_job_above_capability_gives_way_to_a_regular_job_of_its_queue() -> None:
    snap = Snapshot(
        now=0.0,
        nodes=(node("n0", cpu=8),),
        queues=(Queue("q", capability={"cpu": 4000}, overcommit=True),),
        groups=(
            group("over", queue="q", min_member=6, phase=GroupPhase.RUNNING, overcommit=True),
            group("regular", queue="q", min_member=2),
        ),
        tasks=(*tasks("over", 6, cpu=1, on=["n0"]), *tasks("regular", 2, cpu=1)),
    )
    result = run_session(snap)
    assert {e.group for e in evictions(result)} == {"over"}
    assert {n.group for n in nominations(result)} == {"regular"}


def _pool_with(disable: bool, same_queue: bool) -> Snapshot:
    victim_queue = "qa" if same_queue else "qb"
    return Snapshot(
        now=0.0,
        nodes=(node("a0", cpu=8, labels={"pool": "a"}),),
        pools=pools("a", disable_preemption=disable),
        queues=(Queue("qa"), Queue("qb")),
        groups=(
            group("v", queue=victim_queue, pool="a", min_member=8, phase=GroupPhase.RUNNING),
            group("p", queue="qa", pool="a", min_member=4, priority=100),
        ),
        tasks=(*tasks("v", 8, cpu=1, on=["a0"]), *tasks("p", 4, cpu=1)),
    )


@pytest.mark.parametrize("same_queue", [True, False], ids=["preempt", "reclaim"])
def test_disable_preemption_stops_preempt_and_reclaim_in_the_pool(same_queue: bool) -> None:
    assert not evictions(run_session(_pool_with(disable=True, same_queue=same_queue)))
    # Control: the same cluster without the flag evicts.
    assert {e.group for e in evictions(run_session(_pool_with(False, same_queue)))} == {"v"}
