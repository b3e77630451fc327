"""Raw API objects for runtime tests, shaped like what the API server sends."""

from __future__ import annotations

from typing import Any

_counter = iter(range(1, 1_000_000))


def pod(
    name: str,
    *,
    namespace: str = "ns",
    cpu: str = "1",
    gpu: int = 0,
    node: str = "",
    scheduler: str = "sluice",
    group: str = "",
    phase: str = "Pending",
    uid: str | None = None,
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    requests: dict[str, Any] = {"cpu": cpu}
    limits: dict[str, Any] = {}
    if gpu:
        limits["nvidia.com/gpu"] = str(gpu)  # GPUs are usually given as limits only
    ann = dict(annotations or {})
    if group:
        ann["scheduling.sluice.dev/pod-group"] = group
    spec: dict[str, Any] = {
        "schedulerName": scheduler,
        "containers": [{"name": "c", "resources": {"requests": requests, "limits": limits}}],
    }
    if node:
        spec["nodeName"] = node
    return {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": uid or f"uid-{name}",
            "resourceVersion": str(next(_counter)),
            "creationTimestamp": "2026-11-22T08:00:00Z",
            "annotations": ann,
            "labels": dict(labels or {}),
        },
        "spec": spec,
        "status": {"phase": phase},
    }


def node(name: str, *, cpu: str = "96", gpus: int = 8, ready: bool = True) -> dict[str, Any]:
    alloc = {"cpu": cpu, "memory": "1Ti", "pods": "110", "nvidia.com/gpu": str(gpus)}
    return {
        "metadata": {
            "name": name,
            "resourceVersion": str(next(_counter)),
            "labels": {"kubernetes.io/hostname": name, "topology.sluice.dev/tor": "t1"},
            "annotations": {
                "scheduling.sluice.dev/gpu-topology": '{"numa":[[0,1,2,3],[4,5,6,7]],'
                '"nvlink":[[0,1,2,3],[4,5,6,7]]}'
            },
        },
        "spec": {},
        "status": {
            "allocatable": alloc,
            "conditions": [
                {"type": "Ready", "status": "True" if ready else "False", "lastHeartbeatTime": "x"}
            ],
        },
    }


def podgroup(
    name: str, *, namespace: str = "ns", min_member: int = 1, status: dict[str, Any] | None = None
) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"pg-{name}",
            "generation": 1,
            "resourceVersion": str(next(_counter)),
            "creationTimestamp": "2026-11-22T08:00:00Z",
        },
        "spec": {"minMember": min_member, "queue": "team-a"},
        # As created: the API server keeps no status given with a create (status subresource).
        **({} if status is None else {"status": dict(status)}),
    }
