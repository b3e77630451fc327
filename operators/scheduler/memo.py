"""What session open derives from snapshot objects, kept across sessions: ``SessionMemo``.

Opening a session turns every PodGroup and Task of the snapshot into session state. Most of that
is derived from the object alone (a task's request vector, pod shape, pool; a group's queue,
tenant priority and gang roles) and the runtime hands the core the same frozen objects for
everything that did not change (its cache rebuilds an object only when it changed). A caller
that runs session after session passes one memo to each (``run_session(..., memo=...)``):
session open then reuses what it derived before for every object it saw last time, and derives
only the new or changed ones. The mutable per-session state (holdings, placements, phases) is
still built fresh each session.

A memo serves one session at a time (sessions of one caller run one after another). Entries
are keyed by object identity and hold the object itself (so an id is never reused while
its entry lives); each session keeps only the entries of the objects it saw, so the memo holds
one snapshot's worth. Everything is dropped when what the derived values are relative to
changes: the resource names (vector positions), the pools, the queues and their tenants.
Decisions are the same with or without a memo (tests/unit/scheduler/test_session_memo.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

    from operators.scheduler.snapshot import PodGroup, Task

# What a task's session state derives from the task (see SessionState._derive): request
# vector, whole GPU cards, GPU milli, shape, pool, replica priority, requested dimensions.
Derived = tuple["NDArray[np.float64]", int, int, tuple[object, ...], int, int, tuple[int, ...]]
# What a group's session state derives from the PodGroup (see SessionState._group_static):
# queue, pool, (tenant priority, job priority), may preempt, gang minimum per role, replica
# priority per role, elastic.
GroupStatic = tuple[int, int, tuple[int, int], bool, dict[str, int], dict[str, int], bool]


class SessionMemo:
    __slots__ = ("_groups_seen", "_tasks_seen", "groups", "layout", "shapes", "tasks", "vectors")

    def __init__(self) -> None:
        self.layout: tuple[object, ...] | None = None
        # id(task) -> (task, its group's pool name, replica priority, derived).
        self.tasks: dict[int, tuple[Task, str | None, int, Derived]] = {}
        # id(group) -> (group, static part).
        self.groups: dict[int, tuple[PodGroup, GroupStatic]] = {}
        # Shared across sessions like the entries: request vectors by (requests, milli) and
        # pod shapes interned (equal shapes are one object, which grouping compares by).
        self.vectors: dict[tuple[object, ...], tuple[NDArray[np.float64], tuple[int, ...]]] = {}
        self.shapes: dict[tuple[object, ...], tuple[object, ...]] = {}
        self._tasks_seen: dict[int, tuple[Task, str | None, int, Derived]] = {}
        self._groups_seen: dict[int, tuple[PodGroup, GroupStatic]] = {}

    def open(self, layout: tuple[object, ...]) -> None:
        """Start a session over ``layout`` (what derived values are relative to)."""
        if layout != self.layout:
            self.layout = layout
            self.tasks, self.groups = {}, {}
            self.vectors, self.shapes = {}, {}
        self._tasks_seen, self._groups_seen = {}, {}

    def task(self, task: Task, group_pool: str | None, replica_priority: int) -> Derived | None:
        entry = self.tasks.get(id(task))
        if (
            entry is None
            or entry[0] is not task
            or entry[1] != group_pool
            or entry[2] != replica_priority
        ):
            return None
        self._tasks_seen[id(task)] = entry
        return entry[3]

    def keep_task(
        self, task: Task, group_pool: str | None, replica_priority: int, derived: Derived
    ) -> None:
        self._tasks_seen[id(task)] = (task, group_pool, replica_priority, derived)

    def group(self, pg: PodGroup) -> GroupStatic | None:
        entry = self.groups.get(id(pg))
        if entry is None or entry[0] is not pg:
            return None
        self._groups_seen[id(pg)] = entry
        return entry[1]

    def keep_group(self, pg: PodGroup, static: GroupStatic) -> None:
        self._groups_seen[id(pg)] = (pg, static)

    def close(self) -> None:
        """Keep only what this session saw (the objects of the next snapshot are mostly these)."""
        self.tasks, self.groups = self._tasks_seen, self._groups_seen
        self._tasks_seen, self._groups_seen = {}, {}
        if len(self.shapes) > 4 * len(self.tasks) + 1024:
            # Shapes that came and went: start over (the entries hold interned shapes, so they
            # go too; equal shapes must stay one object).
            self.layout = None
