"""A group whose Binding the API keeps rejecting (PodGroup.retry_binding_at, set by the runtime's
backoff) holds no room until its retry time, so it never starves the pods that can bind."""

from __future__ import annotations

import dataclasses

from operators.scheduler import run_session
from operators.scheduler.decisions import ReasonCode
from operators.scheduler.snapshot import Snapshot

from .builders import bound_groups, group, node, tasks


def _cluster(now: float) -> Snapshot:
    rejected = group(
        "rejected",
        priority=10,
        retry_binding_at=8.0,
        binding_error='admission webhook "deny.example" denied the request',
    )
    return Snapshot(
        now=now,
        nodes=(node("n0", cpu=2),),
        groups=(rejected, group("other", created=1.0)),
        tasks=(*tasks("rejected", 1, cpu=2), *tasks("other", 1, cpu=2)),
    )


def test_a_rejected_group_waits_out_its_backoff_and_others_take_the_room() -> None:
    result = run_session(_cluster(now=5.0))
    assert bound_groups(result) == {"other"}
    why = result.explanations["rejected"]
    assert why.code == ReasonCode.BINDING_REJECTED
    assert 'webhook "deny.example" denied' in why.message
    assert "in 3 s" in why.message


def test_a_retry_under_a_second_away_is_not_announced_as_now() -> None:
    # NoRoom backoffs start at 0.5 s: rounding to the nearest second said "in 0 s".
    why = run_session(_cluster(now=7.5)).explanations["rejected"]
    assert "in 1 s" in why.message


def test_once_its_retry_time_has_come_it_is_placed_again() -> None:
    assert bound_groups(run_session(_cluster(now=8.0))) == {"rejected"}


def test_control_without_a_rejection_the_higher_priority_group_wins() -> None:
    snap = _cluster(now=5.0)
    fresh = dataclasses.replace(snap.groups[0], retry_binding_at=0.0, binding_error="")
    result = run_session(dataclasses.replace(snap, groups=(fresh, snap.groups[1])))
    assert bound_groups(result) == {"rejected"}
