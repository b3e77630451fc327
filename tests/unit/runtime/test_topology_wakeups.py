"""A waiting gang whose hard network-topology request turns soft (softAfterSeconds) gets a
session at that moment even if nothing else changes: the core places it differently from then
on, and on a quiet cluster no event would start one."""

from __future__ import annotations

from typing import Any

from operators.runtime import records as R

from .factories import node, pod, podgroup
from .test_self_writes import Loop

CREATED = R.timestamp("2026-11-22T08:00:00Z")  # the factories' creationTimestamp


def waiting_gang(soft_after: int | None, phase: str = "Inqueue") -> Loop:
    """A pending 2-pod gang asking for one ToR; the last session ran at CREATED + 10."""
    loop = Loop()
    loop.api.add("node", node("n0"))
    raw: dict[str, Any] = podgroup("g", min_member=2, status={"phase": phase})
    raw["spec"]["networkTopology"] = {"mode": "hard", "highestTier": "tor"}
    if soft_after is not None:
        raw["spec"]["networkTopology"]["softAfterSeconds"] = soft_after
    loop.api.add("podgroup", raw)
    for i in range(2):
        loop.api.add("pod", pod(f"g-{i}", group="g"))
    loop.op._changes_at_session = loop.op._changes  # nothing changed since the last session
    loop.op._last_session_at = CREATED + 10.0
    return loop


def test_the_loop_wakes_when_a_waiting_gang_turns_soft_and_runs_one_session() -> None:
    loop = waiting_gang(20)  # within the 30 s safety tick
    assert 9.0 < loop.op._next_deadline(CREATED + 10.0) < 11.0
    assert not loop.op._timed_session_due(CREATED + 19.0)
    assert loop.op._timed_session_due(CREATED + 20.0)
    loop.op._last_session_at = CREATED + 20.0  # that session ran: once is enough
    assert not loop.op._timed_session_due(CREATED + 200.0)
    assert loop.op._next_deadline(CREATED + 20.0) == loop.op.settings.safety_tick_seconds


def test_no_wakeup_without_soft_after_or_once_the_gang_runs() -> None:
    for loop in (waiting_gang(None), waiting_gang(20, phase="Running")):
        assert not loop.op._timed_session_due(CREATED + 20.0)
        assert loop.op._next_deadline(CREATED + 10.0) == loop.op.settings.safety_tick_seconds
