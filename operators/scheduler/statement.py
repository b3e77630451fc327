"""Statement: a transaction over the session state that commits a whole gang or nothing.

Operations apply to the state immediately (so later placements in the same attempt see them) and
are logged; ``discard()`` undoes them in reverse order, ``commit()`` hands them to the session's
decision log. Nested attempts (a preemptor tried after each victim) use ``mark()``/``rollback()``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from operators.scheduler.state import Placement

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from operators.scheduler.decisions import EvictReason
    from operators.scheduler.state import SessionState, TaskInfo


@dataclass(frozen=True, slots=True)
class AllocateOp:
    """Replicas placed on one node in one batch."""

    tasks: tuple[TaskInfo, ...]
    node: int
    gpu_ids: tuple[tuple[int, ...], ...]
    kind: Placement


@dataclass(frozen=True, slots=True)
class EvictOp:
    """Pods of one group evicted from one node in one batch."""

    tasks: tuple[TaskInfo, ...]
    node: int
    gpu_ids: tuple[tuple[int, ...], ...]
    reason: EvictReason
    message: str
    preemptor: str


Operation = AllocateOp | EvictOp


class Statement:
    def __init__(self, state: SessionState) -> None:
        self.state = state
        self.ops: list[Operation] = []
        self.closed = False

    def allocate(
        self,
        tasks: tuple[TaskInfo, ...],
        node: int,
        gpu_ids: tuple[tuple[int, ...], ...],
        kind: Placement,
        uniform: bool = False,
        usage: bool = True,
    ) -> None:
        """Place ``tasks`` on ``node``; ``uniform``, ``usage``: see :meth:`SessionState.move`
        (rollback always takes queue usage back per operation)."""
        for t, ids in zip(tasks, gpu_ids, strict=True):
            t.node = node
            t.gpu_ids = ids
            t.held = True
            t.placed = kind
        self.state.move(tasks, node, gpu_ids, 1, uniform, usage)
        self.ops.append(AllocateOp(tasks, node, gpu_ids, kind))

    def evict(self, t: TaskInfo, reason: EvictReason, message: str, preemptor: str) -> None:
        self.evict_many([t], reason, message, preemptor)

    def evict_many(
        self, tasks: list[TaskInfo], reason: EvictReason, message: str, preemptor: str
    ) -> None:
        """Evict held tasks, accounted per (group, node) batch."""
        batches: dict[tuple[int, int], list[TaskInfo]] = {}
        seen: set[int] = set()
        for t in tasks:
            if t.held and not t.evicted and id(t) not in seen:  # a task may come twice
                seen.add(id(t))
                batches.setdefault((id(t.group), t.node), []).append(t)
        for (_, node), batch in batches.items():
            ids = tuple(t.gpu_ids for t in batch)
            self.state.move(batch, node, ids, -1)
            for t in batch:
                t.held = False
                t.evicted = True
            self.ops.append(EvictOp(tuple(batch), node, ids, reason, message, preemptor))

    def mark(self) -> int:
        return len(self.ops)

    def rollback(self, mark: int) -> None:
        while len(self.ops) > mark:
            op = self.ops.pop()
            if isinstance(op, AllocateOp):
                self.state.move(op.tasks, op.node, op.gpu_ids, -1)
                for t in op.tasks:
                    t.node, t.gpu_ids, t.held, t.placed = -1, (), False, Placement.NONE
            else:
                self.state.move(op.tasks, op.node, op.gpu_ids, 1)
                for t, ids in zip(op.tasks, op.gpu_ids, strict=True):
                    t.node, t.gpu_ids, t.held, t.evicted = op.node, ids, True, False

    def discard(self) -> None:
        self.rollback(0)
        self.closed = True

    def commit(self) -> list[Operation]:
        """Close the statement. Room freed by evictions but not reused stays held this session.

        Evicted pods take time to terminate; binding anyone else into that room now would
        overcommit the node, so whatever the preemptor did not take is reserved until the next
        session sees the victims gone.
        """
        state = self.state
        for op in self.ops:
            if isinstance(op, EvictOp):
                for t, ids in zip(op.tasks, op.gpu_ids, strict=True):
                    keep = np.minimum(np.maximum(state.free[op.node], 0.0), t.req)
                    state.free[op.node] -= keep
                    share = state._per_card(t, ids)
                    for card in ids:
                        if 0 <= card < state.nodes.gpu_width:
                            held = min(share, max(state.gpu_free[op.node, card], 0.0))
                            state.adjust_card(op.node, card, -held)
                state.touched.append(op.node)
                state.pool_tasks[state.nodes.pool_of[op.node]] += len(op.tasks)
        self._keep_charged()
        self.closed = True
        return self.ops

    def _keep_charged(self) -> None:
        """Evicted pods charge their queue chain until they exit, as they hold their room.

        Only what this statement placed (the job they were evicted for) may use that room
        early, and only on the queue levels both share: there the charge is the larger of the
        two, not their sum. Below those levels the victim's queues stay charged, so nothing
        else of theirs takes the room while it terminates (a parent's capability would be
        exceeded meanwhile). The re-charged part is ``leaving``: not kept by the queue.
        """
        tree = self.state.queues
        placed: dict[int, NDArray[np.float64]] = {}
        gone: dict[int, NDArray[np.float64]] = {}
        for op in self.ops:
            sums = placed if isinstance(op, AllocateOp) else gone
            for t in op.tasks:
                if t.group.queue >= 0:
                    for q in tree.chain_rows[t.group.queue]:
                        sums[q] = sums[q] + t.req if q in sums else t.req.copy()
        for q, vec in gone.items():
            back = np.maximum(vec - placed[q], 0.0) if q in placed else vec
            tree.allocated[q] += back
            tree.leaving[q] += back
