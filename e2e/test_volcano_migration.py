"""Volcano's documented manifests, moved with `from_volcano` (apiVersion, kind Job -> VCJob,
schedulerName), are accepted by the real API server, or refused with a message saying what to
write instead. The table is tests/unit/api/volcano_manifests.yaml, shared with the unit tests.

Only admission is tested here; e2e/test_jobs.py::test_volcano_documented_manifests_run runs the
accepted ones through the jobs operator and the scheduler.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml

from operators.api import kind_for
from operators.api.batch import UNNAMED_TASK
from operators.api.volcano import from_volcano

if TYPE_CHECKING:
    from collections.abc import Callable

VOLCANO_MANIFESTS = (
    Path(__file__).resolve().parents[1] / "tests" / "unit" / "api" / "volcano_manifests.yaml"
)
CASES: list[dict[str, Any]] = yaml.safe_load(VOLCANO_MANIFESTS.read_text())


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_volcano_manifest_on_the_api_server(
    case: dict[str, Any], kubectl: Callable[..., Any], namespace: str
) -> None:
    obj = from_volcano(case["manifest"])
    model = kind_for(obj["apiVersion"], obj["kind"])
    ns_args: list[str] = []
    if model.scope == "Namespaced":
        obj["metadata"]["namespace"] = namespace
        ns_args = ["-n", namespace]
    result = kubectl("apply", "--server-side", "-f", "-", input=json.dumps(obj), check=False)
    if case["refused"] is not None:
        assert result.returncode != 0, f"accepted: {result.stdout}"
        assert case.get("server", case["refused"]) in result.stderr, result.stderr
        return
    assert result.returncode == 0, result.stderr
    ref = f"{model.plural}.{model.group}/{obj['metadata']['name']}"
    stored = json.loads(kubectl("get", ref, *ns_args, "-o", "json").stdout)
    kubectl("delete", ref, *ns_args, "--wait=false")
    # Nothing was pruned: the stored spec is what was applied, plus the one default the server
    # writes (an unnamed task's name, as Volcano names it).
    for task in obj["spec"].get("tasks") or ():
        task.setdefault("name", UNNAMED_TASK)
    assert stored["spec"] == obj["spec"]
