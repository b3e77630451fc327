"""Pods for the kopf operators, through the runtime's informer instead of kopf's own watch.

kopf hands every watch event of every object to a per-object worker (a queue, a task, body
wrappers and a memory record each). For the pods of a busy cluster (10,000 pods changing phase)
that is slower than the API server's event rate: the API server closes the watch for
unresponsiveness, kopf re-lists in pages, and a page read later than etcd's compaction window
gets 410 Gone, which kopf treats as fatal - the operator stopped (docs/benchmarks.md, "Jobs
operator"). The informer (`operators.runtime.informer`) reads each event into the operator's
small record in the stream reader itself, lists page by page into records, and re-lists from
scratch on 410. Handlers run synchronously on the event loop and must be cheap.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from fnmatch import fnmatchcase as fnmatch
from typing import Any, TypeVar

import kopf

from operators.controllers.kopf_runner import OperatorContext, namespaces
from operators.runtime.client import JsonDict
from operators.runtime.informer import Handler, Informer, WatchedKind

T = TypeVar("T")


def watch_pods(
    registry: kopf.OperatorRegistry,
    ctx: OperatorContext,
    transform: Callable[[JsonDict], T | None],
    handler: Handler[T | None],
    params: Mapping[str, str],
) -> list[Informer[T | None]]:
    """Informers of the pods `params` select (label/field selectors), one per namespace the
    operator is limited to, or one cluster-wide (also when a namespace is a glob: pods of the
    namespaces it does not match are kept as None), started and stopped with the operator."""
    served = namespaces(ctx.settings)
    read = transform
    if any(set(ns) & set("*?[") for ns in served):
        patterns = served

        def matching(obj: JsonDict) -> T | None:
            namespace = str((obj.get("metadata") or {}).get("namespace") or "")
            return transform(obj) if any(fnmatch(namespace, p) for p in patterns) else None

        read, served = matching, []
    paths = [f"/api/v1/namespaces/{ns}/pods" for ns in served] or ["/api/v1/pods"]
    informers = [
        Informer(
            ctx.client,
            WatchedKind("pods", path, params),
            read,
            handler,
            watch_timeout_seconds=ctx.settings.watch_timeout_seconds,
        )
        for path in paths
    ]
    tasks: set[asyncio.Task[None]] = set()

    @kopf.on.startup(registry=registry)
    async def _start_pods(**_: Any) -> None:
        for informer in informers:
            tasks.add(asyncio.create_task(informer.run(), name=f"{ctx.name}-pods"))

    @kopf.on.cleanup(registry=registry)
    async def _stop_pods(**_: Any) -> None:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        tasks.clear()

    return informers
