"""reclaim: across queues and pools, take back what others hold beyond their share.

Groups still unplaced after preempt may evict (a) tasks borrowed onto their own pool's nodes, and
(b) jobs of other reclaimable queues above their deserved share (most over first), as long as
the reclaiming queue stays within its own deserved share and no victim queue drops below its
guarantee. Same victim order and never-evict-in-vain rule as preempt.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from operators.scheduler.actions.preempt import attempt
from operators.scheduler.framework import Purpose
from operators.scheduler.snapshot import GroupPhase

if TYPE_CHECKING:
    from operators.scheduler.context import Session


def run(ssn: Session) -> None:
    groups = [
        g
        for g in ssn.state.groups
        if g.attempted
        and not g.preemption_done
        and g.pg.preemption is None
        and not g.gang_satisfied()
        and g.phase != GroupPhase.PENDING
    ]
    groups.sort(key=ssn.ext.job_key)
    for g in groups[: ssn.config.max_preemptors]:
        attempt(ssn, g, Purpose.RECLAIM)
