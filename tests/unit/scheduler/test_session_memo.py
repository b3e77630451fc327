"""The memo kept across sessions (memo.py) changes no decision, and follows what changed.

A caller that runs session after session passes one SessionMemo to each; session open reuses
what it derived from the snapshot objects it saw before. Every session of a sequence must decide
the same with one memo as without any (binds, nominations, evictions, marks, phases,
explanations, reservations, statuses), and an object that changed, or a change of what derived
values are relative to (resource names, pools, queues and tenants), must be derived afresh.
"""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from operators.scheduler import SessionConfig, SessionMemo, run_session
from operators.scheduler.snapshot import (
    GPU,
    Node,
    PodGroup,
    Queue,
    ReplicaSpec,
    Snapshot,
    Task,
    Tenant,
)
from operators.scheduler.state import SessionState

from .builders import group, node, tasks
from .invariants import same_result
from .simulate import advance
from .test_properties import EXAMPLES, PROFILE, clusters, opening, queue_trees, workloads


@settings(PROFILE, max_examples=max(1, EXAMPLES // 2))  # the unit suite's time budget
@given(
    clusters(),
    queue_trees(),
    workloads("a"),
    workloads("b"),
    st.booleans(),
    st.sampled_from((0.0, 30.0)),
)
def test_memo_property_same_decisions_over_a_sequence(
    nodes: tuple[Node, ...],
    queues: tuple[Queue, ...],
    first: tuple[list[PodGroup], list[Task]],
    second: tuple[list[PodGroup], list[Task]],
    with_topology: bool,
    delay: float,
) -> None:
    snap = opening(nodes, queues, first, with_topology)
    config = SessionConfig(default_preemption_delay=delay)
    memo = SessionMemo()
    # Binds, evictions and marks replace some objects each step and keep the others, as the
    # runtime's cache does; the second wave brings new ones (one priority higher).
    for step in range(4):
        result = run_session(snap, config, memo)
        same_result(result, run_session(snap, config))
        snap = advance(snap, result, now=30.0 * (step + 1), releasing=True)
        if step == 0:
            late = [replace(g, priority=g.priority + 1) for g in second[0]]
            snap = replace(snap, groups=(*snap.groups, *late), tasks=(*snap.tasks, *second[1]))


def _snapshot() -> Snapshot:
    return Snapshot(
        now=0.0,
        nodes=(node("n0", cpu=8, gpus=8),),
        queues=(Queue("default"),),
        groups=(group("g"),),
        tasks=tuple(tasks("g", 2, cpu=1, role="w")),
    )


def _open(snap: Snapshot, memo: SessionMemo) -> SessionState:
    return SessionState(snap, SessionConfig(), memo)


def test_unchanged_objects_reuse_what_was_derived() -> None:
    memo, snap = SessionMemo(), _snapshot()
    before, after = _open(snap, memo), _open(snap, memo)
    assert after.tasks[0].req is before.tasks[0].req
    assert after.tasks[0].shape is before.tasks[0].shape
    assert after.groups[0].role_min is before.groups[0].role_min
    # ... in fresh session state: holdings are the session's own.
    assert after.tasks[0] is not before.tasks[0]
    assert after.groups[0] is not before.groups[0]


def test_a_changed_task_is_derived_afresh() -> None:
    memo, snap = SessionMemo(), _snapshot()
    _open(snap, memo)
    bigger = replace(snap.tasks[0], requests={"cpu": 3000, GPU: 2})
    state = _open(replace(snap, tasks=(bigger, snap.tasks[1])), memo)
    space = state.space
    assert state.tasks[0].req[space.cpu] == 3000
    assert state.tasks[0].gpu_cards == 2
    assert state.tasks[1].req[space.cpu] == 1000


def test_a_changed_group_changes_what_its_unchanged_tasks_derive() -> None:
    """A task's replica priority comes from its group's replica specs: a new PodGroup object
    with another priority for the task's role re-derives the (unchanged) task."""
    memo, snap = SessionMemo(), _snapshot()
    assert _open(snap, memo).tasks[0].replica_priority == 0
    spec = ReplicaSpec("w", 1, 2, priority=7)
    regrouped = replace(snap, groups=(replace(snap.groups[0], replica_specs=(spec,)),))
    state = _open(regrouped, memo)
    assert [t.replica_priority for t in state.tasks] == [7, 7]
    assert state.groups[0].elastic


def test_a_new_tenant_changes_an_unchanged_group() -> None:
    memo, snap = SessionMemo(), _snapshot()
    assert _open(snap, memo).groups[0].priority == (0, 0)
    queues = (Queue("default", tenants=(Tenant("ns", priority=5, can_preempt=False),)),)
    state = _open(replace(snap, queues=queues), memo)
    assert state.groups[0].priority == (5, 0)
    assert not state.groups[0].can_preempt


def test_a_new_resource_name_starts_over() -> None:
    """Vector positions follow the resource names: a name seen for the first time (here a
    node's) makes every vector longer, so nothing derived before is reused."""
    memo, snap = SessionMemo(), _snapshot()
    before = _open(snap, memo)
    extended = replace(
        snap, nodes=(replace(snap.nodes[0], allocatable={**snap.nodes[0].allocatable, "x": 1}),)
    )
    after = _open(extended, memo)
    assert after.space.size == before.space.size + 1
    assert after.tasks[0].req.shape == (after.space.size,)
    assert after.tasks[0].req is not before.tasks[0].req


def test_the_memo_keeps_only_the_objects_of_the_last_session() -> None:
    memo, snap = SessionMemo(), _snapshot()
    _open(snap, memo)
    _open(replace(snap, tasks=snap.tasks[:1]), memo)
    assert [entry[0] for entry in memo.tasks.values()] == [snap.tasks[0]]
