"""One SIGTERM reaches every operator of the process, whoever installed a handler last."""

from __future__ import annotations

import asyncio
import os
import signal

from operators.runtime import signals


async def test_stop_signal_reaches_every_subscriber_and_is_released() -> None:
    loop = asyncio.get_running_loop()
    first, second = asyncio.Event(), asyncio.Event()
    drop_first = signals.on_stop_signal(first.set)
    # Another library replacing the handler (kopf does) is overridden by the next subscription.
    loop.add_signal_handler(signal.SIGTERM, lambda: None)
    drop_second = signals.on_stop_signal(second.set)
    os.kill(os.getpid(), signal.SIGTERM)
    await asyncio.wait_for(asyncio.gather(first.wait(), second.wait()), 5)
    drop_first()
    drop_second()
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL


async def test_stop_all_without_a_signal() -> None:
    stopped: list[str] = []
    drop = signals.on_stop_signal(lambda: stopped.append("a"))
    signals.stop_all()
    drop()
    signals.stop_all()
    assert stopped == ["a"]
