"""The scheduling loop's coalescing window counts from the first change no cycle has served yet.

A burst of changes still becomes one cycle; but under a steady arrival the changes that came
while a session ran have already waited for company, and holding them back another window after
that session added the window to every pod's wait (sustained arrival, issue #20)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from operators.controllers.scheduler_loop import SchedulerOperator
from operators.runtime.settings import SchedulerSettings

WINDOW = 30.0  # long enough that a test waiting a whole window would time out


def operator(clock: list[float]) -> SchedulerOperator:
    op = SchedulerOperator(
        SchedulerSettings(metrics_port=0, leader_election=False, coalesce_seconds=WINDOW)
    )
    op.clock = lambda: clock[0]
    return op


def test_the_window_counts_from_the_first_change_not_served() -> None:
    now = [1_000.0]
    op = operator(now)
    op._on_change("schedule")
    assert op._coalesce_delay() == WINDOW  # a fresh change waits the whole window
    now[0] += 10.0
    op._on_change("status")
    op._on_change("schedule")
    assert op._coalesce_delay() == WINDOW - 10.0  # later changes do not extend it
    now[0] += 25.0
    assert op._coalesce_delay() == 0.0
    now[0] = 900.0  # a clock that went back never makes the wait longer than the window
    assert op._coalesce_delay() == WINDOW


async def test_a_change_that_came_during_a_long_cycle_is_served_when_it_ends(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    now = [1_000.0]
    op = operator(now)
    cycles: list[float] = []
    second = asyncio.Event()

    async def cycle(applier: Any, status: Any) -> None:
        cycles.append(now[0])
        if len(cycles) == 2:
            second.set()
        if len(cycles) == 1:
            op._on_change("schedule")  # a pod arrives while this session runs,
            now[0] += WINDOW + 1.0  # and the session runs longer than the window

    monkeypatch.setattr(op, "cycle", cycle)
    op._on_change("schedule")
    assert op._coalesce_delay() == WINDOW
    now[0] += WINDOW + 1.0  # the first change's window has passed as well
    task = asyncio.create_task(op._loop(None, None))  # type: ignore[arg-type]
    try:
        async with asyncio.timeout(10.0):  # waiting another window would take 30 s
            await second.wait()
    finally:
        task.cancel()
    assert cycles == [1_000.0 + WINDOW + 1.0, 1_000.0 + 2 * (WINDOW + 1.0)]
    assert op._schedule_wanted is False  # both changes were served, nothing left over
