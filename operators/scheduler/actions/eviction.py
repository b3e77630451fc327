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

import datetime
import math
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
from operators.scheduler.snapshot import TaskStatus
from operators.scheduler.state import Placement, complete_minimum
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


def _surplus(g: GroupInfo) -> list[TaskInfo]:
    """Running tasks above the gang minimum, in shrink order (the reverse of growth order).

    ``g.tasks`` is in growth order and the minimum is :func:`complete_minimum`'s; pods already
    terminating are neither part of the minimum nor surplus (they are going anyway).
    """
    live = [
        t
        for t in g.tasks
        if t.held
        and t.placed == Placement.NONE
        and not t.evicted
        and t.task.status != TaskStatus.RELEASING
    ]
    if len(live) <= g.pg.min_member and not g.role_min:
        return []
    keep = {id(t) for t in complete_minimum(g, live)[0]}
    return [t for t in reversed(live) if id(t) not in keep]


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
        kept = tree.allocated - tree.leaving
        over = set(np.flatnonzero((kept > tree.deserved + _EPS).any(axis=1)).tolist())
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
    # Pods already terminating are not taken again: their room is promised to whoever evicted
    # them (it frees by itself, and counting it twice would nominate two groups into it).
    running = [
        t
        for t in h.tasks
        if t.held
        and t.placed == Placement.NONE
        and not t.evicted
        and t.task.status != TaskStatus.RELEASING
    ]
    if not running:
        return []
    borrowed = any(state.is_borrowed(t) for t in running)
    # Surplus replicas go one at a time (shrink only as far as needed), in shrink order.
    units = [
        VictimUnit(h, (t,), surplus=True, borrowed=state.is_borrowed(t), order=i)
        for i, t in enumerate(_surplus(h))
    ]
    units.append(VictimUnit(h, tuple(running), surplus=False, borrowed=borrowed, order=len(units)))
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
    """Evict the fewest/cheapest eligible units so ``g``'s gang minimum fits, or nothing.

    ``only`` (a delayed preemption come due) limits the candidates to the groups marked then;
    every other rule is the same as when they were marked, so a mark is never followed by a
    decision taken under different rules.
    """
    state, ext, config = ssn.state, ssn.ext, ssn.config
    pending = ext.pending_in_order(g)
    tasks = ext.shortfall(g, pending)
    if not tasks:
        return RoomOutcome(False, [], message="no pods to place")
    need = np.sum([t.req for t in tasks], axis=0)
    if not ext.victims_possible(g, purpose):
        return RoomOutcome(False, [], message="no job may be preempted for it")
    # Marked victims may sit in any queue (a delayed reclaim marks other queues' jobs), so
    # look at exactly those groups.
    candidates = (
        victim_units(state, g, purpose)
        if only is None
        else [
            u
            for uid in sorted(set(only))
            if uid in state.group_by_uid
            for u in _cached_units(state, state.group_by_uid[uid])
        ]
    )
    units = [u for u in candidates if not u.group.preemption_done and ext.is_victim(g, u, purpose)]
    if not units:
        return RoomOutcome(False, [], message="no job may be preempted for it")
    units.sort(key=lambda u: ext.victim_key(g, u))
    if reason is None:
        reason = EvictReason.PREEMPTED if purpose is Purpose.PREEMPT else EvictReason.RECLAIMED
    node_sets: list[NodeSet] = list(ext.candidate_sets(g, state.nodes.schedulable))
    if purpose is Purpose.PREEMPT:
        node_sets = node_sets[:1]  # preemption stays inside the group's own pool
    considered = 0
    for node_set in node_sets:
        # The bound on victims (session time) applies to those that could help here, so
        # many that cannot (e.g. CPU pods for a GPU job) never hide one that can.
        helpful = _relevant(state, units, node_set.mask, need)[: config.max_victims_per_preemptor]
        considered = max(considered, len(helpful))
        if not helpful:
            continue
        chosen = _search(ssn, g, tasks, need, helpful, node_set, reason, purpose)
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
    if not considered:
        return RoomOutcome(False, [], message="no job that may be preempted holds what it lacks")
    return RoomOutcome(
        False,
        [],
        message=f"even preempting all {considered} eligible job(s) would not make it fit",
    )


def _relevant(
    state: SessionState,
    units: list[VictimUnit],
    mask: NDArray[np.bool_],
    need: NDArray[np.float64],
) -> list[VictimUnit]:
    """Units holding, on ``mask``, some of what the gang lacks there (every resource it asks
    for when the room adds up but is fragmented)."""
    room = np.maximum(state.free[mask], 0.0).sum(axis=0)
    short = need > room + _EPS
    if not short.any():
        short = need > 0
    helps: dict[int, bool] = {}  # per request vector: replicas of one shape share one
    out: list[VictimUnit] = []
    for u in units:
        for t in u.tasks:
            if not t.held or t.evicted or t.node < 0 or not mask[t.node]:
                continue
            found = helps.get(id(t.req))
            if found is None:
                found = helps[id(t.req)] = bool((t.req[short] > 0).any())
            if found:
                out.append(u)
                break
    return out


def _search(
    ssn: Session,
    g: GroupInfo,
    tasks: list[TaskInfo],
    need: NDArray[np.float64],
    units: list[VictimUnit],
    node_set: NodeSet,
    reason: EvictReason,
    purpose: Purpose,
) -> tuple[list[VictimUnit], Statement] | None:
    """The shortest prefix of ``units`` (as the budgets admit them) after whose eviction the
    gang fits on ``node_set``, minus units that share no node with the placement."""
    state, ext = ssn.state, ssn.ext
    mask = node_set.mask
    message = f"to make room for {g.pg.namespace}/{g.pg.name}"

    def attempt(prefix: list[VictimUnit]) -> Statement | None:
        stmt = Statement(state)
        for unit in prefix:
            stmt.evict_many(list(unit.tasks), reason, message, g.uid)
        if (
            ext.allocatable(g, need).vote != Vote.REJECT
            and place_group_tasks(ssn, stmt, g, tasks, mask, Placement.NOMINATE, node_set.label)
            is None
        ):
            return stmt
        stmt.discard()
        return None

    # Cheap necessary condition first: idle room on these nodes plus what the victims taken
    # so far hold there must cover the gang; placement is tried only once it does, after 1,
    # 2, 4, ... more victims and once with all of them (a bounded number of attempts); then
    # the shortest prefix that works is found by bisection.
    used = need > 0
    room = np.maximum(state.free[mask], 0.0).sum(axis=0)[used]
    enough: list[bool] = []  # per prefix length - 1: does the room add up?
    taken: list[VictimUnit] = []
    budgets = ext.budgets(g, purpose)
    failed = 0  # the longest prefix known not to work
    found = 0  # the shortest prefix known to work (0: none yet)
    next_try = 0
    for unit in units:
        inside = [t for t in unit.tasks if t.held and not t.evicted and mask[t.node]]
        if not inside or not all(b.admits(unit) for b in budgets):
            continue
        for b in budgets:
            b.take(unit)
        for t in inside:
            room = room + t.req[used]
        taken.append(unit)
        enough.append(bool((room + _EPS >= need[used]).all()))
        if not enough[-1] or len(taken) < next_try:
            continue
        stmt = attempt(taken)
        if stmt is not None:
            stmt.discard()
            found = len(taken)
            break
        failed = len(taken)
        next_try = 2 * len(taken)
    if not found and taken and enough[-1] and failed < len(taken):
        stmt = attempt(taken)
        if stmt is not None:
            stmt.discard()
            found = len(taken)
    if not found:
        return None
    while failed + 1 < found:
        mid = (failed + found) // 2
        trial = attempt(taken[:mid]) if enough[mid - 1] else None
        if trial is not None:
            trial.discard()
            found = mid
        else:
            failed = mid
    taken = taken[:found]
    best = attempt(taken)
    if best is None:
        return None
    # Keep only the victims that share a node with the placement; replay to confirm.
    used_nodes = {t.node for t in tasks}
    needed = [u for u in taken if any(t.node in used_nodes for t in u.tasks)]
    if len(needed) == len(taken):
        return taken, best
    best.discard()
    fewer = attempt(needed)
    if fewer is not None:
        return needed, fewer
    again = attempt(taken)
    return (taken, again) if again is not None else None


def _mark_delayed(ssn: Session, g: GroupInfo, victims: list[VictimUnit], grace: float) -> None:
    deadline = ssn.state.now + grace
    # One mark (one Event, one hook) per victim job, naming every pod of it that will go.
    going: dict[str, list[str]] = {}
    for u in victims:
        u.group.preemption_done = True
        going.setdefault(u.group.uid, []).extend(t.task.uid for t in u.tasks)
    uids = tuple(going)
    ssn.decisions.append(MarkPrivileged(g.uid, uids, deadline))
    for uid, pods in going.items():
        ssn.decisions.append(MarkWillEvict(uid, g.uid, deadline, tuple(dict.fromkeys(pods))))
    g.preemption_done = True
    ssn.state.explain(
        g,
        Explanation(
            g.uid,
            ReasonCode.WAITING_FOR_VICTIMS,
            f"{len(uids)} job(s) of lower priority will be preempted after {grace:g} s "
            f"(deadline {utc_text(deadline)}): {', '.join(_names(victims))}",
        ),
    )


def utc_text(seconds: float) -> str:
    """A Unix time as users read it in conditions (a conversion: no clock is read)."""
    if not math.isfinite(seconds) or not 0 <= seconds < 253402300800:
        return f"{seconds:g}"
    return datetime.datetime.fromtimestamp(seconds, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _names(victims: list[VictimUnit]) -> list[str]:
    return [
        f"{u.group.pg.namespace}/{u.group.pg.name}" + (" (surplus)" if u.surplus else "")
        for u in victims
    ]


def describe_victims(victims: list[VictimUnit]) -> str:
    return ", ".join(_names(victims))
