"""Each queue's past GPU usage for time-based fair share, kept by the scheduler (the one writer
of Queue ``status.usage``) and read back from that field when it starts.

Per session: the GPUs each queue held since the previous session are accrued (GPU-seconds,
into the buckets of operators/scheduler/usage.py), the decayed totals go into the snapshot, and
what each queue holds now is remembered for the next interval. Status writes are coalesced: at
most one round per ``write_seconds`` for all queues together, and only for queues whose rounded
buckets changed. The time between the last write before a restart and the first session after
it is not accrued (nobody watched it).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from operators.runtime import records as R
from operators.scheduler import snapshot as S
from operators.scheduler.resources import gpus_held
from operators.scheduler.usage import UsageLedger, UsageParams, decayed


class UsageBook:
    def __init__(self, params: UsageParams, write_seconds: float) -> None:
        self.ledger = UsageLedger(params)
        self.write_seconds = write_seconds
        self._written_at = float("-inf")
        self._written: dict[str, list[dict[str, Any]]] = {}

    @property
    def enabled(self) -> bool:
        return self.write_seconds > 0

    def advance(self, now: float, queues: Mapping[str, S.Queue]) -> dict[str, float]:
        """Accrue what each queue held since the last call; the decayed usage per queue. A
        queue seen for the first time starts from the buckets its status holds (read back after
        a restart, or written by a previous leader)."""
        for name, q in queues.items():
            if name not in self.ledger.buckets:
                self._written[name] = _body_buckets(q.usage_buckets)
        for name in [n for n in self._written if n not in queues]:
            del self._written[name]
        return self.ledger.advance(now, {name: q.usage_buckets for name, q in queues.items()})

    def hold(self, allocated: Mapping[str, Mapping[str, int]]) -> None:
        """What each queue's subtree holds from now on: a session's ``QueueStatus.allocated``."""
        self.ledger.hold({name: gpus_held(per) for name, per in allocated.items()})

    def due(self, now: float) -> dict[str, dict[str, Any]]:
        """status.usage bodies to write now: none within ``write_seconds`` of the last round,
        else those of queues whose buckets changed since written."""
        if not self.enabled or now - self._written_at < self.write_seconds:
            return {}
        out: dict[str, dict[str, Any]] = {}
        for name, b in self.ledger.buckets.items():
            buckets = _body_buckets(b)
            if buckets != self._written.get(name):
                out[name] = {
                    "gpuSeconds": round(decayed(b, now, self.ledger.params), 1),
                    "updated": R.rfc3339(now),
                    "buckets": buckets,
                }
        if out:
            self._written_at = now
        return out

    def written(self, name: str, body: Mapping[str, Any]) -> None:
        self._written[name] = list(body["buckets"])


def _body_buckets(buckets: Iterable[tuple[float, float]]) -> list[dict[str, Any]]:
    return [{"start": R.rfc3339(s), "gpuSeconds": round(v, 1)} for s, v in buckets]
