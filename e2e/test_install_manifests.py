"""The install manifests render, the API server accepts them, and RBAC grants what is needed."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from operators.devcluster.cluster import DevCluster
from operators.devcluster.waiting import wait_for

Kubectl = Callable[..., subprocess.CompletedProcess[str]]

MANIFESTS = Path(__file__).resolve().parents[1] / "manifests"
SA = "system:serviceaccount:sluice-system:sluice-operators"

NEEDED = [
    ("create", "pods/binding"),
    ("create", "pods/eviction"),
    ("patch", "pods"),
    ("delete", "pods"),
    ("watch", "nodes"),
    ("list", "priorityclasses.scheduling.k8s.io"),
    ("list", "poddisruptionbudgets.policy"),
    ("update", "leases.coordination.k8s.io"),
    ("create", "events"),
    ("create", "events.events.k8s.io"),
    ("patch", "podgroups.scheduling.sluice.dev/status"),
    ("update", "queues.scheduling.sluice.dev/status"),
    ("create", "podgroups.scheduling.sluice.dev"),
    ("watch", "hybridjobs.batch.sluice.dev"),
    ("watch", "eventsinks.events.sluice.dev"),
    ("create", "services"),
]
NOT_GRANTED = [("delete", "nodes"), ("create", "clusterroles.rbac.authorization.k8s.io")]


@pytest.fixture(scope="module")
def installed(kubectl: Kubectl) -> Iterator[None]:
    rendered = kubectl("kustomize", str(MANIFESTS / "base")).stdout
    # Everything but the Deployment for real: no container runtime runs its image here.
    objects = [o for o in yaml.safe_load_all(rendered) if o and o["kind"] != "Deployment"]
    kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump_all(objects))
    # The Deployment too must pass the API server's validation and admission.
    kubectl("apply", "--server-side", "-k", str(MANIFESTS / "base"), "--dry-run=server")
    yield
    kubectl("delete", "-f", "-", "--wait=false", input=yaml.safe_dump_all(objects), check=False)


@pytest.mark.usefixtures("installed")
@pytest.mark.parametrize(("verb", "resource"), NEEDED)
def test_operators_service_account_may(kubectl: Kubectl, verb: str, resource: str) -> None:
    result = kubectl("auth", "can-i", verb, resource, f"--as={SA}", check=False)
    assert result.stdout.strip() == "yes", (verb, resource, result.stderr)


@pytest.mark.usefixtures("installed")
@pytest.mark.parametrize(("verb", "resource"), NOT_GRANTED)
def test_operators_service_account_may_not(kubectl: Kubectl, verb: str, resource: str) -> None:
    result = kubectl("auth", "can-i", verb, resource, f"--as={SA}", check=False)
    assert result.stdout.strip() == "no", (verb, resource)


def test_dev_overlay_runs_one_replica_with_debug_logs(kubectl: Kubectl) -> None:
    rendered = kubectl("kustomize", str(MANIFESTS / "overlays" / "dev")).stdout
    deployment = next(o for o in yaml.safe_load_all(rendered) if o["kind"] == "Deployment")
    assert deployment["spec"]["replicas"] == 1
    env = {
        e["name"]: e.get("value")
        for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    assert env["SLUICE_LOG_LEVEL"] == "DEBUG"
    assert env["SLUICE_LEASE_NAMESPACE"] == "sluice-system"


@pytest.mark.usefixtures("installed")
def test_scheduler_works_with_only_the_installed_rbac(
    cluster: DevCluster, k8s: client.ApiClient, namespace: str, tmp_path: Path
) -> None:
    """Run the scheduler as the operators' ServiceAccount: any missing right shows up as a 403."""
    core = client.CoreV1Api(k8s)
    token = core.create_namespaced_service_account_token(
        "sluice-operators", "sluice-system", {"spec": {"expirationSeconds": 3600}}
    ).status.token
    kubeconfig = tmp_path / "sa.kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {
                        "name": "c",
                        "cluster": {
                            "server": cluster.server,
                            "certificate-authority": str(cluster.state_dir / "pki" / "ca.crt"),
                        },
                    }
                ],
                "users": [{"name": "sa", "user": {"token": token}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "sa"}}],
                "current-context": "c",
            }
        )
    )
    log = tmp_path / "scheduler.log"
    # Its own scheduler name and Lease: nothing else running in this cluster can interfere.
    cmd = [
        sys.executable, "-m", "operators", "scheduler", f"--kubeconfig={kubeconfig}",
        "--scheduler-name=sluice-rbac", "--lease-namespace=sluice-system",
        "--lease-name=sluice-rbac", "--metrics-port=0",
    ]  # fmt: skip
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    try:
        core.create_namespaced_pod(
            namespace,
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "rbac-probe"},
                "spec": {
                    "schedulerName": "sluice-rbac",
                    "containers": [
                        {
                            "name": "c",
                            "image": "fake",
                            "resources": {"limits": {"nvidia.com/gpu": "2"}},
                        }
                    ],
                },
            },
        )

        def bound() -> client.V1Pod | None:
            pod = core.read_namespaced_pod("rbac-probe", namespace)
            return pod if pod.spec.node_name else None

        pod = wait_for(bound, timeout=60, what="the pod to be bound by the ServiceAccount")
        assert pod is not None
        assert pod.metadata.annotations["scheduling.sluice.dev/gpu-ids"]
        assert proc.poll() is None, log.read_text()
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    text = log.read_text()
    assert "forbidden" not in text.lower(), text
