"""`kubectl describe` of a VCJob and a HybridJob at each step of their lives: Pending, Inqueue,
Running, then Completed, or Restarting and Failed. It must show the three levels readably (the
job's phase and counts, per-task counts, per-replica rows, the ordered transition log).

The statuses are the job core's own output for a scripted life (`operators.jobs.reconcile`, fixed
clock), written through the status subresource of the real API server, so the golden text does
not depend on operator timing; kubectl renders them. Golden files: e2e/golden/describe/
(`UPDATE_GOLDEN=1` rewrites them).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from operators.api.batch import HybridJob, VCJob
from operators.api.resource import Resource
from operators.jobs.observed import GroupObs, PodObs
from operators.jobs.pods import pod_name
from operators.jobs.reconcile import Memory, Observed, reconcile
from operators.jobs.shape import JobShape, from_hybridjob, from_vcjob

pytestmark = pytest.mark.e2e

GOLDEN = Path(__file__).with_name("golden") / "describe"
T0 = 1_800_000_000.0
TEMPLATE = {"spec": {"containers": [{"name": "c", "image": "busybox"}]}}


class Life:
    """The cluster around the job core, scripted: pods appear as the plan asks and move when the
    test says so; each step's status is what the operator would write."""

    def __init__(self, shape: JobShape) -> None:
        self.shape, self.memory, self.now = shape, Memory(), T0
        self.pods: dict[str, PodObs] = {}
        self.group: GroupObs | None = None

    def step(self) -> dict[str, Any]:
        self.now += 5
        obs = Observed(pods=tuple(self.pods.values()), group=self.group)
        plan = reconcile(self.shape, self.memory, obs, self.now)
        self.memory = plan.memory
        for pod in plan.delete:
            self.pods.pop(pod.name, None)
        for task, index in plan.create:
            name = pod_name(self.shape.name, task.name, index)
            self.pods[name] = PodObs(
                name, f"uid-{name}", task.name, index, plan.memory.version, "Pending", created=0
            )
        return plan.status

    def move(self, phase: str, task: str | None = None, **extra: Any) -> None:
        for name, pod in self.pods.items():
            if task is None or pod.task == task:
                self.pods[name] = replace(pod, phase=phase, node="gpu-0", **extra)


def _to_running(life: Life) -> Iterator[tuple[str, dict[str, Any]]]:
    yield "pending", life.step()
    life.group = GroupObs(phase="Inqueue")
    yield "inqueue", life.step()
    life.move("Running")
    life.group = GroupObs(phase="Running")
    yield "running", life.step()


def _vcjob_life(shape: JobShape) -> Iterator[tuple[str, dict[str, Any]]]:
    life = Life(shape)
    yield from _to_running(life)
    life.move("Failed", task="worker", exit_code=3)
    yield "restarting", life.step()
    life.step()  # the restarted task's pods are created
    life.move("Running")
    life.step()
    life.move("Failed", task="worker", exit_code=3)
    yield "failed", life.step()


def _hybridjob_life(shape: JobShape) -> Iterator[tuple[str, dict[str, Any]]]:
    life = Life(shape)
    yield from _to_running(life)
    life.move("Succeeded")
    yield "completed", life.step()


def _body(kind: type[Resource], name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": kind.api_version_str(),
        "kind": kind.__name__,
        "metadata": {"name": name},
        "spec": spec,
    }


VCJOB = _body(
    VCJob,
    "train",
    {
        "maxRetry": 1,
        "tasks": [
            {"name": "ps", "replicas": 1, "template": TEMPLATE},
            {
                "name": "worker",
                "replicas": 2,
                "policies": [{"exitCode": 3, "action": "RestartTask"}],
                "template": TEMPLATE,
            },
        ],
    },
)
HYBRIDJOB = _body(
    HybridJob,
    "tf",
    {
        "replicaSpecs": {
            "PS": {"minReplicas": 1, "maxReplicas": 2, "template": TEMPLATE},
            "Worker": {"minReplicas": 2, "maxReplicas": 4, "template": TEMPLATE},
        }
    },
)


def _shape(body: dict[str, Any], namespace: str) -> JobShape:
    full = {**body, "metadata": {**body["metadata"], "namespace": namespace, "uid": "u"}}
    if body["kind"] == "VCJob":
        return from_vcjob(VCJob.model_validate(full))
    return from_hybridjob(HybridJob.model_validate(full))


def normalise(text: str, namespace: str) -> str:
    """What differs between runs: the namespace, uid, resource version and creation time."""
    text = text.replace(namespace, "NAMESPACE")
    text = re.sub(r"(Creation Timestamp:\s+).*", r"\1TIME", text)
    text = re.sub(r"(Resource Version:\s+).*", r"\1RV", text)
    text = re.sub(r"(UID:\s+).*", r"\1UID", text)
    return "\n".join(line.rstrip() for line in text.splitlines()) + "\n"


@pytest.mark.parametrize(
    ("body", "life"),
    [(VCJOB, _vcjob_life), (HYBRIDJOB, _hybridjob_life)],
    ids=["vcjob", "hybridjob"],
)
def test_describe_shows_the_three_levels_at_each_step(
    body: dict[str, Any],
    life: Callable[[JobShape], Iterator[tuple[str, dict[str, Any]]]],
    kubectl: Callable[..., Any],
    namespace: str,
) -> None:
    kind = VCJob if body["kind"] == "VCJob" else HybridJob
    ref = f"{kind.crd_name()}/{body['metadata']['name']}"
    kubectl("create", "-n", namespace, "-f", "-", input=json.dumps(body))
    update = os.environ.get("UPDATE_GOLDEN") == "1"
    mismatches = []
    for step, status in life(_shape(body, namespace)):
        kubectl(
            "patch",
            ref,
            "-n",
            namespace,
            "--subresource=status",
            "--type=merge",
            "-p",
            json.dumps({"status": status}),
        )
        text = normalise(kubectl("describe", ref, "-n", namespace).stdout, namespace)
        golden = GOLDEN / f"{body['kind'].lower()}-{step}.txt"
        if update:
            golden.parent.mkdir(parents=True, exist_ok=True)
            golden.write_text(text)
        elif golden.read_text() != text:
            mismatches.append(f"--- {golden.name}\n{text}")
        assert status["phase"].lower() == step, "the scripted life did not reach this step"
        for shown in (status["phase"], *(t["name"] for t in status["tasks"])):
            assert shown in text
    assert not mismatches, "\n".join(mismatches)
