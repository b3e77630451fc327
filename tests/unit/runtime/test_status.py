"""PodGroup status as the scheduler computes it (operators/controllers/scheduler_status.py)."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest

from operators.controllers.scheduler_phase import GroupCounts, next_phase
from operators.controllers.scheduler_status import (
    StatusWriter,
    _comparable,
    count_members,
    desired_conditions,
    format_resources,
)
from operators.runtime.client import ApiError
from operators.runtime.metrics import SchedulerMetrics
from operators.scheduler import decisions as D
from operators.scheduler import snapshot as S
from operators.scheduler.session import PoolStatus, SessionResult

from . import json_patch
from .factories import pod, podgroup
from .test_cache import Harness

P = S.GroupPhase


def test_conditions_carry_the_explanation_and_keep_transition_times() -> None:
    why = D.Explanation("g", D.ReasonCode.NOT_ADMITTED, "needs 32 GPUs; 24 free")
    first = desired_conditions(P.INQUEUE, why, [], "t1")
    by_type = {c["type"]: c for c in first}
    assert by_type["Unschedulable"]["status"] == "True"
    assert by_type["Unschedulable"]["reason"] == "NotEnoughResources"
    assert by_type["Unschedulable"]["message"] == "needs 32 GPUs; 24 free"
    assert by_type["Enqueued"]["status"] == "True"
    again = desired_conditions(P.INQUEUE, why, first, "t2")
    assert [c["lastTransitionTime"] for c in again] == ["t1", "t1", "t1"]
    assert _comparable({"conditions": again}) == _comparable({"conditions": first})
    running = {c["type"]: c for c in desired_conditions(P.RUNNING, None, first, "t3")}
    assert running["Scheduled"]["status"] == "True"
    assert running["Scheduled"]["lastTransitionTime"] == "t3"
    assert running["Unschedulable"]["status"] == "False"


def test_other_writers_conditions_survive() -> None:
    theirs = {"type": "JobReady", "status": "True", "reason": "x", "message": ""}
    out = desired_conditions(P.PENDING, None, [theirs], "t")
    assert theirs in out


def test_resources_render_as_quantities() -> None:
    assert format_resources(
        {"cpu": 1500, "memory": 2**30, "nvidia.com/gpu": 8, "nvidia.com/gpu-milli": 8000}
    ) == {"cpu": "1500m", "memory": "1Gi", "nvidia.com/gpu": "8"}


def test_delayed_preemption_becomes_a_condition_and_reverts() -> None:
    mark = {"role": "WillEvict", "deadline": "2026-11-22T09:00:00Z", "peers": ["ns/big"]}
    marked = {c["type"]: c for c in desired_conditions(P.RUNNING, None, [], "t1", mark)}
    assert marked["WillEvict"]["status"] == "True"
    assert "2026-11-22T09:00:00Z" in marked["WillEvict"]["message"]
    assert "Privileged" not in marked
    reverted = {
        c["type"]: c for c in desired_conditions(P.RUNNING, None, marked.values(), "t2", None)
    }
    assert reverted["WillEvict"]["status"] == "False"


def test_only_watch_confirmed_bindings_count_as_bound() -> None:
    h = Harness()
    h.group(podgroup("g", min_member=2, status={"phase": "Inqueue"}))
    for i in range(2):
        h.pod(pod(f"g-{i}", group="g"))
        h.cache.assume(f"uid-g-{i}", "n1", (), now=0.0)
    uid = next(iter(h.cache.groups.values())).uid
    assert count_members(h.cache, uid) == GroupCounts(bound=0, running=0, pending=2)
    h.cache.finish_binding("uid-g-0", now=1.0)  # the POST answered; the watch has not
    assert count_members(h.cache, uid).bound == 0
    h.pod(pod("g-0", group="g", node="n1", uid="uid-g-0"))  # the watch confirms it
    assert count_members(h.cache, uid) == GroupCounts(bound=1, running=0, pending=1)


class PatchRecorder:
    """A narrow stand-in for the client's strategic merge patch of pod status."""

    def __init__(self) -> None:
        self.patches: list[tuple[str, dict[str, Any]]] = []

    async def strategic_merge_patch(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.patches.append((path, body))
        return {}


async def test_waiting_plain_pods_get_podscheduled_false_with_the_reason() -> None:
    h = Harness()
    h.pod(pod("lonely", gpu=9))
    h.pod(pod("placed", gpu=1))
    h.cache.assume("uid-placed", "n1", (0,), now=0.0)
    api = PatchRecorder()
    fake: Any = api
    writer = StatusWriter(fake, h.cache, SchedulerMetrics(), concurrency=2)
    why = "needs 9 GPUs on one node; the largest node has 8"
    result = SessionResult(
        decisions=(),
        explanations={
            "pod:uid-lonely": D.Explanation("pod:uid-lonely", D.ReasonCode.UNSCHEDULABLE, why),
            "pod:uid-placed": D.Explanation("pod:uid-placed", D.ReasonCode.UNSCHEDULABLE, why),
        },
    )
    written = writer.write_pod_reasons(result, 100.0, "2026-01-01T00:00:00Z")
    await writer.drain()
    assert [(p.name, m) for p, m in written] == [("lonely", why)]
    path, body = api.patches[0]
    assert path == "/api/v1/namespaces/ns/pods/lonely/status"
    (cond,) = body["status"]["conditions"]
    assert (cond["type"], cond["status"], cond["reason"], cond["message"]) == (
        "PodScheduled",
        "False",
        "Unschedulable",
        why,
    )
    # The same reason again: no second write, no second Event.
    assert writer.write_pod_reasons(result, 200.0, "2026-01-01T00:01:40Z") == []
    await writer.drain()
    assert len(api.patches) == 1


async def test_between_sessions_pod_reasons_follow_the_cache() -> None:
    """The loop asks again on every wake with the last session's result (worked out once per
    session): a pod the watch has shown bound since gets no Unschedulable write, and a pod
    whose binding failed since gets one."""
    h = Harness()
    for name in ("bound-since", "failed-since"):
        h.pod(pod(name, gpu=1))
        h.cache.assume(f"uid-{name}", "n1", (0,), now=0.0)
    api = PatchRecorder()
    fake: Any = api
    writer = StatusWriter(fake, h.cache, SchedulerMetrics(), concurrency=2)
    why = "no room"
    result = SessionResult(
        decisions=(),
        explanations={
            f"pod:uid-{n}": D.Explanation(f"pod:uid-{n}", D.ReasonCode.UNSCHEDULABLE, why)
            for n in ("bound-since", "failed-since")
        },
    )
    assert writer.write_pod_reasons(result, 100.0, "t") == []  # both assumed
    h.pod(pod("bound-since", gpu=1, node="n1", uid="uid-bound-since"))  # the watch: bound
    h.cache.forget("uid-bound-since")
    h.cache.forget("uid-failed-since")  # its Binding was refused
    written = writer.write_pod_reasons(result, 101.0, "t")
    await writer.drain()
    assert [(p.name, m) for p, m in written] == [("failed-since", why)]
    assert [path for path, _ in api.patches] == ["/api/v1/namespaces/ns/pods/failed-since/status"]


class MergeRecorder:
    """A narrow stand-in for the client's status patches; a PodGroup's JSON patch is recorded
    as the merge patch it amounts to."""

    def __init__(self) -> None:
        self.patches: list[tuple[str, dict[str, Any]]] = []

    async def merge_patch(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.patches.append((path, body))
        return {}

    async def json_patch(self, path: str, ops: list[dict[str, Any]]) -> dict[str, Any]:
        return await self.merge_patch(path, json_patch.as_merge(ops))


async def test_a_phase_the_scheduler_keeps_is_not_resent() -> None:
    """The podgroup operator may have just written Completed (the pods finished and left the
    scheduler's watch): the scheduler's count update must not carry its stale phase back."""
    h = Harness()
    h.group(podgroup("done", min_member=2, status={"phase": "Running", "running": 2}))
    h.group(podgroup("live", min_member=1, status={"phase": "Inqueue"}))
    h.pod(pod("live-0", group="live", node="n1", phase="Running"))
    api = MergeRecorder()
    fake: Any = api
    writer = StatusWriter(fake, h.cache, SchedulerMetrics(), concurrency=2)
    writer.write_groups(SessionResult(decisions=(), explanations={}), 0.0, "t")
    await writer.drain()
    bodies = {path.rsplit("/", 2)[-2]: body["status"] for path, body in api.patches}
    assert "phase" not in bodies["done"]
    assert bodies["done"]["running"] == 0
    assert bodies["live"]["phase"] == "Running"


async def test_pool_status_leaves_the_operators_fields_alone() -> None:
    h = Harness()
    api = MergeRecorder()
    fake: Any = api
    writer = StatusWriter(fake, h.cache, SchedulerMetrics(), concurrency=2)
    h.cache.on_pool("ADDED", ("", "gpu"), S.Pool(name="gpu"), None)
    empty: dict[str, int] = {}
    writer.write_pools({"gpu": PoolStatus(empty, empty, empty, empty, empty, nodes=3)})
    await writer.drain()
    ((path, body),) = api.patches
    assert path.endswith("/pools/gpu/status")
    assert set(body["status"]) == {"capacity", "allocatable", "used", "shared", "pending"}


async def test_a_group_naming_a_missing_pool_says_so_and_warns_once() -> None:
    h = Harness()
    raw = podgroup("typo", status={"phase": "Pending"})
    raw["spec"]["pool"] = "gpu-pol"
    h.group(raw)
    h.group(podgroup("plain", status={"phase": "Pending"}))  # the control: default pool
    api = MergeRecorder()
    fake: Any = api
    warnings: list[tuple[str, str, str]] = []
    writer = StatusWriter(
        fake, h.cache, SchedulerMetrics(), concurrency=2, warn=lambda *w: warnings.append(w)
    )
    nothing = SessionResult(decisions=(), explanations={})
    writer.write_groups(nothing, 0.0, "t1")
    await writer.drain()
    conds = {
        path.rsplit("/", 2)[-2]: {c["type"]: c for c in body["status"]["conditions"]}
        for path, body in api.patches
    }
    fallback = conds["typo"]["PoolFallback"]
    assert (fallback["status"], fallback["reason"]) == ("True", "PoolNotFound")
    assert "'gpu-pol' does not exist" in fallback["message"]
    assert "PoolFallback" not in conds["plain"]
    assert warnings == [("pg-typo", "PoolNotFound", fallback["message"])]

    # The status as written comes back through the watch; then the pool is created.
    raw["status"] = next(b["status"] for p, b in api.patches if "/typo/" in p)
    h.group(raw)
    h.cache.on_pool("ADDED", ("", "gpu-pol"), S.Pool(name="gpu-pol"), None)
    api.patches.clear()
    writer.write_groups(nothing, 20.0, "t2")
    await writer.drain()
    body = next(b for p, b in api.patches if "/typo/" in p)
    cond = {c["type"]: c for c in body["status"]["conditions"]}["PoolFallback"]
    assert (cond["status"], cond["reason"]) == ("False", "PoolFound")
    assert len(warnings) == 1


async def test_a_pod_naming_a_missing_podgroup_is_told_why_it_waits() -> None:
    h = Harness()
    volcano = {"scheduling.k8s.io/group-name": "train"}
    h.pod(pod("train-0", annotations=volcano))
    h.pod(pod("theirs-0", annotations=volcano, scheduler="volcano"))  # not ours: left alone
    api = PatchRecorder()
    fake: Any = api
    writer = StatusWriter(fake, h.cache, SchedulerMetrics(), concurrency=2)
    nothing = SessionResult(decisions=(), explanations={})
    written = writer.write_pod_reasons(nothing, 0.0, "t")
    await writer.drain()
    assert [p.name for p, _ in written] == ["train-0"]
    message = written[0][1]
    assert "PodGroup 'train' does not exist in namespace 'ns'" in message
    ((path, body),) = api.patches
    assert path == "/api/v1/namespaces/ns/pods/train-0/status"
    assert body["status"]["conditions"][0]["message"] == message

    h.group(podgroup("train"))  # the group arrives: the pod is ours to schedule, not an orphan
    assert h.cache.orphans() == []


async def test_a_plain_pod_naming_a_missing_pool_gets_an_event_and_the_reason() -> None:
    h = Harness()
    h.pod(pod("typo-0", gpu=9, annotations={"scheduling.sluice.dev/pool": "gpu-poool"}))
    h.pod(pod("typo-1", annotations={"scheduling.sluice.dev/pool": "gpu-poool"}))
    h.pod(pod("fine-0", gpu=9))  # control: no pool named, no pool warning
    api = PatchRecorder()
    fake: Any = api
    warnings: list[tuple[str, str, str]] = []
    writer = StatusWriter(
        fake, h.cache, SchedulerMetrics(), concurrency=2, warn=lambda *w: warnings.append(w)
    )
    why = "needs 9 GPUs on one node; the largest node has 8"
    result = SessionResult(
        decisions=(),
        explanations={
            "pod:uid-typo-0": D.Explanation("pod:uid-typo-0", D.ReasonCode.UNSCHEDULABLE, why),
            "pod:uid-typo-1": D.Explanation("pod:uid-typo-1", D.ReasonCode.SCHEDULED, ""),
            "pod:uid-fine-0": D.Explanation("pod:uid-fine-0", D.ReasonCode.UNSCHEDULABLE, why),
        },
    )
    written = {p.name: m for p, m in writer.write_pod_reasons(result, 0.0, "t")}
    await writer.drain()
    fallback = "pool 'gpu-poool' does not exist; the group is placed in the 'default' pool"
    assert written == {"typo-0": f"{fallback}; {why}", "fine-0": why}
    # One Warning per pod naming the missing pool, placed or waiting; none for the control.
    assert sorted(warnings) == [
        ("pod:uid-typo-0", "PoolNotFound", fallback),
        ("pod:uid-typo-1", "PoolNotFound", fallback),
    ]
    writer.write_pod_reasons(result, 100.0, "t")
    assert len(warnings) == 2


def test_a_restarted_job_reset_to_pending_is_admitted_again_not_read_as_running() -> None:
    """The jobs operator sets a restarted job's group back to Pending while the pods it killed
    still hold their nodes: leaving pods are no members, so the phase stays Pending and the
    core's enqueue admits the group again (before: Running, from the pods being killed)."""
    h = Harness()
    h.group(podgroup("train", min_member=2, status={"phase": "Pending"}))
    for i in range(2):
        raw = pod(f"train-{i}", group="train", node="n1", phase="Running")
        raw["metadata"]["deletionTimestamp"] = "2026-11-22T08:10:00Z"
        h.pod(raw)
    counts = count_members(h.cache, "pg-train")
    assert counts == GroupCounts(bound=0, running=0, pending=0)
    assert next_phase(P.PENDING, None, 2, counts) is P.PENDING
    assert next_phase(P.PENDING, P.INQUEUE, 2, counts) is P.INQUEUE
    # Control: the same pods, not leaving, make it Running.
    for i in range(2):
        h.pod(pod(f"train-{i}", group="train", node="n1", phase="Running"))
    assert next_phase(P.PENDING, None, 2, count_members(h.cache, "pg-train")) is P.RUNNING


async def test_an_eviction_is_stamped_on_the_group_once_even_when_its_write_is_in_flight() -> None:
    """status.lastEviction is what the events operator turns into an `Evicted` notice: written
    with the eviction, kept by later writes, and not lost when the group's previous status write
    is still in flight at the time (it goes with the next pass)."""
    h = Harness()
    h.group(podgroup("victim", min_member=1, status={"phase": "Running", "running": 1}))
    h.group(podgroup("urgent", min_member=1, status={"phase": "Pending"}))
    h.group(podgroup("bystander", min_member=1, status={"phase": "Pending"}))  # the control
    api = MergeRecorder()
    fake: Any = api
    writer = StatusWriter(fake, h.cache, SchedulerMetrics(), concurrency=2)
    writer._in_flight.add("pg-victim")  # its last write has not come back yet
    evict = D.Evict("pg-victim", (), D.EvictReason.DELAYED_PREEMPTION_DUE, "due", "pg-urgent")
    writer.write_groups(SessionResult(decisions=(evict,), explanations={}), 0.0, "t1")
    await writer.drain()
    assert not [p for p, _ in api.patches if "/victim/" in p]

    writer._in_flight.discard("pg-victim")
    writer.write_groups(SessionResult(decisions=(), explanations={}), 1.0, "t2", only=set())
    await writer.drain()
    (body,) = [b["status"] for p, b in api.patches if "/victim/" in p]
    assert body["lastEviction"] == {
        "reason": "DelayedPreemptionDue",
        "time": "t1",
        "message": "due",
        "preemptor": "ns/urgent",
    }
    assert all("lastEviction" not in b["status"] for p, b in api.patches if "/victim/" not in p)

    # Written once: the next pass (its status echoed back) keeps it and does not write again.
    h.group(podgroup("victim", min_member=1, status={"phase": "Running", **body}))
    api.patches.clear()
    writer.write_groups(SessionResult(decisions=(), explanations={}), 2.0, "t3")
    await writer.drain()
    assert not [p for p, _ in api.patches if "/victim/" in p]


class StoringApi:
    """A narrow stand-in for the API server's PodGroup status PATCH: applies the JSON patch
    to what it stores (each group with the uid the factory gives it) and answers with the
    object, as the API server does."""

    def __init__(self, statuses: dict[str, dict[str, Any]]) -> None:
        self.stored = {
            name: {"metadata": {"uid": f"pg-{name}"}, "status": status}
            for name, status in statuses.items()
        }

    async def json_patch(self, path: str, ops: list[dict[str, Any]]) -> dict[str, Any]:
        name = path.rsplit("/", 2)[-2]
        if name not in self.stored:
            raise ApiError(404, {"reason": "NotFound"}, "PATCH", path)
        self.stored[name] = json_patch.apply(self.stored[name], ops, path)
        return self.stored[name]

    async def get(self, path: str) -> dict[str, Any]:
        name = path.rsplit("/", 1)[-1]
        if name not in self.stored:
            raise ApiError(404, {"reason": "NotFound"}, "GET", path)
        return copy.deepcopy(self.stored[name])


async def test_a_pass_before_the_eviction_write_comes_back_does_not_restore_the_victims_mark() -> (
    None
):
    """Seen in CI as willevict, evicted, willevict at a receiver: the write that evicts a victim
    clears its WillEvict mark and stamps lastEviction; a status pass that runs before the watch
    shows that write (its pods left: the counts changed) must not send the old mark back, and
    must not take back the stamp. A later real mark is written."""
    mark = {"role": "WillEvict", "deadline": "2026-11-22T09:00:00Z", "peers": ["ns/urgent"]}
    before = {"phase": "Running", "running": 2, "pending": 0, "preemption": mark}
    h = Harness()
    h.group(podgroup("victim", min_member=2, status=before))
    h.group(podgroup("urgent", min_member=1, status={"phase": "Inqueue"}))
    for i in range(2):
        h.pod(pod(f"victim-{i}", group="victim", node="n1", phase="Running"))
    api = StoringApi({"victim": dict(before), "urgent": {"phase": "Inqueue"}})
    fake: Any = api
    writer = StatusWriter(fake, h.cache, SchedulerMetrics(), concurrency=2)
    due = (
        D.Evict("pg-victim", (), D.EvictReason.DELAYED_PREEMPTION_DUE, "due", "pg-urgent"),
        D.RevertDelayedPreemption(("pg-urgent", "pg-victim"), "deadline reached"),
    )
    writer.write_groups(SessionResult(decisions=due, explanations={}), 1.0, "t1")
    await writer.drain()
    evicted = api.stored["victim"]["status"]
    assert "preemption" not in evicted
    assert evicted["lastEviction"]["time"] == "t1"

    # The pods are leaving; the PodGroup watch still shows the status from before the eviction.
    for i in range(2):
        leaving = pod(f"victim-{i}", group="victim", node="n1", phase="Running")
        leaving["metadata"]["deletionTimestamp"] = "2026-11-22T09:00:01Z"
        h.pod(leaving)
    idle = SessionResult(decisions=(), explanations={})
    writer.write_groups(idle, 2.0, "t2", only={("ns", "victim")})
    await writer.drain()
    now = api.stored["victim"]["status"]
    assert now["running"] == 0  # the pass did write
    assert "preemption" not in now
    assert now["lastEviction"]["time"] == "t1"

    # The watch catches up: it is the truth again, and nothing more is written.
    h.group(podgroup("victim", min_member=2, status=now))
    writer.write_groups(idle, 3.0, "t3")
    await writer.drain()
    assert api.stored["victim"]["status"] == now
    # Really marked again (it ran again): written.
    again = D.MarkWillEvict(victim="pg-victim", preemptor="pg-urgent", deadline=1.8e9)
    writer.write_groups(SessionResult(decisions=(again,), explanations={}), 4.0, "t4")
    await writer.drain()
    assert api.stored["victim"]["status"]["preemption"]["role"] == "WillEvict"


class TimeoutAfterApply(StoringApi):
    """A PATCH the API server applies but whose answer never reaches us (a client timeout)."""

    lose_next = False

    async def json_patch(self, path: str, ops: list[dict[str, Any]]) -> dict[str, Any]:
        answer = await super().json_patch(path, ops)
        if self.lose_next:
            self.lose_next = False
            raise TimeoutError
        return answer


def _victim_and_preemptor(api_type: type[StoringApi]) -> tuple[Harness, StoringApi, StatusWriter]:
    h = Harness()
    h.group(podgroup("victim", min_member=2, status={"phase": "Running"}))
    h.group(podgroup("urgent", min_member=1, status={"phase": "Inqueue"}))
    for i in range(2):
        h.pod(pod(f"victim-{i}", group="victim", node="n1", phase="Running"))
    api = api_type({"victim": {"phase": "Running"}, "urgent": {"phase": "Inqueue"}})
    fake: Any = api
    return h, api, StatusWriter(fake, h.cache, SchedulerMetrics(), concurrency=2)


_MARK = D.MarkWillEvict(victim="pg-victim", preemptor="pg-urgent", deadline=1.8e9)
_REVERT = D.RevertDelayedPreemption(("pg-urgent", "pg-victim"), "preemptor gone")
_IDLE = SessionResult(decisions=(), explanations={})


async def test_a_revoke_applied_but_unanswered_does_not_bring_the_mark_back() -> None:
    """A WillEvict revoked by a write the API applied but whose answer timed out: once the
    watch shows the revoke, no later pass may send the mark back (it would come due and evict
    the victim for a preemption that was called off)."""
    h, api, writer = _victim_and_preemptor(TimeoutAfterApply)
    writer.write_groups(SessionResult(decisions=(_MARK,), explanations={}), 1.0, "t1")
    await writer.drain()
    assert api.stored["victim"]["status"]["preemption"]["role"] == "WillEvict"
    assert isinstance(api, TimeoutAfterApply)
    api.lose_next = True
    writer.write_groups(SessionResult(decisions=(_REVERT,), explanations={}), 2.0, "t2")
    await writer.drain()
    applied = dict(api.stored["victim"]["status"])
    assert "preemption" not in applied
    h.group(podgroup("victim", min_member=2, status=applied))  # the watch catches up
    writer.write_groups(_IDLE, 3.0, "t3")
    await writer.drain()
    assert "preemption" not in api.stored["victim"]["status"]


async def test_a_revoked_mark_stays_revoked_when_the_watch_lags_two_writes() -> None:
    """Marked, then revoked, before the watch showed either: the watch's first state equals
    the revoke, its next (the mark) is older than the revoke. A write after it (a pod left)
    must not send the mark back."""
    h, api, writer = _victim_and_preemptor(StoringApi)
    writer.write_groups(_IDLE, 0.0, "t0")
    await writer.drain()
    first = dict(api.stored["victim"]["status"])
    h.group(podgroup("victim", min_member=2, status=first))
    writer.write_groups(SessionResult(decisions=(_MARK,), explanations={}), 1.0, "t1")
    await writer.drain()
    marked = dict(api.stored["victim"]["status"])
    writer.write_groups(SessionResult(decisions=(_REVERT,), explanations={}), 2.0, "t1")
    await writer.drain()
    writer.write_groups(_IDLE, 2.5, "t1")  # the watch still shows `first`, equal to the revoke
    await writer.drain()
    h.group(podgroup("victim", min_member=2, status=marked))  # then delivers the mark
    leaving = pod("victim-1", group="victim", node="n1", phase="Running")
    leaving["metadata"]["deletionTimestamp"] = "2026-11-22T09:00:01Z"
    h.pod(leaving)
    writer.write_groups(_IDLE, 3.0, "t1")
    await writer.drain()
    assert "preemption" not in api.stored["victim"]["status"]


async def test_a_write_that_failed_is_sent_again() -> None:
    """A revoke that never reached the API is not taken as done: the next pass sends it."""

    class Refusing(StoringApi):
        refuse_next = False

        async def json_patch(self, path: str, ops: list[dict[str, Any]]) -> dict[str, Any]:
            if self.refuse_next:
                self.refuse_next = False
                raise TimeoutError
            return await super().json_patch(path, ops)

    h, api, writer = _victim_and_preemptor(Refusing)
    writer.write_groups(SessionResult(decisions=(_MARK,), explanations={}), 1.0, "t1")
    await writer.drain()
    h.group(podgroup("victim", min_member=2, status=dict(api.stored["victim"]["status"])))
    assert isinstance(api, Refusing)
    api.refuse_next = True
    writer.write_groups(SessionResult(decisions=(_REVERT,), explanations={}), 2.0, "t2")
    await writer.drain()
    assert api.stored["victim"]["status"]["preemption"]["role"] == "WillEvict"
    writer.write_groups(_IDLE, 3.0, "t3")
    await writer.drain()
    assert "preemption" not in api.stored["victim"]["status"]


async def test_a_pass_skipped_while_the_write_is_in_flight_asks_for_another() -> None:
    """Seen in CI under load: a group's reason changed while its previous status write was on
    the wire, so the pass skipped it; the write's watch echo came before its answer, and no
    other pass came for a whole safety tick. The write's end asks for a pass over the group."""
    h = Harness()
    h.group(podgroup("steady", min_member=1, status={"phase": "Pending"}))
    api = MergeRecorder()
    fake: Any = api
    writer = StatusWriter(fake, h.cache, SchedulerMetrics(), concurrency=2)
    writer._in_flight.add("pg-steady")
    h.cache.dirty_groups.clear()
    h.changes.clear()
    writer.write_groups(SessionResult(decisions=(), explanations={}), 0.0, "t0")
    assert not api.patches  # skipped
    assert not h.changes  # and nothing asked yet

    await writer._write(
        "pg-steady", "/the/in/flight/write", writer._merge("/the/in/flight/write", {"status": {}})
    )
    assert ("ns", "steady") in h.cache.dirty_groups
    assert h.changes == ["status"]  # the loop wakes and passes over the dirty group
    h.changes.clear()
    await writer._write(
        "pg-steady", "/a/later/write", writer._merge("/a/later/write", {"status": {}})
    )
    assert not h.changes  # asked once per skipped pass


async def test_count_changes_are_coalesced_and_the_last_counts_land_on_time() -> None:
    """500 gangs of 20 wrote 2.6 status patches each as their pods were bound and turned
    Running one by one. A change of the counts alone waits out its interval from when it was
    first seen; a phase change does not wait; and the last counts are written when the
    interval runs out, with no other event to bring a pass."""
    h = Harness()
    h.group(podgroup("g", min_member=2, status={"phase": "Inqueue"}))
    for i in range(2):
        h.pod(pod(f"g-{i}", group="g"))
    api = StoringApi({"g": {"phase": "Inqueue"}})
    fake: Any = api
    writer = StatusWriter(fake, h.cache, SchedulerMetrics(), concurrency=2, count_interval=0.2)
    key = ("ns", "g")
    writes: list[dict[str, Any]] = []

    async def step(now: float, *pods: dict[str, Any]) -> None:
        for raw in pods:
            h.pod(raw)
        before = dict(api.stored["g"]["status"])
        writer.write_groups(_IDLE, now, "t", only={key})
        await writer.drain()
        if api.stored["g"]["status"] != before:
            writes.append(dict(api.stored["g"]["status"]))
        h.group(podgroup("g", min_member=2, status=api.stored["g"]["status"]))  # the echo

    await step(100.0, pod("g-0", group="g", node="n1"))  # the first write: at once
    await step(100.01, pod("g-1", group="g", node="n1"))  # quorum: the phase goes at once
    assert [(w["phase"], w["pending"]) for w in writes] == [("Inqueue", 1), ("Running", 0)]
    await step(100.02, pod("g-0", group="g", node="n1", phase="Running"))
    await step(100.03, pod("g-1", group="g", node="n1", phase="Running"))
    assert len(writes) == 2  # held back: the counts alone changed, within the interval

    h.changes.clear()
    h.cache.dirty_groups.clear()
    await asyncio.sleep(0.3)  # the interval runs out: the timer asks for one pass
    assert h.changes == ["status"]
    assert h.cache.dirty_groups == {key}
    await step(100.3)
    assert [(w["phase"], w["running"], w["pending"]) for w in writes[2:]] == [("Running", 2, 0)]
    await asyncio.sleep(0.3)
    assert h.changes == ["status"]  # nothing is held any more: no other timer

    # Long after the last write, a change of the counts alone still waits its interval (were
    # it written at once, a gang's first bindings and its Running phase would be two writes).
    await step(200.0, pod("g-2", group="g"))
    assert len(writes) == 3
    await asyncio.sleep(0.3)
    await step(200.3)
    assert [(w["running"], w["pending"]) for w in writes[3:]] == [(2, 1)]


async def test_held_counts_land_at_their_interval_even_behind_a_held_message() -> None:
    """A message-only change armed the group's timer for the (longer) message interval; the
    counts that changed next must not wait for it (they did: up to 10 s late)."""
    h = Harness()
    h.group(podgroup("g", min_member=3, status={"phase": "Pending"}))
    h.pod(pod("g-0", group="g"))
    api = StoringApi({"g": {"phase": "Pending"}})
    fake: Any = api
    writer = StatusWriter(
        fake, h.cache, SchedulerMetrics(), 2, message_interval=1.0, count_interval=0.2
    )

    def why(text: str) -> SessionResult:
        e = D.Explanation("pg-g", D.ReasonCode.NOT_ADMITTED, text)
        return SessionResult(decisions=(), explanations={"pg-g": e})

    async def step(now: float, text: str) -> None:
        writer.write_groups(why(text), now, "t", only={("ns", "g")})
        await writer.drain()
        h.group(podgroup("g", min_member=3, status=api.stored["g"]["status"]))

    await step(100.0, "needs 3 GPUs; 0 free")  # written
    await step(100.01, "needs 3 GPUs; 1 free")  # the message alone: held, 1 s timer
    h.pod(pod("g-1", group="g"))
    await step(100.02, "needs 3 GPUs; 1 free")  # the counts: held for 0.2 s
    assert api.stored["g"]["status"].get("pending") == 1
    h.changes.clear()
    h.cache.dirty_groups.clear()
    await asyncio.sleep(0.4)
    assert h.cache.dirty_groups == {("ns", "g")}


async def test_a_lost_lease_cancels_the_timers_of_held_counts() -> None:
    h = Harness()
    h.group(podgroup("g", min_member=1, status={"phase": "Running", "running": 0, "pending": 0}))
    h.pod(pod("g-0", group="g", node="n1", phase="Running"))
    api = MergeRecorder()
    fake: Any = api
    writer = StatusWriter(fake, h.cache, SchedulerMetrics(), concurrency=2, count_interval=0.1)
    writer.write_groups(_IDLE, 100.0, "t")  # conditions appear: written
    await writer.drain()
    h.group(podgroup("g", min_member=1, status=api.patches[-1][1]["status"] | {"phase": "Running"}))
    h.pod(pod("g-1", group="g", node="n1", phase="Running"))
    writer.write_groups(_IDLE, 100.05, "t")
    assert len(api.patches) == 1  # the new count is held back
    writer.cancel()
    h.changes.clear()
    await asyncio.sleep(0.2)
    assert not h.changes  # a new leader writes the counts, not this process


@pytest.mark.parametrize("change", ["counts", "pool", "explanation", "phase", "mark"])
async def test_a_group_found_unchanged_is_written_again_when_what_it_is_made_of_changes(
    change: str,
) -> None:
    """A pass that found nothing of a group to write skips it next time while its record and
    the rest of what its status is made of stay the same (a full pass over 16,000 unchanged
    groups held the loop for a second per session); a change of any of that rest, with the
    record the same, is written."""
    h = Harness()
    raw = podgroup("g", min_member=2, status={"phase": "Pending"})
    raw["spec"]["pool"] = "gpu"
    h.group(raw)
    h.group(podgroup("urgent", min_member=1, status={"phase": "Inqueue"}))
    h.pod(pod("g-0", group="g"))
    api = StoringApi({"g": {"phase": "Pending"}, "urgent": {"phase": "Inqueue"}})
    fake: Any = api
    writer = StatusWriter(fake, h.cache, SchedulerMetrics(), concurrency=2)
    writer.write_groups(_IDLE, 100.0, "t0")
    await writer.drain()
    raw["status"] = dict(api.stored["g"]["status"])
    h.group(raw)  # the echo
    written = dict(api.stored["g"]["status"])
    writer.write_groups(_IDLE, 101.0, "t1")
    await writer.drain()
    assert api.stored["g"]["status"] == written  # nothing to write: remembered as such

    result = _IDLE
    if change == "counts":
        h.pod(pod("g-1", group="g"))
    elif change == "pool":
        h.cache.on_pool("ADDED", ("", "gpu"), S.Pool(name="gpu"), None)
    elif change == "explanation":
        why = D.Explanation("pg-g", D.ReasonCode.NOT_ADMITTED, "needs 2 GPUs; 0 free")
        result = SessionResult(decisions=(), explanations={"pg-g": why})
    elif change == "phase":
        result = SessionResult((D.SetGroupPhase("pg-g", P.INQUEUE),), explanations={})
    else:
        mark = D.MarkWillEvict(victim="pg-g", preemptor="pg-urgent", deadline=1.8e9)
        result = SessionResult(decisions=(mark,), explanations={})
    writer.write_groups(result, 102.0, "t2")
    await writer.drain()
    assert api.stored["g"]["status"] != written


def test_a_running_group_shows_only_waits_no_room_solves() -> None:
    gone = D.Explanation("g", D.ReasonCode.QUEUE_MISSING, "queue 'gone' does not exist")
    by_type = {c["type"]: c for c in desired_conditions(P.RUNNING, gone, [], "t")}
    assert by_type["Scheduled"]["status"] == "True"
    assert by_type["Scheduled"]["reason"] == "Scheduled"
    assert by_type["Unschedulable"]["status"] == "True"
    assert by_type["Unschedulable"]["reason"] == "QueueMissing"
    assert by_type["Unschedulable"]["message"] == "queue 'gone' does not exist"
    room = D.Explanation("g", D.ReasonCode.QUOTA_EXCEEDED, "queue 'a' is at its deserved share")
    by_type = {c["type"]: c for c in desired_conditions(P.RUNNING, room, [], "t")}
    assert by_type["Unschedulable"]["status"] == "False"


async def test_a_one_pod_jobs_group_is_written_once_per_phase_nothing_lost() -> None:
    """A one-pod job's group was written five to eight times by the scheduler under load: at
    admission, `Admitted` -> `Waiting` (its pod not created yet), `Scheduled` with one pending
    member, Running, then `running: 1` once kwok ran the pod. Condition reasons and counts
    alone now wait `count_interval` and go with the next phase change: Inqueue, then Running
    (with everything held), and nothing after it when the pod ends within the interval. A
    condition's status flip is not held."""
    h = Harness()
    h.group(podgroup("g", min_member=1, status={"phase": "Pending"}))
    api = StoringApi({"g": {"phase": "Pending"}})
    fake: Any = api
    writer = StatusWriter(fake, h.cache, SchedulerMetrics(), concurrency=2, count_interval=0.3)
    key = ("ns", "g")
    writes: list[dict[str, Any]] = []

    async def step(now: float, result: SessionResult = _IDLE) -> None:
        before = dict(api.stored["g"]["status"])
        writer.write_groups(result, now, "t", only={key})
        await writer.drain()
        if api.stored["g"]["status"] != before:
            writes.append(dict(api.stored["g"]["status"]))
        h.group(podgroup("g", min_member=1, status=api.stored["g"]["status"]))  # the echo

    def why(code: D.ReasonCode) -> SessionResult:
        return SessionResult(decisions=(), explanations={"pg-g": D.Explanation("pg-g", code, "")})

    admit = D.SetGroupPhase("pg-g", P.INQUEUE)
    await step(100.0, SessionResult(decisions=(admit,), explanations={}))
    assert [w["phase"] for w in writes] == ["Inqueue"]  # at once: the job creates pods now
    await step(100.1)  # no explanation: `Waiting`, a reason change alone
    h.pod(pod("g-0", group="g"))
    await step(100.2, why(D.ReasonCode.SCHEDULED))  # pending 1, `Scheduled`: held too
    assert len(writes) == 1
    h.pod(pod("g-0", group="g", node="n1"))
    await step(100.25)  # bound: Running at once, with what was held
    assert [(w["phase"], w["pending"]) for w in writes] == [("Inqueue", 0), ("Running", 0)]
    conditions = {c["type"]: c["status"] for c in writes[-1]["conditions"]}
    assert conditions["Scheduled"] == "True"
    h.pod(pod("g-0", group="g", node="n1", phase="Running"))
    await step(100.3)  # running 1: held
    h.delete_pod("g-0")  # it succeeded: it leaves the scheduler's watch within the interval
    await asyncio.sleep(0.4)
    await step(100.7)
    assert len(writes) == 2  # the podgroup operator writes Completed from here

    # A status flip is not held: the group's pod is back, waiting, and the queue is full.
    h.group(podgroup("g", min_member=1, status=api.stored["g"]["status"] | {"phase": "Pending"}))
    h.pod(pod("g-1", group="g"))
    await step(200.0, why(D.ReasonCode.NOT_ADMITTED))
    assert len(writes) == 3
    assert {c["type"]: c["status"] for c in writes[-1]["conditions"]}["Unschedulable"] == "True"
