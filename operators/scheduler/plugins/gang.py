"""gang: all of a group's minimum in one session, or nothing; elastic surplus goes first.

* shortfall: the pending tasks that complete the gang minimum (:func:`complete_minimum`, the
  one definition of the minimum), or None while too few pods exist;
* ready: ``minMember`` tasks hold resources and every role has its minimum
  (``minTaskMember`` / ``ReplicaSpec.min_replicas``);
* job order: groups holding a reservation (nominated pods, Privileged) go before the rest, so
  room freed for them by preemption is not taken by others; so do jobs that consolidation moved
  within its window (they ran before and were placed again in its plan: they keep their turn);
* task order: :func:`growth_key` (the order groups grow in; they shrink in its reverse);
* victims: surplus replicas (above the minimum) sort before any whole group (shrink before
  evict); among surplus units the other plugins' keys (borrowed, overcommitted, priority)
  decide, and only then the group's own shrink order;
* disruption budget: ``maxUnavailable`` counts per job and session, together with the pods
  already terminating, however many units (surplus replicas, the whole job) are taken.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from operators.scheduler.snapshot import PreemptionRole, TaskStatus
from operators.scheduler.state import complete_minimum, growth_key

if TYPE_CHECKING:
    from operators.scheduler.framework import Extensions, Purpose, SortKey, VictimUnit
    from operators.scheduler.state import GroupInfo, SessionState, TaskInfo


def shortfall(g: GroupInfo, pending: list[TaskInfo]) -> list[TaskInfo] | None:
    """The pending tasks (in task order) that complete the gang minimum, or None if too few
    pods exist."""
    total, per_role = g.ready_count()
    chosen, complete = complete_minimum(g, pending, total, per_role)
    return chosen if complete else None


def _job_key(state: SessionState, g: GroupInfo) -> SortKey:
    mark = g.pg.preemption
    reserved = (
        (mark is not None and mark.role == PreemptionRole.PRIVILEGED)
        or any(t.nominated >= 0 for t in g.tasks)
        or state.moved_recently(g)
    )
    return (0.0 if reserved else 1.0,)


def _ready(g: GroupInfo) -> bool:
    return g.gang_satisfied()


def _victim_key(unit: VictimUnit) -> SortKey:
    return (0.0 if unit.surplus else 1.0,)


class _Unavailable:
    """Pods each job may still lose this session: ``maxUnavailable`` minus its pods already
    terminating or evicted this session (by earlier preemptors too)."""

    __slots__ = ("taken",)

    def __init__(self) -> None:
        # group -> pods lost: before this search (read when first seen, so this search's own
        # evictions are not counted twice) plus those taken by it.
        self.taken: dict[int, int] = {}

    @staticmethod
    def _gone(g: GroupInfo) -> int:
        return sum(1 for t in g.tasks if t.evicted or t.task.status == TaskStatus.RELEASING)

    def admits(self, unit: VictimUnit) -> bool:
        budget = unit.group.pg.max_unavailable
        if budget is None:
            return True
        g = unit.group
        lost = self.taken.get(id(g))
        if lost is None:
            lost = self.taken[id(g)] = self._gone(g)
        return lost + _going(unit) <= budget

    def take(self, unit: VictimUnit) -> None:
        if unit.group.pg.max_unavailable is not None:
            self.taken[id(unit.group)] += _going(unit)


def _going(unit: VictimUnit) -> int:
    return sum(1 for t in unit.tasks if t.task.status != TaskStatus.RELEASING)


def _budget(preemptor: GroupInfo, purpose: Purpose) -> _Unavailable:
    return _Unavailable()


def register(state: SessionState, ext: Extensions) -> None:
    ext.shortfalls.append(shortfall)
    ext.job_keys.append(lambda g: _job_key(state, g))
    ext.task_keys.append(growth_key)
    ext.ready_checks.append(_ready)
    ext.victim_keys.append(_victim_key)
    ext.victim_budgets.append(_budget)
