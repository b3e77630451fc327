"""Jobs consolidation moved this session, and the check that their room is still there.

A consolidation plan evicts its movers and places them again only in simulation (their pods
are re-created by their job controller and placed by a later session). Within the session,
whatever commits after the plan - a later plan, preempt, reclaim, backfill's borrowing and
growth - must leave room for every one of them, or the move would lose a job
(``Session.moved``). The check costs one placement per moved job, and runs only in a session
that moved something. At the session's close the movers are placed once more on what it
committed (:func:`planned_nodes`): those nodes go into each mover's ``Evict.moved_to``, and
later sessions hold them for it until its re-created pods are placed (reservation.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from operators.scheduler.placement import place_group_tasks
from operators.scheduler.state import Placement
from operators.scheduler.statement import AllocateOp, Statement

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from operators.scheduler.context import Session
    from operators.scheduler.state import GroupInfo


TAKEN_BY_MOVED = "its room is planned for jobs moved by consolidation this cycle"


def leaves_room(ssn: Session, stmt: Statement, g: GroupInfo) -> bool:
    """Does what ``stmt`` places for ``g`` leave room for every job moved this session?"""
    return place_again(ssn, stmt, g, ssn.moved, nominated_nodes(ssn, stmt))


def mover_nodes(
    ssn: Session, g: GroupInfo | None, v: GroupInfo, mask: NDArray[np.bool_]
) -> NDArray[np.bool_]:
    """Nodes of ``mask`` job ``v``, moved for ``g``, may be placed on: nodes reserved for ``g``
    are open to its movers (the gang is placed first). ``g`` None (the session's close): the
    nodes of every gang's reservation are open (a plan placed its movers on its gang's)."""
    owner = ssn.reservations.owner
    held = owner >= 0 if g is None else owner == g.index
    return ssn.reservations.allowed(v, mask) | np.asarray(mask & held, dtype=np.bool_)


def nominated_nodes(ssn: Session, stmt: Statement) -> NDArray[np.bool_]:
    """Nodes with pods nominated this session (committed, or in ``stmt``): the next sessions
    hold each whole for its gang until it binds (Reservations.held_for), so no moved job may
    count on room there."""
    nominate = Placement.NOMINATE
    seen, committed = ssn.nominated or (0, np.zeros(ssn.state.nodes.size, dtype=np.bool_))
    for op in ssn.operations[seen:]:
        if isinstance(op, AllocateOp) and op.kind == nominate:
            committed[op.node] = True
    ssn.nominated = (len(ssn.operations), committed)
    out = committed.copy()
    for op in stmt.ops:
        if isinstance(op, AllocateOp) and op.kind == nominate:
            out[op.node] = True
    return out


def planned_nodes(ssn: Session) -> dict[str, tuple[tuple[str, int], ...]]:
    """Per job moved this session, the (node, pods) where it is placed again on top of all the
    session committed (off every node nominated this session); jobs that no longer fit (the
    commits after each plan check that they do) get none."""
    if not ssn.moved:
        return {}
    where: dict[str, list[int]] = {}
    stmt = Statement(ssn.state)
    closed = nominated_nodes(ssn, stmt)
    origins = [(t, t.node, t.gpu_ids) for v in ssn.moved for t in v.tasks if t.evicted]
    for v in sorted(ssn.moved, key=ssn.ext.job_key):
        place_again(ssn, stmt, None, [v], closed, where, keep=True)
    stmt.discard()
    for t, node, ids in origins:
        t.node, t.gpu_ids = node, ids
    names = ssn.state.nodes.names
    return {
        uid: tuple((names[n], nodes.count(n)) for n in sorted(set(nodes)))
        for uid, nodes in where.items()
    }


def place_again(
    ssn: Session,
    stmt: Statement,
    g: GroupInfo | None,
    moved: list[GroupInfo],
    closed: NDArray[np.bool_],
    where: dict[str, list[int]] | None = None,
    *,
    keep: bool = False,
) -> bool:
    """Can every job in ``moved`` (moved for ``g`` or earlier in the session) be placed again,
    off the ``closed`` nodes, on top of what ``stmt`` holds? Tried in the order allocate will
    try them (moved jobs first in line next session, then by their own rank), so the check
    makes the placements the next session will make; ``stmt`` is left as it was either way,
    unless ``keep`` (the caller discards it). ``where``: filled with each placed job's nodes."""
    state, ext = ssn.state, ssn.ext
    start = stmt.mark()
    # Rolling back a re-placement forgets where a task ran; the eviction record needs it.
    origins = [(t, t.node, t.gpu_ids) for v in moved for t in v.tasks if t.evicted]
    fits = True
    for v in sorted(moved, key=ext.job_key):
        again = [t for t in v.tasks if t.evicted and not t.held]
        placed = False
        for node_set in ext.candidate_sets(v, state.nodes.schedulable):
            mark = stmt.mark()
            allowed = mover_nodes(ssn, g, v, node_set.mask) & ~closed
            if place_group_tasks(ssn, stmt, v, again, allowed, Placement.BIND) is None:
                placed = True
                if where is not None:
                    where[v.uid] = [t.node for t in again]
                break
            stmt.rollback(mark)
        if not placed:
            fits = False
            break
    if keep:
        return fits
    stmt.rollback(start)
    for t, node, ids in origins:
        t.node, t.gpu_ids = node, ids
    return fits
