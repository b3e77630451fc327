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
