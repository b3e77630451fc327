"""Review findings on the live scheduler runtime: leadership fencing of writes, half-bound repair,
per-decision failure isolation, de-duplicated Events and preemption counts."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from operators.controllers.scheduler_apply import DecisionApplier
from operators.controllers.scheduler_loop import SchedulerOperator
from operators.controllers.scheduler_status import StatusWriter
from operators.runtime.binder import Binder
from operators.runtime.client import ApiError
from operators.runtime.events import MAX_REMEMBERED, EventRecorder
from operators.runtime.evictor import Evictor
from operators.runtime.leader import LeaderElector, LeaseConfig
from operators.runtime.metrics import SchedulerMetrics
from operators.runtime.settings import SchedulerSettings
from operators.scheduler import decisions as D
from operators.scheduler.session import SessionResult

from .factories import node, pod, podgroup
from .test_apply import applier, bind, gang
from .test_cache import Harness
from .test_leader import LeaseStore

# ------------------------------------------------------------------------------------------------
# 1. split brain: a leader whose renewal stalls stops writing at the renew deadline
# ------------------------------------------------------------------------------------------------


class StallingLeaseStore(LeaseStore):
    """Answers like the API server until `stall` is set; then every GET hangs (never answers)."""

    def __init__(self) -> None:
        super().__init__()
        self.stall = False

    async def get(self, path: str, params: Any = None) -> dict[str, Any]:
        if self.stall:
            await asyncio.Event().wait()
        return await super().get(path, params)


def fast_elector(store: LeaseStore, identity: str = "a") -> LeaderElector:
    cfg = LeaseConfig(
        "sched", "kube-system", identity, lease_duration=1.0, renew_deadline=0.3, retry_period=0.05
    )
    api: Any = store
    return LeaderElector(api, cfg)


async def test_stalled_renewal_loses_leadership_at_the_renew_deadline() -> None:
    store = StallingLeaseStore()
    elector = fast_elector(store)
    await elector.acquire()
    assert elector.valid()
    await asyncio.sleep(0.12)
    store.stall = True
    started = time.monotonic()
    # Before the fix hold() waited on the stalled GET for as long as the request timeout allowed.
    await asyncio.wait_for(elector.hold(), timeout=2.0)
    assert time.monotonic() - started < 0.5
    assert not elector.is_leader
    assert not elector.valid()


async def test_valid_only_within_renew_deadline_of_the_last_renewal_start() -> None:
    store = LeaseStore()
    api: Any = store
    elector = LeaderElector(api, LeaseConfig("sched", "kube-system", "a"))  # renew_deadline 10 s
    assert not elector.valid()  # not acquired yet
    await elector.acquire()
    t = elector.renewed_at
    assert elector.valid(t + 9.9)
    assert not elector.valid(t + 10.0)
    elector.is_leader = False
    assert not elector.valid(t)


async def test_applier_issues_nothing_once_leadership_is_not_valid() -> None:
    h = Harness()
    gang(h, 2)
    app, binder = applier(h)
    leading = [False]
    app.may_write = lambda: leading[0]
    result = SessionResult(decisions=(bind("g-0", "n0"), bind("g-1", "n1")), explanations={})
    assert app.apply(result, now=1.0)["bind"] == 0
    assert h.cache.assumed == {}
    # Leadership lapses between apply() and the gang's POSTs: the assumed pods are forgotten.
    leading[0] = True
    assert app.apply(result, now=1.0)["bind"] == 2
    leading[0] = False
    await app.drain()
    assert binder.gangs == []
    assert h.cache.assumed == {}


async def test_cancel_drops_writes_not_yet_issued() -> None:
    h = Harness()
    gang(h, 2)
    app, binder = applier(h)
    started = asyncio.Event()

    async def stalled_bind_gang(requests: Any) -> Any:
        started.set()
        await asyncio.Event().wait()

    binder.bind_gang = stalled_bind_gang  # type: ignore[method-assign]
    app.apply(
        SessionResult(decisions=(bind("g-0", "n0"), bind("g-1", "n1")), explanations={}), now=1.0
    )
    await asyncio.wait_for(started.wait(), 1.0)
    assert app.cancel() == 1
    await asyncio.wait_for(app.drain(), 1.0)
    assert app.in_flight == 0


class SlowPatches:
    """merge_patch that holds until released, recording how many are in flight at once."""

    def __init__(self) -> None:
        self.in_flight = 0
        self.peak = 0
        self.done = 0
        self.release = asyncio.Event()

    async def merge_patch(self, path: str, body: Any) -> dict[str, Any]:
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        await self.release.wait()
        self.in_flight -= 1
        self.done += 1
        return {}


async def test_nominations_are_bounded_by_the_write_semaphore() -> None:
    h = Harness()
    for i in range(10):
        h.pod(pod(f"p-{i}"))
    app, _ = applier(h)
    api = SlowPatches()
    app.client = api  # type: ignore[assignment]
    app._write_sem = asyncio.Semaphore(3)
    nominations = tuple(
        D.Nominate(
            task=f"uid-p-{i}", group=f"pod:uid-p-{i}", namespace="ns", name=f"p-{i}", node="n1"
        )
        for i in range(10)
    )
    assert (
        app.apply(SessionResult(decisions=nominations, explanations={}), now=1.0)["nominate"] == 10
    )
    for _ in range(5):
        await asyncio.sleep(0)
    assert api.peak == 3
    api.release.set()
    await app.drain()
    assert api.done == 10
    assert api.peak == 3


class NullApi:
    async def merge_patch(self, path: str, body: Any) -> dict[str, Any]:
        return {}


class InvalidElector:
    is_leader = True

    def valid(self, now: float | None = None) -> bool:
        return False


async def test_cycle_applies_nothing_when_the_lease_renewal_is_overdue() -> None:
    h = Harness()
    h.node(node("n1"))
    h.pod(pod("web-1"))
    op = SchedulerOperator(SchedulerSettings(metrics_port=0))
    op.cache = h.cache
    app, binder = applier(h)
    api: Any = NullApi()
    status = StatusWriter(api, h.cache, SchedulerMetrics(), 1)
    elector: Any = InvalidElector()
    op.elector = elector
    op._schedule_wanted = False
    await op.cycle(app, status)
    await app.drain()
    assert binder.gangs == []
    assert h.cache.assumed == {}
    assert op._schedule_wanted  # decided afresh should the renewal still succeed
    op.elector = None  # leader election off: the same cycle binds
    await op.cycle(app, status)
    await app.drain()
    assert binder.gangs == [["web-1"]]


# ------------------------------------------------------------------------------------------------
# 3. one decision that raises does not abort the rest of the cycle
# ------------------------------------------------------------------------------------------------


def failure_count(app: Any, kind: str) -> float:
    value = app.metrics.registry.get_sample_value("sluice_apply_failures_total", {"decision": kind})
    return float(value or 0.0)


async def test_a_decision_that_raises_is_skipped_and_the_rest_still_apply(caplog: Any) -> None:
    h = Harness()
    gang(h, 2)
    h.pod(pod("v-0", node="n9", phase="Running"))
    h.pod(pod("p-1"))
    app, binder = applier(h)

    def broken_peer_ref(group_uid: str) -> str:
        raise RuntimeError("unexpected object shape")

    app.cache.peer_ref = broken_peer_ref  # type: ignore[method-assign]
    result = SessionResult(
        decisions=(
            D.MarkWillEvict(victim="pod:uid-v-0", preemptor="pg-g", deadline=2e9),
            D.Nominate(task="uid-p-1", group="pod:uid-p-1", namespace="ns", name="p-1", node="n1"),
            bind("g-0", "n0"),
            bind("g-1", "n1"),
        ),
        explanations={},
    )
    app.client = NullApi()  # type: ignore[assignment]
    counts = app.apply(result, now=1.0)
    assert counts["bind"] == 2
    assert counts["nominate"] == 1
    await app.drain()
    assert binder.gangs == [["g-0", "g-1"]]
    assert failure_count(app, "markwillevict") == 1
    assert "applying markwillevict for Pod ns/v-0" in caplog.text


async def test_a_gang_that_raises_while_being_issued_leaves_no_assumption() -> None:
    h = Harness()
    gang(h, 2)
    h.pod(pod("solo"))
    app, binder = applier(h)
    real_assume = h.cache.assume

    def assume(pod_uid: str, node: str, gpu_ids: tuple[int, ...], now: float) -> bool:
        if pod_uid == "uid-g-1":
            raise ValueError("bad gpu ids")
        return real_assume(pod_uid, node, gpu_ids, now)

    h.cache.assume = assume  # type: ignore[method-assign]
    solo = D.Bind(task="uid-solo", group="pod:uid-solo", namespace="ns", name="solo", node="n5")
    result = SessionResult(decisions=(bind("g-0", "n0"), bind("g-1", "n1"), solo), explanations={})
    assert app.apply(result, now=1.0)["bind"] == 1
    await app.drain()
    assert binder.gangs == [["solo"]]
    assert "uid-g-0" not in h.cache.assumed
    assert "pg-g" not in app.binding_groups
    assert failure_count(app, "bind") == 1


async def test_a_binder_that_raises_is_logged_and_counted() -> None:
    h = Harness()
    gang(h, 2)
    app, binder = applier(h)

    async def exploding_bind_gang(requests: Any) -> Any:
        raise RuntimeError("boom")

    binder.bind_gang = exploding_bind_gang  # type: ignore[method-assign]
    app.apply(
        SessionResult(decisions=(bind("g-0", "n0"), bind("g-1", "n1")), explanations={}), now=1.0
    )
    await app.drain()
    assert failure_count(app, "bind") == 1
    assert app.binding_groups == set()


# ------------------------------------------------------------------------------------------------
# 4. a situation repeated every cycle: one Event per window, one preemption per victim
# ------------------------------------------------------------------------------------------------


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
