"""A group's pending tasks, answered without a pass when none was Pending in the snapshot.

``GroupInfo.pending_tasks`` skips the pass over the tasks of a group none of whose tasks has
snapshot status Pending (``pending_status``). At every point of a session (after open, after
each action, through binds, evictions and Releasing pods of later sessions) it must answer as
the straightforward filter does.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from operators.scheduler import SessionConfig
from operators.scheduler.actions import stale
from operators.scheduler.engine import ACTIONS, close, open_session
from operators.scheduler.snapshot import Node, PodGroup, Queue, Task
from operators.scheduler.state import SessionState

from .simulate import advance
from .test_properties import EXAMPLES, PROFILE, clusters, opening, queue_trees, workloads


def _check(state: SessionState) -> None:
    for g in state.groups:
        assert g.pending_tasks() == [t for t in g.tasks if t.pending], g.uid


@settings(PROFILE, max_examples=max(1, EXAMPLES // 4))  # the unit suite's time budget
@given(clusters(), queue_trees(), workloads("a"), st.booleans())
def test_pending_tasks_property_same_as_the_filter_through_sessions(
    nodes: tuple[Node, ...],
    queues: tuple[Queue, ...],
    jobs: tuple[list[PodGroup], list[Task]],
    with_topology: bool,
) -> None:
    snap = opening(nodes, queues, jobs, with_topology)
    config = SessionConfig()
    for step in range(3):
        ssn = open_session(snap, config)
        _check(ssn.state)
        stale.run(ssn)
        for action in config.actions:
            ACTIONS[action](ssn)
            _check(ssn.state)
        result = close(ssn, {})
        _check(ssn.state)
        snap = advance(snap, result, now=30.0 * (step + 1), releasing=True)
