"""HTTP side of EventSink delivery: one CloudEvent (structured JSON mode) per POST."""

from __future__ import annotations

import base64
import json
import ssl
from dataclasses import dataclass
from typing import Any, Final

import aiohttp

from operators.api.events import EventSinkSpec
from operators.jobs.delivery import BATCH_CONTENT_TYPE, CONTENT_TYPE, DEFAULT_TIMEOUT_SECONDS
from operators.runtime.client import KubeClient

USER_AGENT: Final = "sluice-events/1"


class SinkConfigError(Exception):
    """The sink cannot be used as written (unreadable Secret, bad CA bundle)."""


@dataclass(frozen=True)
class SinkTarget:
    url: str
    ssl_context: ssl.SSLContext | None
    token: str | None
    timeout_seconds: float


async def resolve(spec: EventSinkSpec, client: KubeClient) -> SinkTarget:
    """Turn a sink's spec into what a POST needs: its CA as an SSL context, its bearer token."""
    ctx: ssl.SSLContext | None = None
    if spec.ca_bundle:
        try:
            ctx = ssl.create_default_context(cadata=base64.b64decode(spec.ca_bundle).decode())
        except (ssl.SSLError, ValueError) as err:
            raise SinkConfigError(f"spec.caBundle is not a PEM CA bundle: {err}") from None
    token: str | None = None
    ref = spec.auth_secret_ref
    if ref is not None:
        path = f"/api/v1/namespaces/{ref.namespace}/secrets/{ref.name}"
        try:
            secret = await client.get(path)
        except Exception as err:  # noqa: BLE001 - any failure means the same to the admin
            raise SinkConfigError(f"Secret {ref.namespace}/{ref.name}: {err}") from None
        raw = (secret.get("data") or {}).get(ref.key)
        if not raw:
            raise SinkConfigError(f"Secret {ref.namespace}/{ref.name} has no key {ref.key!r}")
        token = base64.b64decode(raw).decode().strip()
    timeout = float(spec.timeout_seconds or DEFAULT_TIMEOUT_SECONDS)
    return SinkTarget(spec.url, ctx, token, timeout)


async def post_event(
    session: aiohttp.ClientSession,
    target: SinkTarget,
    event: dict[str, Any] | list[dict[str, Any]],
) -> tuple[int, str]:
    """POST one event, or a batch (a list: CloudEvents batched mode); returns (HTTP status, a
    short error text or ""). Connection problems and timeouts come back as status 0, which
    callers retry."""
    content_type = BATCH_CONTENT_TYPE if isinstance(event, list) else CONTENT_TYPE
    headers = {"Content-Type": content_type, "User-Agent": USER_AGENT}
    if target.token:
        headers["Authorization"] = f"Bearer {target.token}"
    try:
        async with session.post(
            target.url,
            data=json.dumps(event, separators=(",", ":")),
            headers=headers,
            ssl=target.ssl_context if target.ssl_context is not None else True,
            timeout=aiohttp.ClientTimeout(total=target.timeout_seconds),
        ) as resp:
            if 200 <= resp.status < 300:
                await resp.read()
                return resp.status, ""
            text = (await resp.text(errors="replace"))[:200]
            return resp.status, f"HTTP {resp.status}: {text}".strip()
    except TimeoutError:
        return 0, f"timed out after {target.timeout_seconds:g}s"
    except aiohttp.ClientError as err:
        return 0, f"{type(err).__name__}: {err}"[:300]
