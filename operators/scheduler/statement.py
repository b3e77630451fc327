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
    task: TaskInfo
    node: int
    gpu_ids: tuple[int, ...]
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
    ) -> None:
        for t, ids in zip(tasks, gpu_ids, strict=True):
            t.node = node
            t.gpu_ids = ids
            t.held = True
            t.placed = kind
        self.state.move(tasks, node, gpu_ids, 1)
        self.ops.append(AllocateOp(tasks, node, gpu_ids, kind))

    def evict(self, t: TaskInfo, reason: EvictReason, message: str, preemptor: str) -> None:
        node, gpu_ids = t.node, t.gpu_ids
        self.state._give(t, node, gpu_ids)
        t.held = False
        t.evicted = True
        self.ops.append(EvictOp(t, node, gpu_ids, reason, message, preemptor))

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
                t = op.task
                self.state._take(t, op.node, op.gpu_ids)
                t.node, t.gpu_ids, t.held, t.evicted = op.node, op.gpu_ids, True, False

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
                keep = np.minimum(np.maximum(state.free[op.node], 0.0), op.task.req)
                state.free[op.node] -= keep
                state.touched.append(op.node)
                share = state._per_card(op.task, op.gpu_ids)
                for card in op.gpu_ids:
                    if 0 <= card < state.nodes.gpu_width:
                        held = min(share, max(state.gpu_free[op.node, card], 0.0))
                        state.adjust_card(op.node, card, -held)
        self.closed = True
        return self.ops
