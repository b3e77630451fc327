"""The queue tree: hierarchical elastic quota as arrays (one row per queue).

Model (DESIGN.md "Queue"), per resource dimension independently:

* ``allocated``: requests of tasks holding resources in the queue's subtree (rolls up to every
  ancestor, so a parent's capability caps its whole subtree). A pod that is being evicted still
  holds its room until it exits, so it stays in ``allocated`` until then; only the job it was
  evicted for may use that room early (see :meth:`Statement.commit`);
* ``leaving``: the part of ``allocated`` held by pods that are terminating (Releasing, or evicted
  by this session). ``allocated - leaving`` (:meth:`QueueTree.kept`) is what the queue keeps:
  reclaim measures shares and guarantees against it, so a pod already on its way out is never
  counted as room a queue could still give;
* ``request``: allocated + pending demand of the subtree;
* ``deserved``: water-filled top-down. A parent's deserved is split among its children: first
  each child gets its guarantee (capped by what it requests), then the rest is shared in
  proportion to ``weight`` among children that still want more, each capped by
  ``min(request, capability)``, repeating until nothing is left or everyone is satisfied.
  ``root`` deserves the whole cluster (capped by its own capability). With time-based fair
  share on a parent (``usage_k``), the weights of that second step are corrected by the
  children's past usage (operators/scheduler/usage.py); guarantees are not.

Allocation may go above deserved (borrowing idle room) but never above capability, except that an
overcommit queue admits overcommit-marked jobs beyond it. Reclaim takes back what is above
deserved, most-over-share first, and never takes a queue below its guarantee.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from operators.scheduler.snapshot import DEFAULT_QUEUE, ROOT_QUEUE, Queue, QueueState
from operators.scheduler.usage import corrected_weights

if TYPE_CHECKING:
    from collections.abc import Mapping

    from numpy.typing import NDArray

    from operators.scheduler.resources import ResourceSpace

_EPS = 1e-6


class QueueTree:
    def __init__(self, queues: tuple[Queue, ...], space: ResourceSpace) -> None:
        by_name: dict[str, Queue] = {}
        for q in queues:
            by_name[q.name] = q
        by_name.setdefault(ROOT_QUEUE, Queue(name=ROOT_QUEUE, parent=None, reclaimable=False))
        by_name.setdefault(DEFAULT_QUEUE, Queue(name=DEFAULT_QUEUE))
        # Parents first (BFS from root) so top-down passes are a simple loop; queues whose
        # parent chain does not reach root (typos, cycles) hang off root.
        children: dict[str, list[str]] = {name: [] for name in by_name}
        for q in by_name.values():
            if q.name == ROOT_QUEUE:
                continue
            parent = q.parent if q.parent in by_name and q.parent != q.name else ROOT_QUEUE
            children[parent or ROOT_QUEUE].append(q.name)
        order: list[str] = [ROOT_QUEUE]
        seen = {ROOT_QUEUE}
        for name in order:
            for child in sorted(children[name]):
                if child not in seen:
                    seen.add(child)
                    order.append(child)
        for name in sorted(by_name):  # unreachable (cyclic) queues: attach to root
            if name not in seen:
                seen.add(name)
                order.append(name)
                children[ROOT_QUEUE].append(name)

        self.names: list[str] = order
        self.position: dict[str, int] = {name: i for i, name in enumerate(order)}
        self.specs: list[Queue] = [by_name[name] for name in order]
        size = len(order)
        self.size = size
        self.parent = np.full(size, -1, dtype=np.int64)
        self.children: list[list[int]] = [[] for _ in range(size)]
        for name, kids in children.items():
            for kid in kids:
                self.parent[self.position[kid]] = self.position[name]
                self.children[self.position[name]].append(self.position[kid])
        # ancestors[i]: i itself and every ancestor up to root, as an index array.
        self.ancestors: list[NDArray[np.int64]] = []
        # The same chains as lists: row-by-row updates of a 3-4 row chain are several times
        # cheaper than one fancy-indexed read-modify-write (add_usage is on the hot path).
        self.chain_rows: list[list[int]] = []
        for i in range(size):
            chain = [i]
            while self.parent[chain[-1]] >= 0:
                chain.append(int(self.parent[chain[-1]]))
            self.ancestors.append(np.asarray(chain, dtype=np.int64))
            self.chain_rows.append(chain)
        self.is_leaf = np.asarray([not kids for kids in self.children], dtype=np.bool_)

        self.weight = np.asarray([max(q.weight, 1e-9) for q in self.specs], dtype=np.float64)
        self.usage = np.asarray([max(q.usage, 0.0) for q in self.specs], dtype=np.float64)
        self.usage_k = [max(q.usage_k, 0.0) for q in self.specs]
        self.guarantee = np.stack([space.vector(q.guarantee) for q in self.specs])
        self.capability = np.stack([space.vector(q.capability, missing=np.inf) for q in self.specs])
        self.capability_eps = self.capability + _EPS
        self.reclaimable = np.asarray([q.reclaimable for q in self.specs], dtype=np.bool_)
        self.overcommit = np.asarray([q.overcommit for q in self.specs], dtype=np.bool_)
        # A queue whose parent chain does not reach root would escape its intended ancestors'
        # capability, so it admits nothing new (its running work stays), as if Closed.
        self.closed_reason: list[str] = [
            q.closed_reason or _detached(q.name, by_name) for q in self.specs
        ]
        self.open = np.asarray(
            [
                q.state == QueueState.OPEN and not why
                for q, why in zip(self.specs, self.closed_reason, strict=True)
            ],
            dtype=np.bool_,
        )
        # Queues with no finite capability on themselves or any ancestor (headroom_ok fast path).
        self.uncapped: list[bool] = [
            bool(np.isinf(self.capability[chain]).all()) for chain in self.ancestors
        ]
        self.allocated = np.zeros((size, space.size), dtype=np.float64)
        self.leaving = np.zeros((size, space.size), dtype=np.float64)
        self.demand = np.zeros((size, space.size), dtype=np.float64)  # pending, own leaf only
        self.deserved = np.zeros((size, space.size), dtype=np.float64)

    def add_usage(self, queue: int, vec: NDArray[np.float64], sign: int = 1) -> None:
        allocated = self.allocated
        if sign > 0:
            for q in self.chain_rows[queue]:
                allocated[q] += vec
        else:
            for q in self.chain_rows[queue]:
                allocated[q] -= vec

    def add_leaving(self, queue: int, vec: NDArray[np.float64]) -> None:
        """``vec`` of the queue's holdings is terminating: still held, no longer kept."""
        for q in self.chain_rows[queue]:
            self.leaving[q] += vec

    def kept(self, queue: int) -> NDArray[np.float64]:
        """What the queue's subtree holds once its terminating pods are gone."""
        return np.asarray(self.allocated[queue] - self.leaving[queue])

    def headroom_ok(self, queue: int, vec: NDArray[np.float64], *, overcommit: bool) -> bool:
        """Would adding ``vec`` keep the queue and every ancestor within capability?"""
        if self.uncapped[queue]:
            return True  # no capability anywhere up the chain: nothing to exceed
        return self.capped_by(queue, vec, overcommit=overcommit) is None

    def capped_by(
        self,
        queue: int,
        vec: NDArray[np.float64],
        *,
        overcommit: bool,
        pending: NDArray[np.float64] | None = None,
    ) -> int | None:
        """The first queue up the chain whose capability adding ``vec`` would exceed, or None.

        ``pending`` (one row per queue, rolled up like ``allocated``) is added to each level's
        own holdings, e.g. the gang minimums admitted but not placed yet.
        """
        if self.uncapped[queue]:
            return None
        chain = self.ancestors[queue]
        held = self.allocated[chain] if pending is None else self.allocated[chain] + pending[chain]
        within = held + vec <= self.capability_eps[chain]
        if within.all():
            return None
        # Overcommit lets marked jobs past the cap of queues that opt in; dims the job does
        # not request never block it.
        blocked = (~within & (vec > 0)).any(axis=1)
        if overcommit:
            blocked &= ~self.overcommit[chain]
        rows = np.flatnonzero(blocked)
        return int(chain[rows[0]]) if len(rows) else None

    def below(self, queue: int, ancestor_of: int) -> list[int]:
        """``queue`` and its ancestors below the lowest queue it shares with ``ancestor_of``'s
        chain: the levels whose share moves when one gives room to the other."""
        shared = set(self.chain_rows[ancestor_of])
        out: list[int] = []
        for q in self.chain_rows[queue]:
            if q in shared:
                break
            out.append(q)
        return out

    def compute_deserved(self, total: NDArray[np.float64]) -> None:
        """Water-fill deserved top-down (see the module docstring)."""
        # Pods on their way out are requested by no one (what replaces them is pending demand).
        own = self.allocated - self.leaving
        # demand is recorded on leaves only; roll it up.
        rolled = self.demand.copy()
        for i in range(self.size - 1, 0, -1):
            p = int(self.parent[i])
            if p >= 0:
                rolled[p] += rolled[i]
        request = own + rolled
        self.request = request
        self.deserved[0] = np.minimum(total, self.capability[0])
        for p in range(self.size):
            kids = self.children[p]
            if not kids:
                continue
            idx = np.asarray(kids, dtype=np.int64)
            caps = np.minimum(request[idx], self.capability[idx])
            weight = self.weight[idx]
            if self.usage_k[p] > 0:
                competing = np.asarray((caps > self.guarantee[idx] + _EPS).any(axis=1))
                weight = corrected_weights(weight, self.usage[idx], self.usage_k[p], competing)
            self.deserved[idx] = water_fill(self.deserved[p], caps, self.guarantee[idx], weight)

    def share(self, queue: int) -> float:
        """Dominant allocated/deserved ratio: how far over (>1) or under its share a queue is."""
        # A handful of dimensions: plain floats are cheaper than numpy temporaries here.
        worst = 0.0
        for alloc, des in zip(
            self.allocated[queue].tolist(), self.deserved[queue].tolist(), strict=True
        ):
            if des > 0:
                worst = max(worst, alloc / des)
            elif alloc > 0:
                worst = max(worst, 1e9)  # holds something it does not deserve at all
        return worst


def water_fill(
    available: NDArray[np.float64],
    caps: NDArray[np.float64],
    guarantee: NDArray[np.float64],
    weight: NDArray[np.float64],
) -> NDArray[np.float64]:
    """Split ``available`` (R,) among children with ``caps`` (C,R) by weight, floors first.

    Each dimension is filled independently. Guarantees (capped by what a child asks for) come
    first, scaled down proportionally if the parent cannot cover them all.
    """
    floor = np.minimum(guarantee, caps)
    total_floor = floor.sum(axis=0)
    with np.errstate(divide="ignore", invalid="ignore"):
        scale = np.where(
            total_floor > available, available / np.where(total_floor > 0, total_floor, 1), 1.0
        )
    got = floor * scale
    remaining = np.maximum(available - got.sum(axis=0), 0.0)
    w = weight[:, None]
    for _ in range(len(weight) + 1):
        hungry = got < caps - _EPS
        if not hungry.any() or not (remaining > _EPS).any():
            break
        wsum = (w * hungry).sum(axis=0)
        with np.errstate(divide="ignore", invalid="ignore"):
            offer = np.where(wsum > 0, remaining / np.where(wsum > 0, wsum, 1), 0.0) * w * hungry
        give = np.minimum(offer, np.maximum(caps - got, 0.0))
        give = np.where(np.isfinite(give), give, 0.0)
        got += give
        remaining = np.maximum(remaining - give.sum(axis=0), 0.0)
    return got


def _detached(name: str, by_name: Mapping[str, Queue]) -> str:
    """Why `name`'s parent chain does not reach root ("" when it does)."""
    seen = [name]
    current = by_name[name]
    while current.name != ROOT_QUEUE and current.parent not in (None, ROOT_QUEUE):
        parent = current.parent
        if parent not in by_name:
            where = "its" if current.name == name else f"its ancestor {current.name!r}'s"
            return f"{where} parent queue {parent!r} does not exist"
        if parent in seen:
            return "its parent chain is a cycle: " + " -> ".join([*seen, parent])
        seen.append(parent)
        current = by_name[parent]
    return ""
