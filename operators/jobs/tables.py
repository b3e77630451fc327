"""The three state machines as tables: Job (actions and sync rules), Task and Replica (rules).

Job: an action (from a lifecycle policy, suspend/resume or the retry limit) is looked up in
`ACTIONS` by (current phase, action): the row says which pods to kill, the next phase, and whether
the retry count and the job version go up. Phases without a row for an action ignore it. Then the
`SYNC` rules of the (new) phase are tried in order; the first whose guard holds moves the job on,
and the rules of the phase reached are tried again (Pending -> Inqueue -> Running can happen in one
step). Task and Replica phases are derived from what is observed: the first rule whose guard holds
gives the phase.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from operators.api.batch import JobPhase as J
from operators.api.batch import PolicyAction as A
from operators.api.batch import ReplicaPhase as R
from operators.api.batch import TaskPhase as T
from operators.jobs.observed import PodObs


class Kill(enum.StrEnum):
    NONE = "None"
    ALL = "All"  # every pod of the job, finished ones too (a fresh start)
    ALIVE = "Alive"  # pods still pending or running; finished ones are kept for their logs
    TASK = "Task"  # every pod of the target task
    POD = "Pod"  # the target pods


@dataclass(frozen=True, slots=True)
class Step:
    kill: Kill
    to: J | None  # None: the phase stays
    retry: bool = False  # counts against maxRetry
    new_version: bool = False  # events of older pods are stale from now on


EXHAUSTED: Final = Step(Kill.ALIVE, J.FAILED)
"""What a restart becomes once `status.retryCount` has reached `maxRetry`."""

RESTARTS: Final = frozenset({A.RESTART_JOB, A.RESTART_TASK, A.RESTART_POD})

_ACTIVE = (J.PENDING, J.INQUEUE, J.RUNNING)
_STOP_ROWS = {
    A.ABORT_JOB: Step(Kill.ALIVE, J.ABORTING),
    A.TERMINATE_JOB: Step(Kill.ALIVE, J.TERMINATING),
    A.COMPLETE_JOB: Step(Kill.ALIVE, J.COMPLETING),
}

ACTIONS: Final[dict[tuple[J, A], Step]] = {
    **{
        (phase, action): step
        for phase in _ACTIVE
        for action, step in {
            A.RESTART_JOB: Step(Kill.ALL, J.RESTARTING, retry=True, new_version=True),
            A.RESTART_TASK: Step(Kill.TASK, J.RESTARTING, retry=True),
            A.RESTART_POD: Step(Kill.POD, None, retry=True),
            **_STOP_ROWS,
        }.items()
    },
    **{(J.RESTARTING, action): step for action, step in _STOP_ROWS.items()},
    (J.ABORTING, A.RESUME_JOB): Step(Kill.NONE, J.RESTARTING, new_version=True),
    (J.ABORTED, A.RESUME_JOB): Step(Kill.NONE, J.RESTARTING, new_version=True),
}

TERMINAL: Final = frozenset({J.COMPLETED, J.ABORTED, J.TERMINATED, J.FAILED})
"""Phases a job never leaves by itself (Aborted leaves on ResumeJob)."""
KILLING: Final = frozenset({J.COMPLETING, J.ABORTING, J.TERMINATING, J.RESTARTING})
"""Phases in which the job's pods are being removed and none are created."""
CREATING: Final = frozenset({J.INQUEUE, J.RUNNING})
"""Phases in which missing pods are created."""


@dataclass(frozen=True, slots=True)
class Facts:
    """What the sync and task rules look at, computed once per reconcile."""

    admitted: bool  # the PodGroup reached Inqueue (or later): quota reserved
    min_reached: bool  # running + succeeded >= minAvailable
    min_success_reached: bool
    all_finished: bool  # every task done (elastic types: min finished, nothing running)
    finished_ok: bool  # ... and enough succeeded (job and every task minimum, minSuccess)
    nothing_alive: bool  # no pod of the job pending or running
    restart_done: bool  # the pods killed by the restart are gone


Guard = Callable[[Facts], bool]

SYNC: Final[dict[J, tuple[tuple[str, Guard, J], ...]]] = {
    J.PENDING: (("Admitted", lambda f: f.admitted, J.INQUEUE),),
    J.INQUEUE: (("MinAvailableRunning", lambda f: f.min_reached, J.RUNNING),),
    J.RUNNING: (
        ("MinSuccessReached", lambda f: f.min_success_reached, J.COMPLETING),
        ("Succeeded", lambda f: f.all_finished and f.finished_ok, J.COMPLETED),
        ("PodsFailed", lambda f: f.all_finished and not f.finished_ok, J.FAILED),
    ),
    J.RESTARTING: (("Restarted", lambda f: f.restart_done, J.PENDING),),
    J.COMPLETING: (("PodsStopped", lambda f: f.nothing_alive, J.COMPLETED),),
    J.ABORTING: (("PodsStopped", lambda f: f.nothing_alive, J.ABORTED),),
    J.TERMINATING: (("PodsStopped", lambda f: f.nothing_alive, J.TERMINATED),),
}


@dataclass(frozen=True, slots=True)
class TaskFacts:
    job_phase: J
    restarting: bool  # the task is a target of the restart in progress
    replicas: int
    min_available: int
    elastic: bool
    pending: int
    running: int
    succeeded: int
    failed: int

    @property
    def done(self) -> bool:
        finished = self.succeeded + self.failed
        if self.elastic:
            return finished >= self.min_available and self.running == 0
        return finished >= self.replicas  # a task scaled to 0 replicas waits for nothing

    @property
    def completed(self) -> bool:
        return self.done and (
            (self.replicas == 0 and not self.elastic)
            or self.succeeded >= max(self.min_available, 1)
        )


TASK_RULES: Final[tuple[tuple[Callable[[TaskFacts], bool], T], ...]] = (
    (lambda t: t.restarting, T.RESTARTING),
    (lambda t: t.completed, T.COMPLETED),
    (lambda t: t.failed > t.replicas - t.min_available, T.FAILED),
    (lambda t: t.job_phase in TERMINAL and t.pending + t.running == 0, T.TERMINATED),
    (lambda t: t.running > 0 and t.running + t.succeeded >= t.min_available, T.RUNNING),
    (lambda t: True, T.PENDING),
)


def task_phase(facts: TaskFacts) -> T:
    return next(phase for guard, phase in TASK_RULES if guard(facts))


REPLICA_RULES: Final[tuple[tuple[Callable[[PodObs], bool], R], ...]] = (
    (lambda p: p.deleting and p.evicted, R.EVICTED),
    (lambda p: p.deleting, R.TERMINATING),
    (lambda p: p.phase == "Succeeded", R.SUCCEEDED),
    (lambda p: p.phase == "Failed", R.FAILED),
    (lambda p: p.phase == "Running", R.RUNNING),
    (lambda p: p.phase == "Unknown", R.UNKNOWN),
    (lambda p: bool(p.node), R.SCHEDULED),
    (lambda p: True, R.PENDING),
)


def replica_phase(pod: PodObs) -> R:
    return next(phase for guard, phase in REPLICA_RULES if guard(pod))
