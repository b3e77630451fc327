"""consolidate: move running jobs so that a pending gang that fits in total finds a placement.

Runs after allocate and before preempt. A gang that allocate could not place although its own
pool has enough free room *in total* (the room is split over cards, nodes or domains) asks:
which running jobs, evicted and placed again elsewhere, would leave a placement for it? Nothing
is killed for good: a plan is accepted only if, in one statement, the gang is placed (kind
NOMINATE: the moved pods take time to exit) and then every moved job is placed again. The moves
are committed as evictions (reason ``Consolidated``); the re-placements are not kept (the moved
pods are re-created by their job controller and allocate places them in a later session, at
their old rank: the PodGroup and its creation time stay).

Which jobs may move (:func:`movable`): explicit groups only (``PodGroup.movable``: an implicit
one-pod group's pod is the job itself), whole and running, not protected (``preemptible:
false`` or a disruption budget below its size), without a preemption grace period (a job that
needs time to checkpoint is not moved), not part of a delayed preemption, of priority
not above the gang's, running only on nodes of the gang's pool, not moved within
``SessionConfig.consolidation_window`` seconds, and not in a pool with ``disableConsolidation``.

The search, bounded so that one gang costs a handful of placements:

1. per node of the pool, the cheapest set of movable jobs (in GPUs moved, then pods) whose
   departure would open room there for one replica of the gang's largest shape;
2. nodes cheapest first (at most ``max_consolidation_nodes``); their jobs are evicted node by
   node, and after each node, once the freed room could hold the gang (fit counts), the plan is
   tried in full: gang first, then every moved job, largest first;
3. on success, jobs whose nodes the gang does not use are dropped if the plan still holds
   without them, so the fewest GPUs move; at most ``max_consolidation_victims`` jobs move for
   one gang and at most ``max_consolidations`` gangs are tried per session.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from operators.scheduler.actions.eviction import grace_of
from operators.scheduler.actions.preempt import preemptors
from operators.scheduler.decisions import EvictReason, Explanation, ReasonCode
from operators.scheduler.framework import Vote
from operators.scheduler.placement import by_shape, place_group_tasks
from operators.scheduler.snapshot import TaskStatus
from operators.scheduler.state import Placement
from operators.scheduler.statement import Statement

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from operators.scheduler.context import Session
    from operators.scheduler.state import GroupInfo, TaskInfo


@dataclass(frozen=True, slots=True)
class Plan:
    gang: GroupInfo
    moved: tuple[GroupInfo, ...]

    @property
    def gpus(self) -> int:
        return sum(moved_gpus(v) for v in self.moved)


def moved_gpus(v: GroupInfo, running: list[TaskInfo] | None = None) -> int:
    """GPUs a move of ``v`` relocates (a fractional share counts as one card)."""
    tasks = v.running_tasks() if running is None else running
    return sum(t.gpu_cards for t in tasks) + (1 if any(t.gpu_milli for t in tasks) else 0)


def run(ssn: Session) -> None:
    config = ssn.config
    if config.max_consolidations <= 0:
        return
    ssn.reservations.release_placed()
    tried = 0
    for g in preemptors(ssn):
        if tried >= config.max_consolidations:
            break
        found = consolidate(ssn, g)
        if found is None:
            continue
        tried += 1
        if found.moved:
            _explain(ssn, found)


def consolidate(ssn: Session, g: GroupInfo) -> Plan | None:
    """Try to consolidate room for ``g``: None when it is not a fragmentation case (nothing was
    searched), a plan with no moves when the search found nothing, else the committed plan."""
    state, ext = ssn.state, ssn.ext
    if state.nodes.pools[g.pool].disable_consolidation:
        return None
    tasks = ext.shortfall(g, ext.pending_in_order(g))
    if not tasks:
        return None
    own = next(ext.candidate_sets(g, state.nodes.schedulable), None)
    if own is None or own.borrowed:
        return None
    mask = ssn.reservations.allowed(g, own.mask)
    need = np.sum([t.req for t in tasks], axis=0)
    if ext.allocatable(g, need).vote == Vote.REJECT:
        return None  # quota, not fragmentation, keeps it out
    free = np.maximum(state.free[mask], 0.0).sum(axis=0)
    if bool((need > free + 1e-6).any()):
        return None  # does not fit even in total: preemption's business
    victims = [v for v in state.groups if movable(ssn, g, v, mask)]
    if not victims:
        return Plan(g, ())
    plan = _search(ssn, g, tasks, mask, victims)
    if plan is None:
        return Plan(g, ())
    return plan


def movable(ssn: Session, g: GroupInfo, v: GroupInfo, mask: NDArray[np.bool_]) -> bool:
    """May ``v`` be moved to make room for ``g`` in the nodes of ``mask``?"""
    pg = v.pg
    if v is g or not pg.movable or not pg.preemptible or pg.preemption is not None:
        return False
    if grace_of(ssn, v) > 0:
        return False  # it asked for time to checkpoint before it is evicted: never moved
    if v.priority > g.priority:
        return False
    at = pg.consolidated_at
    if at is not None and ssn.state.now - at < ssn.config.consolidation_window:
        return False
    if not v.tasks or not v.gang_satisfied():
        return False
    running = 0
    pools = ssn.state.nodes.pools
    pool_of = ssn.state.nodes.pool_of
    for t in v.tasks:
        if t.placed != Placement.NONE or t.evicted or t.task.status == TaskStatus.RELEASING:
            return False
        if not t.held:
            continue
        if t.node < 0 or not mask[t.node] or pools[pool_of[t.node]].disable_consolidation:
            return False
        running += 1
    budget = pg.max_unavailable
    return running > 0 and (budget is None or budget >= running)


def _node_costs(
    ssn: Session, tasks: list[TaskInfo], victims: list[GroupInfo]
) -> list[tuple[int, list[GroupInfo]]]:
    """Per node with movable jobs: the cheapest jobs whose departure opens room there for one
    replica of the hardest shape (one job that suffices alone, or the cheapest jobs in order
    until the room opens, whichever moves fewer GPUs); nodes cheapest first. Vectorised over
    every (job, node) pair: this runs over the whole pool for every gang searched."""
    state = ssn.state
    shapes = by_shape(tasks)
    hardest = max(shapes, key=lambda s: (s[0].gpu_cards, s[0].gpu_milli, float(s[0].req.sum())))
    req = hardest[0].req
    pair_node: list[int] = []
    pair_victim: list[int] = []
    pair_vec: list[NDArray[np.float64]] = []
    gpus = np.zeros(len(victims))
    pods = np.zeros(len(victims))
    for i, v in enumerate(victims):
        running = v.running_tasks()
        gpus[i] = moved_gpus(v, running)
        pods[i] = len(running)
        freed: dict[int, NDArray[np.float64]] = {}
        for t in running:
            freed[t.node] = freed[t.node] + t.req if t.node in freed else t.req
        for n, vec in freed.items():
            pair_node.append(n)
            pair_victim.append(i)
            pair_vec.append(vec)
    if not pair_node:
        return []
    node = np.asarray(pair_node, dtype=np.int64)
    victim = np.asarray(pair_victim, dtype=np.int64)
    vec = np.asarray(pair_vec, dtype=np.float64)
    cost = gpus[victim] * 1e6 + pods[victim]  # GPUs moved, then pods moved
    # Pairs grouped by node, cheapest first inside a node.
    order = np.lexsort((victim, cost, node))
    node, victim, vec, cost = node[order], victim[order], vec[order], cost[order]
    deficit = np.maximum(req - np.maximum(state.free[node], 0.0), 0.0) - 1e-6
    starts = np.flatnonzero(np.r_[True, node[1:] != node[:-1]])
    group = np.cumsum(np.r_[True, node[1:] != node[:-1]]) - 1
    # Alone: the first (cheapest) pair of its node that covers the deficit.
    alone = (vec >= deficit).all(axis=1)
    # Prefix: running sums inside each node; the first prefix that covers the deficit.
    sums = np.cumsum(vec, axis=0)
    base = np.vstack([np.zeros((1, vec.shape[1])), sums])[starts][group]
    prefix_vec = sums - base
    costs = np.cumsum(cost)
    prefix_cost = costs - np.r_[0.0, costs][starts][group]
    prefix = (prefix_vec >= deficit).all(axis=1)
    big = np.inf
    best_alone = np.full(len(starts), big)
    at_alone = np.full(len(starts), -1)
    best_prefix = np.full(len(starts), big)
    at_prefix = np.full(len(starts), -1)
    idx = np.arange(len(node))
    for mask, best, at, value in (
        (alone, best_alone, at_alone, cost),
        (prefix, best_prefix, at_prefix, prefix_cost),
    ):
        hits = idx[mask]
        # The first hit per node (pairs are cheapest first, prefixes grow).
        first = np.unique(group[hits], return_index=True)
        best[first[0]] = value[hits[first[1]]]
        at[first[0]] = hits[first[1]]
    total = np.minimum(best_alone, best_prefix)
    usable = np.flatnonzero(np.isfinite(total))
    if not len(usable):
        return []
    free_sum = state.free[node[starts[usable]]].sum(axis=1)
    ranked = usable[np.lexsort((node[starts[usable]], -free_sum, total[usable]))]
    out: list[tuple[int, list[GroupInfo]]] = []
    for k in ranked[: ssn.config.max_consolidation_nodes].tolist():
        if best_alone[k] <= best_prefix[k]:
            chosen = [victims[int(victim[at_alone[k]])]]
        else:
            chosen = [victims[int(victim[j])] for j in range(starts[k], at_prefix[k] + 1)]
        out.append((int(node[starts[k]]), chosen))
    return out


def _search(
    ssn: Session,
    g: GroupInfo,
    tasks: list[TaskInfo],
    mask: NDArray[np.bool_],
    victims: list[GroupInfo],
) -> Plan | None:
    limit = ssn.config.max_consolidation_victims
    stmt = Statement(ssn.state)
    moved: list[GroupInfo] = []
    for _, chosen in _node_costs(ssn, tasks, victims):
        fresh = [v for v in chosen if v not in moved]
        if not fresh:
            continue
        if len(moved) + len(fresh) > limit:
            break
        for v in fresh:
            _evict(stmt, g, v)
            moved.append(v)
        if not _may_fit(ssn, tasks, mask):
            continue
        if _attempt(ssn, stmt, g, tasks, mask, moved):
            return _finish(ssn, stmt, g, tasks, mask, moved)
    stmt.discard()
    return None


def _finish(
    ssn: Session,
    stmt: Statement,
    g: GroupInfo,
    tasks: list[TaskInfo],
    mask: NDArray[np.bool_],
    moved: list[GroupInfo],
) -> Plan:
    """Keep only the moves the gang's placement needs, if the plan holds without the rest."""
    used = {t.node for t in tasks}
    needed = [v for v in moved if any(t.node in used for t in v.tasks if t.evicted)]
    if len(needed) < len(moved):
        stmt.discard()
        smaller = Statement(ssn.state)
        for v in needed:
            _evict(smaller, g, v)
        if _attempt(ssn, smaller, g, tasks, mask, needed):
            stmt, moved = smaller, needed
        else:
            smaller.discard()
            stmt = Statement(ssn.state)
            for v in moved:
                _evict(stmt, g, v)
            if not _attempt(ssn, stmt, g, tasks, mask, moved):  # same state: cannot happen
                stmt.discard()
                return Plan(g, ())
    ssn.commit(stmt)
    g.preemption_done = True
    return Plan(g, tuple(moved))


def _evict(stmt: Statement, g: GroupInfo, v: GroupInfo) -> None:
    pg = g.pg
    stmt.evict_many(
        v.running_tasks(),
        EvictReason.CONSOLIDATED,
        f"moved to make room for gang {pg.namespace}/{pg.name} (consolidation); "
        "its pods are placed again elsewhere and it keeps its place in the queue",
        g.uid,
    )


def _may_fit(ssn: Session, tasks: list[TaskInfo], mask: NDArray[np.bool_]) -> bool:
    for shape_tasks in by_shape(tasks):
        t = shape_tasks[0]
        counts = ssn.views.get(t).counts * ssn.views.allowed(t, mask, ssn.ext.feasible)
        if counts.sum() < len(shape_tasks):
            return False
    return True


def _attempt(
    ssn: Session,
    stmt: Statement,
    g: GroupInfo,
    tasks: list[TaskInfo],
    mask: NDArray[np.bool_],
    moved: list[GroupInfo],
) -> bool:
    """Place the gang, then every moved job; on success keep only the gang's placement in
    ``stmt`` (the moved jobs are placed again by a later session), else undo both."""
    state, ext = ssn.state, ssn.ext
    start = stmt.mark()
    if place_group_tasks(ssn, stmt, g, tasks, mask, Placement.NOMINATE) is not None or not (
        ext.ready(g)
    ):
        stmt.rollback(start)
        return False
    gang_done = stmt.mark()
    # Rolling back a re-placement forgets where a task ran; the eviction record needs it.
    origins = [(t, t.node, t.gpu_ids) for v in moved for t in v.tasks if t.evicted]

    def undo(mark: int) -> None:
        stmt.rollback(mark)
        for t, node, ids in origins:
            t.node, t.gpu_ids = node, ids

    for v in sorted(moved, key=lambda v: (-moved_gpus(v), v.uid)):
        again = [t for t in v.tasks if t.evicted and not t.held]
        placed = False
        for node_set in ext.candidate_sets(v, state.nodes.schedulable):
            # Nodes reserved for the gang are open to its movers: the gang is placed now.
            allowed = ssn.reservations.allowed(v, node_set.mask) | (
                node_set.mask & (ssn.reservations.owner == g.index)
            )
            if place_group_tasks(ssn, stmt, v, again, allowed, Placement.BIND) is None:
                placed = True
                break
        if not placed:
            undo(start)
            return False
    undo(gang_done)
    return True


def _explain(ssn: Session, plan: Plan) -> None:
    g = plan.gang
    names = ", ".join(f"{v.pg.namespace}/{v.pg.name}" for v in plan.moved[:4])
    more = f" (+{len(plan.moved) - 4} more)" if len(plan.moved) > 4 else ""
    ssn.state.explain(
        g,
        Explanation(
            g.uid,
            ReasonCode.CONSOLIDATING,
            f"consolidating: moving {len(plan.moved)} job(s) ({plan.gpus} GPU(s)) {names}{more} "
            "to open a placement; pods nominated until they exit",
        ),
    )
