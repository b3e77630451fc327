"""Time-based fair share: each queue's past GPU usage, decayed, corrects how its siblings split
the over-quota part of their parent's share (docs/scheduling.md "Time-based fair share").

Pure: every function takes the times it needs. Usage is kept as GPU-seconds in buckets of
``window / buckets`` seconds aligned on the epoch, so a sliding window drops whole buckets; each
bucket counts with weight ``2 ** -(age / half_life)``, its age measured from the bucket's end
(the current bucket has age 0). The runtime accrues and persists the buckets (Queue
``status.usage``); the simulator accrues them the same way; the core only reads the decayed
total of each queue (``Queue.usage``) and each parent's ``usage_k``.

The correction, among the children of a parent with ``k > 0`` that want more than their
guarantee (KAI's form, with usage
normalised among the siblings rather than by cluster capacity, so that it depends on who used
what share, not on how busy the cluster was):

    w_i = weight_i / sum(weight),   u_i = usage_i / sum(usage)
    effective_i = max(0, w_i + k * (w_i - u_i))

Only the split of what is left after guarantees uses ``effective``; guarantees never move.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

Buckets = tuple[tuple[float, float], ...]
"""(bucket start, GPU-seconds), oldest first."""

MIN_WEIGHT = 1e-9  # a queue whose correction reaches 0 still takes what nobody else wants


@dataclass(frozen=True, slots=True)
class UsageParams:
    half_life: float = 86_400.0  # seconds; 0 = no decay (a plain sliding window)
    window: float = 7 * 86_400.0  # usage older than this is dropped
    buckets: int = 7

    @property
    def bucket_seconds(self) -> float:
        # Whole seconds, so bucket starts survive a round trip through RFC 3339 text.
        return float(max(1, round(self.window / max(self.buckets, 1))))


def accrue(buckets: Buckets, gpus: float, start: float, end: float, p: UsageParams) -> Buckets:
    """Add ``gpus`` held from ``start`` to ``end`` (split at bucket boundaries); drop buckets
    that left the window ending at ``end``."""
    length = p.bucket_seconds
    out = dict(buckets)
    if gpus > 0 and end > start:
        t = start
        while t < end:
            first = math.floor(t / length) * length
            stop = min(end, first + length)
            out[first] = out.get(first, 0.0) + gpus * (stop - t)
            t = stop
    horizon = end - p.window
    return tuple(sorted((s, v) for s, v in out.items() if s + length > horizon and v > 0))


def decayed(buckets: Buckets, now: float, p: UsageParams) -> float:
    """GPU-seconds in the window ending at ``now``, each bucket decayed by its age."""
    length = p.bucket_seconds
    total = 0.0
    for start, value in buckets:
        end = start + length
        if end <= now - p.window:
            continue
        age = max(now - end, 0.0)
        total += value * (0.5 ** (age / p.half_life) if p.half_life > 0 else 1.0)
    return total


class UsageLedger:
    """Each queue's buckets, accrued from what it held between two calls (times passed in).

    Shared by the runtime (which persists the buckets in Queue status) and the simulator."""

    def __init__(self, params: UsageParams) -> None:
        self.params = params
        self.buckets: dict[str, Buckets] = {}
        self._held: dict[str, float] = {}
        self._since: float | None = None

    def advance(self, now: float, queues: Mapping[str, Buckets]) -> dict[str, float]:
        """Accrue what each queue held since the last call; the decayed usage per queue.

        ``queues``: the queues that exist, each with the buckets to start from when it is new
        here (what its status holds); queues no longer given are forgotten."""
        for name, seed in queues.items():
            if name not in self.buckets:
                self.buckets[name] = seed
        for name in [n for n in self.buckets if n not in queues]:
            del self.buckets[name]
        if self._since is not None:
            for name, gpus in self._held.items():
                if name in self.buckets:
                    self.buckets[name] = accrue(
                        self.buckets[name], gpus, self._since, now, self.params
                    )
        self._since = now
        return {name: decayed(b, now, self.params) for name, b in self.buckets.items()}

    def hold(self, gpus: Mapping[str, float]) -> None:
        """GPUs each queue's subtree holds from now on (``resources.gpus_held`` of a session's
        ``QueueStatus.allocated``)."""
        self._held = dict(gpus)


def corrected_weights(
    weight: NDArray[np.float64],
    usage: NDArray[np.float64],
    k: float,
    competing: NDArray[np.bool_] | None = None,
) -> NDArray[np.float64]:
    """Siblings' weights for the over-quota split, corrected by their usage (module docstring).

    Only ``competing`` siblings (those that want more than their guarantee) are normalised and
    corrected among themselves: one that asks for nothing takes no part of the split, and its
    weight must not dilute the others' shares. The corrected weights are scaled back to the
    competitors' total weight, so ``k = 0`` or no usage among them changes nothing."""
    mask = np.ones(len(weight), dtype=np.bool_) if competing is None else competing
    w, u = weight[mask], usage[mask]
    total_usage, total_weight = float(u.sum()), float(w.sum())
    # Usage comes from Queue status, which anyone with status rights can write: a non-finite
    # total (two huge finite values add up to inf) would turn every weight into NaN.
    finite = math.isfinite(total_usage) and math.isfinite(total_weight) and math.isfinite(k)
    if not finite or k <= 0 or total_usage <= 0 or total_weight <= 0:
        return weight
    share = w / total_weight
    effective = np.maximum(share + k * (share - u / total_usage), 0.0)
    if effective.sum() <= 0:
        return weight
    out = weight.copy()
    out[mask] = np.maximum(effective / effective.sum() * total_weight, MIN_WEIGHT)
    return out
