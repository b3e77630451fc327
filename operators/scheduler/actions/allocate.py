"""allocate: place each admitted group's gang minimum, whole or not at all.

Two passes over the queues (round robin, job order inside a queue):

1. ``share``: a group may only take room that keeps its queue chain within deserved shares;
2. ``borrow``: groups refused only by that rule may borrow idle room up to capability.

For each group: pick the pending tasks that complete the gang (gang plugin), check quota
(allocatable), then try its node sets in order (own pool, then lenders), each inside a fresh
statement that is committed only if the gang is ready, discarded otherwise.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from operators.scheduler.actions.movers import TAKEN_BY_MOVED, leaves_room
from operators.scheduler.actions.ordering import round_robin
from operators.scheduler.decisions import Explanation, ReasonCode
from operators.scheduler.framework import AllocatePass, Vote
from operators.scheduler.placement import (
    PlaceFailure,
    by_shape,
    place_group_tasks,
    topology_request,
)
from operators.scheduler.session import ActionName
from operators.scheduler.snapshot import GroupPhase
from operators.scheduler.state import Placement
from operators.scheduler.statement import Statement

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from operators.scheduler.context import Session
    from operators.scheduler.state import GroupInfo, SessionState, TaskInfo

_ADMITTED = (GroupPhase.INQUEUE, GroupPhase.RUNNING, GroupPhase.UNKNOWN)


def candidates(ssn: Session) -> list[GroupInfo]:
    admitted: tuple[GroupPhase, ...] = _ADMITTED
    if ActionName.ENQUEUE not in ssn.config.actions:
        admitted = (*_ADMITTED, GroupPhase.PENDING)
    return [
        g
        for g in ssn.state.groups
        if g.phase in admitted
        # Pending tasks first: a running group without any is answered without a call.
        and g.pending_status
        and g.pending_tasks()
        and not g.gang_satisfied()
        and not ssn.state.backing_off(g)
    ]


def run(ssn: Session) -> None:
    explain_backoffs(ssn)
    groups = candidates(ssn)
    # Jobs consolidation moved go first, whatever their queue: the plan that moved them
    # counted on room for them, which work that arrived since must not take.
    moved_recently = ssn.state.moved_recently
    moved = [g for g in groups if moved_recently(g)]
    if moved:
        _passes(ssn, moved)
        groups = [g for g in groups if not moved_recently(g)]
    _passes(ssn, groups)


def _passes(ssn: Session, groups: list[GroupInfo]) -> None:
    # A queue at its deserved share waits for the borrow pass as a whole.
    memo = FailureMemo.open(ssn)
    retry = [
        g
        for g in round_robin(ssn, groups)
        if ssn.ext.overused(g.queue)
        or allocate_group(ssn, g, AllocatePass.SHARE, memo=memo) == "share"
    ]
    memo = FailureMemo.open(ssn)
    for g in round_robin(ssn, retry):
        allocate_group(ssn, g, AllocatePass.BORROW, memo=memo)


def explain_backoffs(ssn: Session) -> None:
    """Groups whose Binding the API keeps rejecting (or the bind-time re-check keeps withdrawing)
    wait out their backoff holding no room, so they never take a cycle's room from groups that
    can bind."""
    state = ssn.state
    for g in state.groups:
        if state.backing_off(g) and g.pending_tasks():
            state.explain(
                g,
                Explanation(
                    g.uid,
                    ReasonCode.BINDING_REJECTED,
                    f"its binding failed: {g.pg.binding_error or 'no message'}"
                    f"; tried again in {math.ceil(g.pg.retry_binding_at - state.now)} s",
                ),
            )


class FailureMemo:
    """Placement failures of one pass, by equivalence key (SessionConfig.equivalence_cache).

    Within one pass of allocate (or of backfill's borrowing) room is only ever taken: committed
    placements consume it, a discarded statement gives back only what it took itself, and
    nothing is evicted. So once a group failed to fit in every node set it may use, a later
    group that asks for the same thing (same pool, topology request and per-task shapes), under
    the same reservations, fails the same way: its placement is skipped and it shares the first
    group's failures, so their text is built once (its counts are those of the first failure;
    the room can only have shrunk since). Quota is still checked per group (it depends on the
    queue). A new memo is opened for every pass, i.e. after anything that may free room.
    """

    __slots__ = ("failures",)

    def __init__(self) -> None:
        self.failures: dict[tuple[object, ...], list[tuple[str, PlaceFailure]]] = {}

    @staticmethod
    def open(ssn: Session) -> FailureMemo | None:
        return FailureMemo() if ssn.config.equivalence_cache else None

    @staticmethod
    def key(ssn: Session, g: GroupInfo, tasks: list[TaskInfo]) -> tuple[object, ...] | None:
        """What the outcome of placing ``tasks`` for ``g`` depends on, or None when it depends
        on the group itself (its own reservation, pods already placed or nominated: held room,
        a hard-topology domain, the nomination bonus)."""
        if ssn.reservations.items and ssn.reservations.of(g) is not None:
            return None
        if g.index in ssn.reservations.held_for:
            return None  # a moved job's held room
        for t in g.tasks:
            if t.node >= 0 or t.nominated >= 0 or t.placed != Placement.NONE:
                return None
        pg = g.pg
        return (
            g.pool,
            pg.preemptible,  # a non-preemptible group tries its own pool only
            ssn.reservations.version,
            topology_request(ssn.state, g),  # as in force now (soft_after may have passed)
            pg.unit_tier,
            tuple((t.shape, t.pool, t.task.role, t.task.unit) for t in tasks),
        )


def _total(tasks: list[TaskInfo]) -> NDArray[np.float64]:
    first = tasks[0].req
    if all(t.req is first for t in tasks):  # replicas of one shape share one vector
        return first * len(tasks)
    return np.asarray(np.sum([t.req for t in tasks], axis=0), dtype=np.float64)


def _reserve_if_short(ssn: Session, g: GroupInfo, tasks: list[TaskInfo]) -> None:
    """Reserve nodes for ``g`` if its own pool cannot hold ``tasks`` now (fit counts only:
    cheap, and a group that might fit is simply tried again in the borrow pass)."""
    if not tasks or ssn.reservations.full(g.pool):
        return
    own = next(ssn.ext.candidate_sets(g, ssn.state.nodes.schedulable), None)
    if own is None:
        return
    mask = ssn.reservations.allowed(g, own.mask)
    for shape_tasks in by_shape(tasks):
        t = shape_tasks[0]
        counts = ssn.views.get(t).counts * ssn.views.allowed(t, mask, ssn.ext.feasible)
        if counts.sum() < len(shape_tasks):
            ssn.reservations.reserve(g, tasks, own.mask)
            return


def _explain_kept_home(state: SessionState, g: GroupInfo) -> None:
    """The own pool is full and may not borrow: say so, or the user hunts for idle room
    elsewhere that the job may never use."""
    old = state.explanation(g.uid)
    text = (
        f"pool {state.nodes.pool_names[g.pool]!r} disables borrowing: "
        "it waits for room in its own pool"
    )
    message = f"{old.message}; {text}" if old is not None else text
    state.explain(g, Explanation(g.uid, ReasonCode.POOL_BORROWING_DISABLED, message))


def allocate_group(
    ssn: Session,
    g: GroupInfo,
    phase: AllocatePass,
    *,
    borrow: bool = False,
    memo: FailureMemo | None = None,
) -> str:
    """Try to place ``g``'s gang minimum. Returns "placed", "share" (refused by the share
    rule only, worth a borrow pass) or "failed". ``memo`` (one per pass, see FailureMemo)
    skips placing groups equivalent to one that already failed in the pass."""
    state, ext = ssn.state, ssn.ext
    pending = ext.pending_in_order(g)
    tasks = ext.shortfall(g, pending)
    if tasks is None:
        have = len(g.tasks)
        state.explain(
            g,
            Explanation(
                g.uid,
                ReasonCode.GANG_INCOMPLETE,
                f"{have} pod(s) exist, the gang needs {g.pg.min_member}"
                + (f" with per-task minimums {dict(g.role_min)}" if g.role_min else ""),
            ),
        )
        return "failed"
    need = _total(tasks) if tasks else state.space.zeros()
    verdict = ext.allocatable(g, need, phase)
    if verdict.vote == Vote.REJECT:
        if phase is AllocatePass.SHARE and ext.allocatable(g, need).vote != Vote.REJECT:
            # It waits for the borrow pass, but lower-ranked groups are placed before that:
            # if it could not fit now anyway, reserve its nodes already at its rank.
            _reserve_if_short(ssn, g, tasks)
            return "share"
        g.attempted = True
        state.explain(
            g, Explanation(g.uid, verdict.code or ReasonCode.QUOTA_EXCEEDED, verdict.message)
        )
        return "failed"
    failures: list[tuple[str, PlaceFailure]] = []
    sets = ext.candidate_sets(g, state.nodes.schedulable)
    own_mask = state.nodes.schedulable
    if borrow:
        next(sets, None)  # the own pool was tried by allocate already
    else:
        # DESIGN: on shortage, preempt inside the own pool first; borrowing comes after
        # preempt and reclaim (backfill's first step) for groups they could not help.
        own = next(sets, None)
        tried = [own] if own is not None else []
        # Room a reclaim nominated for it in a lender pool is taken now, before preempt and
        # reclaim run: otherwise reclaim, seeing it unplaced, evicts a second victim for it.
        held = ssn.reservations.held_for.get(g.index)
        if held:
            tried.extend(s for s in sets if s.mask[held].any())
        sets = iter(tried)
        own_mask = own.mask if own is not None else own_mask
    key = FailureMemo.key(ssn, g, tasks) if memo is not None else None
    known = memo.failures.get(key) if memo is not None and key is not None else None
    if known is not None:
        failures = known
        sets = iter(())  # every set failed for an equivalent group: it fails here too
    complete = True  # every set tried failed to place (none was merely "not ready")
    for node_set in sets:
        stmt = Statement(state)
        mask = ssn.reservations.allowed(g, node_set.mask)
        failure = place_group_tasks(ssn, stmt, g, tasks, mask, Placement.BIND, node_set.label)
        if failure is None and ssn.moved and not leaves_room(ssn, stmt, g):
            # Only once consolidation has run: backfill borrowing for a group.
            failure = PlaceFailure(ReasonCode.UNSCHEDULABLE, TAKEN_BY_MOVED)
        if failure is None and ext.ready(g):
            ssn.commit(stmt)
            ext.placed(g)
            if g.index in ssn.reservations.held_for:
                ssn.reservations.release_placed()  # its held room is others' again at once
            where = f" (borrowing {node_set.label})" if node_set.borrowed else ""
            state.explain(
                g,
                Explanation(
                    g.uid, ReasonCode.SCHEDULED, f"gang of {len(tasks)} pod(s) placed{where}"
                ),
            )
            return "placed"
        stmt.discard()
        if failure is not None:
            failures.append((node_set.label, failure))
        else:
            complete = False
    if memo is not None and key is not None and known is None and complete:
        memo.failures[key] = failures
    g.attempted = True
    if not borrow:
        g.borrow_later = True
        if failures:
            # Does not fit in its own pool now: hold nodes there, so lower-ranked work that
            # comes after it cannot keep taking the room it waits for.
            ssn.reservations.reserve(g, tasks, own_mask)
    if borrow and not failures:
        if state.nodes.pools[g.pool].disable_borrowing:
            _explain_kept_home(state, g)
        return "failed"  # no lender could be tried: keep the own-pool explanation
    old = state.explanation(g.uid) if borrow else None
    code = failures[0][1].code if failures else ReasonCode.UNSCHEDULABLE

    def message() -> str:
        # Built only if read: most failures are retried elsewhere and never shown.
        parts = [f"in {label}: {failure.message}" for label, failure in failures]
        text = "; ".join(parts) if parts else "gang not ready"
        return f"{old.message}; {text}" if old is not None else text

    state.explain_lazy(g, code, message)
    return "failed"
