from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from typing import Any

import pytest

from operators.runtime.client import ApiError, KubeClient
from operators.runtime.informer import Informer, WatchedKind


def obj(name: str, rv: str, value: int = 0) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "resourceVersion": rv}, "v": value}


class ScriptedApi:
    """A narrow stand-in for KubeClient.list/watch: each watch call plays the next script."""

    def __init__(self, lists: list[list[dict[str, Any]]], watches: list[list[Any]]) -> None:
        self.lists = lists
        self.watches = watches
        self.watch_calls: list[str] = []
        self.list_calls = 0
        self.pages_read = 0
        self.done = asyncio.Event()

    async def pages(
        self, path: str, params: Mapping[str, str] | None = None, page_size: int = 500
    ) -> AsyncIterator[tuple[list[dict[str, Any]], str]]:
        items = self.lists[min(self.list_calls, len(self.lists) - 1)]
        self.list_calls += 1
        self.pages_read = 0
        for start in range(0, max(len(items), 1), page_size):
            self.pages_read += 1
            yield items[start : start + page_size], str(10 * self.list_calls)

    async def watch(
        self, path: str, resource_version: str, params: Any = None, **_: Any
    ) -> AsyncIterator[dict[str, Any]]:
        self.watch_calls.append(resource_version)
        if not self.watches:
            self.done.set()
            await asyncio.sleep(3600)
        for item in self.watches.pop(0):
            if isinstance(item, Exception):
                raise item
            yield item


async def run_until_done(api: ScriptedApi, page_size: int = 500) -> Informer[int]:
    seen: list[tuple[str, str]] = []
    informer: Informer[int] = Informer(
        KubeClient.__new__(KubeClient),
        WatchedKind("things", "/x"),
        lambda o: int(o["v"]),
        lambda kind, key, new, old: seen.append((kind, key[1])),
        page_size=page_size,
    )
    informer.client = api  # type: ignore[assignment]
    informer.seen = seen  # type: ignore[attr-defined]
    task = asyncio.create_task(informer.run())
    await asyncio.wait_for(api.done.wait(), 5)
    task.cancel()
    return informer


async def test_list_then_watch_tracks_resource_version_and_bookmarks() -> None:
    api = ScriptedApi(
        [[obj("a", "1", 1)]],
        [
            [
                {"type": "ADDED", "object": obj("b", "11", 2)},
                {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "15"}}},
            ],
        ],
    )
    inf = await run_until_done(api)
    assert inf.store == {("ns", "a"): 1, ("ns", "b"): 2}
    assert api.watch_calls == ["10", "15"]  # resumed from the bookmark, no re-list
    assert api.list_calls == 1
    assert inf.seen == [("ADDED", "a"), ("ADDED", "b")]  # type: ignore[attr-defined]


async def test_gone_relists_and_reports_what_vanished_meanwhile() -> None:
    api = ScriptedApi(
        [[obj("a", "1"), obj("b", "2")], [obj("b", "3", 7)]],
        [[ApiError(410, {"reason": "Expired"})]],
    )
    inf = await run_until_done(api)
    assert api.list_calls == 2
    assert inf.store == {("ns", "b"): 7}
    assert ("DELETED", "a") in inf.seen  # type: ignore[attr-defined]
    assert inf.synced.is_set()


@pytest.mark.parametrize("event_type", ["MODIFIED", "DELETED"])
async def test_watch_events_update_store(event_type: str) -> None:
    api = ScriptedApi([[obj("a", "1", 1)]], [[{"type": event_type, "object": obj("a", "12", 5)}]])
    inf = await run_until_done(api)
    assert inf.store == ({("ns", "a"): 5} if event_type == "MODIFIED" else {})


async def test_a_paged_relist_switches_the_store_once_every_page_is_read() -> None:
    """Pages are read into records one at a time; handlers see the listed view only once the
    last page is in (never a store half old, half new), and an unreadable object is dropped."""
    first = [obj("a", "1", 1), obj("b", "2", 2), obj("c", "3", 3)]
    second = [obj("b", "4", 20), {"metadata": {"name": "c", "namespace": "ns"}}, obj("d", "5", 4)]
    api = ScriptedApi([first, second], [[ApiError(410, {"reason": "Expired"})]])
    reads: list[int] = []
    informer: Informer[int] = Informer(
        KubeClient.__new__(KubeClient),
        WatchedKind("things", "/x"),
        lambda o: int(o["v"]),
        lambda *_: reads.append(api.pages_read),
        page_size=1,
    )
    informer.client = api  # type: ignore[assignment]
    task = asyncio.create_task(informer.run())
    await asyncio.wait_for(api.done.wait(), 5)
    task.cancel()
    assert api.list_calls == 2
    assert informer.store == {("ns", "b"): 20, ("ns", "d"): 4}
    assert informer.skipped == 1
    assert set(reads) == {3}  # every handler call came after the third (last) page
