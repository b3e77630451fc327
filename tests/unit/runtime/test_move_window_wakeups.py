"""A moved job whose pods are not back when its move window ends gets a session at that
moment even if nothing else changes: the nodes held for it open to other groups then (a gang
waiting for them would otherwise wait for an unrelated event on a quiet cluster)."""

from __future__ import annotations

from typing import Any

from operators.controllers.scheduler_status import MOVE_WINDOW
from operators.runtime import records as R

from .factories import node, pod, podgroup
from .test_self_writes import Loop

MOVED = R.timestamp("2026-11-22T08:00:00Z")


def moved_job(moved_to: list[dict[str, Any]]) -> Loop:
    """``a`` was moved at MOVED (``moved_to``: its lastEviction.movedTo) and its pod is not
    back; ``late`` waits; the last session ran 10 s after the move."""
    loop = Loop()
    loop.api.add("node", node("n0"))
    last = {"reason": "Consolidated", "time": R.rfc3339(MOVED), "movedTo": moved_to}
    loop.api.add("podgroup", podgroup("a", status={"phase": "Inqueue", "lastEviction": last}))
    loop.api.add("podgroup", podgroup("late", status={"phase": "Inqueue"}))
    loop.api.add("pod", pod("late-0", group="late"))
    loop.op._changes_at_session = loop.op._changes  # nothing changed since the last session
    loop.op._last_session_at = MOVED + 10.0
    return loop


def test_the_loop_wakes_when_a_moved_jobs_window_ends_and_runs_one_session() -> None:
    loop = moved_job([{"node": "n0", "pods": 1}])
    end = MOVED + MOVE_WINDOW
    tick = loop.op.settings.safety_tick_seconds
    assert loop.op._next_deadline(end - 5.0) < 5.1
    assert loop.op._next_deadline(end - tick - 5.0) == tick
    assert not loop.op._timed_session_due(end - 1.0)
    assert loop.op._timed_session_due(end)
    loop.op._last_session_at = end  # that session ran: once is enough
    assert not loop.op._timed_session_due(end + 200.0)


def test_no_wakeup_for_a_moved_job_placed_again() -> None:
    loop = moved_job([])  # movedTo emptied: placed again, nothing is held
    end = MOVED + MOVE_WINDOW
    assert not loop.op._timed_session_due(end)
    assert loop.op._next_deadline(end - 5.0) == loop.op.settings.safety_tick_seconds
