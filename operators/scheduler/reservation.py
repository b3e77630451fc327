"""Backfill with reservation: room held for the highest-ranked gang that does not fit yet.

Without it, a gang that needs more room than is idle waits while lower-ranked small jobs keep
taking every hole that running work leaves behind, so it can starve forever. With it, the first
gang(s) that allocate fails to place for lack of room *in its own pool* (at most
``SessionConfig.max_reservations`` per pool, in allocate's order, i.e. by rank) reserves a
concrete set of nodes that would hold the gang once the work running there finishes. Later
placements of *other* groups in this session (allocate, backfill's borrowing and growth) may
not put new pods on those nodes; they may still use every unreserved hole. So the reserved
nodes only drain, and the gang fits there once they have.

Which nodes (no clock, so "finishes soonest" is approximated by "least in use"):

1. only nodes of the gang's own pool that pass its predicates and that no higher-ranked
   reservation holds; per node, ``eventual`` = replicas of the shape that fit on the empty node
   (capacity net of foreign pods);
2. a hard network-topology gang reserves inside one domain, finest tier first up to its
   ``highestTier`` (as placement does); among the domains whose ``eventual`` room holds the
   gang, the one where most replicas fit *now* wins (lowest domain id on ties);
3. inside that scope nodes are taken most-free-first: by replicas that fit now (descending),
   then by the mean free fraction of the requested resources (descending), then node index,
   until their ``eventual`` room holds the gang. Shapes of a mixed gang are served hardest
   first, each from the nodes the previous shapes left.

If even the eventual room cannot hold the gang, nothing is reserved (the explanation says why it
does not fit). Nothing is remembered between sessions: the reservation is derived again from each
snapshot; because nothing new lands on reserved nodes, they stay the freest ones, so the same
nodes tend to be chosen again until the gang fits. Preempt and reclaim ignore reservations
(eviction is how higher-priority work gets room, and a nomination is itself a reservation),
except the room an earlier session's consolidation planned a moved job into (``unheld``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from operators.scheduler.placement import by_shape, topology_request
from operators.scheduler.shapeviews import counts_at
from operators.scheduler.snapshot import GPU_MILLI_PER_CARD, GroupPhase, TopologyMode
from operators.scheduler.state import CARD_EPS, Placement

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from operators.scheduler.framework import Extensions
    from operators.scheduler.state import GroupInfo, SessionState, TaskInfo

_NAMES_SHOWN = 8  # node names spelled out in an explanation; the rest are counted
_ADMITTED = (GroupPhase.INQUEUE, GroupPhase.RUNNING, GroupPhase.UNKNOWN)


@dataclass(frozen=True, slots=True)
class Reservation:
    group: GroupInfo
    pool: int
    nodes: tuple[int, ...]


class Reservations:
    """The session's reservations and the node masks they imply."""

    def __init__(self, state: SessionState, ext: Extensions, limit: int) -> None:
        self.state = state
        self.ext = ext
        self.limit = limit
        self.owner: NDArray[np.int64] = np.full(state.nodes.size, -1, dtype=np.int64)
        self.items: list[Reservation] = []
        self.version = 0
        # id(mask) -> (mask, version, mask without reserved nodes); node-set masks repeat all
        # session, so the AND is done once per reservation change. Holding ``mask`` keeps its
        # id unique.
        self._free_of: dict[int, tuple[NDArray[np.bool_], int, NDArray[np.bool_]]] = {}
        self._eventual: dict[object, NDArray[np.float64]] = {}
        # Room nominated for a preemptor by an earlier session (Task.nominated_node) is held
        # for it until it binds: other groups place nothing on those nodes meanwhile, or the
        # preemptor would find its room taken and evict a second victim. So is the room a
        # consolidation plan placed a moved job into (PodGroup.consolidated_to), within the
        # window, until the job is placed again: its pods are re-created some time after the
        # move, and a group that arrived meanwhile would take the room the plan counted on.
        self.held_for: dict[int, list[int]] = {}
        # Per holder, its pods planned on each node: (node, pods), pods None = its pending pods
        # nominated there.
        self._planned: dict[int, list[tuple[int, int | None]]] = {}
        self._moved: set[int] = set()  # holders whose hold is a move's planned room
        position = state.nodes.position
        for g in state.groups:
            moved_to = g.pg.consolidated_to
            if not g.pending_status and not moved_to:
                continue  # nothing of it can wait (most groups of a busy cluster)
            if g.gang_satisfied():
                continue
            planned: list[tuple[int, int | None]] = []
            if g.pending_status:
                nominated = {t.nominated for t in g.pending_tasks() if t.nominated >= 0}
                planned.extend((n, None) for n in sorted(nominated))
            if moved_to and g.phase in _ADMITTED and state.moved_recently(g) and not _has_room(g):
                planned.extend(
                    (position[name], pods) for name, pods in moved_to if name in position
                )
                self._moved.add(g.index)
            if planned:
                self._planned[g.index] = planned
                self.held_for[g.index] = sorted({n for n, _ in planned})
        self.held: NDArray[np.bool_] = np.zeros(state.nodes.size, dtype=np.bool_)
        # Holders whose nodes are held for another group too: what each may take there.
        self.shared: dict[int, dict[int, int | None]] = {}
        self._hold()

    # ------------------------------------------------------------------ masks

    def allowed(self, g: GroupInfo, mask: NDArray[np.bool_]) -> NDArray[np.bool_]:
        """``mask`` minus the nodes reserved for groups other than ``g``."""
        if not self.items and not self.held_for:
            return mask
        own = self.held_for.get(g.index)
        if own is not None or any(r.group is g for r in self.items):
            mine = ((self.owner < 0) | (self.owner == g.index)) & ~self.held
            if own is not None:
                mine[own] = True
            return np.asarray(mask & mine, dtype=np.bool_)
        found = self._free_of.get(id(mask))
        if found is not None and found[0] is mask and found[1] == self.version:
            return found[2]
        out = mask & (self.owner < 0) & ~self.held
        self._free_of[id(mask)] = (mask, self.version, out)
        return out

    def unheld(self, g: GroupInfo, mask: NDArray[np.bool_]) -> NDArray[np.bool_]:
        """``mask`` minus the nodes held for jobs other than ``g`` that an earlier session
        moved there (preempt and reclaim: a nominated gang's hold is room eviction may take,
        a moved job's is the place its move promised it)."""
        movers = [i for i in self.held_for if i != g.index and i in self._moved]
        if not movers:
            return mask
        out = mask.copy()
        for i in movers:
            out[self.held_for[i]] = False
        return out

    def release_placed(self) -> None:
        """Groups that got room after all (bound, or nominated by a preemption) release theirs."""
        keep = [r for r in self.items if not _has_room(r.group)]
        groups = self.state.groups
        holds = {i: n for i, n in self.held_for.items() if not _has_room(groups[i])}
        if len(keep) == len(self.items) and len(holds) == len(self.held_for):
            return
        self.items = keep
        self.held_for = holds
        self._hold()
        self.owner[:] = -1
        for r in keep:
            self.owner[list(r.nodes)] = r.group.index
        self.version += 1

    def _hold(self) -> None:
        """The held mask, and what each holder may take on a node held for another one too:
        only the pods planned for it there (the plans that put several groups' pods on one
        node fitted them all together; any one taking more leaves another without room)."""
        self.held[:] = False
        holders = np.zeros(len(self.held), dtype=np.int64)
        for nodes in self.held_for.values():
            self.held[nodes] = True
            holders[nodes] += 1
        self.shared = {}
        if not self.held_for or int(holders.max()) < 2:
            return
        for i in self.held_for:
            caps = {n: pods for n, pods in self._planned[i] if holders[n] > 1}
            if caps:
                self.shared[i] = caps

    def cap(self, tasks: list[TaskInfo], counts: NDArray[np.float64]) -> None:
        """Lower ``counts`` (replicas of ``tasks``' shape that fit, per node) on nodes held for
        their group and for others too, to the pods planned for the group there."""
        caps = self.shared.get(tasks[0].group.index)
        if caps is None:
            return
        for node, pods in caps.items():
            limit = sum(1 for t in tasks if t.nominated == node) if pods is None else pods
            counts[node] = min(counts[node], limit)

    def full(self, pool: int) -> bool:
        """No more reservations in ``pool`` this session."""
        return sum(1 for r in self.items if r.pool == pool) >= self.limit

    def of(self, g: GroupInfo) -> Reservation | None:
        for r in self.items:
            if r.group is g:
                return r
        return None

    def names(self, r: Reservation) -> tuple[str, ...]:
        names = self.state.nodes.names
        return tuple(names[n] for n in r.nodes)

    def describe(self, r: Reservation) -> str:
        names = self.names(r)
        shown = ",".join(names[:_NAMES_SHOWN])
        more = f" (+{len(names) - _NAMES_SHOWN} more)" if len(names) > _NAMES_SHOWN else ""
        return (
            f"reserved nodes {shown}{more} for gang {r.group.pg.namespace}/{r.group.pg.name}: "
            "no lower-ranked pods are placed there while they drain"
        )

    # ------------------------------------------------------------------ choosing nodes

    def reserve(self, g: GroupInfo, tasks: list[TaskInfo], pool_mask: NDArray[np.bool_]) -> None:
        """Reserve nodes for ``g``'s ``tasks`` (which did not fit in ``pool_mask`` now)."""
        if not tasks or self.limit <= 0 or self.of(g) is not None:
            return
        if g.index in self.held_for or any(t.nominated >= 0 for t in g.tasks):
            return  # room promised by an earlier preemption or move is its hold already
        if self.full(g.pool):
            return
        base = pool_mask & self.state.nodes.schedulable & (self.owner < 0) & ~self.held
        chosen = self._choose(g, tasks, base)
        if not chosen:
            return
        nodes = tuple(sorted(chosen))
        self.items.append(Reservation(g, g.pool, nodes))
        self.owner[list(nodes)] = g.index
        self.version += 1

    def _choose(
        self, g: GroupInfo, tasks: list[TaskInfo], base: NDArray[np.bool_]
    ) -> list[int] | None:
        nodes = self.state.nodes
        request = topology_request(self.state, g)
        if (
            request is None
            or request.mode != TopologyMode.HARD
            or nodes.topology is None
            or not nodes.tier_domains
        ):
            return self._fill(tasks, base)
        highest = nodes.topology.level_index(request.highest_tier) if request.highest_tier else 0
        highest = highest or 0
        shapes = by_shape(tasks)
        for level in range(len(nodes.tier_domains) - 1, highest - 1, -1):
            # Per domain, vectorised: does the eventual room hold every shape, and how much
            # of the hardest shape fits now (the "soonest" proxy)?
            domains = nodes.tier_domains[level]
            size = int(domains.max()) + 1
            feasible = np.ones(size, dtype=np.bool_)
            for shape_tasks in shapes:
                t = shape_tasks[0]
                allowed = base & self.ext.feasible(t)
                eventual = np.bincount(
                    domains, weights=self._eventual_counts(t) * allowed, minlength=size
                )
                feasible &= eventual >= len(shape_tasks)
            if not feasible.any():
                continue
            t0 = shapes[0][0]
            now = np.bincount(
                domains, weights=counts_at(self.state, t0, None) * base, minlength=size
            )
            # argmax takes the lowest domain id among equals.
            domain = int(np.argmax(np.where(feasible, now, -1.0)))
            chosen = self._fill(tasks, base & (domains == domain))
            if chosen is not None:
                return chosen
        return None

    def _fill(self, tasks: list[TaskInfo], scope: NDArray[np.bool_]) -> list[int] | None:
        """Most-free-first nodes of ``scope`` whose eventual room holds every shape."""
        taken = np.zeros(len(scope), dtype=np.bool_)
        chosen: list[int] = []
        for shape_tasks in by_shape(tasks):
            t = shape_tasks[0]
            allowed = scope & self.ext.feasible(t) & ~taken
            eventual = self._eventual_counts(t) * allowed
            need = len(shape_tasks)
            if eventual.sum() < need:
                return None
            cand = np.flatnonzero(eventual)
            now = counts_at(self.state, t, cand)
            order = np.lexsort((cand, -self._free_fraction(t, cand), -now))
            room = np.cumsum(eventual[cand[order]])
            upto = int(np.searchsorted(room, need)) + 1
            picked = cand[order[:upto]]
            taken[picked] = True
            chosen.extend(int(n) for n in picked.tolist())
        return chosen

    def _free_fraction(self, t: TaskInfo, nodes: NDArray[np.int64]) -> NDArray[np.float64]:
        state = self.state
        dims = [d for d in t.dims if d != state.space.pods]
        if t.gpu_cards or t.gpu_milli:
            dims.append(state.space.gpu)
        if not dims:
            return np.zeros(len(nodes), dtype=np.float64)
        cols = np.asarray(dims, dtype=np.int64)
        cap = state.nodes.capacity[np.ix_(nodes, cols)]
        free = state.free[np.ix_(nodes, cols)]
        with np.errstate(divide="ignore", invalid="ignore"):
            frac = np.where(cap > 0, free / np.where(cap > 0, cap, 1.0), 0.0)
        return np.asarray(frac.mean(axis=1), dtype=np.float64)

    def _eventual_counts(self, t: TaskInfo) -> NDArray[np.float64]:
        """Replicas shaped like ``t`` that fit on each node once its running work is gone."""
        found = self._eventual.get(t.shape[0])
        if found is not None:
            return found
        nodes = self.state.nodes
        cap = nodes.capacity
        counts = np.full(nodes.size, 1e9)
        for d in t.dims:
            np.minimum(counts, np.floor(cap[:, d] / t.req[d]), out=counts)
        cards = nodes.gpu_capacity
        if t.gpu_cards:
            full = (cards >= GPU_MILLI_PER_CARD - CARD_EPS).sum(axis=1)
            np.minimum(counts, full // t.gpu_cards, out=counts)
        elif t.gpu_milli:
            per_card = np.floor(np.maximum(cards, 0.0) / t.gpu_milli).sum(axis=1)
            np.minimum(counts, per_card, out=counts)
        np.maximum(counts, 0.0, out=counts)
        self._eventual[t.shape[0]] = counts
        return counts


def _has_room(g: GroupInfo) -> bool:
    return g.gang_satisfied() or any(t.placed != Placement.NONE for t in g.tasks)
