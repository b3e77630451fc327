"""Quota metrics of a replay with queues, on tiny clusters whose outcome is known by hand."""

from __future__ import annotations

import pytest

from operators.scheduler.session import SessionConfig
from operators.simulator import quotas, replay
from operators.simulator.replay import TraceJob

PLAN = (quotas.QueuePlan("a", 0.5, 8), quotas.QueuePlan("b", 0.5, 8))


def test_reclaim_gives_a_lender_its_guarantee_at_once() -> None:
    # 16 GPUs, 8 guaranteed to each queue. Queue a runs two 8-GPU jobs (borrowing b's 8);
    # b's job arrives at 10 s: reclaim evicts one of a's jobs and b's runs at once (10..60);
    # the evicted job (10 s x 8 GPUs of work lost) runs again when b's ends (60..160).
    jobs = [
        TraceJob("j0", 0.0, 8, 100.0, "a"),
        TraceJob("j1", 0.0, 8, 100.0, "a"),
        TraceJob("j2", 10.0, 8, 50.0, "b"),
    ]
    stats, sim = quotas.run(replay.clos_nodes(1, 1, 2), jobs, PLAN, quotas.Variant(SessionConfig()))
    a, b = stats
    assert (sim.records["j2"].start, sim.records["j2"].end) == (10.0, 60.0)
    assert (sim.records["j0"].start, sim.records["j0"].end) == (60.0, 160.0)
    assert (b.avg_wait, b.owed_hours, b.borrowed_share) == (0.0, 0.0, 0.0)
    assert a.preemptions == 1
    assert a.lost_gpu_hours == pytest.approx(80 / 3600)
    assert a.avg_wait == 30.0  # j0 waited 60 s for the run that completed, j1 none
    # a held 16 GPUs (8 above its guarantee) for 0..10 and 60..100, 8 otherwise until 160.
    assert a.gpu_hours == pytest.approx((16 * 10 + 8 * 50 + 16 * 40 + 8 * 60) / 3600)
    assert a.borrowed_share == pytest.approx(100 * (8 * 10 + 8 * 40) / 1680)


def test_a_borrowed_gang_is_not_split_so_the_lender_is_owed_its_guarantee() -> None:
    # a's one 16-GPU gang borrows b's 8: evicting it would take a below its own guarantee,
    # so reclaim does not, and b's 8-GPU job waits until it ends (owed for 90 s).
    jobs = [TraceJob("j0", 0.0, 16, 100.0, "a"), TraceJob("j1", 10.0, 8, 50.0, "b")]
    stats, sim = quotas.run(replay.clos_nodes(1, 1, 2), jobs, PLAN, quotas.Variant(SessionConfig()))
    _, b = stats
    assert sim.records["j1"].start == 100.0
    assert b.owed_hours == pytest.approx(90 / 3600)
    assert b.owed_share == pytest.approx(60.0)  # 90 of the 150 s replayed


def test_split_draws_queues_with_the_plan_shares_inside_the_window() -> None:
    jobs = [TraceJob(f"j{i}", float(i), 1, 10.0) for i in range(4000)]
    plan = (quotas.QueuePlan("x", 0.75, 1), quotas.QueuePlan("y", 0.25, 1))
    chosen = quotas.split(jobs, plan, seed=1, window=(1000.0, 3000.0))
    assert len(chosen) == 2000
    assert chosen[0].arrival == 0.0  # shifted to the window's start
    share = sum(j.queue == "x" for j in chosen) / len(chosen)
    assert share == pytest.approx(0.75, abs=0.03)
    assert chosen == quotas.split(jobs, plan, seed=1, window=(1000.0, 3000.0))
