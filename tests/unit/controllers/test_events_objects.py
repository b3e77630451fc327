"""PodGroup notices through the events operator: logged on the object before they are sent.

A narrow client-call test: the fake API only records (or refuses) the status patches the
controller makes; the receiver is a real HTTP server on localhost.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
from collections.abc import AsyncIterator, Callable
from typing import Any

from aiohttp import web

from operators.controllers.events import EventsController, EventsSettings
from operators.runtime.client import ApiError
from operators.runtime.metrics import EventsMetrics

GROUPS = "/apis/scheduling.sluice.dev/v1alpha1/namespaces/team-a/sluicepodgroups"


class StatusApi:
    def __init__(self) -> None:
        self.patches: list[tuple[str, dict[str, Any]]] = []
        self.refuse = 0

    async def merge_patch(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        if self.refuse:
            self.refuse -= 1
            raise ApiError(500, "etcd is slow", path)
        self.patches.append((path, copy.deepcopy(body)))
        return {}

    async def json_patch(self, path: str, ops: list[dict[str, Any]]) -> dict[str, Any]:
        """The status writes (`status_patch`): recorded as the uid they test and the status
        fields they set."""
        test, *adds = ops
        assert (test["op"], test["path"]) == ("test", "/metadata/uid")
        fields = {op["path"].rsplit("/", 1)[1]: op["value"] for op in adds}
        return await self.merge_patch(path, {"metadata": {"uid": test["value"]}, "status": fields})

    def logs(self, name: str) -> list[dict[str, Any]]:
        return [b["status"]["eventLog"] for p, b in self.patches if p == f"{GROUPS}/{name}/status"]


@contextlib.asynccontextmanager
async def receiving() -> AsyncIterator[tuple[str, list[dict[str, Any]]]]:
    """A receiver on localhost, started in the test's own event loop."""
    got: list[dict[str, Any]] = []

    async def handle(request: web.Request) -> web.Response:
        body = await request.json()
        if isinstance(body, list):
            assert request.content_type == "application/cloudevents-batch+json"
            got.extend(body)
            got.append({"batch": len(body)})  # where each POST ended
        else:
            assert request.content_type == "application/cloudevents+json"
            got.append(body)
        return web.Response(status=204)

    app = web.Application()
    app.router.add_post("/", handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    yield f"http://127.0.0.1:{port}/", got
    await runner.cleanup()


def group(name: str, status: dict[str, Any], uid: str = "") -> dict[str, Any]:
    meta = {"name": name, "namespace": "team-a", "uid": uid or f"uid-{name}"}
    return {"metadata": meta, "status": status}


async def until(check: Callable[[], bool]) -> None:
    for _ in range(2000):  # 20 s: a failed log write is tried again at the next 5 s flush
        if check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("timed out")


async def test_notices_are_written_to_the_group_before_they_are_sent() -> None:
    async with receiving() as (url, got):
        await notices_are_written_to_the_group_before_they_are_sent(url, got)


async def notices_are_written_to_the_group_before_they_are_sent(
    url: str, got: list[dict[str, Any]]
) -> None:
    api = StatusApi()
    settings = EventsSettings(flush_seconds=0.01)
    controller = EventsController(api, settings, EventsMetrics())  # type: ignore[arg-type]
    flusher = asyncio.create_task(controller.flusher())
    try:
        sink = {"url": url, "filter": {"kinds": ["PodGroup"]}}
        controller.on_sink("ADDED", {"metadata": {"name": "s", "generation": 1}, "spec": sink})
        api.refuse = 1  # the first log write fails: nothing may be sent before it is stored
        controller.on_object("PodGroup", "ADDED", group("g", {"phase": "Running"}))
        await until(lambda: bool(api.logs("g")))
        await until(lambda: len(got) == 1)
        assert got[0]["id"] == "uid-g-1"
        first = api.logs("g")[0]
        assert [e["to"] for e in first["entries"]] == ["Running"]
        assert first["observed"] == {"phase": "Running", "preemption": None, "evictedAt": None}
        # The patch tests the uid, so it cannot land on a namesake created meanwhile.
        assert all(b["metadata"] == {"uid": "uid-g"} for p, b in api.patches if "/g/" in p)

        marked = {
            "phase": "Running",
            "preemption": {"role": "WillEvict", "deadline": "2026-01-01T00:00:30Z"},
        }
        controller.on_object("PodGroup", "MODIFIED", group("g", marked))
        await until(lambda: len(got) == 2)
        assert got[1]["type"] == "dev.sluice.podgroup.willevict"
        assert got[1]["data"]["deadline"] == "2026-01-01T00:00:30Z"
        await until(
            lambda: api.logs("g")[-1].get("delivery") == [{"sink": "s", "lastDeliveredSequence": 2}]
        )
        written = api.logs("g")[-1]

        # A group nobody subscribes to (another namespace's filter would be the same) costs no
        # write; the control above got one.
        controller.on_object(
            "Queue",
            "ADDED",
            {"metadata": {"name": "q", "uid": "uid-q"}, "status": {"state": "Open"}},
        )
        await asyncio.sleep(0.2)
        assert not [p for p, _ in api.patches if "sluicequeues" in p]
    finally:
        flusher.cancel()
        await controller.stop()

    # A restarted operator reads the log and cursors back from the object: nothing is derived
    # or sent again, and nothing is written.
    before = len(got), len(api.patches)
    again = EventsController(api, settings, EventsMetrics())  # type: ignore[arg-type]
    flusher = asyncio.create_task(again.flusher())
    try:
        again.on_sink(
            "ADDED",
            {
                "metadata": {"name": "s", "generation": 1},
                "spec": {"url": url, "filter": {"kinds": ["PodGroup"]}},
            },
        )
        again.on_object("PodGroup", "ADDED", group("g", {**marked, "eventLog": written}))
        await asyncio.sleep(0.3)
        assert (len(got), len(api.patches)) == before
    finally:
        flusher.cancel()
        await again.stop()


async def test_a_batching_sink_gets_an_objects_events_in_order_in_batches() -> None:
    """batchSize 3, five transitions of one job: two POSTs (3 + 2) in seq order, and the
    cursor at the end (the test above is the control: one event per POST without batchSize)."""
    async with receiving() as (url, got):
        api = StatusApi()
        controller = EventsController(api, EventsSettings(flush_seconds=0.01), EventsMetrics())  # type: ignore[arg-type]
        try:
            spec = {"url": url, "filter": {"namespaces": ["team-a"]}, "batchSize": 3}
            controller.on_sink("ADDED", {"metadata": {"name": "b", "generation": 1}, "spec": spec})
            entries = [
                {"seq": n, "level": "Job", "name": "train", "to": "Running"} for n in range(1, 6)
            ]
            job = {
                "metadata": {"name": "train", "namespace": "team-a", "uid": "uid-t"},
                "status": {"transitions": entries, "transitionSeq": 5},
            }
            controller.on_job("VCJob", "ADDED", job)
            await until(lambda: len(got) == 7)
            assert got == [
                *got[:3],
                {"batch": 3},
                *got[4:6],
                {"batch": 2},
            ]
            ids = [e["id"] for e in got if "id" in e]
            assert ids == [f"uid-t-{n}" for n in range(1, 6)]
            view = controller.jobs[("VCJob", "team-a", "train")]
            await until(lambda: view.cursors == {"b": 5})  # moved once the answer is read
            assert controller.sinks["b"].delivered == 5
        finally:
            await controller.stop()
