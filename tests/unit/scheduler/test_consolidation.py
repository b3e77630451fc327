"""Consolidation: running jobs move so that a gang that fits in total finds a placement."""

from __future__ import annotations

import dataclasses

from hypothesis import given
from hypothesis import strategies as st

from operators.scheduler import SessionConfig, run_session
from operators.scheduler.decisions import EvictReason, ReasonCode
from operators.scheduler.session import DEFAULT_ACTIONS, ActionName
from operators.scheduler.snapshot import (
    GPU,
    GroupPhase,
    LabelSelector,
    PodGroup,
    Pool,
    Snapshot,
    Task,
)

from .builders import binds, evictions, group, node, nominations, tasks
from .simulate import advance, assert_gangs_all_or_nothing, assert_no_node_overcommitted
from .test_properties import PROFILE

WITHOUT = SessionConfig(actions=tuple(a for a in DEFAULT_ACTIONS if a != ActionName.CONSOLIDATE))


def _split() -> Snapshot:
    """Two 8-GPU nodes, each half taken by a 4-GPU job: 8 GPUs free, but no node has 8."""
    groups = [
        group("a", phase=GroupPhase.RUNNING, created=1.0),
        group("b", phase=GroupPhase.RUNNING, created=2.0),
        group("big", created=3.0),
    ]
    return Snapshot(
        now=1000.0,
        nodes=(node("n0", cpu=32, gpus=8), node("n1", cpu=32, gpus=8)),
        groups=tuple(groups),
        tasks=(
            *tasks("a", 1, gpus=4, on=["n0"], gpu_ids=(0, 1, 2, 3)),
            *tasks("b", 1, gpus=4, on=["n1"], gpu_ids=(4, 5, 6, 7)),
            *tasks("big", 1, gpus=8),
        ),
    )


def _replace_group(snap: Snapshot, uid: str, **changes: object) -> Snapshot:
    groups = tuple(
        dataclasses.replace(g, **changes) if g.uid == uid else g  # type: ignore[arg-type]
        for g in snap.groups
    )
    return dataclasses.replace(snap, groups=groups)


def test_one_job_moves_and_both_run_after_it() -> None:
    snap = _split()
    assert not binds(run_session(snap, WITHOUT))
    assert not evictions(run_session(snap, WITHOUT))
    result = run_session(snap)
    [moved] = evictions(result)
    assert moved.reason is EvictReason.CONSOLIDATED
    assert moved.preemptor == "big"
    [nominated] = nominations(result)
    assert nominated.group == "big"
    assert result.explanations["big"].code is ReasonCode.CONSOLIDATING
    # The moved job is placed again and the gang binds where it was nominated.
    snap = advance(snap, result, 1001.0)
    after = run_session(snap)
    placed = {b.group: b.node for b in binds(after)}
    assert placed == {"big": nominated.node, moved.group: ({"n0", "n1"} - {nominated.node}).pop()}
    assert not evictions(after)


def test_nothing_moves_when_the_gang_does_not_fit_in_total() -> None:
    snap = _split()
    snap = dataclasses.replace(
        snap,
        tasks=tuple(
            dataclasses.replace(t, requests={"cpu": 1000, GPU: 9}) if t.group == "big" else t
            for t in snap.tasks
        ),
    )
    assert not evictions(run_session(snap))


def test_protected_recent_or_higher_priority_jobs_stay() -> None:
    for uid, change in (
        ("a", {"preemptible": False, "max_unavailable": 0}),  # preemptible: false
        ("a", {"max_unavailable": 0}),  # a disruption budget allowing nothing
        ("a", {"consolidated_at": 900.0}),  # moved 100 s ago, window 600 s
        ("a", {"priority": 10}),  # outranks the gang
        ("a", {"movable": False}),  # an implicit one-pod group
        ("a", {"preemption_grace": 30.0}),  # needs time to checkpoint
    ):
        snap = _replace_group(_split(), uid, **change)
        moved = {e.group for e in evictions(run_session(snap))}
        assert moved == {"b"}, (change, moved)
        both = _replace_group(snap, "b", **change)
        assert not evictions(run_session(both)), change
    # Past the window it may move again.
    again = _replace_group(_split(), "a", consolidated_at=300.0)
    again = _replace_group(again, "b", consolidated_at=300.0)
    assert evictions(run_session(again))


def test_off_per_pool() -> None:
    snap = dataclasses.replace(
        _split(), pools=(Pool("default", LabelSelector(), disable_consolidation=True),)
    )
    assert not evictions(run_session(snap))


def test_moves_the_fewest_gpus() -> None:
    """n0 holds one 2-GPU job, n1 two 3-GPU jobs (2 GPUs free on n1, 6 on n0): a 6-GPU gang fits
    once the 2-GPU job moves to n1; moving n1's jobs would move 6 GPUs."""
    groups = [
        group("small", phase=GroupPhase.RUNNING, created=1.0),
        group("m1", phase=GroupPhase.RUNNING, created=1.0),
        group("m2", phase=GroupPhase.RUNNING, created=1.0),
        group("big", created=3.0),
    ]
    snap = Snapshot(
        now=0.0,
        nodes=(node("n0", cpu=32, gpus=8), node("n1", cpu=32, gpus=8)),
        groups=tuple(groups),
        tasks=(
            *tasks("small", 1, gpus=2, on=["n0"], gpu_ids=(0, 1)),
            *tasks("m1", 1, gpus=3, on=["n1"], gpu_ids=(0, 1, 2)),
            *tasks("m2", 1, gpus=3, on=["n1"], gpu_ids=(3, 4, 5)),
            *tasks("big", 1, gpus=7),
        ),
    )
    # 7 GPUs: n0 has 6 free, n1 has 2 free; total 8 >= 7.
    result = run_session(snap)
    assert [e.group for e in evictions(result)] == ["small"]
    assert {n.node for n in nominations(result)} == {"n0"}


def test_no_plan_when_the_moved_job_cannot_be_placed_again() -> None:
    """Both jobs are 4-GPU gangs of two 2-GPU pods each pinned by CPU so that nothing fits
    elsewhere: moving either would lose it, so nothing moves (and preempt has no lower-priority
    victims either)."""
    snap = _split()
    tight = tuple(
        dataclasses.replace(t, requests={"cpu": 20000, GPU: 4}) if t.group in ("a", "b") else t
        for t in snap.tasks
    )
    snap = dataclasses.replace(snap, tasks=tight)
    assert not evictions(run_session(snap))


@st.composite
def fragmented(draw: st.DrawFn) -> Snapshot:
    """A few 8-GPU nodes with running jobs of 1-4 GPUs (1-2 pods) and pending gangs."""
    count = draw(st.integers(2, 5))
    nodes = tuple(node(f"n{i}", cpu=64, gpus=8) for i in range(count))
    free = {n.name: list(range(8)) for n in nodes}
    cpus = {n.name: 64 for n in nodes}
    groups: list[PodGroup] = []
    all_tasks: list[Task] = []
    for j in range(draw(st.integers(1, 10))):
        pods = draw(st.integers(1, 2))
        gpus = draw(st.integers(1, 4))
        cpu = draw(st.sampled_from([1, 8, 30]))
        where = [draw(st.sampled_from([n.name for n in nodes])) for _ in range(pods)]
        if any(
            len(free[w]) < gpus * where.count(w) or cpus[w] < cpu * where.count(w) for w in where
        ):
            continue
        uid = f"r{j}"
        for k, w in enumerate(where):
            ids = tuple(free[w][:gpus])
            del free[w][:gpus]
            cpus[w] -= cpu
            all_tasks.extend(tasks(uid, 1, cpu=cpu, gpus=gpus, on=[w], gpu_ids=ids, start=k))
        groups.append(
            group(
                uid,
                min_member=pods,
                phase=GroupPhase.RUNNING,
                created=float(j),
                priority=draw(st.integers(0, 1)),
                max_unavailable=draw(st.sampled_from([None, None, 0])),
            )
        )
    for j in range(draw(st.integers(1, 3))):
        pods = draw(st.integers(1, 2))
        uid = f"p{j}"
        all_tasks.extend(tasks(uid, pods, cpu=1, gpus=draw(st.integers(2, 8))))
        groups.append(group(uid, min_member=pods, created=100.0 + j, priority=1))
    return Snapshot(now=0.0, nodes=nodes, groups=tuple(groups), tasks=tuple(all_tasks))


@PROFILE
@given(fragmented())
def test_consolidation_never_loses_a_job(snap: Snapshot) -> None:
    """Every job consolidation moves is placed again in the next session (or nothing moved),
    and no node is overcommitted on the way."""
    config = SessionConfig(actions=(ActionName.ALLOCATE, ActionName.CONSOLIDATE))
    result = run_session(snap, config)
    assert_no_node_overcommitted(snap, result)
    assert_gangs_all_or_nothing(snap, result)
    moved = {e.group for e in evictions(result)}
    assert all(e.reason is EvictReason.CONSOLIDATED for e in evictions(result))
    if not moved:
        return
    nominated = {n.group for n in nominations(result)}
    assert nominated, "moves without a gang to place"
    after = advance(snap, result, 1.0)
    # The moved jobs come back first in line (allocate only, so no new move interferes).
    again = run_session(after, SessionConfig(actions=(ActionName.ALLOCATE,)))
    assert_no_node_overcommitted(after, again)
    assert moved <= {b.group for b in binds(again)}
    assert nominated <= {b.group for b in binds(again)}
