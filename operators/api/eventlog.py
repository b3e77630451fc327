"""`status.eventLog`: the events operator's outbox on PodGroups and Queues.

Jobs keep their own transition log (`status.transitions`, written by the jobs operator). For
PodGroups and Queues the phase has other writers (scheduler, podgroup operator, queue operator),
so the events operator derives transitions from what it watches and keeps them, numbered, in this
field, which only it writes and nobody else reads. `observed` is the state the log was derived
up to: what a restarted operator compares the object against.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from pydantic import AwareDatetime, Field

from operators.api.base import MAX_LABEL, MAX_MESSAGE, MAX_NAME, MAX_REASON, StatusModel

#: Entries an object's log keeps. Objects change state rarely (a PodGroup a handful of times in
#: its life), so a short window only loses entries when a sink is down for long.
EVENT_LOG_WINDOW: Final = 16
MAX_LOG_SINKS: Final = 32
EVENT_LOG_FIELD: Final = "eventLog"


def without_event_log(status: Mapping[str, Any]) -> dict[str, Any]:
    """A status as the other operators read it: the log is only the events operator's."""
    return {k: v for k, v in status.items() if k != EVENT_LOG_FIELD}


class ObservedState(StatusModel):
    """What the log was derived up to (the watched fields, as last seen)."""

    phase: str | None = Field(
        default=None, max_length=MAX_LABEL, description="PodGroup phase or Queue state."
    )
    preemption: str | None = Field(
        default=None,
        max_length=MAX_NAME,
        description="Delayed-preemption mark as `<role>@<deadline>`.",
    )
    evicted_at: str | None = Field(
        default=None, max_length=MAX_LABEL, description="status.lastEviction.time last seen."
    )


class LogEntry(StatusModel):
    seq: int = Field(ge=1, description="1, 2, 3... per object uid, without gaps.")
    level: str = Field(max_length=MAX_LABEL, description="PodGroup or Queue.")
    name: str = Field(max_length=MAX_NAME)
    from_: str | None = Field(default=None, alias="from", max_length=MAX_LABEL)
    to: str = Field(max_length=MAX_LABEL)
    reason: str | None = Field(default=None, max_length=MAX_REASON)
    message: str | None = Field(default=None, max_length=MAX_MESSAGE)
    time: AwareDatetime | None = None
    deadline: AwareDatetime | None = Field(
        default=None, description="Privileged/WillEvict: when the victims are evicted."
    )
    peers: list[str] | None = Field(
        default=None, max_length=64, description="namespace/name of the other side."
    )


class LogCursor(StatusModel):
    sink: str = Field(max_length=MAX_NAME)
    last_delivered_sequence: int = Field(ge=0)
    failures: int | None = Field(default=None, ge=0)
    last_error: str | None = Field(default=None, max_length=MAX_MESSAGE)


class EventLog(StatusModel):
    """Written only by the events operator (docs/events.md)."""

    seq: int = Field(default=0, ge=0, description="The last sequence number given out.")
    observed: ObservedState | None = None
    entries: list[LogEntry] | None = Field(default=None, max_length=EVENT_LOG_WINDOW)
    delivery: list[LogCursor] | None = Field(default=None, max_length=MAX_LOG_SINKS)
    dropped: int | None = Field(
        default=None, ge=0, description="Entries that left the window undelivered."
    )
