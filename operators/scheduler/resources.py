"""Resource vectors: one numpy axis per resource name, fixed for a session.

Inside the core every quantity is a float64 vector over :class:`ResourceSpace` dimensions. GPUs
are held in **milli-cards** on their dimension so whole-card and fractional requests add up
(a 2-card pod is 2000, a 0.3-card pod is 300); the snapshot's whole-card counts are scaled on the
way in and back on the way out. float64 is exact for integers below 2**53, which covers bytes.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from operators.scheduler.snapshot import CPU, GPU, GPU_MILLI_PER_CARD, MEMORY, PODS

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from numpy.typing import NDArray

    from operators.scheduler.snapshot import Resources

GPU_MILLI_KEY = "nvidia.com/gpu-milli"
_CANONICAL = (CPU, MEMORY, GPU, PODS)
# Short labels for explanations ("cpu 4", "memory 16Gi", "gpu 8").
_UNIT_LABEL = {CPU: "cpu", MEMORY: "memory", GPU: "GPUs", PODS: "pods"}


class ResourceSpace:
    """Maps resource names to vector positions; GPU and pods always exist."""

    def __init__(self, names: Iterable[str]) -> None:
        extra = sorted(set(names) - set(_CANONICAL) - {GPU_MILLI_KEY})
        self.names: tuple[str, ...] = (*_CANONICAL, *extra)
        self.index: dict[str, int] = {name: i for i, name in enumerate(self.names)}
        self.size = len(self.names)
        self.cpu = self.index[CPU]
        self.memory = self.index[MEMORY]
        self.gpu = self.index[GPU]
        self.pods = self.index[PODS]
        # Texts of vectors already described: explanations repeat the same few amounts (one
        # per pod shape, idle room, ...) for every waiting group of a backlog.
        self._described: dict[bytes, str] = {}

    def zeros(self) -> NDArray[np.float64]:
        return np.zeros(self.size, dtype=np.float64)

    def vector(self, values: Resources, *, missing: float = 0.0) -> NDArray[np.float64]:
        """Snapshot units -> internal vector (GPU cards scaled to milli)."""
        out = np.full(self.size, missing, dtype=np.float64)
        for name, value in values.items():
            i = self.index.get(name)
            if i is None:
                continue
            out[i] = float(value) * (GPU_MILLI_PER_CARD if i == self.gpu else 1)
        return out

    def mapping(self, vec: NDArray[np.float64]) -> dict[str, int]:
        """Internal vector -> snapshot units; GPUs rounded up to cards plus an exact milli key."""
        out: dict[str, int] = {}
        for i, name in enumerate(self.names):
            value = float(vec[i])
            if value == 0 or math.isinf(value):
                continue
            if i == self.gpu:
                out[name] = math.ceil(value / GPU_MILLI_PER_CARD - 1e-9)
                out[GPU_MILLI_KEY] = round(value)
            else:
                out[name] = round(value)
        return out

    def describe(self, vec: NDArray[np.float64]) -> str:
        """Human-readable amounts, e.g. ``"cpu 4, memory 16Gi, GPUs 8"`` (zeros omitted)."""
        key = np.asarray(vec, dtype=np.float64).tobytes()
        text = self._described.get(key)
        if text is None:
            text = self._described[key] = self._describe(vec)
        return text

    def _describe(self, vec: NDArray[np.float64]) -> str:
        parts: list[str] = []
        for i, name in enumerate(self.names):
            value = float(vec[i])
            if value <= 0 or math.isinf(value) or i == self.pods:
                continue
            parts.append(f"{_UNIT_LABEL.get(name, name)} {format_amount(name, value)}")
        return ", ".join(parts) if parts else "nothing"


def format_amount(name: str, value: float) -> str:
    if name == CPU:
        return f"{value / 1000:g}"
    if name == GPU:
        return f"{value / GPU_MILLI_PER_CARD:g}"
    if name == MEMORY:
        for unit, size in (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
            if value >= size:
                return f"{value / size:.3g}{unit}"
        return f"{value:g}"
    return f"{value:g}"


def gpus_held(allocated: Mapping[str, int]) -> float:
    """GPUs in a session's resource map (``QueueStatus.allocated``): the exact milli-GPU figure
    when there is one (fractional cards), else whole cards."""
    milli = allocated.get(GPU_MILLI_KEY)
    return milli / 1000.0 if milli else float(allocated.get(GPU, 0))
