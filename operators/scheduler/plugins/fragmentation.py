"""fragmentation: keep idle GPU usable by the pods this cluster actually runs (FGD-style).

Idea from Weng et al., "Beware of Fragmentation" (USENIX ATC'23). The session's own tasks
(pending and running) stand for the workload: their most frequent shapes, covering 95% of
tasks, are the *typical pods*, each weighted by its frequency. On a node, idle GPU milli counts
as fragment for a typical pod when the pod could not use it: all of it when the pod does not
fit there at all (too few cards with enough free milli, too little CPU, or a node its
predicates reject), otherwise the milli on cards with less free than the pod wants per card.
Beyond the paper's measure, the usable idle GPU that the node's free CPU cannot feed may count
too (``SessionConfig.fragmentation_cpu_reach``, 0.5 by default): with ``c`` free cores a pod of
``p`` cores per ``d`` GPU milli reaches at most ``c / p * d`` milli, so a node whose cores run
out before its cards is fragmented in proportion, and every core taken there costs - not only
the core after which no typical pod fits. A node's fragment is the weighted sum over typical pods: each
weighs its frequency plus, times ``SessionConfig.fragmentation_scarcity`` (0.5 by default),
its scarcity (:func:`scarcity`), so the few nodes a large pod fits are not the first the reach
spends.

Score in [0, 1): ``sigmoid((fragment before - fragment after placing one replica) / 1000)``
rounded down to 1/20 (``SessionConfig.fragmentation_levels``), so a placement that
leaves no more unusable GPU than before scores 0.5 and one that uses up fragments scores
higher. Tasks without GPUs score 0.5 everywhere unless their CPU decides whether a typical
pod still fits; among equal scores they prefer the node with the least idle
GPU (:func:`gpu_idle_tiebreak`). Combined with the other scorers by weight
(``SessionConfig.fragmentation_weight``).

Card choice (a card picker, asked before topology's): a shared-card (fractional) replica takes
the card after which the node's fragment is least - the card the score assumed - and among
equal cards the fullest. Whole-card requests are left to topology (NVLink/NUMA islands).
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

import numpy as np

from operators.scheduler.snapshot import GPU_MILLI_PER_CARD

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from operators.scheduler.framework import Extensions
    from operators.scheduler.state import SessionState, TaskInfo

# Scores are rounded down to 1/20 by default (SessionConfig.fragmentation_levels), so nodes
# whose fragment changes alike tie and the first node in order takes the pod: first-fit among
# equals keeps later nodes whole for large pods. Measured on the openb trace
# (docs/quality.md): unrounded scores leave ~1.4 pp more GPUs unallocated; with the CPU reach
# on, 1/20 beats 1/100.
COVERAGE = 0.95  # typical pods: the most frequent shapes covering this share of tasks
MAX_TYPICAL = 48  # bound on typical shapes (scoring cost grows linearly with them)
_EPS = 1e-6


class FragModel:
    """Typical pods as arrays; ``access[t, node]``: may typical pod ``t`` run on the node."""

    def __init__(
        self,
        cpu: NDArray[np.float64],
        milli: NDArray[np.float64],
        cards: NDArray[np.float64],
        freq: NDArray[np.float64],
        access: NDArray[np.bool_],
        cpu_reach: float = 0.0,
    ) -> None:
        self.cpu = cpu  # milli-CPU per pod
        self.milli = milli  # GPU milli per card: 1000 whole, 1..999 shared, 0 CPU-only
        self.cards = cards  # cards per pod
        self.freq = freq  # sums to 1
        self.access = access
        self.cpu_reach = cpu_reach  # weight of the GPU beyond the CPU's reach (0: the paper's)
        with np.errstate(divide="ignore"):
            # GPU milli one core feeds, per typical pod; CPU-free pods are never CPU-bound.
            self.per_core = np.where(cpu > 0, milli * cards / np.maximum(cpu, _EPS), np.inf)

    def amount(
        self, free: NDArray[np.float64], cpu: NDArray[np.float64], nodes: NDArray[np.int64]
    ) -> NDArray[np.float64]:
        """Fragment (GPU milli) per row: ``free`` is (rows, cards) free milli per card, ``cpu``
        free milli-CPU per row, ``nodes`` the node of each row (rows may repeat a node: the
        hypothetical states of one node)."""
        total = free.sum(axis=1)
        # All typical pods at once, (typical, rows, cards): a loop over typical pods cost more
        # in per-call overhead than in arithmetic.
        usable = free[None, :, :] >= self.milli[:, None, None]
        fits = usable.sum(axis=2) >= self.cards[:, None]
        fits &= cpu[None, :] >= self.cpu[:, None]
        fits &= self.access[:, nodes]
        small = np.where(usable, 0.0, free[None, :, :]).sum(axis=2)
        if self.cpu_reach:
            small += self.cpu_reach * self.beyond_cpu(total[None, :] - small, cpu)
        unusable = np.where(fits, small, total[None, :])
        # A CPU-only pod uses no idle GPU: all of it is fragment for it.
        unusable[self.milli == 0] = total
        return np.asarray(self.freq @ unusable, dtype=np.float64)

    def beyond_cpu(
        self, usable: NDArray[np.float64], cpu: NDArray[np.float64]
    ) -> NDArray[np.float64]:
        """(typical, rows): usable GPU milli beyond what ``cpu`` free milli-CPU feeds. Fractional
        on purpose: a whole-pod count changes only at the core after which one pod fewer fits,
        and tells nothing apart before it."""
        with np.errstate(invalid="ignore"):
            # 0 cores x a CPU-free pod's infinite reach is NaN: fmax reads it as not bound.
            reach = np.maximum(cpu, 0.0)[None, :] * self.per_core[:, None]
            return np.asarray(np.fmax(usable - reach, 0.0), dtype=np.float64)


def decrease_after(
    model: FragModel,
    free: NDArray[np.float64],
    cpu: NDArray[np.float64],
    nodes: NDArray[np.int64],
    t: TaskInfo,
    cpu_request: float,
) -> NDArray[np.float64]:
    """Fragment decrease when one replica of ``t`` lands on each node (cards chosen as the
    core does: whole cards first free ones; a shared slice the card that decreases most).
    Nodes where it does not fit get -inf."""
    before = model.amount(free, cpu, nodes)
    cpu_after = cpu - cpu_request
    if t.gpu_milli:
        width = free.shape[1]
        trial = np.repeat(free[:, None, :], width, axis=1)
        idx = np.arange(width)
        trial[:, idx, idx] -= t.gpu_milli
        after = model.amount(
            trial.reshape(-1, width), np.repeat(cpu_after, width), np.repeat(nodes, width)
        ).reshape(-1, width)
        gain = np.where(free >= t.gpu_milli, before[:, None] - after, -np.inf)
        return np.asarray(gain.max(axis=1), dtype=np.float64)
    after_free = free
    if t.gpu_cards:
        whole = free >= GPU_MILLI_PER_CARD
        taken = whole & (np.cumsum(whole, axis=1) <= t.gpu_cards)
        after_free = np.where(taken, 0.0, free)
    return before - model.amount(after_free, cpu_after, nodes)


class FragmentationScorer:
    name = "fragmentation"

    def __init__(self, state: SessionState, ext: Extensions, weight: float) -> None:
        self.state = state
        self.ext = ext
        self.weight = weight
        self._model: FragModel | None = None

    def model(self) -> FragModel:
        # Built on first use: the predicate masks need every plugin registered.
        if self._model is None:
            self._model = typical_model(self.state, self.ext)
        return self._model

    def score(self, t: TaskInfo, nodes: NDArray[np.int64]) -> NDArray[np.float64]:
        state = self.state
        gain = decrease_after(
            self.model(),
            state.gpu_free[nodes],
            state.free[nodes, state.space.cpu],
            nodes,
            t,
            float(t.req[state.space.cpu]),
        )
        with np.errstate(over="ignore"):
            share = 1.0 / (1.0 + np.exp(-gain / GPU_MILLI_PER_CARD))
        levels = state.config.fragmentation_levels
        score = np.floor(share * levels) / levels
        if not (t.gpu_cards or t.gpu_milli):
            score += gpu_idle_tiebreak(state.gpu_free[nodes], levels)
        return np.asarray(score, dtype=np.float64)

    def pick_cards(self, t: TaskInfo, node: int, count: int) -> tuple[tuple[int, ...], ...] | None:
        if not t.gpu_milli:
            return None
        return least_fragment_cards(self.model(), self.state, node, t, count)


def gpu_idle_tiebreak(free: NDArray[np.float64], levels: int) -> NDArray[np.float64]:
    """For a task without GPUs, below half a score level: the less idle GPU on the node, the more.

    Its CPU and memory can strand the node's idle GPU (GPU pods then find cards but no CPU),
    and the fragment measure sees that only once a typical pod stops fitting, so until then
    every node ties and the first in order would take it. On the node with the least idle GPU
    it can strand the least. Measured on the openb gpushare100 trace (docs/quality.md).
    """
    idle = np.maximum(free, 0.0).sum(axis=1)
    most = GPU_MILLI_PER_CARD * max(free.shape[1], 1)
    return np.asarray(0.5 / levels * (1.0 - idle / most), dtype=np.float64)


def typical_model(state: SessionState, ext: Extensions) -> FragModel:
    """The session's tasks by shape, most frequent first, until COVERAGE of them."""
    counts: Counter[tuple[object, ...]] = Counter()
    sample: dict[tuple[object, ...], TaskInfo] = {}
    for t in state.tasks:
        # What fragmentation looks at: CPU, GPU per card, cards, and where it may run
        # (memory and other resources do not make a shape different here).
        key = (float(t.req[state.space.cpu]), t.gpu_cards, t.gpu_milli, *t.shape[1:])
        counts[key] += 1
        sample.setdefault(key, t)
    total = sum(counts.values())
    chosen: list[tuple[TaskInfo, int]] = []
    covered = 0
    for key, count in counts.most_common(MAX_TYPICAL):
        if covered >= COVERAGE * total:
            break
        chosen.append((sample[key], count))
        covered += count
    n = state.nodes.size
    cpu_dim = state.space.cpu
    cpu = np.asarray([float(t.req[cpu_dim]) for t, _ in chosen], dtype=np.float64)
    milli = np.asarray(
        [GPU_MILLI_PER_CARD if t.gpu_cards else float(t.gpu_milli) for t, _ in chosen],
        dtype=np.float64,
    )
    cards = np.asarray([max(t.gpu_cards, 1) for t, _ in chosen], dtype=np.float64)
    tasks = np.asarray([c for _, c in chosen], dtype=np.float64)
    access = (
        np.stack([ext.feasible(t) for t, _ in chosen]) if chosen else np.zeros((0, n), np.bool_)
    )
    freq = tasks / max(covered, 1)
    weight = state.config.fragmentation_scarcity
    if weight and chosen:
        freq = freq + weight * scarcity(
            tasks * np.where(milli > 0, milli * cards, 0.0),
            cpu,
            milli,
            cards,
            access,
            state.nodes.capacity[:, cpu_dim],
            state.nodes.gpu_capacity,
        )
    return FragModel(
        cpu=cpu,
        milli=milli,
        cards=cards,
        freq=freq,
        access=access,
        cpu_reach=state.config.fragmentation_cpu_reach,
    )


def scarcity(
    demand: NDArray[np.float64],
    cpu: NDArray[np.float64],
    milli: NDArray[np.float64],
    cards: NDArray[np.float64],
    access: NDArray[np.bool_],
    node_cpu: NDArray[np.float64],
    node_cards: NDArray[np.float64],
) -> NDArray[np.float64]:
    """Per typical pod, how much of the GPU that only a few nodes hold its demand needs:
    ``min(1, demand / supply) * (1 - supply / all GPU)``, where ``supply`` is the GPU capacity
    of the nodes the pod fits when they are empty and ``demand`` the GPU milli its tasks ask.

    A pod that fits nearly every node scores about 0 (others can go elsewhere); one that fits
    a few nodes whose GPU its tasks would fill scores about 1. Added (times
    ``SessionConfig.fragmentation_scarcity``) to the pod's frequency, it makes breaking such a
    node for it cost more than the paper's frequency says - the frequency of large pods is
    small, but nothing else can serve them, and other pods (above all CPU-heavy ones steered
    by the CPU reach to the nodes with cores to spare) would otherwise take those nodes first.
    """
    enough_cards = (node_cards[None, :, :] >= milli[:, None, None]).sum(axis=2) >= cards[:, None]
    fits = access & enough_cards & (node_cpu[None, :] >= cpu[:, None])
    per_node = node_cards.sum(axis=1)
    supply = fits.astype(np.float64) @ per_node
    total = float(per_node.sum())
    with np.errstate(divide="ignore", invalid="ignore"):
        need = np.where(supply > 0, np.minimum(demand / supply, 1.0), 0.0)
    rare = 1.0 - supply / total if total else np.zeros_like(supply)
    return np.asarray(need * rare, dtype=np.float64)


def least_fragment_cards(
    model: FragModel, state: SessionState, node: int, t: TaskInfo, count: int
) -> tuple[tuple[int, ...], ...]:
    """Cards for ``count`` shared-card replicas of ``t`` on ``node``, one after another: each
    the card that leaves the least fragment, the fullest among equals (state is not changed)."""
    free = state.gpu_free[node].astype(np.float64)
    width = len(free)
    idx = np.arange(width)
    rows = np.full(width, node, dtype=np.int64)
    cpu = float(state.free[node, state.space.cpu])
    request = float(t.req[state.space.cpu])
    out: list[tuple[int, ...]] = []
    for _ in range(count):
        fits = free >= t.gpu_milli - _EPS
        if not fits.any():
            out.append(())
            continue
        cpu -= request
        trial = np.repeat(free[None, :], width, axis=0)
        trial[idx, idx] -= t.gpu_milli
        after = model.amount(trial, np.full(width, cpu), rows)
        # Fragments differ by whole milli: round away float noise so equal cards tie.
        order = np.lexsort((idx, free, np.where(fits, np.round(after, 6), np.inf)))
        card = int(order[0])
        free[card] -= t.gpu_milli
        out.append((card,))
    return tuple(out)


def register(state: SessionState, ext: Extensions) -> None:
    if state.config.fragmentation_weight:
        scorer = FragmentationScorer(state, ext, state.config.fragmentation_weight)
        ext.scorers.append(scorer)
        ext.card_pickers.append(scorer.pick_cards)
