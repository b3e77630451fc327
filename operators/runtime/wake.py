"""Waiting for an asyncio.Event with a time limit, without losing a cancellation.

On Python 3.11, `asyncio.wait_for(event.wait(), t)` returns normally when the event is set in
the same loop iteration as the waiting task is cancelled: the cancellation is swallowed, and a
loop that waits so (a scheduler's, an operator's) runs on after its stop cancelled it, so the
stop hangs on it. `asyncio.timeout` keeps the cancellation.
"""

from __future__ import annotations

import asyncio
import math


async def woken(event: asyncio.Event, limit: float | None) -> bool:
    """Wait until `event` is set or `limit` seconds passed (None: no limit); whether it was
    set. A cancellation of the waiting task always propagates."""
    if limit is not None and math.isinf(limit):
        limit = None
    try:
        async with asyncio.timeout(limit):
            await event.wait()
    except TimeoutError:
        return False
    return True
