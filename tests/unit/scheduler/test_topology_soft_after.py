"""networkTopology softAfterSeconds: a hard request waits for one domain for a bounded time
(counted from the group's creation, on the session's clock), then is placed as soft."""

from __future__ import annotations

from operators.scheduler import run_session
from operators.scheduler.decisions import ReasonCode
from operators.scheduler.snapshot import (
    GroupPhase,
    NetworkTopology,
    Snapshot,
    Topology,
    TopologyLevel,
    TopologyMode,
)

from .builders import binds, group, node, tasks

TOPO = Topology(
    name="t",
    levels=(
        TopologyLevel("spine", "spine"),
        TopologyLevel("tor", "tor"),
        TopologyLevel("hostname", "kubernetes.io/hostname"),
    ),
)
TOR_FOR_600 = NetworkTopology(TopologyMode.HARD, "tor", soft_after=600.0)


def _cluster() -> tuple:  # type: ignore[type-arg]
    """2 ToRs x 3 nodes x 4 GPUs: a ToR holds 12 GPUs."""
    return tuple(
        node(
            f"t{t}n{i}",
            gpus=4,
            cpu=64,
            labels={"spine": "s0", "tor": f"tor{t}", "kubernetes.io/hostname": f"t{t}n{i}"},
        )
        for t in range(2)
        for i in range(3)
    )


def _gang_of_16(now: float, request: NetworkTopology) -> Snapshot:
    """A 16-GPU gang created at 0: more than any ToR holds, so it fits only spread."""
    return Snapshot(
        now=now,
        nodes=_cluster(),
        groups=(group("g", min_member=4, network_topology=request, created=0.0),),
        tasks=tuple(tasks("g", 4, gpus=4)),
        topology=TOPO,
    )


def test_a_hard_request_waits_until_soft_after_then_spreads() -> None:
    waiting = run_session(_gang_of_16(599.0, TOR_FOR_600))
    assert not binds(waiting)
    why = waiting.explanations["g"]
    assert why.code == ReasonCode.TOPOLOGY
    assert "needs 16 GPUs in one tor" in why.message
    assert "largest free tor has 12 GPUs; may spread over domains in 1 s" in why.message

    placed = binds(run_session(_gang_of_16(600.0, TOR_FOR_600)))
    assert len(placed) == 4
    assert {b.node[:2] for b in placed} == {"t0", "t1"}


def test_without_soft_after_a_hard_request_waits_for_ever() -> None:
    hard = NetworkTopology(TopologyMode.HARD, "tor")
    result = run_session(_gang_of_16(10**9, hard))
    assert not binds(result)
    assert "may spread" not in result.explanations["g"].message


def test_once_soft_the_gang_still_takes_the_finest_domain_that_holds_it() -> None:
    # Past its wait, an 8-GPU gang that one ToR holds goes there, not wherever binpack says:
    # tor0's first node is half full, so binpack alone would start there and spread.
    snap = Snapshot(
        now=1_000.0,
        nodes=_cluster(),
        groups=(
            group("running", phase=GroupPhase.RUNNING),
            group("g", min_member=2, network_topology=TOR_FOR_600, created=0.0),
        ),
        tasks=(*tasks("running", 1, gpus=2, on=["t0n0"]), *tasks("g", 2, gpus=4)),
        topology=TOPO,
    )
    placed = [b for b in binds(run_session(snap)) if b.group == "g"]
    assert len(placed) == 2
    assert len({b.node[:2] for b in placed}) == 1


def test_a_young_gang_s_failure_is_not_reused_for_an_old_gang_with_the_same_request() -> None:
    # Same shape, same written request: the young gang (tried first: higher priority) is still
    # hard and fails; the old one is past its wait and spreads. A failure memo keyed by the
    # written request, not the one in force, would skip the old gang.
    snap = Snapshot(
        now=700.0,
        nodes=_cluster(),
        groups=(
            group("young", min_member=4, network_topology=TOR_FOR_600, created=500.0, priority=9),
            group("old", min_member=4, network_topology=TOR_FOR_600, created=0.0),
        ),
        tasks=(*tasks("young", 4, gpus=4), *tasks("old", 4, gpus=4)),
        topology=TOPO,
    )
    result = run_session(snap)
    assert {b.group for b in binds(result)} == {"old"}
    assert "may spread over domains in 400 s" in result.explanations["young"].message


def test_soft_after_means_nothing_to_a_soft_request() -> None:
    soft = NetworkTopology(TopologyMode.SOFT, "tor", soft_after=600.0)
    assert soft.at(created=0.0, now=1.0) == NetworkTopology(TopologyMode.SOFT, "tor")
    assert soft.soft_at(0.0) is None
    assert len(binds(run_session(_gang_of_16(1.0, soft)))) == 4
