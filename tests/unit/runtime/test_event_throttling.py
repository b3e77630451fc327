"""A situation that repeats every cycle posts one Event per window and counts one preemption per
victim."""

from __future__ import annotations

import asyncio
from typing import Any

from operators.controllers.scheduler_apply import DecisionApplier
from operators.runtime.binder import Binder
from operators.runtime.client import ApiError
from operators.runtime.events import MAX_REMEMBERED, EventRecorder
from operators.runtime.evictor import Evictor
from operators.runtime.metrics import SchedulerMetrics
from operators.scheduler import decisions as D
from operators.scheduler.session import SessionResult

from .factories import pod, podgroup
from .test_apply import applier
from .test_cache import Harness


class EventsAndEvictionsApi:
    """Records Event POSTs; answers evictions with 429 (a PodDisruptionBudget) while `blocked`."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.evictions = 0
        self.blocked = True

    async def post(self, path: str, body: Any, params: Any = None) -> dict[str, Any]:
        if path.endswith("/events"):
            self.events.append(body)
        elif path.endswith("/eviction"):
            self.evictions += 1
            if self.blocked:
                raise ApiError(429, {"reason": "TooManyRequests"})
        return {}


async def settle(recorder: EventRecorder) -> None:
    for _ in range(5):
        await asyncio.sleep(0)
    await asyncio.gather(*list(recorder._tasks))


async def test_repeated_event_is_posted_once_per_window_and_memory_is_bounded() -> None:
    api = EventsAndEvictionsApi()
    clock = [1000.0]
    client: Any = api
    recorder = EventRecorder(client, "t", repeat_window=300.0, clock=lambda: clock[0])
    obj = {"kind": "PodGroup", "namespace": "ns", "name": "g", "uid": "pg-g"}
    for _ in range(3):
        recorder.post(obj, "Warning", "FailedBinding", "2 of 4 bindings failed")
        clock[0] += 30.0
    recorder.post(obj, "Warning", "FailedBinding", "1 of 4 bindings failed")  # a new message
    recorder.post({**obj, "uid": "pg-other"}, "Warning", "FailedBinding", "2 of 4 bindings failed")
    await settle(recorder)
    assert len(api.events) == 3
    clock[0] += 300.0  # still happening after the window: posted again
    recorder.post(obj, "Warning", "FailedBinding", "2 of 4 bindings failed")
    await settle(recorder)
    assert len(api.events) == 4
    for i in range(5000):
        recorder.post({**obj, "uid": f"u{i}"}, "Normal", "R", "m")
    assert recorder.remembered <= MAX_REMEMBERED
    await settle(recorder)


async def test_victim_blocked_by_a_budget_is_counted_and_announced_once() -> None:
    h = Harness()
    h.group(podgroup("low", min_member=2, status={"phase": "Running"}))
    for i in range(2):
        h.pod(pod(f"low-{i}", group="low", node="n1", phase="Running"))
    api = EventsAndEvictionsApi()
    client: Any = api
    sem = asyncio.Semaphore(4)
    evictor = Evictor(client, sem)
    metrics = SchedulerMetrics()
    app = DecisionApplier(
        client, h.cache, Binder(client, evictor, sem), evictor, EventRecorder(client, "t"), metrics
    )
    evict = D.Evict(
        group="pg-low",
        tasks=("uid-low-0", "uid-low-1"),
        reason=D.EvictReason.PREEMPTED,
        message="to make room for ns/high",
        preemptor="pg-high",
    )
    for _ in range(4):  # the budget refuses; every cycle decides the same again
        assert app.apply(SessionResult(decisions=(evict,), explanations={}), now=1.0)["evict"] == 2
        await app.drain()
        await settle(app.events)
    assert api.evictions == 8
    preemptions = metrics.registry.get_sample_value(
        "sluice_preemptions_total", {"kind": "immediate"}
    )
    assert preemptions == 1
    assert [e["reason"] for e in api.events] == ["Preempted"]
    # Once evicted, choosing the same group again later is a new preemption.
    api.blocked = False
    app.apply(SessionResult(decisions=(evict,), explanations={}), now=2.0)
    await app.drain()
    app.apply(SessionResult(decisions=(evict,), explanations={}), now=3.0)
    await app.drain()
    preemptions = metrics.registry.get_sample_value(
        "sluice_preemptions_total", {"kind": "immediate"}
    )
    assert preemptions == 2


async def test_delayed_victim_is_counted_when_marked_not_again_at_its_deadline() -> None:
    h = Harness()
    h.group(podgroup("low", min_member=1, status={"phase": "Running"}))
    h.pod(pod("low-0", group="low", node="n1", phase="Running"))
    app, _ = applier(h)
    api = EventsAndEvictionsApi()
    api.blocked = False
    client: Any = api
    app.client = client
    app.evictor.client = client
    app.events.client = client
    mark = D.MarkWillEvict(victim="pg-low", preemptor="pg-high", deadline=2e9)
    due = D.Evict(
        group="pg-low",
        tasks=("uid-low-0",),
        reason=D.EvictReason.DELAYED_PREEMPTION_DUE,
        message="deadline passed",
    )
    app.apply(SessionResult(decisions=(mark,), explanations={}), now=1.0)
    app.apply(SessionResult(decisions=(due,), explanations={}), now=2.0)
    await app.drain()
    value = app.metrics.registry.get_sample_value("sluice_preemptions_total", {"kind": "delayed"})
    assert value == 1
