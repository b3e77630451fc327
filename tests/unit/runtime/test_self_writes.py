"""The scheduler's own writes (bindings, PodGroup status, nominations) come back as watch events;
none of those echoes may start another session. Other writers' changes still do."""

from __future__ import annotations

import asyncio
from typing import Any

from operators.controllers.scheduler_apply import DecisionApplier
from operators.controllers.scheduler_loop import SchedulerOperator
from operators.controllers.scheduler_status import StatusWriter
from operators.runtime import records as R
from operators.runtime.binder import Binder
from operators.runtime.cache import SELF_WRITE
from operators.runtime.events import EventRecorder
from operators.runtime.evictor import Evictor
from operators.runtime.settings import SchedulerSettings
from operators.scheduler import snapshot as S

from .echo_api import EchoApi
from .factories import node, pod, podgroup
from .test_cache import Harness


class Loop:
    """The scheduler operator wired as `run()` wires it, against an EchoApi."""

    def __init__(self) -> None:
        self.op = SchedulerOperator(SchedulerSettings(metrics_port=0, leader_election=False))
        self.h = Harness()
        self.h.cache = self.op.cache
        self.api = EchoApi(self.h)
        api: Any = self.api
        sem = asyncio.Semaphore(8)
        evictor = Evictor(api, sem)
        self.applier = DecisionApplier(
            api,
            self.op.cache,
            Binder(api, evictor, sem),
            evictor,
            EventRecorder(api, "t"),
            self.op.metrics,
            write_semaphore=sem,
        )
        self.applier.binder.on_bound = self.applier.on_bound
        self.applier.binder.on_failed = self.applier.on_failed
        self.status = StatusWriter(api, self.op.cache, self.op.metrics, 4)
        self.sessions = 0
        queue = R.queue({"metadata": {"name": "team-a"}, "spec": {}})
        self.op.cache.on_queue("ADDED", ("", "team-a"), queue, None)

    async def settle(self) -> None:
        """Run what `_loop` would run until nothing asks for more: a session whenever one is
        wanted, else a status pass for groups whose members moved; every write echoes back."""
        for _ in range(20):
            await self.applier.drain()
            await self.status.drain()
            if self.op._schedule_wanted:
                self.op._schedule_wanted = False
                self.sessions += 1
                await self.op.cycle(self.applier, self.status)
            elif self.op.cache.dirty_groups:
                self.op._on_change("status")
                self.op.status_pass(self.applier, self.status)
            else:
                return
        raise AssertionError("the loop never settled")


async def test_a_gang_is_placed_bound_and_marked_running_in_one_session() -> None:
    loop = Loop()
    for i in range(2):
        loop.api.add("node", node(f"n{i}"))
    loop.api.add("podgroup", podgroup("g", min_member=4))
    for i in range(4):
        loop.api.add("pod", pod(f"g-{i}", group="g", cpu="8"))

    await loop.settle()

    group = loop.op.cache.groups[("ns", "g")]
    assert group.group.phase is S.GroupPhase.RUNNING
    assert all(r.node_name for r in loop.op.cache.members("pg-g"))
    assert loop.sessions == 1
    assert loop.op.cache.triggers[SELF_WRITE] >= 1  # our phase write(s) came back
    # Bound during the session or after it: each pod exactly once.
    posts = [path for _, path in loop.api.writes if path.endswith("/binding")]
    assert len(posts) == len(set(posts)) == 4


async def test_plain_pods_are_bound_in_one_session() -> None:
    loop = Loop()
    loop.api.add("node", node("n0"))
    for i in range(5):
        loop.api.add("pod", pod(f"web-{i}"))
    await loop.settle()
    assert all(r.node_name for r in loop.op.cache.pods.values())
    assert loop.sessions == 1


def we_wrote(status: dict[str, Any]) -> tuple[Harness, dict[str, Any]]:
    """A group whose status the scheduler is about to patch to `status`."""
    h = Harness()
    raw = podgroup("g", min_member=2)
    h.group(raw)
    h.cache.expect_group_status("pg-g", status)
    h.changes.clear()
    return h, raw


def test_another_writers_status_change_still_starts_a_session() -> None:
    h, raw = we_wrote({"phase": "Inqueue"})
    # The podgroup controller marks it Completed: not what we wrote.
    h.group({**raw, "status": {"phase": "Completed"}})
    assert h.changes == ["schedule"]


def test_our_status_echo_with_a_spec_change_still_starts_a_session() -> None:
    h, raw = we_wrote({"phase": "Inqueue"})
    h.group({**raw, "spec": {**raw["spec"], "minMember": 3}, "status": {"phase": "Inqueue"}})
    assert h.changes == ["schedule"]


def test_our_delayed_preemption_mark_echo_starts_nothing() -> None:
    mark = {"role": "Privileged", "deadline": R.rfc3339(100.0), "peers": ["ns/other"]}
    h, raw = we_wrote({"phase": "Inqueue", "preemption": mark})
    h.group({**raw, "status": {"phase": "Inqueue", "preemption": mark}})
    assert h.changes == []
    assert h.cache.groups[("ns", "g")].group.preemption is not None
    # A different deadline (someone else's edit) is news.
    later = {**mark, "deadline": R.rfc3339(200.0)}
    h.group({**raw, "status": {"phase": "Inqueue", "preemption": later}})
    assert h.changes == ["schedule"]


def test_our_nomination_echo_is_a_status_change_only() -> None:
    h = Harness()
    raw = pod("p")
    h.pod(raw)
    h.cache.expect_nomination("uid-p", "n1")
    h.changes.clear()
    h.pod({**raw, "status": {**raw["status"], "nominatedNodeName": "n1"}})
    assert h.changes == ["status"]
    h.pod({**raw, "status": {**raw["status"], "nominatedNodeName": "n2"}})
    assert h.changes == ["status", "schedule"]


def test_a_mark_we_wrote_sets_the_loops_timer_before_its_echo_arrives() -> None:
    """The echo of our mark wakes nobody, so the deadline must count from our own write: else
    the loop sleeps a whole safety tick past the deadline before it evicts (e2e saw 30 s)."""
    op = SchedulerOperator(SchedulerSettings(metrics_port=0, leader_election=False))
    assert op._next_deadline(100.0) == op.settings.safety_tick_seconds
    mark = {"role": "WillEvict", "deadline": R.rfc3339(104.0), "peers": ["ns/high"]}
    op.cache.expect_group_status("pg-g", {"phase": "Running", "preemption": mark})
    assert abs(op._next_deadline(100.0) - 4.05) < 1e-6


def test_an_earlier_echo_arriving_after_a_newer_write_is_still_ours() -> None:
    # Inqueue written at the end of a cycle, Running by the status pass right after; the API
    # server answers slowly, so the Inqueue echo arrives once Running is already expected.
    h, raw = we_wrote({"phase": "Inqueue"})
    h.cache.expect_group_status("pg-g", {"phase": "Running"})
    h.group({**raw, "status": {"phase": "Inqueue"}})
    h.group({**raw, "status": {"phase": "Running"}})
    assert h.changes == []
    assert h.cache.triggers[SELF_WRITE] == 2
    # Both echoes are accounted for: the same phase again, from someone else, is news.
    h.group({**raw, "status": {"phase": "Inqueue"}})
    assert h.changes == ["schedule"]


async def test_the_safety_tick_skips_a_session_over_an_unchanged_cache() -> None:
    """A pod that does not fit stays pending; the tick re-runs the session only once something
    changed since the last one (here a new node)."""
    loop = Loop()
    loop.api.add("node", node("n0"))
    loop.api.add("pod", pod("big", cpu="128"))
    await loop.settle()
    assert loop.sessions == 1
    assert loop.op.cache.has_pending_work()
    await loop.settle()  # the echoes of the session's own status writes arrive
    loop.op._changes_at_session = loop.op._changes  # as if a tick session had just run
    assert not loop.op._timed_session_due(0.0)
    assert loop.op.cache.triggers["tick-unchanged"] == 1
    loop.api.add("node", node("n1"))
    assert loop.op._timed_session_due(0.0)
    assert loop.op.cache.triggers["tick"] == 1


async def test_a_victim_whose_eviction_the_watch_has_not_shown_is_not_chosen_again() -> None:
    """Seen in CI as willevict, evicted, willevict (or evicted twice) at a receiver: right after
    the deadline's eviction, a session ran while the pod watch still showed one victim pod bound
    (the eviction POSTed, its deletion not back yet), found the preemptor still without room and
    marked the victim WillEvict again. Evicted pods are Releasing to the core until the watch
    shows them leaving."""
    loop = Loop()
    queue = R.queue({"metadata": {"name": "team-a"}, "spec": {"preemptionDelaySeconds": 4}})
    loop.op.cache.on_queue("MODIFIED", ("", "team-a"), queue, None)
    for name, value in (("low", 0), ("high", 1000)):
        loop.op.cache.on_priority_class("ADDED", ("", name), value, None)
    loop.api.add("node", node("n0", gpus=8))
    victim = podgroup("victim", min_member=2)
    victim["spec"]["priorityClassName"] = "low"
    loop.api.add("podgroup", victim)
    for i in range(2):
        loop.api.add("pod", pod(f"victim-{i}", group="victim", gpu=4, node="n0", phase="Running"))
    await loop.settle()
    urgent = podgroup("urgent", min_member=1)
    urgent["spec"]["priorityClassName"] = "high"
    loop.api.add("podgroup", urgent)
    loop.api.add("pod", pod("urgent-0", group="urgent", gpu=8))
    await loop.settle()

    def status(name: str) -> dict[str, Any]:
        return dict(loop.api.raw[("podgroup", "ns", name)].get("status") or {})

    assert status("victim")["preemption"]["role"] == "WillEvict"
    # The deadline passes (moved into the past: the core's clock is the wall clock). The pod
    # watch is slow: neither the eviction nor the preemptor's nomination is back yet.
    loop.api.late_pods = True
    for name in ("victim", "urgent"):
        raw = loop.api.raw[("podgroup", "ns", name)]
        raw["status"]["preemption"]["deadline"] = R.rfc3339(1.0)
        loop.api.add("podgroup", raw)
    await loop.settle()
    evicted = status("victim")
    assert "preemption" not in evicted
    assert evicted["lastEviction"]["reason"] == "DelayedPreemptionDue"
    assert sum(path.endswith("/eviction") for _, path in loop.api.writes) == 2

    # The watch shows one victim pod gone; the other's deletion is not back yet.
    loop.h.delete_pod("victim-0")
    before = loop.sessions
    await loop.settle()
    assert loop.sessions > before  # the pod's change ran a session
    assert "preemption" not in status("victim")
    assert status("victim")["lastEviction"] == evicted["lastEviction"]
    assert "preemption" not in status("urgent")
    assert sum(path.endswith("/eviction") for _, path in loop.api.writes) == 2

    # The other pod's deletion arrives: the record is the truth again.
    leaving = loop.api.raw[("pod", "ns", "victim-1")]
    leaving["metadata"]["deletionTimestamp"] = "2026-11-22T09:00:01Z"
    loop.api.add("pod", leaving)
    await loop.settle()
    assert not loop.op.cache._evicted
