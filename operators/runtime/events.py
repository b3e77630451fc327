"""Kubernetes Events (core/v1) for what the scheduler did, so `kubectl describe` shows it.

A situation that persists (an eviction a PodDisruptionBudget keeps refusing, a gang that keeps
failing to bind) is re-decided every cycle; its Event is posted once per `repeat_window` rather
than once per cycle, keyed on (involved object, reason, message).

Events of one object that must be read in order (a job's transitions, split over several Events)
go through `post_in_order`: one after another, after that object's earlier ordered ones. Event
names end in a hex clock that only grows, so the API server lists them (by name) in the order
they were posted: `kubectl describe` sorts by a timestamp with whole seconds and keeps the listed
order for Events of the same second.
"""

from __future__ import annotations

import asyncio
import collections
import datetime
import logging
import time
import uuid
from collections.abc import Callable, Hashable, Sequence
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
        self._named = 0  # the last name stamp (ns since the epoch, made to grow)
        # object -> the last task of its ordered Events: the next waits for it
        self._ordered: dict[Hashable, asyncio.Task[None]] = {}

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
        key = self._fresh(involved, reason, message)
        if key is None:
            return
        self._track(asyncio.create_task(self._post(key, involved, event_type, reason, message)))

    def post_in_order(
        self, involved: dict[str, Any], events: Sequence[tuple[str, str, str]]
    ) -> None:
        """(type, reason, message) Events of one object, written one after another and after
        the object's Events posted before through this method (each as `post`: at most once
        per repeat window; one that fails does not hold back the rest)."""
        todo = [
            (key, *ev) for ev in events if (key := self._fresh(involved, ev[1], ev[2])) is not None
        ]
        if not todo:
            return
        obj = _object(involved)
        task = asyncio.create_task(self._post_all(self._ordered.get(obj), involved, todo))
        self._ordered[obj] = task
        self._track(task)

        def done(_: asyncio.Task[None]) -> None:
            if self._ordered.get(obj) is task:
                del self._ordered[obj]

        task.add_done_callback(done)

    async def _post_all(
        self,
        before: asyncio.Task[None] | None,
        involved: dict[str, Any],
        todo: Sequence[tuple[Hashable, str, str, str]],
    ) -> None:
        if before is not None:
            await asyncio.wait([before])
        for key, event_type, reason, message in todo:
            await self._post(key, involved, event_type, reason, message)

    def _fresh(self, involved: dict[str, Any], reason: str, message: str) -> Hashable | None:
        """The Event's de-duplication key, marked as posted; None if it was posted recently."""
        key = (_object(involved), reason, message)
        now = self._clock()
        if self._posted.recent(key, now):
            return None
        self._posted.mark(key, now)
        return key

    def _track(self, task: asyncio.Task[None]) -> None:
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _name_stamp(self) -> str:
        """Hex nanoseconds since the epoch, greater than the last one given: names of one
        recorder's Events sort in the order they were posted."""
        self._named = max(time.time_ns(), self._named + 1)
        return f"{self._named:016x}"

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
                # The stamp orders; the random tail keeps two processes' names apart.
                "name": f"{involved.get('name', 'object')}.{self._name_stamp()}{uuid.uuid4().hex[:4]}",
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


def _object(involved: dict[str, Any]) -> Hashable:
    return involved.get("uid") or (
        involved.get("kind"),
        involved.get("namespace"),
        involved.get("name"),
    )
