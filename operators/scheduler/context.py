"""What every action receives: the session state, the extension points and the decision log."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from operators.scheduler.decisions import Bind, Nominate
from operators.scheduler.state import Placement
from operators.scheduler.statement import AllocateOp

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

    from operators.scheduler.decisions import Decision
    from operators.scheduler.framework import Extensions
    from operators.scheduler.reservation import Reservations
    from operators.scheduler.session import SessionConfig
    from operators.scheduler.shapeviews import ShapeViews
    from operators.scheduler.state import GroupInfo, SessionState
    from operators.scheduler.statement import Operation, Statement


@dataclass(slots=True)
class Session:
    state: SessionState
    ext: Extensions
    config: SessionConfig
    views: ShapeViews
    # Nodes held for the highest-ranked gangs that do not fit yet (reservation.py).
    reservations: Reservations
    # Committed statement operations, in commit order; turned into Bind/Nominate/Evict at close.
    operations: list[Operation] = field(default_factory=list)
    # Decisions that are not placements (phases, delayed-preemption marks), in emission order.
    decisions: list[Decision] = field(default_factory=list)
    # Jobs consolidation moved this session, placed again only in simulation: whatever commits
    # after their plan must leave room for them (actions/movers.py).
    moved: list[GroupInfo] = field(default_factory=list)
    # Nodes nominated by the first ``n`` committed operations, kept up to date when asked
    # (actions/movers.py): (n, per node).
    nominated: tuple[int, NDArray[np.bool_]] | None = None

    def commit(self, stmt: Statement) -> None:
        ops = stmt.commit()
        self.operations.extend(ops)
        sink = self.config.on_bind
        if sink is None or not ops:
            return
        allocs = [op for op in ops if isinstance(op, AllocateOp) and op.kind == Placement.BIND]
        if len(allocs) == len(ops):
            decisions = (d for op in allocs for d in placements(self.state, op))
            sink(tuple(d for d in decisions if isinstance(d, Bind)))


def placements(state: SessionState, op: AllocateOp) -> list[Bind | Nominate]:
    """The Bind (or, for room still being freed, Nominate) decisions of one allocation."""
    record = Bind if op.kind == Placement.BIND else Nominate
    node_name = state.nodes.names[op.node]
    return [
        record(t.task.uid, t.group.uid, t.task.namespace, t.task.name, node_name, ids)
        for t, ids in zip(op.tasks, op.gpu_ids, strict=True)
    ]
