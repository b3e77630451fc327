"""Every sample applies with server-side apply, reads back equal, and shows its printer columns."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml

from operators.api import KINDS, Queue, VCJob, kind_for, parse_object
from operators.api.base import Condition, ConditionStatus
from operators.api.batch import (
    JobPhase,
    ReplicaPhase,
    ReplicaStatus,
    TaskPhase,
    TaskStatus,
    Transition,
    TransitionLevel,
    VCJobStatus,
)
from operators.api.scheduling import PreemptionRole, PreemptionStatus, QueueState, QueueStatus

if TYPE_CHECKING:
    from collections.abc import Callable

SAMPLES = Path(__file__).resolve().parents[1] / "manifests" / "samples"
FILES = sorted(SAMPLES.glob("*.yaml"))


def _docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


@pytest.fixture
def cleanup(kubectl: Callable[..., Any]) -> Iterator[list[str]]:
    """Cluster-scoped objects to delete afterwards (pools and queues would steer other tests)."""
    refs: list[str] = []
    yield refs
    for ref in refs:
        kubectl("delete", ref, "--ignore-not-found", "--wait=false")


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_sample_applies_and_reads_back(
    path: Path, kubectl: Callable[..., Any], namespace: str, cleanup: list[str]
) -> None:
    docs = _docs(path)
    for doc in docs:
        model = kind_for(doc["apiVersion"], doc["kind"])
        if model.scope == "Namespaced":
            doc["metadata"]["namespace"] = namespace
        else:
            cleanup.append(f"{model.plural}.{model.group}/{doc['metadata']['name']}")
    manifest = "\n---\n".join(json.dumps(d) for d in docs)
    kubectl("apply", "--server-side", "--field-manager=sluice-e2e", "-f", "-", input=manifest)

    for doc in docs:
        model = kind_for(doc["apiVersion"], doc["kind"])
        ns = ["-n", namespace] if model.scope == "Namespaced" else []
        ref = f"{model.plural}.{model.group}/{doc['metadata']['name']}"
        stored = json.loads(kubectl("get", ref, *ns, "-o", "json").stdout)
        # Python -> YAML -> API -> Python: what the server stored is what the model says.
        assert parse_object(stored).to_dict()["spec"] == parse_object(doc).to_dict()["spec"]

        table = kubectl("get", ref, *ns, "-o", "wide").stdout.splitlines()
        header = table[0].split()
        for column in model.printer_columns:
            assert column.name.upper() in header, (column.name, table[0])
        assert doc["metadata"]["name"] in table[1]


def test_category_lists_every_kind(kubectl: Callable[..., Any]) -> None:
    resources = kubectl("api-resources", "--categories=sluice", "-o", "name").stdout.split()
    expected = {f"{k.plural}.{k.group}" for k in KINDS}
    assert expected <= set(resources), resources
    kubectl("get", "sluice", "-A")  # the category resolves


def test_short_names_resolve(kubectl: Callable[..., Any], namespace: str) -> None:
    for kind in KINDS:
        for short in kind.short_names:
            kubectl("get", short, "-n", namespace)


def _status_round_trip(
    kubectl: Callable[..., Any], ref: str, ns: list[str], status: dict[str, Any]
) -> dict[str, Any]:
    kubectl(
        "patch",
        ref,
        *ns,
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps({"status": status}),
    )
    stored: dict[str, Any] = json.loads(kubectl("get", ref, *ns, "-o", "json").stdout)
    return stored


def test_status_written_from_models_is_stored_unchanged(
    kubectl: Callable[..., Any], namespace: str
) -> None:
    """What operators build with the status models passes the schema and reads back equal."""
    when = datetime(2026, 11, 22, 8, 0, 5, tzinfo=UTC)
    job_doc = next(d for d in _docs(SAMPLES / "vcjob.yaml") if d["kind"] == "VCJob")
    job_doc["metadata"]["namespace"] = namespace
    kubectl("apply", "--server-side", "-f", "-", input=json.dumps(job_doc))
    status = VCJobStatus(
        phase=JobPhase.RUNNING,
        last_transition_time=when,
        running=3,
        retry_count=0,
        version=1,
        pod_group="mnist-train",
        tasks=[TaskStatus(name="ps", phase=TaskPhase.RUNNING, replicas=2, running=2)],
        replicas=[
            ReplicaStatus(
                name="mnist-train-ps-0", task="ps", index=0, phase=ReplicaPhase.RUNNING, node="n1"
            )
        ],
        transitions=[
            Transition(
                level=TransitionLevel.JOB,
                name="mnist-train",
                from_="Pending",
                to="Running",
                reason="MinAvailableRunning",
                time=when,
            )
        ],
        preemption=PreemptionStatus(
            role=PreemptionRole.WILL_EVICT, deadline=when, peers=["other/job"]
        ),
        conditions=[
            Condition(type="Valid", status=ConditionStatus.TRUE, last_transition_time=when)
        ],
    )
    stored = _status_round_trip(
        kubectl, "vcjobs.batch.sluice.dev/mnist-train", ["-n", namespace], status.to_dict()
    )
    job = parse_object(stored)
    assert isinstance(job, VCJob)
    assert job.status == status
    # Printer columns now have values.
    row = kubectl("get", "vcj", "mnist-train", "-n", namespace).stdout.splitlines()[1].split()
    assert row[1] == "Running"


def test_queue_and_pool_status_quantities(kubectl: Callable[..., Any], cleanup: list[str]) -> None:
    obj = {
        "apiVersion": "scheduling.sluice.dev/v1alpha1",
        "kind": "Queue",
        "metadata": {"name": "e2e-status-queue"},
        "spec": {"guarantee": {"cpu": "1"}},
    }
    cleanup.append(f"{Queue.crd_name()}/e2e-status-queue")
    kubectl("apply", "--server-side", "-f", "-", input=json.dumps(obj))
    status = QueueStatus(
        state=QueueState.OPEN,
        deserved={"cpu": "1500m", "memory": "3Gi", "nvidia.com/gpu": "2"},
        allocated={"cpu": "0"},
        pending=1,
        running=2,
    )
    stored = _status_round_trip(
        kubectl, f"{Queue.crd_name()}/e2e-status-queue", [], status.to_dict()
    )
    queue = parse_object(stored)
    assert isinstance(queue, Queue)
    assert queue.status == status
    bad = kubectl(
        "patch",
        f"{Queue.crd_name()}/e2e-status-queue",
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps({"status": {"allocated": {"cpu": "-1"}}}),
        check=False,
    )
    assert bad.returncode != 0
    assert "allocated.cpu in body should match" in bad.stderr
