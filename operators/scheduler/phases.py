"""PodGroup phase transitions the scheduler drives, as a table.

The scheduler moves a group only on scheduling events; Completed, Failed and Unknown come from
pod states and belong to the podgroup controller. A pair missing from the table means "no
change" (for example a Running group whose elastic replicas grew).

| phase    | event          | next     | why                                                     |
|----------|----------------|----------|---------------------------------------------------------|
| Pending  | admitted       | Inqueue  | enqueue reserved quota; the job controller creates pods |
| Inqueue  | gang_bound     | Running  | the gang minimum is bound (Volcano counts bound pods)    |
| Pending  | gang_bound     | Running  | no enqueue action configured: allocate admits directly  |
| Inqueue  | evicted        | Pending  | every pod was evicted: queue again, reserve again       |
| Running  | evicted        | Pending  | idem                                                    |
| Unknown  | evicted        | Pending  | idem                                                    |
| Running  | moved          | Inqueue  | consolidation moved it: its admission (quota) stays     |
| Unknown  | moved          | Inqueue  | idem                                                    |

A moved job is placed again by allocate, first in line (its pods are re-created by its job
controller): it was running, the move is the scheduler's own doing, and going back to Pending
would make it wait for admission behind work that arrived meanwhile.
"""

from __future__ import annotations

import enum

from operators.scheduler.snapshot import GroupPhase


class GroupEvent(enum.StrEnum):
    ADMITTED = "admitted"
    GANG_BOUND = "gang_bound"
    EVICTED = "evicted"
    MOVED = "moved"


TRANSITIONS: dict[tuple[GroupPhase, GroupEvent], GroupPhase] = {
    (GroupPhase.PENDING, GroupEvent.ADMITTED): GroupPhase.INQUEUE,
    (GroupPhase.INQUEUE, GroupEvent.GANG_BOUND): GroupPhase.RUNNING,
    (GroupPhase.PENDING, GroupEvent.GANG_BOUND): GroupPhase.RUNNING,
    (GroupPhase.INQUEUE, GroupEvent.EVICTED): GroupPhase.PENDING,
    (GroupPhase.RUNNING, GroupEvent.EVICTED): GroupPhase.PENDING,
    (GroupPhase.UNKNOWN, GroupEvent.EVICTED): GroupPhase.PENDING,
    (GroupPhase.RUNNING, GroupEvent.MOVED): GroupPhase.INQUEUE,
    (GroupPhase.UNKNOWN, GroupEvent.MOVED): GroupPhase.INQUEUE,
}


def next_phase(phase: GroupPhase, event: GroupEvent) -> GroupPhase:
    return TRANSITIONS.get((phase, event), phase)
