"""Stale gangs: a running gang below its minimum longer than its grace period is evicted whole;
job-owned groups are left to their job's policies unless they set a grace period themselves."""

from __future__ import annotations

from typing import Any

import pytest

from operators.scheduler import SessionConfig, run_session
from operators.scheduler.decisions import EvictReason
from operators.scheduler.snapshot import GroupPhase, Snapshot

from .builders import evictions, group, node, tasks


def _broken(now: float, phase: GroupPhase = GroupPhase.RUNNING, **kwargs: Any) -> Snapshot:
    """g needs 3 pods; one is gone since t=100, two still hold their GPUs."""
    return Snapshot(
        now=now,
        nodes=(node("n0", gpus=8),),
        groups=(group("g", min_member=3, phase=phase, below_minimum_since=100.0, **kwargs),),
        tasks=tuple(tasks("g", 2, gpus=2, on=["n0"])),
    )


@pytest.mark.parametrize(("now", "evicted"), [(159.0, False), (160.0, True)])
def test_a_gang_below_its_minimum_goes_whole_after_the_default_grace(
    now: float, evicted: bool
) -> None:
    result = run_session(_broken(now))
    gone = evictions(result)
    assert bool(gone) == evicted
    if evicted:
        assert gone[0].reason == EvictReason.STALE_GANG
        assert sorted(gone[0].tasks) == ["g-0", "g-1"]


def test_the_groups_own_grace_period_wins_and_a_negative_one_turns_it_off() -> None:
    assert evictions(run_session(_broken(105.0, stale_grace=5.0)))
    assert not evictions(run_session(_broken(10_000.0, stale_grace=-1.0)))
    assert not evictions(run_session(_broken(10_000.0), SessionConfig(stale_gang_grace=-1)))


def test_a_job_owned_group_is_left_to_its_jobs_policies_unless_it_sets_a_grace() -> None:
    assert not evictions(run_session(_broken(10_000.0, job_owned=True)))
    assert evictions(run_session(_broken(200.0, job_owned=True, stale_grace=30.0)))


def test_control_a_complete_gang_is_not_stale() -> None:
    snap = _broken(10_000.0)
    whole = Snapshot(
        now=snap.now,
        nodes=snap.nodes,
        groups=snap.groups,
        tasks=tuple(tasks("g", 3, gpus=2, on=["n0"])),
    )
    assert not evictions(run_session(whole))


def test_a_gang_never_seen_running_is_stale_once_none_of_it_waits() -> None:
    # Placed whole, a member lost before the runtime wrote Running: the phase still says
    # Inqueue, but nothing of it waits to be placed, so nothing but this frees its room.
    assert evictions(run_session(_broken(10_000.0, phase=GroupPhase.INQUEUE)))
    assert evictions(run_session(_broken(10_000.0, phase=GroupPhase.PENDING)))
    assert not evictions(run_session(_broken(10_000.0, phase=GroupPhase.COMPLETED)))
    # With a member still waiting it is a half-bound gang whose rest may follow: not stale.
    snap = _broken(10_000.0, phase=GroupPhase.INQUEUE)
    waiting = Snapshot(
        now=snap.now,
        nodes=snap.nodes,
        groups=snap.groups,
        tasks=(*snap.tasks, *tasks("g", 1, gpus=8, start=2)),
    )
    assert not [e for e in evictions(run_session(waiting)) if e.reason == EvictReason.STALE_GANG]
