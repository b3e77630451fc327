"""Invariants every session's decisions must keep, checked against the snapshot they came from.

Each check reads only the snapshot and the result (never the core's internals), so a wrong
mechanism anywhere in the core shows up as a broken rule here.
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING

from operators.scheduler.decisions import Bind, Evict, EvictReason, Nominate
from operators.scheduler.snapshot import (
    DEFAULT_QUEUE,
    GPU,
    GPU_MILLI_PER_CARD,
    ROOT_QUEUE,
    GroupPhase,
    PreemptionRole,
    Queue,
    TaskStatus,
    TenantKind,
    pool_of_node,
)

if TYPE_CHECKING:
    from operators.scheduler.session import SessionResult
    from operators.scheduler.snapshot import PodGroup, Snapshot, Task

HOLDING = (TaskStatus.BOUND, TaskStatus.RELEASING)


def _queues(snap: Snapshot) -> dict[str, Queue]:
    out = {q.name: q for q in snap.queues}
    out.setdefault(ROOT_QUEUE, Queue(ROOT_QUEUE, parent=None))
    out.setdefault(DEFAULT_QUEUE, Queue(DEFAULT_QUEUE))
    return out


def _chain(queues: dict[str, Queue], name: str) -> list[str]:
    out: list[str] = []
    while name in queues and name not in out:
        out.append(name)
        parent = queues[name].parent
        if parent is None:
            break
        name = parent
    return out


def _usage(
    snap: Snapshot, queues: dict[str, Queue], holding: tuple[TaskStatus, ...] = HOLDING
) -> dict[str, dict[str, int]]:
    """Per queue (its subtree), what the snapshot's pods (in ``holding`` states) hold, per
    resource."""
    groups = {g.uid: g for g in snap.groups}
    used: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for t in snap.tasks:
        if t.status in holding and t.node is not None and t.group in groups:
            for q in _chain(queues, groups[t.group].queue):
                for name, value in t.requests.items():
                    used[q][name] += value
    return used


def priority_of(snap: Snapshot, g: PodGroup) -> tuple[int, int]:
    """(tenant priority, job priority), as the queue's tenants give it."""
    queue = _queues(snap).get(g.queue)
    for tenant in queue.tenants if queue is not None else ():
        who = g.namespace if tenant.kind == TenantKind.NAMESPACE else g.user
        if tenant.name == who:
            return (tenant.priority, g.priority)
    return (0, g.priority)


def may_preempt(snap: Snapshot, g: PodGroup) -> bool:
    queue = _queues(snap).get(g.queue)
    for tenant in queue.tenants if queue is not None else ():
        who = g.namespace if tenant.kind == TenantKind.NAMESPACE else g.user
        if tenant.name == who:
            return tenant.can_preempt
    return True


def _borrowed(snap: Snapshot, t: Task, g: PodGroup) -> bool:
    nodes = {n.name: n for n in snap.nodes}
    if t.node is None or t.node not in nodes:
        return False
    return pool_of_node(nodes[t.node], snap.pools) != (t.pool or g.pool)


def _overcommitted(snap: Snapshot, g: PodGroup) -> bool:
    queues = _queues(snap)
    q = queues.get(g.queue)
    if not g.overcommit or q is None or not q.overcommit:
        return False
    used = _usage(snap, queues)[g.queue]
    return any(used.get(name, 0) > cap for name, cap in q.capability.items())


def evictions_have_a_placed_preemptor(result: SessionResult) -> None:
    """Nobody is evicted for a job that does not get the room (in this very session)."""
    served = {d.group for d in result.decisions if isinstance(d, Bind | Nominate)}
    for d in result.decisions:
        if isinstance(d, Evict) and d.reason != EvictReason.STALE_GANG:
            assert d.preemptor in served, (d.group, d.preemptor)


def no_priority_inversion(snap: Snapshot, result: SessionResult) -> None:
    """Preemption inside a queue takes only from strictly lower priority (an elastic job's
    surplus also from equal priority; an overcommitted job gives way to any regular one), and
    only for a tenant that may preempt."""
    groups = {g.uid: g for g in snap.groups}
    for d in result.decisions:
        if not isinstance(d, Evict) or d.reason != EvictReason.PREEMPTED:
            continue
        victim, preemptor = groups[d.group], groups[d.preemptor]
        assert may_preempt(snap, preemptor), d
        if _overcommitted(snap, victim) and not preemptor.overcommit:
            continue
        pv, pp = priority_of(snap, victim), priority_of(snap, preemptor)
        if victim.replica_specs:
            assert pv <= pp, (d, pv, pp)
        else:
            assert pv < pp, (d, pv, pp)


def guarantees_hold(snap: Snapshot, result: SessionResult) -> None:
    """No queue (at any level of the tree) is taken below its guarantee by work of queues
    outside it: what it held, less what this session evicts from it for preemptors outside it,
    plus what this session places for it, is at least its guarantee (or all it held, if that was
    less). Pods already terminating count on neither side: they are gone whatever this session
    does. Moves inside the queue (its own jobs preempting each other) are not its guarantee's
    business. A job borrowed wholly onto another pool goes back to that pool whatever the
    quota, so it does not count."""
    queues = _queues(snap)
    groups = {g.uid: g for g in snap.groups}
    tasks = {t.uid: t for t in snap.tasks}
    before = _usage(snap, queues, (TaskStatus.BOUND,))
    lost: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for d in result.decisions:
        if not isinstance(d, Evict) or d.reason == EvictReason.STALE_GANG:
            continue
        victim, preemptor = groups[d.group], groups[d.preemptor]
        inside = set(_chain(queues, preemptor.queue))
        if all(_borrowed(snap, tasks[uid], victim) for uid in d.tasks):
            continue
        for q in _chain(queues, victim.queue):
            if q in inside:
                continue
            for uid in d.tasks:
                if tasks[uid].status == TaskStatus.BOUND:
                    for name, value in tasks[uid].requests.items():
                        lost[q][name] += value
    gained: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for d in result.decisions:
        if isinstance(d, Bind | Nominate):
            for q in _chain(queues, groups[d.group].queue):
                for name, value in tasks[d.task].requests.items():
                    gained[q][name] += value
    for name, taken in lost.items():
        for resource, floor in queues[name].guarantee.items():
            had = before[name].get(resource, 0)
            has = had - taken.get(resource, 0) + gained[name].get(resource, 0)
            assert has >= min(had, floor), (name, resource, had, has, floor)


def disruption_budgets_hold(snap: Snapshot, result: SessionResult) -> None:
    """A job loses at most ``max_unavailable`` pods, counting those already terminating."""
    tasks = {t.uid: t for t in snap.tasks}
    evicted: dict[str, int] = defaultdict(int)
    for d in result.decisions:
        if isinstance(d, Evict):
            evicted[d.group] += sum(1 for u in d.tasks if tasks[u].status == TaskStatus.BOUND)
    for g in snap.groups:
        if g.max_unavailable is None or not evicted[g.uid]:
            continue
        terminating = sum(
            1 for t in snap.tasks if t.group == g.uid and t.status == TaskStatus.RELEASING
        )
        assert evicted[g.uid] + terminating <= g.max_unavailable, (g.uid, evicted[g.uid])


def grace_periods_hold(snap: Snapshot, result: SessionResult) -> None:
    """A victim with a grace period (its own, or its queue's preemption delay) goes only at the
    deadline of a WillEvict mark."""
    queues = _queues(snap)
    groups = {g.uid: g for g in snap.groups}
    for d in result.decisions:
        if not isinstance(d, Evict):
            continue
        g = groups[d.group]
        grace = g.preemption_grace
        if grace is None:
            queue = queues.get(g.queue)
            grace = queue.preemption_delay if queue is not None else 0.0
        if grace <= 0:
            continue
        assert d.reason == EvictReason.DELAYED_PREEMPTION_DUE, d
        mark = g.preemption
        assert mark is not None, d
        assert mark.role == PreemptionRole.WILL_EVICT, d
        assert mark.deadline <= snap.now, (d, mark.deadline, snap.now)


def check_session(snap: Snapshot, result: SessionResult) -> None:
    evictions_have_a_placed_preemptor(result)
    no_priority_inversion(snap, result)
    guarantees_hold(snap, result)
    disruption_budgets_hold(snap, result)
    grace_periods_hold(snap, result)


# -------------------------------------------------------------------------------- liveness


def _free_on(snap: Snapshot, node_name: str) -> tuple[dict[str, int], list[int]]:
    """Free room on a node (per resource) and free milli per card, from the snapshot."""
    node = next(n for n in snap.nodes if n.name == node_name)
    free = dict(node.allocatable)
    cards = [GPU_MILLI_PER_CARD] * node.gpu_count
    for t in snap.tasks:
        if t.status not in HOLDING or t.node != node_name:
            continue
        for name, value in t.requests.items():
            free[name] = free.get(name, 0) - value
        free["pods"] = free.get("pods", 0) - 1
        share = t.gpu_milli if not t.requests.get(GPU) else GPU_MILLI_PER_CARD
        for card in t.gpu_ids:
            cards[card] -= share
    return free, cards


def _fits(t: Task, free: dict[str, int], cards: list[int]) -> bool:
    if free.get("pods", 0) < 1:
        return False
    for name, value in t.requests.items():
        if name != GPU and free.get(name, 0) < value:
            return False
    whole = sum(1 for c in cards if c >= GPU_MILLI_PER_CARD)
    if whole < t.requests.get(GPU, 0):
        return False
    return not t.gpu_milli or any(c >= t.gpu_milli for c in cards)


def _quota_room(snap: Snapshot, g: PodGroup, t: Task) -> bool:
    queues = _queues(snap)
    if g.queue not in queues:
        return False
    used = _usage(snap, queues)
    overcommit = g.overcommit
    for q in _chain(queues, g.queue):
        if overcommit and queues[q].overcommit:
            continue
        for name, cap in queues[q].capability.items():
            if used[q].get(name, 0) + t.requests.get(name, 0) > cap:
                return False
    return True


def something_fits_now(snap: Snapshot) -> str | None:
    """A one-pod gang, admitted, with quota room, that fits on an idle node of its own pool
    (not a node nominated for someone else): the uid of one such group, if any."""
    nominated = {t.nominated_node for t in snap.tasks if t.nominated_node is not None}
    for g in snap.groups:
        mine = [t for t in snap.tasks if t.group == g.uid]
        pending = [t for t in mine if t.status == TaskStatus.PENDING]
        if (
            g.phase != GroupPhase.INQUEUE
            or g.preemption is not None
            or g.min_member != 1
            or g.min_task_member
            or g.replica_specs
            or g.network_topology is not None
            or not pending
            or any(t.status in HOLDING for t in mine)
            or not _quota_room(snap, g, pending[0])
        ):
            continue
        for n in snap.nodes:
            if n.unschedulable or n.name in nominated:
                continue
            if pool_of_node(n, snap.pools) != (pending[0].pool or g.pool):
                continue
            free, cards = _free_on(snap, n.name)
            if _fits(pending[0], free, cards):
                return g.uid
    return None


def same_result(a: SessionResult, b: SessionResult) -> None:
    """Two ways of running one session (a shortcut on and off) decided exactly the same."""
    assert a.decisions == b.decisions
    assert a.explanations == b.explanations
    assert a.reservations == b.reservations
    assert a.queues == b.queues
    assert a.pools == b.pools
