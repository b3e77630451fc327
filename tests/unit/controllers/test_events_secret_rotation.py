"""A rotated sink token is used without editing the sink or restarting the events operator.

A narrow client-call test: the fake answers only the Secret reads and the one-Secret watch the
controller makes (get, list and watch of /api/v1/namespaces/NS/secrets).
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

from operators.controllers.events import EventsController, EventsSettings
from operators.runtime.metrics import EventsMetrics

SECRETS = "/api/v1/namespaces/sluice-system/secrets"


class SecretApi:
    def __init__(self, token: str) -> None:
        self.version = 1
        self.token = token
        self.events: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.watched: list[Mapping[str, str] | None] = []

    def secret(self) -> dict[str, Any]:
        data = {"token": base64.b64encode(self.token.encode()).decode()}
        meta = {"name": "hook-token", "namespace": "sluice-system"}
        return {"metadata": {**meta, "resourceVersion": str(self.version)}, "data": data}

    def rotate(self, token: str) -> None:
        self.version += 1
        self.token = token
        self.events.put_nowait({"type": "MODIFIED", "object": self.secret()})

    async def get(self, path: str) -> dict[str, Any]:
        assert path == f"{SECRETS}/hook-token"
        return self.secret()

    async def pages(
        self, path: str, params: Mapping[str, str] | None = None, page_size: int = 500
    ) -> AsyncIterator[tuple[list[dict[str, Any]], str]]:
        assert path == SECRETS
        assert params == {"fieldSelector": "metadata.name=hook-token"}
        yield [self.secret()], str(self.version)

    async def watch(
        self, path: str, resource_version: str, params: Mapping[str, str] | None = None, **_: Any
    ) -> AsyncIterator[dict[str, Any]]:
        self.watched.append(params)
        while True:
            yield await self.events.get()

    async def merge_patch(self, path: str, body: Any) -> dict[str, Any]:
        return {}

    async def json_patch(self, path: str, ops: Any) -> dict[str, Any]:
        return {}


async def until(check: Callable[[], bool]) -> None:
    for _ in range(1000):  # 10 s
        if check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("timed out")


async def test_a_rotated_token_is_used_from_the_next_attempt() -> None:
    api = SecretApi("first")
    controller = EventsController(api, EventsSettings(), EventsMetrics())  # type: ignore[arg-type]
    ref = {"name": "hook-token", "namespace": "sluice-system"}
    body = {
        "metadata": {"name": "billing", "generation": 1},
        "spec": {"url": "https://billing.example/ce", "authSecretRef": ref},
    }
    controller.on_sink("ADDED", body)
    sink = controller.sinks["billing"]
    try:
        await until(lambda: sink.target is not None and sink.target.token == "first")
        await until(lambda: bool(api.watched))
        assert api.watched == [{"fieldSelector": "metadata.name=hook-token"}]
        api.rotate("second")
        await until(lambda: sink.target is not None and sink.target.token == "second")
        assert sink.problem == ""
    finally:
        await controller.stop()
