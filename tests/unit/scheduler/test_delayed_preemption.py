"""Delayed preemption carried across sessions: marks, the deadline, what goes at the deadline."""

from __future__ import annotations

from operators.scheduler import run_session
from operators.scheduler.decisions import MarkWillEvict, RevertDelayedPreemption
from operators.scheduler.snapshot import GroupPhase, Queue, Snapshot

from .builders import elastic, evictions, group, node, nominations, pools, tasks
from .simulate import advance


def _marks(result: object) -> list[MarkWillEvict]:
    return [d for d in getattr(result, "decisions", ()) if isinstance(d, MarkWillEvict)]


def test_delayed_reclaim_from_a_lender_pool_evicts_at_the_deadline() -> None:
    """Reclaim marked a job in a lender pool; at the deadline the same rules (reclaim, every
    node set the group may use) decide, so the victim goes instead of a revert-and-mark loop."""
    snap = Snapshot(
        now=0.0,
        nodes=(
            node("a0", cpu=4, labels={"pool": "a"}),
            node("b0", cpu=4, labels={"pool": "b"}),
            node("b1", cpu=4, labels={"pool": "b"}),
        ),
        pools=pools("a", "b"),
        queues=(
            Queue("qa"),
            Queue("qb", preemption_delay=30.0),
            Queue("qx", reclaimable=False),
        ),
        groups=(
            group("x", queue="qx", pool="a", phase=GroupPhase.RUNNING),
            group("v", queue="qb", pool="b", min_member=2, phase=GroupPhase.RUNNING),
            group("p", queue="qa", pool="a"),
        ),
        tasks=(
            *tasks("x", 1, cpu=4, on=["a0"]),
            *tasks("v", 2, cpu=4, on=["b0", "b1"]),
            *tasks("p", 1, cpu=4),
        ),
    )
    first = run_session(snap)
    assert [m.victim for m in _marks(first)] == ["v"]
    assert not evictions(first)
    snap = advance(snap, first, now=10.0)
    waiting = run_session(snap)
    assert not evictions(waiting)
    assert not _marks(waiting)
    snap = advance(snap, waiting, now=31.0)
    due = run_session(snap)
    assert [e.group for e in evictions(due)] == ["v"]
    assert {n.group for n in nominations(due)} == {"p"}
    assert not _marks(due)


def test_deadline_evicts_only_the_announced_surplus_and_one_mark_per_victim() -> None:
    snap = Snapshot(
        now=0.0,
        nodes=(node("n0", cpu=8),),
        groups=(
            elastic("e", 2, 6, preemption_grace=30.0),
            group("p", min_member=6, priority=100),
        ),
        tasks=(*tasks("e", 6, cpu=1, role="w", on=["n0"]), *tasks("p", 6, cpu=1)),
    )
    first = run_session(snap)
    marks = _marks(first)
    assert len(marks) == 1, marks  # one mark (one Event) per victim job, not per surplus pod
    assert len(marks[0].tasks) == 4
    snap = advance(snap, first, now=31.0)
    due = run_session(snap)
    gone = [uid for e in evictions(due) for uid in e.tasks]
    assert sorted(gone) == sorted(marks[0].tasks)
    assert any(isinstance(d, RevertDelayedPreemption) for d in due.decisions)


def test_the_waiting_preemptor_is_told_its_deadline_as_a_utc_time() -> None:
    """The explanation is what `kubectl sluice why` and `describe` show a user: the deadline must
    read as a time (it used to be an epoch in scientific notation: "deadline 1.79549e+09")."""
    now = 1_795_490_000.0  # 2026-11-24T03:13:20Z
    snap = Snapshot(
        now=now,
        nodes=(node("n0", cpu=8),),
        groups=(
            group("low", phase=GroupPhase.RUNNING, preemption_grace=30.0),
            group("high", priority=100),
        ),
        tasks=(*tasks("low", 1, cpu=8, on=["n0"]), *tasks("high", 1, cpu=8)),
    )
    message = run_session(snap).explanations["high"].message
    assert "after 30 s (deadline 2026-11-24T03:13:50Z)" in message, message

    waiting = advance(snap, run_session(snap), now + 12.5)
    message = run_session(waiting).explanations["high"].message
    assert "waiting 18 s more" in message, message
