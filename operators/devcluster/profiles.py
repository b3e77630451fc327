"""Fake-node profiles: realistic GPU nodes with pool, network-tier and GPU-layout metadata.

Every GPU node carries
- labels: `kubernetes.io/hostname`, the pool-class label `node.sluice.dev/pool`, GPU product, and
  one label per network tier (`topology.sluice.dev/spine`, `topology.sluice.dev/tor`, and for the
  Lingjun profile also `topology.sluice.dev/core`), which a `Topology` object names coarse to fine;
- capacity: cpu, memory, ephemeral-storage, pods and `nvidia.com/gpu`;
- the annotation `scheduling.sluice.dev/gpu-topology`: the per-GPU NUMA/NVLink layout (format in
  docs/scheduler.md).
The profiles also add one master-like node (tainted NoSchedule, pool `masters`), as real clusters
have control-plane nodes that batch work must not land on.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from operators.devcluster.errors import DevClusterError
from operators.traces import traces_dir

KWOK_ANNOTATION = "kwok.x-k8s.io/node"
POOL_LABEL = "node.sluice.dev/pool"
CORE_LABEL = "topology.sluice.dev/core"
SPINE_LABEL = "topology.sluice.dev/spine"
TOR_LABEL = "topology.sluice.dev/tor"
HOSTNAME_LABEL = "kubernetes.io/hostname"
GPU_TOPOLOGY_ANNOTATION = "scheduling.sluice.dev/gpu-topology"
GPU_RESOURCE = "nvidia.com/gpu"
GPUS_PER_NODE = 8


@dataclass(frozen=True)
class NodeShape:
    cpu: str = "96"
    memory: str = "768Gi"
    storage: str = "2Ti"
    pods: str = "110"
    gpus: int = GPUS_PER_NODE
    gpu_product: str = "NVIDIA-A100-SXM4-80GB"


@dataclass(frozen=True)
class Placement:
    """Where a node sits in the network: tier label values, coarse to fine."""

    name: str
    tiers: dict[str, str]


def gpu_layout(gpus: int) -> dict[str, list[list[int]]]:
    """Two NUMA domains, each one NVLink island: GPUs in one island talk fastest to each other."""
    half = max(1, gpus // 2)
    groups = [list(range(half)), list(range(half, gpus))] if gpus > 1 else [[0]]
    groups = [g for g in groups if g]
    return {"numa": groups, "nvlink": groups}


def gpu_node(place: Placement, shape: NodeShape = NodeShape(), pool: str = "gpu") -> dict[str, Any]:
    resources = {
        "cpu": shape.cpu,
        "memory": shape.memory,
        "ephemeral-storage": shape.storage,
        "pods": shape.pods,
        GPU_RESOURCE: str(shape.gpus),
    }
    labels = {
        HOSTNAME_LABEL: place.name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "type": "kwok",
        POOL_LABEL: pool,
        "nvidia.com/gpu.product": shape.gpu_product,
        "nvidia.com/gpu.count": str(shape.gpus),
        **place.tiers,
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": place.name,
            "labels": labels,
            "annotations": {
                KWOK_ANNOTATION: "fake",
                "node.alpha.kubernetes.io/ttl": "0",
                GPU_TOPOLOGY_ANNOTATION: json.dumps(gpu_layout(shape.gpus), separators=(",", ":")),
            },
        },
        "spec": {},
        "status": {
            "allocatable": resources,
            "capacity": resources,
            "nodeInfo": {
                "architecture": "amd64",
                "operatingSystem": "linux",
                "kubeletVersion": "fake",
                "kubeProxyVersion": "fake",
            },
            "phase": "Running",
        },
    }


def master_node(name: str = "master-0") -> dict[str, Any]:
    node = gpu_node(
        Placement(name, {}),
        NodeShape(cpu="16", memory="64Gi", gpus=0, gpu_product="none"),
        pool="masters",
    )
    labels = node["metadata"]["labels"]
    for key in ("nvidia.com/gpu.product", "nvidia.com/gpu.count"):
        labels.pop(key)
    labels["node-role.kubernetes.io/control-plane"] = ""
    node["metadata"]["annotations"].pop(GPU_TOPOLOGY_ANNOTATION)
    node["status"]["allocatable"].pop(GPU_RESOURCE)
    node["spec"]["taints"] = [
        {"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}
    ]
    return node


def clos(
    spines: int, tors_per_spine: int, nodes_per_tor: int, limit: int | None
) -> Iterator[Placement]:
    """A two-tier Clos fabric; names say where a node sits: gpu-s01-t03-n07."""
    count = 0
    for s in range(spines):
        for t in range(tors_per_spine):
            for n in range(nodes_per_tor):
                if limit is not None and count >= limit:
                    return
                count += 1
                spine = f"spine-{s:02d}"
                tor = f"tor-{s:02d}-{t:02d}"
                yield Placement(
                    f"gpu-s{s:02d}-t{t:02d}-n{n:02d}", {SPINE_LABEL: spine, TOR_LABEL: tor}
                )


def lingjun(limit: int | None) -> Iterator[Placement]:
    """The 847 hosts of Alibaba Lingjun's three-tier Clos (core DSW, aggregation PSW, ToR ASW)."""
    path = traces_dir() / "lingjun" / "topo.csv"
    if not path.is_file():
        raise DevClusterError(
            f"the Lingjun topology trace is missing at {path}",
            "keep shared/ beside the checkout or set SLUICE_TRACES_DIR to the traces folder",
        )
    with path.open(newline="") as fh:
        for i, row in enumerate(csv.DictReader(fh)):
            if limit is not None and i >= limit:
                return
            core, agg, tor = row["DSW"], row["PSW"], row["ASW"]
            # ASW names repeat under different aggregation switches, so qualify them.
            yield Placement(
                f"gpu-lj-{i:04d}",
                {
                    CORE_LABEL: core.lower(),
                    SPINE_LABEL: f"{core}-{agg}".lower(),
                    TOR_LABEL: f"{core}-{agg}-{tor}".lower(),
                },
            )


@dataclass(frozen=True)
class Profile:
    name: str
    description: str
    default_nodes: int
    tors_per_spine: int = 0
    nodes_per_tor: int = 0

    def placements(self, nodes: int | None) -> Iterator[Placement]:
        count = self.default_nodes if nodes is None else nodes
        if self.name == "lingjun":
            return lingjun(count)
        per_spine = self.tors_per_spine * self.nodes_per_tor
        spines = max(1, math.ceil(count / per_spine))
        return clos(spines, self.tors_per_spine, self.nodes_per_tor, count)


PROFILES: dict[str, Profile] = {
    p.name: p
    for p in (
        Profile("small", "16 GPU nodes: 2 spines x 2 ToRs x 4 nodes, 8 GPUs each", 16, 2, 4),
        Profile(
            "large", "1,000 GPU nodes: 10 spines x 10 ToRs x 10 nodes, 8 GPUs each", 1000, 10, 10
        ),
        Profile("lingjun", "847 GPU nodes in Lingjun's real core/aggregation/ToR layout", 847),
    )
}


def nodes_for(profile_name: str, nodes: int | None = None) -> list[dict[str, Any]]:
    """All Node objects of a profile (GPU nodes first, then the master-like node)."""
    profile = PROFILES.get(profile_name)
    if profile is None:
        raise DevClusterError(
            f"unknown profile {profile_name!r}", f"choose one of {', '.join(sorted(PROFILES))}"
        )
    if nodes is not None and nodes < 1:
        raise DevClusterError(f"--nodes must be at least 1, got {nodes}", "pass --nodes N >= 1")
    return [*(gpu_node(p) for p in profile.placements(nodes)), master_node()]
