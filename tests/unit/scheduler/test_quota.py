"""quota plugin and queue tree: water-filling, capability, overcommit, reclaim, guarantees."""

from __future__ import annotations

import numpy as np

from operators.scheduler import run_session
from operators.scheduler.decisions import ReasonCode
from operators.scheduler.queues import water_fill
from operators.scheduler.snapshot import GroupPhase, Queue, Snapshot

from .builders import binds, bound_groups, evictions, group, node, nominations, tasks


def test_water_fill_shares_by_weight_capped_by_request() -> None:
    got = water_fill(
        available=np.array([40.0]),
        caps=np.array([[100.0], [100.0], [5.0]]),
        guarantee=np.zeros((3, 1)),
        weight=np.array([1.0, 3.0, 4.0]),
    )
    # The third child asks for 5 only; the remaining 35 split 1:3.
    assert got[:, 0].tolist() == [8.75, 26.25, 5.0]


def test_water_fill_gives_guarantees_first() -> None:
    got = water_fill(
        available=np.array([10.0]),
        caps=np.array([[100.0], [100.0]]),
        guarantee=np.array([[8.0], [0.0]]),
        weight=np.array([1.0, 1.0]),
    )
    assert got[:, 0].tolist() == [9.0, 1.0]


def _cluster(n: int = 4, cpu: int = 8) -> tuple:  # type: ignore[type-arg]
    return tuple(node(f"n{i}", cpu=cpu) for i in range(n))


def test_deserved_and_allocated_in_status() -> None:
    snap = Snapshot(
        now=0,
        nodes=_cluster(),
        queues=(Queue("a", weight=1), Queue("b", weight=3)),
        groups=(group("ga", queue="a"), group("gb", queue="b")),
        tasks=(*tasks("ga", 1, cpu=32), *tasks("gb", 1, cpu=32)),
    )
    result = run_session(snap)
    assert result.queues["a"].deserved["cpu"] == 8000
    assert result.queues["b"].deserved["cpu"] == 24000
    assert result.queues["root"].deserved["cpu"] == 32000


def test_capability_blocks_admission_with_a_readable_reason() -> None:
    snap = Snapshot(
        now=0,
        nodes=_cluster(),
        queues=(Queue("a", capability={"cpu": 4000}),),
        groups=(group("g", queue="a", min_member=2, phase=GroupPhase.PENDING),),
        tasks=tuple(tasks("g", 2, cpu=4)),
    )
    result = run_session(snap)
    assert not binds(result)
    explanation = result.explanations["g"]
    assert explanation.code == ReasonCode.QUOTA_EXCEEDED
    assert "capability" in explanation.message


def test_parent_capability_caps_children() -> None:
    snap = Snapshot(
        now=0,
        nodes=_cluster(),
        queues=(Queue("dept", capability={"cpu": 8000}), Queue("team", parent="dept")),
        groups=(group("g1", queue="team"), group("g2", queue="team")),
        tasks=(*tasks("g1", 1, cpu=8), *tasks("g2", 1, cpu=8)),
    )
    result = run_session(snap)
    assert len(binds(result)) == 1
    assert result.queues["dept"].allocated["cpu"] == 8000


def test_overcommit_queue_admits_marked_jobs_beyond_capability() -> None:
    queues = (Queue("a", capability={"cpu": 8000}, overcommit=True),)
    groups = (
        group("plain", queue="a", created=0.0),
        group("marked", queue="a", overcommit=True, created=1.0),
        group("plain2", queue="a", created=2.0),
    )
    snap = Snapshot(
        now=0,
        nodes=_cluster(),
        queues=queues,
        groups=groups,
        tasks=(*tasks("plain", 1, cpu=8), *tasks("marked", 1, cpu=8), *tasks("plain2", 1, cpu=8)),
    )
    placed = {b.group for b in binds(run_session(snap))}
    assert placed == {"plain", "marked"}


def test_reclaim_takes_back_from_the_queue_most_over_its_share() -> None:
    queues = (Queue("a"), Queue("b"), Queue("c"))
    running = [group(f"a{i}", queue="a", phase=GroupPhase.RUNNING) for i in range(3)]
    running.append(group("b0", queue="b", phase=GroupPhase.RUNNING))
    bound = [t for i in range(3) for t in tasks(f"a{i}", 1, cpu=8, on=[f"n{i}"])]
    bound += tasks("b0", 1, cpu=8, on=["n3"])
    snap = Snapshot(
        now=0,
        nodes=_cluster(),
        queues=queues,
        groups=(*running, group("c0", queue="c")),
        tasks=(*bound, *tasks("c0", 1, cpu=8)),
    )
    result = run_session(snap)
    [evicted] = evictions(result)
    assert evicted.group.startswith("a")  # a holds 3 nodes, deserves ~1.33
    assert len(nominations(result)) == 1


def test_reclaim_never_takes_a_queue_below_its_guarantee() -> None:
    queues = (Queue("a", guarantee={"cpu": 32000}), Queue("b"))
    running = [group(f"a{i}", queue="a", phase=GroupPhase.RUNNING) for i in range(4)]
    bound = [t for i in range(4) for t in tasks(f"a{i}", 1, cpu=8, on=[f"n{i}"])]
    snap = Snapshot(
        now=0,
        nodes=_cluster(),
        queues=queues,
        groups=(*running, group("b0", queue="b")),
        tasks=(*bound, *tasks("b0", 1, cpu=8)),
    )
    result = run_session(snap)
    assert not evictions(result)
    assert result.explanations["b0"].code in (ReasonCode.UNSCHEDULABLE, ReasonCode.QUOTA_EXCEEDED)


def test_non_reclaimable_queue_keeps_what_it_borrowed() -> None:
    queues = (Queue("a", reclaimable=False), Queue("b"))
    running = [group(f"a{i}", queue="a", phase=GroupPhase.RUNNING) for i in range(4)]
    bound = [t for i in range(4) for t in tasks(f"a{i}", 1, cpu=8, on=[f"n{i}"])]
    snap = Snapshot(
        now=0,
        nodes=_cluster(),
        queues=queues,
        groups=(*running, group("b0", queue="b")),
        tasks=(*bound, *tasks("b0", 1, cpu=8)),
    )
    assert not evictions(run_session(snap))


def test_closed_queue_admits_nothing() -> None:
    from operators.scheduler.snapshot import QueueState

    snap = Snapshot(
        now=0,
        nodes=_cluster(),
        queues=(Queue("a", state=QueueState.CLOSED),),
        groups=(group("g", queue="a", phase=GroupPhase.PENDING),),
        tasks=tuple(tasks("g", 1)),
    )
    result = run_session(snap)
    assert result.explanations["g"].code == ReasonCode.QUEUE_CLOSED


def test_missing_queue_is_explained() -> None:
    snap = Snapshot(
        now=0,
        nodes=_cluster(),
        groups=(group("g", queue="nope", phase=GroupPhase.PENDING),),
        tasks=tuple(tasks("g", 1)),
    )
    assert run_session(snap).explanations["g"].code == ReasonCode.QUEUE_MISSING


def test_queues_share_the_cluster_by_deserved_first() -> None:
    # Queue a has many small jobs; b has as many: each ends up with half the cluster.
    queues = (Queue("a"), Queue("b"))
    groups = [group(f"{q}{i}", queue=q) for q in "ab" for i in range(8)]
    all_tasks = [t for g in groups for t in tasks(g.uid, 1, cpu=4)]
    snap = Snapshot(
        now=0, nodes=_cluster(), queues=queues, groups=tuple(groups), tasks=tuple(all_tasks)
    )
    result = run_session(snap)
    per_queue = {"a": 0, "b": 0}
    for b in binds(result):
        per_queue[b.group[0]] += 1
    assert per_queue == {"a": 4, "b": 4}


def test_a_queue_cut_off_from_root_admits_nothing_new_and_says_why() -> None:
    queues = (
        Queue("dept", capability={"cpu": 8000}),
        Queue("team", parent="dept"),  # the control: reaches root through dept
        Queue("typo", parent="dpet"),  # would hang off root, outside dept's capability
        Queue("under-typo", parent="typo"),
        Queue("a", parent="b"),
        Queue("b", parent="a"),
        Queue("closed-by-operator", closed_reason="ParentNotFound: parent 'x' is gone"),
    )
    names = ("team", "typo", "under-typo", "a", "closed-by-operator")
    snap = Snapshot(
        now=0,
        nodes=_cluster(),
        queues=queues,
        groups=tuple(group(q, queue=q, phase=GroupPhase.PENDING) for q in names),
        tasks=tuple(t for q in names for t in tasks(q, 1, cpu=1)),
    )
    result = run_session(snap)
    assert bound_groups(result) == {"team"}
    why = {q: result.explanations[q] for q in names if q != "team"}
    assert {e.code for e in why.values()} == {ReasonCode.QUEUE_CLOSED}
    assert "parent queue 'dpet' does not exist" in why["typo"].message
    assert "ancestor 'typo''s parent queue 'dpet' does not exist" in why["under-typo"].message
    assert "cycle: a -> b -> a" in why["a"].message
    assert "ParentNotFound: parent 'x' is gone" in why["closed-by-operator"].message


def test_waiting_groups_are_listed_in_job_order() -> None:
    snap = Snapshot(
        now=0,
        nodes=(node("n0", cpu=4),),
        queues=(Queue("a"),),
        groups=(
            group("fits", queue="a", priority=9),
            group("low", queue="a", created=1.0),
            group("high", queue="a", priority=5, created=2.0),
            group("later", queue="a", created=3.0),
        ),
        tasks=(
            *tasks("fits", 1, cpu=4),
            *tasks("low", 1, cpu=4),
            *tasks("high", 1, cpu=4),
            *tasks("later", 1, cpu=4),
        ),
    )
    result = run_session(snap)
    assert bound_groups(result) == {"fits"}
    # Priority first, then creation; the group placed (first in line) no longer waits.
    assert result.queues["a"].waiting == (("ns", "high"), ("ns", "low"), ("ns", "later"))


def test_a_parents_capability_held_by_an_over_share_sibling_does_not_block_admission() -> None:
    """lab (capability 24 cores) -> team-a, team-b. team-a holds all 24 cores, far above its
    share; team-b's job is within team-b's share but would take lab past its capability while
    team-a holds it. Admission must count what reclaim takes back from team-a, or team-b's job
    is never admitted and reclaim never starts (found by the e2e queue-reclaim story)."""
    queues = (
        Queue("lab", capability={"cpu": 24000}),
        Queue("team-a", parent="lab", guarantee={"cpu": 8000}),
        Queue("team-b", parent="lab", guarantee={"cpu": 8000}),
    )
    running = [group(f"a{i}", queue="team-a", phase=GroupPhase.RUNNING) for i in range(3)]
    bound = [t for i in range(3) for t in tasks(f"a{i}", 1, cpu=8, on=[f"n{i}"])]
    snap = Snapshot(
        now=0,
        nodes=_cluster(),
        queues=queues,
        groups=(*running, group("b0", queue="team-b", phase=GroupPhase.PENDING)),
        tasks=(*bound, *tasks("b0", 1, cpu=8)),
    )
    result = run_session(snap)
    assert result.explanations["b0"].code != ReasonCode.QUOTA_EXCEEDED, result.explanations["b0"]
    [evicted] = evictions(result)
    assert evicted.group.startswith("a")
    assert [n.group for n in nominations(result)] == ["b0"]


def test_a_running_group_whose_queue_is_gone_says_so_for_its_waiting_pods() -> None:
    # Its gang minimum runs (admitted while the queue existed); the pod it waits for is held
    # back by the missing queue, not by a lack of idle room.
    snap = Snapshot(
        now=0,
        nodes=_cluster(),
        groups=(group("g", queue="gone", min_member=1, phase=GroupPhase.RUNNING),),
        tasks=(*tasks("g", 1, on=["n0"]), *tasks("g", 1, start=1)),
    )
    why = run_session(snap).explanations["g"]
    assert why.code == ReasonCode.QUEUE_MISSING
    assert "queue 'gone' does not exist" in why.message
    assert "1 more pod(s)" in why.message
