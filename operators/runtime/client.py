"""A small async Kubernetes API client on aiohttp: JSON requests, paginated lists and watch streams.

Why not kubernetes_asyncio here: the scheduler's hot paths (watch decoding, thousands of Binding
POSTs per second) want raw dicts and one shared connection pool, without model (de)serialisation.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Mapping
from typing import Any, Final, Self

import aiohttp
from aiohttp.helpers import get_env_proxy_for_url
from yarl import URL

from operators.runtime.kubeconfig import Connection

log = logging.getLogger(__name__)

JsonDict = dict[str, Any]
Page = tuple[list[JsonDict], str]
"""One page of a listing: its items and the list's resourceVersion."""

WATCH_READ_GRACE: Final = 30.0
"""Seconds a watch stream may stay silent past its `timeoutSeconds` before it is taken for dead.

Silence is normal: the API server sends no bookmarks on a kind that had no event since it
started (queues, pools, topologies, nodes of an idle cluster), and ends the stream only at
`timeoutSeconds`. A read timeout below that cut every idle watch (every 90 s, logged as an
interruption); a dead connection is still noticed, a little after the server would have
ended the stream."""


def watch_read_timeout(timeout_seconds: float) -> float:
    """The socket read timeout of a watch that asks the server for `timeout_seconds`."""
    return timeout_seconds + WATCH_READ_GRACE


class ApiError(Exception):
    """A non-2xx answer of the API server, with its Status object when it sent one."""

    def __init__(self, status: int, body: Any, method: str = "", path: str = "") -> None:
        self.status = status
        self.body = body
        reason = body.get("reason", "") if isinstance(body, dict) else ""
        message = body.get("message", "") if isinstance(body, dict) else str(body)[:200]
        self.reason: str = str(reason)
        self.message: str = str(message)  # the API's own words (e.g. a webhook's denial)
        super().__init__(f"{method} {path}: {status} {reason} {message}".strip())

    @property
    def gone(self) -> bool:
        return self.status == 410

    @property
    def not_found(self) -> bool:
        return self.status == 404

    @property
    def conflict(self) -> bool:
        return self.status == 409


def env_proxy(server: str) -> dict[str, Any]:
    """The `proxy`/`proxy_auth` request options for the API server that the HTTPS_PROXY /
    NO_PROXY environment (and ~/.netrc for the proxy's credentials) asks for; empty for none.

    Looked up once per client. aiohttp's `trust_env` would look both up again for every
    request, each time in a worker thread (the environment scanned, ~/.netrc read for the
    server's own credentials too): in a 10,000-pod burst the scheduler spent about a fifth of
    its CPU there, beside its Binding POSTs. The API server is never sent netrc credentials:
    requests carry their own Authorization (aiohttp refuses both) or a client certificate."""
    try:
        proxy, auth = get_env_proxy_for_url(URL(server))
    except LookupError:
        return {}
    return {"proxy": proxy, "proxy_auth": auth}


class KubeClient:
    """One aiohttp session per process; `limit` bounds the open connections (and so concurrency)."""

    def __init__(
        self, conn: Connection, *, limit: int = 128, request_timeout: float = 30.0
    ) -> None:
        self.conn = conn
        self._limit = limit
        self._request_timeout = request_timeout
        self._session: aiohttp.ClientSession | None = None
        self._tls_generation = conn.tls_generation
        # Per-request options that do not change: the proxy and the name the server
        # certificate must carry.
        self._request_options: dict[str, Any] = (
            {"proxy": conn.proxy} if conn.proxy else env_proxy(conn.server)
        )
        if conn.tls_server_name:
            self._request_options["server_hostname"] = conn.tls_server_name

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(
                limit=self._limit, ssl=self.conn.ssl_context(), ttl_dns_cache=300
            )
            self._session = aiohttp.ClientSession(
                base_url=self.conn.server,
                connector=connector,
                json_serialize=json.dumps,
            )
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _headers(self, content_type: str | None = None) -> dict[str, str]:
        headers = {"Accept": "application/json"}
        authorization = await self.conn.authorization()
        if authorization:
            headers["Authorization"] = authorization
        if content_type:
            headers["Content-Type"] = content_type
        if self.conn.tls_generation != self._tls_generation:
            # An exec plugin handed out a new client certificate: new connections, new TLS.
            self._tls_generation = self.conn.tls_generation
            await self.close()
        return headers

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        deadline: float | None = None,
    ) -> JsonDict:
        data = None if body is None else json.dumps(body)
        for attempt in (1, 2):
            async with self.session.request(
                method,
                path,
                params=params,
                data=data,
                headers=await self._headers(content_type if data is not None else None),
                timeout=aiohttp.ClientTimeout(total=deadline or self._request_timeout),
                **self._request_options,
            ) as resp:
                raw = await resp.read()
                try:
                    decoded: Any = json.loads(raw) if raw else {}
                except ValueError:
                    decoded = raw.decode(errors="replace")
                if resp.status == 401 and attempt == 1 and self.conn.credentials_rejected():
                    continue  # expired or revoked credentials: fetch fresh ones, retry once
                if resp.status >= 300:
                    raise ApiError(resp.status, decoded, method, path)
                return decoded if isinstance(decoded, dict) else {"value": decoded}
        raise AssertionError("unreachable: the second attempt returns or raises")

    async def get(self, path: str, params: Mapping[str, str] | None = None) -> JsonDict:
        return await self.request("GET", path, params=params)

    async def post(self, path: str, body: Any, params: Mapping[str, str] | None = None) -> JsonDict:
        return await self.request("POST", path, body=body, params=params)

    async def put(self, path: str, body: Any) -> JsonDict:
        return await self.request("PUT", path, body=body)

    async def delete(self, path: str, body: Any = None) -> JsonDict:
        return await self.request("DELETE", path, body=body)

    async def merge_patch(self, path: str, body: Any) -> JsonDict:
        return await self.request(
            "PATCH", path, body=body, content_type="application/merge-patch+json"
        )

    async def strategic_merge_patch(self, path: str, body: Any) -> JsonDict:
        """Built-in kinds only: lists such as pod conditions merge by their key."""
        return await self.request(
            "PATCH", path, body=body, content_type="application/strategic-merge-patch+json"
        )

    async def json_patch(self, path: str, ops: list[JsonDict]) -> JsonDict:
        return await self.request(
            "PATCH", path, body=ops, content_type="application/json-patch+json"
        )

    async def list(
        self, path: str, params: Mapping[str, str] | None = None, page_size: int = 500
    ) -> tuple[list[JsonDict], str]:
        """All items of a collection, paged; returns (items, list resourceVersion)."""
        items: list[JsonDict] = []
        version = ""
        async for page, page_version in self.pages(path, params, page_size):
            items.extend(page)
            version = page_version
        return items, version

    async def pages(
        self, path: str, params: Mapping[str, str] | None = None, page_size: int = 500
    ) -> AsyncIterator[Page]:
        """A collection page by page: (items, list resourceVersion) each. A caller that keeps
        only what it reads of each item never holds more than one page of raw objects."""
        query = dict(params or {})
        query["limit"] = str(page_size)
        while True:
            page = await self.request("GET", path, params=query, deadline=120)
            meta = page.get("metadata") or {}
            yield page.get("items") or [], str(meta.get("resourceVersion", ""))
            token = meta.get("continue")
            if not token:
                return
            query["continue"] = token

    async def watch(
        self,
        path: str,
        resource_version: str,
        params: Mapping[str, str] | None = None,
        *,
        timeout_seconds: int = 300,
    ) -> AsyncIterator[JsonDict]:
        """Watch events from `resource_version`, with bookmarks, until the server closes the stream
        (at `timeout_seconds` at the latest).

        A stream silent for longer than `watch_read_timeout(timeout_seconds)` is treated as dead
        (TimeoutError). ERROR events are raised as ApiError (410 means re-list).
        """
        query = dict(params or {})
        query.update(
            watch="1",
            resourceVersion=resource_version,
            allowWatchBookmarks="true",
            timeoutSeconds=str(timeout_seconds),
        )
        read = watch_read_timeout(timeout_seconds)
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=15, sock_read=read)
        async with self.session.get(
            path,
            params=query,
            headers=await self._headers(),
            timeout=timeout,
            **self._request_options,
        ) as resp:
            if resp.status == 401:
                # The caller re-lists and watches again, with fresh credentials by then.
                self.conn.credentials_rejected()
            if resp.status >= 300:
                raw = await resp.read()
                try:
                    body: Any = json.loads(raw)
                except ValueError:
                    body = raw.decode(errors="replace")
                raise ApiError(resp.status, body, "WATCH", path)
            buffer = b""
            async for chunk in resp.content.iter_any():
                buffer += chunk
                if b"\n" not in buffer:
                    continue
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    if not line.strip():
                        continue
                    event = json.loads(line)
                    if event.get("type") == "ERROR":
                        obj = event.get("object") or {}
                        raise ApiError(int(obj.get("code", 500)), obj, "WATCH", path)
                    yield event
                # Let other tasks (binder, cycle) run between bursts of decoded events.
                await asyncio.sleep(0)
