"""predicates: static node filters, cached per task shape.

Resource fit (including pods per node and GPU cards) is not a mask here: it changes with every
placement, so :func:`operators.scheduler.placement.fit_counts` computes it vectorised; its
rejections are reported as "insufficient free resources".
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

    from operators.scheduler.framework import Extensions
    from operators.scheduler.nodes import NodeIndex
    from operators.scheduler.state import SessionState, TaskInfo


class _Cached(ABC):
    """A node predicate whose mask depends only on the task's shape."""

    name = ""

    def __init__(self, nodes: NodeIndex) -> None:
        self.nodes = nodes
        self._cache: dict[tuple[object, ...], NDArray[np.bool_]] = {}

    def mask(self, t: TaskInfo) -> NDArray[np.bool_]:
        key = self.key(t)
        found = self._cache.get(key)
        if found is None:
            found = self.compute(t)
            self._cache[key] = found
        return found

    def key(self, t: TaskInfo) -> tuple[object, ...]:
        return ()

    @abstractmethod
    def compute(self, t: TaskInfo) -> NDArray[np.bool_]: ...


class NodeReady(_Cached):
    name = "not ready or cordoned"

    def compute(self, t: TaskInfo) -> NDArray[np.bool_]:
        return self.nodes.schedulable


class NodeSelectorMatch(_Cached):
    name = "node selector mismatch"

    def key(self, t: TaskInfo) -> tuple[object, ...]:
        return tuple(sorted(t.task.node_selector.items()))

    def compute(self, t: TaskInfo) -> NDArray[np.bool_]:
        return self.nodes.labels.node_selector(t.task.node_selector)


class NodeAffinityMatch(_Cached):
    name = "node affinity mismatch"

    def key(self, t: TaskInfo) -> tuple[object, ...]:
        return t.task.affinity

    def compute(self, t: TaskInfo) -> NDArray[np.bool_]:
        return self.nodes.labels.affinity(t.task.affinity)


class TaintsTolerated(_Cached):
    name = "taints not tolerated"

    def key(self, t: TaskInfo) -> tuple[object, ...]:
        return t.task.tolerations

    def compute(self, t: TaskInfo) -> NDArray[np.bool_]:
        return self.nodes.tolerated(t.task.tolerations)


def register(state: SessionState, ext: Extensions) -> None:
    for predicate in (NodeReady, NodeSelectorMatch, NodeAffinityMatch, TaintsTolerated):
        ext.predicates.append(predicate(state.nodes))
