"""What every action receives: the session state, the extension points and the decision log."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from operators.scheduler.decisions import Decision
    from operators.scheduler.framework import Extensions
    from operators.scheduler.reservation import Reservations
    from operators.scheduler.session import SessionConfig
    from operators.scheduler.shapeviews import ShapeViews
    from operators.scheduler.state import SessionState
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

    def commit(self, stmt: Statement) -> None:
        self.operations.extend(stmt.commit())
