"""One background reconcile per operator, run after watch events and at most once per interval.

The pool, queue and podgroup operators are level-based over many objects (a node's pool depends
on every Pool; a queue's validity on its siblings). Their kopf handlers only record what changed
and `poke` a `Coalescer`; the reconcile then reads the operator's indexes and writes what differs.
A burst of events (a thousand nodes relabelled) costs one pass, and no object's status is written
more often than once per `interval`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Hashable
from typing import Any, Generic, TypeVar

import kopf

from operators.runtime.operator_metrics import OperatorMetrics
from operators.runtime.wake import woken

log = logging.getLogger(__name__)

Reconcile = Callable[[], Awaitable[float | None]]
"""One pass; returns seconds until it wants to run again without a poke (None: only on pokes)."""

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class LastSeen(Generic[K, V]):
    """What each watched object last looked like to an operator (its index value): an event
    that leaves it as it was (another writer's field moved, such as the events operator's
    `status.eventLog`) needs no reconcile."""

    def __init__(self) -> None:
        self._last: dict[K, V] = {}

    def changed(self, key: K, value: V | None) -> bool:
        """Record `value` (None: the object is gone); whether it differs from the last one."""
        if value is None:
            self._last.pop(key, None)
            return True
        if key in self._last and self._last[key] == value:
            return False
        self._last[key] = value
        return True


class Coalescer:
    def __init__(
        self,
        name: str,
        reconcile: Reconcile,
        interval: float = 1.0,
        retry: float = 5.0,
        metrics: OperatorMetrics | None = None,
    ) -> None:
        self.name = name
        self.metrics = metrics
        self._reconcile = reconcile
        self.interval = interval
        self.retry = retry
        self._poked = asyncio.Event()
        self.passes = 0

    def poke(self) -> None:
        self._poked.set()

    async def run(self, stop: asyncio.Event) -> None:
        again: float | None = None
        while not stop.is_set():
            await _first_of(self._poked, stop, again)  # a poke, or the pass asked for a rerun
            if stop.is_set():
                return
            self._poked.clear()
            started, ok = time.monotonic(), False
            try:
                again = await self._reconcile()
                ok = True
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("%s: reconcile failed; retrying in %.0f s", self.name, self.retry)
                again = self.retry
            if self.metrics is not None:
                self.metrics.reconciled(time.monotonic() - started, ok)
            self.passes += 1
            await woken(stop, self.interval)


async def _first_of(event: asyncio.Event, stop: asyncio.Event, limit: float | None) -> None:
    """Wait for `event` or `stop`, at most `limit` seconds (None: no limit)."""
    waiters = [asyncio.ensure_future(event.wait()), asyncio.ensure_future(stop.wait())]
    try:
        await asyncio.wait(waiters, timeout=limit, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()


def run_in_background(
    registry: kopf.OperatorRegistry, coalescer: Coalescer, stop: asyncio.Event
) -> None:
    """Start the coalescer with the operator and stop it with the operator."""
    tasks: set[asyncio.Task[None]] = set()

    @kopf.on.startup(registry=registry)
    async def _start(**_: Any) -> None:
        tasks.add(asyncio.create_task(coalescer.run(stop), name=f"{coalescer.name}-reconcile"))

    @kopf.on.cleanup(registry=registry)
    async def _stop(**_: Any) -> None:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        tasks.clear()
