"""`SessionConfig.on_bind` hands out the Binds of each bind-only statement as it commits, so the
runtime can bind while the session goes on: same decisions either way, and every Bind handed
out early is one the result carries too, in the same order."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from operators.scheduler import run_session
from operators.scheduler.decisions import Bind, Evict
from operators.scheduler.session import SessionConfig
from operators.scheduler.snapshot import GroupPhase, Snapshot

from .builders import group, node, tasks
from .drawn import drawn_snapshot
from .simulate import advance
from .test_properties import PROFILE


def streamed(snap: Snapshot) -> tuple[list[Bind], tuple[object, ...], tuple[object, ...]]:
    """(binds handed out early, decisions with the callback, decisions without it)."""
    early: list[Bind] = []
    result = run_session(snap, SessionConfig(on_bind=early.extend))
    return early, result.decisions, run_session(snap, SessionConfig()).decisions


@PROFILE
@given(st.data())
def test_early_binds_change_no_decision_and_are_all_in_the_result(data: st.DataObject) -> None:
    snap, second = drawn_snapshot(data)
    for step in range(2):  # a second session with newcomers: preemption and reclaim happen
        early, with_sink, without = streamed(snap)
        assert with_sink == without
        final = [d for d in with_sink if isinstance(d, Bind)]
        assert early == [b for b in final if b in set(early)]
        snap = advance(snap, run_session(snap), now=30.0 * (step + 1))
        if step == 0:
            snap = replace(snap, groups=(*snap.groups, *second[0]), tasks=(*snap.tasks, *second[1]))


def test_plain_placements_are_all_handed_out_early() -> None:
    snap = Snapshot(
        now=0.0,
        nodes=(node("n1", cpu=8), node("n2", cpu=8)),
        queues=(),
        pools=(),
        groups=(group("g", min_member=3), group("solo")),
        tasks=(*tasks("g", 3, cpu=2), *tasks("solo", 1, cpu=1)),
    )
    early, decisions, _ = streamed(snap)
    assert early == [d for d in decisions if isinstance(d, Bind)]
    assert {b.group for b in early} == {"g", "solo"}


def test_a_statement_that_evicts_is_not_handed_out_early() -> None:
    running = group("low", priority=0, phase=GroupPhase.RUNNING)
    snap = Snapshot(
        now=0.0,
        nodes=(node("n1", cpu=4),),
        queues=(),
        pools=(),
        groups=(running, group("high", priority=100, min_member=2)),
        tasks=(*tasks("low", 2, cpu=2, on=["n1"]), *tasks("high", 2, cpu=2)),
    )
    early, decisions, _ = streamed(snap)
    assert any(isinstance(d, Evict) for d in decisions)
    assert early == []
