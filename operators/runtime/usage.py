"""Each queue's past GPU usage for time-based fair share, kept by the scheduler (the one writer
of Queue ``status.usage``) and read back from that field when it starts.

Per session: the GPUs each queue held since the previous session are accrued (GPU-seconds,
into the buckets of operators/scheduler/usage.py), the decayed totals go into the snapshot, and
what each queue holds now is remembered for the next interval. Status writes are coalesced: at
most one per ``write_seconds`` for all queues together, and only for queues whose rounded
buckets changed. The time between the last write before a restart and the first session after
it is not accrued (nobody watched it).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from operators.runtime import records as R
from operators.scheduler import snapshot as S
from operators.scheduler.resources import GPU_MILLI_KEY
from operators.scheduler.usage import Buckets, UsageParams, accrue, decayed


class UsageBook:
    def __init__(self, params: UsageParams, write_seconds: float) -> None:
        self.params = params
        self.write_seconds = write_seconds
        self._buckets: dict[str, Buckets] = {}
        self._held: dict[str, float] = {}
        self._since: float | None = None
        self._written_at = float("-inf")
        self._written: dict[str, list[dict[str, Any]]] = {}

    @property
    def enabled(self) -> bool:
        return self.write_seconds > 0

    def advance(self, now: float, queues: Mapping[str, S.Queue]) -> dict[str, float]:
        """Accrue what each queue held since the last call; return the decayed usage per queue.

        A queue seen for the first time starts from the buckets its status holds (read back
        after a restart, or written by a previous leader)."""
        for name, q in queues.items():
            if name not in self._buckets:
                self._buckets[name] = q.usage_buckets
                self._written[name] = _body_buckets(q.usage_buckets)
        for name in [n for n in self._buckets if n not in queues]:
            del self._buckets[name]
            self._written.pop(name, None)
        if self._since is not None:
            for name, gpus in self._held.items():
                if name in self._buckets:
                    self._buckets[name] = accrue(
                        self._buckets[name], gpus, self._since, now, self.params
                    )
        self._since = now
        return {name: decayed(b, now, self.params) for name, b in self._buckets.items()}

    def hold(self, gpus: Mapping[str, float]) -> None:
        """GPUs each queue's subtree holds from now on (the session's allocation)."""
        self._held = dict(gpus)

    def due(self, now: float) -> dict[str, dict[str, Any]]:
        """status.usage bodies to write now: none within ``write_seconds`` of the last write,
        else those of queues whose buckets changed since written."""
        if not self.enabled or now - self._written_at < self.write_seconds:
            return {}
        out: dict[str, dict[str, Any]] = {}
        for name, b in self._buckets.items():
            buckets = _body_buckets(b)
            if buckets != self._written.get(name):
                out[name] = {
                    "gpuSeconds": round(decayed(b, now, self.params), 1),
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


def held_gpus(allocated: Mapping[str, Mapping[str, int]]) -> dict[str, float]:
    """GPUs per queue from a session's allocation (fractional shares in milli-GPUs)."""
    out: dict[str, float] = {}
    for name, per in allocated.items():
        milli = per.get(GPU_MILLI_KEY)
        out[name] = milli / 1000.0 if milli else float(per.get(S.GPU, 0))
    return out
