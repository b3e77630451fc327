"""A watch on a quiet kind: the API server sends nothing (no bookmarks on a kind without events)
and ends the stream at `timeoutSeconds`. The client must wait that long (the stream then ends
cleanly and the informer resumes without a word), and take only a longer silence for a dead
connection (operators/runtime/client.py)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web

from operators.runtime import client as C
from operators.runtime.client import KubeClient, watch_read_timeout
from operators.runtime.kubeconfig import Connection


@pytest.mark.parametrize("server_timeout", [1, 60, 90, 300, 1800])
def test_the_read_timeout_outlasts_the_servers_timeout(server_timeout: int) -> None:
    # The API server ends a watch at timeoutSeconds; the read timeout must be later, with room
    # for a busy server's lateness. (It was a fixed 90 s: every quiet 300 s watch cut at 90.)
    assert watch_read_timeout(server_timeout) >= server_timeout + 10


@contextlib.asynccontextmanager
async def quiet_api() -> AsyncIterator[tuple[str, list[str]]]:
    """A watch endpoint that sends nothing: it ends the stream after `timeoutSeconds` (or never,
    at /hang)."""
    asked: list[str] = []

    async def watch(request: web.Request) -> web.StreamResponse:
        asked.append(request.query["timeoutSeconds"])
        resp = web.StreamResponse()
        resp.content_type = "application/json"
        await resp.prepare(request)
        if request.match_info["kind"] == "hang":
            await asyncio.sleep(3600)
        await asyncio.sleep(float(request.query["timeoutSeconds"]))
        return resp

    app = web.Application()
    app.router.add_get("/{kind}", watch)
    runner = web.AppRunner(app, shutdown_timeout=0.1)  # /hang is still open at the end
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}", asked
    finally:
        await runner.cleanup()


async def test_a_quiet_watch_ends_cleanly_at_the_servers_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(C, "WATCH_READ_GRACE", 1.0)
    async with quiet_api() as (server, asked), KubeClient(Connection(server=server)) as client:
        events = [e async for e in client.watch("/quiet", "5", timeout_seconds=2)]
    assert events == []
    assert asked == ["2"]


async def test_a_watch_silent_past_its_timeout_is_taken_for_dead(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(C, "WATCH_READ_GRACE", 0.5)
    async with quiet_api() as (server, _), KubeClient(Connection(server=server)) as client:
        # The client's read timeout, not the hang guard (far beyond the 1.5 s expected).
        with pytest.raises(aiohttp.ServerTimeoutError):
            await asyncio.wait_for(drain(client.watch("/hang", "5", timeout_seconds=1)), 30)


async def drain(events: AsyncIterator[object]) -> None:
    async for _ in events:
        pass
