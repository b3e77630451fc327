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
previous session's state objects are reused, so nothing may still read them. Entries are
keyed by object identity and hold the object itself (so an id is never reused while its entry
lives); an object met twice in one snapshot gets a fresh state object the second time; each
session keeps only the entries of the objects it saw, so the memo holds one snapshot's worth.
A task's entry is also checked against its group's pool and the task's replica priority (a
changed PodGroup can change those for an unchanged task). Everything is dropped when what the
derived values are relative to changes: the resource names (vector positions), the pools, the
queues and their tenants. Decisions are the same with or without a memo, and a renewed object
equals a freshly built one field by field (tests/unit/scheduler/test_session_memo.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

    from operators.scheduler.snapshot import PodGroup, Task
    from operators.scheduler.state import GroupInfo, TaskInfo

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
        # id(task) -> (task, its group's pool name, replica priority, its session state).
        self.tasks: dict[int, tuple[Task, str | None, int, TaskInfo]] = {}
        # id(group) -> (group, its session state).
        self.groups: dict[int, tuple[PodGroup, GroupInfo]] = {}
        # Shared across sessions like the entries: request vectors by (requests, milli) and
        # pod shapes interned (equal shapes are one object, which grouping compares by).
        self.vectors: dict[tuple[object, ...], tuple[NDArray[np.float64], tuple[int, ...]]] = {}
        self.shapes: dict[tuple[object, ...], tuple[object, ...]] = {}
        self._tasks_seen: dict[int, tuple[Task, str | None, int, TaskInfo]] = {}
        self._groups_seen: dict[int, tuple[PodGroup, GroupInfo]] = {}

    def open(self, layout: tuple[object, ...]) -> None:
        """Start a session over ``layout`` (what derived values are relative to)."""
        if layout != self.layout:
            self.layout = layout
            self.tasks, self.groups = {}, {}
            self.vectors, self.shapes = {}, {}
        self._tasks_seen, self._groups_seen = {}, {}

    def task(self, task: Task, group_pool: str | None, replica_priority: int) -> TaskInfo | None:
        """Last session's state of ``task`` if it may serve again (the caller renews it)."""
        key = id(task)
        entry = self.tasks.get(key)
        if (
            entry is None
            or entry[0] is not task
            or entry[1] != group_pool
            or entry[2] != replica_priority
            or key in self._tasks_seen  # met twice in this snapshot: one state object each
        ):
            return None
        self._tasks_seen[key] = entry
        return entry[3]

    def keep_task(
        self, task: Task, group_pool: str | None, replica_priority: int, info: TaskInfo
    ) -> None:
        self._tasks_seen[id(task)] = (task, group_pool, replica_priority, info)

    def group(self, pg: PodGroup) -> GroupInfo | None:
        """Last session's state of ``pg`` if it may serve again (the caller renews it)."""
        key = id(pg)
        entry = self.groups.get(key)
        if entry is None or entry[0] is not pg or key in self._groups_seen:
            return None
        self._groups_seen[key] = entry
        return entry[1]

    def keep_group(self, pg: PodGroup, info: GroupInfo) -> None:
        self._groups_seen[id(pg)] = (pg, info)

    def close(self) -> None:
        """Keep only what this session saw (the objects of the next snapshot are mostly these)."""
        self.tasks, self.groups = self._tasks_seen, self._groups_seen
        self._tasks_seen, self._groups_seen = {}, {}
        if len(self.shapes) > 4 * len(self.tasks) + 1024:
            # Shapes that came and went: start over (the entries hold interned shapes, so they
            # go too; equal shapes must stay one object).
            self.layout = None
