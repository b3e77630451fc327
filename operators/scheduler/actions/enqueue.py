"""enqueue: admit Pending groups (Pending -> Inqueue) whose gang minimum the plugins accept.

Queues take turns (the queue furthest below its share first), one group per turn in job order,
so one busy queue cannot starve the admission of others. Admission reserves the gang minimum
(quota plugin) until the gang is placed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from operators.scheduler.actions.ordering import round_robin
from operators.scheduler.decisions import Explanation, ReasonCode, SetGroupPhase
from operators.scheduler.framework import Vote
from operators.scheduler.phases import GroupEvent, next_phase
from operators.scheduler.snapshot import GroupPhase

if TYPE_CHECKING:
    from operators.scheduler.context import Session


def run(ssn: Session) -> None:
    state, ext = ssn.state, ssn.ext
    pending = [g for g in state.groups if g.phase == GroupPhase.PENDING]
    for g in round_robin(ssn, pending):
        need = state.min_resources(g)
        verdict = ext.enqueueable(g, need)
        if verdict.vote == Vote.REJECT:
            code = verdict.code or ReasonCode.NOT_ADMITTED
            state.explain(g, Explanation(g.uid, code, f"not admitted: {verdict.message}"))
            continue
        ext.enqueued(g, need)
        g.phase = next_phase(g.phase, GroupEvent.ADMITTED)
        g.admitted_now = True
        ssn.decisions.append(SetGroupPhase(g.uid, g.phase, "Admitted"))
        state.explain(
            g,
            Explanation(
                g.uid,
                ReasonCode.ADMITTED,
                f"admitted to queue {state.queue_name(g)!r}; reserved "
                f"{state.space.describe(need)} for the gang minimum",
            ),
        )
