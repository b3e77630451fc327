"""Consolidation's value on openb arrivals: a hand-made trace with a known answer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from operators.simulator.consolidation import (
    Arrivals,
    cache_key,
    search_version,
    session_config,
    table,
)
from operators.simulator.openb import TraceNode, TracePod
from operators.simulator.quality import FRAGMENTATION_KEY, default_knobs

NODES = (TraceNode("n0", 32_000, 65_536, 2, "A"), TraceNode("n1", 32_000, 65_536, 2, "B"))
CAPACITY = 4 * 1000
# a: one card of any model, lands on n0 (first node on a tie); b: one card of model B, so n1;
# c: two cards. Then each node has one card idle: c fits in total, on no node.
TRACE = (
    TracePod("a", 1000, 1024, 1, 1000),
    TracePod("b", 1000, 1024, 1, 1000, ("B",)),
    TracePod("c", 1000, 1024, 2, 1000),
)


def replay(consolidate: bool, batch: int) -> Arrivals:
    """The trace ``batch`` pods per session (3: one session, as for a warm-up)."""
    state = Arrivals(NODES, session_config(consolidate))
    for start in range(0, len(TRACE), batch):
        new = [state.add(i, TRACE[i]) for i in range(start, min(start + batch, len(TRACE)))]
        state.settle(new)
    return state


@pytest.mark.parametrize("batch", [1, 3])
def test_without_consolidation_the_two_card_pod_is_dropped(batch: int) -> None:
    state = replay(consolidate=False, batch=batch)
    result = state.result(CAPACITY)
    assert state.tasks["p000000"].node == "n0"
    assert state.tasks["p000001"].node == "n1"
    assert "p000002" not in state.tasks
    assert (result.failed, result.moves, result.unallocated) == (1, 0, 50.0)


def test_with_consolidation_a_moves_to_n1_and_c_takes_n0() -> None:
    state = replay(consolidate=True, batch=1)
    result = state.result(CAPACITY)
    assert {uid: t.node for uid, t in state.tasks.items()} == {
        "p000000": "n1",
        "p000001": "n1",
        "p000002": "n0",
    }
    assert (result.failed, result.moves, result.moved_gpus, result.lost) == (0, 1, 1.0, 0)
    assert result.unallocated == 0.0


def test_pods_of_the_same_batch_are_not_yet_running_so_none_of_them_moves() -> None:
    """One session for all three: a and b are bound in the session that fails c, so they are
    not running jobs yet and the core moves nothing (batches undercount consolidation)."""
    result = replay(consolidate=True, batch=3).result(CAPACITY)
    assert (result.failed, result.moves, result.unallocated) == (1, 0, 50.0)


def _row(seed: int, on: bool, unallocated: float, moves: int, search: str | None = None) -> str:
    row: dict[str, object] = {"trace": "default", "seed": seed, "consolidate": on}
    row |= {"batch": 10, "warmup": 0.8}
    row |= {"unallocated": unallocated, "failed": 3, "moves": moves, "moved_gpus": float(moves)}
    row |= {"lost": 0, "sessions": 5, "seconds": 1.0}
    row[FRAGMENTATION_KEY] = list(default_knobs())
    if on:
        row["search"] = search or search_version()
    return json.dumps(row)


def test_table_pairs_seeds_run_both_ways_and_reports_mean_and_spread(tmp_path: Path) -> None:
    results = tmp_path / "results.jsonl"
    lines = [_row(42, False, 5.0, 0), _row(42, True, 4.0, 2)]
    lines += [_row(43, False, 7.0, 0), _row(43, True, 5.0, 4)]
    lines += [_row(44, False, 9.0, 0)]  # only off: left out of both means
    lines += [json.dumps({**json.loads(_row(45, True, 0.0, 9)), "batch": 1})]  # another protocol
    lines += [_row(44, True, 0.0, 9, search="old")]  # an older consolidation search: stale
    results.write_text("\n".join(lines) + "\n")
    rows = table(results, batch=10, warmup=0.8).splitlines()
    assert len(rows) == 3
    cells = [c.strip() for c in rows[2].strip("|").split("|")]
    assert cells[:5] == ["default", "2", "6.00 ± 1.00", "4.50 ± 0.50", "1.50 ± 0.50"]
    assert cells[5:9] == ["3 ± 0 / 3 ± 0", "3.0 ± 1.0", "3.0 ± 1.0", "5 ± 0 / 5 ± 0"]
    assert cells[9] == "0"


def test_an_on_row_counts_only_for_the_search_that_made_it() -> None:
    """The cache key of a results row: "off" rows do not run the search and always count; an
    "on" row without the current search's digest is stale (run again, left out of the table)."""
    version = search_version()
    off, on, stale = (json.loads(_row(42, on, 5.0, 0)) for on in (False, True, True))
    stale["search"] = "old"
    assert cache_key(off, version) == ("default", 42, False, 10, 0.8)
    assert cache_key(on, version) == ("default", 42, True, 10, 0.8)
    assert cache_key(stale, version) is None


def test_a_row_of_another_fragment_measure_than_the_default_is_stale() -> None:
    """Rows are keyed without the placement's knobs, which follow the core's defaults: a row
    run with other knobs, or one from before they were recorded (the paper's measure was the
    default then), must run again rather than share a mean with today's default."""
    version = search_version()
    for on in (False, True):
        row = json.loads(_row(42, on, 5.0, 0))
        assert cache_key(row, version) is not None
        del row[FRAGMENTATION_KEY]
        assert cache_key(row, version) is None
        row[FRAGMENTATION_KEY] = [0.0, 100, 0.0]
        assert cache_key(row, version) is None
