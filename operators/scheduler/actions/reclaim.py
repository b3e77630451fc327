"""reclaim: across queues and pools, take back what others hold beyond their share.

Groups still unplaced after preempt may evict (a) tasks borrowed onto their own pool's nodes, and
(b) jobs of other reclaimable queues above their deserved share (most over first), as long as
the reclaiming queue stays within its own deserved share and no victim queue drops below its
guarantee. Same victim order and never-evict-in-vain rule as preempt.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from operators.scheduler.actions.preempt import attempt, preemptors
from operators.scheduler.framework import Purpose

if TYPE_CHECKING:
    from operators.scheduler.context import Session


def run(ssn: Session) -> None:
    for g in preemptors(ssn):
        attempt(ssn, g, Purpose.RECLAIM)
