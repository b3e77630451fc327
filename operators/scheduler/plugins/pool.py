"""pool: own pool first, then borrow; borrowers are the first to go when the owner needs room.

* node sets: the group's own pool; then, unless its pool disables borrowing, every other pool
  that does not disable sharing, the one with the most idle resources (of the kinds the group
  asks for) and fewest tasks first;
* victims (preempt): only tasks on the preemptor's own pool nodes, and not at all in a pool with
  ``disablePreemption``; (reclaim): any group with a task borrowed onto the preemptor's pool;
* victim order: borrowed units first.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from operators.scheduler.framework import NodeSet, Purpose

if TYPE_CHECKING:
    from collections.abc import Iterator

    from operators.scheduler.framework import Extensions, SortKey, VictimUnit
    from operators.scheduler.state import GroupInfo, SessionState


class Pools:
    def __init__(self, state: SessionState) -> None:
        self.state = state
        nodes = state.nodes
        self.masks = [nodes.pool_mask(i) & nodes.schedulable for i in range(len(nodes.pool_names))]

    def node_sets(self, g: GroupInfo) -> Iterator[NodeSet]:
        nodes = self.state.nodes
        own = g.pool
        yield NodeSet(f"pool {nodes.pool_names[own]!r}", self.masks[own], borrowed=False)
        if nodes.pools[own].disable_borrowing:
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
        free = np.maximum(self.state.free, 0.0)
        cap = nodes.capacity

        def idleness(p: int) -> tuple[float, int]:
            m = self.masks[p]
            total = cap[m].sum(axis=0)
            idle = free[m].sum(axis=0)
            with np.errstate(divide="ignore", invalid="ignore"):
                frac = np.where(total > 0, idle / np.where(total > 0, total, 1), 0.0)
            dims = need if need.any() else np.ones_like(need)
            return (-float(frac[dims].mean()), int(self.state.pool_tasks[p]))

        for p in sorted(lenders, key=idleness):
            yield NodeSet(f"pool {nodes.pool_names[p]!r}", self.masks[p], borrowed=True)

    def victim_filter(
        self, preemptor: GroupInfo, unit: VictimUnit, purpose: Purpose
    ) -> bool | None:
        node_pool = self.state.nodes.node_pool
        on_my_pool = [t for t in unit.tasks if t.node >= 0 and node_pool[t.node] == preemptor.pool]
        if purpose is Purpose.PREEMPT:
            if self.state.nodes.pools[preemptor.pool].disable_preemption or not on_my_pool:
                return False
            return None
        if any(t.pool != preemptor.pool for t in on_my_pool):
            return True
        return None

    @staticmethod
    def victim_key(preemptor: GroupInfo, unit: VictimUnit) -> SortKey:
        return (0.0 if unit.borrowed else 1.0,)


def register(state: SessionState, ext: Extensions) -> None:
    pools = Pools(state)
    ext.node_sets.append(pools.node_sets)
    ext.victim_filters.append(pools.victim_filter)
    ext.victim_keys.append(pools.victim_key)
