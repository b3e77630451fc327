"""FGD's GPU fragmentation measure (Weng et al., USENIX ATC'23) on trace pod shapes.

The measure itself is the core's (operators/scheduler/plugins/fragmentation.py), so the metric
the simulator reports and the score Sluice places by are one computation. Here: the paper's
typical pods - the most frequent (CPU, GPU per card, cards, GPU models) shapes of the trace that
together make up 95% of its pods - and its GPU-model filter.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from operators.scheduler.plugins.fragmentation import FragModel

if TYPE_CHECKING:
    from collections.abc import Iterable

MILLI = 1000
COVERAGE = 0.95


@dataclass(frozen=True, slots=True)
class PodShape:
    """What fragmentation looks at in a pod: CPU, GPU milli per card, cards, allowed models."""

    cpu_milli: int
    gpu_milli: int  # per card: 1000 for whole cards, 1..999 shared, 0 CPU-only
    gpus: int
    models: tuple[str, ...] = ()  # empty: any model


@dataclass(frozen=True, slots=True)
class TypicalPods:
    shapes: tuple[PodShape, ...]
    freq: tuple[float, ...]  # sums to 1


def typical_pods(shapes: Iterable[PodShape], coverage: float = COVERAGE) -> TypicalPods:
    """Most frequent shapes first (ties: smaller CPU, milli, cards, models first - the
    reverse of the paper's ascending sort) until ``coverage`` of the pods, renormalised."""
    counts = Counter(shapes)
    total = sum(counts.values())
    ranked = sorted(
        counts.items(),
        key=lambda kv: (kv[1], kv[0].cpu_milli, kv[0].gpu_milli, kv[0].gpus, kv[0].models),
        reverse=True,
    )
    chosen: list[tuple[PodShape, int]] = []
    covered = 0
    for shape, count in ranked:
        if covered >= coverage * total:
            break
        chosen.append((shape, count))
        covered += count
    return TypicalPods(
        shapes=tuple(s for s, _ in chosen), freq=tuple(c / covered for _, c in chosen)
    )


def frag_model(typical: TypicalPods, node_models: list[str]) -> FragModel:
    """The core's fragmentation model for these typical pods; a pod limited to GPU models may
    use only nodes of those models (the paper's filter)."""
    models = np.asarray(node_models, dtype=object)
    access = np.ones((len(typical.shapes), len(node_models)), dtype=np.bool_)
    for i, shape in enumerate(typical.shapes):
        if shape.models:
            access[i] = np.isin(models, list(shape.models))
    return FragModel(
        cpu=np.asarray([s.cpu_milli for s in typical.shapes], dtype=np.float64),
        milli=np.asarray([s.gpu_milli for s in typical.shapes], dtype=np.float64),
        cards=np.asarray([max(s.gpus, 1) for s in typical.shapes], dtype=np.float64),
        freq=np.asarray(typical.freq, dtype=np.float64),
        access=access,
    )
