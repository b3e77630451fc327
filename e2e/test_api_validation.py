"""The API server refuses every bad manifest, with a message naming the field and the rule.

The table is tests/unit/api/bad_manifests.yaml, shared with the unit tests, so the pydantic models
and the generated CRDs are held to the same cases.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml

from operators.api import kind_for

if TYPE_CHECKING:
    from collections.abc import Callable

BAD_MANIFESTS = (
    Path(__file__).resolve().parents[1] / "tests" / "unit" / "api" / "bad_manifests.yaml"
)
CASES: list[dict[str, Any]] = yaml.safe_load(BAD_MANIFESTS.read_text())


def _prepare(case: dict[str, Any], namespace: str) -> tuple[dict[str, Any], list[str]]:
    obj = json.loads(json.dumps(case["manifest"]))
    obj.pop("status", None)  # status goes through the status subresource only
    model = kind_for(obj["apiVersion"], obj["kind"])
    ns_args: list[str] = []
    if model.scope == "Namespaced":
        obj["metadata"]["namespace"] = namespace
        ns_args = ["-n", namespace]
    return obj, ns_args


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_bad_manifest_rejected_by_api_server(
    case: dict[str, Any], kubectl: Callable[..., Any], namespace: str
) -> None:
    obj, ns_args = _prepare(case, namespace)
    model = kind_for(obj["apiVersion"], obj["kind"])
    ref = f"{model.plural}.{model.group}/{obj['metadata']['name']}"
    manifest = json.dumps(obj)

    if "statusPatch" in case:
        kubectl("apply", "--server-side", "-f", "-", input=manifest)
        result = kubectl(
            "patch",
            ref,
            *ns_args,
            "--subresource=status",
            "--type=merge",
            "-p",
            json.dumps(case["statusPatch"]),
            check=False,
        )
        kubectl("delete", ref, *ns_args, "--wait=false")
        assert result.returncode != 0, "status patch was accepted"
        assert case["server"] in result.stderr, result.stderr
        return

    if "update" in case:
        kubectl("apply", "--server-side", "-f", "-", input=manifest)
        result = kubectl(
            "patch", ref, *ns_args, "--type=merge", "-p", json.dumps(case["update"]), check=False
        )
        kubectl("delete", ref, *ns_args, "--wait=false")
        if case["server"] is None:
            assert result.returncode == 0, result.stderr
        else:
            assert result.returncode != 0, "update was accepted"
            assert case["server"] in result.stderr, result.stderr
        return

    result = kubectl("apply", "--server-side", "-f", "-", input=manifest, check=False)
    if case["server"] is None:
        # Needs recursion or other objects: admitted here, reported by the owning operator.
        assert result.returncode == 0, result.stderr
        kubectl("delete", ref, *ns_args, "--wait=false")
        return
    assert result.returncode != 0, f"accepted: {result.stdout}"
    assert case["server"] in result.stderr, result.stderr
    if case["server"].startswith(("spec.", "policies", "tasks", "replicaSpecs", "matchExp")):
        return
    # Schema errors (enum, minimum, pattern) are reported at the field's path too.
    assert any(f in result.stderr for f in ("spec.", "status.", "metadata.")), result.stderr
