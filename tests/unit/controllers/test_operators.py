"""The pool, queue and podgroup operators' reconcile passes, against a narrow recording client
(the kopf indexes are plain mappings of key -> list of values, as kopf hands them over)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from operators.api import labels as L
from operators.api.scheduling import PodGroup, Queue
from operators.controllers.coalesce import Coalescer, LastSeen
from operators.controllers.podgroup import (
    GroupView,
    PodGroupOperator,
    group_key,
    group_view,
    membership,
)
from operators.controllers.pool import PoolOperator
from operators.controllers.pool_membership import PoolObject
from operators.controllers.queue import QueueOperator
from operators.controllers.queue_tree import QueueObject, queue_object
from operators.controllers.scheduler_status import MOVE_WINDOW
from operators.runtime import records as R
from operators.runtime.client import ApiError


class Api:
    """Records writes; POSTs of objects that exist answer 409 like the API server."""

    def __init__(self, existing: set[str] | None = None) -> None:
        self.patches: list[tuple[str, dict[str, Any]]] = []
        self.posts: list[tuple[str, dict[str, Any]]] = []
        self.existing = existing or set()

    async def merge_patch(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.patches.append((path, body))
        return {}

    async def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        name = body.get("metadata", {}).get("name")
        if name in self.existing:
            raise ApiError(409, {"reason": "AlreadyExists"}, "POST", path)
        self.posts.append((path, body))
        return body


class Events:
    def __init__(self) -> None:
        self.posted: list[tuple[str, str, str]] = []

    def post(self, involved: dict[str, Any], event_type: str, reason: str, message: str) -> None:
        self.posted.append((involved["name"], reason, message))


def pool_obj(name: str, value: str, status: dict[str, Any] | None = None) -> PoolObject:
    body = {"metadata": {"name": name}, "spec": {"nodeSelector": {"matchLabels": {"k": value}}}}
    return PoolObject(R.pool(body), 1, status or {}, uid=f"u-{name}")


async def test_pool_pass_relabels_stale_nodes_writes_status_and_creates_default() -> None:
    api, events = Api(), Events()
    fake: Any = api
    op = PoolOperator(fake, events)  # type: ignore[arg-type]
    op.nodes = {"a": [{"k": "x", L.POOL: "y-pool"}], "b": [{"k": "x", L.POOL: "x-pool"}]}
    op.pools = {"x-pool": [pool_obj("x-pool", "x")], "y-pool": [pool_obj("y-pool", "y")]}
    assert await op.reconcile() is None
    assert [p for p, _ in api.posts] == ["/apis/scheduling.sluice.dev/v1alpha1/pools"]
    node_patches = {p: b for p, b in api.patches if p.startswith("/api/v1/nodes/")}
    assert node_patches == {"/api/v1/nodes/a": {"metadata": {"labels": {L.POOL: "x-pool"}}}}
    counts = {
        p.rsplit("/", 2)[-2]: b["status"]["nodeCount"] for p, b in api.patches if "status" in b
    }
    assert counts == {"x-pool": 2, "y-pool": 0}
    assert events.posted[0][:2] == ("x-pool", "NodesJoined")


async def test_queue_pass_flags_the_broken_queue_once() -> None:
    api, events = Api(existing={"root", "default"}), Events()
    fake: Any = api
    op = QueueOperator(fake, events)  # type: ignore[arg-type]
    bodies = [
        {"metadata": {"name": "root"}, "spec": {}},
        {"metadata": {"name": "default"}, "spec": {}},
        {"metadata": {"name": "ok"}, "spec": {"parent": "root"}},
        {"metadata": {"name": "lost"}, "spec": {"parent": "nowhere"}},
    ]
    op.queues = {b["metadata"]["name"]: [queue_object(b)] for b in bodies}
    await op.reconcile()
    written = {p.rsplit("/", 2)[-2]: b["status"] for p, b in api.patches}
    assert written["lost"]["conditions"][0]["reason"] == "ParentNotFound"
    assert written["ok"]["conditions"][0]["status"] == "True"
    assert written["ok"]["state"] == "Open"
    assert events.posted == [
        ("lost", "ParentNotFound", written["lost"]["conditions"][0]["message"])
    ]
    # The API now holds what was written: nothing more to write, no second Event.
    op.queues = {
        name: [queue_object({**b, "status": written[name]})]
        for name, b in ((b["metadata"]["name"], b) for b in bodies)
    }
    api.patches.clear()
    await op.reconcile()
    assert api.patches == []
    assert len(events.posted) == 1


async def test_queue_pass_creates_root_and_default_when_missing() -> None:
    api, events = Api(existing={"root"}), Events()
    fake: Any = api
    op = QueueOperator(fake, events)  # type: ignore[arg-type]
    op.queues = {"root": [queue_object({"metadata": {"name": "root"}, "spec": {}})]}
    await op.reconcile()
    created = [(path, body["metadata"]["name"], body["spec"]) for path, body in api.posts]
    assert created == [(Queue.api_path(), "default", {"parent": "root"})]


def pod_body(name: str, group: str, scheduler: str = "sluice") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "ns", "annotations": {L.VOLCANO_GROUP_NAME: group}},
        "spec": {"schedulerName": scheduler},
    }


def member(op: PodGroupOperator, pod: str, group: str, phase: str) -> None:
    """The pod informer reports a pod of `group` in `phase` (its previous record, if any)."""
    body = pod_body(pod, group)
    body["status"] = {"phase": phase}
    old = next(
        ((g, p) for g, pods in op.members.items() for k, p in pods.items() if k == ("ns", pod)),
        None,
    )
    op.on_pod("MODIFIED", ("ns", pod), membership(body), old)


async def test_a_pod_moves_between_groups_and_leaves_with_its_deletion() -> None:
    """What the informer reports keeps each group's member phases: a pod relabelled to another
    group leaves the first (both are re-checked), a deleted pod leaves its group."""
    op = PodGroupOperator(Api())
    member(op, "a", "g1", "Running")
    member(op, "b", "g1", "Succeeded")
    op.dirty.clear()
    op.on_pod("MODIFIED", ("ns", "a"), (("ns", "g2"), "Running"), (("ns", "g1"), "Running"))
    assert op.members == {
        ("ns", "g1"): {("ns", "b"): "Succeeded"},
        ("ns", "g2"): {("ns", "a"): "Running"},
    }
    assert op.dirty == {("ns", "g1"), ("ns", "g2")}
    op.on_pod("DELETED", ("ns", "b"), None, (("ns", "g1"), "Succeeded"))
    assert op.members == {("ns", "g2"): {("ns", "a"): "Running"}}
    assert membership(pod_body("p", "g", scheduler="default-scheduler")) is None
    assert membership(pod_body("p", "g")) == (("ns", "g"), "Pending")


def test_group_key_reads_both_annotations_and_only_our_pods() -> None:
    assert group_key(pod_body("p", "g")) == ("ns", "g")
    assert group_key(pod_body("p", "g", scheduler="default-scheduler")) is None


async def test_podgroup_pass_writes_completed_and_leaves_groupless_pods_alone() -> None:
    api = Api()
    fake: Any = api
    op = PodGroupOperator(fake)
    member(op, "a", "done", "Succeeded")
    member(op, "b", "done", "Succeeded")
    member(op, "c", "nope", "Pending")
    op.groups = {("ns", "done"): [GroupView(2, {"phase": "Running"})]}
    assert op.dirty == {("ns", "done"), ("ns", "nope")}
    assert await op.reconcile() is None
    ((path, body),) = api.patches
    assert path == f"{PodGroup.api_path('ns', 'done')}/status"
    assert body == {"status": {"phase": "Completed", "succeeded": 2}}
    assert op.dirty == set()


async def test_podgroup_pass_leaves_a_readmitted_job_group_to_its_new_round() -> None:
    """The jobs operator set a restarted job's group back to Pending; the other task's pods
    stay Succeeded. Only the count is written, never Failed/Completed over the re-admission."""
    api = Api()
    fake: Any = api
    op = PodGroupOperator(fake)
    job_ref = {"apiVersion": "batch.sluice.dev/v1alpha1", "kind": "VCJob", "name": "j"}
    spec, status = {"minMember": 3}, {"phase": "Pending"}
    for group in ("j", "plain"):
        member(op, f"{group}-0", group, "Succeeded")
        member(op, f"{group}-1", group, "Succeeded")
    op.groups = {
        ("ns", "j"): [group_view(spec, status, {"ownerReferences": [job_ref]})],
        ("ns", "plain"): [group_view(spec, status, {})],  # control: no job owns it
    }
    op.dirty = {("ns", "j"), ("ns", "plain")}
    await op.reconcile()
    assert dict(api.patches) == {
        f"{PodGroup.api_path('ns', 'j')}/status": {"status": {"succeeded": 2}},
        f"{PodGroup.api_path('ns', 'plain')}/status": {
            "status": {"phase": "Failed", "succeeded": 2}
        },
    }


async def test_podgroup_pass_does_not_finish_a_group_whose_members_are_being_moved() -> None:
    """Two of a job's four pods Succeeded; consolidation moved the other two, deleted and not
    yet re-created. Before, the operator saw every member stopped and wrote Failed (2 of 4
    succeeded) over the Running group, and Pending once the moved pods came back, so the job
    lost its admission. Now only the count is written and the group is looked at again when
    the move window ends; past it, the same members finish the group as before."""
    api = Api()
    fake: Any = api
    now = 1.8e9
    op = PodGroupOperator(fake, clock=lambda: now)
    member(op, "g-0", "g", "Succeeded")
    member(op, "g-1", "g", "Succeeded")
    moved_at = now - 5.0
    status = {
        "phase": "Running",
        "lastEviction": {"reason": "Consolidated", "time": R.rfc3339(moved_at)},
        "conditions": [
            {
                "type": R.CONSOLIDATED,
                "status": "True",
                "lastTransitionTime": R.rfc3339(moved_at),
            }
        ],
    }
    op.groups = {("ns", "g"): [GroupView(4, status)]}
    again = await op.reconcile()
    assert api.patches == [(f"{PodGroup.api_path('ns', 'g')}/status", {"status": {"succeeded": 2}})]
    assert again == pytest.approx(MOVE_WINDOW - 5.0)
    assert op.dirty == {("ns", "g")}
    api.patches.clear()
    now = moved_at + MOVE_WINDOW + 1.0
    op.groups = {("ns", "g"): [GroupView(4, {**status, "succeeded": 2})]}
    assert await op.reconcile() is None
    assert api.patches == [
        (f"{PodGroup.api_path('ns', 'g')}/status", {"status": {"phase": "Failed"}})
    ]


async def test_podgroup_pass_finishes_a_moved_group_that_was_placed_again() -> None:
    """Review s9 R2b: a moved job whose re-created pods were placed (the scheduler emptied
    lastEviction.movedTo) and then all finished, within the move window. Before, the operator
    kept it Running (`moving`) for the rest of the window, so enqueue kept its minResources
    reserved in its queue and newer work waited for quota a finished job held."""
    api = Api()
    fake: Any = api
    now = 1.8e9
    op = PodGroupOperator(fake, clock=lambda: now)
    member(op, "g-0", "g", "Succeeded")
    moved_at = now - 5.0
    stamp = {
        "reason": "Consolidated",
        "time": R.rfc3339(moved_at),
        "movedTo": [{"node": "n1", "pods": 1}],
    }
    cond = {"type": R.CONSOLIDATED, "status": "True", "lastTransitionTime": R.rfc3339(moved_at)}
    status = {"phase": "Running", "lastEviction": R.placed_again(stamp), "conditions": [cond]}
    op.groups = {("ns", "g"): [GroupView(1, status)]}
    assert await op.reconcile() is None
    assert api.patches == [
        (
            f"{PodGroup.api_path('ns', 'g')}/status",
            {"status": {"phase": "Completed", "succeeded": 1}},
        )
    ]


async def test_coalescer_runs_once_for_a_burst_of_pokes() -> None:
    calls: list[int] = []

    async def reconcile() -> float | None:
        calls.append(1)
        return None

    stop = asyncio.Event()
    c = Coalescer("t", reconcile, interval=0.05)
    task = asyncio.create_task(c.run(stop))
    for _ in range(50):
        c.poke()
    await asyncio.sleep(0.2)
    assert c.passes == 1
    c.poke()
    await asyncio.sleep(0.2)
    stop.set()
    await asyncio.wait_for(task, 1)
    assert len(calls) == 2


async def test_coalescer_reruns_when_a_pass_asks_for_it_without_a_poke() -> None:
    calls: list[int] = []

    async def reconcile() -> float | None:
        calls.append(1)
        return 0.05 if len(calls) < 3 else None

    stop = asyncio.Event()
    c = Coalescer("t", reconcile, interval=0.01)
    task = asyncio.create_task(c.run(stop))
    c.poke()
    await asyncio.sleep(0.5)
    stop.set()
    await asyncio.wait_for(task, 1)
    assert len(calls) == 3


def test_an_event_log_write_starts_no_podgroup_or_queue_reconcile() -> None:
    """Only the events operator reads `status.eventLog`: its writes leave the podgroup and queue
    operators' views as they were (and out of their indexes), so their events poke nothing."""
    seen: LastSeen[str, GroupView] = LastSeen()
    spec, status = {"minMember": 2}, {"phase": "Running", "running": 2}
    logged = {**status, "eventLog": {"seq": 3, "entries": []}}
    assert seen.changed("g", group_view(spec, status, {}))
    assert not seen.changed("g", group_view(spec, logged, {}))
    assert "eventLog" not in group_view(spec, logged, {}).status
    assert seen.changed("g", group_view(spec, {**logged, "phase": "Completed"}, {}))
    assert seen.changed("g", None)  # deleted
    assert seen.changed("g", group_view(spec, status, {}))  # created again

    queues: LastSeen[str, QueueObject] = LastSeen()
    body: dict[str, Any] = {"metadata": {"name": "q"}, "spec": {}, "status": {"state": "Open"}}
    assert queues.changed("q", queue_object(body))
    body["status"]["eventLog"] = {"seq": 1}
    assert not queues.changed("q", queue_object(body))
    body["status"]["state"] = "Closed"
    assert queues.changed("q", queue_object(body))
