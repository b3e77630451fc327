"""What the jobs operator writes for a job, without a cluster: its PodGroup and minResources."""

from __future__ import annotations

from typing import Any, cast

import pydantic
import pytest

from operators.api import labels as L
from operators.api.batch import HybridJob, VCJob
from operators.api.scheduling import PodGroup
from operators.controllers.jobs_apply import Applier, min_resources, podgroup_body, spec_patch
from operators.jobs.shape import JobShape, from_hybridjob, from_vcjob
from operators.runtime import records as R
from operators.runtime.client import ApiError, KubeClient
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


def test_a_grace_added_to_an_existing_job_reaches_its_podgroup() -> None:
    """The group was created without a grace; the job gains one: the patch carries it, and
    once the group shows it nothing more is sent."""
    job = shape()
    created = podgroup_body(job, {"queue": "q"}, {})["spec"]
    wanted = podgroup_body(job, {"queue": "q", "staleGangGraceSeconds": 30}, {})["spec"]
    assert spec_patch(created, wanted, created) == {"staleGangGraceSeconds": 30}
    assert spec_patch(wanted, wanted, wanted) == {}
    # After an operator restart nothing was sent yet: the group's own spec decides.
    assert spec_patch(created, wanted, None) == {"staleGangGraceSeconds": 30}
    assert spec_patch(wanted, wanted, None) == {}


def test_a_changed_grace_is_patched_and_a_dropped_one_removed() -> None:
    job = shape()
    group = podgroup_body(job, {"queue": "q", "staleGangGraceSeconds": 30}, {})["spec"]
    changed = podgroup_body(job, {"queue": "q", "staleGangGraceSeconds": -1}, {})["spec"]
    dropped = podgroup_body(job, {"queue": "q"}, {})["spec"]
    assert spec_patch(group, changed, group) == {"staleGangGraceSeconds": -1}
    assert spec_patch(group, dropped, group) == {"staleGangGraceSeconds": None}
    # A merge patch with null removes the field: the group is then as the job wants it.
    after = {k: v for k, v in group.items() if k != "staleGangGraceSeconds"}
    assert after == dropped
    assert spec_patch(after, dropped, dropped) == {}


def test_a_field_the_server_prunes_is_sent_once_not_every_step() -> None:
    job = shape()
    wanted = podgroup_body(job, {"queue": "q", "staleGangGraceSeconds": 30}, {})["spec"]
    pruned = {k: v for k, v in wanted.items() if k != "staleGangGraceSeconds"}
    assert spec_patch(pruned, wanted, None) == {"staleGangGraceSeconds": 30}
    assert spec_patch(pruned, wanted, wanted) == {}


class RecordingClient:
    def __init__(self, exists: bool) -> None:
        self.exists = exists
        self.calls: list[tuple[str, str, dict[str, Any]]] = []

    async def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.calls.append(("POST", path, body))
        if self.exists:
            raise ApiError(409, {"reason": "AlreadyExists"}, "POST", path)
        return body

    async def merge_patch(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.calls.append(("PATCH", path, body))
        return body


async def test_the_applier_patches_only_what_the_job_changed() -> None:
    job = shape()
    created = podgroup_body(job, {"queue": "q"}, {})
    wanted = podgroup_body(job, {"queue": "q", "staleGangGraceSeconds": 30}, {})
    client = RecordingClient(exists=True)
    applier = Applier(cast(KubeClient, client), 4)
    assert await applier.ensure_podgroup(wanted, created["spec"], created["spec"]) == (
        "",
        wanted["spec"],
    )
    assert client.calls == [
        ("PATCH", PodGroup.api_path("ns", "tf"), {"spec": {"staleGangGraceSeconds": 30}})
    ]
    client.calls.clear()
    assert await applier.ensure_podgroup(wanted, wanted["spec"], wanted["spec"]) == (
        "",
        wanted["spec"],
    )
    assert client.calls == []


def test_minimums_edited_on_a_running_job_reach_its_podgroup() -> None:
    def job(min_available: int, worker_min: int) -> JobShape:
        body = {
            "apiVersion": "batch.sluice.dev/v1alpha1",
            "kind": "VCJob",
            "metadata": {"name": "j", "namespace": "ns", "uid": "u"},
            "spec": {
                "minAvailable": min_available,
                "tasks": [
                    {"name": "ps", "replicas": 1, "template": {"spec": {"containers": []}}},
                    {
                        "name": "worker",
                        "replicas": 4,
                        "minAvailable": worker_min,
                        "template": {"spec": {"containers": []}},
                    },
                ],
            },
        }
        return from_vcjob(VCJob.model_validate(body))

    before = podgroup_body(job(3, 2), {}, {})["spec"]
    after = podgroup_body(job(4, 3), {}, {})["spec"]
    patch = spec_patch(before, after, before)
    assert patch["minMember"] == 4
    assert patch["minTaskMember"] == {"ps": 1, "worker": 3}
    assert spec_patch(after, after, after) == {}


async def test_a_group_found_at_create_is_patched_once_its_spec_is_seen() -> None:
    """A restarted operator's create finds the group (409): nothing it holds was sent, so a
    grace set on the job while the operator was down reaches the group once it is watched."""
    job = shape()
    old = podgroup_body(job, {"queue": "q"}, {})
    wanted = podgroup_body(job, {"queue": "q", "staleGangGraceSeconds": 30}, {})
    client = RecordingClient(exists=True)
    applier = Applier(cast(KubeClient, client), 4)
    error, sent = await applier.ensure_podgroup(wanted, None, None)
    assert (error, sent) == ("", None)
    await applier.ensure_podgroup(wanted, old["spec"], sent)
    assert client.calls[-1] == (
        "PATCH",
        PodGroup.api_path("ns", "tf"),
        {"spec": {"staleGangGraceSeconds": 30}},
    )


class RefusingClient(RecordingClient):
    async def merge_patch(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.calls.append(("PATCH", path, body))
        raise ApiError(422, {"reason": "Invalid"}, "PATCH", path)


async def test_a_refused_patch_is_not_remembered_as_sent() -> None:
    """The job keeps showing the refusal, and the next step tries again, until the group
    holds the field: a refused field taken as sent would clear the condition and never land."""
    job = shape()
    old = podgroup_body(job, {"queue": "q"}, {})
    wanted = podgroup_body(job, {"queue": "q", "staleGangGraceSeconds": 30}, {})
    client = RefusingClient(exists=True)
    applier = Applier(cast(KubeClient, client), 4)
    error, sent = await applier.ensure_podgroup(wanted, old["spec"], old["spec"])
    assert error
    assert sent == old["spec"]
    error, sent = await applier.ensure_podgroup(wanted, old["spec"], sent)
    assert error
    assert len(client.calls) == 2
