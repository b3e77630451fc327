"""Transitions of PodGroups and Queues, derived from their watched state.

A job's transitions are recorded by the jobs operator, the one writer of its phase. A PodGroup's
phase has two writers (the scheduler, the podgroup operator) and a Queue's state is the queue
operator's, so the events operator derives their transitions itself, by comparing what it sees
with what its log on the object (`status.eventLog.observed`) says it saw last:

| watched field | transition (`to`) |
|---|---|
| PodGroup `status.lastEviction.time` changed | `Evicted` (reason: Preempted, Reclaimed, DelayedPreemptionDue, ...) |
| PodGroup `status.preemption` set or its deadline moved | `Privileged` / `WillEvict` (deadline, peers) |
| PodGroup `status.preemption` WillEvict cleared without an eviction | the phase, reason `PreemptionCancelled` |
| PodGroup `status.phase` changed | the new phase |
| Queue `status.state` changed | the new state |

In one comparison they come in that order; the phase an eviction causes (`Pending`) usually
comes in a later one, once the evicted pods are gone. A WillEvict mark whose deadline is not
after the group's last eviction is that eviction's own mark, outlived (the scheduler clears it
with the eviction, or soon after): it is read as no mark, so a receiver never gets a WillEvict
in or after the look that shows its eviction, nor a cancellation of it. A group marked again
must have run again first, so its new deadline (marking time + grace) is after that eviction. The first
time an object is seen its current phase is its first transition (no `from`); an eviction seen
then is history and not sent. Pure: no clock, no I/O.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from operators.api.eventlog import EVENT_LOG_WINDOW
from operators.api.events import SinkKind
from operators.jobs.translog import TransitionRec

PREEMPTION_CANCELLED: Final = "PreemptionCancelled"
WILL_EVICT: Final = "WillEvict"


@dataclass(frozen=True, slots=True)
class Observed:
    """The watched fields of one object, as compared between two looks."""

    phase: str | None = None
    preemption: str | None = None  # `<role>@<deadline>`
    evicted_at: str | None = None

    @classmethod
    def of(cls, kind: SinkKind, status: Mapping[str, Any]) -> Observed:
        """From a PodGroup's or a Queue's status."""
        if kind is SinkKind.QUEUE:
            return cls(_str(status.get("state")))
        mark = status.get("preemption") or {}
        evicted = status.get("lastEviction") or {}
        if _outlived(mark, evicted):
            mark = {}
        return cls(
            _str(status.get("phase")),
            f"{mark['role']}@{mark.get('deadline') or ''}" if mark.get("role") else None,
            _str(evicted.get("time")),
        )

    @classmethod
    def parse(cls, raw: Mapping[str, Any] | None) -> Observed | None:
        if not raw:
            return None
        return cls(_str(raw.get("phase")), _str(raw.get("preemption")), _str(raw.get("evictedAt")))

    def wire(self) -> dict[str, Any]:
        """Every key, None included: the log is written with a JSON merge patch, where a key
        left out would keep its old value (a cleared mark would come back after a restart)."""
        return {"phase": self.phase, "preemption": self.preemption, "evictedAt": self.evicted_at}

    @property
    def role(self) -> str:
        return (self.preemption or "").partition("@")[0]


def _str(value: Any) -> str | None:
    return str(value) if value else None


def _outlived(mark: Mapping[str, Any], evicted: Mapping[str, Any]) -> bool:
    """A WillEvict mark due no later than the group's last eviction: the mark of that eviction."""
    if mark.get("role") != WILL_EVICT:
        return False
    deadline, time = _instant(mark.get("deadline")), _instant(evicted.get("time"))
    return deadline is not None and time is not None and deadline <= time


def _instant(raw: Any) -> datetime.datetime | None:
    try:
        stamp = datetime.datetime.fromisoformat(str(raw))
    except ValueError:
        return None
    return stamp if stamp.tzinfo is not None else None


# (level, name, from, to, reason, message, deadline, peers): a transition before it is numbered
Change = tuple[SinkKind, str, str | None, str, str, str, str, tuple[str, ...]]


def derive(
    kind: SinkKind, name: str, seen: Observed | None, status: Mapping[str, Any]
) -> tuple[Observed | None, list[Change]]:
    """What changed since `seen` (None: never seen), in the order a receiver should get it,
    and what to remember as seen."""
    now = Observed.of(kind, status)
    out: list[Change] = []
    if now.phase is None:
        return seen, out  # nothing written yet: wait for the first phase
    before = seen or Observed()
    evicted = (
        seen is not None and now.evicted_at is not None and now.evicted_at != before.evicted_at
    )
    if evicted:
        last = status.get("lastEviction") or {}
        peers = (str(last["preemptor"]),) if last.get("preemptor") else ()
        out.append(
            (
                kind,
                name,
                before.phase,
                "Evicted",
                str(last.get("reason") or ""),
                str(last.get("message") or ""),
                "",
                peers,
            )
        )
    if now.preemption != before.preemption:
        mark = status.get("preemption") or {}
        if now.preemption is not None:
            out.append(
                (
                    kind,
                    name,
                    before.phase,
                    now.role,
                    str(mark.get("reason") or ""),
                    "",
                    str(mark.get("deadline") or ""),
                    tuple(str(p) for p in mark.get("peers") or ()),
                )
            )
        elif before.role == WILL_EVICT and not evicted:
            out.append((kind, name, WILL_EVICT, now.phase, PREEMPTION_CANCELLED, "", "", ()))
    if now.phase != before.phase:
        out.append((kind, name, before.phase, now.phase, "", "", "", ()))
    return now, out


@dataclass(frozen=True, slots=True)
class ObjectLog:
    """`status.eventLog` of one object: numbered entries, what they were derived up to."""

    seq: int = 0
    observed: Observed | None = None
    entries: tuple[TransitionRec, ...] = ()
    dropped: int = 0

    @classmethod
    def parse(cls, raw: Mapping[str, Any] | None) -> ObjectLog:
        raw = raw or {}
        entries = tuple(TransitionRec.parse(e) for e in raw.get("entries") or ())
        return cls(
            int(raw.get("seq") or (entries[-1].seq if entries else 0)),
            Observed.parse(raw.get("observed")),
            entries,
            int(raw.get("dropped") or 0),
        )

    def append(
        self, observed: Observed | None, changes: Sequence[Change], time: str, delivered: int
    ) -> ObjectLog:
        """Number `changes`, keep the newest EVENT_LOG_WINDOW entries; entries past
        `delivered` (the slowest sink's cursor) that fall out of the window count as dropped."""
        seq = self.seq
        added = []
        for level, name, from_, to, reason, message, deadline, peers in changes:
            seq += 1
            added.append(
                TransitionRec(seq, level, name, from_, to, reason, message, time, deadline, peers)
            )
        entries = (*self.entries, *added)
        cut = entries[: max(0, len(entries) - EVENT_LOG_WINDOW)]
        lost = sum(1 for e in cut if e.seq > delivered)
        return ObjectLog(seq, observed, entries[len(cut) :], self.dropped + lost)

    def wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {"seq": self.seq, "entries": [e.wire() for e in self.entries]}
        if self.observed is not None:
            out["observed"] = self.observed.wire()
        if self.dropped:
            out["dropped"] = self.dropped
        return out
