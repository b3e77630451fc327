"""The Argo CD health checks (Lua) run by a real Lua interpreter (lupa) against objects built
with the API models, so they read the field names the operators actually write."""

from __future__ import annotations

from typing import Any

import lupa
import pytest
import yaml

from operators.api import batch, scheduling
from operators.api.batch import HybridJobStatus, JobPhase, VCJobStatus
from operators.api.scheduling import PodGroupPhase, PodGroupStatus, PoolStatus, QueueState
from operators.install import argocd

ARGO_STATUSES = {"Healthy", "Progressing", "Degraded", "Suspended"}


def health(resource_key: str, obj: dict[str, Any]) -> dict[str, str]:
    """What Argo CD does: the script sees the live object as the global `obj`."""
    lua = lupa.LuaRuntime(unpack_returned_tuples=True)
    lua.globals().obj = lua.table_from(obj, recursive=True)
    result = lua.execute(argocd.health_script(resource_key))
    return {str(k): str(v) for k, v in dict(result).items()}


def dump(status: Any) -> dict[str, Any]:
    out: dict[str, Any] = status.model_dump(by_alias=True, mode="json", exclude_none=True)
    return out


def obj(status: Any = None, generation: int = 1) -> dict[str, Any]:
    body: dict[str, Any] = {"metadata": {"name": "x", "generation": generation}, "spec": {}}
    if status is not None:
        body["status"] = dump(status)
    return body


def condition(kind: str, value: str, reason: str = "R", message: str = "m") -> dict[str, str]:
    return {"type": kind, "status": value, "reason": reason, "message": message}


@pytest.mark.parametrize("key", sorted(argocd.CHECKS))
def test_objects_without_status_are_progressing(key: str) -> None:
    assert health(key, obj())["status"] == "Progressing"


def test_pool() -> None:
    key = "scheduling.sluice.dev_Pool"
    assert health(key, obj(PoolStatus(node_count=4, observed_generation=1))) == {
        "status": "Healthy",
        "message": "4 node(s)",
    }
    stale = obj(PoolStatus(node_count=4, observed_generation=1), generation=2)
    assert health(key, stale)["status"] == "Progressing"
    broken = PoolStatus.model_validate({"conditions": [condition("Valid", "False", "Overlap")]})
    assert health(key, obj(broken)) == {"status": "Degraded", "message": "Overlap: m"}


@pytest.mark.parametrize(
    ("state", "expected"),
    [
        (QueueState.OPEN, "Healthy"),
        (QueueState.CLOSED, "Suspended"),
        (QueueState.CLOSING, "Progressing"),
        (QueueState.UNKNOWN, "Progressing"),
    ],
)
def test_queue_states(state: QueueState, expected: str) -> None:
    status = scheduling.QueueStatus(state=state)
    assert health("scheduling.sluice.dev_Queue", obj(status))["status"] == expected


def test_queue_breaking_a_tree_rule_is_degraded() -> None:
    status = scheduling.QueueStatus.model_validate(
        {
            "state": "Open",
            "conditions": [condition("Valid", "False", "GuaranteeOvercommitted", "sum > parent")],
        }
    )
    assert health("scheduling.sluice.dev_Queue", obj(status)) == {
        "status": "Degraded",
        "message": "GuaranteeOvercommitted: sum > parent",
    }


@pytest.mark.parametrize(
    ("phase", "expected"),
    [
        (PodGroupPhase.PENDING, "Suspended"),
        (PodGroupPhase.INQUEUE, "Progressing"),
        (PodGroupPhase.RUNNING, "Healthy"),
        (PodGroupPhase.COMPLETED, "Healthy"),
        (PodGroupPhase.FAILED, "Degraded"),
        (PodGroupPhase.UNKNOWN, "Degraded"),
    ],
)
def test_podgroup_phases(phase: PodGroupPhase, expected: str) -> None:
    status = PodGroupStatus(phase=phase)
    assert health("scheduling.sluice.dev_PodGroup", obj(status))["status"] == expected


def test_pending_podgroup_says_why() -> None:
    status = PodGroupStatus.model_validate(
        {
            "phase": "Pending",
            "conditions": [
                condition("Unschedulable", "True", "NotEnoughResources", "0/16 nodes fit")
            ],
        }
    )
    result = health("scheduling.sluice.dev_PodGroup", obj(status))
    assert result == {
        "status": "Suspended",
        "message": "Pending: NotEnoughResources 0/16 nodes fit",
    }


JOB_HEALTH = {
    JobPhase.PENDING: "Progressing",
    JobPhase.INQUEUE: "Progressing",
    JobPhase.RUNNING: "Healthy",
    JobPhase.RESTARTING: "Progressing",
    JobPhase.COMPLETING: "Progressing",
    JobPhase.COMPLETED: "Healthy",
    JobPhase.ABORTING: "Progressing",
    JobPhase.ABORTED: "Suspended",
    JobPhase.TERMINATING: "Progressing",
    JobPhase.TERMINATED: "Degraded",
    JobPhase.FAILED: "Degraded",
}


def test_every_job_phase_has_a_health() -> None:
    assert set(JOB_HEALTH) == set(JobPhase)


@pytest.mark.parametrize("key", ["batch.sluice.dev_HybridJob", "batch.sluice.dev_VCJob"])
@pytest.mark.parametrize("phase", list(JobPhase))
def test_job_phases(key: str, phase: JobPhase) -> None:
    model = HybridJobStatus if key.endswith("HybridJob") else VCJobStatus
    result = health(key, obj(model(phase=phase)))
    assert result == {"status": JOB_HEALTH[phase], "message": str(phase)}
    assert result["status"] in ARGO_STATUSES


def test_suspended_job() -> None:
    status = HybridJobStatus.model_validate(
        {"phase": "Aborted", "conditions": [condition("Suspended", "True", "Suspended")]}
    )
    assert health("batch.sluice.dev_HybridJob", obj(status))["status"] == "Suspended"


def test_invalid_job_and_a_job_about_to_be_evicted() -> None:
    key = "batch.sluice.dev_VCJob"
    invalid = VCJobStatus.model_validate(
        {
            "phase": "Pending",
            "conditions": [condition("Valid", "False", "DependencyCycle", "a->b->a")],
        }
    )
    assert health(key, obj(invalid)) == {
        "status": "Degraded",
        "message": "DependencyCycle: a->b->a",
    }
    victim = VCJobStatus.model_validate(
        {
            "phase": "Running",
            "preemption": {"role": "WillEvict", "deadline": "2026-01-01T00:00:00Z"},
        }
    )
    result = health(key, obj(victim))
    assert result["status"] == "Healthy"
    assert "to be evicted at 2026-01-01T00:00:00Z" in result["message"]


def test_configmap_carries_every_check() -> None:
    data = yaml.safe_load(argocd.configmap())["data"]
    assert set(data) == {f"resource.customizations.health.{k}" for k in argocd.CHECKS}
    for key in argocd.CHECKS:
        assert data[f"resource.customizations.health.{key}"] == argocd.health_script(key)
    assert {batch.HybridJob.__name__, batch.VCJob.__name__} <= {
        k.split("_")[-1] for k in argocd.CHECKS
    }
