"""The FGD paper's evaluation protocol on the Alibaba openb GPU trace, run through the core.

Protocol (../shared/traces/README.md): per seed, the nodes get a seeded random order and the
pods a seeded shuffle; pods are then sampled with replacement and appended until the GPU request
reaches 130% of capacity; every pod is scheduled exactly once, in order - no departures, no
queue, no retry - and ties between equal scores go to the first node in the seeded order.

That is one scheduler session: every pod becomes a one-pod group created in arrival order, the
session runs only ``allocate`` (no reservations), and the core tries groups in creation order,
each once. The decisions are then replayed pod by pod to measure GPU allocation and
fragmentation against the arrived workload.
"""

from __future__ import annotations

import csv
import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from operators.scheduler import ActionName, SessionConfig, run_session
from operators.scheduler.decisions import Bind
from operators.scheduler.snapshot import (
    CPU,
    GPU,
    HOSTNAME_LABEL,
    MEMORY,
    GroupPhase,
    Node,
    NodeSelectorTerm,
    PodGroup,
    SelectorOperator,
    SelectorRequirement,
    Snapshot,
    Task,
)
from operators.simulator.fragmentation import MILLI, PodShape, frag_model, typical_pods
from operators.simulator.policies import GPU_MODEL_LABEL, Policy, card_picker, scorer

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

    from operators.scheduler.plugins.fragmentation import FragModel
    from operators.scheduler.session import ScorerFactory

MIB = 2**20
TUNE = 1.3
ARRIVED_MAX = 130  # arrived-workload buckets 0..130 %
FRAG_POINTS = (70, 80, 90)
SEEDS = tuple(range(42, 52))
TRACES = ("default", "multigpu50", "gpushare100", "gpuspec33")


@dataclass(frozen=True, slots=True)
class TraceNode:
    name: str
    cpu_milli: int
    memory_mib: int
    gpus: int
    model: str


@dataclass(frozen=True, slots=True)
class TracePod:
    name: str
    cpu_milli: int
    memory_mib: int
    gpus: int  # cards; 1 for a shared card
    gpu_milli: int  # per card: 1000 whole, 1..999 shared
    models: tuple[str, ...] = ()

    @property
    def gpu_total(self) -> int:
        return self.gpus * self.gpu_milli

    @property
    def shape(self) -> PodShape:
        return PodShape(self.cpu_milli, self.gpu_milli if self.gpus else 0, self.gpus, self.models)


def load_nodes(path: Path) -> list[TraceNode]:
    with path.open(newline="") as f:
        return [
            TraceNode(
                row["sn"],
                int(row["cpu_milli"]),
                int(row["memory_mib"]),
                int(row["gpu"]),
                row.get("model") or "",
            )
            for row in csv.DictReader(f)
        ]


def load_pods(path: Path) -> list[TracePod]:
    out = []
    with path.open(newline="") as f:
        for row in csv.DictReader(f):
            gpus = int(row["num_gpu"])
            spec = row.get("gpu_spec") or ""
            out.append(
                TracePod(
                    row["name"],
                    int(row["cpu_milli"]),
                    int(row["memory_mib"]),
                    gpus,
                    int(row["gpu_milli"]) if gpus else 0,
                    tuple(m for m in spec.split("|") if m),
                )
            )
    return out


def arrival_order(
    pods: Sequence[TracePod], capacity_milli: int, seed: int, tune: float = TUNE
) -> list[TracePod]:
    """Shuffle, then append pods sampled with replacement until ``tune`` x capacity arrived."""
    rng = np.random.default_rng(seed)
    order = [pods[i] for i in rng.permutation(len(pods))]
    total = sum(p.gpu_total for p in order)
    while total < tune * capacity_milli:
        extra = pods[int(rng.integers(len(pods)))]
        order.append(extra)
        total += extra.gpu_total
    return order


def node_order(nodes: Sequence[TraceNode], seed: int) -> list[TraceNode]:
    rng = np.random.default_rng(seed + 1_000_003)  # independent of the pod stream
    return [nodes[i] for i in rng.permutation(len(nodes))]


def snapshot(nodes: Sequence[TraceNode], pods: Sequence[TracePod]) -> Snapshot:
    """Nodes in the given order (the tie-break order); one Pending one-pod group per pod,
    created in arrival order."""
    core_nodes = tuple(
        Node(
            name=n.name,
            allocatable={CPU: n.cpu_milli, MEMORY: n.memory_mib * MIB, GPU: n.gpus},
            labels={GPU_MODEL_LABEL: n.model, HOSTNAME_LABEL: n.name},
        )
        for n in nodes
    )
    groups, tasks = [], []
    for i, p in enumerate(pods):
        uid = f"p{i:06d}"
        groups.append(
            PodGroup(
                uid=uid, namespace="openb", name=uid, created=float(i), phase=GroupPhase.PENDING
            )
        )
        whole = p.gpu_milli >= MILLI
        affinity = (
            (
                NodeSelectorTerm(
                    (SelectorRequirement(GPU_MODEL_LABEL, SelectorOperator.IN, p.models),)
                ),
            )
            if p.models
            else ()
        )
        tasks.append(
            Task(
                uid=uid,
                group=uid,
                namespace="openb",
                name=p.name,
                requests={
                    CPU: p.cpu_milli,
                    MEMORY: p.memory_mib * MIB,
                    GPU: p.gpus if whole else 0,
                },
                gpu_milli=0 if whole else p.gpu_milli,
                affinity=affinity,
            )
        )
    return Snapshot(now=0.0, nodes=core_nodes, groups=tuple(groups), tasks=tuple(tasks))


def session_config(
    policy: Policy | None, seed: int, typical_shapes: Sequence[PodShape]
) -> SessionConfig:
    """``None``: Sluice's own default placement; otherwise a reference policy alone."""
    base = SessionConfig(actions=(ActionName.ALLOCATE,), max_reservations=0)
    if policy is None:
        return base
    typical = typical_pods(typical_shapes)
    factories: tuple[ScorerFactory, ...] = (scorer(policy, seed=seed, typical=typical),)
    picker = card_picker(policy, seed=seed, typical=typical)
    return dataclasses.replace(
        base,
        binpack_weight=0.0,
        topology_weight=0.0,
        fragmentation_weight=0.0,
        scorers=factories,
        card_pickers=(picker,) if picker is not None else (),
        fresh_scores=policy is Policy.RANDOM,
    )


@dataclass(frozen=True, slots=True)
class RunResult:
    """One (trace, policy, seed) run: per arrived-% bucket 0..130, and failures by size."""

    allocation: tuple[float, ...]  # GPU allocation % at arrived = index %
    frag_rate: dict[int, float]  # fragment / idle GPU %, at FRAG_POINTS
    frag_amount: dict[int, float]  # fragment / capacity %
    failed: dict[str, int]  # failed pods by size class

    def unallocated(self, arrived: int = 100) -> float:
        return 100.0 - self.allocation[arrived]


def size_class(p: TracePod) -> str:
    if not p.gpus:
        return "0"
    if p.gpu_milli < MILLI:
        return "<1"
    return str(p.gpus)


def run(
    nodes: Sequence[TraceNode],
    pods: Sequence[TracePod],
    policy: Policy | None,
    seed: int,
    config: SessionConfig | None = None,
) -> RunResult:
    """One seed of the protocol; ``config`` overrides the policy's session config."""
    ordered_nodes = node_order(nodes, seed)
    capacity = sum(n.gpus for n in nodes) * MILLI
    arrived = arrival_order(pods, capacity, seed)
    shapes = [p.shape for p in pods]
    binds = schedule(ordered_nodes, arrived, config or session_config(policy, seed, shapes))
    frag = frag_model(typical_pods(shapes), [n.model for n in ordered_nodes])
    return measure(ordered_nodes, arrived, binds, frag)


def schedule(
    nodes: Sequence[TraceNode], arrived: Sequence[TracePod], config: SessionConfig
) -> dict[str, Bind]:
    """Pod uid (``p<index>``) -> its Bind, for the pods that were placed."""
    result = run_session(snapshot(nodes, arrived), config)
    return {d.task: d for d in result.decisions if isinstance(d, Bind)}


def measure(
    nodes: Sequence[TraceNode],
    arrived: Sequence[TracePod],
    binds: dict[str, Bind],
    frag: FragModel,
) -> RunResult:
    """Replay the binds in arrival order, sampling allocation (and fragmentation at
    FRAG_POINTS) each time the arrived GPU request crosses a whole percent of capacity."""
    position = {n.name: i for i, n in enumerate(nodes)}
    capacity = sum(n.gpus for n in nodes) * MILLI
    width = max(n.gpus for n in nodes)
    cards = np.zeros((len(nodes), width))
    for i, n in enumerate(nodes):
        cards[i, : n.gpus] = MILLI
    cpu = np.asarray([n.cpu_milli for n in nodes], dtype=np.float64)
    everything = np.arange(len(nodes), dtype=np.int64)
    allocation = [0.0] * (ARRIVED_MAX + 1)
    frag_rate: dict[int, float] = {}
    frag_amount: dict[int, float] = {}
    failed: dict[str, int] = {}
    used = 0
    total = 0
    bucket = 0
    for i, p in enumerate(arrived):
        total += p.gpu_total
        bind = binds.get(f"p{i:06d}")
        if bind is None:
            failed[size_class(p)] = failed.get(size_class(p), 0) + 1
        else:
            node = position[bind.node]
            cpu[node] -= p.cpu_milli
            for card in bind.gpu_ids:
                cards[node, card] -= p.gpu_milli
            used += p.gpu_total
        reached = min(int(100 * total // capacity), ARRIVED_MAX)
        while bucket <= reached:
            allocation[bucket] = 100.0 * used / capacity
            if bucket in FRAG_POINTS:
                amount = float(frag.amount(cards, cpu, everything).sum())
                idle = float(cards.sum())
                frag_amount[bucket] = 100.0 * amount / capacity
                frag_rate[bucket] = 100.0 * amount / idle if idle else 0.0
            bucket += 1
    for rest in range(bucket, ARRIVED_MAX + 1):
        allocation[rest] = 100.0 * used / capacity
    return RunResult(tuple(allocation), frag_rate, frag_amount, failed)
