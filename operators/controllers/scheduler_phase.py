"""The PodGroup phase the scheduler writes, as a decision table (docs/admin.md).

The scheduler owns Pending, Inqueue, Running and Unknown; the podgroup operator owns Completed and
Failed (`podgroup_phase`). The scheduler's pod watch leaves out finished pods, and the API server
reports a pod that finished exactly like one that was deleted (a DELETED event carrying its last
live state), so from the watch alone a member that succeeded and a member that was lost look the
same. The table therefore changes the phase of a group that ran only on positive evidence:
- members that merely left keep the phase, so a gang whose pods finish at different times stays
  Running until the podgroup operator, which sees final pod phases, writes Completed/Failed
  (going back to Pending would make enqueue reserve quota again for a job that is done);
- Unknown needs replacements waiting while part of the gang still holds nodes (a job controller
  re-creating lost pods), Pending needs replacements waiting with nothing bound - unless the
  group's last eviction was a consolidation move within the consolidation window (`moved`):
  then Inqueue, the phase the core gave it when it moved it (the core's own decision is seldom
  what is written: the watch still shows the moved pods when that session's statuses go out,
  so quorum wins), so it keeps its admission and quota and is placed again first.
`min_member` is the reader's: `minMember` less the members that already succeeded
(`status.succeeded`, records.podgroup), so those count toward the gang once counted.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Final

from operators.scheduler import snapshot as S

P = S.GroupPhase


@dataclasses.dataclass(frozen=True)
class GroupCounts:
    bound: int  # bound, running or assumed: holds a node
    running: int  # pod phase Running
    pending: int  # no node yet


class Evidence(enum.Enum):
    QUORUM = "quorum"  # bound members reach the minimum
    REPLACING = "replacing"  # below it; part of the gang holds nodes, new pods wait
    WAITING = "waiting"  # below it; nothing holds a node, pods wait
    LEFT = "left"  # below it; nothing waits: members finished or were deleted


class Decided(enum.Enum):
    NONE = "none"  # the core said nothing about this group this session
    RUNNING = "running"  # the core placed the gang; bindings may not be confirmed yet
    OTHER = "other"  # the core set another phase (admitted, evicted, ...)


class Outcome(enum.Enum):
    KEEP = "keep"
    DECIDED = "decided"


Result = S.GroupPhase | Outcome
ANY: Final = None
RAN: Final = frozenset({P.RUNNING, P.UNKNOWN})

# First matching row wins. `ran`: the current phase is Running or Unknown; `moved`: the last
# eviction was a consolidation move within the window.
RULES: Final[
    tuple[tuple[bool | None, Decided | None, Evidence | None, bool | None, Result], ...]
] = (
    # ran    decided          evidence            moved  -> phase
    (ANY, ANY, Evidence.QUORUM, ANY, P.RUNNING),
    # Placed by the core, bindings not confirmed yet: Running is written by the status pass
    # that the watch's confirmation of the last member triggers.
    (True, Decided.RUNNING, ANY, ANY, Outcome.KEEP),
    (False, Decided.RUNNING, ANY, ANY, P.INQUEUE),
    (ANY, Decided.OTHER, ANY, ANY, Outcome.DECIDED),
    (True, Decided.NONE, Evidence.REPLACING, ANY, P.UNKNOWN),
    (True, Decided.NONE, Evidence.WAITING, True, P.INQUEUE),  # moved: its admission stays
    (True, Decided.NONE, Evidence.WAITING, ANY, P.PENDING),  # re-created pods: admit again
    (True, Decided.NONE, Evidence.LEFT, ANY, Outcome.KEEP),
    (False, Decided.NONE, ANY, ANY, Outcome.KEEP),
)


def evidence(min_member: int, counts: GroupCounts) -> Evidence:
    if counts.bound >= max(min_member, 1):  # minMember 0: running once anything runs
        return Evidence.QUORUM
    if counts.pending:
        return Evidence.REPLACING if counts.bound else Evidence.WAITING
    return Evidence.LEFT


def lookup(ran: bool, decided: Decided, seen: Evidence, moved: bool = False) -> Result:
    for row_ran, row_decided, row_evidence, row_moved, result in RULES:
        if (
            row_ran in (ANY, ran)
            and row_decided in (ANY, decided)
            and row_evidence in (ANY, seen)
            and row_moved in (ANY, moved)
        ):
            return result
    raise LookupError(
        f"no phase rule for ran={ran} decided={decided} evidence={seen} moved={moved}"
    )


def next_phase(
    current: S.GroupPhase,
    decided: S.GroupPhase | None,
    min_member: int,
    counts: GroupCounts,
    moved: bool = False,
) -> S.GroupPhase:
    """The phase the scheduler writes: the core's decision if any, else derived from the pods.
    `moved`: the group's last eviction was a consolidation move within the window."""
    ran = current in RAN
    kind = (
        Decided.NONE
        if decided is None
        else Decided.RUNNING
        if decided is P.RUNNING
        else Decided.OTHER
    )
    result = lookup(ran, kind, evidence(min_member, counts), moved)
    if result is Outcome.KEEP:
        return current
    if result is Outcome.DECIDED:
        assert decided is not None
        return decided
    return result
