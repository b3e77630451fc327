"""A victim's status.lastEviction, written before its pods are evicted
(StatusWriter.stamp_eviction): it lands on the PodGroup that was decided about or nowhere, and
a mass preemption's stamps are bounded like the evictions themselves."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

from operators.controllers.scheduler_apply import DecisionApplier
from operators.controllers.scheduler_status import StatusWriter
from operators.runtime.client import ApiError
from operators.runtime.events import EventRecorder
from operators.runtime.evictor import Evictor
from operators.runtime.metrics import SchedulerMetrics
from operators.scheduler import decisions as D
from operators.scheduler.session import SessionResult

from .factories import pod, podgroup
from .test_apply import RecordingBinder
from .test_cache import Harness


class PodGroupApi:
    """PodGroups by name as the API server holds them: a status merge patch lands on whatever
    object has the name; a JSON patch is applied all or nothing (422 when a `test` fails or a
    parent is missing). Counts the status writes in flight at once; evictions are recorded."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.evicted: list[str] = []
        self.in_flight = 0
        self.peak = 0

    def put(self, name: str, uid: str, status: dict[str, Any] | None = None) -> None:
        obj: dict[str, Any] = {"metadata": {"name": name, "uid": uid}}
        if status is not None:
            obj["status"] = status
        self.objects[name] = obj

    def _name(self, path: str) -> str:
        return path.removesuffix("/status").rsplit("/", 1)[-1]

    async def _writing(self) -> None:
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        await asyncio.sleep(0.001)
        self.in_flight -= 1

    async def merge_patch(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        await self._writing()
        obj = self.objects[self._name(path)]
        obj["status"] = {**(obj.get("status") or {}), **body["status"]}
        return obj

    async def json_patch(self, path: str, ops: list[dict[str, Any]]) -> dict[str, Any]:
        await self._writing()
        name = self._name(path)
        if name not in self.objects:
            raise ApiError(404, {"reason": "NotFound"}, "PATCH", path)
        changed = copy.deepcopy(self.objects[name])
        for op in ops:
            *parents, last = op["path"].lstrip("/").split("/")
            into: Any = changed
            for part in parents:
                if not isinstance(into, dict) or part not in into:
                    raise ApiError(422, {"reason": "Invalid"}, "PATCH", path)
                into = into[part]
            if op["op"] == "test" and into.get(last) != op["value"]:
                raise ApiError(422, {"reason": "Invalid"}, "PATCH", path)
            if op["op"] == "add":
                into[last] = copy.deepcopy(op["value"])
        self.objects[name] = changed
        return changed

    async def get(self, path: str) -> dict[str, Any]:
        name = self._name(path)
        if name not in self.objects:
            raise ApiError(404, {"reason": "NotFound"}, "GET", path)
        return copy.deepcopy(self.objects[name])

    async def post(self, path: str, body: Any, params: Any = None) -> dict[str, Any]:
        if path.endswith("/eviction"):
            self.evicted.append(body["metadata"]["name"])
        return {}


def victims(h: Harness, api: PodGroupApi, n: int) -> tuple[D.Evict, ...]:
    out = []
    for i in range(n):
        name = f"v{i}"
        h.group(podgroup(name, status={"phase": "Running"}))
        h.pod(pod(f"{name}-0", group=name, node="n1", phase="Running"))
        api.put(name, f"pg-{name}", {"phase": "Running"})
        out.append(D.Evict(f"pg-{name}", (f"uid-{name}-0",), D.EvictReason.PREEMPTED, "room"))
    return tuple(out)


def wired(h: Harness, api: PodGroupApi, bound: int) -> tuple[DecisionApplier, StatusWriter]:
    """Applier and status writer as the scheduler wires them: evictions (and bindings) share
    one bound of `bound` writes in flight; the status writes have their own."""
    client: Any = api
    sem = asyncio.Semaphore(bound)
    evictor = Evictor(client, sem)
    app = DecisionApplier(
        client,
        h.cache,
        RecordingBinder(),
        evictor,
        EventRecorder(client, "t"),
        SchedulerMetrics(),
        write_semaphore=sem,
    )
    writer = StatusWriter(client, h.cache, SchedulerMetrics(), concurrency=bound)
    app.before_evict = writer.stamp_eviction
    return app, writer


async def test_a_stamp_never_lands_on_a_same_name_successor() -> None:
    h = Harness()
    api = PodGroupApi()
    (evict,) = victims(h, api, 1)
    # The victim was deleted and created again under its name; the watch has not shown it yet.
    api.put("v0", "pg-v0-successor", {"phase": "Pending"})
    _, writer = wired(h, api, 4)
    writer.note_evictions((evict,), "t")
    await writer.stamp_eviction("pg-v0")
    assert api.objects["v0"]["status"] == {"phase": "Pending"}


async def test_a_stamp_lands_on_its_group_with_or_without_a_status() -> None:
    h = Harness()
    api = PodGroupApi()
    first, second = victims(h, api, 2)
    del api.objects["v1"]["status"]  # never written: a stamp has no parent to go into
    _, writer = wired(h, api, 4)
    writer.note_evictions((first, second), "t")
    for evict in (first, second):
        await writer.stamp_eviction(evict.group)
    stamp = {"reason": "Preempted", "time": "t", "message": "room"}
    assert api.objects["v0"]["status"] == {"phase": "Running", "lastEviction": stamp}
    assert api.objects["v1"]["status"] == {"lastEviction": stamp}


async def test_a_mass_preemptions_stamps_are_bounded_like_its_evictions() -> None:
    h = Harness()
    api = PodGroupApi()
    decisions = victims(h, api, 40)
    app, writer = wired(h, api, 3)
    result = SessionResult(decisions=decisions, explanations={})
    writer.note_evictions(result.decisions, "t")
    app.apply(result, 1.0)
    await app.drain()
    assert sorted(api.evicted) == sorted(f"v{i}-0" for i in range(40))
    assert all("lastEviction" in obj["status"] for obj in api.objects.values())
    assert api.peak <= 3
