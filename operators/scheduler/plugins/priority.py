"""priority: tenant priority, then job priority; who may preempt whom inside a queue.

* job order: higher (tenant priority, job priority) first;
* victims (preempt): only if the preemptor's tenant ``canPreempt`` and the victim's priority is
  lower (an elastic surplus may also be taken from an equal-priority job); groups in a delayed
  preemption (Privileged or WillEvict) are never taken by a third job;
* victim order: lower priority first.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from operators.scheduler.framework import Purpose

if TYPE_CHECKING:
    from operators.scheduler.framework import Extensions, SortKey, VictimUnit
    from operators.scheduler.state import GroupInfo, SessionState


def _job_key(g: GroupInfo) -> SortKey:
    return (-float(g.priority[0]), -float(g.priority[1]))


def _victim_filter(preemptor: GroupInfo, unit: VictimUnit, purpose: Purpose) -> bool | None:
    victim = unit.group
    if victim.pg.preemption is not None:
        return False
    if purpose is not Purpose.PREEMPT:
        return None
    if not preemptor.can_preempt:
        return False
    if unit.surplus:
        return victim.priority <= preemptor.priority
    return victim.priority < preemptor.priority


def _victim_precheck(preemptor: GroupInfo, purpose: Purpose) -> bool | None:
    if purpose is Purpose.PREEMPT and not preemptor.can_preempt:
        return False
    return None


def _victim_key(preemptor: GroupInfo, unit: VictimUnit) -> SortKey:
    return (float(unit.group.priority[0]), float(unit.group.priority[1]))


def register(state: SessionState, ext: Extensions) -> None:
    ext.job_keys.append(_job_key)
    ext.victim_filters.append(_victim_filter)
    ext.victim_keys.append(_victim_key)
    ext.victim_prechecks.append(_victim_precheck)
