"""gang plugin: minimums, per-task minimums, elastic growth and shrink-first."""

from __future__ import annotations

from operators.scheduler import run_session
from operators.scheduler.decisions import EvictReason, ReasonCode
from operators.scheduler.snapshot import GroupPhase, ReplicaSpec, Snapshot

from .builders import binds, evictions, group, node, nominations, tasks


def test_gang_waits_until_enough_pods_exist() -> None:
    snap = Snapshot(
        now=0,
        nodes=(node("n0", cpu=64),),
        groups=(group("g", min_member=4),),
        tasks=tuple(tasks("g", 3)),
    )
    result = run_session(snap)
    assert not binds(result)
    assert result.explanations["g"].code == ReasonCode.GANG_INCOMPLETE
    assert "3 pod(s) exist, the gang needs 4" in result.explanations["g"].message


def test_per_task_minimum_is_part_of_the_gang() -> None:
    # minMember 2 but the "ps" task needs 1 and "worker" 2: 3 pods must go together.
    snap = Snapshot(
        now=0,
        nodes=(node("n0", cpu=4),),
        groups=(group("g", min_member=2, min_task_member={"ps": 1, "worker": 2}),),
        tasks=(*tasks("g", 1, role="ps"), *tasks("g", 3, role="worker")),
    )
    result = run_session(snap)
    roles = sorted(b.task.split("-")[1].rstrip("0123456789") for b in binds(result))
    assert roles.count("ps") == 1
    assert roles.count("worker") >= 2


def test_elastic_group_gets_min_as_gang_then_grows_by_replica_priority() -> None:
    specs = (
        ReplicaSpec("chief", 1, 1, priority=10),
        ReplicaSpec("worker", 1, 4, priority=5),
        ReplicaSpec("eval", 0, 2, priority=1),
    )
    snap = Snapshot(
        now=0,
        nodes=(node("n0", cpu=4), node("n1", cpu=1)),
        groups=(group("e", min_member=2, replica_specs=specs),),
        tasks=(
            *tasks("e", 1, role="chief"),
            *tasks("e", 4, role="worker"),
            *tasks("e", 2, role="eval"),
        ),
    )
    result = run_session(snap)
    placed = [b.task for b in binds(result)]
    assert len(placed) == 5  # 5 cpus: chief + 4 workers; eval has the lowest priority
    assert not any("eval" in p for p in placed)
    assert result.explanations["e"].code == ReasonCode.GROWING


def test_elastic_surplus_shrinks_before_any_whole_job_is_evicted() -> None:
    specs = (ReplicaSpec("worker", 2, 6),)
    elastic = group("e", min_member=2, replica_specs=specs, phase=GroupPhase.RUNNING)
    whole = group("w", phase=GroupPhase.RUNNING)
    snap = Snapshot(
        now=0,
        nodes=(node("n0", cpu=8),),
        groups=(elastic, whole, group("p", min_member=2, priority=100)),
        tasks=(
            *tasks("e", 6, role="worker", on=["n0"]),
            *tasks("w", 1, cpu=2, on=["n0"]),
            *tasks("p", 2),
        ),
    )
    result = run_session(snap)
    [evicted] = evictions(result)
    assert evicted.group == "e"
    assert len(evicted.tasks) == 2  # just the surplus the preemptor needs...
    assert evicted.reason == EvictReason.PREEMPTED
    assert set(evicted.tasks) <= {f"e-worker{i}" for i in range(2, 6)}  # ...never the min
    assert len(nominations(result)) == 2


def test_running_gang_is_moved_to_running_phase() -> None:
    snap = Snapshot(
        now=0,
        nodes=(node("n0"),),
        groups=(group("g", min_member=2),),
        tasks=tuple(tasks("g", 2)),
    )
    result = run_session(snap)
    from operators.scheduler.decisions import SetGroupPhase

    assert SetGroupPhase("g", GroupPhase.RUNNING, "GangBound") in result.decisions


def test_min_member_zero_means_no_gang_each_pod_is_placed_on_its_own() -> None:
    snap = Snapshot(
        now=0,
        nodes=(node("n0", cpu=8),),
        groups=(group("g", min_member=0, phase=GroupPhase.PENDING),),
        tasks=tuple(tasks("g", 3, cpu=4)),
    )
    result = run_session(snap)
    assert len(binds(result)) == 2  # not all-or-nothing: the two that fit go
    assert result.explanations["g"].code == ReasonCode.GROWING
