"""binpack: fill a node (and, for fractional GPUs, a card) before opening another.

Score in [0, 1]: the mean, over the resources the task requests, of the node's utilisation after
placing one replica. Fractional-GPU tasks add the utilisation of the fullest card that still fits
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
        cap = state.nodes.capacity
        with np.errstate(divide="ignore"):
            inverse = np.where((cap > 0) & np.isfinite(cap), 1.0 / np.where(cap > 0, cap, 1.0), 0.0)
        self.inverse: NDArray[np.float64] = inverse

    def score(self, t: TaskInfo, nodes: NDArray[np.int64]) -> NDArray[np.float64]:
        state = self.state
        inverse = self.inverse
        # used-after-placement / capacity = 1 + request/capacity - free/capacity, averaged over
        # the requested dimensions. Computed on whole columns (views, no gathers), then the
        # candidate nodes are picked out once.
        dims = [d for d in t.dims if d != state.space.pods]
        if t.gpu_cards or t.gpu_milli:
            dims.append(state.space.gpu)
        if not dims:
            return np.zeros(len(nodes), dtype=np.float64)
        if len(nodes) * 4 < state.nodes.size:  # a few nodes: gather them
            score = np.zeros(len(nodes), dtype=np.float64)
            for d in dims:
                score += (t.req[d] - state.free[nodes, d]) * inverse[nodes, d]
        else:  # most nodes: whole columns (views) and one gather at the end
            total = np.zeros(state.nodes.size, dtype=np.float64)
            for d in dims:
                total += (t.req[d] - state.free[:, d]) * inverse[:, d]
            score = total[nodes]
        score += len(dims)
        parts = len(dims)
        if t.gpu_milli:
            cards = state.gpu_free[nodes]
            fits = cards >= t.gpu_milli
            used = np.where(fits, (GPU_MILLI_PER_CARD - cards) / GPU_MILLI_PER_CARD, -1.0)
            score += np.maximum(used.max(axis=1), 0.0)
            parts += 1
        score /= parts
        return score


def register(state: SessionState, ext: Extensions) -> None:
    ext.scorers.append(BinpackScorer(state, state.config.binpack_weight))
