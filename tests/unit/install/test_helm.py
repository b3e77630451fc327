"""charts/sluice (generated from the production overlay): `helm template` with default values is
the kustomize output object by object, values change what they promise, and `helm lint` passes."""

from __future__ import annotations

import subprocess
from typing import Any

import pytest
import yaml

from operators.devcluster.versions import binary_path
from operators.install import helmchart
from operators.install.kustomize import build

Key = tuple[str, str, str, str]


def helm(*args: str) -> str:
    result = subprocess.run(
        [str(binary_path("helm")), *args], capture_output=True, text=True, check=False, timeout=120
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def by_key(objects: list[dict[str, Any]]) -> dict[Key, dict[str, Any]]:
    out = {}
    for obj in objects:
        meta = obj["metadata"]
        key = (obj["apiVersion"], obj["kind"], meta.get("namespace", ""), meta["name"])
        assert key not in out, key
        out[key] = obj
    return out


def template(*values: str) -> dict[Key, dict[str, Any]]:
    text = helm("template", "sluice", str(helmchart.CHART), "--include-crds", *values)
    return by_key([o for o in yaml.safe_load_all(text) if o])


@pytest.fixture(scope="module")
def kustomized() -> dict[Key, dict[str, Any]]:
    return by_key(build(helmchart.OVERLAY))


def test_default_values_render_the_production_overlay(
    kustomized: dict[Key, dict[str, Any]],
) -> None:
    rendered = template()
    assert sorted(rendered) == sorted(kustomized)
    for key, obj in kustomized.items():
        assert rendered[key] == obj, key


def test_values_move_the_namespace_and_set_image_and_replicas(
    kustomized: dict[Key, dict[str, Any]],
) -> None:
    rendered = template(
        "--set=namespace=batch-system",
        "--set=image.repository=registry.example.com/sluice",
        "--set=image.tag=1.2.3",
        "--set=operators.scheduler.replicas=3",
        "--set=operators.scheduler.resources.limits.memory=8Gi",
    )
    assert len(rendered) == len(kustomized)
    namespaces = {k[2] for k in rendered} - {""}
    assert namespaces == {"batch-system"}
    deployment = rendered[("apps/v1", "Deployment", "batch-system", "sluice-scheduler")]
    assert deployment["spec"]["replicas"] == 3
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "registry.example.com/sluice:1.2.3"
    assert container["resources"]["limits"]["memory"] == "8Gi"
    binding = rendered[
        ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding", "", "sluice-scheduler")
    ]
    assert binding["subjects"][0]["namespace"] == "batch-system"


def test_a_disabled_operator_leaves_no_deployment_account_or_role() -> None:
    rendered = template("--set=operators.scheduler.enabled=false")
    names = {(k[1], k[3]) for k in rendered}
    assert not {n for n in names if n[1].startswith("sluice-scheduler")}
    assert ("Namespace", "sluice-system") in names


def test_helm_lint_passes() -> None:
    assert "0 chart(s) failed" in helm("lint", str(helmchart.CHART))
