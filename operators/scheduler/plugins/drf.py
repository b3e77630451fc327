"""drf: dominant resource fairness between jobs, and least disruption among victims.

* job order: among equals, the job with the smallest dominant share (its held resources over the
  cluster's, on its most-used dimension) goes first;
* victim order: fewest pods, then lowest summed task priority.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from operators.scheduler.framework import Extensions, SortKey, VictimUnit
    from operators.scheduler.state import GroupInfo, SessionState


class Drf:
    def __init__(self, state: SessionState) -> None:
        self.state = state
        total = state.cluster_total.copy()
        total[state.space.pods] = 0.0
        self.inverse = np.where(
            (total > 0) & np.isfinite(total), 1.0 / np.where(total > 0, total, 1), 0.0
        )

    def job_key(self, g: GroupInfo) -> SortKey:
        held = [t.req for t in g.tasks if t.held]
        if not held:
            return (0.0,)
        share = np.sum(held, axis=0) * self.inverse
        return (float(share.max()),)

    @staticmethod
    def victim_key(unit: VictimUnit) -> SortKey:
        prio = sum(
            t.task.priority if t.task.priority is not None else unit.group.pg.priority
            for t in unit.tasks
        )
        return (float(len(unit.tasks)), float(prio))


def register(state: SessionState, ext: Extensions) -> None:
    drf = Drf(state)
    ext.job_keys.append(drf.job_key)
    ext.victim_keys.append(drf.victim_key)
