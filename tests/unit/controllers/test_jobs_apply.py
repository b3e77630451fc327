"""What the jobs operator writes for a job, without a cluster: its PodGroup and minResources."""

from __future__ import annotations

from typing import Any

import pydantic
import pytest

from operators.api import labels as L
from operators.api.batch import HybridJob, VCJob
from operators.api.scheduling import PodGroup
from operators.controllers.jobs_apply import min_resources, podgroup_body
from operators.jobs.shape import JobShape, from_hybridjob
from operators.runtime import records as R
from operators.scheduler.actions.stale import grace_of


def shape() -> JobShape:
    def template(cpu: str, gpus: int) -> dict[str, Any]:
        res: dict[str, Any] = {"requests": {"cpu": cpu, "memory": "1Gi"}}
        if gpus:
            res["limits"] = {"nvidia.com/gpu": str(gpus)}
        return {"spec": {"containers": [{"name": "c", "image": "x", "resources": res}]}}

    body = {
        "apiVersion": "batch.sluice.dev/v1alpha1",
        "kind": "HybridJob",
        "metadata": {"name": "tf", "namespace": "ns", "uid": "u"},
        "spec": {
            "queue": "q",
            "preemptionDelaySeconds": 60,
            "staleGangGraceSeconds": 120,
            "replicaSpecs": {
                "PS": {
                    "minReplicas": 1,
                    "maxReplicas": 2,
                    "priority": 1,
                    "template": template("500m", 0),
                },
                "Worker": {"minReplicas": 2, "maxReplicas": 4, "template": template("2", 1)},
            },
        },
    }
    return from_hybridjob(HybridJob.model_validate(body))


def test_min_resources_are_the_gang_minimum_requests() -> None:
    assert min_resources(shape()) == {"cpu": "4500m", "memory": "3Gi", "nvidia.com/gpu": "2"}


def test_podgroup_copies_job_fields_and_is_owned() -> None:
    job = shape()
    meta = {"labels": {L.OVERCOMMIT: "true"}, "annotations": {L.USER: "alice@example.com"}}
    group = podgroup_body(job, {"queue": "q", "preemptionDelaySeconds": 60}, meta)
    assert group["metadata"]["name"] == "tf"
    assert group["metadata"]["ownerReferences"][0]["kind"] == "HybridJob"
    assert group["metadata"]["annotations"] == {L.OVERCOMMIT: "true"}
    spec = group["spec"]
    assert spec["queue"] == "q"
    assert spec["user"] == "alice@example.com"
    assert spec["preemptionDelaySeconds"] == 60
    assert spec["minMember"] == 3
    assert spec["minResources"]["nvidia.com/gpu"] == "2"
    assert [r["name"] for r in spec["replicaSpecs"]] == ["ps", "worker"]


def test_the_user_annotation_reaches_the_scheduler_through_the_api_model() -> None:
    """The job's user annotation -> PodGroup spec.user (valid for the API) -> the tenant the
    scheduler's reader sees; without the annotation the group has no user."""
    meta = {"annotations": {L.USER: "alice"}}
    group = podgroup_body(shape(), {"queue": "q"}, meta)
    parsed = PodGroup.model_validate(group).to_dict()
    assert R.podgroup({**parsed, "metadata": group["metadata"]}).group.user == "alice"
    plain = podgroup_body(shape(), {"queue": "q"}, {})
    assert "user" not in plain["spec"]
    assert R.podgroup(plain).group.user == ""


def test_the_stale_gang_grace_reaches_the_scheduler_only_when_the_job_sets_one() -> None:
    """spec.staleGangGraceSeconds of the job -> its PodGroup (valid for the API) -> the grace the
    scheduler applies; a job without one leaves its gang to the job's policies (never stale)."""
    job = shape()

    def grace(spec: dict[str, Any]) -> float | None:
        group = podgroup_body(job, spec, {})
        parsed = PodGroup.model_validate(group).to_dict()
        return grace_of(R.podgroup({**parsed, "metadata": group["metadata"]}).group, 60.0)

    assert grace({"queue": "q", "staleGangGraceSeconds": 120}) == 120
    assert grace({"queue": "q", "staleGangGraceSeconds": 0}) == 0
    assert grace({"queue": "q", "staleGangGraceSeconds": -1}) is None
    assert grace({"queue": "q"}) is None
    assert "staleGangGraceSeconds" not in podgroup_body(job, {"queue": "q"}, {})["spec"]


def test_the_job_api_bounds_the_stale_gang_grace_as_the_podgroup_does() -> None:
    spec: dict[str, Any] = {"tasks": [{"name": "t", "replicas": 1, "template": {"spec": {}}}]}
    body = {
        "apiVersion": "batch.sluice.dev/v1alpha1",
        "kind": "VCJob",
        "metadata": {"name": "j", "namespace": "ns"},
        "spec": spec,
    }
    for bad in (-2, 7 * 86400 + 1):
        spec["staleGangGraceSeconds"] = bad
        with pytest.raises(pydantic.ValidationError):
            VCJob.model_validate(body)
    spec["staleGangGraceSeconds"] = -1
    assert VCJob.model_validate(body).spec.stale_gang_grace_seconds == -1
