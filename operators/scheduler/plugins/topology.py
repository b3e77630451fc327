"""topology: GPU cards inside a node (NVLink / NUMA) and preference for well-connected nodes.

Network tiers (hard/soft ``highestTier``, same-ToR units) narrow the node mask in
:mod:`operators.scheduler.placement`; this plugin handles what happens inside a node:

* :func:`pick_gpus_many` (the card picker) chooses card ids: whole-card requests take the NVLink island (else NUMA node)
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


def _best_island(free: set[int], islands: list[list[int]], want: int) -> list[int] | None:
    """The island holding ``want`` free cards with the fewest spare ones (best fit)."""
    best: list[int] | None = None
    for island in islands:
        cards = [c for c in island if c in free]
        if len(cards) >= want and (best is None or len(cards) < len(best)):
            best = cards
    return best[:want] if best is not None else None


def pick_gpus_many(
    state: SessionState, node: int, t: TaskInfo, count: int
) -> tuple[tuple[int, ...], ...]:
    """Card ids for ``count`` replicas shaped like ``t`` on ``node`` (state is not changed)."""
    if not (t.gpu_cards or t.gpu_milli):
        return ((),) * count
    free = state.gpu_free[node].tolist()
    # The answer depends only on the node's hardware kind (its island lists are shared per
    # kind), the free milli per card and the request, and a large cluster repeats these few
    # combinations thousands of times: memoise.
    key = (id(state.nodes.nvlink_islands[node]), tuple(free), t.gpu_cards, t.gpu_milli, count)
    found = state.gpu_picks.get(key)
    if found is None:
        found = _pick(state, node, t, count, free)
        state.gpu_picks[key] = found
    return found


def _pick(
    state: SessionState, node: int, t: TaskInfo, count: int, free: list[float]
) -> tuple[tuple[int, ...], ...]:
    width = state.nodes.gpu_width
    out: list[tuple[int, ...]] = []
    if t.gpu_milli:
        for _ in range(count):
            fitting = [c for c in range(width) if free[c] >= t.gpu_milli - _EPS]
            if not fitting:
                out.append(())
                continue
            # Fullest card that fits: fractional pods share cards before splitting fresh ones.
            card = min(fitting, key=lambda c: (free[c], c))
            free[card] -= t.gpu_milli
            out.append((card,))
        return tuple(out)
    full = [c for c in range(width) if free[c] >= GPU_MILLI_PER_CARD - _EPS]
    for _ in range(count):
        ids = _whole_cards(state, node, full, t.gpu_cards)
        if ids:
            taken = set(ids)
            full = [c for c in full if c not in taken]
        out.append(ids)
    return tuple(out)


def _whole_cards(state: SessionState, node: int, full: list[int], want: int) -> tuple[int, ...]:
    """``want`` cards out of the whole free ``full`` ones, keeping islands intact."""
    if len(full) < want:
        return ()
    layout = state.nodes.layout_of[node]
    if not layout:
        return tuple(full[:want])
    free = set(full)
    if want == 1:
        # A single card from the most-used island keeps whole islands free for big pods.
        chosen = _best_island(free, state.nodes.nvlink_islands[node], 1)
        return tuple(chosen) if chosen is not None else (full[0],)
    for islands in (state.nodes.nvlink_islands[node], state.nodes.numa_islands[node]):
        chosen = _best_island(free, islands, want)
        if chosen is not None:
            return tuple(sorted(chosen))
    # Span as few islands as possible: largest islands first.
    spans = [[c for c in island if c in free] for island in state.nodes.nvlink_islands[node]]
    picked: list[int] = []
    for cards in sorted(spans, key=lambda cs: (-len(cs), cs[0] if cs else 0)):
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
        if t.gpu_cards <= 1:
            return np.zeros(len(nodes), dtype=np.float64)
        state = self.state
        layout = state.nodes.has_gpu_layout[nodes]
        if not layout.any():
            return np.zeros(len(nodes), dtype=np.float64)
        in_nvlink = state.nvlink_best[nodes] >= t.gpu_cards
        in_numa = state.numa_best[nodes] >= t.gpu_cards
        # 1.0 in one NVLink island, else 0.5 in one NUMA node, else 0; only on nodes that
        # describe their layout.
        locality = np.where(in_nvlink, 1.0, in_numa * 0.5)
        locality *= layout
        return locality


def register(state: SessionState, ext: Extensions) -> None:
    ext.scorers.append(TopologyScorer(state, state.config.topology_weight))

    def pick(t: TaskInfo, node: int, count: int) -> tuple[tuple[int, ...], ...]:
        return pick_gpus_many(state, node, t, count)

    ext.card_pickers.append(pick)
