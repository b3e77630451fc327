"""A 32-GPU gang is not starved by a steady stream of 1-GPU jobs (docs/scheduling.md).

Simulated cycle by cycle on the core, as the live loop runs it (enqueue included): eight 8-GPU
nodes full of 1-GPU jobs that each run RUN_FOR cycles, ending staggered (DEPARTURES per cycle),
and ARRIVALS > DEPARTURES new 1-GPU jobs every cycle, so the backlog only grows. The gang (four
8-GPU pods, same queue, same priority) arrives behind BACKLOG older 1-GPU jobs.
"""

from __future__ import annotations

import dataclasses

from operators.scheduler import SessionConfig, run_session
from operators.scheduler.snapshot import GPU, GroupPhase, Snapshot, Task

from .builders import arrive, binds, group, node, one_pod_jobs, tasks
from .simulate import advance, assert_gangs_all_or_nothing, assert_no_node_overcommitted

NODES, NODE_GPUS = 8, 8
RUN_FOR = 4  # cycles a 1-GPU job runs
DEPARTURES = NODES * NODE_GPUS // RUN_FOR  # 16 GPUs free up per cycle
ARRIVALS = DEPARTURES + 4  # arrival above departure: the backlog never drains
BACKLOG = 10  # 1-GPU jobs already waiting, older than the gang (ahead of it in line)


def _run(config: SessionConfig, cycles: int = 12, gang_priority: int = 0) -> int | None:
    """The cycle in which the gang was bound, or None."""
    nodes = tuple(node(f"n{i}", cpu=64, gpus=NODE_GPUS) for i in range(NODES))
    groups = []
    all_tasks: list[Task] = []
    ends: dict[str, int] = {}
    for i in range(NODES * NODE_GPUS):
        uid = f"run{i}"
        groups.append(group(uid, phase=GroupPhase.RUNNING, created=-100.0 + i))
        all_tasks.extend(tasks(uid, 1, gpus=1, on=[f"n{i % NODES}"], gpu_ids=(i // NODES,)))
        ends[uid] = i % RUN_FOR + 1  # staggered: DEPARTURES end every cycle
    snap = Snapshot(now=0.0, nodes=nodes, groups=tuple(groups), tasks=tuple(all_tasks))
    snap = arrive(snap, one_pod_jobs("old", BACKLOG, {"cpu": 1000, GPU: 1}, created=-50.0))
    big = group("big", min_member=4, phase=GroupPhase.PENDING, priority=gang_priority)
    snap = arrive(snap, ([big], tasks("big", 4, gpus=NODE_GPUS)))
    for cycle in range(cycles):
        done = {uid for uid, end in ends.items() if end <= cycle}
        for uid in done:
            del ends[uid]
        snap = dataclasses.replace(
            snap,
            groups=tuple(g for g in snap.groups if g.uid not in done),
            tasks=tuple(t for t in snap.tasks if t.group not in done),
        )
        created = float(cycle * 100 + 1)
        snap = arrive(snap, one_pod_jobs(f"c{cycle}-", ARRIVALS, {"cpu": 1000, GPU: 1}, created))
        result = run_session(snap, config)
        assert_no_node_overcommitted(snap, result)
        assert_gangs_all_or_nothing(snap, result)
        placed = {b.group for b in binds(result)}
        if "big" in placed:
            return cycle
        for uid in placed:
            ends[uid] = cycle + RUN_FOR
        snap = advance(snap, result, float(cycle + 1))
    return None


def test_equal_priority_gang_starts_within_the_stated_bound() -> None:
    """Bound (docs/scheduling.md): the cycle the jobs ahead of it in line are placed, plus the
    longest remaining run time of the pods on the nodes reserved for it, plus one cycle."""
    at = _run(SessionConfig())
    assert at is not None
    assert at <= 1 + RUN_FOR


def test_higher_priority_gang_is_not_slower() -> None:
    at = _run(SessionConfig(), gang_priority=10)
    assert at is not None
    assert at <= 1 + RUN_FOR


def test_without_reservation_the_stream_starves_it() -> None:
    """The failure mode the reservation exists for: every hole goes to a 1-GPU job."""
    assert _run(SessionConfig(max_reservations=0)) is None
