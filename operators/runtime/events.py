"""Kubernetes Events (core/v1) for what the scheduler did, so `kubectl describe` shows it.

A situation that persists (an eviction a PodDisruptionBudget keeps refusing, a gang that keeps
failing to bind) is re-decided every cycle; its Event is posted once per `repeat_window` rather
than once per cycle, keyed on (involved object, reason, message).
"""

from __future__ import annotations

import asyncio
import collections
import datetime
import logging
import time
import uuid
from collections.abc import Callable, Hashable
from typing import Any

import aiohttp

from operators.runtime.client import ApiError, KubeClient

log = logging.getLogger(__name__)

REPEAT_WINDOW_SECONDS = 300.0
MAX_REMEMBERED = 4096


class RecentKeys:
    """Keys seen within the last `window` seconds, bounded to `max_entries` (oldest dropped)."""

    def __init__(self, window: float, max_entries: int = MAX_REMEMBERED) -> None:
        self.window = window
        self.max_entries = max_entries
        self._seen: collections.OrderedDict[Hashable, float] = collections.OrderedDict()

    def __len__(self) -> int:
        return len(self._seen)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._seen

    def recent(self, key: Hashable, now: float) -> bool:
        at = self._seen.get(key)
        return at is not None and now - at < self.window

    def mark(self, key: Hashable, now: float) -> None:
        self._seen[key] = now
        self._seen.move_to_end(key)
        self._prune(now)

    def discard(self, key: Hashable) -> None:
        self._seen.pop(key, None)

    def _prune(self, now: float) -> None:
        # Entries are in order of their last mark, so expired ones are at the front.
        while self._seen:
            key, at = next(iter(self._seen.items()))
            if len(self._seen) <= self.max_entries and now - at < self.window:
                return
            del self._seen[key]


class EventRecorder:
    def __init__(
        self,
        client: KubeClient,
        component: str,
        concurrency: int = 8,
        *,
        repeat_window: float = REPEAT_WINDOW_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.component = component
        self._sem = asyncio.Semaphore(concurrency)
        self._tasks: set[asyncio.Task[None]] = set()
        self._posted = RecentKeys(repeat_window)
        self._clock = clock

    async def drain(self, within: float) -> None:
        """Wait (at most `within` seconds) for the Events posted so far to be written."""
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=within)

    @property
    def remembered(self) -> int:
        """How many recent Events are remembered for de-duplication (bounded)."""
        return len(self._posted)

    def post(self, involved: dict[str, Any], event_type: str, reason: str, message: str) -> None:
        """Fire and forget: an Event that cannot be written must not hold up scheduling.

        The same Event (object, reason, message) is posted at most once per repeat window."""
        obj = involved.get("uid") or (
            involved.get("kind"),
            involved.get("namespace"),
            involved.get("name"),
        )
        key = (obj, reason, message)
        now = self._clock()
        if self._posted.recent(key, now):
            return
        self._posted.mark(key, now)
        task = asyncio.create_task(self._post(key, involved, event_type, reason, message))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _post(
        self,
        key: Hashable,
        involved: dict[str, Any],
        event_type: str,
        reason: str,
        message: str,
    ) -> None:
        namespace = involved.get("namespace") or "default"
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {
                "name": f"{involved.get('name', 'object')}.{uuid.uuid4().hex[:12]}",
                "namespace": namespace,
            },
            "involvedObject": involved,
            "type": event_type,
            "reason": reason,
            "message": message[:1024],
            "source": {"component": self.component},
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
            "reportingComponent": self.component,
        }
        try:
            async with self._sem:
                await self.client.post(f"/api/v1/namespaces/{namespace}/events", body)
        except (ApiError, TimeoutError, OSError, aiohttp.ClientError) as err:
            # aiohttp.ClientError: the API server closed the connection (restarting) or our
            # session was closed under the request (shutdown). Nobody awaits these tasks, so an
            # exception escaping here is only "Task exception was never retrieved" in the log.
            log.debug("could not post event %s: %s", reason, err)
            self._posted.discard(key)  # not posted: the next occurrence may post it
