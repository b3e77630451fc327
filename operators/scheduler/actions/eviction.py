"""Making room for a group by evicting whole jobs (or elastic surplus): shared by preempt and
reclaim.

Victim units are proposed by :func:`victim_units`, filtered and ordered by the plugins. Units are
evicted one at a time inside a statement; after each, if the freed room could plausibly hold the
gang, placement is tried (kind NOMINATE). The first success stops the search; units that did not
touch the nodes used are then put back, so only the needed jobs go. If every candidate is evicted
and the gang still does not fit, everything is discarded: nobody is evicted for a job that would
not fit anyway. Delayed preemption turns a success into marks instead of evictions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from operators.scheduler.decisions import (
    EvictReason,
    Explanation,
    MarkPrivileged,
    MarkWillEvict,
    ReasonCode,
)
from operators.scheduler.framework import Purpose, VictimUnit, Vote
from operators.scheduler.placement import place_group_tasks
from operators.scheduler.plugins.gang import shortfall
from operators.scheduler.state import Placement
from operators.scheduler.statement import Statement

if TYPE_CHECKING:
    from collections.abc import Iterable

    from numpy.typing import NDArray

    from operators.scheduler.context import Session
    from operators.scheduler.framework import NodeSet
    from operators.scheduler.state import GroupInfo, SessionState, TaskInfo

_EPS = 1e-6


@dataclass(slots=True)
class RoomOutcome:
    placed: bool
    victims: list[VictimUnit]
    delayed: bool = False
    message: str = ""


def _surplus(state: SessionState, g: GroupInfo) -> list[TaskInfo]:
    """Running tasks above the gang minimum: lowest replica priority, highest index first."""
    running = [t for t in g.tasks if t.held and t.placed == Placement.NONE and not t.evicted]
    if len(running) <= g.pg.min_member:
        return []
    kept: dict[str, int] = {}
    order = sorted(running, key=lambda t: (-t.replica_priority, t.task.index, t.task.uid))
    keep: list[TaskInfo] = []
    extra: list[TaskInfo] = []
    for t in order:
        role = t.task.role
        if kept.get(role, 0) < g.role_min.get(role, 0):
            kept[role] = kept.get(role, 0) + 1
            keep.append(t)
        else:
            extra.append(t)
    # Fill the rest of minMember with the most valuable extras; the remainder is surplus.
    spare = g.pg.min_member - len(keep)
    surplus = extra[max(spare, 0) :]
    return list(reversed(surplus))


def victim_units(state: SessionState, preemptor: GroupInfo, purpose: Purpose) -> list[VictimUnit]:
    """Every unit that could in principle go: preempt looks only inside the preemptor's queue
    (plugins then filter and order); reclaim looks everywhere."""
    out: list[VictimUnit] = []
    same_queue_only = purpose is Purpose.PREEMPT
    tree = state.queues
    # Reclaim can only take from queues above their share or overcommitted, or borrowers.
    if same_queue_only:
        groups: list[GroupInfo] = state.groups_by_queue.get(preemptor.queue, [])
    else:
        over = set(np.flatnonzero((tree.allocated > tree.deserved + _EPS).any(axis=1)).tolist())
        groups = []
        for q in over:
            groups.extend(state.groups_by_queue.get(q, []))
        groups.extend(g for g in _borrowers(state) if g.queue not in over)
    for h in groups:
        if h is preemptor or h.held_count <= 0:
            continue
        out.extend(_cached_units(state, h))
    return out


def _borrowers(state: SessionState) -> list[GroupInfo]:
    """Groups with tasks outside their own pool. Holdings (and so ``borrowed_count``) change
    only through ``SessionState.move``, which logs to ``touched``: cached on that log's length,
    so a victim search does not scan every group of the session."""
    version = len(state.touched)
    cached = state.borrowers_cache
    if cached is None or cached[0] != version:
        cached = (version, [g for g in state.groups if g.borrowed_count > 0])
        state.borrowers_cache = cached
    return cached[1]


def _cached_units(state: SessionState, h: GroupInfo) -> list[VictimUnit]:
    """Units only change when the group's holdings do: cached on that version."""
    cached = state.victim_cache.get(h.uid)
    if cached is not None and cached[0] == h.changes:
        return cached[1]
    units = _units_of(state, h)
    state.victim_cache[h.uid] = (h.changes, units)
    return units


def _units_of(state: SessionState, h: GroupInfo) -> list[VictimUnit]:
    if any(t.placed != Placement.NONE for t in h.tasks):
        # Placed by this very session: evicting its older pods would break the gang just bound.
        return []
    running = [t for t in h.tasks if t.held and t.placed == Placement.NONE and not t.evicted]
    if not running:
        return []
    borrowed = any(state.is_borrowed(t) for t in running)
    # Surplus replicas go one at a time (shrink only as far as needed), in shrink order.
    units = [
        VictimUnit(h, (t,), surplus=True, borrowed=state.is_borrowed(t)) for t in _surplus(state, h)
    ]
    units.append(VictimUnit(h, tuple(running), surplus=False, borrowed=borrowed))
    return units


def grace_of(ssn: Session, g: GroupInfo) -> float:
    if g.pg.preemption_grace is not None:
        return max(g.pg.preemption_grace, 0.0)
    if g.queue >= 0:
        delay = ssn.state.queues.specs[g.queue].preemption_delay
        if delay > 0:
            return delay
    return max(ssn.config.default_preemption_delay, 0.0)


def make_room(
    ssn: Session,
    g: GroupInfo,
    purpose: Purpose,
    *,
    only: Iterable[str] | None = None,
    allow_delay: bool = True,
    reason: EvictReason | None = None,
) -> RoomOutcome:
    """Evict the fewest/cheapest eligible units so ``g``'s gang minimum fits, or nothing."""
    state, ext, config = ssn.state, ssn.ext, ssn.config
    pending = ext.pending_in_order(g)
    tasks = shortfall(g, pending)
    if not tasks:
        return RoomOutcome(False, [], message="no pods to place")
    need = np.sum([t.req for t in tasks], axis=0)
    if only is None and not ext.victims_possible(g, purpose):
        return RoomOutcome(False, [], message="no job may be preempted for it")
    allowed = set(only) if only is not None else None
    # Victims named up front (a delayed preemption come due) may sit in any queue: a delayed
    # reclaim marks other queues' jobs, so look at exactly those groups.
    candidates = (
        victim_units(state, g, purpose)
        if allowed is None
        else [
            u
            for uid in sorted(allowed)
            if uid in state.group_by_uid
            for u in _cached_units(state, state.group_by_uid[uid])
        ]
    )
    units = [
        u
        for u in candidates
        if (allowed is None or u.group.uid in allowed)
        and not u.group.preemption_done
        and (allowed is not None or ext.is_victim(g, u, purpose))
    ]
    units.sort(key=lambda u: ext.victim_key(g, u))
    units = units[: config.max_victims_per_preemptor]
    if not units:
        return RoomOutcome(False, [], message="no job may be preempted for it")
    if reason is None:
        reason = EvictReason.PREEMPTED if purpose is Purpose.PREEMPT else EvictReason.RECLAIMED
    node_sets: list[NodeSet] = list(ext.candidate_sets(g, state.nodes.schedulable))
    if purpose is Purpose.PREEMPT:
        node_sets = node_sets[:1]  # preemption stays inside the group's own pool
    for node_set in node_sets:
        chosen = _search(ssn, g, tasks, need, units, node_set, reason)
        if chosen is None:
            continue
        victims, stmt = chosen
        grace = max((grace_of(ssn, u.group) for u in victims), default=0.0)
        if allow_delay and grace > 0:
            stmt.discard()
            _mark_delayed(ssn, g, victims, grace)
            return RoomOutcome(True, victims, delayed=True)
        ssn.commit(stmt)
        ext.placed(g)
        for u in victims:
            u.group.preemption_done = True
        g.preemption_done = True
        return RoomOutcome(True, victims)
    return RoomOutcome(
        False,
        [],
        message=f"even preempting all {len(units)} eligible job(s) would not make it fit",
    )


def _search(
    ssn: Session,
    g: GroupInfo,
    tasks: list[TaskInfo],
    need: NDArray[np.float64],
    units: list[VictimUnit],
    node_set: NodeSet,
    reason: EvictReason,
) -> tuple[list[VictimUnit], Statement] | None:
    state, ext = ssn.state, ssn.ext
    mask = node_set.mask
    stmt = Statement(state)
    taken: list[VictimUnit] = []
    success = False
    # Cheap necessary condition first: idle room on these nodes plus what the victims taken so
    # far hold there must cover the gang. Evictions are applied only once it does, so a search
    # that fails (the common case under contention) costs almost nothing. Past that point,
    # placement is tried after 1, 2, 4, ... more victims and once with all of them: a bounded
    # number of attempts, then the pruning below drops victims the placement did not need.
    used = need > 0
    room = np.maximum(state.free[mask], 0.0).sum(axis=0)[used]
    pending: list[TaskInfo] = []
    next_try = 0
    tried_all = False

    def attempt() -> bool:
        nonlocal pending
        stmt.evict_many(pending, reason, f"to make room for {g.pg.namespace}/{g.pg.name}", g.uid)
        pending = []
        if ext.allocatable(g, need).vote == Vote.REJECT:
            return False
        mark = stmt.mark()
        if place_group_tasks(ssn, stmt, g, tasks, mask, Placement.NOMINATE, node_set.label) is None:
            return True
        stmt.rollback(mark)
        return False

    for unit in units:
        live = [t for t in unit.tasks if t.held and not t.evicted]
        inside = [t for t in live if mask[t.node]]
        if not inside:
            continue
        for t in inside:
            room = room + t.req[used]
        pending.extend(live)  # the whole unit goes (job-level), wherever its pods run
        taken.append(unit)
        tried_all = False
        if not bool((room + _EPS >= need[used]).all()) or len(taken) < next_try:
            continue
        tried_all = True
        if attempt():
            success = True
            break
        next_try = 2 * len(taken)
    if not success and not tried_all and taken and bool((room + _EPS >= need[used]).all()):
        success = attempt()
    if not success:
        stmt.discard()
        return None
    # Keep only the victims that share a node with the placement; replay to confirm.
    used_nodes = {t.node for t in tasks}
    needed = [u for u in taken if any(t.node in used_nodes for t in u.tasks)]
    if len(needed) == len(taken):
        return taken, stmt
    stmt.discard()
    retry = Statement(state)
    for unit in needed:
        retry.evict_many(
            list(unit.tasks), reason, f"to make room for {g.pg.namespace}/{g.pg.name}", g.uid
        )
    if (
        ext.allocatable(g, need).vote != Vote.REJECT
        and place_group_tasks(ssn, retry, g, tasks, mask, Placement.NOMINATE, node_set.label)
        is None
    ):
        return needed, retry
    retry.discard()
    # Fall back to the full set, which is known to work.
    full = Statement(state)
    for unit in taken:
        full.evict_many(
            list(unit.tasks), reason, f"to make room for {g.pg.namespace}/{g.pg.name}", g.uid
        )
    if place_group_tasks(ssn, full, g, tasks, mask, Placement.NOMINATE, node_set.label) is None:
        return taken, full
    full.discard()
    return None


def _mark_delayed(ssn: Session, g: GroupInfo, victims: list[VictimUnit], grace: float) -> None:
    deadline = ssn.state.now + grace
    uids = tuple(dict.fromkeys(u.group.uid for u in victims))
    ssn.decisions.append(MarkPrivileged(g.uid, uids, deadline))
    for u in victims:
        u.group.preemption_done = True
        ssn.decisions.append(
            MarkWillEvict(u.group.uid, g.uid, deadline, tuple(t.task.uid for t in u.tasks))
        )
    g.preemption_done = True
    ssn.state.explain(
        g,
        Explanation(
            g.uid,
            ReasonCode.WAITING_FOR_VICTIMS,
            f"{len(uids)} job(s) of lower priority will be preempted after {grace:g} s "
            f"(deadline {deadline:g}): {', '.join(_names(victims))}",
        ),
    )


def _names(victims: list[VictimUnit]) -> list[str]:
    return [
        f"{u.group.pg.namespace}/{u.group.pg.name}" + (" (surplus)" if u.surplus else "")
        for u in victims
    ]


def describe_victims(victims: list[VictimUnit]) -> str:
    return ", ".join(_names(victims))
