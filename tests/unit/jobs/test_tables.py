"""Every row of the Job, Task and Replica tables, one case each."""

from __future__ import annotations

import pytest

from operators.api.batch import JobPhase as J
from operators.api.batch import PolicyAction as A
from operators.api.batch import ReplicaPhase as R
from operators.api.batch import TaskPhase as T
from operators.jobs import tables
from operators.jobs.observed import PodObs


@pytest.mark.parametrize(("key", "step"), sorted(tables.ACTIONS.items()))
def test_action_rows_lead_somewhere_sensible(key: tuple[J, A], step: tables.Step) -> None:
    phase, action = key
    assert phase not in (J.COMPLETED, J.FAILED, J.TERMINATED)  # terminal means terminal
    if action in tables.RESTARTS:
        assert step.retry
        assert step.to in (J.RESTARTING, None)
    if action == A.RESUME_JOB:
        assert phase in (J.ABORTING, J.ABORTED)
        assert step.new_version


def test_every_killing_phase_ends_when_pods_are_gone() -> None:
    for phase in (J.COMPLETING, J.ABORTING, J.TERMINATING, J.RESTARTING):
        assert tables.SYNC[phase], phase
    assert tables.EXHAUSTED.to == J.FAILED


def facts(**kw: object) -> tables.TaskFacts:
    base: dict[str, object] = {
        "job_phase": J.RUNNING,
        "restarting": False,
        "replicas": 4,
        "min_available": 2,
        "elastic": False,
        "pending": 0,
        "running": 0,
        "succeeded": 0,
        "failed": 0,
    }
    base.update(kw)
    return tables.TaskFacts(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kw", "phase"),
    [
        ({"restarting": True, "running": 4}, T.RESTARTING),
        ({"succeeded": 4}, T.COMPLETED),
        ({"failed": 3, "running": 1}, T.FAILED),
        ({"job_phase": J.ABORTED}, T.TERMINATED),
        ({"running": 2, "pending": 2}, T.RUNNING),
        ({"pending": 4}, T.PENDING),
        ({"elastic": True, "succeeded": 2, "pending": 2}, T.COMPLETED),
    ],
)
def test_task_rules(kw: dict[str, object], phase: T) -> None:
    assert tables.task_phase(facts(**kw)) == phase


def pod(**kw: object) -> PodObs:
    base: dict[str, object] = {
        "name": "p",
        "uid": "u",
        "task": "t",
        "index": 0,
        "version": 0,
        "phase": "Pending",
    }
    base.update(kw)
    return PodObs(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kw", "phase"),
    [
        ({"deleting": True, "evicted": True, "phase": "Running"}, R.EVICTED),
        ({"deleting": True, "phase": "Running"}, R.TERMINATING),
        ({"phase": "Succeeded"}, R.SUCCEEDED),
        ({"phase": "Failed"}, R.FAILED),
        ({"phase": "Running", "node": "n"}, R.RUNNING),
        ({"phase": "Unknown"}, R.UNKNOWN),
        ({"node": "n"}, R.SCHEDULED),
        ({}, R.PENDING),
    ],
)
def test_replica_rules(kw: dict[str, object], phase: R) -> None:
    assert tables.replica_phase(pod(**kw)) == phase
