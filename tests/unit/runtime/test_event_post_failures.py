"""An Event the API server cannot take (connection dropped while it restarts, our session
closed at shutdown) is logged at debug, never escapes its fire-and-forget task, and is posted
again on its next occurrence."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import pytest

from operators.runtime.client import ApiError
from operators.runtime.events import EventRecorder


class DroppingApi:
    """Event POSTs fail with `errors` in turn, then succeed."""

    def __init__(self, errors: list[Exception]) -> None:
        self.errors = errors
        self.posted: list[dict[str, Any]] = []

    async def post(self, path: str, body: Any, params: Any = None) -> dict[str, Any]:
        if self.errors:
            raise self.errors.pop(0)
        self.posted.append(body)
        return {}


@pytest.mark.parametrize(
    "error",
    [
        aiohttp.ServerDisconnectedError(),
        aiohttp.ClientConnectionError("Connector is closed."),
        ApiError(503, {"reason": "ServiceUnavailable"}),
        TimeoutError(),
    ],
    ids=["server-disconnected", "connector-closed", "api-error", "timeout"],
)
async def test_a_failed_event_post_is_contained_and_posted_on_its_next_occurrence(
    error: Exception,
) -> None:
    api = DroppingApi([error])
    client: Any = api
    recorder = EventRecorder(client, "t", repeat_window=300.0, clock=lambda: 1000.0)
    obj = {"kind": "PodGroup", "namespace": "ns", "name": "g", "uid": "pg-g"}
    recorder.post(obj, "Warning", "FailedBinding", "bindings failed")
    results = await asyncio.gather(*list(recorder._tasks), return_exceptions=True)
    assert results == [None]  # nothing escaped the task
    assert api.posted == []
    recorder.post(obj, "Warning", "FailedBinding", "bindings failed")  # same window
    await asyncio.gather(*list(recorder._tasks))
    assert [e["reason"] for e in api.posted] == ["FailedBinding"]
