"""Static per-session node index: labels as integer columns, pools, tiers, GPU layout.

Everything a predicate or a topology score needs is turned into numpy arrays once per session, so
a selector is evaluated over all nodes with a handful of vector comparisons instead of a Python
loop per node (the benchmark cluster has 5,000 nodes and 2,000 gangs).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from operators.scheduler.snapshot import (
    DEFAULT_POOL,
    GPU,
    GPU_MILLI_PER_CARD,
    HOSTNAME_LABEL,
    PODS,
    GpuTopology,
    LabelSelector,
    NodeSelectorTerm,
    Pool,
    SelectorOperator,
    SelectorRequirement,
    TaintEffect,
    Toleration,
    Topology,
)

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from numpy.typing import NDArray

    from operators.scheduler.resources import ResourceSpace
    from operators.scheduler.snapshot import Node

_ABSENT = -1  # label code for "node has no such label"


class LabelColumns:
    """Per label key: an int code per node (``-1`` = absent) and the value -> code table."""

    def __init__(self, labels: Sequence[Mapping[str, str]]) -> None:
        self._labels = labels
        self._columns: dict[str, tuple[NDArray[np.int32], dict[str, int]]] = {}

    def column(self, key: str) -> tuple[NDArray[np.int32], dict[str, int]]:
        found = self._columns.get(key)
        if found is None:
            table: dict[str, int] = {}
            codes = np.fromiter(
                (
                    table.setdefault(v, len(table)) if (v := lab.get(key)) is not None else _ABSENT
                    for lab in self._labels
                ),
                dtype=np.int32,
                count=len(self._labels),
            )
            found = (codes, table)
            self._columns[key] = found
        return found

    def equals(self, key: str, value: str) -> NDArray[np.bool_]:
        codes, table = self.column(key)
        code = table.get(value)
        if code is None:
            return np.zeros(len(codes), dtype=np.bool_)
        return np.asarray(codes == code)

    def requirement(self, req: SelectorRequirement) -> NDArray[np.bool_]:
        codes, table = self.column(req.key)
        present = codes != _ABSENT
        match req.operator:
            case SelectorOperator.IN | SelectorOperator.NOT_IN:
                wanted = [table[v] for v in req.values if v in table]
                inside = np.isin(codes, wanted) if wanted else np.zeros(len(codes), np.bool_)
                out = inside if req.operator is SelectorOperator.IN else ~inside
                return np.asarray(out, dtype=np.bool_)
            case SelectorOperator.EXISTS:
                return np.asarray(present, dtype=np.bool_)
            case SelectorOperator.DOES_NOT_EXIST:
                return np.asarray(~present, dtype=np.bool_)
            case SelectorOperator.GT | SelectorOperator.LT:
                # Rare: evaluate per distinct value, not per node.
                ok_codes = [code for value, code in table.items() if req.matches({req.key: value})]
                return np.isin(codes, ok_codes) if ok_codes else np.zeros(len(codes), np.bool_)

    def selector(self, selector: LabelSelector) -> NDArray[np.bool_]:
        mask = np.ones(len(self._labels), dtype=np.bool_)
        for key, value in selector.match_labels.items():
            mask &= self.equals(key, value)
        for req in selector.match_expressions:
            mask &= self.requirement(req)
        return mask

    def node_selector(self, pairs: Mapping[str, str]) -> NDArray[np.bool_]:
        mask = np.ones(len(self._labels), dtype=np.bool_)
        for key, value in pairs.items():
            mask &= self.equals(key, value)
        return mask

    def affinity(self, terms: tuple[NodeSelectorTerm, ...]) -> NDArray[np.bool_]:
        """Required node affinity: terms are ORed, expressions inside a term ANDed."""
        if not terms:
            return np.ones(len(self._labels), dtype=np.bool_)
        mask = np.zeros(len(self._labels), dtype=np.bool_)
        for term in terms:
            inner = np.ones(len(self._labels), dtype=np.bool_)
            for req in term.match_expressions:
                inner &= self.requirement(req)
            mask |= inner
        return mask


def _islands(groups: tuple[tuple[int, ...], ...], cards: int) -> list[list[int]]:
    """Card lists per island; cards in no group are islands of one."""
    seen: set[int] = set()
    out: list[list[int]] = []
    for group in groups:
        members = [c for c in group if 0 <= c < cards and c not in seen]
        seen.update(members)
        if members:
            out.append(sorted(members))
    out.extend([c] for c in range(cards) if c not in seen)
    return out


def _group_ids(groups: tuple[tuple[int, ...], ...], width: int) -> NDArray[np.int32]:
    """Card -> group id; cards in no group get their own id (width + card)."""
    out = np.arange(width, dtype=np.int32) + width
    for gid, group in enumerate(groups):
        for card in group:
            if 0 <= card < width:
                out[card] = gid
    return out


class NodeIndex:
    """Immutable-for-the-session facts about nodes, as arrays aligned with ``names``."""

    def __init__(
        self,
        nodes: Sequence[Node],
        pools: tuple[Pool, ...],
        topology: Topology | None,
        space: ResourceSpace,
    ) -> None:
        n = len(nodes)
        self.size = n
        self.names: list[str] = [node.name for node in nodes]
        self.position: dict[str, int] = {name: i for i, name in enumerate(self.names)}
        self.labels = LabelColumns([node.labels for node in nodes])
        self.schedulable: NDArray[np.bool_] = np.fromiter(
            (node.ready and not node.unschedulable for node in nodes), dtype=np.bool_, count=n
        )

        # Pools: built-in default first, then named pools in snapshot order.
        names = [DEFAULT_POOL] + [p.name for p in pools if p.name != DEFAULT_POOL]
        self.pool_names: list[str] = names
        self.pool_position: dict[str, int] = {name: i for i, name in enumerate(names)}
        by_name = {p.name: p for p in pools}
        self.pools: list[Pool] = [by_name.get(name, Pool(name=name)) for name in names]
        # pool_of_node() evaluated over all nodes at once: per pool selector one vector match;
        # a node matching exactly one named pool is in it, otherwise in ``default`` (0).
        matched = np.zeros(n, dtype=np.int32)
        first = np.zeros(n, dtype=np.int32)
        for pool in pools:
            if pool.name == DEFAULT_POOL:
                continue
            hit = self.labels.selector(pool.node_selector)
            first[hit & (matched == 0)] = self.pool_position[pool.name]
            matched += hit
        self.node_pool: NDArray[np.int32] = np.where(matched == 1, first, 0).astype(np.int32)
        self.pool_of: list[int] = self.node_pool.tolist()

        # Capacity net of foreign pods, one column per resource (a loop over resources, not
        # nodes); a node without a "pods" figure is unlimited on pods. GPU foreign usage is
        # accounted per card below.
        alloc = np.zeros((n, space.size), dtype=np.float64)
        for r, name in enumerate(space.names):
            if name == GPU:
                continue
            missing = np.inf if name == PODS else 0.0
            alloc[:, r] = np.fromiter(
                (node.allocatable.get(name, missing) for node in nodes), np.float64, count=n
            )
            if name == PODS:
                alloc[:, r] -= np.fromiter((node.foreign_pods for node in nodes), np.float64, n)
            elif any(node.foreign_used for node in nodes):
                alloc[:, r] -= np.fromiter(
                    (node.foreign_used.get(name, 0) for node in nodes), np.float64, count=n
                )
        self.capacity = alloc  # allocatable minus foreign, per node

        # Per-card GPU capacity (milli); absent cards have capacity 0.
        gpu_counts = [node.gpu_count for node in nodes]  # a property: read it once per node
        width = max([*gpu_counts, 1])
        self.gpu_width = width
        cap = np.zeros((n, width), dtype=np.float64)
        nvlink = np.zeros((n, width), dtype=np.int32)
        numa = np.zeros((n, width), dtype=np.int32)
        self.has_gpu_layout = np.zeros(n, dtype=np.bool_)
        # Nodes are grouped by (card count, layout) so rows are filled in bulk: thousands of
        # nodes usually share a handful of hardware types.
        kinds: dict[tuple[int, GpuTopology], list[int]] = {}
        for i, node in enumerate(nodes):
            if gpu_counts[i] > 0:
                kinds.setdefault((gpu_counts[i], node.gpu_topology), []).append(i)
        for (cards, layout), members in kinds.items():
            rows = np.asarray(members, dtype=np.int64)
            cap[rows, :cards] = float(GPU_MILLI_PER_CARD)
            if layout.nvlink or layout.numa:
                nvlink[rows] = _group_ids(layout.nvlink, width)
                numa[rows] = _group_ids(layout.numa, width)
                self.has_gpu_layout[rows] = True
            else:
                nvlink[rows] = numa[rows] = np.arange(width, dtype=np.int32) + width
        for i, node in enumerate(nodes):
            if gpu_counts[i] <= 0 or not (node.gpu_foreign_milli or node.foreign_used):
                continue
            cards = node.gpu_count
            foreign_cards = list(node.gpu_foreign_milli[:cards])
            foreign_cards += [0] * (cards - len(foreign_cards))
            # Whole foreign cards without per-card detail (another scheduler's pods) take the
            # highest free ids, beside any numbered ones: the bind-time re-check counts every
            # foreign GPU request, so leaving them out would bind room it then withdraws.
            unnumbered = int(node.foreign_used.get(GPU, 0)) - sum(1 for m in foreign_cards if m)
            for card in range(cards - 1, -1, -1):
                if unnumbered <= 0:
                    break
                if not foreign_cards[card]:
                    foreign_cards[card] = GPU_MILLI_PER_CARD
                    unnumbered -= 1
            for card, milli in enumerate(foreign_cards):
                cap[i, card] -= min(float(milli), float(GPU_MILLI_PER_CARD))
        self.gpu_capacity = cap
        self.capacity[:, space.gpu] = cap.sum(axis=1)
        self.nvlink_group = nvlink
        self.numa_group = numa
        self.layout_of: list[bool] = self.has_gpu_layout.tolist()
        # The same again as card lists per island (shared between nodes of one hardware kind).
        self.nvlink_islands: list[list[list[int]]] = [[] for _ in range(n)]
        self.numa_islands: list[list[list[int]]] = [[] for _ in range(n)]
        for (cards, layout), members in kinds.items():
            nv = _islands(layout.nvlink, cards)
            nu = _islands(layout.numa, cards)
            for i in members:
                self.nvlink_islands[i] = nv
                self.numa_islands[i] = nu

        # Network tiers: per level, a domain code per node. Nodes lacking the label are their
        # own domain, so they never "share" a ToR by accident.
        self.topology = topology
        self.tier_domains: list[NDArray[np.int32]] = []
        self.tier_names: list[str] = []
        if topology is not None:
            for level in topology.levels:
                codes, table = self.labels.column(level.label)
                codes = codes.copy()
                missing = codes == _ABSENT
                if level.label == HOSTNAME_LABEL:
                    codes = np.arange(n, dtype=np.int32)
                elif missing.any():
                    codes[missing] = len(table) + np.flatnonzero(missing).astype(np.int32)
                self.tier_domains.append(codes)
                self.tier_names.append(level.name)
        # Per tier, the largest capacity any one domain has (per resource), as an upper bound
        # that lets placement skip tiers whose domains are all too small for a gang.
        self.tier_largest: list[NDArray[np.float64]] = []
        for codes in self.tier_domains:
            size = int(codes.max()) + 1 if n else 0
            largest = np.zeros(self.capacity.shape[1], dtype=np.float64)
            for r in range(self.capacity.shape[1]):
                per_domain = np.bincount(codes, weights=self.capacity[:, r], minlength=size)
                largest[r] = per_domain.max() if size else 0.0
            self.tier_largest.append(largest)

        self._taints = [
            tuple(t for t in node.taints if t.effect != TaintEffect.PREFER_NO_SCHEDULE)
            for node in nodes
        ]
        self._tainted = np.fromiter((bool(t) for t in self._taints), dtype=np.bool_, count=n)

    def tolerated(self, tolerations: tuple[Toleration, ...]) -> NDArray[np.bool_]:
        """Nodes whose NoSchedule/NoExecute taints are all tolerated (few nodes carry taints)."""
        mask = np.ones(self.size, dtype=np.bool_)
        for i in np.flatnonzero(self._tainted):
            taints = self._taints[int(i)]
            mask[i] = all(any(tol.tolerates(t) for tol in tolerations) for t in taints)
        return mask

    def pool_mask(self, pool: int) -> NDArray[np.bool_]:
        return np.asarray(self.node_pool == pool)
