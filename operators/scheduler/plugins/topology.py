"""topology: GPU cards inside a node (NVLink / NUMA) and preference for well-connected nodes.

Network tiers (hard/soft ``highestTier``, same-ToR units) narrow the node mask in
:mod:`operators.scheduler.placement`; this plugin handles what happens inside a node:

* :func:`pick_gpus` chooses card ids: whole-card requests take the NVLink island (else NUMA node)
  that holds them with the fewest spare cards (best fit keeps big islands whole); if no island
  holds them, the fewest islands are spanned. Fractional requests take the fullest card that fits.
* the scorer prefers, for multi-card pods, nodes where the cards fit in one NVLink island (1.0),
  else one NUMA node (0.5). (A task's nominated node is preferred by placement itself.)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from operators.scheduler.snapshot import GPU_MILLI_PER_CARD

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from operators.scheduler.framework import Extensions
    from operators.scheduler.state import SessionState, TaskInfo

_EPS = 1e-6


def _best_island(free_cards: list[int], groups: list[int], want: int) -> list[int] | None:
    islands: dict[int, list[int]] = {}
    for card in free_cards:
        islands.setdefault(groups[card], []).append(card)
    fitting = [cards for cards in islands.values() if len(cards) >= want]
    if not fitting:
        return None
    best = min(fitting, key=lambda cards: (len(cards), cards[0]))
    return best[:want]


def pick_gpus_many(
    state: SessionState, node: int, t: TaskInfo, count: int
) -> tuple[tuple[int, ...], ...]:
    """Card ids for ``count`` replicas shaped like ``t`` on ``node`` (state is not changed)."""
    if not (t.gpu_cards or t.gpu_milli):
        return ((),) * count
    free = state.gpu_free[node].tolist()
    share = float(t.gpu_milli or GPU_MILLI_PER_CARD)
    out = []
    for _ in range(count):
        ids = pick_gpus(state, node, t, free)
        for card in ids:
            free[card] -= share
        out.append(ids)
    return tuple(out)


def pick_gpus(
    state: SessionState, node: int, t: TaskInfo, free: list[float] | None = None
) -> tuple[int, ...]:
    if not (t.gpu_cards or t.gpu_milli):
        return ()
    if free is None:
        free = state.gpu_free[node].tolist()
    if t.gpu_milli:
        fitting = [c for c in range(state.nodes.gpu_width) if free[c] >= t.gpu_milli - _EPS]
        # Fullest card that fits: fractional pods share cards before splitting fresh ones.
        return (min(fitting, key=lambda c: (free[c], c)),) if fitting else ()
    full = [c for c in range(state.nodes.gpu_width) if free[c] >= GPU_MILLI_PER_CARD - _EPS]
    want = t.gpu_cards
    if len(full) < want:
        return ()
    layout = state.nodes.layout_of[node]
    if want == 1 or not layout:
        if want == 1 and layout:
            # A single card from the most-used island keeps whole islands free for big pods.
            chosen = _best_island(full, state.nodes.nvlink_ids[node], 1)
            if chosen is not None:
                return tuple(chosen)
        return tuple(full[:want])
    for groups in (state.nodes.nvlink_ids[node], state.nodes.numa_ids[node]):
        chosen = _best_island(full, groups, want)
        if chosen is not None:
            return tuple(sorted(chosen))
    # Span as few islands as possible: largest islands first.
    islands: dict[int, list[int]] = {}
    for card in full:
        islands.setdefault(state.nodes.nvlink_ids[node][card], []).append(card)
    picked: list[int] = []
    for cards in sorted(islands.values(), key=lambda cs: (-len(cs), cs[0])):
        picked.extend(cards[: want - len(picked)])
        if len(picked) == want:
            break
    return tuple(sorted(picked))


class TopologyScorer:
    name = "topology"

    def __init__(self, state: SessionState, weight: float) -> None:
        self.state = state
        self.weight = weight

    def score(self, t: TaskInfo, nodes: NDArray[np.int64]) -> NDArray[np.float64]:
        out = np.zeros(len(nodes), dtype=np.float64)
        if t.gpu_cards <= 1:
            return out
        state = self.state
        layout = state.nodes.has_gpu_layout[nodes]
        if not layout.any():
            return out
        in_nvlink = state.nvlink_best[nodes] >= t.gpu_cards
        in_numa = state.numa_best[nodes] >= t.gpu_cards
        locality = np.where(in_nvlink, 1.0, np.where(in_numa, 0.5, 0.0))
        return out + np.where(layout, locality, 0.0)


def register(state: SessionState, ext: Extensions) -> None:
    ext.scorers.append(TopologyScorer(state, state.config.topology_weight))
