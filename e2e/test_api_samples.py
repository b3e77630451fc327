"""Every sample applies with server-side apply, reads back equal, and shows its printer columns."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml

from operators.api import KINDS, kind_for, parse_object

if TYPE_CHECKING:
    from collections.abc import Callable

SAMPLES = Path(__file__).resolve().parents[1] / "manifests" / "samples"
FILES = sorted(SAMPLES.glob("*.yaml"))


def _docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


@pytest.fixture
def cleanup(kubectl: Callable[..., Any]) -> Iterator[list[str]]:
    """Cluster-scoped objects to delete afterwards (pools and queues would steer other tests)."""
    refs: list[str] = []
    yield refs
    for ref in refs:
        kubectl("delete", ref, "--ignore-not-found", "--wait=false")


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_sample_applies_and_reads_back(
    path: Path, kubectl: Callable[..., Any], namespace: str, cleanup: list[str]
) -> None:
    docs = _docs(path)
    for doc in docs:
        model = kind_for(doc["apiVersion"], doc["kind"])
        if model.scope == "Namespaced":
            doc["metadata"]["namespace"] = namespace
        else:
            cleanup.append(f"{model.plural}.{model.group}/{doc['metadata']['name']}")
    manifest = "\n---\n".join(json.dumps(d) for d in docs)
    kubectl("apply", "--server-side", "--field-manager=sluice-e2e", "-f", "-", input=manifest)

    for doc in docs:
        model = kind_for(doc["apiVersion"], doc["kind"])
        ns = ["-n", namespace] if model.scope == "Namespaced" else []
        ref = f"{model.plural}.{model.group}/{doc['metadata']['name']}"
        stored = json.loads(kubectl("get", ref, *ns, "-o", "json").stdout)
        # Python -> YAML -> API -> Python: what the server stored is what the model says.
        assert parse_object(stored).to_dict()["spec"] == parse_object(doc).to_dict()["spec"]

        table = kubectl("get", ref, *ns, "-o", "wide").stdout.splitlines()
        header = table[0].split()
        for column in model.printer_columns:
            assert column.name.upper() in header, (column.name, table[0])
        assert doc["metadata"]["name"] in table[1]


def test_category_lists_every_kind(kubectl: Callable[..., Any]) -> None:
    resources = kubectl("api-resources", "--categories=sluice", "-o", "name").stdout.split()
    expected = {f"{k.plural}.{k.group}" for k in KINDS}
    assert expected <= set(resources), resources
    kubectl("get", "sluice", "-A")  # the category resolves


def test_short_names_resolve(kubectl: Callable[..., Any], namespace: str) -> None:
    for kind in KINDS:
        for short in kind.short_names:
            kubectl("get", short, "-n", namespace)
