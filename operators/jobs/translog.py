"""The ordered per-job transition log.

Every transition at any level gets the next sequence number of its job (1, 2, 3..., no gaps, never
reused: `status.transitionSeq` holds the last one). The newest `WINDOW` entries stay in
`status.transitions`. The events operator delivers them in order with CloudEvents id
`<job uid>-<seq>` and records its progress in `status.transitionsDelivered`; since the job status
is written as one object, a transition is in the log before anyone can act on it, and a restart of
either operator resumes from what the status says (at-least-once, de-duplicated by id). An entry is
only dropped undelivered when a job with hooks piles up more than `WINDOW` of them; the count is
kept in `status.transitionsDropped`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from operators.api.batch import TransitionLevel
from operators.api.events import SinkKind

WINDOW: Final = 64


#: A job transition's level, or the kind of a PodGroup/Queue whose state changed.
Level = TransitionLevel | SinkKind


def parse_level(value: str) -> Level:
    try:
        return TransitionLevel(value)
    except ValueError:
        return SinkKind(value)


@dataclass(frozen=True, slots=True)
class TransitionRec:
    seq: int
    level: Level
    name: str
    from_: str | None
    to: str
    reason: str = ""
    message: str = ""
    time: str = ""
    deadline: str = ""  # delayed preemption (PodGroup Privileged/WillEvict): eviction time
    peers: tuple[str, ...] = ()  # the other side of a preemption, namespace/name

    def wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "seq": self.seq,
            "level": self.level.value,
            "name": self.name,
            "to": self.to,
        }
        if self.from_:
            out["from"] = self.from_
        if self.reason:
            out["reason"] = self.reason
        if self.message:
            out["message"] = self.message[:1024]
        if self.time:
            out["time"] = self.time
        if self.deadline:
            out["deadline"] = self.deadline
        if self.peers:
            out["peers"] = list(self.peers)
        return out

    @classmethod
    def parse(cls, raw: Mapping[str, Any]) -> TransitionRec:
        return cls(
            seq=int(raw.get("seq") or 0),
            level=parse_level(str(raw.get("level") or "Job")),
            name=str(raw.get("name") or ""),
            from_=raw.get("from"),
            to=str(raw.get("to") or ""),
            reason=str(raw.get("reason") or ""),
            message=str(raw.get("message") or ""),
            time=str(raw.get("time") or ""),
            deadline=str(raw.get("deadline") or ""),
            peers=tuple(str(p) for p in raw.get("peers") or ()),
        )


@dataclass(frozen=True, slots=True)
class Log:
    entries: tuple[TransitionRec, ...] = ()
    seq: int = 0
    delivered: int = 0
    dropped: int = 0

    def append(
        self,
        new: Iterable[tuple[TransitionLevel, str, str | None, str, str, str]],
        time: str,
        *,
        hooks: bool,
    ) -> tuple[Log, list[TransitionRec]]:
        """Number and add (level, name, from, to, reason, message) tuples; returns the new log and
        the numbered entries."""
        seq = self.seq
        added: list[TransitionRec] = []
        for level, name, from_, to, reason, message in new:
            seq += 1
            added.append(TransitionRec(seq, level, name, from_, to, reason, message, time))
        if not added:
            return self, []
        entries: Sequence[TransitionRec] = (*self.entries, *added)
        cut = entries[: max(0, len(entries) - WINDOW)]
        lost = sum(1 for e in cut if e.seq > self.delivered) if hooks else 0
        return (
            Log(tuple(entries[len(cut) :]), seq, self.delivered, self.dropped + lost),
            added,
        )
