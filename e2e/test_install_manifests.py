"""The install manifests render, the API server accepts them, and RBAC grants what is needed."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

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
