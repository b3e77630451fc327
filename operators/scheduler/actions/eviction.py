"""Making room for a group by evicting whole jobs (or elastic surplus): shared by preempt and
reclaim.

Victim units are proposed by :func:`victim_units`, filtered and ordered by the plugins (the order
is kept per scope across preemptors, see :class:`VictimOrder`; the filter is asked lazily, in
that order, only as far as the search needs). Units are evicted one at a time inside a statement; after each, if the freed room could plausibly hold the
gang, placement is tried (kind NOMINATE). The first success stops the search; units that did not
touch the nodes used are then put back, so only the needed jobs go. If every candidate is evicted
and the gang still does not fit, everything is discarded: nobody is evicted for a job that would
not fit anyway. Delayed preemption turns a success into marks instead of evictions.
"""

from __future__ import annotations

import datetime
import math
from bisect import bisect_left
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from operators.scheduler.actions.movers import TAKEN_BY_MOVED, leaves_room
from operators.scheduler.decisions import (
    EvictReason,
    Explanation,
    MarkPrivileged,
    MarkWillEvict,
    ReasonCode,
)
from operators.scheduler.framework import Purpose, VictimUnit, Vote
from operators.scheduler.placement import place_group_tasks
from operators.scheduler.snapshot import PreemptionRole, TaskStatus
from operators.scheduler.state import Placement, complete_minimum
from operators.scheduler.statement import Statement

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator

    from numpy.typing import NDArray

    from operators.scheduler.context import Session
    from operators.scheduler.framework import Extensions, NodeSet
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
    for h in _candidate_groups(state, preemptor, purpose):
        if h is preemptor or h.held_count <= 0:
            continue
        out.extend(_cached_units(state, h))
    return out


@dataclass(slots=True)
class VictimOrder:
    """Every candidate unit of one scope (preempt: one queue; reclaim: the queues above their
    share and the borrowers), sorted by victim key, for every preemptor of the session.

    Victim keys read the unit, its group and its own queue's usage and share, never the
    preemptor (framework.py), so one order serves every preemptor and is only patched where
    something changed: the groups whose units changed (their holdings moved: read from the
    session's log of moved groups, ``SessionState.moved_holdings``, and checked by ``changes``; a victim
    search's discarded attempts move holdings and put them back, which changes no unit) and
    the groups of queues whose usage or share changed (re-keyed; for reclaim these may also
    enter or leave the scope).
    """

    allocated: NDArray[np.float64]  # queue usage and shares the keys were taken under
    leaving: NDArray[np.float64]
    deserved: NDArray[np.float64]
    over: set[int]  # reclaim: the queues above their share then
    moves: int  # len(state.moved_holdings) when last checked
    # Each group of the scope holding something (by id()): its ``changes`` and units then.
    groups: dict[int, tuple[GroupInfo, int, list[VictimUnit]]] = field(default_factory=dict)
    # The order: keys (unique: they end in group uid and unit order) and units, in step.
    keys: list[tuple[object, ...]] = field(default_factory=list)
    units: list[VictimUnit] = field(default_factory=list)
    entries_of: dict[int, list[tuple[tuple[object, ...], VictimUnit]]] = field(default_factory=dict)

    def track(self, state: SessionState, h: GroupInfo) -> None:
        self.groups[id(h)] = (h, h.changes, _cached_units(state, h))

    def refresh(self, state: SessionState, ext: Extensions, purpose: Purpose) -> None:
        """Patch the order to the state now. Membership follows :func:`_candidate_groups`:
        a group outside the scope that starts holding something this session holds only
        what it was placed on now, so it has no units (:func:`_units_of`) either way."""
        tree, groups = state.queues, self.groups
        usage = (tree.allocated != self.allocated).any(axis=1) | (
            tree.deserved != self.deserved
        ).any(axis=1)
        rekey = np.flatnonzero(usage).tolist()
        moved = np.flatnonzero(usage | (tree.leaving != self.leaving).any(axis=1)).tolist()
        if moved:
            self.allocated, self.leaving = tree.allocated.copy(), tree.leaving.copy()
            self.deserved = tree.deserved.copy()
        dirty: set[int] = set()  # groups whose entries are redone
        # Groups whose holdings moved since the last check (every move is logged).
        changed = {id(h) for h in state.moved_holdings[self.moves :]}
        self.moves = len(state.moved_holdings)
        for key in changed:
            found = groups.get(key)
            if found is None or found[0].changes == found[1]:
                continue
            h, _, units = found
            now = _cached_units(state, h) if h.held_count > 0 else []
            if _same_units(now, units):
                groups[key] = (h, h.changes, units)
            else:
                self.track(state, h)
                dirty.add(key)
        if purpose is Purpose.RECLAIM:
            over = _over(state) if moved else self.over
            for q in over - self.over:
                for h in state.groups_by_queue.get(q, []):
                    if id(h) not in groups and h.held_count > 0:
                        self.track(state, h)
                        dirty.add(id(h))
            self.over = over
            # Left the scope: a queue back within its share (its usage or share moved), a
            # borrower no more (its holdings moved).
            for key in changed.union(
                id(h) for q in moved if q not in over for h in state.groups_by_queue.get(q, [])
            ):
                found = groups.get(key)
                if (
                    found is not None
                    and found[0].queue not in over
                    and found[0].borrowed_count <= 0
                ):
                    del groups[key]
                    dirty.add(key)
        # Keys read the group's own queue's usage and share (``allocated``, ``deserved``):
        # re-key where those moved.
        dirty.update(
            id(h) for q in rekey for h in state.groups_by_queue.get(q, []) if id(h) in groups
        )
        for key in dirty:
            self.place(ext, key)

    def place(self, ext: Extensions, key: int) -> None:
        """(Re)insert one group's units at their keys' positions (bisection)."""
        keys, units = self.keys, self.units
        for old, unit in self.entries_of.pop(key, []):
            i = bisect_left(keys, old)
            while units[i] is not unit:
                i += 1
            del keys[i], units[i]
        found = self.groups.get(key)
        if found is None:
            return
        entries = [(ext.victim_key(u), u) for u in found[2]]
        for new, unit in entries:
            i = bisect_left(keys, new)
            keys.insert(i, new)
            units.insert(i, unit)
        self.entries_of[key] = entries


def _same_units(a: list[VictimUnit], b: list[VictimUnit]) -> bool:
    """Same units by identity of what they hold (rebuilt units are new objects)."""
    return len(a) == len(b) and all(
        u.group is v.group
        and u.surplus == v.surplus
        and u.borrowed == v.borrowed
        and u.order == v.order
        and len(u.tasks) == len(v.tasks)
        and all(x is y for x, y in zip(u.tasks, v.tasks, strict=True))
        for u, v in zip(a, b, strict=True)
    )


def ordered_candidates(
    state: SessionState, ext: Extensions, preemptor: GroupInfo, purpose: Purpose
) -> list[VictimUnit]:
    """``victim_units`` sorted by victim key (the preemptor's own units included: callers skip
    them), kept across preemptors and patched where something changed (:class:`VictimOrder`)."""
    scope = (purpose, preemptor.queue if purpose is Purpose.PREEMPT else 0)
    order = state.victim_orders.get(scope)
    if order is not None:
        order.refresh(state, ext, purpose)
        return order.units
    tree = state.queues
    order = VictimOrder(
        tree.allocated.copy(),
        tree.leaving.copy(),
        tree.deserved.copy(),
        _over(state),
        len(state.moved_holdings),
    )
    for h in _candidate_groups(state, preemptor, purpose):
        if h.held_count > 0:
            order.track(state, h)
    entries = [
        (ext.victim_key(u), u, key) for key, (_, _, units) in order.groups.items() for u in units
    ]
    entries.sort(key=_first)
    order.keys = [k for k, _, _ in entries]
    order.units = [u for _, u, _ in entries]
    for k, u, key in entries:
        order.entries_of.setdefault(key, []).append((k, u))
    state.victim_orders[scope] = order
    return order.units


def _first(entry: tuple[tuple[object, ...], VictimUnit, int]) -> tuple[object, ...]:
    return entry[0]


def _candidate_groups(
    state: SessionState, preemptor: GroupInfo, purpose: Purpose
) -> list[GroupInfo]:
    if purpose is Purpose.PREEMPT:
        return state.groups_by_queue.get(preemptor.queue, [])
    # Reclaim can only take from queues above their share or overcommitted, or borrowers.
    over = _over(state)
    groups: list[GroupInfo] = []
    for q in over:
        groups.extend(state.groups_by_queue.get(q, []))
    groups.extend(g for g in _borrowers(state) if g.queue not in over)
    return groups


def _over(state: SessionState) -> set[int]:
    """Queues that keep more than their share (terminating pods are not kept)."""
    tree = state.queues
    kept = tree.allocated - tree.leaving
    return set(np.flatnonzero((kept > tree.deserved + _EPS).any(axis=1)).tolist())


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


def _no_victims(state: SessionState) -> set[tuple[object, ...]]:
    """Preemptor keys that found no eligible victim while holdings stayed as they are now."""
    version, keys = state.no_victims
    if version != len(state.touched):
        keys = set()
        state.no_victims = (len(state.touched), keys)
    return keys


def _no_victims_key(
    state: SessionState, g: GroupInfo, purpose: Purpose
) -> tuple[object, ...] | None:
    """What "has ``g`` any eligible victim" reads of ``g``, or None when it reads ``g`` itself.

    The victim filters and prechecks read the preemptor's queue, pool, priority, tenant right to
    preempt, overcommit flag and gang minimum (quota, pool, priority plugins); everything else
    they read is session state that only moves with holdings (``touched``) or, like
    ``preemption_done``, only ever turns units ineligible. So a group equivalent to one that
    found no victim finds none either. Not for a group holding something (its own units are
    skipped) or one named by a WillEvict mark (that victim is eligible for it alone).
    """
    if g.held_count > 0 or not state.config.victim_order_cache:
        return None
    named = state.mark_named
    if named is None:
        named = state.mark_named = {
            m.peers[0]
            for h in state.groups
            if (m := h.pg.preemption) is not None
            and m.role == PreemptionRole.WILL_EVICT
            and m.peers
        }
    if g.uid in named:
        return None
    pg = g.pg
    need = state.min_resources(g).tobytes()
    return (purpose, g.queue, g.pool, g.priority, g.can_preempt, pg.overcommit, need)


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
    memo_key = _no_victims_key(state, g, purpose) if only is None else None
    if memo_key is not None and memo_key in _no_victims(state):
        return RoomOutcome(False, [], message="no job may be preempted for it")
    # Candidates in victim order; whether each is a victim for ``g`` is asked once, when a
    # search first reaches it (the answer does not depend on when: searches put back what
    # they try).
    ordered: list[VictimUnit]
    if only is not None:
        # Marked victims may sit in any queue (a delayed reclaim marks other queues' jobs), so
        # look at exactly those groups.
        ordered = [
            u
            for uid in sorted(set(only))
            if uid in state.group_by_uid
            for u in _cached_units(state, state.group_by_uid[uid])
        ]
        ordered.sort(key=ext.victim_key)
    elif config.victim_order_cache:
        ordered = ordered_candidates(state, ext, g, purpose)
    else:  # the straightforward way, kept to check the cached order against (tests, bench)
        ordered = sorted(victim_units(state, g, purpose), key=ext.victim_key)
    answers: dict[int, bool] = {}

    def eligible(u: VictimUnit) -> bool:
        found = answers.get(id(u))
        if found is None:
            found = answers[id(u)] = (
                u.group is not g and not u.group.preemption_done and ext.is_victim(g, u, purpose)
            )
        return found

    if not any(eligible(u) for u in ordered):
        if memo_key is not None:
            _no_victims(state).add(memo_key)
        return RoomOutcome(False, [], message="no job may be preempted for it")
    if reason is None:
        reason = EvictReason.PREEMPTED if purpose is Purpose.PREEMPT else EvictReason.RECLAIMED
    node_sets: list[NodeSet] = list(ext.candidate_sets(g, state.nodes.schedulable))
    if purpose is Purpose.PREEMPT:
        node_sets = node_sets[:1]  # preemption stays inside the group's own pool
    considered = 0
    displaced = False
    for node_set in node_sets:
        # The bound on victims (session time) applies to those that could help here, so
        # many that cannot (e.g. CPU pods for a GPU job) never hide one that can.
        helpful = _Relevant(
            state, ordered, eligible, node_set.mask, need, config.max_victims_per_preemptor
        )
        if helpful.empty():
            continue
        chosen = _search(ssn, g, tasks, need, helpful, node_set, reason, purpose)
        if chosen is None:
            for _ in helpful:  # the message counts every helpful unit, read or not
                pass
            considered = max(considered, helpful.count)
            continue
        victims, stmt = chosen
        if ssn.moved and not leaves_room(ssn, stmt, g):
            # The room it would take is where consolidation planned a job it moved this
            # session: taking it would lose that job.
            stmt.discard()
            displaced = True
            continue
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
    if displaced:
        return RoomOutcome(False, [], message=TAKEN_BY_MOVED)
    if not considered:
        return RoomOutcome(False, [], message="no job that may be preempted holds what it lacks")
    return RoomOutcome(
        False,
        [],
        message=f"even preempting all {considered} eligible job(s) would not make it fit",
    )


class _Relevant:
    """The first ``limit`` eligible units holding, on ``mask``, some of what the gang lacks
    there (every resource it asks for when the room adds up but is fragmented), in order.

    Lazy: a search usually stops at its first few units, so the victim filters are asked only
    as far as it reads (answers do not depend on when: a search puts back what it tries before
    reading on). ``count`` is how many were handed out so far.
    """

    __slots__ = ("_eligible", "_helps", "_it", "_limit", "_mask", "_next", "_short", "count")

    def __init__(
        self,
        state: SessionState,
        units: list[VictimUnit],
        eligible: Callable[[VictimUnit], bool],
        mask: NDArray[np.bool_],
        need: NDArray[np.float64],
        limit: int,
    ) -> None:
        room = np.maximum(state.free[mask], 0.0).sum(axis=0)
        short = need > room + _EPS
        self._short = short if short.any() else need > 0
        self._helps: dict[int, bool] = {}  # per request vector: replicas of one shape share one
        self._eligible, self._mask, self._limit = eligible, mask, limit
        self._it = iter(units)
        self._next: VictimUnit | None = None
        self.count = 0

    def _find(self) -> VictimUnit | None:
        if self.count >= self._limit:
            return None
        helps, short, mask = self._helps, self._short, self._mask
        for u in self._it:
            for t in u.tasks:
                if not t.held or t.evicted or t.node < 0 or not mask[t.node]:
                    continue
                found = helps.get(id(t.req))
                if found is None:
                    found = helps[id(t.req)] = bool((t.req[short] > 0).any())
                if found:
                    if self._eligible(u):
                        return u
                    break
        return None

    def empty(self) -> bool:
        if self._next is None:
            self._next = self._find()
        return self._next is None

    def __iter__(self) -> Iterator[VictimUnit]:
        while not self.empty():
            unit, self._next = self._next, None
            assert unit is not None
            self.count += 1
            yield unit


def _search(
    ssn: Session,
    g: GroupInfo,
    tasks: list[TaskInfo],
    need: NDArray[np.float64],
    units: Iterable[VictimUnit],
    node_set: NodeSet,
    reason: EvictReason,
    purpose: Purpose,
) -> tuple[list[VictimUnit], Statement] | None:
    """The shortest prefix of ``units`` (as the budgets admit them) after whose eviction the
    gang fits on ``node_set``, minus units that share no node with the placement."""
    state, ext = ssn.state, ssn.ext
    # Room an earlier session planned a moved job into is that job's: a preemptor placed there
    # would leave it without the place its move counted on.
    mask = ssn.reservations.unheld(g, node_set.mask)
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
