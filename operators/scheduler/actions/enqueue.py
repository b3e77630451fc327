"""enqueue: admit Pending groups (Pending -> Inqueue) whose gang minimum the plugins accept.

Queues take turns (the queue furthest below its share first), one group per turn in job order,
so one busy queue cannot starve the admission of others. Admission reserves the gang minimum
(quota plugin) until the gang is placed.

A gang (``minMember`` above one) refused only for lack of idle room (not by a capability) would wait at admission for ever
under a steady stream of small jobs: each hole is gone to a small job before the gang is even
admitted, so allocate never reserves nodes for it. So the highest-ranked such gang of each pool
(up to ``SessionConfig.max_reservations``, counting gangs admitted this way in earlier cycles
that still wait) is admitted anyway when its pool could hold it once drained; allocate then
reserves nodes for it and backfill keeps smaller work off them (reservation.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from operators.scheduler.actions.ordering import round_robin
from operators.scheduler.decisions import Explanation, ReasonCode, SetGroupPhase
from operators.scheduler.framework import Vote
from operators.scheduler.phases import GroupEvent, next_phase
from operators.scheduler.snapshot import GroupPhase

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from operators.scheduler.context import Session
    from operators.scheduler.framework import Verdict
    from operators.scheduler.state import GroupInfo


def run(ssn: Session) -> None:
    state, ext = ssn.state, ssn.ext
    phase = GroupPhase.PENDING  # bound once: a class's enum member is slow to read (state.py)
    pending = [g for g in state.groups if g.phase == phase]
    waiting = _waiting_for_room(ssn)
    for g in round_robin(ssn, pending):
        need = state.min_resources(g)
        verdict = ext.enqueueable(g, need)
        if verdict.vote == Vote.REJECT and not _admit_to_reserve(ssn, g, need, verdict, waiting):
            code = verdict.code or ReasonCode.NOT_ADMITTED
            state.explain(g, Explanation(g.uid, code, f"not admitted: {verdict.message}"))
            continue
        ext.enqueued(g, need)
        g.phase = next_phase(g.phase, GroupEvent.ADMITTED)
        g.admitted_now = True
        ssn.decisions.append(SetGroupPhase(g.uid, g.phase, "Admitted"))
        state.explain(
            g,
            Explanation(
                g.uid,
                ReasonCode.ADMITTED,
                f"admitted to queue {state.queue_name(g)!r}; reserved "
                f"{state.space.describe(need)} for the gang minimum",
            ),
        )


def _pool_room(ssn: Session, pool: int) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """(idle now, capacity) of the schedulable nodes of ``pool``."""
    state = ssn.state
    mask = (state.nodes.node_pool == pool) & state.nodes.schedulable
    idle = np.maximum(state.free[mask], 0.0).sum(axis=0)
    return idle, state.nodes.capacity[mask].sum(axis=0)


def _fits(need: NDArray[np.float64], room: NDArray[np.float64]) -> bool:
    used = need > 0
    return bool((need[used] <= room[used] + 1e-6).all())


def _waiting_for_room(ssn: Session) -> dict[int, int]:
    """Per pool: admitted gangs from earlier cycles that hold nothing yet and need more than the
    pool's idle room (the gangs a reservation is for). A job consolidation moved is not one:
    it was admitted long before, its room is held by the move (reservation.py), and it goes
    first in allocate."""
    state = ssn.state
    out: dict[int, int] = {}
    rooms: dict[int, NDArray[np.float64]] = {}
    inqueue = GroupPhase.INQUEUE  # bound once (see run)
    for g in state.groups:
        if g.phase != inqueue or g.gang_satisfied() or g.held_count or state.moved_recently(g):
            continue
        if g.pool not in rooms:
            rooms[g.pool] = _pool_room(ssn, g.pool)[0]
        if not _fits(state.min_resources(g), rooms[g.pool]):
            out[g.pool] = out.get(g.pool, 0) + 1
    return out


def _admit_to_reserve(
    ssn: Session, g: GroupInfo, need: NDArray[np.float64], verdict: Verdict, waiting: dict[int, int]
) -> bool:
    """Admit ``g`` although there is no idle room for it (see the module docstring)?"""
    if verdict.code is not ReasonCode.NOT_ADMITTED or ssn.config.max_reservations <= 0:
        return False
    if g.pg.min_member <= 1:
        # One-pod groups are not admitted past the room: one of them takes the next hole of
        # its size in turn, and admitting it early would only let reclaim act for it beyond
        # its queue's share.
        return False
    if waiting.get(g.pool, 0) >= ssn.config.max_reservations:
        return False
    idle, capacity = _pool_room(ssn, g.pool)
    if _fits(need, idle) or not _fits(need, capacity):
        return False  # refused for another reason, or it could never fit: nothing to reserve
    waiting[g.pool] = waiting.get(g.pool, 0) + 1
    return True
