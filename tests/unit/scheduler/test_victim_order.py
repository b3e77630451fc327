"""The victim order kept across preemptors (SessionConfig.victim_order_cache) changes no decision.

With the cache, preempt and reclaim sort each scope's candidates once and reuse the order while
queue usage and the candidates' holdings stay as they were, and ask the victim filters lazily;
without it, every preemptor gathers, filters and sorts every candidate (the straightforward
way). Every session must decide the same binds, nominations, evictions, marks and phases, with
the same explanations (texts included: they count the victims considered), reservations and
statuses.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.steady import full_cluster
from operators.scheduler import SessionConfig, SessionResult, run_session
from operators.scheduler.actions.eviction import ordered_candidates
from operators.scheduler.decisions import Evict, EvictReason, MarkWillEvict
from operators.scheduler.framework import Extensions, Purpose
from operators.scheduler.snapshot import (
    GroupPhase,
    Node,
    PodGroup,
    Queue,
    Snapshot,
    Task,
    TaskStatus,
)
from operators.scheduler.state import Placement, SessionState
from operators.scheduler.statement import Statement

from .builders import group, node, tasks
from .invariants import same_result
from .simulate import advance
from .test_properties import EXAMPLES, POOLS, PROFILE, TOPO, clusters, queue_trees, workloads


def _both(snap: Snapshot, config: SessionConfig) -> SessionResult:
    on = run_session(snap, config)
    same_result(on, run_session(snap, replace(config, victim_order_cache=False)))
    return on


@settings(PROFILE, max_examples=max(1, EXAMPLES // 2))  # the unit suite's time budget
@given(
    clusters(),
    queue_trees(),
    workloads("a"),
    workloads("b"),
    st.booleans(),
    st.sampled_from((1, 2, 64)),
    st.sampled_from((0.0, 0.0, 30.0)),
)
def test_victim_order_cache_property_same_decisions(
    nodes: tuple[Node, ...],
    queues: tuple[Queue, ...],
    first: tuple[list[PodGroup], list[Task]],
    second: tuple[list[PodGroup], list[Task]],
    with_topology: bool,
    max_victims: int,
    delay: float,
) -> None:
    snap = Snapshot(
        now=0.0,
        nodes=nodes,
        queues=queues,
        pools=POOLS,
        groups=tuple(first[0]),
        tasks=tuple(first[1]),
        topology=TOPO if with_topology else None,
    )
    config = SessionConfig(max_victims_per_preemptor=max_victims, default_preemption_delay=delay)
    # The second wave arrives once the first runs, one priority higher, so preempt and
    # reclaim (and delayed preemptions coming due) run over running work.
    for step in range(4):
        result = _both(snap, config)
        snap = advance(snap, result, now=30.0 * (step + 1), releasing=True)
        if step == 0:
            late = [replace(g, priority=g.priority + 1) for g in second[0]]
            snap = replace(snap, groups=(*snap.groups, *late), tasks=(*snap.tasks, *second[1]))


def _one_pod_groups(count: int, *, prefix: str, priority: int, bound: int) -> Snapshot:
    """``count`` one-pod groups of one queue; the first ``bound`` run, one per node."""
    nodes = tuple(
        Node(name=f"n{i}", allocatable={"cpu": 1000, "memory": 2**30, "pods": 10})
        for i in range(bound)
    )
    groups = tuple(
        PodGroup(
            uid=f"{prefix}{i}",
            namespace="ns",
            name=f"{prefix}{i}",
            queue="q",
            min_member=1,
            priority=priority,
            phase=GroupPhase.RUNNING if i < bound else GroupPhase.INQUEUE,
            created=float(i),
        )
        for i in range(count)
    )
    tasks = tuple(
        Task(
            uid=f"{prefix}{i}-0",
            group=f"{prefix}{i}",
            namespace="ns",
            name=f"{prefix}{i}-0",
            requests={"cpu": 1000, "memory": 2**20},
            status=TaskStatus.BOUND if i < bound else TaskStatus.PENDING,
            node=f"n{i}" if i < bound else None,
        )
        for i in range(count)
    )
    return Snapshot(now=0.0, nodes=nodes, queues=(Queue("q"),), groups=groups, tasks=tasks)


def test_each_preemption_sees_the_order_left_by_the_one_before() -> None:
    """Twenty low-priority pods fill twenty nodes; twelve high-priority ones of the same queue
    and shape arrive. Each preemption evicts one pod and nominates another into its room, which
    leaves queue usage as it was: the cached order must still drop the evicted one (otherwise
    the next preemptor would pick it again)."""
    low = _one_pod_groups(20, prefix="low", priority=0, bound=20)
    high = _one_pod_groups(12, prefix="high", priority=5, bound=0)
    snap = replace(low, groups=(*low.groups, *high.groups), tasks=(*low.tasks, *high.tasks))
    result = _both(snap, SessionConfig())
    evicted = [d.group for d in result.decisions if isinstance(d, Evict)]
    assert len(evicted) == 12
    assert len(set(evicted)) == 12
    # Victims go newest first among equals (the victim order's creation tie-break).
    assert evicted == [f"low{i}" for i in range(19, 7, -1)]


def test_delayed_marks_are_the_same_with_the_cached_order() -> None:
    low = _one_pod_groups(6, prefix="low", priority=0, bound=6)
    high = _one_pod_groups(3, prefix="high", priority=5, bound=0)
    snap = replace(low, groups=(*low.groups, *high.groups), tasks=(*low.tasks, *high.tasks))
    config = SessionConfig(default_preemption_delay=30.0)
    marked = [d.victim for d in _both(snap, config).decisions if isinstance(d, MarkWillEvict)]
    assert marked == ["low5", "low4", "low3"]


def test_full_cluster_reclaim_is_the_same_with_the_cached_order() -> None:
    """bench.steady's scenario at a small size: a full cluster over 44 queues with a backlog,
    where reclaim runs a victim search for every waiting group."""
    snap = full_cluster(nodes=20, running=200, pending=60)
    result = _both(snap, SessionConfig())
    assert len(result.explanations) >= 60


def test_the_order_follows_committed_evictions_and_survives_discarded_ones() -> None:
    """Unit level: an eviction committed with a same-sized placement in the same queue leaves
    queue usage as it was, yet the evicted job is no candidate any more; a discarded attempt
    leaves the order as it was (and reuses it)."""
    snap = Snapshot(
        now=0,
        nodes=(node("n0", cpu=8), node("n1", cpu=8)),
        groups=(
            group("run0", phase=GroupPhase.RUNNING, created=0.0),
            group("run1", phase=GroupPhase.RUNNING, created=1.0),
            group("new", created=2.0),
        ),
        tasks=(
            *tasks("run0", 1, cpu=8, on=["n0"]),
            *tasks("run1", 1, cpu=8, on=["n1"]),
            *tasks("new", 1, cpu=8),
        ),
    )
    state, ext = SessionState(snap, SessionConfig()), Extensions()
    new, run1 = state.group_by_uid["new"], state.group_by_uid["run1"]

    def names() -> list[str]:
        return [u.group.uid for u in ordered_candidates(state, ext, new, Purpose.PREEMPT)]

    assert names() == ["run1", "run0"]  # newest first among equals
    first = ordered_candidates(state, ext, new, Purpose.PREEMPT)
    tried = Statement(state)
    tried.evict(run1.tasks[0], EvictReason.PREEMPTED, "test", "new")
    tried.allocate((new.tasks[0],), 1, ((),), Placement.NOMINATE)
    tried.discard()
    assert ordered_candidates(state, ext, new, Purpose.PREEMPT) is first
    done = Statement(state)
    done.evict(run1.tasks[0], EvictReason.PREEMPTED, "test", "new")
    done.allocate((new.tasks[0],), 1, ((),), Placement.NOMINATE)
    usage = state.queues.allocated.copy()
    done.commit()
    assert np.array_equal(state.queues.allocated, usage)
    assert names() == ["run0"]
