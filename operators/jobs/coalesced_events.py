"""A job's transition Events, coalesced: one Kubernetes Event carries every transition of a
job since its last one, so a job writes a few Events in its life instead of one per transition
(a one-pod job has 11 transitions; at 40 jobs a second those POSTs alone were more than this
machine's API server took). No transition is lost: each keeps its `#seq` line in a message,
and a message that would pass the API's length cap is split over several Events.

One line per transition: lines are joined by a newline, and a newline inside a transition's
message is turned into a space, so a reader splits on newlines and gets every transition whole
(the texts themselves may hold "; ", as the scheduler's explanations do).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from operators.api.batch import TransitionLevel
from operators.jobs.reconcile import Event

MESSAGE_LIMIT: Final = 1024
"""Characters of one Event's message (the recorder cuts longer ones)."""
SEPARATOR: Final = "\n"


def combine(events: Sequence[Event], limit: int = MESSAGE_LIMIT) -> list[Event]:
    """Transition Events -> as few Events as the message limit allows, in order. Each is a
    Warning if any transition in it is one; its reason is that of its last job-level transition
    (where the job stands), else of its last Warning, else of its last transition."""
    out: list[Event] = []
    chunk: list[Event] = []
    size = 0
    for ev in events:
        text = one_line(ev.message)[:limit]
        if chunk and size + len(SEPARATOR) + len(text) > limit:
            out.append(_one(chunk))
            chunk, size = [], 0
        size += (len(SEPARATOR) if chunk else 0) + len(text)
        chunk.append(Event(ev.type, ev.reason, text, transition=True))
    if chunk:
        out.append(_one(chunk))
    return out


def one_line(message: str) -> str:
    return " ".join(message.splitlines())


def _one(chunk: Sequence[Event]) -> Event:
    if len(chunk) == 1:
        return chunk[0]
    warnings = [e for e in chunk if e.type == "Warning"]
    jobs = [e for e in chunk if e.reason.startswith(TransitionLevel.JOB.value)]
    reason = (jobs or warnings or list(chunk))[-1].reason
    kind = "Warning" if warnings else "Normal"
    return Event(kind, reason, SEPARATOR.join(e.message for e in chunk), transition=True)
