"""gang: all of a group's minimum in one session, or nothing; elastic surplus goes first.

* ready: ``minMember`` tasks hold resources and every role has its minimum
  (``minTaskMember`` / ``ReplicaSpec.min_replicas``);
* job order: groups holding a reservation (nominated pods, Privileged) go before the rest, so
  room freed for them by preemption is not taken by others;
* victims: an elastic group's surplus sorts before any whole group (shrink before evict); a
  unit larger than the group's disruption budget (``max_unavailable``) is never a victim.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from operators.scheduler.snapshot import PreemptionRole

if TYPE_CHECKING:
    from operators.scheduler.framework import Extensions, Purpose, SortKey, VictimUnit
    from operators.scheduler.state import GroupInfo, SessionState, TaskInfo


def shortfall(g: GroupInfo, pending: list[TaskInfo]) -> list[TaskInfo] | None:
    """The pending tasks that complete the gang minimum, or None if too few pods exist."""
    total, per_role = g.ready_count()
    chosen: list[TaskInfo] = []
    used: set[int] = set()
    for role, need in g.role_min.items():
        missing = need - per_role.get(role, 0)
        if missing <= 0:
            continue
        picks = [i for i, t in enumerate(pending) if t.task.role == role and i not in used]
        if len(picks) < missing:
            return None
        for i in picks[:missing]:
            used.add(i)
            chosen.append(pending[i])
    missing_total = g.pg.min_member - total - len(chosen)
    if missing_total > 0:
        rest = [t for i, t in enumerate(pending) if i not in used]
        if len(rest) < missing_total:
            return None
        chosen.extend(rest[:missing_total])
    return chosen


def _job_key(g: GroupInfo) -> SortKey:
    mark = g.pg.preemption
    reserved = (mark is not None and mark.role == PreemptionRole.PRIVILEGED) or any(
        t.nominated >= 0 for t in g.tasks
    )
    return (0.0 if reserved else 1.0,)


def _task_key(t: TaskInfo) -> SortKey:
    # Higher replica priority first, then replica index: the order elastic groups grow in.
    return (-float(t.replica_priority), float(t.task.index))


def _ready(g: GroupInfo) -> bool:
    return g.gang_satisfied()


def _victim_filter(preemptor: GroupInfo, unit: VictimUnit, purpose: Purpose) -> bool | None:
    budget = unit.group.pg.max_unavailable
    if budget is not None and len(unit.tasks) > budget:
        return False
    return None


def _victim_key(preemptor: GroupInfo, unit: VictimUnit) -> SortKey:
    if unit.surplus:
        # Shrink order inside a group: lowest replica priority, then highest index first.
        t = unit.tasks[0]
        return (0.0, float(t.replica_priority), -float(t.task.index))
    return (1.0, 0.0, 0.0)


def register(state: SessionState, ext: Extensions) -> None:
    ext.job_keys.append(_job_key)
    ext.task_keys.append(_task_key)
    ext.ready_checks.append(_ready)
    ext.victim_filters.append(_victim_filter)
    ext.victim_keys.append(_victim_key)
