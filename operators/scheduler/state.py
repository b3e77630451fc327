"""The session's mutable view of the snapshot: free capacity, task and group bookkeeping.

Only a :class:`~operators.scheduler.statement.Statement` mutates placements (so every change can
be rolled back); actions read this state and record explanations.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from operators.scheduler.decisions import Explanation
from operators.scheduler.memo import Derived, GroupStatic, SessionMemo
from operators.scheduler.nodes import NodeIndex
from operators.scheduler.queues import QueueTree
from operators.scheduler.resources import ResourceSpace
from operators.scheduler.snapshot import (
    DEFAULT_QUEUE,
    GPU,
    GPU_MILLI_PER_CARD,
    GroupPhase,
    PodGroup,
    PreemptionRole,
    Snapshot,
    Task,
    TaskStatus,
    TenantKind,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from numpy.typing import NDArray

    from operators.scheduler.actions.eviction import VictimOrder
    from operators.scheduler.decisions import ReasonCode
    from operators.scheduler.framework import VictimUnit
    from operators.scheduler.session import SessionConfig
    from operators.scheduler.shapeviews import ShapeView


CARD_EPS = 1e-6
# Enum members read per object in session loops, bound to names once: on Python 3.11 reading
# a member through its class (``TaskStatus.PENDING``) costs ~0.3-0.8 us, more than the rest of
# such a loop's body, tens of thousands of times per session on a full cluster.
_TASK_PENDING = TaskStatus.PENDING
_TASK_HOLDING = (TaskStatus.BOUND, TaskStatus.RELEASING)
_TASK_RELEASING = TaskStatus.RELEASING
_TASK_DONE = (TaskStatus.SUCCEEDED, TaskStatus.FAILED)
_GROUP_PENDING = GroupPhase.PENDING
_FULL = GPU_MILLI_PER_CARD - CARD_EPS  # a card with at least this much free milli is whole


class Placement(enum.IntEnum):
    NONE = 0
    BIND = 1  # room is idle now: bind
    NOMINATE = 2  # room is being freed by evictions: hold it (nominatedNodeName)


_NOT_PLACED = Placement.NONE  # see _TASK_PENDING


@dataclass(slots=True, eq=False)
class TaskInfo:
    task: Task
    group: GroupInfo
    req: NDArray[np.float64]  # internal vector (GPU milli), includes one pod
    gpu_cards: int  # whole cards wanted
    gpu_milli: int  # fractional share of one card wanted
    shape: tuple[object, ...]  # identical shapes share predicate masks and fit counts
    pool: int  # own pool
    replica_priority: int
    node: int = -1  # node index while holding resources (snapshot or session)
    gpu_ids: tuple[int, ...] = ()
    held: bool = False  # holds resources (bound/releasing, or placed this session)
    placed: Placement = Placement.NONE  # placed by this session
    evicted: bool = False  # evicted by this session
    nominated: int = -1
    dims: tuple[int, ...] = ()  # non-GPU resource dimensions requested (fit checks)
    order_key: tuple[object, ...] | None = None  # cached Extensions.task_key
    view: ShapeView | None = None  # cached shapeviews lookup

    @property
    def pending(self) -> bool:
        return not self.held and self.task.status == _TASK_PENDING

    def renew(self, group: GroupInfo) -> None:
        """As fresh for a new session, under ``group`` (SessionMemo keeps it for an unchanged
        task): every field with a default is the session's own and goes back to it; the others
        are derived from the task, its group's pool and its replica priority, which the memo
        checks. tests/unit/scheduler/test_session_memo.py fails for a field left out here."""
        self.group = group
        self.node = -1
        self.gpu_ids = ()
        self.held = False
        self.placed = _NOT_PLACED
        self.evicted = False
        self.nominated = -1
        self.order_key = None  # task keys come from the session's plugins
        self.view = None


@dataclass(slots=True, eq=False)
class GroupInfo:
    pg: PodGroup
    index: int
    queue: int
    pool: int
    priority: tuple[int, int]  # (tenant priority, job priority): higher runs first
    can_preempt: bool
    role_min: dict[str, int]
    role_priority: dict[str, int]
    elastic: bool
    tasks: list[TaskInfo] = field(default_factory=list)
    phase: GroupPhase = GroupPhase.PENDING
    admitted_now: bool = False
    attempted: bool = False  # allocate tried and failed: candidate for preempt/reclaim
    preemption_done: bool = False  # preempt/reclaim handled it this session
    borrow_later: bool = False  # own pool full: may borrow once preempt/reclaim had a go
    held_count: int = 0  # tasks holding resources (kept by SessionState.move)
    borrowed_count: int = 0  # of which running outside their own pool
    min_vector: NDArray[np.float64] | None = None  # cache of SessionState.min_resources
    changes: int = 0  # bumped on every change of the group's holdings (SessionState.move)
    _ready_at: int = -1  # ``changes`` when _ready was computed
    _ready: bool = False
    ordered: list[TaskInfo] | None = None  # tasks in Extensions.task_key order (static keys)
    # Tasks whose snapshot status is Pending (fixed for the session): none means none of the
    # group's tasks can be pending, answered without a pass over them (most groups of a busy
    # cluster are running ones, asked by allocate, backfill and close every session).
    pending_status: int = 0

    @property
    def uid(self) -> str:
        return self.pg.uid

    def renew(self, index: int) -> None:
        """As fresh for a new session, at ``index`` (SessionMemo keeps it for an unchanged
        PodGroup): every field with a default is the session's own and goes back to it; the
        others are derived from the PodGroup and the queues, which the memo follows.
        tests/unit/scheduler/test_session_memo.py fails for a field left out here."""
        self.index = index
        self.tasks = []
        self.phase = self.pg.phase
        self.admitted_now = False
        self.attempted = False
        self.preemption_done = False
        self.borrow_later = False
        self.held_count = 0
        self.borrowed_count = 0
        self.min_vector = None
        self.changes = 0
        self._ready_at = -1
        self._ready = False
        self.ordered = None
        self.pending_status = 0

    def ready_count(self) -> tuple[int, dict[str, int]]:
        """Tasks holding resources (snapshot-bound not evicted, plus placed this session)."""
        total = 0
        per_role: dict[str, int] = {}
        for t in self.tasks:
            if t.held and t.task.status != _TASK_RELEASING:
                total += 1
                per_role[t.task.role] = per_role.get(t.task.role, 0) + 1
        return total, per_role

    def gang_satisfied(self) -> bool:
        # Asked often; the answer only changes when the group's holdings do.
        if self._ready_at == self.changes:
            return self._ready
        total, per_role = self.ready_count()
        ready = total >= self.pg.min_member and all(
            per_role.get(role, 0) >= need for role, need in self.role_min.items()
        )
        self._ready_at, self._ready = self.changes, ready
        return ready

    def running_tasks(self) -> list[TaskInfo]:
        return [t for t in self.tasks if t.held and t.placed == Placement.NONE and not t.evicted]

    def pending_tasks(self) -> list[TaskInfo]:
        if not self.pending_status:
            return []
        return [t for t in self.tasks if t.pending]


class SessionState:
    def __init__(
        self, snapshot: Snapshot, config: SessionConfig, memo: SessionMemo | None = None
    ) -> None:
        """``memo``: what earlier sessions derived from the same snapshot objects (memo.py);
        without one, everything is derived afresh."""
        self.snapshot = snapshot
        self.config = config
        self.now = snapshot.now
        names: set[str] = set()
        for node in snapshot.nodes:
            names.update(node.allocatable)
        for task in snapshot.tasks:
            names.update(task.requests)
        self.space = ResourceSpace(names)
        self.nodes = NodeIndex(snapshot.nodes, snapshot.pools, snapshot.topology, self.space)
        self.queues = QueueTree(snapshot.queues, self.space)
        self.memo = memo if memo is not None else SessionMemo()
        self.memo.open(
            (
                self.space.names,
                self.nodes.pool_names,
                tuple(self.queues.names),
                tuple(spec.tenants for spec in self.queues.specs),
            )
        )
        self.free: NDArray[np.float64] = self.nodes.capacity.copy()
        self.gpu_free: NDArray[np.float64] = self.nodes.gpu_capacity.copy()
        # Whole free cards per node, kept in step with gpu_free (hot in fit checks).
        full = self.gpu_free >= GPU_MILLI_PER_CARD - CARD_EPS
        self.full_cards: NDArray[np.int64] = full.sum(axis=1)
        # Whole free cards per NVLink island / NUMA node (N, islands), kept in step likewise.
        # Largest whole-free island per node: what the topology scorer asks for.
        self.nvlink_best = _largest_island(full, self.nodes.nvlink_group)
        self.numa_best = _largest_island(full, self.nodes.numa_group)
        # Tasks of pools other than the node's pool (borrowers), per node.
        self.pool_tasks: list[int] = [0] * len(self.nodes.pool_names)
        self.pool_borrowed: list[int] = [0] * len(self.nodes.pool_names)  # borrowers on it
        self.explanations: dict[str, Explanation] = {}
        self._lazy: dict[str, tuple[ReasonCode, Callable[[], str]]] = {}
        # Nodes whose holdings changed, in order (append-only; shapeviews.py syncs from it).
        self.touched: list[int] = []
        # Groups whose holdings changed, in order (append-only; a group once per move; victim
        # orders patch from it, eviction.py). Open's own accounting is not in it.
        self.moved_holdings: list[GroupInfo] = []
        # (island layout id, whole cards) -> (whole cards, best NVLink island, best NUMA node).
        self._card_stats: dict[tuple[int, tuple[bool, ...]], tuple[int, int, int]] = {}
        # Per shape key: requested non-GPU columns and the request on them (shapeviews.py).
        self.dim_columns: dict[object, tuple[NDArray[np.int64], NDArray[np.float64]]] = {}
        # Card choices memoised by topology.pick_gpus_many (keyed by hardware kind and free cards).
        self.gpu_picks: dict[tuple[object, ...], tuple[tuple[int, ...], ...]] = {}
        # (len(touched), groups with borrowed tasks) for victim searches (eviction.py).
        self.borrowers_cache: tuple[int, list[GroupInfo]] | None = None
        # Victim units per group uid, keyed by the group's holdings version (eviction.py).
        self.victim_cache: dict[str, tuple[int, list[VictimUnit]]] = {}
        # Candidates in victim order per scope, shared by the session's preemptors (eviction.py).
        self.victim_orders: dict[tuple[object, int], VictimOrder] = {}
        # (len(touched), preemptor keys with no eligible victim then) (eviction.py).
        self.no_victims: tuple[int, set[tuple[object, ...]]] = (0, set())
        # Group uids named as preemptor by a WillEvict mark (eviction.py; computed once).
        self.mark_named: set[str] | None = None

        # One pass per object, with the memo's lookups inline: at 60,000 groups and tasks a
        # method call or a dict write per object is a noticeable part of the session.
        memo = self.memo
        self.groups: list[GroupInfo] = []
        self.group_by_uid: dict[str, GroupInfo] = {}
        self.groups_by_queue: dict[int, list[GroupInfo]] = {}
        groups, by_uid, by_queue = self.groups, self.group_by_uid, self.groups_by_queue
        known_groups = memo.groups
        for pg in snapshot.groups:
            uid = pg.uid
            if uid in by_uid:
                continue  # listed twice: the first one counts
            g = known_groups.get(uid)
            if g is not None and g.pg is pg:
                g.renew(len(groups))
            else:
                g = GroupInfo(pg, len(groups), *self._group_static(pg), phase=pg.phase)
            groups.append(g)
            by_uid[uid] = g
            same_queue = by_queue.get(g.queue)
            if same_queue is None:
                by_queue[g.queue] = [g]
            else:
                same_queue.append(g)

        self.tasks: list[TaskInfo] = []
        self.releasing: dict[int, int] = {}  # node -> pods still terminating there
        self._by_identity: dict[
            int, tuple[object, int, tuple[object, ...], NDArray[np.float64], tuple[int, ...]]
        ] = {}
        self._prev_task: tuple[Any, ...] | None = None  # see _task_info
        bound: list[TaskInfo] = []
        all_tasks, position = self.tasks, self.nodes.position
        # Taken out as they are met, so a task listed twice gets a fresh state the second time.
        reuse = memo.tasks.pop
        for task in snapshot.tasks:
            owner = by_uid.get(task.group)
            status = task.status
            if owner is None or status in _TASK_DONE:
                continue
            info = reuse(id(task), None)
            if info is not None and (
                info.group is owner  # the same PodGroup object: what it derived is unchanged
                or (
                    info.group.pg.pool == owner.pg.pool
                    and info.replica_priority == owner.role_priority.get(task.role, 0)
                )
            ):
                info.renew(owner)
            else:
                info = self._task_info(task, owner)
            owner.tasks.append(info)
            all_tasks.append(info)
            if status == _TASK_PENDING:
                owner.pending_status += 1
            if status in _TASK_HOLDING and task.node is not None:
                where = position.get(task.node)
                if where is None:
                    continue  # bound to a node that left the snapshot: holds nothing we see
                if status == _TASK_RELEASING:
                    self.releasing[where] = self.releasing.get(where, 0) + 1
                info.node = where
                info.held = True
                info.gpu_ids = task.gpu_ids
                bound.append(info)
            elif task.nominated_node is not None:
                info.nominated = position.get(task.nominated_node, -1)
        self._account_bound(bound)
        for g in groups:
            if len(g.tasks) > 1:  # most groups of a busy cluster are one plain pod
                g.tasks.sort(key=lambda t: (*growth_key(t), t.task.uid))
        # Demand: groups with pending tasks, or none at all (most groups have a running one).
        for g in [g for g in groups if g.pending_status or not g.tasks]:
            if g.queue < 0:
                continue  # a missing queue's demand belongs to no queue (it is refused)
            waiting = g.pending_tasks()
            if waiting:
                first = waiting[0].req
                if all(t.req is first for t in waiting):
                    self.queues.demand[g.queue] += first * len(waiting)
                else:
                    self.queues.demand[g.queue] += np.sum([t.req for t in waiting], axis=0)
            if not g.tasks and g.pg.phase == _GROUP_PENDING:
                self.queues.demand[g.queue] += self.min_resources(g)
        memo.close(by_uid, all_tasks)
        total = self.nodes.capacity[self.nodes.schedulable].sum(axis=0)
        self.cluster_total: NDArray[np.float64] = total
        self.queues.compute_deserved(total)

    # ---------------------------------------------------------------- construction helpers

    def _account_bound(self, bound: list[TaskInfo]) -> None:
        """What the snapshot's running pods hold, added up in a few array operations.

        The same bookkeeping as :meth:`move` (which a statement uses), done in bulk: a live
        cluster's session starts with tens of thousands of running pods.
        """
        if not bound:
            return
        nodes = np.fromiter((t.node for t in bound), dtype=np.int64, count=len(bound))
        reqs = request_rows(bound, self.space.size)
        np.subtract.at(self.free, nodes, reqs)
        tree = self.queues
        count = len(bound)
        queue_of = np.fromiter((t.group.queue for t in bound), np.int64, count)
        queued = queue_of >= 0
        leaving = queued & np.fromiter(
            (t.task.status == _TASK_RELEASING for t in bound), np.bool_, count
        )
        for rows, target in ((queued, tree.allocated), (leaving, tree.leaving)):
            per_queue = np.zeros_like(target)
            if rows.any():  # rows in task order, as a statement would add them one by one
                np.add.at(per_queue, queue_of[rows], reqs[rows])
            for q in range(tree.size - 1, -1, -1):  # children come after parents
                target[q] += per_queue[q]
                parent = int(tree.parent[q])
                if parent >= 0:
                    per_queue[parent] += per_queue[q]
        card_nodes: list[int] = []
        cards: list[int] = []
        shares: list[float] = []
        width = self.nodes.gpu_width
        pool_of = self.nodes.pool_of
        for t in bound:
            node_pool = pool_of[t.node]
            self.pool_tasks[node_pool] += 1
            t.group.held_count += 1
            t.group.changes += 1
            if t.pool != node_pool:
                t.group.borrowed_count += 1
                self.pool_borrowed[node_pool] += 1
            if t.gpu_ids:
                share = self._per_card(t, t.gpu_ids)
                for card in t.gpu_ids:
                    if 0 <= card < width:
                        card_nodes.append(t.node)
                        cards.append(card)
                        shares.append(share)
        if cards:
            np.subtract.at(self.gpu_free, (np.asarray(card_nodes), np.asarray(cards)), shares)
        for t in bound:
            if (t.gpu_cards or t.gpu_milli) and not t.gpu_ids:
                self._assume_cards(t)
        full = self.gpu_free >= GPU_MILLI_PER_CARD - CARD_EPS
        self.full_cards = full.sum(axis=1)
        self.nvlink_best = _largest_island(full, self.nodes.nvlink_group)
        self.numa_best = _largest_island(full, self.nodes.numa_group)

    def _assume_cards(self, t: TaskInfo) -> None:
        """A bound GPU pod without ``gpu-ids`` (e.g. created with ``spec.nodeName``) still
        holds cards: charge it the lowest-numbered cards left free once every pod with known
        ids is counted, so they are not handed out again."""
        free = self.gpu_free[t.node]
        if t.gpu_milli:
            fitting = [c for c in range(len(free)) if free[c] >= t.gpu_milli - CARD_EPS]
            ids: tuple[int, ...] = (fitting[0],) if fitting else ()
        else:
            whole = [c for c in range(len(free)) if free[c] >= _FULL]
            ids = tuple(whole[: t.gpu_cards])
        share = self._per_card(t, ids)
        for card in ids:
            free[card] -= share
        t.gpu_ids = ids

    def _group_static(self, pg: PodGroup) -> GroupStatic:
        queue = self.queues.position.get(pg.queue)
        if queue is None:
            queue = -1
        tenant_priority, can_preempt = 0, True
        if queue >= 0:
            for tenant in self.queues.specs[queue].tenants:
                who = pg.namespace if tenant.kind == TenantKind.NAMESPACE else pg.user
                if tenant.name == who:
                    tenant_priority, can_preempt = tenant.priority, tenant.can_preempt
                    break
        role_min = {k: v for k, v in pg.min_task_member.items() if v > 0}
        role_priority: dict[str, int] = {}
        for spec in pg.replica_specs:
            role_min[spec.name] = max(role_min.get(spec.name, 0), spec.min_replicas)
            role_priority[spec.name] = spec.priority
        return (
            queue,
            self.nodes.pool_position.get(pg.pool, 0),
            (tenant_priority, pg.priority),
            can_preempt,
            {k: v for k, v in role_min.items() if v > 0},
            role_priority,
            bool(pg.replica_specs),
        )

    def _task_info(self, task: Task, group: GroupInfo) -> TaskInfo:
        # Replicas of a job usually arrive one after another and share their requests,
        # selector, affinity and tolerations objects: everything derived from those (plus the
        # group, role and pool) is reused from the previous task as is.
        prev = self._prev_task
        if (
            prev is not None
            and prev[0] is task.requests
            and prev[1] is task.node_selector
            and prev[2] is task.affinity
            and prev[3] is task.tolerations
            and prev[4] is group
            and prev[5] == (task.gpu_milli, task.pool, task.role)
        ):
            derived = prev[6]
        else:
            derived = self._derive(task, group)
            self._prev_task = (
                task.requests,
                task.node_selector,
                task.affinity,
                task.tolerations,
                group,
                (task.gpu_milli, task.pool, task.role),
                derived,
            )
        req, cards, milli, shape, pool, priority, dims = derived
        return TaskInfo(
            task=task,
            group=group,
            req=req,
            gpu_cards=cards,
            gpu_milli=milli,
            shape=shape,
            pool=pool,
            replica_priority=priority,
            dims=dims,
        )

    def _derive(self, task: Task, group: GroupInfo) -> Derived:
        """(req, gpu cards, gpu milli, shape, pool, replica priority, dims) of a task."""
        space = self.space
        cards = int(task.requests.get(GPU, 0))
        milli = task.gpu_milli if cards == 0 and 0 < task.gpu_milli < GPU_MILLI_PER_CARD else 0
        # Runtimes often share one requests dict between a job's pods: try identity first.
        cached = self._by_identity.get(id(task.requests))
        if cached is not None and cached[0] is task.requests and cached[1] == milli:
            key, req, dims = cached[2], cached[3], cached[4]
        else:
            key = (tuple(sorted(task.requests.items())), milli)
            found = self.memo.vectors.get(key)
            if found is None:
                req = space.vector({k: v for k, v in task.requests.items() if k != GPU})
                req[space.gpu] = cards * GPU_MILLI_PER_CARD + milli
                req[space.pods] = 1.0
                req.flags.writeable = False  # shared between tasks of the same shape
                dims = tuple(int(d) for d in np.flatnonzero(req > 0) if d != space.gpu)
                self.memo.vectors[key] = (req, dims)
            else:
                req, dims = found
            self._by_identity[id(task.requests)] = (task.requests, milli, key, req, dims)
        pool_name = task.pool if task.pool is not None else group.pg.pool
        pool = self.nodes.pool_position.get(pool_name, 0)
        shape: tuple[object, ...] = (
            key,
            tuple(sorted(task.node_selector.items())) if task.node_selector else (),
            task.affinity,
            task.tolerations,
        )
        # Interned: equal shapes are one object, so grouping can compare by identity.
        shape = self.memo.shapes.setdefault(shape, shape)
        return req, cards, milli, shape, pool, group.role_priority.get(task.role, 0), dims

    # ---------------------------------------------------------------- raw accounting

    def adjust_card(self, node: int, card: int, delta: float) -> None:
        """Change a card's free milli, keeping the per-node card statistics in step."""
        if 0 <= card < self.nodes.gpu_width:
            self.gpu_free[node, card] += delta
            self._refresh_cards(node)
            self.touched.append(node)

    def _refresh_cards(self, node: int, free: list[float] | None = None) -> None:
        # Eight-ish cards: plain Python beats a handful of tiny numpy calls here, and nodes of
        # one hardware kind share island lists, so the answer is memoised per (kind, which
        # cards are whole).
        if free is None:
            free = self.gpu_free[node].tolist()
        full = tuple([v >= _FULL for v in free])
        nvlink = self.nodes.nvlink_islands[node]
        key = (id(nvlink), full)
        found = self._card_stats.get(key)
        if found is None:
            numa = self.nodes.numa_islands[node]
            found = (
                sum(full),
                max([sum([full[c] for c in island]) for island in nvlink], default=0),
                max([sum([full[c] for c in island]) for island in numa], default=0),
            )
            self._card_stats[key] = found
        self.full_cards[node], self.nvlink_best[node], self.numa_best[node] = found

    def move(
        self,
        tasks: Sequence[TaskInfo],
        node: int,
        gpu_ids: Sequence[tuple[int, ...]],
        sign: int,
        uniform: bool = False,
        usage: bool = True,
    ) -> None:
        """Account ``tasks`` onto (sign=+1) or off (sign=-1) ``node``, in one batch.

        ``uniform`` promises that every task shares the first one's request vector and group
        (replicas of one shape placed together), which spares checking it. ``usage=False``
        leaves queue usage to the caller (who adds a whole batch of nodes at once); undoing
        such a move with ``usage=True`` per node takes back the same whole numbers.

        Batching matters: a gang's replicas usually land several per node, and per-task numpy
        row updates dominated the session time before.
        """
        self.touched.append(node)
        t0 = tasks[0]
        count = len(tasks)
        uniform = (
            uniform or count == 1 or all(t.req is t0.req and t.group is t0.group for t in tasks)
        )
        total = t0.req * count if uniform else np.sum([t.req for t in tasks], axis=0)
        if sign > 0:
            self.free[node] -= total
        else:
            self.free[node] += total
        if any(gpu_ids):
            # A few writes to a Python list, stored back in one go, beat scalar numpy writes.
            free = self.gpu_free[node].tolist()
            width = self.nodes.gpu_width
            if uniform:  # one share per card for the whole batch
                share = sign * float(t0.gpu_milli or GPU_MILLI_PER_CARD)
                for ids in gpu_ids:
                    for card in ids:
                        if 0 <= card < width:
                            free[card] -= share
            else:
                for t, ids in zip(tasks, gpu_ids, strict=True):
                    share = sign * self._per_card(t, ids)
                    for card in ids:
                        if 0 <= card < width:
                            free[card] -= share
            self.gpu_free[node] = free
            self._refresh_cards(node, free)
        node_pool = self.nodes.pool_of[node]
        self.pool_tasks[node_pool] += sign * len(tasks)
        if uniform:
            t0.group.held_count += sign * len(tasks)
            t0.group.changes += 1
            self.moved_holdings.append(t0.group)
            if usage and t0.group.queue >= 0:
                self.queues.add_usage(t0.group.queue, total, sign)
        else:
            for t in tasks:
                t.group.held_count += sign
                t.group.changes += 1
                self.moved_holdings.append(t.group)
                if usage and t.group.queue >= 0:
                    self.queues.add_usage(t.group.queue, t.req, sign)
        for t in tasks:
            if t.pool != node_pool:
                t.group.borrowed_count += sign
                self.pool_borrowed[node_pool] += sign

    def _take(self, t: TaskInfo, node: int, gpu_ids: tuple[int, ...]) -> None:
        self.move((t,), node, (gpu_ids,), 1)

    def _give(self, t: TaskInfo, node: int, gpu_ids: tuple[int, ...]) -> None:
        self.move((t,), node, (gpu_ids,), -1)

    @staticmethod
    def _per_card(t: TaskInfo, gpu_ids: tuple[int, ...]) -> float:
        if not gpu_ids:
            return 0.0
        if t.gpu_milli:
            return float(t.gpu_milli)
        return float(GPU_MILLI_PER_CARD)

    # ---------------------------------------------------------------- queries

    def min_resources(self, g: GroupInfo) -> NDArray[np.float64]:
        """Resources the gang minimum needs (for enqueue): spec, else from its tasks."""
        if g.min_vector is not None:
            return g.min_vector
        if g.pg.min_resources is not None:
            vec = self.space.vector(g.pg.min_resources)
            vec[self.space.pods] = max(vec[self.space.pods], float(g.pg.min_member))
        else:
            chosen = complete_minimum(g, g.tasks)[0]
            first = chosen[0].req if chosen else None
            if first is not None and len(chosen) == 1:
                vec = first  # read-only already (shared by tasks of its shape)
            elif first is not None and all(t.req is first for t in chosen):
                vec = first * len(chosen)  # replicas of one shape share one vector
            else:
                vec = self.space.zeros()
                for t in chosen:
                    vec += t.req
        vec.flags.writeable = False
        g.min_vector = vec
        return vec

    def awaiting_victims(self, g: GroupInfo) -> int:
        """Pods still terminating on the nodes nominated for ``g`` (room already promised to
        it by an earlier preemption): while any remain, preempting again would take twice."""
        nodes = {t.nominated for t in g.tasks if t.nominated >= 0 and t.pending}
        return sum(self.releasing.get(node, 0) for node in nodes)

    def moved_recently(self, g: GroupInfo) -> bool:
        """Consolidation moved ``g`` less than ``consolidation_window`` seconds ago: it is not
        moved again, and until it is placed again it goes first (allocate, the gang plugin)."""
        at = g.pg.consolidated_at
        return at is not None and self.now - at < self.config.consolidation_window

    def backing_off(self, g: GroupInfo) -> bool:
        """Its Binding was rejected and the retry time has not come: place nothing of it."""
        return self.now < g.pg.retry_binding_at

    def is_borrowed(self, t: TaskInfo) -> bool:
        return t.node >= 0 and int(self.nodes.node_pool[t.node]) != t.pool

    def queue_name(self, g: GroupInfo) -> str:
        return self.queues.names[g.queue] if g.queue >= 0 else g.pg.queue or DEFAULT_QUEUE

    def explain(self, g: GroupInfo, explanation: Explanation) -> None:
        self.explanations[g.uid] = explanation
        self._lazy.pop(g.uid, None)

    def explain_lazy(self, g: GroupInfo, code: ReasonCode, message: Callable[[], str]) -> None:
        """Record an explanation whose text is only formatted if someone reads it."""
        self._lazy[g.uid] = (code, message)
        self.explanations.pop(g.uid, None)

    def explanation(self, uid: str) -> Explanation | None:
        lazy = self._lazy.pop(uid, None)
        if lazy is not None:
            self.explanations[uid] = Explanation(uid, lazy[0], lazy[1]())
        return self.explanations.get(uid)

    def has_explanation(self, uid: str) -> bool:
        return uid in self.explanations or uid in self._lazy

    def all_explanations(self) -> dict[str, Explanation]:
        for uid in list(self._lazy):
            self.explanation(uid)
        return self.explanations

    def privileged(self, g: GroupInfo) -> bool:
        mark = g.pg.preemption
        return mark is not None and mark.role == PreemptionRole.PRIVILEGED

    def will_evict(self, g: GroupInfo) -> bool:
        mark = g.pg.preemption
        return mark is not None and mark.role == PreemptionRole.WILL_EVICT


def request_rows(tasks: Sequence[TaskInfo], width: int) -> NDArray[np.float64]:
    """The tasks' request vectors as rows of one array (``width`` columns when empty).

    Tasks of one shape share one vector, so the rows are gathered from the distinct vectors:
    stacking tens of thousands of small arrays one by one costs far more."""
    slots: dict[int, int] = {}
    vectors: list[NDArray[np.float64]] = []
    for t in tasks:
        if id(t.req) not in slots:
            slots[id(t.req)] = len(vectors)
            vectors.append(t.req)
    if not vectors:
        return np.zeros((0, width))
    which = np.fromiter((slots[id(t.req)] for t in tasks), np.int64, len(tasks))
    return np.vstack(vectors)[which]


def _largest_island(full: NDArray[np.bool_], ids: NDArray[np.int32]) -> NDArray[np.int64]:
    """Per node, the most whole-free cards in one island (vectorised, for session open)."""
    best = np.zeros(full.shape[0], dtype=np.int64)
    for island in range(2 * full.shape[1]):
        np.maximum(best, ((ids == island) & full).sum(axis=1), out=best)
    return best


def growth_key(t: TaskInfo) -> tuple[float, float]:
    """The one task order of a group: higher replica priority first, then replica index.

    Elastic groups grow in this order and shrink in its reverse; the gang minimum is the
    earliest tasks in it (:func:`complete_minimum`). The gang plugin registers it as the task
    order, so every action sees the same order.
    """
    return (-float(t.replica_priority), float(t.task.index))


def complete_minimum(
    g: GroupInfo,
    candidates: Sequence[TaskInfo],
    have: int = 0,
    have_per_role: Mapping[str, int] | None = None,
) -> tuple[list[TaskInfo], bool]:
    """The one definition of "which tasks form the gang minimum".

    ``candidates`` are in growth order; ``have`` tasks (``have_per_role`` per role) already
    count towards the minimum. Each role's missing minimum is filled first, with its earliest
    candidates, then the earliest remaining candidates until ``minMember``. Returns the chosen
    candidates and whether they complete the minimum.
    """
    per_role = have_per_role or {}
    chosen: list[TaskInfo] = []
    taken: set[int] = set()
    complete = True
    for role, need in g.role_min.items():
        missing = need - per_role.get(role, 0)
        for i, t in enumerate(candidates):
            if missing <= 0:
                break
            if t.task.role == role:
                chosen.append(t)
                taken.add(i)
                missing -= 1
        complete = complete and missing <= 0
    for i, t in enumerate(candidates):
        if have + len(chosen) >= g.pg.min_member:
            break
        if i not in taken:
            chosen.append(t)
    return chosen, complete and have + len(chosen) >= g.pg.min_member
