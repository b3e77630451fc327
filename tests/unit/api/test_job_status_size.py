"""A job's status stays far below etcd's object limit however many pods the job has."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from operators.api.base import MAX_MESSAGE, MAX_REASON
from operators.api.batch import (
    MAX_REPLICA_ROWS,
    MAX_TRANSITIONS,
    ReplicaPhase,
    ReplicaStatus,
    TaskStatus,
    Transition,
    TransitionLevel,
    VCJob,
    VCJobStatus,
    bound_replica_rows,
)
from operators.api.crdgen import crd_for

ETCD_LIMIT = 1536 * 1024  # etcd's default --max-request-bytes
STATUS_BOUND = 640 * 1024  # what docs/api.md promises for the worst case
WHEN = datetime(2026, 11, 23, tzinfo=UTC)


def _row(i: int, phase: ReplicaPhase) -> ReplicaStatus:
    # Worst case per row: every string at its cap.
    return ReplicaStatus(
        name=f"job-worker-{i}".ljust(253, "x"),
        task="worker".ljust(63, "x"),
        index=i,
        phase=phase,
        node=f"node-{i}".ljust(253, "x"),
        restarts=3,
        exit_code=137,
        reason="R" * MAX_REASON,
        message="m" * MAX_MESSAGE,
        last_transition_time=WHEN,
    )


def _status(pods: int) -> VCJobStatus:
    phases = [ReplicaPhase.RUNNING] * (pods - 300) + [ReplicaPhase.FAILED] * 300
    rows, omitted = bound_replica_rows(_row(i, p) for i, p in enumerate(phases))
    transition = Transition(
        level=TransitionLevel.REPLICA,
        name="p".ljust(253, "x"),
        from_="Running",
        to="Failed",
        reason="R" * MAX_REASON,
        message="m" * MAX_MESSAGE,
        time=WHEN,
    )
    return VCJobStatus(
        tasks=[TaskStatus(name="worker", replicas=pods, running=pods - 300, failed=300)],
        replicas=rows,
        replicas_omitted=omitted,
        transitions=[transition] * MAX_TRANSITIONS,
    )


def test_ten_thousand_replica_job_status_fits() -> None:
    job = VCJob.model_validate(
        {
            "metadata": {"name": "big"},
            "spec": {"tasks": [{"name": "worker", "replicas": 10000, "template": {}}]},
        }
    )
    job.status = _status(10000)
    size = len(json.dumps(job.to_dict()).encode())
    assert size < STATUS_BOUND < ETCD_LIMIT
    assert job.status.replicas is not None
    assert len(job.status.replicas) == MAX_REPLICA_ROWS
    assert job.status.replicas_omitted == 10000 - MAX_REPLICA_ROWS
    # The pods that need attention (the 300 failed ones) get every row.
    assert all(r.phase is ReplicaPhase.FAILED for r in job.status.replicas)


def test_failed_pods_come_first_then_the_rest_in_task_order() -> None:
    rows = [
        _row(i, ReplicaPhase.FAILED if i % 100 == 7 else ReplicaPhase.RUNNING) for i in range(1000)
    ]
    bounded, omitted = bound_replica_rows(rows)
    assert [r.index for r in bounded[:10]] == [7, 107, 207, 307, 407, 507, 607, 707, 807, 907]
    assert [r.index for r in bounded[10:13]] == [0, 1, 2]
    assert omitted == 1000 - MAX_REPLICA_ROWS


def test_small_jobs_get_one_row_per_pod_in_order() -> None:
    rows = [_row(i, ReplicaPhase.RUNNING) for i in (2, 0, 1)]
    bounded, omitted = bound_replica_rows(rows)
    assert [r.index for r in bounded] == [0, 1, 2]
    assert omitted == 0


def test_too_many_rows_are_refused_by_model_and_crd() -> None:
    with pytest.raises(ValidationError, match=f"at most {MAX_REPLICA_ROWS} items"):
        VCJobStatus(replicas=[_row(i, ReplicaPhase.RUNNING) for i in range(MAX_REPLICA_ROWS + 1)])
    status = crd_for(VCJob)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"][
        "status"
    ]
    assert status["properties"]["replicas"]["maxItems"] == MAX_REPLICA_ROWS
    assert status["properties"]["transitions"]["maxItems"] == MAX_TRANSITIONS


def test_wire_rows_follow_the_same_rule() -> None:
    rows = [_row(i, ReplicaPhase.FAILED if i == 5 else ReplicaPhase.RUNNING) for i in range(300)]
    wire = [r.to_dict() for r in rows]
    bounded, omitted = bound_replica_rows(wire)
    assert [r["index"] for r in bounded] == [r.index for r in bound_replica_rows(rows)[0]]
    assert bounded[0]["index"] == 5
    assert omitted == 300 - MAX_REPLICA_ROWS
