"""The equivalence cache (SessionConfig.equivalence_cache) changes no decision.

Many identical single-pod groups (plain Deployments) over capacity are what it is for: once one
of them fails to fit in a pass, its equivalents skip placement and share its failure; once one is
refused admission, its equivalents get the same verdict until the room or queue usage moves. With and
without the cache, every session must decide the same binds, nominations and evictions, give the
same reason codes and reservations, and report the same queue statuses.
"""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from operators.scheduler import SessionConfig, SessionResult, run_session
from operators.scheduler.snapshot import (
    GPU,
    GroupPhase,
    NetworkTopology,
    Node,
    PodGroup,
    Queue,
    Snapshot,
    Task,
    TopologyMode,
)

from .simulate import advance
from .test_properties import PROFILE, clusters, opening, queue_trees

OFF = SessionConfig(equivalence_cache=False)
SHAPES = (
    ({"cpu": 1000, "memory": 2**30}, 0),
    ({"cpu": 2000, "memory": 2**30, GPU: 1}, 0),
    ({"cpu": 1000, "memory": 2**30}, 500),
    ({"cpu": 4000, "memory": 2**30, GPU: 4}, 0),
)


@st.composite
def single_pod_groups(draw: st.DrawFn, prefix: str) -> tuple[list[PodGroup], list[Task]]:
    """Runs of identical one-pod groups (same shape, pool, queue mix), more than fit."""
    groups: list[PodGroup] = []
    tasks: list[Task] = []
    for run in range(draw(st.integers(1, 4))):
        requests, milli = draw(st.sampled_from(SHAPES))
        pool = draw(st.sampled_from(("a", "b", "default")))
        topo = None
        if draw(st.integers(0, 3)) == 0:
            topo = NetworkTopology(draw(st.sampled_from(list(TopologyMode))), "tor")
        for i in range(draw(st.integers(2, 12))):
            uid = f"{prefix}{run}-{i}"
            groups.append(
                PodGroup(
                    uid=uid,
                    namespace="ns",
                    name=uid,
                    queue=draw(st.sampled_from(("q1", "q2", "q3"))),
                    pool=pool,
                    min_member=1,
                    priority=draw(st.integers(0, 1)),
                    overcommit=draw(st.booleans()),
                    network_topology=topo,
                    phase=draw(st.sampled_from((GroupPhase.PENDING, GroupPhase.INQUEUE))),
                    created=float(len(groups)),
                )
            )
            tasks.append(
                Task(
                    uid=f"{uid}-0",
                    group=uid,
                    namespace="ns",
                    name=f"{uid}-0",
                    requests=requests,
                    gpu_milli=milli,
                )
            )
    return groups, tasks


def _same(a: SessionResult, b: SessionResult) -> None:
    assert a.decisions == b.decisions
    assert {k: e.code for k, e in a.explanations.items()} == {
        k: e.code for k, e in b.explanations.items()
    }
    # Admission shares verdicts between equivalent groups: word for word the same texts.
    assert _admission(a) == _admission(b)
    assert a.reservations == b.reservations
    assert a.queues == b.queues
    assert a.pools == b.pools


def _admission(result: SessionResult) -> dict[str, str]:
    return {
        k: e.message
        for k, e in result.explanations.items()
        if e.message.startswith(("admitted", "not admitted"))
    }


@PROFILE
@given(
    clusters(),
    queue_trees(),
    single_pod_groups("a"),
    single_pod_groups("b"),
    st.booleans(),
    st.integers(0, 2),
)
def test_equivalence_cache_property_same_decisions(
    nodes: tuple[Node, ...],
    queues: tuple[Queue, ...],
    first: tuple[list[PodGroup], list[Task]],
    second: tuple[list[PodGroup], list[Task]],
    with_topology: bool,
    reservations: int,
) -> None:
    snap = opening(nodes, queues, first, with_topology)
    on = SessionConfig(max_reservations=reservations)
    off = SessionConfig(max_reservations=reservations, equivalence_cache=False)
    # Several sessions, with the second wave arriving late and at a higher priority, so
    # preempt, reclaim and backfill's borrowing run over running work as well.
    for step in range(3):
        result = run_session(snap, on)
        _same(result, run_session(snap, off))
        snap = advance(snap, result, now=30.0 * (step + 1))
        if step == 0:
            late = [replace(g, priority=2) for g in second[0]]
            snap = Snapshot(
                now=snap.now,
                nodes=snap.nodes,
                queues=snap.queues,
                pools=snap.pools,
                groups=(*snap.groups, *late),
                tasks=(*snap.tasks, *second[1]),
                topology=snap.topology,
            )


def test_identical_groups_over_capacity_share_one_failure() -> None:
    """Twenty identical one-pod groups, room for three: the same binds with and without the
    cache, and the waiting ones explain themselves with the same text."""
    nodes = tuple(
        Node(name=f"n{i}", allocatable={"cpu": 1000, "memory": 2**30, "pods": 10}) for i in range(3)
    )
    groups = tuple(
        PodGroup(
            uid=f"g{i}",
            namespace="ns",
            name=f"g{i}",
            queue="q",
            min_member=1,
            phase=GroupPhase.INQUEUE,
            created=float(i),
        )
        for i in range(20)
    )
    tasks = tuple(
        Task(
            uid=f"g{i}-0",
            group=f"g{i}",
            namespace="ns",
            name=f"g{i}-0",
            requests={"cpu": 1000, "memory": 2**20},
        )
        for i in range(20)
    )
    snap = Snapshot(now=0.0, nodes=nodes, queues=(Queue("q"),), groups=groups, tasks=tasks)
    on, off = run_session(snap), run_session(snap, OFF)
    _same(on, off)
    waiting = [
        on.explanations[g.uid]
        for g in groups
        if not any(getattr(d, "group", None) == g.uid for d in on.decisions)
    ]
    assert len(waiting) == 17
    assert all(e.message == off.explanations[e.group].message for e in waiting)
