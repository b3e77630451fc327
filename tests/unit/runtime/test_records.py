from __future__ import annotations

from typing import Any

from operators.runtime import records as R
from operators.scheduler import snapshot as S

from .factories import node, pod, podgroup


def test_pod_requests_sum_containers_take_limits_for_missing_requests_and_max_init() -> None:
    spec = {
        "containers": [
            {"resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}},
            {"resources": {"limits": {"cpu": "1", "nvidia.com/gpu": "2"}}},
        ],
        "initContainers": [{"resources": {"requests": {"cpu": "4"}}}],
        "overhead": {"memory": "1Mi"},
    }
    assert R.pod_requests(spec) == {
        "cpu": 4000,
        "memory": 2**30 + 2**20,
        "nvidia.com/gpu": 2,
    }


def test_pod_record_reads_group_alias_and_gpu_ids() -> None:
    raw = pod(
        "p",
        gpu=2,
        annotations={"scheduling.k8s.io/group-name": "g", "scheduling.sluice.dev/gpu-ids": "4,5"},
    )
    rec = R.pod(raw)
    assert rec.group_name == "g"
    assert rec.gpu_ids == (4, 5)
    assert rec.scheduler_name == "sluice"
    assert R.task_status(rec) is S.TaskStatus.PENDING


def test_gpu_ids_count_only_as_many_cards_as_the_pod_asks_for() -> None:
    """The annotations are anyone's to write: a pod holds no card it does not request."""

    def claim(gpu: int, **annotations: str) -> tuple[tuple[int, ...], int]:
        ann = {f"scheduling.sluice.dev/{k.replace('_', '-')}": v for k, v in annotations.items()}
        rec = R.pod(pod("p", gpu=gpu, node="n1", annotations=ann))
        return rec.gpu_ids, rec.gpu_milli

    assert claim(0, gpu_ids="0,1,2,3,4,5,6,7") == ((), 0)  # no GPU request: no card
    assert claim(2, gpu_ids="3,3,5,6") == ((3, 5), 0)  # each card once, no more than asked
    assert claim(0, gpu_ids="2,4", gpu_milli="500") == ((2,), 500)  # a share sits on one card
    assert claim(1, gpu_ids="1", gpu_milli="500") == ((1,), 0)  # a whole card is no share


def test_node_translation_and_heartbeat_invisible() -> None:
    a, b = node("n1"), node("n1")
    b["status"]["conditions"][0]["lastHeartbeatTime"] = "later"
    b["metadata"]["resourceVersion"] = "999"
    na, nb = R.node(a), R.node(b)
    assert na == nb  # a heartbeat is not a change the scheduler cares about
    assert na.allocatable["cpu"] == 96000
    assert na.gpu_count == 8
    assert na.gpu_topology.nvlink == ((0, 1, 2, 3), (4, 5, 6, 7))
    assert not R.node(node("n2", ready=False)).ready


def test_podgroup_spec_and_preemption_status() -> None:
    raw = podgroup(
        "g",
        min_member=4,
        status={
            "phase": "Inqueue",
            "preemption": {
                "role": "WillEvict",
                "deadline": "2026-11-22T09:00:00Z",
                "peers": ["ns/big"],
            },
        },
    )
    raw["spec"]["networkTopology"] = {
        "mode": "hard",
        "highestTier": "tor",
        "units": {"size": 2, "tier": "tor"},
    }
    raw["spec"]["preemptible"] = False
    rec = R.podgroup(raw)
    assert rec.group.min_member == 4
    assert rec.group.queue == "team-a"
    assert rec.group.phase is S.GroupPhase.INQUEUE
    assert rec.group.network_topology == S.NetworkTopology(S.TopologyMode.HARD, "tor")
    assert rec.group.max_unavailable == 0
    assert rec.units == (2, ())
    mark = rec.group.preemption
    assert mark is not None
    assert mark.role is S.PreemptionRole.WILL_EVICT
    assert mark.peers == ("ns/big",)
    assert R.rfc3339(mark.deadline) == "2026-11-22T09:00:00Z"


def test_a_hard_topology_request_carries_its_soft_after_and_a_soft_one_none() -> None:
    raw = podgroup("g")
    raw["spec"]["networkTopology"] = {"highestTier": "tor", "softAfterSeconds": 600}
    assert R.podgroup(raw).group.network_topology == S.NetworkTopology(
        S.TopologyMode.HARD, "tor", soft_after=600.0
    )
    # A soft request never waits for a domain: one that slipped past admission (an older CRD)
    # carries no soft_after into the core.
    raw["spec"]["networkTopology"]["mode"] = "soft"
    assert R.podgroup(raw).group.network_topology == S.NetworkTopology(S.TopologyMode.SOFT, "tor")


def test_an_invalid_queue_is_closed_and_guarantees_nothing() -> None:
    body: dict[str, Any] = {
        "metadata": {"name": "greedy"},
        "spec": {"guarantee": {"cpu": "4"}},
        "status": {
            "conditions": [{"type": "Valid", "status": "False", "reason": "GuaranteeOvercommitted"}]
        },
    }
    q = R.queue(body)
    assert q.guarantee == {}
    assert q.closed_reason.startswith("GuaranteeOvercommitted")
    body["status"]["conditions"][0]["status"] = "True"
    assert R.queue(body).guarantee == {"cpu": 4000}


def test_queue_pool_topology() -> None:
    q = R.queue(
        {
            "metadata": {"name": "a"},
            "spec": {
                "weight": 3,
                "capability": {"cpu": "10"},
                "tenants": [{"user": "bob", "priority": 5}],
            },
        }
    )
    assert q.parent == "root"
    assert q.weight == 3.0
    assert q.capability == {"cpu": 10000}
    assert q.tenants[0].kind is S.TenantKind.USER
    p = R.pool(
        {
            "metadata": {"name": "gpu"},
            "spec": {
                "nodeSelector": {"matchLabels": {"node.sluice.dev/pool": "gpu"}},
                "disableSharing": True,
            },
        }
    )
    assert p.node_selector.matches({"node.sluice.dev/pool": "gpu"})
    assert p.disable_sharing
    t = R.topology(
        {
            "metadata": {"name": "net"},
            "spec": {
                "levels": [
                    {"name": "spine", "nodeLabel": "topology.sluice.dev/spine"},
                    {"name": "tor", "nodeLabel": "topology.sluice.dev/tor"},
                ]
            },
        }
    )
    assert [lv.name for lv in t.levels] == ["spine", "tor"]
    assert t.level_index("tor") == 1


def test_malformed_objects_degrade_to_defaults() -> None:
    rec = R.pod(
        {
            "metadata": {"name": "x"},
            "spec": {"containers": [{"resources": {"requests": {"cpu": "lots"}}}]},
        }
    )
    assert rec.requests == {}
    assert R.queue({"metadata": {"name": "q"}, "spec": {"weight": "heavy"}}).weight == 1.0


def test_pod_queue_from_volcano_annotations_newest_spelling_first() -> None:
    newer, older = "scheduling.volcano.sh/queue-name", "volcano.sh/queue-name"
    assert R.pod(pod("a", annotations={newer: "q1", older: "q0"})).queue == "q1"
    assert R.pod(pod("b", annotations={older: "q0"})).queue == "q0"
    assert (
        R.pod(
            pod("c", labels={"scheduling.sluice.dev/queue": "own"}, annotations={newer: "q1"})
        ).queue
        == "own"
    )


def test_bare_integer_quantities_as_volcano_writes_them() -> None:
    # The CRDs take int-or-string quantities (`cpu: 2`), so the reader gets JSON numbers too.
    q = R.queue(
        {
            "metadata": {"name": "vc"},
            "spec": {"capability": {"cpu": 2, "memory": "4Gi", "nvidia.com/gpu": 8}},
        }
    )
    assert q.capability == {"cpu": 2000, "memory": 4 * 2**30, "nvidia.com/gpu": 8}


def test_a_group_a_job_owns_is_marked_so_its_policies_handle_stale_gangs() -> None:
    owned = podgroup("j")
    owned["metadata"]["ownerReferences"] = [
        {"apiVersion": "batch.sluice.dev/v1alpha1", "kind": "VCJob", "name": "j", "uid": "u"}
    ]
    other = podgroup("d")
    other["metadata"]["ownerReferences"] = [
        {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "d", "uid": "v"}
    ]
    assert R.podgroup(owned).group.job_owned
    assert not R.podgroup(other).group.job_owned
    assert R.podgroup(podgroup("plain")).group.stale_grace is None
