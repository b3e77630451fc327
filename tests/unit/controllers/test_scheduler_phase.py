"""The scheduler's PodGroup phase table (operators/controllers/scheduler_phase.py)."""

from __future__ import annotations

import itertools

from operators.controllers.scheduler_phase import (
    Decided,
    Evidence,
    GroupCounts,
    lookup,
    next_phase,
)
from operators.scheduler import snapshot as S

P = S.GroupPhase


def test_every_combination_has_a_rule() -> None:
    for ran, decided, seen, moved in itertools.product(
        (True, False), Decided, Evidence, (True, False)
    ):
        lookup(ran, decided, seen, moved)  # raises LookupError when the table has a hole


def test_phase_follows_bound_members_then_the_core() -> None:
    assert next_phase(P.INQUEUE, None, 4, GroupCounts(bound=4, running=0, pending=0)) is P.RUNNING
    assert next_phase(P.PENDING, P.INQUEUE, 4, GroupCounts(0, 0, 4)) is P.INQUEUE
    assert next_phase(P.INQUEUE, None, 4, GroupCounts(0, 0, 4)) is P.INQUEUE
    # It ran and lost pods that are being re-created: Unknown while part of it still runs,
    # Pending once only the re-created pods are left.
    assert next_phase(P.RUNNING, None, 4, GroupCounts(2, 2, 2)) is P.UNKNOWN
    assert next_phase(P.RUNNING, None, 4, GroupCounts(0, 0, 4)) is P.PENDING
    assert next_phase(P.UNKNOWN, None, 4, GroupCounts(0, 0, 4)) is P.PENDING
    assert next_phase(P.UNKNOWN, None, 4, GroupCounts(4, 4, 0)) is P.RUNNING


def test_a_gang_whose_pods_finish_at_different_times_stays_running() -> None:
    # 4 members, 3 finished: before the podgroup operator counted them (pods leave the watch at
    # once) and after (the reader's min_member is then 4 - 3 = 1), never Unknown on the way to
    # Completed.
    assert next_phase(P.RUNNING, None, 4, GroupCounts(1, 1, 0)) is P.RUNNING
    assert next_phase(P.RUNNING, None, 1, GroupCounts(1, 1, 0)) is P.RUNNING
    assert next_phase(P.RUNNING, None, 0, GroupCounts(0, 0, 0)) is P.RUNNING
    # A lost member being replaced while the rest runs is Unknown (4 - 1 succeeded = 3 needed).
    assert next_phase(P.RUNNING, None, 3, GroupCounts(1, 1, 1)) is P.UNKNOWN


def test_a_gang_whose_pods_all_left_the_watch_is_not_re_admitted() -> None:
    # Succeeded pods leave the watch like deleted ones: the phase stays (Completed/Failed are
    # the PodGroup operator's), so enqueue never reserves the minimum of a finished job again.
    assert next_phase(P.RUNNING, None, 4, GroupCounts(0, 0, 0)) is P.RUNNING
    assert next_phase(P.UNKNOWN, None, 4, GroupCounts(0, 0, 0)) is P.UNKNOWN


def test_min_member_zero_runs_only_once_a_pod_runs() -> None:
    assert next_phase(P.INQUEUE, None, 0, GroupCounts(0, 0, 3)) is P.INQUEUE
    assert next_phase(P.INQUEUE, None, 0, GroupCounts(1, 1, 2)) is P.RUNNING


def test_running_waits_for_confirmed_bindings() -> None:
    # The core placed the gang but the watch has confirmed only 1 of 4 bindings.
    assert next_phase(P.INQUEUE, P.RUNNING, 4, GroupCounts(1, 0, 3)) is P.INQUEUE
    assert next_phase(P.PENDING, P.RUNNING, 4, GroupCounts(0, 0, 4)) is P.INQUEUE
    assert next_phase(P.UNKNOWN, P.RUNNING, 4, GroupCounts(3, 3, 1)) is P.UNKNOWN
    assert next_phase(P.INQUEUE, P.RUNNING, 4, GroupCounts(4, 0, 0)) is P.RUNNING


def test_other_decisions_of_the_core_apply() -> None:
    assert next_phase(P.RUNNING, P.PENDING, 4, GroupCounts(0, 0, 4)) is P.PENDING
