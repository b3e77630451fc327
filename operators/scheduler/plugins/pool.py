"""pool: own pool first, then borrow; borrowers are the first to go when the owner needs room.

* node sets: the group's own pool; then, unless its pool disables borrowing or the group is
  non-preemptible, every other pool that does not disable sharing, the one with the most idle
  resources (of the kinds the group asks for) and fewest tasks first;
* victims: never a unit with a task on the nodes of a pool with ``disablePreemption`` (by
  preempt or reclaim), except tasks borrowed onto that pool, which its own jobs reclaim;
  (preempt): only units with tasks on the preemptor's own pool nodes; (reclaim): any group with
  a task borrowed onto the preemptor's pool;
* victim order: borrowed units first.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from operators.scheduler.framework import NodeSet, Purpose

if TYPE_CHECKING:
    from collections.abc import Iterator

    from numpy.typing import NDArray

    from operators.scheduler.framework import Extensions, SortKey, VictimUnit
    from operators.scheduler.state import GroupInfo, SessionState


class Pools:
    def __init__(self, state: SessionState) -> None:
        self.state = state
        nodes = state.nodes
        self.masks = [nodes.pool_mask(i) & nodes.schedulable for i in range(len(nodes.pool_names))]
        capacity = np.where(nodes.schedulable[:, None], nodes.capacity, 0.0)
        self.totals = np.stack(
            [
                np.bincount(nodes.node_pool, weights=capacity[:, d], minlength=len(self.masks))
                for d in range(capacity.shape[1])
            ],
            axis=1,
        )
        self._idle_cache: dict[tuple[int, ...], tuple[int, NDArray[np.float64]]] = {}
        # Schedulable nodes per pool as a 0/1 matrix (pools x nodes), for _idle.
        self.membership: NDArray[np.float64] = np.stack(self.masks).astype(np.float64)
        # Each pool's own node set, built once (asked for by every group of the session).
        self.own_sets = [
            NodeSet(f"pool {name!r}", mask, borrowed=False)
            for name, mask in zip(nodes.pool_names, self.masks, strict=True)
        ]

    def node_sets(self, g: GroupInfo) -> Iterator[NodeSet]:
        nodes = self.state.nodes
        own = g.pool
        yield self.own_sets[own]
        # A non-preemptible group never borrows: the owner pool could not take the room back.
        if nodes.pools[own].disable_borrowing or not g.pg.preemptible:
            return
        lenders = [
            p
            for p in range(len(nodes.pool_names))
            if p != own and not nodes.pools[p].disable_sharing and self.masks[p].any()
        ]
        if not lenders:
            return
        need = self.state.min_resources(g) > 0
        need[self.state.space.pods] = False
        dims = np.flatnonzero(need) if need.any() else np.arange(len(need))
        idle = self._idle(tuple(dims.tolist()))

        def idleness(p: int) -> tuple[float, int]:
            return (-float(idle[p]), int(self.state.pool_tasks[p]))

        for p in sorted(lenders, key=idleness):
            yield NodeSet(f"pool {nodes.pool_names[p]!r}", self.masks[p], borrowed=True)

    def victim_filter(
        self, preemptor: GroupInfo, unit: VictimUnit, purpose: Purpose
    ) -> bool | None:
        pool_of = self.state.nodes.pool_of
        pools = self.state.nodes.pools
        mine = preemptor.pool
        for t in unit.tasks:
            # disablePreemption: nothing running on the pool's nodes is evicted for another
            # job, by preempt or reclaim; only tasks borrowed onto it go back to make room for
            # the owner pool's own jobs.
            if t.node < 0 or not pools[pool_of[t.node]].disable_preemption:
                continue
            owner_takes_back = (
                purpose is Purpose.RECLAIM and t.pool != pool_of[t.node] and pool_of[t.node] == mine
            )
            if not owner_takes_back:
                return False
        if purpose is Purpose.PREEMPT:
            on_my_pool = any(t.node >= 0 and pool_of[t.node] == mine for t in unit.tasks)
            return None if on_my_pool else False
        # Reclaim: the owner pool takes back what others borrowed on its nodes.
        if unit.borrowed and any(
            t.node >= 0 and pool_of[t.node] == mine and t.pool != mine for t in unit.tasks
        ):
            return True
        return None

    def _idle(self, dims: tuple[int, ...]) -> NDArray[np.float64]:
        """Idle fraction per pool, summed over ``dims``; cached until the next placement."""
        version = len(self.state.touched)
        found = self._idle_cache.get(dims)
        if found is not None and found[0] == version:
            return found[1]
        count = len(self.state.nodes.pool_names)
        idle = np.zeros(count)
        # Free room per (pool, dim) for all dims at once: a (pools x nodes) 0/1 membership
        # matrix times the clamped free columns. The figures are whole numbers far below
        # 2**53, so the sums are exact in any order (the same as per-dim bincounts).
        # (An unlimited resource, e.g. pods on a node without a figure, is infinite: the
        # product would turn 0 x inf into NaN, so those columns are summed per pool instead.)
        nodes = self.state.nodes
        cols = list(dims)
        block = np.maximum(self.state.free[:, cols], 0.0)
        finite: NDArray[np.bool_] = np.asarray(np.isfinite(block).all(axis=0))
        per_pool_all = self.membership @ np.where(finite, block, 0.0)
        for i, d in enumerate(cols):
            per_pool: NDArray[np.float64]
            if bool(finite[i]):
                per_pool = per_pool_all[:, i]
            else:
                weights = np.where(nodes.schedulable, block[:, i], 0.0)
                per_pool = np.bincount(nodes.node_pool, weights=weights, minlength=count).astype(
                    np.float64
                )
            total = self.totals[:, d]
            with np.errstate(divide="ignore", invalid="ignore"):
                idle += np.where(total > 0, per_pool / np.where(total > 0, total, 1.0), 0.0)
        self._idle_cache[dims] = (version, idle)
        return idle

    def victim_precheck(self, preemptor: GroupInfo, purpose: Purpose) -> bool | None:
        if purpose is Purpose.RECLAIM and self.state.pool_borrowed[preemptor.pool] > 0:
            return True  # borrowers on the preemptor's own pool can always be reclaimed
        if purpose is Purpose.PREEMPT and self.state.nodes.pools[preemptor.pool].disable_preemption:
            return False
        return None

    @staticmethod
    def victim_key(unit: VictimUnit) -> SortKey:
        return (0.0 if unit.borrowed else 1.0,)


def register(state: SessionState, ext: Extensions) -> None:
    pools = Pools(state)
    ext.node_sets.append(pools.node_sets)
    ext.victim_filters.append(pools.victim_filter)
    ext.victim_keys.append(pools.victim_key)
    ext.victim_prechecks.append(pools.victim_precheck)
