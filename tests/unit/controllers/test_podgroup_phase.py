"""PodGroup phases from the pods (operators/controllers/podgroup_phase.py)."""

from __future__ import annotations

from operators.api.scheduling import PodGroupPhase as P
from operators.controllers.podgroup_phase import (
    MemberCounts,
    count,
    finished_phase,
    operator_phase,
    status_patch,
)


def test_count_by_pod_phase() -> None:
    assert count(["Running", "Pending", "Succeeded", "Failed", "Succeeded", ""]) == MemberCounts(
        active=3, succeeded=2, failed=1
    )


def test_finished_only_when_every_member_stopped() -> None:
    assert finished_phase(2, MemberCounts(active=1, succeeded=2)) is None
    assert finished_phase(2, MemberCounts()) is None  # no pods yet
    assert finished_phase(2, MemberCounts(succeeded=2, failed=1)) is P.COMPLETED
    assert finished_phase(2, MemberCounts(succeeded=1, failed=1)) is P.FAILED
    assert finished_phase(0, MemberCounts(failed=1)) is P.FAILED


def test_operator_writes_only_finished_phases_and_hands_back_on_new_pods() -> None:
    done = MemberCounts(succeeded=4)
    assert operator_phase(P.RUNNING, 4, done) is P.COMPLETED
    assert operator_phase(P.COMPLETED, 4, done) is None
    assert operator_phase(P.RUNNING, 4, MemberCounts(active=4)) is None  # the scheduler's
    # A job controller re-created pods of a finished group: back to the scheduler.
    assert operator_phase(P.FAILED, 4, MemberCounts(active=4, failed=4)) is P.PENDING
    assert operator_phase(P.COMPLETED, 4, MemberCounts()) is None  # pods gone: stays finished


def test_status_patch_counts_and_phase() -> None:
    patch = status_patch({"phase": "Running", "running": 2}, 2, MemberCounts(succeeded=2))
    assert patch == {"phase": "Completed", "succeeded": 2}
    again = {"phase": "Completed", "succeeded": 2, "failed": 0}
    assert status_patch(again, 2, MemberCounts(succeeded=2)) is None
    assert status_patch({"phase": "Bogus"}, 1, MemberCounts(active=1)) is None
    assert status_patch({}, 2, MemberCounts(active=1, failed=1)) == {"failed": 1}


def test_a_job_owned_group_waiting_for_its_new_round_is_not_finished() -> None:
    """A job restarted one task and re-admitted its group (Pending, then Inqueue) while the other
    task's pods stay Succeeded: the restarted task's pods are created only after admission, so
    the stopped members are the previous round's and the group must stay with the scheduler."""
    left_over = MemberCounts(succeeded=2)
    for waiting in (None, P.PENDING, P.INQUEUE):
        assert operator_phase(waiting, 3, left_over, job_owned=True) is None
        assert status_patch(
            {"phase": waiting} if waiting else {}, 3, left_over, job_owned=True
        ) == {"succeeded": 2}
        # control: a group no job owns is finished from the same pods
        assert operator_phase(waiting, 3, left_over) is P.FAILED
    # Once the new round ran, the group finishes as any other.
    assert operator_phase(P.RUNNING, 3, MemberCounts(succeeded=3), job_owned=True) is P.COMPLETED
    assert operator_phase(P.UNKNOWN, 3, MemberCounts(succeeded=2, failed=1), job_owned=True) is (
        P.FAILED
    )
