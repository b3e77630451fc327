"""What the jobs operator writes for a job, without a cluster: its PodGroup and minResources."""

from __future__ import annotations

from typing import Any

from operators.api import labels as L
from operators.api.batch import HybridJob
from operators.api.scheduling import PodGroup
from operators.controllers.jobs_apply import min_resources, podgroup_body
from operators.jobs.shape import JobShape, from_hybridjob
from operators.runtime import records as R


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
