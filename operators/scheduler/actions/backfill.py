"""backfill: fill what is still idle, after every reserved placement of the session.

1. borrowing: groups whose own pool was full, and that neither preempt nor reclaim helped,
   try the pools they may borrow from (DESIGN: preempt inside the own pool first, then borrow);
2. growth: groups whose gang is already satisfied grow into idle room, one pod at a time.

Growth is where elastic groups grow from min toward max (higher replica priority first) and where
a plain group's pods beyond ``minMember`` land. It runs last, on what is idle after every gang
minimum, nomination and reservation of this session has been placed, so it never delays reserved
work. A group stops growing at its first pod that does not fit (keeps replica priority order).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from operators.scheduler.actions.allocate import FailureMemo, allocate_group
from operators.scheduler.actions.movers import leaves_room
from operators.scheduler.actions.ordering import round_robin
from operators.scheduler.decisions import Explanation, ReasonCode
from operators.scheduler.framework import AllocatePass, NodeSet, Verdict, Vote
from operators.scheduler.placement import place_group_tasks, topology_request
from operators.scheduler.snapshot import GroupPhase, TopologyMode
from operators.scheduler.state import Placement
from operators.scheduler.statement import Statement

if TYPE_CHECKING:
    from operators.scheduler.context import Session
    from operators.scheduler.state import GroupInfo


def _domain_mask(ssn: Session, g: GroupInfo, base: NodeSet) -> NodeSet:
    """Hard-topology groups grow only inside the domain they already occupy."""
    state = ssn.state
    request = topology_request(state, g)
    topo = state.nodes.topology
    if request is None or request.mode != TopologyMode.HARD or topo is None:
        return base
    level = topo.level_index(request.highest_tier) if request.highest_tier else 0
    held = [t for t in g.tasks if t.held and t.node >= 0]
    if level is None or not held or not state.nodes.tier_domains:
        return base
    domains = state.nodes.tier_domains[level]
    return NodeSet(base.label, base.mask & (domains == domains[held[0].node]), base.borrowed)


def borrow(ssn: Session) -> None:
    """Groups whose own pool is full and that no preemption helped may borrow idle room."""
    waiting = [
        g
        for g in ssn.state.groups
        if g.borrow_later and not g.preemption_done and not g.gang_satisfied()
    ]
    # Preempt and reclaim may have freed room since allocate: a fresh memo for this pass.
    memo = FailureMemo.open(ssn)
    for g in round_robin(ssn, waiting):
        allocate_group(ssn, g, AllocatePass.BORROW, borrow=True, memo=memo)


def run(ssn: Session) -> None:
    # A reserving gang that preempt or reclaim placed (or nominated) needs its hold no more.
    ssn.reservations.release_placed()
    borrow(ssn)
    ssn.reservations.release_placed()  # ... or that found room in a lender pool
    state, ext = ssn.state, ssn.ext
    pending = GroupPhase.PENDING  # bound once: a class's enum member is slow to read (state.py)
    growing = [
        g
        for g in state.groups
        if g.phase != pending
        and g.pending_status  # a running group without any (most of them): no call
        and g.pending_tasks()
        and g.gang_satisfied()
        and not state.backing_off(g)
        # A gang waiting for nominated room grows only once it is actually bound.
        and not any(t.placed == Placement.NOMINATE or t.nominated >= 0 for t in g.tasks)
    ]
    growing.sort(key=ext.job_key)
    for g in growing:
        grown = 0
        refused: Verdict | None = None
        for t in ext.pending_in_order(g):
            verdict = ext.allocatable(g, t.req)
            if verdict.vote == Vote.REJECT:
                refused = verdict
                break
            placed = False
            for node_set in ext.candidate_sets(g, state.nodes.schedulable):
                scoped = _domain_mask(ssn, g, node_set)
                mask = ssn.reservations.allowed(g, scoped.mask)
                if not np.any(mask):
                    continue
                stmt = Statement(state)
                if place_group_tasks(ssn, stmt, g, [t], mask, Placement.BIND) is None and (
                    not ssn.moved or leaves_room(ssn, stmt, g)
                ):
                    ssn.commit(stmt)
                    placed = True
                    break
                stmt.discard()
            if not placed:
                break
            grown += 1
        left = len(g.pending_tasks())
        if left:
            added = f" ({grown} added this session)" if grown else ""
            # A quota verdict (a missing queue, a capability reached) is the real cause: idle
            # room would not help.
            code, wait = ReasonCode.GROWING, "wait for idle room"
            if refused is not None and refused.code is not None:
                code, wait = refused.code, f"wait: {refused.message}"
            state.explain(
                g,
                Explanation(g.uid, code, f"gang minimum running; {left} more pod(s) {wait}{added}"),
            )
