"""Leadership fences every write: a leader whose Lease renewal stalls stops binding, evicting,
nominating and writing status at the renew deadline."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from operators.controllers.scheduler_loop import SchedulerOperator
from operators.controllers.scheduler_status import StatusWriter
from operators.runtime.leader import LeaderElector, LeaseConfig
from operators.runtime.metrics import SchedulerMetrics
from operators.runtime.settings import SchedulerSettings
from operators.scheduler import decisions as D
from operators.scheduler.session import SessionResult

from .factories import node, pod
from .test_apply import applier, bind, gang
from .test_cache import Harness
from .test_leader import LeaseStore


class StallingLeaseStore(LeaseStore):
    """Answers like the API server until `stall` is set; then every GET hangs (never answers)."""

    def __init__(self) -> None:
        super().__init__()
        self.stall = False
        self.cut_off = 0  # stalled GETs the elector gave up on

    async def get(self, path: str, params: Any = None) -> dict[str, Any]:
        if self.stall:
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                self.cut_off += 1
                raise
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
    # hold() cuts the stalled renewal off at the renew deadline and returns; before the fix it
    # waited on the stalled GET for as long as the request timeout allowed (here: forever, so
    # the outer timeout, a guard against hanging the suite, would fire instead).
    await asyncio.wait_for(elector.hold(), timeout=5.0)
    assert store.cut_off >= 1
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


class FlickeringElector:
    """Leadership that is not valid for a moment (a renewal late) and then is again."""

    is_leader = True
    term = None

    def __init__(self) -> None:
        self.ok = False

    def valid(self, now: float | None = None) -> bool:
        return self.ok


async def test_a_status_pass_put_off_while_not_leading_runs_once_leading_again() -> None:
    """A released status timer asks for a pass over its group once; if leadership is not
    valid at that moment, the pass must still come when it is again, not at some unrelated
    event (there may be none)."""
    op = SchedulerOperator(
        SchedulerSettings(metrics_port=0, coalesce_seconds=0.0, retry_period_seconds=0.02)
    )
    h = Harness()
    h.cache = op.cache
    app, _ = applier(h)
    api: Any = NullApi()
    status = StatusWriter(api, op.cache, SchedulerMetrics(), 1)
    elector = FlickeringElector()
    op.elector = cast(LeaderElector, elector)
    op._schedule_wanted = False
    loop = asyncio.create_task(op._loop(app, status))
    try:
        op.cache.status_owed(("ns", "g"))  # what a released count timer does
        await asyncio.sleep(0.1)
        assert op.cache.dirty_groups == {("ns", "g")}  # put off: not leading
        elector.ok = True  # the renewal went through; nothing else happens
        for _ in range(100):
            if not op.cache.dirty_groups:
                break
            await asyncio.sleep(0.01)
        assert op.cache.dirty_groups == set()  # the pass came
    finally:
        loop.cancel()
        await asyncio.gather(loop, return_exceptions=True)
