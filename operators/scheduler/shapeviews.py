"""Per-shape fit counts and node scores, kept current incrementally.

Most groups of a session share a few shapes (the same requests per replica). Recomputing "how
many replicas fit" and "how good is each node" over every node for every group was most of a
session's time, yet a placement only changes a handful of nodes. So each shape keeps its two
arrays and, when used, refreshes just the nodes touched since its last use (``state.touched``
is an append-only log of nodes whose holdings changed, rollbacks included).

Counts and scores here ignore node masks (pool, predicates); callers apply those. A score is
only meaningful where the count is positive (placement reads it nowhere else).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from operators.scheduler.snapshot import GPU_MILLI_PER_CARD

if TYPE_CHECKING:
    from collections.abc import Callable

    from numpy.typing import NDArray

    from operators.scheduler.framework import Extensions
    from operators.scheduler.state import SessionState, TaskInfo


def counts_at(
    state: SessionState, t: TaskInfo, nodes: NDArray[np.int64] | None
) -> NDArray[np.float64]:
    """How many more replicas shaped like ``t`` fit on each of ``nodes`` (None = all nodes).

    Quantities are integers held exactly in float64, and a correctly rounded quotient of two
    such integers floors to the exact answer, so no epsilon is needed (and floor(a / b) is far
    faster than float ``//`` in numpy). Whole numbers are returned as float64.
    """
    size = state.nodes.size if nodes is None else len(nodes)
    counts: NDArray[np.float64] | None = None
    if nodes is None:
        free = state.free
        for d in t.dims:  # whole columns are views: no gather
            column = np.floor(free[:, d] / t.req[d])
            counts = column if counts is None else np.minimum(counts, column, out=counts)
    elif t.dims:
        # A few nodes: one (nodes x dims) block gather and one pass, not several per column.
        cols, need = _columns(state, t)
        block = np.floor(state.free[nodes[:, None], cols] / need)
        counts = block.min(axis=1)
    if counts is None:
        counts = np.full(size, 1e9)
    if t.gpu_cards:
        full = state.full_cards if nodes is None else state.full_cards[nodes]
        np.minimum(counts, full // t.gpu_cards, out=counts)
    elif t.gpu_milli:
        cards = state.gpu_free if nodes is None else state.gpu_free[nodes]
        per_card = np.floor(np.maximum(cards, 0.0) / t.gpu_milli)
        np.minimum(counts, per_card.sum(axis=1), out=counts)
    # Negative only on a node the snapshot already shows overcommitted.
    np.maximum(counts, 0.0, out=counts)
    return counts


def _columns(state: SessionState, t: TaskInfo) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
    """``t.dims`` as an index array and the request on those dims (cached per shape key)."""
    key = t.shape[0]
    found = state.dim_columns.get(key)
    if found is None:
        cols = np.asarray(t.dims, dtype=np.int64)
        found = (cols, t.req[cols])
        state.dim_columns[key] = found
    return found


class ShapeView:
    __slots__ = ("counts", "scores", "synced")

    def __init__(self, counts: NDArray[np.float64], scores: NDArray[np.float64], synced: int):
        self.counts = counts
        self.scores = scores
        self.synced = synced


class ShapeViews:
    def __init__(self, state: SessionState, ext: Extensions) -> None:
        self.state = state
        self.ext = ext
        self.views: dict[object, ShapeView] = {}
        self.everything = np.arange(state.nodes.size, dtype=np.int64)
        self._allowed: dict[tuple[int, int], tuple[NDArray[np.bool_], NDArray[np.bool_]]] = {}

    def allowed(
        self,
        t: TaskInfo,
        mask: NDArray[np.bool_],
        feasible: Callable[[TaskInfo], NDArray[np.bool_]],
    ) -> NDArray[np.bool_]:
        """``mask & feasible(t)``, cached: node sets (pools) and shapes repeat all session."""
        key = (id(mask), id(t.shape))
        found = self._allowed.get(key)
        if found is not None and found[0] is mask:
            return found[1]
        both = mask & feasible(t)
        self._allowed[key] = (mask, both)  # keeps ``mask`` alive, so its id stays unique
        return both

    def get(self, t: TaskInfo) -> ShapeView:
        state = self.state
        log = state.touched
        view = t.view
        if view is None:
            # requests + fractional share: all that counts and scores depend on
            view = self.views.get(t.shape[0])
        if view is not None:
            t.view = view
        else:
            view = ShapeView(
                counts_at(state, t, None), self.ext.score(t, self.everything), len(log)
            )
            self.views[t.shape[0]] = view
            t.view = view
            return view
        if view.synced < len(log):
            fresh = log[view.synced :]
            view.synced = len(log)
            if len(fresh) * 4 > state.nodes.size:
                view.counts = counts_at(state, t, None)
                view.scores = self.ext.score(t, self.everything)
            else:
                # Repeats are harmless: each write stores the same fresh value.
                nodes = np.asarray(fresh, dtype=np.int64)
                counts = counts_at(state, t, nodes)
                view.counts[nodes] = counts
                # Scores are read only where a replica fits, and a node whose count is 0 now
                # is refreshed again once its holdings change (it is then touched again), so
                # most touched nodes - filled by the placement that touched them - need none.
                live = nodes[counts > 0]
                if len(live):
                    view.scores[live] = self.ext.score(t, live)
        if state.config.fresh_scores:
            view.scores = self.ext.score(t, self.everything)
        return view


# Added to the score of nodes nominated for a task (room held for it by a preemption), so they
# come first: larger than any sum of plugin scores.
NOMINATED_BONUS = 10.0 * GPU_MILLI_PER_CARD
