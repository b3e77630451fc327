"""The FGD paper's reference placement policies as node scorers for the core's scorer hook.

Each policy is a :class:`~operators.scheduler.framework.NodeScorer` built by a factory passed in
``SessionConfig.scorers``; run with ``binpack_weight=0`` and ``topology_weight=0`` so it decides
alone. Scores (but Random's) are integers in [0, 100] like the kube-scheduler plugins of the paper's simulator,
because integer scores tie often and ties go to the first node in (seeded) node order - the
paper's tie-break, which the core's argmax reproduces. Formulas (facts from the paper's code):

* Random: a node drawn uniformly among those that fit (a random real score per node and
  placement), and a random card among those that fit;
* DotProd: 100 * (1 - mean of free x request over (CPU, GPU milli)), normalised by 128 cores and
  8 GPUs - the smaller the free room along the pod's request, the better (Tetris-style);
* BestFit: 100 * (1 - 0.5 * cpu_left/128 cores - 0.5 * gpu_left/8 GPUs), left after placing;
* Packing: shared cards first (100 - free share/10), then free cards of a used node
  (50 - cards taken), then empty nodes (33 - free cards);
* FGD: 100 * sigmoid((fragment before - fragment after) / 1000), and for a shared pod the card
  that leaves the least fragment (the core's fragmentation card picker, with FGD's typical pods).

The other policies take the best-fit card (fullest that fits), which is the core's own choice
when its fragmentation plugin is off.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from operators.scheduler.plugins.fragmentation import decrease_after, least_fragment_cards
from operators.simulator.fragmentation import MILLI, TypicalPods, frag_model

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from operators.scheduler.framework import CardPicker, NodeScorer
    from operators.scheduler.plugins.fragmentation import FragModel
    from operators.scheduler.state import SessionState, TaskInfo

GPU_MODEL_LABEL = "nvidia.com/gpu.product"
MAX_CPU = 128_000.0  # the paper's largest node: 128 cores ...
MAX_GPU = 8_000.0  # ... and 8 GPUs, in milli


class Policy(enum.StrEnum):
    RANDOM = "random"
    DOTPROD = "dotprod"
    BESTFIT = "bestfit"
    PACKING = "packing"
    FGD = "fgd"


def _node_models(state: SessionState) -> list[str]:
    codes, table = state.nodes.labels.column(GPU_MODEL_LABEL)
    names = {code: name for name, code in table.items()}
    return [names.get(int(c), "") for c in codes]


class _Scorer:
    weight = 1.0

    def __init__(self, state: SessionState) -> None:
        self.state = state
        self.cpu_dim = state.space.cpu
        self.gpu_dim = state.space.gpu

    def request(self, t: TaskInfo) -> tuple[float, float]:
        return float(t.req[self.cpu_dim]), float(t.req[self.gpu_dim])


class RandomScorer(_Scorer):
    name = "random"

    def __init__(self, state: SessionState, seed: int) -> None:
        super().__init__(state)
        self.rng = np.random.default_rng(seed)

    def score(self, t: TaskInfo, nodes: NDArray[np.int64]) -> NDArray[np.float64]:
        # Real-valued, so that nothing ties: with integer scores the first of the ~1% of nodes
        # drawing the top score wins, which favours nodes early in the order (packing-like).
        return self.rng.random(len(nodes))


class DotProdScorer(_Scorer):
    name = "dotprod"

    def score(self, t: TaskInfo, nodes: NDArray[np.int64]) -> NDArray[np.float64]:
        cpu, gpu = self.request(t)
        free_cpu = self.state.free[nodes, self.cpu_dim]
        free_gpu = self.state.gpu_free[nodes].sum(axis=1)
        dot = (free_cpu / MAX_CPU) * (cpu / MAX_CPU) + (free_gpu / MAX_GPU) * (gpu / MAX_GPU)
        return np.asarray(np.trunc(100.0 * (1.0 - dot / 2.0)), dtype=np.float64)


class BestFitScorer(_Scorer):
    name = "bestfit"

    def score(self, t: TaskInfo, nodes: NDArray[np.int64]) -> NDArray[np.float64]:
        cpu, gpu = self.request(t)
        left_cpu = self.state.free[nodes, self.cpu_dim] - cpu
        left_gpu = self.state.gpu_free[nodes].sum(axis=1) - gpu
        score = 1.0 - 0.5 * left_cpu / MAX_CPU - 0.5 * left_gpu / MAX_GPU
        return np.asarray(np.trunc(100.0 * score), dtype=np.float64)


class PackingScorer(_Scorer):
    name = "packing"

    def score(self, t: TaskInfo, nodes: NDArray[np.int64]) -> NDArray[np.float64]:
        per_card = MILLI if t.gpu_cards else t.gpu_milli
        if not per_card:
            return np.zeros(len(nodes), dtype=np.float64)
        want = max(t.gpu_cards, 1)
        cards = np.sort(self.state.gpu_free[nodes], axis=1)  # least free first
        exists = np.sort(self.state.nodes.gpu_capacity[nodes], axis=1) > 0
        whole = cards >= MILLI
        all_free = whole.sum(axis=1) == exists.sum(axis=1)
        usable = cards >= per_card
        chosen = usable & (np.cumsum(usable, axis=1) <= want)
        fresh_used = (chosen & whole).sum(axis=1)
        shared_free = (chosen * np.floor(cards * 100 / MILLI)).sum(axis=1)
        free_count = whole.sum(axis=1)
        empty_node = np.maximum(33 - free_count, free_count)
        used_node = np.maximum(50 - fresh_used, 33)
        shared = np.maximum(100 - np.floor(shared_free / 10), 50)
        return np.asarray(
            np.where(all_free, empty_node, np.where(fresh_used > 0, used_node, shared)),
            dtype=np.float64,
        )


class FgdScorer(_Scorer):
    name = "fgd"

    def __init__(self, state: SessionState, typical: TypicalPods) -> None:
        super().__init__(state)
        self.frag = frag_model(typical, _node_models(state))

    def score(self, t: TaskInfo, nodes: NDArray[np.int64]) -> NDArray[np.float64]:
        return fgd_scores(self.frag, self.state, t, nodes)


def fgd_scores(
    frag: FragModel, state: SessionState, t: TaskInfo, nodes: NDArray[np.int64]
) -> NDArray[np.float64]:
    """int(100 * sigmoid(fragment decrease / 1000)); a shared-card pod's best card."""
    gain = decrease_after(
        frag,
        state.gpu_free[nodes],
        state.free[nodes, state.space.cpu],
        nodes,
        t,
        float(t.req[state.space.cpu]),
    )
    with np.errstate(over="ignore"):
        return np.trunc(100.0 / (1.0 + np.exp(-gain / MILLI)))


class RandomCards:
    """A random card (or set of whole cards) among those that fit, seeded."""

    def __init__(self, state: SessionState, seed: int) -> None:
        self.state = state
        self.rng = np.random.default_rng(seed + 7_919)  # independent of the node scores

    def __call__(self, t: TaskInfo, node: int, count: int) -> tuple[tuple[int, ...], ...]:
        free = self.state.gpu_free[node].astype(np.float64)
        per_card = t.gpu_milli or MILLI
        want = max(t.gpu_cards, 1)
        out: list[tuple[int, ...]] = []
        for _ in range(count):
            fitting = np.flatnonzero(free >= per_card)
            if len(fitting) < want:
                out.append(())
                continue
            cards = np.sort(self.rng.choice(fitting, want, replace=False))
            free[cards] -= per_card
            out.append(tuple(int(c) for c in cards))
        return tuple(out)


class FgdCards:
    """FGD's card choice for shared pods; whole cards are left to the core."""

    def __init__(self, state: SessionState, typical: TypicalPods) -> None:
        self.state = state
        self.frag = frag_model(typical, _node_models(state))

    def __call__(self, t: TaskInfo, node: int, count: int) -> tuple[tuple[int, ...], ...] | None:
        if not t.gpu_milli:
            return None
        return least_fragment_cards(self.frag, self.state, node, t, count)


ScorerMaker = Callable[["SessionState"], "NodeScorer"]
PickerMaker = Callable[["SessionState"], "CardPicker"]


def scorer(policy: Policy, *, seed: int = 0, typical: TypicalPods | None = None) -> ScorerMaker:
    """A factory for ``SessionConfig.scorers``."""
    if policy is Policy.RANDOM:
        return lambda state: RandomScorer(state, seed)
    if policy is Policy.DOTPROD:
        return DotProdScorer
    if policy is Policy.BESTFIT:
        return BestFitScorer
    if policy is Policy.PACKING:
        return PackingScorer
    if typical is None:
        raise ValueError("FGD needs the workload's typical pods")
    chosen = typical
    return lambda state: FgdScorer(state, chosen)


def card_picker(
    policy: Policy, *, seed: int = 0, typical: TypicalPods | None = None
) -> PickerMaker | None:
    """A factory for ``SessionConfig.card_pickers``; None: the core's best-fit card."""
    if policy is Policy.RANDOM:
        return lambda state: RandomCards(state, seed)
    if policy is Policy.FGD:
        if typical is None:
            raise ValueError("FGD needs the workload's typical pods")
        chosen = typical
        return lambda state: FgdCards(state, chosen)
    return None
