"""`sluice why` knows every reason the scheduler writes: each waiting reason has unblock text, and
each eviction reason is shown as the job's last eviction."""

from __future__ import annotations

import copy

import pytest

from operators.api.scheduling import PodGroupReason as R
from operators.cli import why
from operators.controllers.scheduler_status import desired_conditions
from operators.scheduler import decisions as D
from operators.scheduler.decisions import EvictReason
from operators.scheduler.snapshot import GroupPhase

from . import objects as O

NOT_WAITING = {
    R.SCHEDULED,  # Scheduled condition: the group runs
    R.ADMITTED,  # Enqueued condition: quota reserved, placement follows
    R.CONSOLIDATED,  # Consolidated condition: it was moved, a fact, not a wait
    R.DELAYED_PREEMPTION,  # Privileged/WillEvict conditions: why shows status.preemption
    R.POOL_FOUND,  # PoolFallback=False: nothing to unblock
}


@pytest.mark.parametrize("reason", sorted(set(R) - NOT_WAITING))
def test_every_waiting_reason_says_what_unblocks_it(reason: str) -> None:
    facts = copy.deepcopy(O.NON_PREEMPTIBLE_JOB)
    [cond] = facts["podgroup"]["status"]["conditions"]
    cond["reason"] = reason
    report = why.explain(facts)
    assert report["waitingFor"].startswith(f"{reason}: ")
    assert report["unblock"] == why.UNBLOCK[reason]


@pytest.mark.parametrize("reason", list(EvictReason))
def test_every_eviction_reason_is_the_last_eviction(reason: EvictReason) -> None:
    facts = copy.deepcopy(O.NON_PREEMPTIBLE_JOB)
    facts["events"] = [
        O.event(reason.value, "evicted", "steady", when="10:00:00"),
        O.event("NotAnEviction", "later, but not an eviction", "steady", when="10:05:00"),
    ]
    assert why.explain(facts)["lastEviction"] == f"{reason.value}: evicted"


def test_a_waiting_pod_of_a_running_job_whose_queue_is_gone_is_told_why() -> None:
    # The core's explanation (backfill: its extra pod refused by the missing queue), as the
    # scheduler writes it into the running group's conditions, read back by `why`.
    facts = copy.deepcopy(O.NON_PREEMPTIBLE_JOB)
    text = "gang minimum running; 1 more pod(s) wait: queue 'team-a' does not exist"
    core = D.Explanation("steady", D.ReasonCode.QUEUE_MISSING, text)
    conditions = desired_conditions(GroupPhase.RUNNING, core, [], "t")
    facts["podgroup"]["status"] = {"phase": "Running", "conditions": conditions}
    report = why.explain(facts)
    assert report["state"] == "Running"
    assert report["waitingFor"] == f"QueueMissing: {text}"
    assert report["unblock"] == why.UNBLOCK["QueueMissing"]
    # Waiting for idle room to grow is no trouble of a running group: nothing to unblock.
    growing = D.Explanation("steady", D.ReasonCode.GROWING, "1 more pod(s) wait for idle room")
    conditions = desired_conditions(GroupPhase.RUNNING, growing, [], "t")
    facts["podgroup"]["status"] = {"phase": "Running", "conditions": conditions}
    assert why.explain(facts)["waitingFor"] is None
