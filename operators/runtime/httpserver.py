"""The /metrics, /healthz and /readyz endpoints on one small aiohttp server."""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest


class ProbeServer:
    """`/healthz` answers 200 while `alive()` is true; `/readyz` while `ready()` is true (for the
    scheduler: caches synced; a standby that waits for the lease is ready but not leading)."""

    def __init__(
        self,
        registry: CollectorRegistry,
        *,
        alive: Callable[[], bool],
        ready: Callable[[], bool],
    ) -> None:
        self._registry = registry
        self._alive = alive
        self._ready = ready
        self._runner: web.AppRunner | None = None
        self.port = 0

    async def _metrics(self, _: web.Request) -> web.Response:
        body = generate_latest(self._registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def _healthz(self, _: web.Request) -> web.Response:
        return web.Response(
            text="ok" if self._alive() else "dead", status=200 if self._alive() else 503
        )

    async def _readyz(self, _: web.Request) -> web.Response:
        ready = self._ready()
        return web.Response(text="ok" if ready else "not ready", status=200 if ready else 503)

    async def start(self, host: str, port: int) -> None:
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port)
        await site.start()
        server = site._server  # the bound port, when 0 asked for any free one
        sockets = getattr(server, "sockets", None) or []
        self.port = sockets[0].getsockname()[1] if sockets else port

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
