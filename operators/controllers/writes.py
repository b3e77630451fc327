"""Small pieces the pool, queue and podgroup operators share for their API writes."""

from __future__ import annotations

import asyncio
import datetime
import logging
from collections.abc import Awaitable, Mapping, Sequence
from typing import Any

from operators.runtime.client import ApiError, KubeClient
from operators.runtime.operator_metrics import OperatorMetrics

log = logging.getLogger(__name__)

WRITE_CONCURRENCY = 16


def now_text() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def single(index: Mapping[Any, Any]) -> dict[Any, Any]:
    """A kopf index (key -> store of values) as key -> value, for indexes of one object per key."""
    return {key: value for key, store in index.items() for value in store}


async def ensure_exists(client: KubeClient, path: str, body: dict[str, Any]) -> bool:
    """Create a built-in object unless it exists; True when this call created it."""
    try:
        await client.post(path, body)
    except ApiError as err:
        if err.conflict:
            return False
        raise
    log.info("created built-in %s %s", body["kind"], body["metadata"]["name"])
    return True


async def bounded(jobs: Sequence[Awaitable[Any]], limit: int = WRITE_CONCURRENCY) -> list[Any]:
    """Await `jobs` with at most `limit` in flight; exceptions are returned, not raised."""
    sem = asyncio.Semaphore(limit)

    async def one(job: Awaitable[Any]) -> Any:
        async with sem:
            return await job

    return await asyncio.gather(*(one(j) for j in jobs), return_exceptions=True)


def failures(
    results: Sequence[Any], what: str, metrics: OperatorMetrics | None = None
) -> list[BaseException]:
    """Failed writes worth a retry (an object deleted meanwhile is not), logged and counted."""
    failed = [
        r
        for r in results
        if isinstance(r, BaseException) and not (isinstance(r, ApiError) and r.not_found)
    ]
    for error in failed[:3]:
        log.warning("%s write failed: %s", what, error)
    if metrics is not None:
        metrics.wrote(len(results) - len(failed), len(failed))
    return failed
