"""What the scheduling core decides: plain frozen records the runtime carries out.

The core never talks to the API server. A session returns an ordered tuple of decisions; the
runtime applies them in that order (evictions before the binds that need their room), coalescing
status writes. Every decision is idempotent to apply: replaying a session's output is safe.

How the runtime carries each one out:

* :class:`Bind` -> write ``scheduling.sluice.dev/gpu-ids`` (comma-separated ``gpu_ids``) on the
  pod when non-empty, then POST a ``Binding`` of the pod to ``node``.
* :class:`Nominate` -> set ``status.nominatedNodeName``; the task's room is held for it
  (the core reads it back as ``Task.nominated_node``) while its victims terminate.
* :class:`Evict` -> delete (evict) every pod in ``tasks`` of ``group``; post an Event with
  ``reason``/``message``. A consolidation move's ``moved_to`` is written in the group's
  ``status.lastEviction.movedTo`` (read back as ``PodGroup.consolidated_to``).
* :class:`SetGroupPhase` -> patch ``PodGroup.status.phase`` (and a condition with ``reason``).
* :class:`MarkPrivileged` / :class:`MarkWillEvict` -> write the delayed-preemption mark to the
  group's status (read back as ``PodGroup.preemption``), post Events, offer hooks.
* :class:`RevertDelayedPreemption` -> clear the mark on every group in ``groups``.
* :class:`Explanation` -> the ``Unschedulable``/``Scheduled`` condition message of the group.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from operators.scheduler.snapshot import GroupPhase


@dataclass(frozen=True, slots=True)
class Bind:
    task: str  # Task uid
    group: str
    namespace: str
    name: str  # pod name
    node: str
    gpu_ids: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class Nominate:
    task: str
    group: str
    namespace: str
    name: str
    node: str
    gpu_ids: tuple[int, ...] = ()


class EvictReason(enum.StrEnum):
    PREEMPTED = "Preempted"  # by a higher-priority job of the same queue and pool
    RECLAIMED = "Reclaimed"  # by a queue below its deserved share, or by the owner pool
    SHRUNK = "Shrunk"  # surplus replicas of an elastic job given back
    DELAYED_PREEMPTION_DUE = "DelayedPreemptionDue"  # a WillEvict deadline passed
    CONSOLIDATED = "Consolidated"  # moved elsewhere so that a fragmented gang fits
    STALE_GANG = "StaleGang"  # running below its minimum for longer than its grace period


@dataclass(frozen=True, slots=True)
class Evict:
    group: str
    tasks: tuple[str, ...]  # Task uids: the whole group, or an elastic group's surplus
    reason: EvictReason
    message: str
    preemptor: str = ""  # group uid that needed the room
    # A consolidation move: (node, pods) where the plan placed the job's pods again. Later
    # sessions hold those nodes for it until it is placed again (reservation.py).
    moved_to: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True, slots=True)
class SetGroupPhase:
    group: str
    phase: GroupPhase
    reason: str = ""


@dataclass(frozen=True, slots=True)
class MarkPrivileged:
    preemptor: str  # group uid
    victims: tuple[str, ...]  # group uids
    deadline: float  # Snapshot.now + grace


@dataclass(frozen=True, slots=True)
class MarkWillEvict:
    victim: str  # group uid
    preemptor: str
    deadline: float
    tasks: tuple[str, ...] = ()  # the pods that will go (all, or an elastic surplus)


@dataclass(frozen=True, slots=True)
class RevertDelayedPreemption:
    groups: tuple[str, ...]
    reason: str


class ReasonCode(enum.StrEnum):
    """Machine-readable reason of an :class:`Explanation` (stable: used in conditions)."""

    SCHEDULED = "Scheduled"
    ADMITTED = "Admitted"
    QUEUE_CLOSED = "QueueClosed"
    QUEUE_MISSING = "QueueMissing"
    QUOTA_EXCEEDED = "QuotaExceeded"
    NOT_ADMITTED = "NotEnoughResources"
    GANG_INCOMPLETE = "NotEnoughTasks"
    UNSCHEDULABLE = "Unschedulable"
    TOPOLOGY = "TopologyUnsatisfied"
    POOL_BORROWING_DISABLED = "BorrowingDisabled"
    PREEMPTING = "Preempting"  # victims evicted, pods nominated
    WAITING_FOR_VICTIMS = "WaitingForVictims"  # delayed preemption in progress
    GROWING = "Growing"  # elastic group at min, waiting for idle room to grow
    # preemptible: false and the room it needs is above its queue's deserved share
    NON_PREEMPTIBLE_OVER_QUOTA = "NonPreemptibleOverQuota"
    BINDING_REJECTED = "BindingRejected"  # the API refused its Binding: backing off
    CONSOLIDATING = "Consolidating"  # running jobs moved to open a placement, pods nominated


@dataclass(frozen=True, slots=True)
class Explanation:
    group: str
    code: ReasonCode
    message: str


Decision = (
    Bind
    | Nominate
    | Evict
    | SetGroupPhase
    | MarkPrivileged
    | MarkWillEvict
    | RevertDelayedPreemption
)
"""Everything a session can ask the runtime to do. Explanations travel separately."""
