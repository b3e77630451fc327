"""`sluice why` knows every reason the scheduler writes: each waiting reason has unblock text, and
each eviction reason is shown as the job's last eviction."""

from __future__ import annotations

import copy

import pytest

from operators.api.scheduling import PodGroupReason as R
from operators.cli import why
from operators.scheduler.decisions import EvictReason

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
