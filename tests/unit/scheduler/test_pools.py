"""pool plugin: own pool first, borrowing, flags, owner reclaim of borrowed tasks."""

from __future__ import annotations

import dataclasses

from operators.scheduler import run_session
from operators.scheduler.decisions import ReasonCode
from operators.scheduler.nodes import NodeIndex
from operators.scheduler.resources import ResourceSpace
from operators.scheduler.snapshot import (
    GroupPhase,
    LabelSelector,
    Node,
    Pool,
    Queue,
    SelectorOperator,
    SelectorRequirement,
    Snapshot,
    TaskStatus,
    pool_of_node,
)

from .builders import binds, evictions, group, node, nominations, pools, sessions, tasks


def _nodes() -> tuple[Node, ...]:
    return (
        node("x0", labels={"pool": "x"}),
        node("x1", labels={"pool": "x"}),
        node("y0", labels={"pool": "y"}),
        node("y1", labels={"pool": "y"}),
        node("z0", labels={"pool": "z"}),
    )


def _pools(**flags: bool) -> tuple[Pool, ...]:
    return (
        Pool("x", LabelSelector({"pool": "x"}), **flags),
        Pool("y", LabelSelector({"pool": "y"})),
        Pool("z", LabelSelector({"pool": "z"}), disable_sharing=True),
    )


def test_node_in_two_pools_or_none_goes_to_default() -> None:
    pools = (Pool("a", LabelSelector({"k": "1"})), Pool("b", LabelSelector({"j": "1"})))
    assert pool_of_node(node("n", labels={"k": "1"}), pools) == "a"
    assert pool_of_node(node("n", labels={"k": "1", "j": "1"}), pools) == "default"
    assert pool_of_node(node("n"), pools) == "default"


def test_own_pool_first() -> None:
    snap = Snapshot(
        now=0,
        nodes=_nodes(),
        pools=_pools(),
        groups=(group("g", pool="y"),),
        tasks=tuple(tasks("g", 1, cpu=8)),
    )
    [bind] = binds(run_session(snap))
    assert bind.node.startswith("y")


def test_borrow_from_pool_with_most_idle_and_never_from_non_sharing() -> None:
    busy = group("busy", pool="y", phase=GroupPhase.RUNNING)
    snap = Snapshot(
        now=0,
        nodes=_nodes(),
        pools=_pools(),
        groups=(busy, group("g", pool="x", min_member=3)),
        tasks=(*tasks("busy", 1, cpu=4, on=["y0"]), *tasks("g", 3, cpu=8)),
    )
    result = run_session(snap)
    # x has 2 nodes: the 3-pod gang cannot fit at home; y has 1.5 nodes idle, z does not share.
    assert not binds(result)
    snap2 = Snapshot(
        now=0,
        nodes=_nodes(),
        pools=_pools(),
        groups=(group("g", pool="x", min_member=2),),
        tasks=tuple(tasks("g", 2, cpu=8)),
    )
    assert {b.node for b in binds(run_session(snap2))} == {"x0", "x1"}
    full = group("full", pool="x", min_member=2, phase=GroupPhase.RUNNING)
    snap3 = Snapshot(
        now=0,
        nodes=_nodes(),
        pools=_pools(),
        groups=(full, group("g", pool="x", min_member=2)),
        tasks=(*tasks("full", 2, cpu=8, on=["x0", "x1"]), *tasks("g", 2, cpu=8)),
    )
    result3 = run_session(snap3)
    assert {b.node for b in binds(result3)} == {"y0", "y1"}
    assert "borrowing pool 'y'" in result3.explanations["g"].message
    assert result3.pools["y"].shared["cpu"] == 16000


def test_disable_borrowing_keeps_tasks_home() -> None:
    full = group("full", pool="x", min_member=2, phase=GroupPhase.RUNNING)
    snap = Snapshot(
        now=0,
        nodes=_nodes(),
        pools=_pools(disable_borrowing=True),
        groups=(full, group("g", pool="x")),
        tasks=(*tasks("full", 2, cpu=8, on=["x0", "x1"]), *tasks("g", 1, cpu=8)),
    )
    result = run_session(snap)
    assert not binds(result)
    # Said in so many words: otherwise the user looks for idle room it may never use.
    explanation = result.explanations["g"]
    assert explanation.code == ReasonCode.POOL_BORROWING_DISABLED
    assert "pool 'x' disables borrowing" in explanation.message
    # The control: the same pools allowing borrowing place it elsewhere.
    assert binds(run_session(dataclasses.replace(snap, pools=_pools())))


def test_owner_pool_reclaims_borrowed_tasks_first() -> None:
    # Two jobs of pool x run on y's nodes (borrowed); y's own job arrives.
    borrowers = [group(f"b{i}", pool="x", phase=GroupPhase.RUNNING, priority=50) for i in range(2)]
    bound = [*tasks("b0", 1, cpu=8, on=["y0"]), *tasks("b1", 1, cpu=8, on=["y1"])]
    home = group("home", pool="y", phase=GroupPhase.RUNNING)
    snap = Snapshot(
        now=0,
        nodes=_nodes(),
        pools=_pools(),
        groups=(*borrowers, home, group("own", pool="y", priority=0)),
        tasks=(*bound, *tasks("home", 1, cpu=8, on=["x0"]), *tasks("own", 1, cpu=8)),
    )
    result = run_session(snap)
    [evicted] = evictions(result)
    assert evicted.group in {"b0", "b1"}  # borrowed go first, despite their higher priority
    assert [n.group for n in nominations(result)] == ["own"]


def test_pool_status_counts_capacity_used_and_pending() -> None:
    snap = Snapshot(
        now=0,
        nodes=_nodes(),
        pools=_pools(),
        groups=(group("g", pool="x", min_member=3),),
        tasks=tuple(tasks("g", 3, cpu=8)),
    )
    status = run_session(snap).pools
    assert status["x"].nodes == 2
    assert status["x"].capacity["cpu"] == 16000
    assert status["default"].nodes == 0


def test_vectorised_pool_membership_matches_pool_of_node() -> None:
    pools = (
        Pool("a", LabelSelector({"pool": "a"})),
        Pool(
            "b",
            LabelSelector(match_expressions=(SelectorRequirement("gpu", SelectorOperator.EXISTS),)),
        ),
        Pool(
            "c",
            LabelSelector(
                match_expressions=(SelectorRequirement("rack", SelectorOperator.GT, ("3",)),)
            ),
        ),
        Pool(
            "d",
            LabelSelector(
                match_expressions=(
                    SelectorRequirement("pool", SelectorOperator.NOT_IN, ("a", "b")),
                )
            ),
        ),
    )
    label_sets = [
        {},
        {"pool": "a"},
        {"pool": "a", "gpu": "x"},
        {"gpu": "y", "pool": "b"},
        {"rack": "5", "pool": "b"},
        {"rack": "2", "pool": "b"},
        {"rack": "x", "pool": "a"},
    ]
    nodes = tuple(node(f"n{i}", labels=labels) for i, labels in enumerate(label_sets))
    index = NodeIndex(nodes, pools, None, ResourceSpace({"cpu", "memory", "pods"}))
    assert [index.pool_names[p] for p in index.pool_of] == [pool_of_node(n, pools) for n in nodes]


def test_room_reclaimed_in_a_lender_pool_is_taken_not_reclaimed_again() -> None:
    """Found by the property tests: a job of pool b (no nodes) reclaims a surplus pod on pool
    a's node. Once the pod is gone its nominated room must go to it; reclaiming again every
    other session (the victim growing back in between) is an eviction loop."""
    start = Snapshot(
        now=0,
        nodes=(
            node("a0", cpu=8, pods=2, labels={"pool": "a"}),
            node("a1", cpu=4, pods=1, labels={"pool": "a"}),
        ),
        pools=pools("a", "b"),
        queues=(Queue("qa"), Queue("qb")),
        groups=(
            group("lender", queue="qa", pool="a", phase=GroupPhase.RUNNING),
            group("borrower", queue="qb", pool="b"),
        ),
        tasks=(
            *tasks("lender", 3, cpu=4, on=["a1", "a0", "a0"]),
            *tasks("borrower", 3, cpu=2),
        ),
    )
    evicted = 0
    for result, snap in sessions(start, 6):  # noqa: B007 - the last snapshot is checked below
        evicted += len(evictions(result))
    assert evicted == 1
    assert any(t.group == "borrower" and t.status == TaskStatus.BOUND for t in snap.tasks)
