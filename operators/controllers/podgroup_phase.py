"""Which PodGroup phase its pods imply once they stop, and who writes it (pure).

The phase has two writers that never overlap (docs/admin.md):
- the scheduler writes Pending, Inqueue, Running and Unknown while any member is still active;
- the podgroup operator writes Completed and Failed once every member has stopped, and Pending
  again if a finished group gets active members (a job controller re-creating pods), handing the
  group back to the scheduler. It does not finish a group a HybridJob/VCJob owns while that group
  waits for (re-)admission (Pending, Inqueue): the jobs operator creates members only once the
  group is admitted, so every member there that already stopped is from the previous round (a
  restarted task's group re-admitted while another task's pods stay Succeeded); the new round's
  members are still to come, and the group finishes once they ran. Nor does it finish a group
  consolidation moved within the move window (`moving`): its moved members are deleted and
  re-created by its job controller, so the members it sees stopped (some Succeeded before the
  move) are not the whole group; it is looked at again when the window ends.
Both sides decide with `finished_phase`, so there is no moment where both think they own it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping

from operators.api.scheduling import PodGroupPhase

FINISHED = (PodGroupPhase.COMPLETED, PodGroupPhase.FAILED)
AWAITING_MEMBERS = (None, PodGroupPhase.PENDING, PodGroupPhase.INQUEUE)
"""Phases of a job-owned group whose members are not all created yet (see the module text)."""
_TERMINAL_POD_PHASES = {"Succeeded": "succeeded", "Failed": "failed"}


@dataclasses.dataclass(frozen=True)
class MemberCounts:
    active: int = 0  # pods not yet Succeeded/Failed (pending, bound or running)
    succeeded: int = 0
    failed: int = 0


def count(pod_phases: Iterable[str]) -> MemberCounts:
    """Members by pod phase (`status.phase`; absent counts as Pending, so active)."""
    active = succeeded = failed = 0
    for phase in pod_phases:
        kind = _TERMINAL_POD_PHASES.get(phase)
        if kind == "succeeded":
            succeeded += 1
        elif kind == "failed":
            failed += 1
        else:
            active += 1
    return MemberCounts(active, succeeded, failed)


def finished_phase(min_member: int, members: MemberCounts) -> PodGroupPhase | None:
    """Completed when every member stopped and at least `minMember` succeeded, Failed when every
    member stopped and fewer did; None while any member is active or none exists yet."""
    if members.active or not (members.succeeded or members.failed):
        return None
    if members.succeeded >= max(min_member, 1):
        return PodGroupPhase.COMPLETED
    return PodGroupPhase.FAILED


def operator_phase(
    current: PodGroupPhase | None,
    min_member: int,
    members: MemberCounts,
    *,
    job_owned: bool = False,
    moving: bool = False,
) -> PodGroupPhase | None:
    """The phase the podgroup operator writes, or None when the phase is not its to change.
    `job_owned`: a HybridJob or VCJob owns the group (its members come after admission);
    `moving`: consolidation moved it within the move window (its members come back)."""
    finished = finished_phase(min_member, members)
    if finished is not None:
        if moving or (job_owned and current in AWAITING_MEMBERS):
            return None
        return None if current is finished else finished
    if current in FINISHED and members.active:
        return PodGroupPhase.PENDING
    return None


def status_patch(
    current: Mapping[str, object],
    min_member: int,
    members: MemberCounts,
    *,
    job_owned: bool = False,
    moving: bool = False,
) -> dict[str, object] | None:
    """The operator's fields of `status` (phase when it is the operator's, succeeded, failed)."""
    try:
        phase = PodGroupPhase(str(current.get("phase"))) if current.get("phase") else None
    except ValueError:
        phase = None
    patch: dict[str, object] = {}
    new_phase = operator_phase(phase, min_member, members, job_owned=job_owned, moving=moving)
    if new_phase is not None:
        patch["phase"] = new_phase.value
    # Absent counts read as 0, so a new group costs no write until a member stops.
    if (current.get("succeeded") or 0) != members.succeeded:
        patch["succeeded"] = members.succeeded
    if (current.get("failed") or 0) != members.failed:
        patch["failed"] = members.failed
    return patch or None
