"""quota: the hierarchical elastic queue model (see queues.py) at every extension point.

* queue order: the queue furthest below its deserved share goes first (dominant
  allocated/deserved ratio), so water-filled shares are what allocation converges to;
* enqueue: the queue must exist and be Open; the gang minimum must fit under the capability of
  the queue and every ancestor (counting groups already Inqueue; for a group within its queue's
  share, not counting what an ancestor's other subtrees hold above their share, which reclaim
  takes back); and it must fit in idle room,
  or within the queue's deserved share, or in idle + reclaimable room (resources other queues
  hold above their deserved share, lower-priority jobs of the same queue, borrowers on the
  group's pool). Counting reclaimable room is what lets reclaim ever start;
* allocatable: capability of the queue chain (overcommit queues admit overcommit jobs beyond
  it); during allocate's first pass, also the queue's deserved share - always, for a
  non-preemptible group (``NonPreemptibleOverQuota``: borrowed room is reclaimed by eviction,
  which it may not suffer);
* victims (reclaim): other queues' groups, only from a reclaimable queue above its deserved share,
  never taking it below its guarantee, and only for a queue that stays within its own deserved
  share; overcommitted groups of a queue above its capability always qualify;
* victim order: overcommitted groups first, then the queue most over its share.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from operators.scheduler.decisions import ReasonCode
from operators.scheduler.framework import PERMIT, AllocatePass, Purpose, Verdict, Vote
from operators.scheduler.snapshot import GroupPhase
from operators.scheduler.state import request_rows

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from operators.scheduler.framework import Extensions, SortKey, VictimUnit
    from operators.scheduler.state import GroupInfo, SessionState

_EPS = 1e-6


def _within(
    have: NDArray[np.float64], limit: NDArray[np.float64], need: NDArray[np.float64]
) -> bool:
    """``have <= limit`` on every dimension ``need`` uses."""
    used = need > 0
    return bool((have[used] <= limit[used] + _EPS).all())


_RUNNING = (GroupPhase.RUNNING, GroupPhase.UNKNOWN)


class Quota:
    def __init__(self, state: SessionState) -> None:
        self.state = state
        self.tree = state.queues
        # Gang minimums admitted but not yet holding resources, per queue (rolled up): Inqueue
        # groups, and groups consolidation moved within its window whatever their phase (the
        # status pass may still write Running while the watch shows the moved pods, and once
        # they are deleted such a group holds nothing until they are re-created).
        self.reserved = np.zeros_like(self.tree.allocated)
        self._by_group: dict[str, NDArray[np.float64]] = {}
        # Admission asks for idle and reclaimable room once per Pending group; both only
        # change when holdings do, so they are computed once per holdings version (below).
        self._idle_at: tuple[object, NDArray[np.float64]] | None = None
        self._held: _HeldIndex | None = None
        # Admission verdicts of groups holding nothing, by what the verdict reads of the group,
        # valid while nothing it reads of the session moves (SessionConfig.equivalence_cache):
        # a backlog of look-alike plain pods is refused once, not once per pod.
        self._reserved_version = 0
        self._verdicts: dict[tuple[object, ...], Verdict] = {}
        self._verdicts_at: tuple[object, ...] | None = None
        for g in state.groups:
            admitted = g.phase == GroupPhase.INQUEUE or (
                g.phase in _RUNNING and state.moved_recently(g)
            )
            if g.queue >= 0 and admitted and not g.gang_satisfied():
                self.reserve(g, state.min_resources(g))

    def reserve(self, g: GroupInfo, need: NDArray[np.float64]) -> None:
        if g.queue < 0 or g.uid in self._by_group:
            return
        self._by_group[g.uid] = need
        self.reserved[self.tree.ancestors[g.queue]] += need
        self._reserved_version += 1

    def release(self, g: GroupInfo) -> None:
        need = self._by_group.pop(g.uid, None)
        if need is not None:
            self.reserved[self.tree.ancestors[g.queue]] -= need
            self._reserved_version += 1

    # ------------------------------------------------------------------ extension points

    def queue_key(self, q: int) -> SortKey:
        # Groups of a missing queue go last (they are refused with an explanation anyway).
        return (self.tree.share(q),) if q >= 0 else (float("inf"),)

    def enqueue(self, g: GroupInfo, need: NDArray[np.float64]) -> Verdict:
        if g.held_count > 0 or g.queue < 0 or not self.state.config.equivalence_cache:
            return self._enqueue(g, need)
        # Everything _enqueue reads of a group holding nothing (_reclaimable's key included;
        # a missing queue is named in its verdict, so those are not shared).
        key = (g.queue, g.pool, g.priority, g.can_preempt, g.pg.overcommit, need.tobytes())
        version = (*self._version(), self._reserved_version, self.tree.deserved.tobytes())
        if self._verdicts_at != version:
            self._verdicts, self._verdicts_at = {}, version
        found = self._verdicts.get(key)
        if found is None:
            found = self._verdicts[key] = self._enqueue(g, need)
        return found

    def _enqueue(self, g: GroupInfo, need: NDArray[np.float64]) -> Verdict:
        tree, space = self.tree, self.state.space
        name = g.pg.queue
        if g.queue < 0:
            return Verdict(Vote.REJECT, ReasonCode.QUEUE_MISSING, f"queue {name!r} does not exist")
        if not tree.open[g.queue]:
            why = tree.closed_reason[g.queue] or "it is not Open"
            return Verdict(Vote.REJECT, ReasonCode.QUEUE_CLOSED, f"queue {name!r} is closed: {why}")
        q = g.queue
        with_reserved = self.reserved[q] + need
        capped = tree.capped_by(q, need, overcommit=g.pg.overcommit, pending=self.reserved)
        if capped is not None and capped != q:
            capped = tree.capped_by(
                q, need, overcommit=g.pg.overcommit, pending=self._after_reclaim(g, need)
            )
        if capped is not None:
            cap = tree.capability[capped]
            return Verdict(
                Vote.REJECT,
                ReasonCode.QUOTA_EXCEEDED,
                f"queue {tree.names[capped]!r} capability ({space.describe(cap)}) would be "
                f"exceeded: it holds {space.describe(tree.allocated[capped])} and has "
                f"{space.describe(self.reserved[capped])} admitted, the gang minimum needs "
                f"{space.describe(need)}",
            )
        idle = self._idle() - self.reserved[0]
        if _within(need, idle, need):
            return PERMIT
        if _within(tree.allocated[q] + with_reserved, tree.deserved[q], need):
            return PERMIT  # within its fair share: reclaim will make room
        reclaimable = self._reclaimable(g)
        if _within(need, idle + reclaimable, need):
            return PERMIT
        return Verdict(
            Vote.REJECT,
            ReasonCode.NOT_ADMITTED,
            f"gang minimum needs {space.describe(need)}; idle {space.describe(np.maximum(idle, 0))}"
            f", reclaimable {space.describe(reclaimable)}",
        )

    def allocatable(self, g: GroupInfo, need: NDArray[np.float64], phase: AllocatePass) -> Verdict:
        tree, space = self.tree, self.state.space
        if g.queue < 0:
            return Verdict(
                Vote.REJECT, ReasonCode.QUEUE_MISSING, f"queue {g.pg.queue!r} does not exist"
            )
        capped = tree.capped_by(g.queue, need, overcommit=g.pg.overcommit)
        if capped is not None:
            return Verdict(
                Vote.REJECT,
                ReasonCode.QUOTA_EXCEEDED,
                f"queue {tree.names[capped]!r} would exceed its capability "
                f"({space.describe(tree.capability[capped])}): it holds "
                f"{space.describe(tree.allocated[capped])}, needs {space.describe(need)} more",
            )
        if phase is AllocatePass.SHARE or not g.pg.preemptible:
            # The whole chain at once: rows are the queue and its ancestors.
            chain = tree.ancestors[g.queue]
            over = (tree.allocated[chain] + need > tree.deserved[chain] + _EPS) & (need > 0)
            if over.any():
                q = int(chain[int(np.flatnonzero(over.any(axis=1))[0])])
                if not g.pg.preemptible:
                    # Borrowed room is taken back by preemption, which it may not suffer.
                    return Verdict(
                        Vote.REJECT,
                        ReasonCode.NON_PREEMPTIBLE_OVER_QUOTA,
                        f"non-preemptible: runs only within its queues' deserved share; queue "
                        f"{tree.names[q]!r} holds {space.describe(tree.allocated[q])} of "
                        f"{space.describe(tree.deserved[q])} deserved, it needs "
                        f"{space.describe(need)}",
                    )
                return Verdict(
                    Vote.REJECT,
                    ReasonCode.QUOTA_EXCEEDED,
                    f"queue {tree.names[q]!r} is at its deserved share",
                )
        return PERMIT

    def victim_filter(
        self, preemptor: GroupInfo, unit: VictimUnit, purpose: Purpose
    ) -> bool | None:
        tree = self.tree
        vq, pq = unit.group.queue, preemptor.queue
        if purpose is Purpose.PREEMPT:
            return None if vq == pq else False
        if unit.borrowed and self._on_pool(unit, preemptor.pool):
            return None  # the owner pool takes its nodes back: pool rules decide
        if vq == pq or vq < 0 or pq < 0:
            return False
        need = self.state.min_resources(preemptor)
        if not _within(tree.allocated[pq] + need, tree.deserved[pq], need):
            return False  # the reclaiming queue would itself go above its share
        alloc = tree.kept(vq)  # its pods already terminating are no room it could still give
        if not (alloc > tree.deserved[vq] + _EPS).any() and not unit.group.pg.overcommit:
            return False
        freed = np.sum([t.req for t in unit.tasks], axis=0)
        if (
            unit.group.pg.overcommit
            and tree.overcommit[vq]
            and (alloc > tree.capability[vq] + _EPS).any()
        ):
            return True
        if not tree.reclaimable[vq]:
            return False
        # How far down each level may go (deserved, guarantees) is the budget's call: it
        # counts every unit one reclaim takes.
        return bool(((alloc > tree.deserved[vq] + _EPS) & (freed > 0)).any())

    def budget(self, preemptor: GroupInfo, purpose: Purpose) -> _QueueFloors:
        return _QueueFloors(self, preemptor, purpose)

    def overused(self, q: int) -> bool:
        """At or above deserved on every dimension it deserves anything of (and holds some)."""
        if q < 0:
            return False
        deserved = self.tree.deserved[q]
        held = deserved > 0
        if not held.any():
            return bool(self.tree.allocated[q].any())
        return bool((self.tree.allocated[q][held] >= deserved[held] - _EPS).all())

    def victim_precheck(self, preemptor: GroupInfo, purpose: Purpose) -> bool | None:
        """Queue reclaim needs the reclaiming queue to stay within its deserved share."""
        if purpose is not Purpose.RECLAIM or preemptor.queue < 0:
            return None
        tree = self.tree
        need = self.state.min_resources(preemptor)
        if not _within(
            tree.allocated[preemptor.queue] + need, tree.deserved[preemptor.queue], need
        ):
            return False
        return None

    def victim_key(self, unit: VictimUnit) -> SortKey:
        g = unit.group
        over = bool(g.pg.overcommit and g.queue >= 0 and self.tree.overcommit[g.queue])
        share = self.tree.share(g.queue) if g.queue >= 0 else 0.0
        return (0.0 if over else 1.0, -share)

    # ------------------------------------------------------------------ helpers

    def _version(self) -> tuple[object, ...]:
        """Changes whenever holdings (``SessionState.move`` logs to ``touched``) or queue usage
        (added by callers after a move) may have changed."""
        return (len(self.state.touched), self.tree.allocated.tobytes())

    def _idle(self) -> NDArray[np.float64]:
        version = self._version()
        if self._idle_at is None or self._idle_at[0] != version:
            state = self.state
            idle = np.asarray(np.maximum(state.free[state.nodes.schedulable], 0.0).sum(axis=0))
            self._idle_at = (version, idle)
        return self._idle_at[1]

    def _on_pool(self, unit: VictimUnit, pool: int) -> bool:
        node_pool = self.state.nodes.node_pool
        return any(t.node >= 0 and node_pool[t.node] == pool for t in unit.tasks)

    def _after_reclaim(self, g: GroupInfo, need: NDArray[np.float64]) -> NDArray[np.float64]:
        """``reserved``, minus what reclaim would take back for ``g`` under each ancestor: what
        the ancestor's other reclaimable subtrees hold above their share (and guarantee).

        Without this credit an ancestor's capability, filled by a sibling that borrowed above
        its share, refuses admission, and reclaim (which runs only for admitted groups) never
        starts. Reclaim acts only for a group within its queue's deserved share."""
        tree, q = self.tree, g.queue
        pending = self.reserved.copy()
        if not _within(tree.allocated[q] + self.reserved[q] + need, tree.deserved[q], need):
            return pending
        chain = tree.chain_rows[q]
        credit = self.state.space.zeros()
        for below, level in itertools.pairwise(chain):
            for c in tree.children[level]:
                if c != below and tree.reclaimable[c]:
                    floor = np.maximum(tree.deserved[c], tree.guarantee[c])
                    credit = credit + np.maximum(tree.allocated[c] - floor, 0.0)
            pending[level] -= credit
        return pending

    def _reclaimable(self, g: GroupInfo) -> NDArray[np.float64]:
        """What preempt and the owner pool could free for ``g``: held tasks of lower-priority
        groups of its queue (if ``g`` may preempt) and tasks borrowed into its pool.

        Room other queues hold above their share is no credit: reclaim frees it only for a
        queue within its deserved share, which enqueue admits without any credit.

        Summed in the same order as the plain loop over groups and their tasks, so the figure
        is bit for bit the same; but the held tasks are indexed once per holdings version, so
        each Pending group costs a few vector operations instead of a walk over every task of
        the cluster. Groups that hold nothing and agree on everything the selection reads
        (pool, queue, priority, may preempt) get the same figure: it is computed once per
        holdings version for them (a backlog of look-alike plain pods asks it thousands of
        times)."""
        held = self._held_index()
        if g.held_count > 0:
            return self._reclaimable_rows(held, g)
        key = (g.pool, g.queue, g.priority, g.can_preempt)
        found = held.alike.get(key)
        if found is None:
            found = held.alike[key] = self._reclaimable_rows(held, g)
        return found.copy()

    def _reclaimable_rows(self, held: _HeldIndex, g: GroupInfo) -> NDArray[np.float64]:
        over = self.state.space.zeros()
        if not len(held.req):
            return over.copy()
        pick = (held.borrowed_pool == g.pool) & (held.borrowed_pool >= 0)
        if g.can_preempt:
            lower = (held.tenant < g.priority[0]) | (
                (held.tenant == g.priority[0]) & (held.job < g.priority[1])
            )
            pick |= (held.queue == g.queue) & lower
        pick &= held.group != g.index
        rows = held.req[pick]
        if not len(rows):
            return over.copy()
        # cumsum adds row after row, exactly like the loop it replaces.
        return np.asarray(np.cumsum(np.vstack((over, rows)), axis=0)[-1])

    def _held_index(self) -> _HeldIndex:
        version = self._version()
        if self._held is None or self._held.version != version:
            self._held = _build_held_index(self.state, version)
        return self._held


def _build_held_index(state: SessionState, version: tuple[object, ...]) -> _HeldIndex:
    """Every held task's row, in group then task order, built column by column: a full
    cluster holds tens of thousands of tasks, and a Python tuple per row cost more than the
    whole admission pass it serves."""
    held = [t for g in state.groups for t in g.tasks if t.held]
    count = len(held)
    group = np.fromiter((t.group.index for t in held), np.int64, count)
    queue = np.fromiter((t.group.queue for t in held), np.int64, count)
    tenant = np.fromiter((t.group.priority[0] for t in held), np.int64, count)
    job = np.fromiter((t.group.priority[1] for t in held), np.int64, count)
    node = np.fromiter((t.node for t in held), np.int64, count)
    own_pool = np.fromiter((t.pool for t in held), np.int64, count)
    # SessionState.is_borrowed, per row: on a node of another pool than its own.
    node_pool = state.nodes.node_pool[np.maximum(node, 0)].astype(np.int64)
    borrowed = (node >= 0) & (node_pool != own_pool)
    return _HeldIndex(
        version=version,
        group=group,
        queue=queue,
        tenant=tenant,
        job=job,
        borrowed_pool=np.where(borrowed, node_pool, -1),
        req=request_rows(held, state.space.size),
    )


@dataclass(frozen=True, slots=True)
class _HeldIndex:
    """Every held task of the session, in group then task order, with what decides whether it
    counts as reclaimable for a given Pending group."""

    version: tuple[object, ...]
    group: NDArray[np.int64]
    queue: NDArray[np.int64]
    tenant: NDArray[np.int64]  # (tenant, job) priority of its group
    job: NDArray[np.int64]
    borrowed_pool: NDArray[np.int64]  # pool it runs in when borrowed there, else -1
    req: NDArray[np.float64]
    # Reclaimable room of groups holding nothing, by (pool, queue, priority, may preempt).
    alike: dict[tuple[object, ...], NDArray[np.float64]] = field(default_factory=dict)


class _QueueFloors:
    """What one reclaim may take from each queue, counted over every unit it takes: a level
    gives only while it is above its deserved share (on a resource the unit frees) and never
    goes below its guarantee. The levels are the victim's queue and its ancestors below the
    lowest queue it shares with the reclaiming queue (above that, room only moves inside)."""

    __slots__ = ("preemptor", "purpose", "quota", "taken")

    def __init__(self, quota: Quota, preemptor: GroupInfo, purpose: Purpose) -> None:
        self.quota = quota
        self.preemptor = preemptor
        self.purpose = purpose
        self.taken: dict[int, NDArray[np.float64]] = {}

    def _levels(self, unit: VictimUnit) -> tuple[list[int], NDArray[np.float64] | None]:
        quota, g = self.quota, unit.group
        pq, vq = self.preemptor.queue, g.queue
        if self.purpose is not Purpose.RECLAIM or vq < 0 or pq < 0 or vq == pq:
            return [], None
        tree = quota.tree
        if (
            g.pg.overcommit
            and tree.overcommit[vq]
            and (tree.kept(vq) > tree.capability[vq] + _EPS).any()
        ):
            return [], None  # overcommitted beyond capability: the first to go
        # A unit borrowed wholly onto the reclaiming group's pool goes back to it whatever the
        # quota (pool rules decide). A unit only partly borrowed there is a job the queue loses
        # whole, its borrowed pods included: all of it counts against the floors.
        pool_of, own = quota.state.nodes.pool_of, self.preemptor.pool
        held = [t for t in unit.tasks if t.held and not t.evicted]
        if all(pool_of[t.node] == own and t.pool != own for t in held):
            return [], None
        return tree.below(vq, pq), np.sum([t.req for t in held], axis=0)

    def admits(self, unit: VictimUnit) -> bool:
        levels, freed = self._levels(unit)
        if freed is None:
            return True
        tree = self.quota.tree
        uses = freed > 0
        for q in levels:
            alloc = tree.kept(q) - self.taken.get(q, 0.0)
            if not (alloc[uses] > tree.deserved[q][uses] + _EPS).any():
                return False
            if not (alloc[uses] - freed[uses] >= tree.guarantee[q][uses] - _EPS).all():
                return False
        return True

    def take(self, unit: VictimUnit) -> None:
        levels, freed = self._levels(unit)
        if freed is None:
            return
        for q in levels:
            self.taken[q] = self.taken.get(q, 0.0) + freed


def register(state: SessionState, ext: Extensions) -> Quota:
    quota = Quota(state)
    ext.queue_keys.append(quota.queue_key)
    ext.enqueue_checks.append(quota.enqueue)
    ext.allocatable_checks.append(quota.allocatable)
    ext.victim_filters.append(quota.victim_filter)
    ext.victim_keys.append(quota.victim_key)
    ext.victim_prechecks.append(quota.victim_precheck)
    ext.victim_budgets.append(quota.budget)
    ext.overused_checks.append(quota.overused)
    ext.enqueued_hooks.append(quota.reserve)
    ext.placed_hooks.append(quota.release)
    return quota
