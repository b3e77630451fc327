"""Consolidation's value on openb arrivals: a hand-made trace with a known answer."""

from __future__ import annotations

from operators.simulator.consolidation import Arrivals, session_config
from operators.simulator.openb import TraceNode, TracePod

NODES = (TraceNode("n0", 32_000, 65_536, 2, "A"), TraceNode("n1", 32_000, 65_536, 2, "B"))
CAPACITY = 4 * 1000
# a: one card of any model, lands on n0 (first node on a tie); b: one card of model B, so n1;
# c: two cards. Then each node has one card idle: c fits in total, on no node.
TRACE = (
    TracePod("a", 1000, 1024, 1, 1000),
    TracePod("b", 1000, 1024, 1, 1000, ("B",)),
    TracePod("c", 1000, 1024, 2, 1000),
)


def replay(consolidate: bool) -> Arrivals:
    state = Arrivals(NODES, session_config(consolidate))
    for i, pod in enumerate(TRACE):
        state.settle([state.add(i, pod)])
    return state


def test_without_consolidation_the_two_card_pod_is_dropped() -> None:
    state = replay(consolidate=False)
    result = state.result(CAPACITY)
    assert state.tasks["p000000"].node == "n0"
    assert state.tasks["p000001"].node == "n1"
    assert "p000002" not in state.tasks
    assert (result.failed, result.moves, result.unallocated) == (1, 0, 50.0)


def test_with_consolidation_a_moves_to_n1_and_c_takes_n0() -> None:
    state = replay(consolidate=True)
    result = state.result(CAPACITY)
    assert {uid: t.node for uid, t in state.tasks.items()} == {
        "p000000": "n1",
        "p000001": "n1",
        "p000002": "n0",
    }
    assert (result.failed, result.moves, result.moved_gpus, result.lost) == (0, 1, 1.0, 0)
    assert result.unallocated == 0.0
