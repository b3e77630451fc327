"""`woken`: an event wait with a time limit that never swallows a cancellation."""

from __future__ import annotations

import asyncio

from operators.runtime.wake import woken


async def test_a_cancel_in_the_iteration_that_sets_the_event_stops_the_waiting_loop() -> None:
    """`asyncio.wait_for(event.wait(), t)` (Python 3.11) returns normally here and the loop
    runs on: a stop that cancels it and waits for it hangs."""
    event = asyncio.Event()

    async def loop() -> None:
        while True:
            await woken(event, 10.0)
            event.clear()

    task = asyncio.create_task(loop())
    await asyncio.sleep(0)  # the loop waits on the event
    event.set()
    task.cancel()
    done, _ = await asyncio.wait({task}, timeout=2.0)
    assert task in done
    assert task.cancelled()


async def test_set_limit_and_no_limit() -> None:
    event = asyncio.Event()
    assert not await woken(event, 0.01)
    assert not await woken(event, 0.0)
    event.set()
    assert await woken(event, None)
    assert await woken(event, float("inf"))
    assert await woken(event, 0.0)
