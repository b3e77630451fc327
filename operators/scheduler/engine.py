"""Session engine: ``run_session(snapshot, config) -> SessionResult``, open -> actions -> close.

Everything is deterministic for a given snapshot and config.

Numbered phases, each timed with the caller's timer when one is given:

1. open: index the snapshot (nodes, queues, groups, tasks) into vectors; water-fill deserved;
2. register plugins in ``PLUGIN_ORDER`` (this order is what "first" means in every
   combination rule of framework.py);
3. run the configured actions in order;
4. close: turn committed statements into Evict / Bind / Nominate decisions, drive group phases
   through the phase table, make sure every pending group has an explanation, and compute
   queue and pool statuses.
"""

from __future__ import annotations

import gc
from collections import Counter
from collections.abc import Callable
from operator import attrgetter
from types import MappingProxyType
from typing import TYPE_CHECKING

import numpy as np

from operators.scheduler.actions import (
    allocate,
    backfill,
    consolidate,
    enqueue,
    preempt,
    reclaim,
    stale,
)
from operators.scheduler.actions.movers import planned_nodes
from operators.scheduler.context import Session, placements
from operators.scheduler.decisions import (
    Decision,
    Evict,
    EvictReason,
    Explanation,
    ReasonCode,
    SetGroupPhase,
)
from operators.scheduler.framework import Extensions
from operators.scheduler.phases import GroupEvent, next_phase
from operators.scheduler.plugins import (
    binpack,
    drf,
    fragmentation,
    gang,
    pool,
    predicates,
    priority,
    quota,
)
from operators.scheduler.plugins import topology as topology_plugin
from operators.scheduler.reservation import Reservations
from operators.scheduler.session import (
    ActionName,
    PoolStatus,
    QueueStatus,
    SessionConfig,
    SessionResult,
)
from operators.scheduler.shapeviews import ShapeViews
from operators.scheduler.snapshot import GroupPhase, TaskStatus
from operators.scheduler.state import GroupInfo, Placement, SessionState
from operators.scheduler.statement import AllocateOp, EvictOp

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from operators.scheduler.memo import SessionMemo
    from operators.scheduler.snapshot import Snapshot

PluginRegister = Callable[[SessionState, Extensions], object]

# Order matters: job order is gang (reservations first) -> priority -> drf; victim order is
# gang (surplus first) -> pool (borrowed) -> quota (overcommitted, most over share) ->
# priority (lowest) -> drf (least disruption).
PLUGIN_ORDER: tuple[tuple[str, PluginRegister], ...] = (
    ("gang", gang.register),
    ("pool", pool.register),
    ("quota", quota.register),
    ("priority", priority.register),
    ("drf", drf.register),
    ("predicates", predicates.register),
    ("binpack", binpack.register),
    ("fragmentation", fragmentation.register),
    ("topology", topology_plugin.register),
)

ACTIONS: dict[ActionName, Callable[[Session], None]] = {
    ActionName.ENQUEUE: enqueue.run,
    ActionName.ALLOCATE: allocate.run,
    ActionName.CONSOLIDATE: consolidate.run,
    ActionName.PREEMPT: preempt.run,
    ActionName.RECLAIM: reclaim.run,
    ActionName.BACKFILL: backfill.run,
}


def run_session(
    snapshot: Snapshot, config: SessionConfig | None = None, memo: SessionMemo | None = None
) -> SessionResult:
    """Run one scheduling session over ``snapshot`` and return what to do.

    ``memo``: pass the same one to every session of a caller that runs one after another (the
    live loop, a simulator): session open then reuses what it derived from the snapshot objects
    it saw before (memo.py). The result is the same with or without it.
    """
    return execute(snapshot, config or SessionConfig(), memo)


def execute(
    snapshot: Snapshot, config: SessionConfig, memo: SessionMemo | None = None
) -> SessionResult:
    # A session allocates many short-lived objects and creates no reference cycles that
    # outlive it; the cyclic collector would only rescan the (large, immutable) snapshot over
    # and over. Pause it for the session and restore the caller's setting afterwards.
    paused = gc.isenabled()
    gc.disable()
    try:
        return _execute(snapshot, config, memo)
    finally:
        if paused:
            gc.enable()


def _execute(snapshot: Snapshot, config: SessionConfig, memo: SessionMemo | None) -> SessionResult:
    timer = config.timer
    timings: dict[str, float] = {}

    def lap(name: str, start: float | None) -> float | None:
        if timer is None or start is None:
            return None
        now = timer()
        timings[name] = now - start
        return now

    start = timer() if timer is not None else None
    ssn = open_session(snapshot, config, memo)
    start = lap("open", start)
    stale.run(ssn)
    for action in config.actions:
        ACTIONS[action](ssn)
        start = lap(str(action), start)
    result = close(ssn, timings)
    lap("close", start)
    return result


def open_session(
    snapshot: Snapshot, config: SessionConfig, memo: SessionMemo | None = None
) -> Session:
    """Phases 1 and 2: the session state over ``snapshot`` with every plugin registered."""
    state = SessionState(snapshot, config, memo)
    ext = Extensions()
    for _, register in PLUGIN_ORDER:
        register(state, ext)
    ext.scorers.extend(make(state) for make in config.scorers)
    ext.card_pickers[:0] = [make(state) for make in config.card_pickers]
    return Session(
        state=state,
        ext=ext,
        config=config,
        views=ShapeViews(state, ext),
        reservations=Reservations(state, ext, config.max_reservations),
    )


def close(ssn: Session, timings: dict[str, float]) -> SessionResult:
    state = ssn.state
    evictions: dict[str, tuple[list[str], EvictOp]] = {}
    binds: list[Decision] = []
    for op in ssn.operations:
        if isinstance(op, EvictOp):
            entry = evictions.setdefault(op.tasks[0].group.uid, ([], op))
            entry[0].extend(t.task.uid for t in op.tasks)
            continue
        binds.extend(placements(state, op))
    planned = planned_nodes(ssn)
    decisions: list[Decision] = []
    for uid, (tasks, op) in evictions.items():
        moved_to = planned.get(uid, ())
        decisions.append(Evict(uid, tuple(tasks), op.reason, op.message, op.preemptor, moved_to))
    marks_and_phases = list(ssn.decisions)
    decisions.extend(d for d in marks_and_phases if not isinstance(d, SetGroupPhase))
    decisions.extend(binds)
    decisions.extend(d for d in marks_and_phases if isinstance(d, SetGroupPhase))
    decisions.extend(_phase_changes(ssn, evictions))
    reserved = _explain_reservations(ssn)
    _fill_explanations(ssn)
    return SessionResult(
        decisions=tuple(decisions),
        explanations=MappingProxyType(dict(state.all_explanations())),
        timings=MappingProxyType(timings),
        queues=MappingProxyType(_queue_statuses(state, ssn.ext)),
        pools=MappingProxyType(_pool_statuses(state)),
        reservations=MappingProxyType(reserved),
    )


def _explain_reservations(ssn: Session) -> dict[str, tuple[str, ...]]:
    """Each gang still holding a reservation says so (the runtime shows it as the reason's
    message) and is listed in ``SessionResult.reservations``."""
    reservations, state = ssn.reservations, ssn.state
    reservations.release_placed()
    out: dict[str, tuple[str, ...]] = {}
    for r in reservations.items:
        g = r.group
        out[g.uid] = reservations.names(r)
        old = state.explanation(g.uid)
        code = old.code if old is not None else ReasonCode.UNSCHEDULABLE
        text = reservations.describe(r)
        state.explain(g, Explanation(g.uid, code, f"{old.message}; {text}" if old else text))
    return out


def _phase_changes(ssn: Session, evictions: dict[str, tuple[list[str], EvictOp]]) -> list[Decision]:
    out: list[Decision] = []
    # Groups with a task bound / nominated by this session: exactly the committed allocations
    # (a discarded statement resets its tasks), found without scanning every task.
    bound: set[int] = set()
    nominated: set[int] = set()
    for op in ssn.operations:
        if isinstance(op, AllocateOp):
            (bound if op.kind == Placement.BIND else nominated).update(
                id(t.group) for t in op.tasks
            )
    if not bound and not evictions:
        return out  # a session that placed and evicted nothing changes no phase here
    for g in ssn.state.groups:
        bound_now = id(g) in bound
        if bound_now and g.gang_satisfied() and id(g) not in nominated:
            phase = next_phase(g.phase, GroupEvent.GANG_BOUND)
            if phase != g.phase:
                g.phase = phase
                out.append(SetGroupPhase(g.uid, phase, "GangBound"))
        if g.uid in evictions and not any(t.held for t in g.tasks):
            moved = evictions[g.uid][1].reason is EvictReason.CONSOLIDATED
            event = GroupEvent.MOVED if moved else GroupEvent.EVICTED
            phase = next_phase(g.phase, event)
            if phase != g.phase:
                g.phase = phase
                out.append(SetGroupPhase(g.uid, phase, "Moved" if moved else "Evicted"))
    return out


def _fill_explanations(ssn: Session) -> None:
    """Every group that still waits for something gets a reason, never silence."""
    state = ssn.state
    pending = GroupPhase.PENDING  # bound once: a class's enum member is slow to read (state.py)
    for g in state.groups:
        if g.tasks and (not g.pending_status or not g.pending_tasks()):
            continue  # nothing of it waits (most groups of a busy cluster): nothing to say
        if state.has_explanation(g.uid):
            continue
        if g.phase == pending and not g.tasks:
            message = "waiting for admission (enqueue is not configured)"
        elif not g.pending_tasks():
            continue
        elif g.gang_satisfied():
            message = f"gang minimum running; {len(g.pending_tasks())} more pod(s) pending"
            state.explain(g, Explanation(g.uid, ReasonCode.GROWING, message))
            continue
        else:
            message = "not considered this session"
        state.explain(g, Explanation(g.uid, ReasonCode.UNSCHEDULABLE, message))


def _queue_statuses(state: SessionState, ext: Extensions) -> dict[str, QueueStatus]:
    tree, space = state.queues, state.space
    groups = state.groups
    # Counted in C: a Python pass per group shows at tens of thousands of groups.
    counts = Counter(zip(map(_queue_of, groups), map(_phase_of, groups), strict=True))
    waiting: dict[int, list[GroupInfo]] = {}
    waits = (GroupPhase.PENDING, GroupPhase.INQUEUE)  # bound once (see _fill_explanations)
    for g in [g for g in groups if g.phase in waits]:
        waiting.setdefault(g.queue, []).append(g)
    out: dict[str, QueueStatus] = {}
    for q, name in enumerate(tree.names):
        out[name] = QueueStatus(
            deserved=MappingProxyType(space.mapping(tree.deserved[q])),
            allocated=MappingProxyType(space.mapping(tree.allocated[q])),
            pending=counts[q, GroupPhase.PENDING],
            inqueue=counts[q, GroupPhase.INQUEUE],
            running=counts[q, GroupPhase.RUNNING],
            waiting=tuple(
                (g.pg.namespace, g.pg.name) for g in sorted(waiting.get(q, ()), key=ext.job_key)
            ),
        )
    return out


_queue_of = attrgetter("queue")
_phase_of = attrgetter("phase")


def _pool_statuses(state: SessionState) -> dict[str, PoolStatus]:
    nodes, space = state.nodes, state.space
    out: dict[str, PoolStatus] = {}
    npools = len(nodes.pool_names)
    used = np.zeros((npools, space.size))
    shared = np.zeros((npools, space.size))
    pending = np.zeros((npools, space.size))
    # Count tasks per (pool, request vector) first: tasks of one shape share one vector, so a
    # few dozen vector multiply-adds replace a numpy row update per task.
    pool_of = nodes.pool_of
    counts: tuple[dict[tuple[int, int], int], ...] = ({}, {}, {})  # used, shared, pending
    vectors: dict[int, NDArray[np.float64]] = {}
    pending_status = TaskStatus.PENDING
    nominate, not_placed = Placement.NOMINATE, Placement.NONE
    for t in state.tasks:
        req = t.req
        # Pods on the pool's nodes now: evicted ones until they exit, nominated ones not yet.
        if (t.held or t.evicted) and t.node >= 0 and t.placed != nominate:
            p = pool_of[t.node]
            key = (p, id(req))
            used_counts = counts[0]
            used_counts[key] = used_counts.get(key, 0) + 1
            if p != t.pool:
                counts[1][key] = counts[1].get(key, 0) + 1
        elif t.placed == not_placed and t.task.status == pending_status:
            key = (t.pool, id(req))
            counts[2][key] = counts[2].get(key, 0) + 1
        else:
            continue
        vectors[id(req)] = req
    for per, target in zip(counts, (used, shared, pending), strict=True):
        for (p, vid), count in per.items():
            target[p] += vectors[vid] * count
    for p, name in enumerate(nodes.pool_names):
        mask = nodes.node_pool == p
        capacity = nodes.capacity[mask].sum(axis=0)
        allocatable = nodes.capacity[mask & nodes.schedulable].sum(axis=0)
        out[name] = PoolStatus(
            capacity=MappingProxyType(space.mapping(capacity)),
            allocatable=MappingProxyType(space.mapping(allocatable)),
            used=MappingProxyType(space.mapping(used[p])),
            shared=MappingProxyType(space.mapping(shared[p])),
            pending=MappingProxyType(space.mapping(pending[p])),
            nodes=int(mask.sum()),
        )
    return out
