"""A job consolidation moved keeps its admission and goes first until it runs again."""

from __future__ import annotations

from operators.scheduler import run_session
from operators.scheduler.decisions import EvictReason, SetGroupPhase
from operators.scheduler.phases import GroupEvent, next_phase
from operators.scheduler.snapshot import GPU, GroupPhase, Queue, Snapshot

from .builders import arrive, binds, evictions, group, node, tasks
from .simulate import advance


def _split(queues: tuple[Queue, ...] = ()) -> Snapshot:
    """Two 8-GPU nodes, each half taken by a 4-GPU job (a on n0, b on n1); gang ``big`` (8
    GPUs) fits only once one of them moves."""
    return Snapshot(
        now=1000.0,
        queues=queues,
        nodes=(node("n0", cpu=32, gpus=8), node("n1", cpu=32, gpus=8)),
        groups=(
            group("a", phase=GroupPhase.RUNNING, created=1.0),
            group("b", phase=GroupPhase.RUNNING, created=2.0),
            group("big", phase=GroupPhase.PENDING, created=3.0),
        ),
        tasks=(
            *tasks("a", 1, gpus=4, on=["n0"], gpu_ids=(0, 1, 2, 3)),
            *tasks("b", 1, gpus=4, on=["n1"], gpu_ids=(4, 5, 6, 7)),
            *tasks("big", 1, gpus=8),
        ),
    )


def _late(queue: str = "default") -> tuple[tuple[object, ...], tuple[object, ...]]:
    """A 4-GPU gang created after the move: it would fit exactly where the moved job goes."""
    return (group("late", queue=queue, phase=GroupPhase.PENDING, created=5.0),), tuple(
        tasks("late", 1, gpus=4)
    )


def _phases(result: object) -> dict[str, tuple[GroupPhase, str]]:
    return {
        d.group: (d.phase, d.reason)
        for d in result.decisions  # type: ignore[attr-defined]
        if isinstance(d, SetGroupPhase)
    }


def test_the_phase_table_keeps_a_moved_group_admitted() -> None:
    assert next_phase(GroupPhase.RUNNING, GroupEvent.MOVED) is GroupPhase.INQUEUE
    assert next_phase(GroupPhase.UNKNOWN, GroupEvent.MOVED) is GroupPhase.INQUEUE
    assert next_phase(GroupPhase.RUNNING, GroupEvent.EVICTED) is GroupPhase.PENDING


def test_a_moved_job_stays_admitted_while_its_pods_exit_and_a_newer_gang_waits() -> None:
    """The move sets ``a`` Inqueue (reason Moved), not Pending: its quota stays reserved, so it
    is never admitted again behind ``late`` (same queue, created after the move), and it binds
    on n1 as the plan said once its pod has exited. Before, ``a`` went Pending and had to be
    admitted again."""
    snap = _split()
    result = run_session(snap)
    [moved] = evictions(result)
    assert (moved.group, moved.reason) == ("a", EvictReason.CONSOLIDATED)
    assert _phases(result)["a"] == (GroupPhase.INQUEUE, "Moved")
    snap = arrive(advance(snap, result, 1001.0, releasing=True), _late())  # type: ignore[arg-type]
    phases = {g.uid: g.phase for g in snap.groups}
    placed: dict[str, str] = {}
    for now in (1002.0, 1003.0, 1004.0):
        result = run_session(snap)
        assert "a" not in _phases(result) or _phases(result)["a"][0] is GroupPhase.RUNNING
        placed |= {b.group: b.node for b in binds(result)}
        snap = advance(snap, result, now, releasing=True)
        phases = {g.uid: g.phase for g in snap.groups}
        if "a" not in placed:
            assert phases["a"] is GroupPhase.INQUEUE
            status = result.queues["default"]
            assert status.inqueue >= 1
    assert placed == {"a": "n1", "big": "n0"}
    assert phases["late"] is GroupPhase.PENDING
    assert not evictions(result)


def test_work_of_another_queue_that_arrived_since_does_not_take_the_moved_jobs_room() -> None:
    """``late`` (queue q2, below its share) arrives while ``a``'s re-created pod waits. Before,
    ``a`` had to be admitted again and q2 went first (furthest below its share): ``late`` took
    n1, the only room ``a`` had, and ``a`` was left with none. Now the moved job is placed
    first; ``late`` gets room the fair-share way (reclaim), not the moved job's."""
    queues = (Queue("default"), Queue("q2"))
    snap = _split(queues)
    result = run_session(snap)
    assert [e.group for e in evictions(result)] == ["a"]
    snap = arrive(advance(snap, result, 1001.0), _late("q2"))  # type: ignore[arg-type]
    result = run_session(snap)
    placed = {b.group: b.node for b in binds(result)}
    assert placed["a"] == "n1"
    assert placed["big"] == "n0"
    assert "a" not in {e.group for e in evictions(result)}


def test_a_moved_job_is_placed_first_only_within_the_window() -> None:
    """One free 4-GPU slot (n0), wanted by ``a`` (moved, its pod re-created, Inqueue) and by
    q2's ``late`` (q2 below its share, so its turn comes first among queues). Within
    ``consolidation_window`` of the move ``a`` gets it; past it, ``a`` is ordinary work."""

    def snap(moved_at: float) -> Snapshot:
        return Snapshot(
            now=1000.0,
            queues=(Queue("default"), Queue("q2")),
            nodes=(node("n0", cpu=32, gpus=4), node("n1", cpu=32, gpus=4)),
            groups=(
                group("a", phase=GroupPhase.INQUEUE, created=1.0, consolidated_at=moved_at),
                group("b", phase=GroupPhase.RUNNING, created=2.0),
                group("late", queue="q2", phase=GroupPhase.PENDING, created=5.0),
            ),
            tasks=(
                *tasks("a", 1, gpus=4),
                *tasks("b", 1, gpus=4, on=["n1"], gpu_ids=(0, 1, 2, 3)),
                *tasks("late", 1, gpus=4),
            ),
        )

    assert {b.group for b in binds(run_session(snap(moved_at=990.0)))} == {"a"}
    assert {b.group for b in binds(run_session(snap(moved_at=0.0)))} == {"late"}


def test_a_moved_job_whose_pods_are_gone_keeps_its_quota_whatever_its_phase() -> None:
    """The gap before a moved job's pods are re-created: ``a`` (moved 5 s ago, minResources 4
    GPUs) has no pods, and its PodGroup may read Running (the status pass wrote it while the
    watch still showed the moved pod) or Inqueue. Either way its minimum stays reserved in its
    queue (capability 8 GPUs, ``b`` holds 4), so ``late`` (4 GPUs, created after the move) is
    not admitted into it. Before, only an Inqueue group reserved: with ``a`` Running, ``late``
    was admitted. Past the window ``a`` is ordinary work again."""

    def snap(phase: GroupPhase, moved_at: float) -> Snapshot:
        return Snapshot(
            now=1000.0,
            queues=(Queue("q", capability={GPU: 8}),),
            nodes=(node("n0", cpu=32, gpus=8), node("n1", cpu=32, gpus=8)),
            groups=(
                group("a", "q", phase=phase, min_resources={GPU: 4}, consolidated_at=moved_at),
                group("b", "q", phase=GroupPhase.RUNNING, created=2.0),
                group("late", "q", phase=GroupPhase.PENDING, created=5.0),
            ),
            tasks=(
                *tasks("b", 1, gpus=4, on=["n1"], gpu_ids=(0, 1, 2, 3)),
                *tasks("late", 1, gpus=4),
            ),
        )

    for phase in (GroupPhase.RUNNING, GroupPhase.UNKNOWN, GroupPhase.INQUEUE):
        result = run_session(snap(phase, moved_at=995.0))
        assert "late" not in _phases(result), phase
        assert not binds(result)
    past = run_session(snap(GroupPhase.RUNNING, moved_at=0.0))
    assert {b.group for b in binds(past)} == {"late"}


def test_a_moved_job_takes_no_reservation_slot_from_a_gang_waiting_for_admission() -> None:
    """``a`` (moved 5 s ago, Inqueue, minimum 8 GPUs) waits for its pods while only 4 GPUs are
    idle; gang ``wide`` (two 4-GPU pods) does not fit the idle room but fits the pool once
    drained, so enqueue admits it past the idle room to reserve nodes for it (one such gang
    per pool, ``max_reservations``). Before, ``a`` filled that slot and ``wide`` stayed
    Pending; a moved job's room is held by its move, it needs no reservation."""

    def snap(moved_at: float | None) -> Snapshot:
        return Snapshot(
            now=1000.0,
            nodes=(node("n0", cpu=32, gpus=8), node("n1", cpu=32, gpus=8)),
            groups=(
                group(
                    "a", phase=GroupPhase.INQUEUE, min_resources={GPU: 8}, consolidated_at=moved_at
                ),
                group("b", phase=GroupPhase.RUNNING, created=2.0),
                group("wide", min_member=2, phase=GroupPhase.PENDING, created=5.0),
            ),
            tasks=(
                *tasks("b", 1, gpus=8, on=["n0"], gpu_ids=tuple(range(8))),
                *tasks("b", 1, gpus=4, on=["n1"], gpu_ids=(0, 1, 2, 3), start=1),
                *tasks("wide", 2, gpus=4),
            ),
        )

    assert _phases(run_session(snap(moved_at=995.0)))["wide"][0] is GroupPhase.INQUEUE
    assert "wide" not in _phases(run_session(snap(moved_at=None)))
