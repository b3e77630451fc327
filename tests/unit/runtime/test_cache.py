from __future__ import annotations

from typing import Any

from operators.runtime import records as R
from operators.runtime.cache import SchedulerCache
from operators.runtime.informer import object_key
from operators.scheduler import snapshot as S

from .factories import node, pod, podgroup


class Harness:
    """Feeds raw objects through the same path the informers use."""

    def __init__(self) -> None:
        self.changes: list[str] = []
        self.cache = SchedulerCache("sluice", self.changes.append)
        self.pods: dict[tuple[str, str], R.PodRecord] = {}
        self.nodes: dict[tuple[str, str], S.Node] = {}
        self.groups: dict[tuple[str, str], R.GroupRecord] = {}

    def pod(self, raw: dict[str, Any]) -> None:
        key, new = object_key(raw), R.pod(raw)
        old = self.pods.get(key)
        self.pods[key] = new
        self.cache.on_pod("MODIFIED" if old else "ADDED", key, new, old)

    def delete_pod(self, name: str, namespace: str = "ns") -> None:
        key = (namespace, name)
        self.cache.on_pod("DELETED", key, None, self.pods.pop(key))

    def node(self, raw: dict[str, Any]) -> None:
        key, new = object_key(raw), R.node(raw)
        old = self.nodes.get(key)
        self.nodes[key] = new
        self.cache.on_node("MODIFIED" if old else "ADDED", key, new, old)

    def group(self, raw: dict[str, Any]) -> None:
        key, new = object_key(raw), R.podgroup(raw)
        old = self.groups.get(key)
        self.groups[key] = new
        self.cache.on_podgroup("MODIFIED" if old else "ADDED", key, new, old)


def test_plain_pod_becomes_implicit_one_pod_group() -> None:
    h = Harness()
    h.node(node("n1"))
    h.pod(pod("web-1"))
    snap = h.cache.snapshot(0.0)
    assert [g.uid for g in snap.groups] == ["pod:uid-web-1"]
    assert snap.groups[0].min_member == 1
    assert [t.group for t in snap.tasks] == ["pod:uid-web-1"]
    assert h.changes[-1] == "schedule"


def test_pod_naming_a_missing_group_waits_for_it() -> None:
    h = Harness()
    h.pod(pod("w-0", group="train"))
    assert h.cache.snapshot(0.0).tasks == ()
    h.group(podgroup("train", min_member=4))
    snap = h.cache.snapshot(0.0)
    assert [t.group for t in snap.tasks] == ["pg-train"]
    assert [g.min_member for g in snap.groups] == [4]


def test_foreign_pods_count_on_their_node_but_ours_do_not() -> None:
    h = Harness()
    h.node(node("n1"))
    h.pod(pod("other", scheduler="default-scheduler", cpu="2", node="n1", phase="Running"))
    h.pod(pod("mine", cpu="3", node="n1", phase="Running"))
    (n,) = h.cache.snapshot(0.0).nodes
    assert n.foreign_used == {"cpu": 2000}
    assert n.foreign_pods == 1
    h.delete_pod("other")
    (n,) = h.cache.snapshot(0.0).nodes
    assert n.foreign_pods == 0
    assert not n.foreign_used


def test_assume_then_watch_confirms() -> None:
    h = Harness()
    h.node(node("n1"))
    h.pod(pod("p", gpu=2))
    assert h.cache.assume("uid-p", "n1", (0, 1), now=10.0)
    (t,) = h.cache.snapshot(11.0).tasks
    assert t.status is S.TaskStatus.BOUND
    assert t.node == "n1"
    assert t.gpu_ids == (0, 1)
    assert not h.cache.has_pending_work()
    h.cache.finish_binding("uid-p", 11.0)
    h.pod(pod("p", gpu=2, node="n1", annotations={"scheduling.sluice.dev/gpu-ids": "0,1"}))
    assert h.cache.assumed == {}
    (t,) = h.cache.snapshot(12.0).tasks
    assert t.node == "n1"
    assert t.gpu_ids == (0, 1)


def test_forget_makes_the_pod_pending_again() -> None:
    h = Harness()
    h.pod(pod("p"))
    h.cache.assume("uid-p", "n1", (), now=0.0)
    h.changes.clear()
    h.cache.forget("uid-p")
    (t,) = h.cache.snapshot(1.0).tasks
    assert t.status is S.TaskStatus.PENDING
    assert t.node is None
    assert h.changes == ["schedule"]


def test_unconfirmed_assumption_expires() -> None:
    h = Harness()
    h.pod(pod("p"))
    h.cache.assume("uid-p", "n1", (), now=0.0)
    h.cache.finish_binding("uid-p", 0.0)
    assert h.cache.expire_assumptions(30.0, ttl=60.0) == []
    assert h.cache.expire_assumptions(61.0, ttl=60.0) == ["uid-p"]
    assert h.cache.has_pending_work()


def test_node_heartbeat_does_not_trigger_a_cycle() -> None:
    h = Harness()
    h.node(node("n1"))
    h.changes.clear()
    beat = node("n1")
    beat["status"]["conditions"][0]["lastHeartbeatTime"] = "later"
    h.node(beat)
    assert h.changes == []


def test_pod_turning_running_is_a_status_change_only() -> None:
    h = Harness()
    h.pod(pod("p", node="n1"))
    h.changes.clear()
    h.pod(pod("p", node="n1", phase="Running"))
    assert h.changes == ["status"]


def test_finished_groups_leave_the_snapshot() -> None:
    h = Harness()
    h.group(podgroup("done", status={"phase": "Completed"}))
    h.group(podgroup("live"))
    assert [g.name for g in h.cache.snapshot(0.0).groups] == ["live"]


def test_preemption_peers_resolve_to_group_uids() -> None:
    h = Harness()
    h.group(podgroup("big"))
    h.group(
        podgroup(
            "small",
            status={
                "preemption": {
                    "role": "WillEvict",
                    "peers": ["ns/big"],
                    "deadline": "2026-11-22T09:00:00Z",
                }
            },
        )
    )
    groups = {g.name: g for g in h.cache.snapshot(0.0).groups}
    mark = groups["small"].preemption
    assert mark is not None
    assert mark.peers == ("pg-big",)
    assert h.cache.peer_ref("pg-big") == "ns/big"


def test_pod_changes_mark_their_group_for_a_status_pass() -> None:
    h = Harness()
    h.group(podgroup("g", min_member=2))
    h.cache.dirty_groups.clear()
    h.pod(pod("g-0", group="g", node="n1"))
    h.pod(pod("solo"))
    assert h.cache.dirty_groups == {("ns", "g")}


def _budget(allowed: int) -> R.BudgetRecord:
    return R.budget(
        {
            "metadata": {"namespace": "ns", "name": "pdb"},
            "spec": {"selector": {"matchLabels": {"app": "train"}}},
            "status": {"disruptionsAllowed": allowed},
        }
    )


def test_a_budget_lowers_max_unavailable_but_never_lifts_preemptible_false() -> None:
    h = Harness()
    pinned, loose = podgroup("pinned"), podgroup("loose")
    pinned["spec"]["preemptible"] = False
    h.group(pinned)
    h.group(loose)
    for name, grp in (("p-0", "pinned"), ("l-0", "loose")):
        h.pod(pod(name, group=grp, node="n1", phase="Running", labels={"app": "train"}))
    h.cache.on_budget("ADDED", ("ns", "pdb"), _budget(5), None)
    by_name = {g.name: g.max_unavailable for g in h.cache.snapshot(0.0).groups}
    assert by_name == {"pinned": 0, "loose": 5}


def test_a_finished_groups_pods_keep_their_node_until_gone_and_reserve_nothing() -> None:
    h = Harness()
    h.node(node("n1", gpus=8))
    h.group(podgroup("done", min_member=2, status={"phase": "Running"}))
    for i in range(2):
        h.pod(pod(f"d-{i}", group="done", node="n1", gpu=4, phase="Running"))
        h.pod(pod(f"late-{i}", group="done", gpu=4))  # never placed: the job is done
    assert len(h.cache.snapshot(0.0).tasks) == 4

    h.group(podgroup("done", min_member=2, status={"phase": "Completed"}))
    snap = h.cache.snapshot(1.0)
    assert [g.name for g in snap.groups] == []  # no quota, never enqueued again
    assert snap.tasks == ()
    n1 = snap.nodes[0]
    # The terminating pods still hold their 8 GPUs: nothing may be placed on them.
    assert n1.foreign_used.get("nvidia.com/gpu") == 8
    assert n1.foreign_pods == 2

    h.delete_pod("d-0")
    h.delete_pod("d-1")
    n1 = h.cache.snapshot(2.0).nodes[0]
    assert n1.foreign_used.get("nvidia.com/gpu", 0) == 0


def test_pods_we_evict_are_releasing_until_the_watch_shows_them_leaving() -> None:
    h = Harness()
    h.node(node("n1"))
    h.group(podgroup("g", min_member=2))
    for i in range(3):
        h.pod(pod(f"p{i}", group="g", node="n1", phase="Running"))
    h.pod(pod("waiting", group="g"))

    def statuses() -> dict[str, S.TaskStatus]:
        return {t.uid: t.status for t in h.cache.snapshot(0.0).tasks}

    h.cache.expect_eviction(["uid-p0", "uid-p1", "uid-p2", "uid-waiting", "uid-nobody"])
    assert statuses() == {
        "uid-p0": S.TaskStatus.RELEASING,
        "uid-p1": S.TaskStatus.RELEASING,
        "uid-p2": S.TaskStatus.RELEASING,
        "uid-waiting": S.TaskStatus.PENDING,  # nothing to evict: not expected
    }
    # The eviction of p2 was refused (a PodDisruptionBudget): bound again.
    h.cache.eviction_failed(["uid-p2"])
    assert statuses()["uid-p2"] is S.TaskStatus.BOUND
    # The watch shows p0 leaving and p1 gone: their records are the truth from now on.
    leaving = pod("p0", group="g", node="n1", phase="Running")
    leaving["metadata"]["deletionTimestamp"] = "2026-11-22T09:00:01Z"
    h.pod(leaving)
    h.delete_pod("p1")
    assert statuses() == {
        "uid-p0": S.TaskStatus.RELEASING,
        "uid-p2": S.TaskStatus.BOUND,
        "uid-waiting": S.TaskStatus.PENDING,
    }
    assert not h.cache._evicted
