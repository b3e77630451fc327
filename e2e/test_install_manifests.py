"""`make deploy` on the real cluster: the dev overlay applies (server dry run, then for real), and
every operator on main runs from this checkout under its own ServiceAccount's token, so a right
missing from the install's RBAC fails here as a 403."""

from __future__ import annotations

import functools
import subprocess
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from operators.api.scheduling import PodGroup, Queue
from operators.devcluster import processes
from operators.devcluster.cluster import DevCluster
from operators.devcluster.waiting import wait_for
from operators.install.deploy import DEV_OVERLAY, Deployer, Running
from operators.install.kustomize import build, deployments, operator_container

pytestmark = pytest.mark.e2e

Kubectl = Callable[..., subprocess.CompletedProcess[str]]


def can_i(kubectl: Kubectl, operator: str, verb: str, resource: str) -> str:
    """`kubectl auth can-i` as the operator's account; `pods/binding` means a subresource."""
    kind, _, sub = resource.partition("/")
    extra = [f"--subresource={sub}"] if sub else []
    account = f"--as=system:serviceaccount:sluice-system:sluice-{operator}"
    result = kubectl("auth", "can-i", verb, kind, *extra, account, check=False)
    return str(result.stdout.strip())


MAY = [
    ("scheduler", "create", "pods/binding"),
    ("scheduler", "create", "pods/eviction"),
    ("scheduler", "patch", "pods/status"),
    ("scheduler", "watch", "nodes"),
    ("scheduler", "list", "poddisruptionbudgets.policy"),
    ("scheduler", "patch", f"{Queue.crd_name()}/status"),
    ("scheduler", "create", "events"),
    ("jobs", "create", "pods"),
    ("jobs", "create", PodGroup.crd_name()),
    ("jobs", "patch", f"{PodGroup.crd_name()}/status"),
    ("jobs", "create", "events"),
    ("jobs", "patch", "vcjobs.batch.sluice.dev/status"),
    ("jobs", "create", "secrets"),
    ("pool", "patch", "nodes"),
    ("queue", "patch", f"{Queue.crd_name()}/status"),
    ("podgroup", "patch", f"{PodGroup.crd_name()}/status"),
    ("events", "patch", "vcjobs.batch.sluice.dev/status"),
    ("events", "patch", "eventsinks.events.sluice.dev/status"),
]
MAY_NOT = [
    ("scheduler", "create", "pods"),
    ("scheduler", "delete", "pods"),
    ("scheduler", "patch", "nodes"),
    ("scheduler", "get", "secrets"),
    ("scheduler", "update", "leases.coordination.k8s.io"),  # only its own Lease, by name
    ("jobs", "patch", "nodes"),
    ("pool", "delete", "nodes"),
    ("queue", "create", "pods"),
    ("podgroup", "patch", PodGroup.crd_name()),
    ("podgroup", "get", "secrets"),
    ("jobs", "create", "clusterroles.rbac.authorization.k8s.io"),
    ("events", "get", "secrets"),  # token Secrets only in sluice-system
    ("events", "patch", "vcjobs.batch.sluice.dev"),
]


@pytest.fixture(scope="module")
def deployed(
    cluster: DevCluster, kubectl: Kubectl, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[list[Running]]:
    deployer = Deployer(cluster.kubeconfig, tmp_path_factory.mktemp("deploy"), say=lambda _: None)
    objects = deployer.apply()
    # What Argo CD's server-side diff sees: nothing the API server defaults shows as a change.
    diff = kubectl(
        "diff", "--server-side", "--force-conflicts", "-k", str(DEV_OVERLAY), check=False
    )
    assert diff.returncode == 0, diff.stdout + diff.stderr
    running = deployer.run_operators(objects)
    yield running
    deployer.stop()
    # Everything but the CRDs, which the rest of the session needs.
    leftovers = [o for o in objects if o["kind"] != "CustomResourceDefinition"]
    kubectl("delete", "--wait=false", "--ignore-not-found", "-f", "-",
            input=yaml.safe_dump_all(leftovers), check=False)  # fmt: skip


@pytest.mark.parametrize(("operator", "verb", "resource"), MAY)
def test_service_account_may(
    deployed: list[Running], kubectl: Kubectl, operator: str, verb: str, resource: str
) -> None:
    assert can_i(kubectl, operator, verb, resource) == "yes", (operator, verb, resource)


@pytest.mark.parametrize(("operator", "verb", "resource"), MAY_NOT)
def test_service_account_may_not(
    deployed: list[Running], kubectl: Kubectl, operator: str, verb: str, resource: str
) -> None:
    assert can_i(kubectl, operator, verb, resource) == "no", (operator, verb, resource)


def test_deployments_are_applied_and_scaled_to_zero(
    deployed: list[Running], k8s: client.ApiClient
) -> None:
    apps = client.AppsV1Api(k8s)
    names = {
        d.metadata.name: d.spec.replicas
        for d in apps.list_namespaced_deployment("sluice-system").items
    }
    assert names
    assert set(names.values()) == {0}, "the operators run as local processes instead"
    assert {r.operator for r in deployed} == {n.removeprefix("sluice-") for n in names}


def test_operators_schedule_under_their_own_accounts(
    deployed: list[Running], k8s: client.ApiClient, namespace: str
) -> None:
    core = client.CoreV1Api(k8s)
    core.create_namespaced_pod(
        namespace,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "rbac-probe"},
            "spec": {
                "schedulerName": "sluice",
                "containers": [
                    {"name": "c", "image": "fake", "resources": {"limits": {"nvidia.com/gpu": "2"}}}
                ],
            },
        },
    )

    def bound() -> client.V1Pod | None:
        pod = core.read_namespaced_pod("rbac-probe", namespace)
        return pod if pod.spec.node_name else None

    pod = wait_for(bound, timeout=90, what="the pod to be bound by the deployed scheduler")
    assert pod is not None
    assert pod.metadata.annotations["scheduling.sluice.dev/gpu-ids"]
    # The scheduler writes the default Queue's status: the install made it an object.
    objects = client.CustomObjectsApi(k8s)

    def default_queue_with_status() -> dict[str, Any] | None:
        queue: dict[str, Any] = objects.get_cluster_custom_object(
            Queue.group, Queue.version, Queue.plural, "default"
        )
        return queue if queue.get("status") else None

    queue = wait_for(default_queue_with_status, timeout=60, what="the default Queue's status")
    assert queue is not None
    assert queue["metadata"]["annotations"]["argocd.argoproj.io/sync-wave"] == "1"
    # The probes the Deployments declare answer, as the kubelet would ask them, and so does
    # /metrics of the pods the sluice-metrics Service selects, as Prometheus would ask it.
    probes = {
        operator_container(d)["args"][0]: [
            operator_container(d)[probe]["httpGet"]["path"]
            for probe in ("livenessProbe", "readinessProbe")
        ]
        + (
            ["/metrics"]
            if "sluice.dev/metrics" in d["spec"]["template"]["metadata"]["labels"]
            else []
        )
        for d in deployments(build(DEV_OVERLAY))
    }
    assert sum("/metrics" in paths for paths in probes.values()) >= 2

    def answers(url: str) -> bool:
        try:
            with urllib.request.urlopen(url, timeout=10) as resp:
                return bool(resp.status == 200)
        except OSError:
            return False  # not listening yet, or 503: a kubelet would ask again

    for r in deployed:
        for path in probes[r.operator]:
            url = f"http://127.0.0.1:{r.metrics_port}{path}"
            wait_for(functools.partial(answers, url), timeout=90, what=f"{r.operator} {path}")
    for r in deployed:
        text = Path(r.log).read_text(errors="replace")
        assert processes.alive(r.proc()), text
        assert " 403" not in text, text
        assert "forbidden" not in text.lower(), text


def test_a_vcjob_with_plugins_runs_under_the_operators_accounts(
    deployed: list[Running], k8s: client.ApiClient, namespace: str
) -> None:
    """The jobs operator (PodGroup, pods, svc/ssh plugin objects, status) and the scheduler,
    each with only its installed rights."""
    custom = client.CustomObjectsApi(k8s)
    pod_spec = {
        "schedulerName": "sluice",
        "containers": [
            {"name": "c", "image": "fake", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
        ],
    }
    custom.create_namespaced_custom_object(
        "batch.sluice.dev", "v1alpha1", namespace, "vcjobs",
        {
            "apiVersion": "batch.sluice.dev/v1alpha1",
            "kind": "VCJob",
            "metadata": {"name": "rbac-job"},
            "spec": {
                "minAvailable": 2,
                "plugins": {"svc": [], "ssh": []},
                "tasks": [{"name": "worker", "replicas": 2, "template": {"spec": pod_spec}}],
            },
        },
    )  # fmt: skip

    def running() -> dict[str, Any] | None:
        job: dict[str, Any] = custom.get_namespaced_custom_object(
            "batch.sluice.dev", "v1alpha1", namespace, "vcjobs", "rbac-job"
        )
        return job if (job.get("status") or {}).get("phase") == "Running" else None

    wait_for(running, timeout=120, what="the VCJob to run")
    pods = client.CoreV1Api(k8s).list_namespaced_pod(namespace).items
    assert len([p for p in pods if p.spec.node_name]) == 2
