"""Kubernetes Events (core/v1) for what the scheduler did, so `kubectl describe` shows it."""

from __future__ import annotations

import asyncio
import datetime
import logging
import uuid
from typing import Any

from operators.runtime.client import ApiError, KubeClient

log = logging.getLogger(__name__)


class EventRecorder:
    def __init__(self, client: KubeClient, component: str, concurrency: int = 8) -> None:
        self.client = client
        self.component = component
        self._sem = asyncio.Semaphore(concurrency)
        self._tasks: set[asyncio.Task[None]] = set()

    def post(self, involved: dict[str, Any], event_type: str, reason: str, message: str) -> None:
        """Fire and forget: an Event that cannot be written must not hold up scheduling."""
        task = asyncio.create_task(self._post(involved, event_type, reason, message))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _post(
        self, involved: dict[str, Any], event_type: str, reason: str, message: str
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
        except (ApiError, TimeoutError, OSError) as err:
            log.debug("could not post event %s: %s", reason, err)
