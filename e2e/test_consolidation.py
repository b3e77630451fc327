"""Consolidation on the real control plane: a running job moves so that a fragmented gang fits.

Two GPU nodes form a private pool. Each ends up with one 4-GPU job (a Deployment whose pods
belong to an explicit PodGroup, so a moved job comes back: the ReplicaSet re-creates its pod)
and 4 idle GPUs: 8 GPUs idle in total, but no node has 8.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client, watch

from operators.api import labels
from operators.api.scheduling import PodGroup, Pool

from .scheduler_kit import (
    GPU,
    NODE_GPUS,
    POD_GROUP,
    Scheduler,
    assert_no_gpu_shared,
    bound,
    busy_gpu_nodes,
    gpu_node_names,
    pod,
    podgroup,
    wait_event,
    wait_for,
)

pytestmark = pytest.mark.e2e

GROUP, VERSION = "scheduling.sluice.dev", "v1alpha1"
POOL_LABEL = "e2e.sluice.dev/pool"


@pytest.fixture
def pool_of_two(
    core: client.CoreV1Api, custom: client.CustomObjectsApi, namespace: str
) -> Iterator[tuple[str, list[str]]]:
    """A Pool of two idle GPU nodes (labelled for this test; unlabelled and deleted after)."""
    wait_for(lambda: len(set(gpu_node_names(core)) - busy_gpu_nodes(core)) >= 2, 45, "idle")
    nodes = sorted(set(gpu_node_names(core)) - busy_gpu_nodes(core))[:2]
    name = f"{namespace}-frag"
    for n in nodes:
        core.patch_node(n, {"metadata": {"labels": {POOL_LABEL: name}}})
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Pool",
        "metadata": {"name": name},
        "spec": {"nodeSelector": {"matchLabels": {POOL_LABEL: name}}},
    }
    custom.create_cluster_custom_object(GROUP, VERSION, Pool.plural, body)
    try:
        yield name, nodes
    finally:
        with contextlib.suppress(client.ApiException):
            custom.delete_cluster_custom_object(GROUP, VERSION, Pool.plural, name)
        for n in nodes:
            core.patch_node(n, {"metadata": {"labels": {POOL_LABEL: None}}})


def _deployment(name: str, gpus: int) -> dict[str, Any]:
    template = pod(name, gpus, group=name)
    template["metadata"] = {
        "labels": {"app": name},
        "annotations": template["metadata"]["annotations"],
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": template,
        },
    }


def _group_in(pool: str, name: str) -> dict[str, Any]:
    body = podgroup(name, 1)
    body["spec"]["pool"] = pool
    return body


def test_a_job_moves_so_a_fragmented_gang_fits(
    k8s: client.ApiClient,
    core: client.CoreV1Api,
    custom: client.CustomObjectsApi,
    namespace: str,
    start_scheduler: Callable[..., Scheduler],
    pool_of_two: tuple[str, list[str]],
) -> None:
    """Fails on main before consolidation: nothing moves a running job to defragment (preempt
    needs lower-priority victims and all jobs here have equal priority), so the 8-GPU pod
    stays Pending with 8 GPUs idle in its pool for ever. The moved job keeps its admission:
    its PodGroup is never written Pending (the unit tests in tests/unit/runtime/
    test_status_moved.py pin the rule; here the window in which the old rule wrote Pending is
    short, so this check alone does not always fail on the old rule)."""
    pool, (x, y) = pool_of_two
    apps = client.AppsV1Api(k8s)
    sched = start_scheduler()
    sched.wait_ready()

    def on(node: str, name: str, gpus: int) -> dict[str, Any]:
        body = pod(name, gpus, annotations={labels.POOL: pool})
        body["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
        return body

    def create_group(name: str) -> None:
        custom.create_namespaced_custom_object(
            GROUP, VERSION, namespace, PodGroup.plural, _group_in(pool, name)
        )

    def bound_with(prefix: str) -> Callable[[], list[client.V1Pod]]:
        return lambda: bound(core, namespace, prefix)

    # Each node gets a pinned 4-GPU filler and one movable 4-GPU job; then the fillers go.
    for node, job in ((x, "job-x"), (y, "job-y")):
        core.create_namespaced_pod(namespace, on(node, f"fill-{job}", 4))
        wait_for(bound_with(f"fill-{job}"), 30, "filler bound", sched)
        create_group(job)
        apps.create_namespaced_deployment(namespace, _deployment(job, 4))
        wait_for(bound_with(f"{job}-"), 30, f"{job} bound", sched)
    placed = {p.metadata.labels["app"]: p.spec.node_name for p in bound(core, namespace, "job-")}
    assert set(placed.values()) == {x, y}, placed  # one job per node, each beside a filler
    for job in ("job-x", "job-y"):
        core.delete_namespaced_pod(f"fill-{job}", namespace, grace_period_seconds=0)
    wait_for(lambda: not bound(core, namespace, "fill-"), 30, "fillers gone", sched)
    before = {p.metadata.labels["app"]: p.metadata.uid for p in bound(core, namespace, "job-")}
    since = custom.list_namespaced_custom_object(GROUP, VERSION, namespace, PodGroup.plural)[
        "metadata"
    ]["resourceVersion"]

    create_group("big")
    big = pod("big-0", NODE_GPUS, group="big")
    core.create_namespaced_pod(namespace, big)
    wait_for(lambda: bound(core, namespace, "big-"), 60, "the 8-GPU pod bound", sched)

    # Exactly one job moved: its pod was replaced and runs again on the other node.
    def both_jobs_running() -> dict[str, client.V1Pod] | None:
        running = {p.metadata.labels["app"]: p for p in bound(core, namespace, "job-")}
        return running if len(running) == 2 else None

    running = wait_for(both_jobs_running, 60, "both jobs running again", sched)
    moved = [app for app, p in running.items() if p.metadata.uid != before[app]]
    assert len(moved) == 1, moved
    [big_pod] = bound(core, namespace, "big-")
    assert running[moved[0]].spec.node_name != big_pod.spec.node_name
    assert {p.spec.node_name for p in running.values()} | {big_pod.spec.node_name} == {x, y}
    assert_no_gpu_shared(core)

    # The moved job was told why: an Event and the Consolidated condition on its PodGroup.
    group = custom.get_namespaced_custom_object(
        GROUP, VERSION, namespace, PodGroup.plural, moved[0]
    )
    conds = {c["type"]: c for c in group["status"]["conditions"]}
    assert conds["Consolidated"]["status"] == "True", conds
    assert "big" in conds["Consolidated"]["message"]

    # Placing it again ended the move: movedTo emptied, nothing is held for it any more.
    def move_ended() -> dict[str, Any] | None:
        now = custom.get_namespaced_custom_object(
            GROUP, VERSION, namespace, PodGroup.plural, moved[0]
        )
        return now if now["status"]["lastEviction"].get("movedTo") == [] else None

    wait_for(move_ended, 30, "the moved job's move ended", sched)
    wait_event(core, namespace, "Consolidated", moved[0], sched)
    # It kept its admission: every phase written since the move, replayed from the API.
    stream = watch.Watch().stream(
        custom.list_namespaced_custom_object,
        GROUP,
        VERSION,
        namespace,
        PodGroup.plural,
        resource_version=since,
        timeout_seconds=2,
    )
    statuses = [
        ev["object"].get("status") or {}
        for ev in stream
        if ev["object"]["metadata"]["name"] == moved[0]
    ]
    phases = [st.get("phase") for st in statuses]
    # The node the plan placed it on went into the API (the schema keeps it): later cycles held
    # it for the job until its re-created pod was placed, and that is where the pod runs.
    planned = [{"node": running[moved[0]].spec.node_name, "pods": 1}]
    moved_tos = [(st.get("lastEviction") or {}).get("movedTo") for st in statuses]
    assert planned in moved_tos, moved_tos
    # (Inqueue is written only if a status pass sees the re-created pod before a session binds
    # it, a race either way; Pending, the old rule's answer there, never.)
    assert "Pending" not in phases, phases
    assert phases[-1] == "Running", phases
    # The pod request is what it claims: 8 whole GPUs.
    assert big_pod.spec.containers[0].resources.limits[GPU] == str(NODE_GPUS)
    assert POD_GROUP in big_pod.metadata.annotations
