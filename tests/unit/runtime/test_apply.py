"""Carrying out decisions: a gang is assumed and issued whole, or not at all."""

from __future__ import annotations

import asyncio
from typing import Any

from operators.controllers.scheduler_apply import DecisionApplier
from operators.runtime.binder import Binder, BindRequest
from operators.runtime.events import EventRecorder
from operators.runtime.evictor import Evictor, EvictOutcome, PodRef
from operators.runtime.metrics import SchedulerMetrics
from operators.scheduler import decisions as D
from operators.scheduler import snapshot as S
from operators.scheduler.session import SessionResult

from .factories import pod, podgroup
from .test_cache import Harness


class RecordingBinder(Binder):
    """Records the gangs handed to it and answers every binding with success."""

    def __init__(self) -> None:
        api: Any = object()
        super().__init__(api, Evictor(api, asyncio.Semaphore(1)), asyncio.Semaphore(1))
        self.gangs: list[list[str]] = []
        self.annotations: list[dict[str, str]] = []

    async def bind_gang(self, requests: Any) -> Any:
        self.gangs.append([r.name for r in requests])
        self.annotations += [dict(r.annotations) for r in requests]
        for r in requests:
            if self.on_bound is not None:
                self.on_bound(r)
        return None


def applier(h: Harness) -> tuple[DecisionApplier, RecordingBinder]:
    binder = RecordingBinder()
    api: Any = object()
    sem = asyncio.Semaphore(1)
    app = DecisionApplier(
        api, h.cache, binder, Evictor(api, sem), EventRecorder(api, "t"), SchedulerMetrics()
    )
    binder.on_bound = app.on_bound
    binder.on_failed = app.on_failed
    return app, binder


def bind(name: str, node: str, ids: tuple[int, ...] = ()) -> D.Bind:
    return D.Bind(
        task=f"uid-{name}", group="pg-g", namespace="ns", name=name, node=node, gpu_ids=ids
    )


def gang(h: Harness, n: int) -> None:
    h.group(podgroup("g", min_member=n))
    for i in range(n):
        h.pod(pod(f"g-{i}", group="g"))


async def test_gang_is_assumed_and_issued_whole() -> None:
    h = Harness()
    gang(h, 3)
    app, binder = applier(h)
    result = SessionResult(
        decisions=tuple(bind(f"g-{i}", f"n{i}", (i,)) for i in range(3)), explanations={}
    )
    assert app.apply(result, now=1.0)["bind"] == 3
    assert set(h.cache.assumed) == {"uid-g-0", "uid-g-1", "uid-g-2"}
    await app.drain()
    assert binder.gangs == [["g-0", "g-1", "g-2"]]
    assert all(a.bound for a in h.cache.assumed.values())


async def test_gang_with_a_member_gone_since_the_snapshot_is_not_started() -> None:
    h = Harness()
    gang(h, 3)
    h.delete_pod("g-2")
    app, binder = applier(h)
    result = SessionResult(
        decisions=tuple(bind(f"g-{i}", f"n{i}") for i in range(3)), explanations={}
    )
    assert app.apply(result, now=1.0)["bind"] == 0
    await app.drain()
    assert binder.gangs == []
    assert h.cache.assumed == {}


async def test_each_binding_carries_the_leader_term_that_issued_it() -> None:
    h = Harness()
    gang(h, 2)
    app, binder = applier(h)
    app.bound_by = lambda: "sched-a/3"
    result = SessionResult(decisions=(bind("g-0", "n0", (1,)), bind("g-1", "n1")), explanations={})
    app.apply(result, now=1.0)
    await app.drain()
    assert binder.annotations == [
        {"scheduling.sluice.dev/gpu-ids": "1", "scheduling.sluice.dev/bound-by": "sched-a/3"},
        {"scheduling.sluice.dev/bound-by": "sched-a/3"},
    ]


def test_binding_request_carries_gpu_ids() -> None:
    req = BindRequest("ns", "p", "u", "n1", {"scheduling.sluice.dev/gpu-ids": "4,5"})
    assert req.ref.name == "p"


async def test_binds_handed_out_during_the_session_are_not_issued_again() -> None:
    h = Harness()
    gang(h, 2)
    h.pod(pod("solo"))
    app, binder = applier(h)
    early = [bind("g-0", "n0"), bind("g-1", "n1")]
    issued = app.bind_early(early, now=1.0)
    assert issued == ["uid-g-0", "uid-g-1"]
    solo = D.Bind(task="uid-solo", group="pod:uid-solo", namespace="ns", name="solo", node="n2")
    result = SessionResult(decisions=(*early, solo), explanations={})
    assert app.apply(result, now=2.0, issued=set(issued))["bind"] == 1
    await app.drain()
    assert binder.gangs == [["g-0", "g-1"], ["solo"]]


async def test_two_gangs_of_one_group_in_flight_keep_it_marked_until_both_end() -> None:
    h = Harness()
    gang(h, 3)
    app, _ = applier(h)
    app.bind_early([bind("g-0", "n0"), bind("g-1", "n1")], now=1.0)
    app.bind_early([bind("g-2", "n2")], now=1.0)  # an elastic group's growth, say
    assert "pg-g" in app.binding_groups
    await app.drain()
    assert "pg-g" not in app.binding_groups


class ScriptedEvictor(Evictor):
    """Answers each pod's eviction with the outcome scripted for it."""

    def __init__(self, outcomes: dict[str, EvictOutcome]) -> None:
        api: Any = object()
        super().__init__(api, asyncio.Semaphore(1))
        self.outcomes = outcomes

    async def evict(self, pod: PodRef, grace_seconds: int | None = None) -> EvictOutcome:
        return self.outcomes[pod.name]


async def test_evicted_pods_are_releasing_to_the_core_unless_their_eviction_did_not_happen() -> (
    None
):
    h = Harness()
    h.group(podgroup("g", min_member=3))
    for i in range(3):
        h.pod(pod(f"g-{i}", group="g", node="n1", phase="Running"))
    app, _ = applier(h)
    app.evictor = ScriptedEvictor(
        {"g-0": EvictOutcome.EVICTED, "g-1": EvictOutcome.BLOCKED, "g-2": EvictOutcome.GONE}
    )
    tasks = tuple(f"uid-g-{i}" for i in range(3))
    evict = D.Evict("pg-g", tasks, D.EvictReason.PREEMPTED, "for a bigger job", "pg-big")

    def statuses() -> list[S.TaskStatus]:
        by_uid = {t.uid: t.status for t in h.cache.snapshot(0.0).tasks}
        return [by_uid[uid] for uid in tasks]

    assert app.apply(SessionResult(decisions=(evict,), explanations={}), now=1.0)["evict"] == 3
    assert statuses() == [S.TaskStatus.RELEASING] * 3  # before any answer
    await app.drain()
    # A PodDisruptionBudget kept g-1: bound (a victim again); the others leave.
    assert statuses() == [S.TaskStatus.RELEASING, S.TaskStatus.BOUND, S.TaskStatus.RELEASING]
