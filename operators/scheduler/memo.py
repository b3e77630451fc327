"""What session open builds from snapshot objects, kept across sessions: ``SessionMemo``.

Opening a session turns every PodGroup and Task of the snapshot into session state
(``GroupInfo``/``TaskInfo``). Part of it is derived from the object alone (a task's request
vector, pod shape, pool; a group's queue, tenant priority and gang roles), the rest is the
session's own (holdings, placements, phases, caches), and the runtime hands the core the same
frozen objects for everything that did not change (its cache rebuilds an object only when it
changed). A caller that runs session after session passes one memo to each
(``run_session(..., memo=...)``): session open then takes the ``GroupInfo``/``TaskInfo`` it
built last time for every object it saw then, puts every field that is the session's own back
to its fresh value (``renew``), and builds only the new or changed ones. Building them afresh
cost ~1.5-2 us each (tens of thousands per session on a full cluster); a renew a few stores.

A memo serves one session at a time (sessions of one caller run one after another): the
previous session's state objects are reused, so nothing may still read them. A task's entry
is keyed by the task's identity and holds the task (so an id is never reused while its entry
lives); a group's is its uid, and serves only the very PodGroup object it was built from. An
object met twice in one snapshot gets a fresh state object the second time; each session
keeps only the entries of the objects it opened, so the memo holds one snapshot's worth. A
task's entry is also checked against its group's pool and the task's replica priority (a
changed PodGroup can change those for an unchanged task). Everything is dropped when what the
derived values are relative to changes: the resource names (vector positions), the pools, the
queues and their tenants. Session open (state.py) does the lookups inline: they run once per
object, tens of thousands of times per session. Decisions are the same with or without a
memo, and a renewed object equals a freshly built one field by field
(tests/unit/scheduler/test_session_memo.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    import numpy as np
    from numpy.typing import NDArray

    from operators.scheduler.state import GroupInfo, TaskInfo

# What a task's session state derives from the task (see SessionState._derive): request
# vector, whole GPU cards, GPU milli, shape, pool, replica priority, requested dimensions.
Derived = tuple["NDArray[np.float64]", int, int, tuple[object, ...], int, int, tuple[int, ...]]
# What a group's session state derives from the PodGroup (see SessionState._group_static):
# queue, pool, (tenant priority, job priority), may preempt, gang minimum per role, replica
# priority per role, elastic.
GroupStatic = tuple[int, int, tuple[int, int], bool, dict[str, int], dict[str, int], bool]


class SessionMemo:
    __slots__ = ("groups", "layout", "shapes", "tasks", "vectors")

    def __init__(self) -> None:
        self.layout: tuple[object, ...] | None = None
        # Last session's task states by id(task) (each holds its task, so the id stays its
        # own), and its group states by uid (each holds its PodGroup, compared by identity).
        # Session open takes a task's entry out when it meets the task, so a task listed twice
        # gets a state of its own the second time; a group listed twice counts once anyway.
        self.tasks: dict[int, TaskInfo] = {}
        self.groups: Mapping[str, GroupInfo] = {}
        # Shared across sessions like the entries: request vectors by (requests, milli) and
        # pod shapes interned (equal shapes are one object, which grouping compares by).
        self.vectors: dict[tuple[object, ...], tuple[NDArray[np.float64], tuple[int, ...]]] = {}
        self.shapes: dict[tuple[object, ...], tuple[object, ...]] = {}

    def open(self, layout: tuple[object, ...]) -> None:
        """Start a session over ``layout`` (what derived values are relative to)."""
        if layout != self.layout:
            self.layout = layout
            self.tasks, self.groups = {}, {}
            self.vectors, self.shapes = {}, {}

    def close(self, groups: Mapping[str, GroupInfo], tasks: Sequence[TaskInfo]) -> None:
        """Keep only what this session opened (the objects of the next snapshot are mostly
        these): its groups by uid (the session's own index, read-only from here) and tasks."""
        self.groups = groups
        self.tasks = {id(t.task): t for t in tasks}
        if len(self.shapes) > 4 * len(self.tasks) + 1024:
            # Shapes that came and went: start over (the entries hold interned shapes, so they
            # go too; equal shapes must stay one object).
            self.layout = None
