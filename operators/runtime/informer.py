"""Informer-style watch cache: list once, then watch from the list's resourceVersion.

Keeps the resourceVersion current from events and bookmarks, resumes a dropped stream where it
stopped, and re-lists on 410 Gone (diffing the new list against the store so deletions that
happened while disconnected are still delivered). Objects are translated on arrival by `transform`,
so the store holds small typed records rather than raw API dicts.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import random
from collections.abc import Callable, Mapping
from typing import Any, Generic, Literal, TypeVar

import aiohttp

from operators.runtime.client import ApiError, JsonDict, KubeClient

log = logging.getLogger(__name__)

T = TypeVar("T")
Key = tuple[str, str]  # (namespace or "", name)
EventType = Literal["ADDED", "MODIFIED", "DELETED"]


def object_key(obj: Mapping[str, Any]) -> Key:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


@dataclasses.dataclass(frozen=True)
class WatchedKind:
    """A collection to list and watch, e.g. ("pods", "/api/v1/pods")."""

    name: str
    path: str
    params: Mapping[str, str] = dataclasses.field(default_factory=dict)
    optional: bool = False
    """When True, a 404 (kind not installed, e.g. a CRD not yet applied) is retried quietly and
    the informer counts as synced with an empty store meanwhile."""


Handler = Callable[[EventType, Key, "T | None", "T | None"], None]


class Informer(Generic[T]):
    """One list+watch loop for one kind. `handler(type, key, new, old)` runs synchronously for each
    change, in order, on the event loop; it must be cheap (record the change, set a flag)."""

    def __init__(
        self,
        client: KubeClient,
        kind: WatchedKind,
        transform: Callable[[JsonDict], T],
        handler: Handler[T] | None = None,
        *,
        watch_timeout_seconds: int = 300,
        page_size: int = 500,
    ) -> None:
        self.client = client
        self.kind = kind
        self.transform = transform
        self.handler = handler
        self.store: dict[Key, T] = {}
        self.resource_version = ""
        self.synced = asyncio.Event()
        self.relists = 0
        self.events = 0
        self.skipped = 0  # objects the transform could not read
        self._watch_timeout = watch_timeout_seconds
        self._page_size = page_size

    def _emit(self, kind: EventType, key: Key, new: T | None, old: T | None) -> None:
        self.events += 1
        if self.handler is not None:
            self.handler(kind, key, new, old)

    def _read(self, key: Key, obj: JsonDict) -> T | None:
        """The object's record, or None when it cannot be read."""
        try:
            return self.transform(obj)
        except Exception:
            # One malformed object must not stop this kind's updates: re-listing would fail on
            # the same object forever. Skip it (and forget any earlier version of it).
            self.skipped += 1
            log.exception(
                "%s: cannot read %s/%s; ignoring it until it changes", self.kind.name, *key
            )
            return None

    def _apply(self, kind: str, obj: JsonDict) -> None:
        key = object_key(obj)
        self._store(key, None if kind == "DELETED" else self._read(key, obj))

    def _store(self, key: Key, new: T | None) -> None:
        old = self.store.get(key)
        if new is None:
            if key in self.store:
                del self.store[key]
                self._emit("DELETED", key, None, old)
            return
        self.store[key] = new
        self._emit("MODIFIED" if old is not None else "ADDED", key, new, old)

    def _replace(self, listed: Mapping[Key, T | None]) -> None:
        for key, new in listed.items():
            self._store(key, new)
        for key in [k for k in self.store if k not in listed]:
            self._store(key, None)

    async def _list(self) -> None:
        # Records are read page by page and the store replaced once all pages are in: a relist
        # of 10,000 pods holds one page of raw objects at a time, and handlers still see one
        # consistent switch from the old view to the listed one.
        listed: dict[Key, T | None] = {}
        rv = ""
        pages = self.client.pages(self.kind.path, self.kind.params, self._page_size)
        async for page, page_version in pages:
            for obj in page:
                key = object_key(obj)
                listed[key] = self._read(key, obj)
            rv = page_version
        self._replace(listed)
        self.resource_version = rv
        self.relists += 1
        self.synced.set()
        log.debug("listed %s: %d objects at rv %s", self.kind.name, len(listed), rv)

    async def run(self) -> None:
        """Forever: list when needed, then watch; every failure path ends in a retry."""
        need_list = True
        backoff = 0.2
        while True:
            try:
                if need_list:
                    await self._list()
                    need_list = False
                async for event in self.client.watch(
                    self.kind.path,
                    self.resource_version,
                    self.kind.params,
                    timeout_seconds=self._watch_timeout,
                ):
                    obj = event.get("object") or {}
                    rv = (obj.get("metadata") or {}).get("resourceVersion")
                    if event.get("type") != "BOOKMARK":
                        self._apply(str(event.get("type")), obj)
                    if rv:
                        self.resource_version = str(rv)
                backoff = 0.2
            except ApiError as err:
                if err.gone:
                    log.info("%s: watch expired (410 Gone); re-listing", self.kind.name)
                    need_list = True
                    continue
                if err.not_found and self.kind.optional:
                    self.synced.set()
                    need_list = True
                    await asyncio.sleep(5.0)
                    continue
                log.warning("%s: %s; retrying in %.1fs", self.kind.name, err, backoff)
                need_list = need_list or err.status in (400, 404, 500)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 10.0)
            except (aiohttp.ClientError, TimeoutError, ConnectionError) as err:
                log.info("%s: watch interrupted (%s); resuming", self.kind.name, type(err).__name__)
                await asyncio.sleep(backoff * (0.5 + random.random()))
                backoff = min(backoff * 2, 10.0)
            except Exception:
                # A garbled stream or a handler bug must not silently stop this kind's updates:
                # start over from a fresh list.
                log.exception("%s: unexpected error in list/watch; re-listing", self.kind.name)
                need_list = True
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 10.0)
