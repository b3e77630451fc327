"""Statement commit/discard and the group phase table."""

from __future__ import annotations

import numpy as np

from operators.scheduler.decisions import EvictReason
from operators.scheduler.phases import TRANSITIONS, GroupEvent, next_phase
from operators.scheduler.session import SessionConfig
from operators.scheduler.snapshot import GroupPhase, Snapshot
from operators.scheduler.state import Placement, SessionState
from operators.scheduler.statement import Statement

from .builders import group, node, tasks


def _state() -> SessionState:
    snap = Snapshot(
        now=0,
        nodes=(node("n0", cpu=8, gpus=8), node("n1", cpu=8, gpus=8)),
        groups=(group("run", phase=GroupPhase.RUNNING), group("new", min_member=2)),
        tasks=(*tasks("run", 1, cpu=2, gpus=2, on=["n0"]), *tasks("new", 2, cpu=2, gpus=1)),
    )
    return SessionState(snap, SessionConfig())


def test_discard_restores_every_counter() -> None:
    state = _state()
    before = (
        state.free.copy(),
        state.gpu_free.copy(),
        state.full_cards.copy(),
        state.queues.allocated.copy(),
    )
    new = state.group_by_uid["new"]
    running = state.group_by_uid["run"].tasks[0]
    stmt = Statement(state)
    stmt.allocate(tuple(new.tasks), 1, ((0,), (1,)), Placement.BIND)
    stmt.evict(running, EvictReason.PREEMPTED, "test", "new")
    assert new.gang_satisfied()
    assert state.full_cards[1] == 6
    stmt.discard()
    after = (state.free, state.gpu_free, state.full_cards, state.queues.allocated)
    for b, a in zip(before, after, strict=True):
        assert np.array_equal(b, a)
    assert not new.gang_satisfied()
    assert running.held
    assert not running.evicted


def test_commit_keeps_room_freed_by_evictions_reserved() -> None:
    state = _state()
    running = state.group_by_uid["run"].tasks[0]
    free_before = state.free[0].copy()
    stmt = Statement(state)
    stmt.evict(running, EvictReason.PREEMPTED, "test", "new")
    stmt.commit()
    # The victim is still terminating: nobody else may use its room this session.
    assert np.array_equal(state.free[0], free_before)


def test_phase_table() -> None:
    assert next_phase(GroupPhase.PENDING, GroupEvent.ADMITTED) == GroupPhase.INQUEUE
    assert next_phase(GroupPhase.INQUEUE, GroupEvent.GANG_BOUND) == GroupPhase.RUNNING
    assert next_phase(GroupPhase.RUNNING, GroupEvent.EVICTED) == GroupPhase.PENDING
    # Pairs missing from the table leave the phase alone.
    assert next_phase(GroupPhase.COMPLETED, GroupEvent.ADMITTED) == GroupPhase.COMPLETED
    assert all(phase != GroupPhase.COMPLETED for phase in TRANSITIONS.values())
