"""The memo kept across sessions (memo.py) changes no decision, and follows what changed.

A caller that runs session after session passes one SessionMemo to each; session open reuses
what it derived from the snapshot objects it saw before. Every session of a sequence must decide
the same with one memo as without any (binds, nominations, evictions, marks, phases,
explanations, reservations, statuses), and an object that changed, or a change of what derived
values are relative to (resource names, pools, queues and tenants), must be derived afresh.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import MISSING, fields, replace

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from operators.scheduler import SessionConfig, SessionMemo, run_session
from operators.scheduler.decisions import Evict
from operators.scheduler.snapshot import (
    GPU,
    Node,
    PodGroup,
    Queue,
    ReplicaSpec,
    Snapshot,
    Task,
    TaskStatus,
    Tenant,
)
from operators.scheduler.state import GroupInfo, SessionState, TaskInfo

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


def test_unchanged_objects_reuse_their_session_state_renewed() -> None:
    memo, snap = SessionMemo(), _snapshot()
    before = _open(snap, memo)
    first, group_info = before.tasks[0], before.groups[0]
    req, shape, role_min = first.req, first.shape, group_info.role_min
    first.held, first.node, group_info.held_count, group_info.attempted = True, 0, 1, True
    after = _open(snap, memo)
    assert after.tasks[0] is first
    assert after.groups[0] is group_info
    assert first.req is req
    assert first.shape is shape
    assert group_info.role_min is role_min
    # ... with what is the session's own back to fresh: holdings are the new session's.
    assert not first.held
    assert first.node == -1
    assert first.group is group_info
    assert group_info.held_count == 0
    assert not group_info.attempted
    assert group_info.tasks == after.tasks


def _sentinel_then_renew(info: TaskInfo | GroupInfo, renew: Callable[[], None]) -> list[str]:
    """Set every field with a default to a sentinel, renew, and name the fields still holding
    it (a field added to TaskInfo/GroupInfo without a reset in ``renew``)."""
    sentinel = object()
    defaulted = [
        f for f in fields(info) if f.default is not MISSING or f.default_factory is not MISSING
    ]
    for f in defaulted:
        object.__setattr__(info, f.name, sentinel)
    renew()
    return [f.name for f in defaulted if getattr(info, f.name) is sentinel]


def test_renew_resets_every_field_with_a_default() -> None:
    """Every field with a default is the session's own: renew must set each of them. (dims
    has a default but is derived from the task: renew keeps it, the only exception.)"""
    state = _open(_snapshot(), SessionMemo())
    g, t = state.groups[0], state.tasks[0]
    assert _sentinel_then_renew(g, lambda: g.renew(0)) == []
    assert _sentinel_then_renew(t, lambda: t.renew(g)) == ["dims"]


def _same_state(mine: SessionState, fresh: SessionState) -> None:
    """Two session states opened over one snapshot are alike field by field."""
    assert [g.uid for g in mine.groups] == [g.uid for g in fresh.groups]
    assert [t.task.uid for t in mine.tasks] == [t.task.uid for t in fresh.tasks]
    pairs: list[tuple[object, object]] = [*zip(mine.groups, fresh.groups, strict=True)]
    pairs += zip(mine.tasks, fresh.tasks, strict=True)
    for a, b in pairs:
        for f in fields(a):  # type: ignore[arg-type]
            x, y = getattr(a, f.name), getattr(b, f.name)
            if f.name == "group":
                assert x.uid == y.uid
                assert x is mine.group_by_uid[x.uid]
            elif f.name == "tasks":
                assert [t.task.uid for t in x] == [t.task.uid for t in y]
                assert all(t.group is a for t in x)
            elif isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
                assert np.array_equal(x, y), f.name
            else:
                assert x == y, f.name
    assert np.array_equal(mine.free, fresh.free)
    assert np.array_equal(mine.queues.allocated, fresh.queues.allocated)
    assert np.array_equal(mine.queues.demand, fresh.queues.demand)


@settings(PROFILE, max_examples=max(1, EXAMPLES // 2))
@given(clusters(), queue_trees(), workloads("a"), workloads("b"), st.booleans())
def test_renewed_session_state_equals_a_fresh_one(
    nodes: tuple[Node, ...],
    queues: tuple[Queue, ...],
    first: tuple[list[PodGroup], list[Task]],
    second: tuple[list[PodGroup], list[Task]],
    with_topology: bool,
) -> None:
    """After sessions that bind, evict, mark and admit over the memo's state objects, the next
    open over the memo equals an open without one, field by field, for every group and task
    (those renewed and those built afresh)."""
    snap = opening(nodes, queues, first, with_topology)
    config, memo = SessionConfig(), SessionMemo()
    for step in range(3):
        result = run_session(snap, config, memo)
        snap = advance(snap, result, now=30.0 * (step + 1), releasing=True)
        if step == 0:
            snap = replace(snap, groups=(*snap.groups, *second[0]), tasks=(*snap.tasks, *second[1]))
        _same_state(SessionState(snap, config, memo), SessionState(snap, config))


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
    assert [info.task for info in memo.tasks.values()] == [snap.tasks[0]]


def test_an_object_met_twice_in_one_snapshot_gets_a_state_object_each_time() -> None:
    """As without a memo: one TaskInfo per listed task, never one shared by two entries."""
    memo, snap = SessionMemo(), _snapshot()
    twice = replace(snap, tasks=(snap.tasks[0], snap.tasks[0]))
    _open(twice, memo)
    state = _open(twice, memo)
    assert len(state.tasks) == 2
    assert state.tasks[0] is not state.tasks[1]
    _same_state(state, SessionState(twice, SessionConfig()))
    # A running task listed twice, then once: its group keeps one state object for it.
    running = replace(snap, tasks=tuple(tasks("g", 1, cpu=1, on=["n0"])))
    for listing in (running.tasks * 2, running.tasks * 2, running.tasks):
        again = replace(running, tasks=listing)
        _same_state(_open(again, memo), SessionState(again, SessionConfig()))


# What happens to a cluster between two sessions besides the scheduler's own decisions: each
# replaces, removes or adds objects as the runtime's cache would (a changed object is a new one).
# "again": the next session runs before the runtime saw any of this one's decisions (the same
# objects, though this session placed and evicted some of them).
EVENTS = ("finish", "delete_task", "delete_group", "regroup", "bind_outside", "node", "again")


def _event(snap: Snapshot, kind: str, pick: int) -> Snapshot:
    tasks, groups = list(snap.tasks), list(snap.groups)
    if kind == "finish" and tasks:
        i = pick % len(tasks)
        tasks[i] = replace(tasks[i], status=TaskStatus.SUCCEEDED)
    elif kind == "delete_task" and tasks:
        del tasks[pick % len(tasks)]
    elif kind == "delete_group" and groups:
        gone = groups.pop(pick % len(groups)).uid
        tasks = [t for t in tasks if t.group != gone]
    elif kind == "regroup" and groups:
        i = pick % len(groups)
        groups[i] = replace(groups[i], priority=groups[i].priority + pick % 2)
    elif kind == "bind_outside":
        # Bound by someone else (e.g. spec.nodeName): no gpu-ids, so open assumes its cards.
        waiting = [i for i, t in enumerate(tasks) if t.status == TaskStatus.PENDING]
        if waiting:
            i = waiting[pick % len(waiting)]
            where = snap.nodes[pick % len(snap.nodes)].name
            tasks[i] = replace(tasks[i], status=TaskStatus.BOUND, node=where, gpu_ids=())
    elif kind == "node":
        nodes = list(snap.nodes)
        if pick % 3 == 0 and len(nodes) > 1:
            nodes.pop()  # its pods hold nothing the session sees
        elif pick % 3 == 1:
            labels = {**nodes[0].labels, "pool": "b" if nodes[0].labels.get("pool") != "b" else "a"}
            nodes[0] = replace(nodes[0], labels=labels)
        else:
            nodes[0] = replace(nodes[0], unschedulable=not nodes[0].unschedulable)
        return replace(snap, nodes=tuple(nodes), groups=tuple(groups), tasks=tuple(tasks))
    return replace(snap, groups=tuple(groups), tasks=tuple(tasks))


@settings(PROFILE, max_examples=max(1, EXAMPLES // 2))
@given(
    clusters(),
    queue_trees(),
    workloads("a"),
    st.lists(st.tuples(st.sampled_from(EVENTS), st.integers(0, 50)), min_size=3, max_size=6),
)
def test_memo_property_outside_events_between_sessions(
    nodes: tuple[Node, ...],
    queues: tuple[Queue, ...],
    jobs: tuple[list[PodGroup], list[Task]],
    events: list[tuple[str, int]],
) -> None:
    """Every session of a sequence with outside events between them decides as one opened
    without a memo, and the state it opens equals a fresh one field by field (objects that
    did not change keep their state objects across all of it)."""
    snap = opening(nodes, queues, jobs)
    config, memo = SessionConfig(), SessionMemo()
    for step, (kind, pick) in enumerate(events):
        _same_state(SessionState(snap, config, memo), SessionState(snap, config))
        result = run_session(snap, config, memo)
        same_result(result, run_session(snap, config))
        if kind != "again":
            snap = advance(snap, result, now=30.0 * (step + 1), releasing=True)
            snap = _event(snap, kind, pick)


def test_a_victim_of_the_last_session_is_fresh_again_when_its_objects_did_not_change() -> None:
    """The next session may run before the runtime saw an eviction (same objects): the
    victim's state objects, which that session moved, serve again as fresh ones."""
    snap = Snapshot(
        now=0.0,
        nodes=(node("n0", cpu=2),),
        queues=(Queue("default"),),
        groups=(group("low", min_member=2), group("high", min_member=2, priority=5)),
        tasks=(*tasks("low", 2, cpu=1, on=["n0"]), *tasks("high", 2, cpu=1)),
    )
    config, memo = SessionConfig(), SessionMemo()
    first = run_session(snap, config, memo)
    assert any(isinstance(d, Evict) for d in first.decisions)
    _same_state(SessionState(snap, config, memo), SessionState(snap, config))
    same_result(run_session(snap, config, memo), run_session(snap, config))
