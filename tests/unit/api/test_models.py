"""Model behaviour: defaults, wire form, round-trips and the helpers other layers use."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from operators.api import (
    KINDS,
    HybridJob,
    PodGroup,
    Pool,
    Queue,
    UnknownKindError,
    VCJob,
    kind_for,
    parse_object,
)
from operators.api import labels as L
from operators.api.base import Condition, ConditionStatus, quantities
from operators.api.batch import (
    JobPhase,
    PolicyAction,
    PolicyEvent,
    ReplicaPhase,
    ReplicaStatus,
    TaskSpec,
    Transition,
    TransitionLevel,
    VCJobStatus,
    find_dependency_cycle,
)
from operators.api.events import EventSink
from operators.api.scheduling import (
    NetworkTopologyMode,
    PodGroupPhase,
    PodGroupSpec,
    PodGroupStatus,
    PoolSpec,
    QueueSpec,
    QueueSpecState,
    TopologySpec,
)


def _vcjob(**spec: Any) -> dict[str, Any]:
    body = {"tasks": [{"name": "a", "replicas": 2, "template": {}}], **spec}
    return {
        "apiVersion": "batch.sluice.dev/v1alpha1",
        "kind": "VCJob",
        "metadata": {"name": "j", "namespace": "ns"},
        "spec": body,
    }


# ---------------------------------------------------------------------------------- defaults


def test_defaults_are_python_side() -> None:
    q = QueueSpec()
    assert q.parent is None
    assert q.weight is None  # "unset means 1": the scheduler applies it
    assert q.state is QueueSpecState.OPEN
    assert q.reclaimable is True
    assert q.overcommit is False
    pg = PodGroupSpec()
    assert pg.min_member == 1
    assert pg.preemptible is True
    pool = PoolSpec.model_validate({"nodeSelector": {"matchLabels": {"pool": "a"}}})
    assert (pool.disable_sharing, pool.disable_borrowing, pool.disable_preemption) == (
        False,
        False,
        False,
    )
    job = VCJob.model_validate(_vcjob())
    assert job.spec.effective_min_available == 2
    assert job.spec.tasks[0].effective_min_available == 2
    assert job.api_version == "batch.sluice.dev/v1alpha1"
    assert job.kind == "VCJob"


def test_unset_fields_stay_off_the_wire() -> None:
    job = VCJob.model_validate(_vcjob())
    wire = job.to_dict()
    assert wire["spec"] == {
        "tasks": [{"name": "a", "replicas": 2, "template": {}}],
        "preemptible": True,
    }
    assert "status" not in wire


def test_network_topology_defaults_to_hard() -> None:
    pg = PodGroupSpec.model_validate({"networkTopology": {"highestTier": "tor"}})
    assert pg.network_topology is not None
    assert pg.network_topology.mode is NetworkTopologyMode.HARD


def test_hybridjob_min_member_and_effective_max() -> None:
    job = HybridJob.model_validate(
        {
            "apiVersion": "batch.sluice.dev/v1alpha1",
            "kind": "HybridJob",
            "metadata": {"name": "h"},
            "spec": {
                "replicaSpecs": {
                    "PS": {"minReplicas": 1, "maxReplicas": 2, "template": {}},
                    "Worker": {"minReplicas": 2, "template": {}},
                }
            },
        }
    )
    assert job.spec.min_member == 3
    assert job.spec.replica_specs["Worker"].effective_max_replicas == 2


# ---------------------------------------------------------------------------- wire & round-trips


def test_snake_case_in_python_camel_case_on_the_wire() -> None:
    spec = PodGroupSpec(min_member=3, priority_class_name="high", min_resources={"cpu": "2"})
    wire = spec.to_dict()
    assert wire["minMember"] == 3
    assert wire["priorityClassName"] == "high"
    assert PodGroupSpec.model_validate(wire) == spec
    assert PodGroupSpec.model_validate({"min_member": 3}).min_member == 3  # populate_by_name


def test_python_yaml_dict_round_trip_every_kind() -> None:
    objs = [
        Pool.model_validate(
            {"metadata": {"name": "p"}, "spec": {"nodeSelector": {"matchLabels": {"a": "b"}}}}
        ),
        Queue.model_validate({"metadata": {"name": "q"}, "spec": {"guarantee": {"cpu": "1"}}}),
        PodGroup.model_validate({"metadata": {"name": "g", "namespace": "n"}, "spec": {}}),
        VCJob.model_validate(_vcjob(policies=[{"event": "PodFailed", "action": "RestartJob"}])),
        EventSink.model_validate({"metadata": {"name": "s"}, "spec": {"url": "http://x"}}),
    ]
    for obj in objs:
        text = yaml.safe_dump(obj.to_dict())
        back = parse_object(yaml.safe_load(text))
        assert back == obj
        assert type(back) is type(obj)


def test_quantities_are_strings_in_python() -> None:
    spec = QueueSpec.model_validate({"guarantee": {"cpu": "4", "memory": "16Gi"}})
    assert spec.guarantee == {"cpu": "4", "memory": "16Gi"}
    # Like the CRD's int-or-string: a whole number is taken (and kept as a string), a fraction
    # must be a string.
    assert QueueSpec.model_validate({"guarantee": {"cpu": 4}}).guarantee == {"cpu": "4"}
    with pytest.raises(ValidationError, match=r"write fractional quantities as strings: '0\.5'"):
        QueueSpec.model_validate({"guarantee": {"cpu": 0.5}})
    assert quantities(spec.guarantee) == {"cpu": Decimal(4), "memory": Decimal(16 * 2**30)}
    assert quantities(None) == {}
    with pytest.raises(ValidationError, match="invalid resource name"):
        QueueSpec.model_validate({"guarantee": {"bad name!": "1"}})
    with pytest.raises(ValidationError):
        QueueSpec.model_validate({"guarantee": {"cpu": True}})


def test_status_round_trip_with_timestamps_and_unknown_fields() -> None:
    when = datetime(2026, 11, 22, 8, 0, tzinfo=UTC)
    status = VCJobStatus(
        phase=JobPhase.RUNNING,
        running=2,
        replicas=[
            ReplicaStatus(name="j-a-0", task="a", index=0, phase=ReplicaPhase.RUNNING, node="n1")
        ],
        transitions=[
            Transition(
                level=TransitionLevel.JOB, name="j", from_="Pending", to="Running", time=when
            )
        ],
        conditions=[
            Condition(type="Valid", status=ConditionStatus.TRUE, last_transition_time=when)
        ],
    )
    wire = status.to_dict()
    assert wire["transitions"][0]["from"] == "Pending"
    assert wire["transitions"][0]["time"] == "2026-11-22T08:00:00Z"
    assert wire["conditions"][0]["lastTransitionTime"] == "2026-11-22T08:00:00Z"
    assert VCJobStatus.model_validate(wire) == status
    # A newer operator's field survives a read-modify-write through older models.
    wire["newField"] = {"x": 1}
    assert VCJobStatus.model_validate(wire).to_dict()["newField"] == {"x": 1}


def test_status_enums_reject_unknown_values() -> None:
    with pytest.raises(ValidationError, match="Input should be 'Pending'"):
        PodGroupStatus.model_validate({"phase": "Sleeping"})
    assert PodGroupStatus.model_validate({"phase": "Inqueue"}).phase is PodGroupPhase.INQUEUE


def test_spec_rejects_unknown_fields() -> None:
    with pytest.raises(ValidationError, match="minMembers"):
        PodGroupSpec.model_validate({"minMembers": 2})


def test_metadata_keeps_unknown_fields() -> None:
    pg = PodGroup.model_validate({"metadata": {"name": "g", "managedFields": [{}]}, "spec": {}})
    assert pg.to_dict()["metadata"]["managedFields"] == [{}]
    assert pg.name == "g"


def test_assignment_is_validated() -> None:
    spec = QueueSpec()
    with pytest.raises(ValidationError):
        spec.weight = 0


# --------------------------------------------------------------------------------- registries


def test_kind_registry() -> None:
    assert len(KINDS) == 7
    assert kind_for("scheduling.sluice.dev/v1alpha1", "Pool") is Pool
    with pytest.raises(UnknownKindError):
        kind_for("v1", "Pod")
    with pytest.raises(UnknownKindError):
        parse_object({"apiVersion": "scheduling.sluice.dev/v1alpha1", "kind": "Nope"})


# ------------------------------------------------------------------------------- rule helpers


def test_dependency_cycle_detection() -> None:
    assert find_dependency_cycle({"a": [], "b": ["a"], "c": ["a", "b"]}) is None
    assert find_dependency_cycle({"a": ["b"], "b": ["c"], "c": ["a"]}) == ["a", "b", "c", "a"]
    assert find_dependency_cycle({"a": ["a"]}) == ["a", "a"]
    assert find_dependency_cycle({"x": ["ghost"]}) is None  # missing names are another rule


def test_three_task_cycle_rejected_with_path() -> None:
    tasks = [
        {"name": n, "replicas": 1, "template": {}, "dependsOn": {"name": [d]}}
        for n, d in (("a", "b"), ("b", "c"), ("c", "a"))
    ]
    with pytest.raises(ValidationError, match="a -> b -> c -> a"):
        VCJob.model_validate(_vcjob(tasks=tasks))


def test_policy_triggers() -> None:
    task = TaskSpec.model_validate(
        {
            "name": "main",
            "replicas": 1,
            "template": {},
            "policies": [
                {"event": "TaskCompleted", "action": "CompleteJob"},
                {"events": ["PodFailed", "PodEvicted"], "action": "RestartTask"},
                {"exitCode": 137, "action": "RestartPod"},
            ],
        }
    )
    assert task.policies is not None
    first, second, third = task.policies
    assert first.triggers() == [PolicyEvent.TASK_COMPLETED]
    assert first.action is PolicyAction.COMPLETE_JOB
    assert second.triggers() == [PolicyEvent.POD_FAILED, PolicyEvent.POD_EVICTED]
    assert third.triggers() == []
    assert third.exit_code == 137


def test_policy_timeout_is_a_duration() -> None:
    ok = {"event": "PodPending", "timeout": "1h30m", "action": "AbortJob"}
    VCJob.model_validate(_vcjob(policies=[ok]))
    with pytest.raises(ValidationError, match="timeout"):
        VCJob.model_validate(_vcjob(policies=[{**ok, "timeout": "ninety seconds"}]))


def test_topology_level_index() -> None:
    topo = TopologySpec.model_validate(
        {
            "levels": [
                {"name": "spine", "nodeLabel": "topology.sluice.dev/spine"},
                {"name": "tor", "nodeLabel": "topology.sluice.dev/tor"},
            ]
        }
    )
    assert topo.level_index("tor") == 1
    assert topo.level_index("rack") is None


def test_queue_root_may_not_have_parent_but_others_may() -> None:
    Queue.model_validate({"metadata": {"name": "team"}, "spec": {"parent": "org"}})
    with pytest.raises(ValidationError, match="root queue cannot have a parent"):
        Queue.model_validate({"metadata": {"name": "root"}, "spec": {"parent": "org"}})


def test_guarantee_equal_to_capability_is_fine_and_units_are_compared_exactly() -> None:
    QueueSpec.model_validate({"guarantee": {"memory": "1Gi"}, "capability": {"memory": "1024Mi"}})
    QueueSpec.model_validate({"guarantee": {"cpu": "1500m"}, "capability": {"cpu": "1.5"}})
    with pytest.raises(ValidationError, match="memory=1025Mi"):
        QueueSpec.model_validate(
            {"guarantee": {"memory": "1025Mi"}, "capability": {"memory": "1Gi"}}
        )


# ----------------------------------------------------------------------------------- labels


def test_labels_and_aliases() -> None:
    assert L.POOL == "scheduling.sluice.dev/pool"
    assert L.GPU_IDS == "scheduling.sluice.dev/gpu-ids"
    assert L.OVERCOMMIT == "scheduling.sluice.dev/overcommit"
    assert L.JOB_NAME == "batch.sluice.dev/job-name"
    assert L.REPLICA_INDEX == "batch.sluice.dev/replica-index"
    assert L.AIBEE_POOL == "resource.aibee.cn/pool"
    assert L.VOLCANO_GROUP_NAME == "scheduling.k8s.io/group-name"
    assert L.VOLCANO_QUEUE_NAME == "volcano.sh/queue-name"
    # Sluice's own name wins over an alias; aliases are read when it is absent.
    both = {L.QUEUE: "mine", L.VOLCANO_QUEUE_NAME: "theirs"}
    assert L.first_of(both, L.QUEUE_KEYS) == "mine"
    assert L.first_of({L.AIBEE_POOL: "gpu"}, L.POOL_KEYS) == "gpu"
    assert L.first_of({L.VOLCANO_GROUP_NAME: "pg"}, L.POD_GROUP_KEYS) == "pg"
    # Volcano's job controller annotates its pods with the newer spelling.
    assert L.VOLCANO_POD_QUEUE_NAME == "scheduling.volcano.sh/queue-name"
    assert L.first_of({L.VOLCANO_POD_QUEUE_NAME: "vq"}, L.QUEUE_KEYS) == "vq"
    assert L.first_of(None, L.POOL_KEYS) is None
    assert L.first_of({L.QUEUE: ""}, L.QUEUE_KEYS) is None


def test_eventsink_ca_bundle_must_be_base64() -> None:
    ok = {"url": "https://x.example.com", "caBundle": "LS0tLS1CRUdJTg=="}
    EventSink.model_validate({"metadata": {"name": "s"}, "spec": ok})
    with pytest.raises(ValidationError, match="base64"):
        EventSink.model_validate(
            {"metadata": {"name": "s"}, "spec": {**ok, "caBundle": "not base64!"}}
        )


def test_times_must_carry_a_timezone() -> None:
    # The API server wants RFC 3339; a naive datetime would serialize without an offset.
    naive = datetime(2026, 1, 1)  # noqa: DTZ001
    with pytest.raises(ValidationError, match="timezone"):
        Condition(type="Valid", status=ConditionStatus.TRUE, last_transition_time=naive)


def test_the_built_in_default_pool_is_valid_with_an_empty_selector_only() -> None:
    pool = Pool.model_validate({"metadata": {"name": "default"}, "spec": {"nodeSelector": {}}})
    assert not pool.spec.selects_something()
