"""A gang running below its minimum gets a timed session only once its stale-gang grace period
has run out: before that (or with no grace period at all: a job-owned group) the core's stale
check would decide nothing, and a session every safety tick over a full cluster is the cost."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

from operators.scheduler import snapshot as S

from .factories import node, pod, podgroup
from .test_self_writes import Loop

SINCE = 1_000.0  # when the loop first saw the gang below its minimum


def below_minimum(grace: float | None, *, owned: bool = False) -> Loop:
    """A Running gang of minimum 2 with one pod still bound, tracked since SINCE."""
    loop = Loop()
    loop.api.add("node", node("n0"))
    raw: dict[str, Any] = podgroup("g", min_member=2, status={"phase": "Running"})
    if grace is not None:
        raw["spec"]["staleGangGraceSeconds"] = grace
    if owned:
        raw["metadata"]["ownerReferences"] = [
            {"apiVersion": "batch.sluice.dev/v1alpha1", "kind": "VCJob", "name": "j", "uid": "j"}
        ]
    loop.api.add("podgroup", raw)
    loop.api.add("pod", pod("g-0", group="g", node="n0", phase="Running"))
    loop.op._track_below_minimum(loop.applier, SINCE)
    loop.op._changes_at_session = loop.op._changes  # nothing changed since the last session
    assert loop.op._below_minimum_since
    return loop


def test_a_gang_below_its_minimum_is_due_only_when_its_grace_has_run_out() -> None:
    loop = below_minimum(30.0)
    assert not loop.op._timed_session_due(SINCE + 29.0)
    assert loop.op._next_deadline(SINCE + 29.0) < 1.1  # the loop wakes for the deadline
    assert loop.op._timed_session_due(SINCE + 30.0)


def test_a_gang_that_is_never_stale_wakes_nothing() -> None:
    for loop in (below_minimum(-1.0), below_minimum(None, owned=True)):
        assert not loop.op._timed_session_due(SINCE + 10_000.0)
        assert loop.op._next_deadline(SINCE) == loop.op.settings.safety_tick_seconds


async def test_a_stale_gang_still_below_its_minimum_after_a_session_waits_a_safety_tick() -> None:
    # The eviction the core decides is POSTed but changes nothing here (as when a budget
    # refuses it, or before the pod's deletion is watched): the gang stays below its minimum.
    # The loop must not take its passed deadline for a reason to run a session every 50 ms.
    loop = below_minimum(30.0)
    loop.op._below_minimum_since = {uid: time.time() - 31.0 for uid in loop.op._below_minimum_since}
    await loop.op.cycle(loop.applier, loop.status)
    await loop.applier.drain()
    assert any(path.endswith("/g-0/eviction") for _, path in loop.api.writes)
    assert loop.op._below_minimum_since  # still tracked: nothing it could evict took effect
    now, tick = time.time(), loop.op.settings.safety_tick_seconds
    assert not loop.op._timed_session_due(now + 1.0)
    assert loop.op._next_deadline(now) > tick - 1.0
    assert loop.op._timed_session_due(now + tick)  # and then it is tried again


async def test_a_gang_the_last_session_did_not_count_gets_its_deadline_between_sessions() -> None:
    """Seen in CI under load: a pod of a just-bound gang was deleted, and the session that saw it
    did not yet see the group Running (its status echo was late), so it tracked nothing; the echo
    then started no session, and the gang kept its room for a whole safety tick. The status pass
    the echo starts counts the gang, so the loop wakes at its grace deadline. (Its replacement
    waits here: a gang of which nothing waits is counted without the echo, the test below.)"""
    loop = Loop()
    loop.api.add("node", node("n0"))
    raw: dict[str, Any] = podgroup("g", min_member=2, status={"phase": "Inqueue"})
    raw["spec"]["staleGangGraceSeconds"] = 2
    loop.api.add("podgroup", raw)
    loop.api.add("pod", pod("g-0", group="g", node="n0", phase="Running"))
    loop.api.add("pod", pod("g-1", group="g"))
    loop.op._track_below_minimum(loop.applier, SINCE)
    assert not loop.op._below_minimum_since  # not Running as the session saw it

    loop.op._schedule_wanted = False  # that session has run
    loop.op.cache.expect_group_status("pg-g", {"phase": "Running"})  # it wrote Running
    raw["status"]["phase"] = "Running"
    loop.api.add("podgroup", raw)  # the late echo of that write: no session wanted
    assert not loop.op._schedule_wanted
    await loop.settle()
    assert loop.sessions == 0
    assert loop.op._below_minimum_since
    assert loop.op._next_deadline(time.time()) < 2.1


async def test_a_second_drop_gets_its_own_grace_not_the_first_drops() -> None:
    """Found by an outside review: the session that binds a replacement pod starts with the
    gang below its minimum, and its bindings' echoes are cleared with the session's own dirty
    groups; a second drop inside the first drop's grace then inherited that deadline, and the
    gang was evicted whole 50 s after the second drop instead of 300 s."""
    loop = Loop()
    loop.api.add("node", node("n0"))
    raw: dict[str, Any] = podgroup("g", min_member=2, status={"phase": "Running"})
    raw["spec"]["staleGangGraceSeconds"] = 300
    loop.api.add("podgroup", raw)
    loop.api.add("pod", pod("g-0", group="g", node="n0", phase="Running", uid="u0"))
    loop.api.add("pod", pod("g-1", group="g", node="n0", phase="Running", uid="u1"))
    await loop.settle()
    loop.h.delete_pod("g-1")
    await loop.settle()
    loop.op._below_minimum_since["pg-g"] = time.time() - 250.0  # the first drop, 250 s ago
    loop.api.add("pod", pod("g-1", group="g", phase="Pending", uid="u1b"))
    loop.op._schedule_wanted = False
    await loop.op.cycle(loop.applier, loop.status)  # binds the replacement
    # Forgotten by the session that issued the bindings, before any echo comes back.
    assert "pg-g" not in loop.op._below_minimum_since
    await loop.settle()
    assert loop.api.raw[("pod", "ns", "g-1")]["spec"].get("nodeName") == "n0"
    loop.h.delete_pod("g-1")  # the second drop, now
    await loop.settle()
    assert dict(loop.op._stale_deadlines())["pg-g"] > time.time() + 200


async def test_a_gang_that_lost_a_member_before_it_was_seen_running_is_stale() -> None:
    """CI at de59e8f: a 3-pod gang was bound, and its third pod deleted before any status pass
    saw all three bound (a session for another pod's rejected binding took that pass's turn), so
    Running was never written. Inqueue with two pods bound and none waiting, it was neither a
    stale gang (never ran) nor half-bound (nothing left to bind): it held its node for ever."""
    loop = Loop()
    loop.api.add("node", node("n0"))
    raw: dict[str, Any] = podgroup("g", min_member=3, status={"phase": "Inqueue"})
    raw["spec"]["staleGangGraceSeconds"] = 2
    loop.api.add("podgroup", raw)
    for i in range(2):
        loop.api.add("pod", pod(f"g-{i}", group="g", node="n0", phase="Running", uid=f"u{i}"))
    await loop.settle()
    assert loop.op.cache.groups[("ns", "g")].group.phase is S.GroupPhase.INQUEUE
    assert loop.op._next_deadline(time.time()) < 2.1  # the loop wakes at its grace deadline

    loop.op._below_minimum_since["pg-g"] = time.time() - 3.0  # that deadline has passed
    assert loop.op._timed_session_due(time.time())
    await loop.op.cycle(loop.applier, loop.status)
    await loop.applier.drain()
    evicted = {path for _, path in loop.api.writes if path.endswith("/eviction")}
    assert evicted == {f"/api/v1/namespaces/ns/pods/g-{i}/eviction" for i in range(2)}


async def test_a_half_bound_gang_whose_rest_waits_is_left_to_the_half_bound_repair() -> None:
    # The same gang with its third pod waiting for a node (a crash between Binding POSTs): the
    # rest may still follow, so the stale-gang grace does not apply (half-bound-grace-seconds
    # does, tests/unit/runtime/test_half_bound.py).
    loop = Loop()
    loop.api.add("node", node("n0", cpu="2"))
    raw: dict[str, Any] = podgroup("g", min_member=3, status={"phase": "Inqueue"})
    raw["spec"]["staleGangGraceSeconds"] = 2
    loop.api.add("podgroup", raw)
    for i in range(2):
        loop.api.add("pod", pod(f"g-{i}", group="g", node="n0", phase="Running", uid=f"u{i}"))
    loop.api.add("pod", pod("g-2", group="g", uid="u2"))
    await loop.settle()
    assert not loop.op._below_minimum_since


async def test_a_stream_of_status_changes_does_not_hide_a_passed_grace_deadline() -> None:
    # Pods of other jobs starting (status changes only) all the time: each wakes the loop before
    # the 50 ms it waits for a passed deadline are up. The deadline still gets its session.
    loop = below_minimum(2.0)
    loop.op._below_minimum_since = {uid: time.time() - 3.0 for uid in loop.op._below_minimum_since}
    loop.op._schedule_wanted = False  # the last session has run
    running = asyncio.create_task(loop.op._loop(loop.applier, loop.status))
    try:
        until = time.monotonic() + 1.0
        while not loop.op.cycles and time.monotonic() < until:
            loop.op._on_change("status")
            await asyncio.sleep(0)
    finally:
        running.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await running
    assert loop.op.cycles == 1
