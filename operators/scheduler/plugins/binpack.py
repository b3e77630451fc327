"""binpack: fill a node (and, for fractional GPUs, a card) before opening another.

Score in [0, 1]: the mean, over the resources the task requests, of the node's utilisation after
placing one replica. With fragmentation scoring on, only nodes without GPUs are scored here
(see below); GPU nodes score 0. Fractional-GPU tasks add the utilisation of the fullest card that still fits
them, so shared cards fill up before fresh ones are split.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from operators.scheduler.snapshot import GPU_MILLI_PER_CARD

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from operators.scheduler.framework import Extensions
    from operators.scheduler.state import SessionState, TaskInfo


class BinpackScorer:
    name = "binpack"

    def __init__(self, state: SessionState, weight: float) -> None:
        self.state = state
        self.weight = weight
        # With fragmentation scoring on, GPU nodes are left to it: it packs shared cards and
        # keeps whole cards together by itself, its ties must go to node order (first fit),
        # which a utilisation score would break, and packing CPU-only pods onto GPU nodes
        # strands their GPUs without CPU (docs/quality.md has the measurements).
        self.defer_gpu = state.config.fragmentation_weight > 0
        self.gpuless = (state.nodes.gpu_capacity.sum(axis=1) <= 0).astype(np.float64)
        cap = state.nodes.capacity
        with np.errstate(divide="ignore"):
            inverse = np.where((cap > 0) & np.isfinite(cap), 1.0 / np.where(cap > 0, cap, 1.0), 0.0)
        self.inverse: NDArray[np.float64] = inverse
        self._dims: dict[tuple[tuple[int, ...], bool], NDArray[np.int64]] = {}

    def _columns(self, t: TaskInfo) -> NDArray[np.int64]:
        """The resource columns scored for ``t``'s shape (cached: shapes repeat all session)."""
        key = (t.dims, bool(t.gpu_cards or t.gpu_milli))
        found = self._dims.get(key)
        if found is None:
            space = self.state.space
            dims = [d for d in t.dims if d != space.pods]
            if key[1]:
                dims.append(space.gpu)
            found = np.asarray(dims, dtype=np.int64)
            self._dims[key] = found
        return found

    def score(self, t: TaskInfo, nodes: NDArray[np.int64]) -> NDArray[np.float64]:
        if self.defer_gpu:
            if t.gpu_cards or t.gpu_milli:
                return np.zeros(len(nodes), dtype=np.float64)
            return np.asarray(self._score(t, nodes) * self.gpuless[nodes], dtype=np.float64)
        return self._score(t, nodes)

    def _score(self, t: TaskInfo, nodes: NDArray[np.int64]) -> NDArray[np.float64]:
        state = self.state
        inverse = self.inverse
        # used-after-placement / capacity = 1 + request/capacity - free/capacity, averaged over
        # the requested dimensions.
        dims = self._columns(t)
        parts = len(dims)
        if not parts:
            return np.zeros(len(nodes), dtype=np.float64)
        if len(nodes) * 4 < state.nodes.size:
            # A few nodes (refreshing what a placement touched): one gather of the (nodes x
            # dims) block each from free and inverse, via flat indices, instead of two
            # gathers per dimension.
            flat = (nodes * state.free.shape[1])[:, None] + dims
            block = (t.req[dims] - state.free.take(flat)) * inverse.take(flat)
            score = block.sum(axis=1)
        else:  # most nodes: whole columns (views) and one gather at the end
            total = np.zeros(state.nodes.size, dtype=np.float64)
            for d in dims.tolist():
                total += (t.req[d] - state.free[:, d]) * inverse[:, d]
            score = total[nodes]
        score += parts
        if t.gpu_milli:
            cards = state.gpu_free[nodes]
            fits = cards >= t.gpu_milli
            used = np.where(fits, (GPU_MILLI_PER_CARD - cards) / GPU_MILLI_PER_CARD, -1.0)
            score += np.maximum(used.max(axis=1), 0.0)
            parts += 1
        score /= parts
        return np.asarray(score, dtype=np.float64)


def register(state: SessionState, ext: Extensions) -> None:
    ext.scorers.append(BinpackScorer(state, state.config.binpack_weight))
