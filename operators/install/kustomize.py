"""`kustomize build` through kubectl (which embeds kustomize), parsed into objects."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

from operators.devcluster.cluster import kubectl_binary

REPO = Path(__file__).resolve().parents[2]
MANIFESTS = REPO / "manifests"


def build(path: Path) -> list[dict[str, Any]]:
    result = subprocess.run(
        [kubectl_binary(), "kustomize", str(path)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    if result.returncode != 0:
        raise RuntimeError(f"kustomize build {path} failed:\n{result.stderr}")
    return [o for o in yaml.safe_load_all(result.stdout) if o]


def deployments(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == "Deployment"]


def operator_container(deployment: dict[str, Any]) -> dict[str, Any]:
    containers: list[dict[str, Any]] = deployment["spec"]["template"]["spec"]["containers"]
    return next(c for c in containers if c["name"] == "operator")
