"""SIGTERM/SIGINT fan-out: every operator sharing one event loop (under `python -m operators all`)
is told to stop, not only the one that installed its handler last.

`loop.add_signal_handler` keeps one handler per signal, so two operators registering their own
would silently replace each other (kopf installs its own when it starts, too). Operators call
`on_stop_signal(callback)` instead; one handler per signal calls every callback.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import weakref
from collections.abc import Callable

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)

_callbacks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, list[Callable[[], None]]] = (
    weakref.WeakKeyDictionary()
)


def _fan_out(loop: asyncio.AbstractEventLoop) -> None:
    for callback in list(_callbacks.get(loop, ())):
        callback()


def on_stop_signal(callback: Callable[[], None]) -> Callable[[], None]:
    """Call `callback` on SIGTERM/SIGINT in the running loop; returns the unsubscribe function.

    (Re-)installs the loop's handlers every time, so a library that replaced them meanwhile
    (kopf does, in `kopf.spawn_tasks`) is overridden by the fan-out again. Outside the main thread
    signals cannot be handled; the callback is then only kept for `stop_all`.
    """
    loop = asyncio.get_running_loop()
    callbacks = _callbacks.setdefault(loop, [])
    callbacks.append(callback)
    for sig in STOP_SIGNALS:
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, _fan_out, loop)

    def unsubscribe() -> None:
        with contextlib.suppress(ValueError):
            callbacks.remove(callback)
        if not callbacks:
            # The last operator is gone: give the signals back their default behaviour.
            for sig in STOP_SIGNALS:
                with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                    loop.remove_signal_handler(sig)

    return unsubscribe


def stop_all() -> None:
    """What a stop signal does, without the signal: ask every subscribed operator to stop."""
    _fan_out(asyncio.get_running_loop())
