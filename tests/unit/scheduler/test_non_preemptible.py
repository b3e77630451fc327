"""Non-preemptible work (``preemptible: false``) runs only on in-quota room: within its queue
chain's deserved share, in its own pool. Preemptible work may borrow."""

from __future__ import annotations

import pytest

from operators.scheduler import run_session
from operators.scheduler.decisions import ReasonCode
from operators.scheduler.snapshot import GroupPhase, Queue, Snapshot

from .builders import bound_groups, elastic, group, node, pools, tasks


def _team(preemptible: bool, want: int) -> Snapshot:
    """dept (capability 4 cpu) splits its share between a and b; b asks for 2 cpu it can
    never get (no node has its label), so a deserves 2 and the other 2 are idle."""
    return Snapshot(
        now=0.0,
        nodes=(node("n0", cpu=8),),
        queues=(
            Queue("dept", capability={"cpu": 4000}),
            Queue("a", parent="dept"),
            Queue("b", parent="dept"),
        ),
        groups=(
            group("j", queue="a", min_member=want, preemptible=preemptible),
            group("stuck", queue="b", min_member=2),
        ),
        tasks=(
            *tasks("j", want, cpu=1),
            *tasks("stuck", 2, cpu=1, node_selector={"gpu": "h100"}),
        ),
    )


@pytest.mark.parametrize(("want", "placed"), [(3, False), (2, True)])
def test_non_preemptible_gang_runs_only_within_its_deserved_share(want: int, placed: bool) -> None:
    result = run_session(_team(preemptible=False, want=want))
    assert ("j" in bound_groups(result)) == placed
    if not placed:
        why = result.explanations["j"]
        assert why.code == ReasonCode.NON_PREEMPTIBLE_OVER_QUOTA
        assert "'a'" in why.message


def test_control_a_preemptible_gang_borrows_the_idle_share() -> None:
    assert "j" in bound_groups(run_session(_team(preemptible=True, want=3)))


def test_a_parent_over_its_share_stops_a_non_preemptible_child_within_its_own() -> None:
    """a's own share (2 cpu) has room for j, but dept deserves 4 cpu and its other child a2
    already borrows 3 (not reclaimable): the parent's share decides."""
    snap = Snapshot(
        now=0.0,
        nodes=(node("n0", cpu=8),),
        queues=(
            Queue("dept", weight=1),
            Queue("a", parent="dept"),
            Queue("a2", parent="dept", reclaimable=False),
            Queue("other", weight=1),
        ),
        groups=(
            group("x", queue="a2", phase=GroupPhase.RUNNING),
            group("j", queue="a", min_member=2, preemptible=False),
            group("rival", queue="other", min_member=5),
        ),
        tasks=(
            *tasks("x", 3, cpu=1, on=["n0"]),
            *tasks("j", 2, cpu=1),
            *tasks("rival", 5, cpu=1, node_selector={"gpu": "h100"}),
        ),
    )
    result = run_session(snap)
    assert (result.queues["dept"].deserved["cpu"], result.queues["a"].deserved["cpu"]) == (
        4000,
        2000,
    )
    assert result.explanations["j"].code == ReasonCode.NON_PREEMPTIBLE_OVER_QUOTA
    assert "'dept'" in result.explanations["j"].message


def test_non_preemptible_work_does_not_borrow_another_pool() -> None:
    snap = Snapshot(
        now=0.0,
        nodes=(node("a0", cpu=1, labels={"pool": "a"}), node("b0", cpu=8, labels={"pool": "b"})),
        pools=pools("a", "b"),
        groups=(
            group("home", pool="a", phase=GroupPhase.RUNNING),
            group("np", pool="a", preemptible=False),
            group("p", pool="a"),
        ),
        tasks=(*tasks("home", 1, cpu=1, on=["a0"]), *tasks("np", 1), *tasks("p", 1)),
    )
    result = run_session(snap)
    assert bound_groups(result) == {"p"}  # the preemptible one borrows pool b


def test_a_non_preemptible_elastic_group_grows_only_up_to_its_share() -> None:
    snap = _team(preemptible=False, want=1)
    snap = Snapshot(
        now=0.0,
        nodes=snap.nodes,
        queues=snap.queues,
        groups=(elastic("e", 1, 4, queue="a", preemptible=False), snap.groups[1]),
        tasks=(
            *tasks("e", 1, cpu=1, role="w", on=["n0"]),
            *tasks("e", 3, cpu=1, role="w", start=1),
            *snap.tasks[1:],
        ),
    )
    result = run_session(snap)
    assert sum(1 for b in result.decisions if getattr(b, "group", "") == "e") == 1  # 2 cpu of 2
