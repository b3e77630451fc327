"""The room a session chose is checked again against the cache just before each Binding POST:
a pod another scheduler bound meanwhile (seen through the pod watch) makes the binding be
withdrawn (no POST), its room released and the group placed again: at once the first time, after
a growing backoff when it happens again and again (a core that keeps choosing room the re-check
refuses must not loop every session)."""

from __future__ import annotations

import asyncio
from typing import Any

from operators.controllers.scheduler_apply import DecisionApplier
from operators.runtime.binder import NO_ROOM, Binder
from operators.runtime.evictor import Evictor
from operators.runtime.metrics import SchedulerMetrics
from operators.scheduler import SessionConfig, run_session
from operators.scheduler import decisions as D
from operators.scheduler.session import SessionResult

from .factories import node, pod
from .test_apply import bind, gang
from .test_binding_backoff import RecordedEvents
from .test_binding_failures import FlakyApi
from .test_cache import Harness


def foreign(name: str, node_name: str, *, cpu: str = "1", gpu_ids: str = "") -> dict[str, Any]:
    annotations = {"scheduling.sluice.dev/gpu-ids": gpu_ids} if gpu_ids else {}
    return pod(
        name,
        scheduler="default-scheduler",
        cpu=cpu,
        gpu=len(gpu_ids.split(",")) if gpu_ids else 0,
        node=node_name,
        phase="Running",
        annotations=annotations,
    )


def test_room_still_free_passes() -> None:
    h = Harness()
    h.node(node("n1", cpu="8"))
    h.pod(pod("mine", cpu="4"))
    h.pod(foreign("other", "n1", cpu="4"))
    h.cache.assume("uid-mine", "n1", (), now=0.0)
    assert h.cache.room_conflict("uid-mine") is None


def test_cpu_taken_by_another_scheduler_after_the_session() -> None:
    h = Harness()
    h.node(node("n1", cpu="8"))
    h.pod(pod("mine", cpu="4"))
    h.cache.assume("uid-mine", "n1", (), now=0.0)
    h.pod(foreign("late", "n1", cpu="5"))  # bound by kube-scheduler after the snapshot
    assert h.cache.room_conflict("uid-mine") == "cpu on n1: 9000 requested of 8000"


def test_our_own_other_assumptions_on_the_node_count_too() -> None:
    h = Harness()
    h.node(node("n1", cpu="8"))
    for name in ("a", "b"):
        h.pod(pod(name, cpu="4"))
        h.cache.assume(f"uid-{name}", "n1", (), now=0.0)
    assert h.cache.room_conflict("uid-b") is None  # exactly full
    h.pod(foreign("late", "n1", cpu="1"))
    assert h.cache.room_conflict("uid-a") is not None
    h.cache.forget("uid-b")  # its room released: the other fits again
    assert h.cache.room_conflict("uid-a") is None


def test_a_card_held_by_another_pod_conflicts_and_a_finished_one_does_not() -> None:
    h = Harness()
    h.node(node("n1", cpu="96", gpus=8))
    h.pod(pod("mine", gpu=1))
    h.cache.assume("uid-mine", "n1", (3,), now=0.0)
    h.pod(foreign("other", "n1", gpu_ids="2"))
    assert h.cache.room_conflict("uid-mine") is None  # another card
    h.pod(foreign("thief", "n1", gpu_ids="3"))
    assert h.cache.room_conflict("uid-mine") == "GPU 3 on n1 is held by another pod"
    done = foreign("thief", "n1", gpu_ids="3")
    done["status"]["phase"] = "Succeeded"
    h.pod(done)
    assert h.cache.room_conflict("uid-mine") is None


def test_the_session_never_chooses_room_the_recheck_refuses() -> None:
    """Foreign whole GPUs without card ids beside a foreign pod with ids: the core used to
    count only the numbered card (7 free), the re-check all five (3 free), so every session bound
    a 4-GPU pod there and the re-check withdrew it, for ever (no backoff on NoRoom)."""
    h = Harness()
    h.node(node("n1", cpu="96", gpus=8))
    h.pod(foreign("numbered", "n1", gpu_ids="0"))
    h.pod(pod("unnumbered", scheduler="default-scheduler", gpu=4, node="n1", phase="Running"))
    h.pod(pod("mine", gpu=4))
    binds = [
        d
        for d in run_session(h.cache.snapshot(0.0), SessionConfig()).decisions
        if isinstance(d, D.Bind)
    ]
    assert binds == []
    h.pod(pod("fits", gpu=3))
    placed = [
        d
        for d in run_session(h.cache.snapshot(1.0), SessionConfig()).decisions
        if isinstance(d, D.Bind)
    ]
    assert [b.gpu_ids for b in placed] == [(1, 2, 3)]
    assert h.cache.assume(placed[0].task, placed[0].node, placed[0].gpu_ids, now=1.0)
    assert h.cache.room_conflict(placed[0].task) is None


def test_card_ids_named_by_a_pod_without_gpus_block_nothing() -> None:
    """A hostile (or stale) gpu-ids annotation on a pod that requests no GPU: the cards stay
    free for the core and for the re-check alike, since nothing charges that pod for them."""
    h = Harness()
    h.node(node("n1", cpu="96", gpus=8))
    squatter = foreign("squatter", "n1", cpu="1")
    squatter["metadata"]["annotations"] = {"scheduling.sluice.dev/gpu-ids": "0,1,2,3,4,5,6,7"}
    h.pod(squatter)
    h.pod(pod("whole", gpu=8))
    binds = [
        d
        for d in run_session(h.cache.snapshot(0.0), SessionConfig()).decisions
        if isinstance(d, D.Bind)
    ]
    assert [(b.node, b.gpu_ids) for b in binds] == [("n1", tuple(range(8)))]
    assert h.cache.assume(binds[0].task, "n1", binds[0].gpu_ids, now=0.0)
    assert h.cache.room_conflict(binds[0].task) is None


def test_a_resource_the_pod_does_not_request_never_blocks_it() -> None:
    h = Harness()
    h.node(node("n1", cpu="4", gpus=8))
    h.pod(foreign("hog", "n1", cpu="6"))  # the node is already over on CPU (not our doing)
    h.pod(pod("mine", cpu="0", gpu=1))
    h.cache.assume("uid-mine", "n1", (0,), now=0.0)
    assert h.cache.room_conflict("uid-mine") is None


def _wired(h: Harness, api: FlakyApi, sem: asyncio.Semaphore) -> DecisionApplier:
    """The scheduler's own wiring: each POST re-checked against what it is about to send."""
    fake: Any = api
    binder = Binder(
        fake,
        Evictor(fake, sem),
        sem,
        retry_backoff=0.0,
        recheck=lambda req: h.cache.room_conflict(req.uid, req.node, req.gpu_ids),
    )
    app = DecisionApplier(
        fake, h.cache, binder, Evictor(fake, sem), RecordedEvents(), SchedulerMetrics()
    )
    binder.on_bound, binder.on_failed = app.on_bound, app.on_failed
    return app


async def test_a_binding_whose_assumption_expired_while_it_waited_is_not_posted() -> None:
    """The assumption held the room for it; once the TTL forgot it, sessions may hand that room
    to others, so the POST that finally gets a connection slot is withdrawn, not sent blind."""
    h = Harness()
    h.node(node("n0", cpu="2"))
    gang(h, 1)
    api = FlakyApi()
    sem = asyncio.Semaphore(1)
    app = _wired(h, api, sem)
    async with sem:  # every connection slot busy for longer than the assumption's TTL
        app.apply(SessionResult(decisions=(bind("g-0", "n0"),), explanations={}), 1.0)
        await asyncio.sleep(0)
        assert h.cache.expire_assumptions(now=1_000.0, ttl=30.0) == ["uid-g-0"]
    await app.drain()
    assert api.bindings("g-0") == 0
    assert not h.cache.assumed


async def test_a_binding_a_later_session_replaced_is_not_posted() -> None:
    """Expired, then assumed again elsewhere by the next session: the old POST must neither
    bind the pod to the node it no longer holds room on nor, withdrawn, forget the new
    assumption (whose own POST is still to come)."""
    h = Harness()
    h.node(node("n0", cpu="2"))
    h.node(node("n1", cpu="2"))
    gang(h, 1)
    api = FlakyApi()
    sem = asyncio.Semaphore(1)
    app = _wired(h, api, sem)
    async with sem:
        app.apply(SessionResult(decisions=(bind("g-0", "n0"),), explanations={}), 1.0)
        await asyncio.sleep(0)
        h.cache.expire_assumptions(now=1_000.0, ttl=30.0)
        assert h.cache.assume("uid-g-0", "n1", (), now=1_000.0)
    await app.drain()
    assert api.bindings("g-0") == 0
    assert h.cache.assumed["uid-g-0"].node == "n1"


async def test_a_gang_whose_room_was_taken_is_withdrawn_and_placed_again() -> None:
    h = Harness()
    h.node(node("n0", cpu="2"))
    h.node(node("n1", cpu="2"))
    gang(h, 2)
    api = FlakyApi()
    fake: Any = api
    sem = asyncio.Semaphore(4)
    binder = Binder(
        fake,
        Evictor(fake, sem),
        sem,
        retry_backoff=0.0,
        recheck=lambda req: h.cache.room_conflict(req.uid),
    )
    events = RecordedEvents()
    app = DecisionApplier(fake, h.cache, binder, Evictor(fake, sem), events, SchedulerMetrics())
    binder.on_bound, binder.on_failed = app.on_bound, app.on_failed
    async with sem:  # all connection slots busy: the gang's POSTs wait for one
        app.apply(
            SessionResult(decisions=(bind("g-0", "n0"), bind("g-1", "n1")), explanations={}), 1.0
        )
        await asyncio.sleep(0)
        h.pod(foreign("late", "n1", cpu="2"))  # kube-scheduler fills n1 meanwhile
        h.changes.clear()
    await app.drain()
    assert api.bindings("g-1") == 0  # never posted into the taken room
    assert not h.cache.assumed  # the gang's room is released at once
    assert "schedule" in h.changes  # and a session places it again
    assert not app.backoff.current(h.cache.has_group)  # a lost race is no rejection
    assert not events.posted
    failures = app.metrics.bind_failures.labels(reason=NO_ROOM)
    assert failures._value.get() >= 1


async def test_a_group_withdrawn_again_and_again_backs_off_and_the_core_skips_it() -> None:
    """The 27f1d95 kind of defect: the core chooses room the re-check refuses, every session.
    The second withdrawal in a row holds the pod back; the core places nothing of it until
    the retry time, and explains why."""
    h = Harness()
    h.node(node("n1", cpu="2"))
    h.pod(pod("mine", cpu="1"))
    group = "pod:uid-mine"
    stale = D.Bind(task="uid-mine", group=group, namespace="ns", name="mine", node="n1")
    api = FlakyApi()
    app = _wired(h, api, asyncio.Semaphore(4))
    h.pod(foreign("hog", "n1", cpu="2"))  # the room a stale core would keep choosing
    for attempt in range(2):
        app.apply(SessionResult(decisions=(stale,), explanations={}), 1.0)
        await app.drain()
        assert (group in app.backoff.current(h.cache.has_group)) == (attempt == 1)
    assert api.bindings("mine") == 0
    rejection = app.backoff.current(h.cache.has_group)[group]
    assert rejection.message.startswith(NO_ROOM)
    h.node(node("n2", cpu="2"))  # room elsewhere: still not before the retry time
    snap = h.cache.snapshot(rejection.retry_at - 0.01, rejections={group: rejection})
    result = run_session(snap, SessionConfig())
    assert not [d for d in result.decisions if isinstance(d, D.Bind)]
    assert result.explanations[group].message.startswith("its binding failed: NoRoom")
    later = h.cache.snapshot(rejection.retry_at + 0.01, rejections={group: rejection})
    placed = [d for d in run_session(later, SessionConfig()).decisions if isinstance(d, D.Bind)]
    assert [b.node for b in placed] == ["n2"]
