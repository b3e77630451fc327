"""Lifecycle events and which action they lead to.

Resolution (Volcano's order): the task's policies first, then the job's; within a list, the first
policy whose exit code (PodFailed only) or event (or `*`) matches wins. PodPending only matches a
policy that names it (it always carries a timeout, counted from the pod's creation). A `timeout`
on any other policy delays its action (reconcile.Delayed): it is taken when the situation still
holds at the deadline, and dropped once it no longer does (the failed pod is gone, the task or the
PodGroup left the phase, an evicted replica's successor runs) or another action is taken. Without a match, a HybridJob replica type's
`restartPolicy` decides what a failed pod gets; otherwise nothing happens beyond the level-based
sync (a missing pod is re-created, a failed one is counted).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from operators.api.batch import PolicyAction as A
from operators.api.batch import PolicyEvent as E
from operators.api.batch import RestartPolicy
from operators.jobs.observed import PodObs
from operators.jobs.shape import JobShape, Policy, TaskShape

# When several actions are due in one step, the first in this order is taken for the job;
# RestartPod ones are all applied when nothing larger is due.
SEVERITY: Final[tuple[A, ...]] = (
    A.TERMINATE_JOB,
    A.ABORT_JOB,
    A.COMPLETE_JOB,
    A.RESTART_JOB,
    A.RESTART_TASK,
    A.RESTART_POD,
    A.RESUME_JOB,
)
RETRYABLE_EXIT_CODES: Final = range(1, 128)
"""restartPolicy ExitCode restarts these; 128+ means killed by a signal (OOM, preemption)."""


@dataclass(frozen=True, slots=True)
class JobEvent:
    event: E
    task: str = ""
    pod: PodObs | None = None
    exit_code: int | None = None

    def describe(self) -> str:
        what = self.event.value
        if self.pod is not None:
            what += f" ({self.pod.name}"
            what += f", exit code {self.exit_code})" if self.exit_code is not None else ")"
        elif self.task:
            what += f" (task {self.task})"
        return what


def matches(policy: Policy, ev: JobEvent) -> bool:
    if policy.exit_code is not None:
        return ev.event == E.POD_FAILED and ev.exit_code == policy.exit_code
    if ev.event == E.POD_PENDING:
        return E.POD_PENDING in policy.events
    return ev.event in policy.events or E.ANY in policy.events


def _default(task: TaskShape | None, ev: JobEvent) -> A | None:
    if ev.event != E.POD_FAILED or task is None or task.restart_policy is None:
        return None
    rp = task.restart_policy
    if rp in (RestartPolicy.ALWAYS, RestartPolicy.ON_FAILURE):
        return A.RESTART_POD
    if rp == RestartPolicy.EXIT_CODE and ev.exit_code in RETRYABLE_EXIT_CODES:
        return A.RESTART_POD
    return None


def resolve(job: JobShape, ev: JobEvent) -> A | None:
    """The action for one event, or None."""
    return resolve_with_timeout(job, ev)[0]


def resolve_with_timeout(job: JobShape, ev: JobEvent) -> tuple[A | None, float | None]:
    """The action for one event and the matching policy's timeout (seconds it is delayed by)."""
    task = job.task(ev.task) if ev.task else None
    for policies in (task.policies if task else (), job.policies):
        for policy in policies:
            if matches(policy, ev):
                return policy.action, policy.timeout
    return _default(task, ev), None


def pending_timeout(job: JobShape, task: str) -> float | None:
    """The PodPending timeout that applies to a pod of `task` (task policy first), if any."""
    shape = job.task(task)
    for policies in (shape.policies if shape else (), job.policies):
        for policy in policies:
            if E.POD_PENDING in policy.events and policy.timeout is not None:
                return policy.timeout
    return None
