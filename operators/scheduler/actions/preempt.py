"""preempt: inside a queue and a pool, higher priority takes room from lower priority.

First, delayed preemptions already in flight are advanced (see :func:`advance_delayed`); then
every group that allocate could not place, in job order, may evict lower-priority jobs of its own
queue running in its own pool (elastic surplus before whole jobs), if its tenant may preempt.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from operators.scheduler.actions.eviction import describe_victims, make_room
from operators.scheduler.decisions import (
    EvictReason,
    Explanation,
    ReasonCode,
    RevertDelayedPreemption,
)
from operators.scheduler.framework import Purpose
from operators.scheduler.snapshot import GroupPhase, PreemptionRole

if TYPE_CHECKING:
    from operators.scheduler.context import Session
    from operators.scheduler.state import GroupInfo


def preemptors(ssn: Session) -> list[GroupInfo]:
    """Unplaced admitted groups that may try to make room (shared with reclaim)."""
    state = ssn.state
    groups = []
    for g in state.groups:
        if (
            not g.attempted
            or g.preemption_done
            or g.pg.preemption is not None
            or g.gang_satisfied()
            or g.phase == GroupPhase.PENDING
        ):
            continue
        waiting = state.awaiting_victims(g)
        if waiting:
            g.preemption_done = True
            state.explain(
                g,
                Explanation(
                    g.uid,
                    ReasonCode.PREEMPTING,
                    f"room is being freed for it: waiting for {waiting} evicted pod(s) to exit",
                ),
            )
            continue
        groups.append(g)
    groups.sort(key=ssn.ext.job_key)
    return groups[: ssn.config.max_preemptors]


def run(ssn: Session) -> None:
    # Groups allocate placed need their holds no more: their room is no one else's to keep.
    ssn.reservations.release_placed()
    advance_delayed(ssn)
    for g in preemptors(ssn):
        attempt(ssn, g, Purpose.PREEMPT)


def attempt(ssn: Session, g: GroupInfo, purpose: Purpose) -> None:
    outcome = make_room(ssn, g, purpose)
    state = ssn.state
    if outcome.placed and not outcome.delayed:
        verb = "preempting" if purpose is Purpose.PREEMPT else "reclaiming from"
        state.explain(
            g,
            Explanation(
                g.uid,
                ReasonCode.PREEMPTING,
                f"{verb} {describe_victims(outcome.victims)}; pods nominated until they exit",
            ),
        )
    elif not outcome.placed:
        old = state.explanation(g.uid)
        base = old.message if old is not None else "does not fit"
        code = old.code if old is not None else ReasonCode.UNSCHEDULABLE
        label = "preemption" if purpose is Purpose.PREEMPT else "reclaim"
        if outcome.message and label not in base:
            state.explain(g, Explanation(g.uid, code, f"{base}; {label}: {outcome.message}"))


def advance_delayed(ssn: Session) -> None:
    """Carry delayed preemptions forward: revert, keep waiting, or evict at the deadline."""
    state = ssn.state
    reverted: set[str] = set()

    def revert(uids: list[str], why: str) -> None:
        fresh = [u for u in uids if u not in reverted]
        if fresh:
            reverted.update(fresh)
            ssn.decisions.append(RevertDelayedPreemption(tuple(fresh), why))

    for g in state.groups:
        mark = g.pg.preemption
        if mark is None:
            continue
        if mark.role == PreemptionRole.WILL_EVICT:
            preemptor = state.group_by_uid.get(mark.peers[0]) if mark.peers else None
            if preemptor is None or preemptor.pg.preemption is None:
                revert([g.uid], "the preemptor is gone")
            continue
        victims = [uid for uid in mark.peers if uid in state.group_by_uid]
        g.preemption_done = True
        if g.gang_satisfied():
            revert([g.uid, *victims], "capacity freed up: no preemption needed")
            continue
        if not victims:
            revert([g.uid], "the victims are gone")
            continue
        if state.now < mark.deadline:
            state.explain(
                g,
                Explanation(
                    g.uid,
                    ReasonCode.WAITING_FOR_VICTIMS,
                    f"waiting {math.ceil(mark.deadline - state.now)} s more for {len(victims)} job(s) "
                    "to checkpoint before they are preempted",
                ),
            )
            continue
        # The marks do not say whether preempt or reclaim made them: ask both, in session
        # order, under the rules that made the marks.
        for purpose in (Purpose.PREEMPT, Purpose.RECLAIM):
            outcome = make_room(
                ssn,
                g,
                purpose,
                only=victims,
                allow_delay=False,
                reason=EvictReason.DELAYED_PREEMPTION_DUE,
            )
            if outcome.placed:
                break
        revert(
            [g.uid, *victims], "deadline reached" if outcome.placed else "it would no longer fit"
        )
        if outcome.placed:
            state.explain(
                g,
                Explanation(
                    g.uid,
                    ReasonCode.PREEMPTING,
                    f"grace period over: evicting {describe_victims(outcome.victims)}",
                ),
            )
