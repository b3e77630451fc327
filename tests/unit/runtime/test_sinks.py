"""One CloudEvent POST against a real local HTTP server (operators.runtime.sinks.post_event)."""

from __future__ import annotations

import contextlib
import json
import socket
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
from aiohttp import web

from operators.runtime.sinks import SinkTarget, post_event

EVENT = {"specversion": "1.0", "id": "u-1", "source": "/s", "type": "dev.sluice.job.running"}


class Receiver:
    def __init__(self) -> None:
        self.seen: list[tuple[dict[str, str], Any]] = []
        self.answer = 204

    async def handle(self, request: web.Request) -> web.Response:
        self.seen.append((dict(request.headers), json.loads(await request.read())))
        return web.Response(status=self.answer, text="" if self.answer < 300 else "nope")


@contextlib.asynccontextmanager
async def receiving() -> AsyncIterator[tuple[Receiver, str]]:
    """Started inside the test: the server must run on the test's own event loop."""
    rec = Receiver()
    app = web.Application()
    app.router.add_post("/events", rec.handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield rec, f"http://127.0.0.1:{port}/events"
    finally:
        await runner.cleanup()


async def test_structured_event_with_bearer_token() -> None:
    async with receiving() as (rec, url), aiohttp.ClientSession() as session:
        status, error = await post_event(session, SinkTarget(url, None, "s3cret", 5), EVENT)
    assert (status, error) == (204, "")
    headers, body = rec.seen[0]
    assert body == EVENT
    assert headers["Content-Type"] == "application/cloudevents+json"
    assert headers["Authorization"] == "Bearer s3cret"


async def test_refusal_comes_back_with_status_and_text() -> None:
    async with receiving() as (rec, url), aiohttp.ClientSession() as session:
        rec.answer = 503
        status, error = await post_event(session, SinkTarget(url, None, None, 5), EVENT)
    assert status == 503
    assert error == "HTTP 503: nope"
    assert "Authorization" not in rec.seen[0][0]


async def test_nobody_listening_is_status_zero() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    async with aiohttp.ClientSession() as session:
        target = SinkTarget(f"http://127.0.0.1:{port}/", None, None, 5)
        status, error = await post_event(session, target, EVENT)
    assert status == 0
    assert "ClientConnectorError" in error
