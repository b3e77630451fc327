"""priority: tenant priority, then job priority; who may preempt whom inside a queue.

* job order: higher (tenant priority, job priority) first;
* victims (preempt): only if the preemptor's tenant ``canPreempt`` and the victim's priority is
  strictly lower (Volcano's rule, also for a plain job's pods above ``minMember``); an elastic
  job's surplus is given back to an equal-priority job too; an overcommitted job (marked
  overcommit, in an overcommit queue above its capability) ranks below every regular job of its
  queue; groups in a delayed preemption (Privileged or WillEvict) are never taken by a third
  job, only by the preemptor their mark names;
* victim order: lower priority first.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from operators.scheduler.framework import Purpose
from operators.scheduler.snapshot import PreemptionRole

if TYPE_CHECKING:
    from operators.scheduler.framework import Extensions, SortKey, VictimUnit
    from operators.scheduler.state import GroupInfo, SessionState


def _job_key(g: GroupInfo) -> SortKey:
    return (-float(g.priority[0]), -float(g.priority[1]))


class Priority:
    def __init__(self, state: SessionState) -> None:
        self.state = state

    def overcommitted(self, g: GroupInfo) -> bool:
        """Running beyond its queue's capability on overcommit terms: evicted first."""
        tree = self.state.queues
        q = g.queue
        return bool(
            g.pg.overcommit
            and q >= 0
            and tree.overcommit[q]
            and (tree.kept(q) > tree.capability_eps[q]).any()
        )

    def victim_filter(
        self, preemptor: GroupInfo, unit: VictimUnit, purpose: Purpose
    ) -> bool | None:
        victim = unit.group
        mark = victim.pg.preemption
        if mark is not None and not (
            mark.role == PreemptionRole.WILL_EVICT and mark.peers[:1] == (preemptor.uid,)
        ):
            return False
        if purpose is not Purpose.PREEMPT:
            return None
        if not preemptor.can_preempt:
            return False
        if not preemptor.pg.overcommit and self.overcommitted(victim):
            return True
        if unit.surplus and victim.elastic:
            return victim.priority <= preemptor.priority
        return victim.priority < preemptor.priority


def _victim_precheck(preemptor: GroupInfo, purpose: Purpose) -> bool | None:
    if purpose is Purpose.PREEMPT and not preemptor.can_preempt:
        return False
    return None


def _victim_key(unit: VictimUnit) -> SortKey:
    return (float(unit.group.priority[0]), float(unit.group.priority[1]))


def register(state: SessionState, ext: Extensions) -> None:
    ext.job_keys.append(_job_key)
    ext.victim_filters.append(Priority(state).victim_filter)
    ext.victim_keys.append(_victim_key)
    ext.victim_prechecks.append(_victim_precheck)
