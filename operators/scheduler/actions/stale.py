"""Stale gangs: a running gang that has fallen below its minimum (a pod failed or was evicted
and did not come back) for longer than its grace period is evicted whole, so it stops holding
room - GPUs above all - that it cannot use. A gang whose phase still says it never ran (Pending,
Inqueue) counts too once none of its pods waits for a node: it was placed whole and lost a member
before its Running phase was written, and nothing else would ever free its room (the runtime's
half-bound repair takes only gangs whose missing members still wait to be placed).

The core reads no clock: when the gang fell below its minimum is the runtime's observation
(``PodGroup.below_minimum_since``); the core decides whether the grace period has run out at
the snapshot's ``now``. A group a job operator owns is left to the job's own policies (restart,
abort, ...) unless the group sets its own grace period.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from operators.scheduler.decisions import EvictReason
from operators.scheduler.snapshot import GroupPhase, TaskStatus
from operators.scheduler.statement import Statement

if TYPE_CHECKING:
    from operators.scheduler.context import Session
    from operators.scheduler.snapshot import PodGroup

_RUNNING = (GroupPhase.RUNNING, GroupPhase.UNKNOWN)
_NEVER_RAN = (GroupPhase.PENDING, GroupPhase.INQUEUE)


def grace_of(pg: PodGroup, default: float) -> float | None:
    """Seconds a gang may run below its minimum (``default``: SessionConfig.stale_gang_grace);
    None: never evicted for it."""
    own = pg.stale_grace
    if own is None and pg.job_owned:
        return None
    grace = default if own is None else own
    return None if grace < 0 else grace


def run(ssn: Session) -> None:
    state = ssn.state
    for g in state.groups:
        since = g.pg.below_minimum_since
        if since is None or g.gang_satisfied():
            continue
        if g.phase not in _RUNNING and (
            g.phase not in _NEVER_RAN or any(t.pending for t in g.tasks)
        ):
            continue  # finished, or a half-bound gang whose rest may still follow: not stale
        grace = grace_of(g.pg, ssn.config.stale_gang_grace)
        if grace is None or state.now < since + grace:
            continue
        going = [t for t in g.tasks if t.held and t.task.status != TaskStatus.RELEASING]
        if not going:
            continue
        total, _ = g.ready_count()
        stmt = Statement(state)
        stmt.evict_many(
            going,
            EvictReason.STALE_GANG,
            f"running {total} of its minimum {g.pg.min_member} pod(s) for more than "
            f"{grace:g} s: evicted whole, so it holds no room it cannot use",
            "",
        )
        ssn.commit(stmt)
        g.preemption_done = True  # nothing else takes from it or for it this session
