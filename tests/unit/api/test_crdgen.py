"""The generated CRDs: deterministic, structural, complete, and the drift check catches drift."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from operators.api import KINDS, Resource
from operators.api.crdgen import crd_for, filename_for, main, render_all
from operators.api.openapi import STRUCTURAL_KEYWORDS

REPO = Path(__file__).resolve().parents[3]
CRDS = {filename_for(k): (k, crd_for(k)) for k in KINDS}
_REFUSED_KEYS = {"description", "x-kubernetes-preserve-unknown-fields"}


def _schemas(node: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every schema node under `node`, with a readable path."""
    yield path or "<root>", node
    for name, sub in node.get("properties", {}).items():
        yield from _schemas(sub, f"{path}.{name}")
    if isinstance(node.get("items"), dict):
        yield from _schemas(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from _schemas(node["additionalProperties"], f"{path}{{}}")


def _root(crd: dict[str, Any]) -> dict[str, Any]:
    schema: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def test_render_is_deterministic() -> None:
    assert render_all() == render_all()


def test_committed_crds_match_models() -> None:
    assert main(["--check", str(REPO / "crds")]) == 0


def test_check_reports_drift_and_stale_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([str(tmp_path)]) == 0
    assert main(["--check", str(tmp_path)]) == 0
    victim = tmp_path / "scheduling.sluice.dev_pools.yaml"
    victim.write_text(victim.read_text().replace("spool", "xpool"))
    (tmp_path / "old_kind.yaml").write_text("{}\n")
    assert main(["--check", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "-    - xpool" in err
    assert "+    - spool" in err
    assert "stale" in err
    assert "make crds" in err
    # Writing repairs both.
    assert main([str(tmp_path)]) == 0
    assert main(["--check", str(tmp_path)]) == 0


def test_one_file_per_kind_and_names() -> None:
    assert sorted(CRDS) == sorted(
        [
            "scheduling.sluice.dev_pools.yaml",
            "scheduling.sluice.dev_sluicequeues.yaml",
            "scheduling.sluice.dev_sluicepodgroups.yaml",
            "scheduling.sluice.dev_sluicetopologies.yaml",
            "batch.sluice.dev_vcjobs.yaml",
            "batch.sluice.dev_hybridjobs.yaml",
            "events.sluice.dev_eventsinks.yaml",
        ]
    )


@pytest.mark.parametrize("name", sorted(CRDS))
def test_crd_shape(name: str) -> None:
    kind, crd = CRDS[name]
    spec = crd["spec"]
    assert crd["metadata"]["name"] == f"{spec['names']['plural']}.{spec['group']}"
    assert spec["names"]["categories"] == ["sluice"]
    assert spec["names"]["shortNames"]
    (version,) = spec["versions"]
    assert version["subresources"] == {"status": {}}
    assert version["served"] is True
    assert version["storage"] is True
    assert version["additionalPrinterColumns"][-1]["name"] == "Age"
    assert kind.model_fields["api_version"].default == f"{spec['group']}/{version['name']}"
    assert kind.model_fields["kind"].default == spec["names"]["kind"]


@pytest.mark.parametrize("name", sorted(CRDS))
def test_schema_is_structural(name: str) -> None:
    _, crd = CRDS[name]
    for path, node in _schemas(_root(crd)):
        unknown = set(node) - STRUCTURAL_KEYWORDS
        assert not unknown, f"{path}: unsupported keywords {unknown}"
        # Untyped nodes: int-or-string quantities, and refused Volcano fields (any value, so
        # the CEL rule that refuses them gets to say what to write instead).
        untyped = node.get("x-kubernetes-int-or-string") or (
            node.get("x-kubernetes-preserve-unknown-fields") and set(node) <= _REFUSED_KEYS
        )
        assert "type" in node or untyped, f"{path}: no type"
        if node.get("x-kubernetes-preserve-unknown-fields") and "type" in node:
            assert node["type"] == "object", path
        assert node.get("additionalProperties") is not False, path
        for required in node.get("required", []):
            assert required in node.get("properties", {}), f"{path}: {required}"


@pytest.mark.parametrize("name", sorted(CRDS))
def test_cel_rules_are_cost_bounded(name: str) -> None:
    """Every list, map and string that a rule can iterate has a size cap."""
    _, crd = CRDS[name]
    for path, node in _schemas(_root(crd)):
        if not node.get("x-kubernetes-validations"):
            continue
        for rule in node["x-kubernetes-validations"]:
            assert rule["message"], path
        if path == "<root>":
            continue  # root rules compare scalars (spec.parent vs metadata.name) only
        for sub_path, sub in _schemas(node, path):
            if sub.get("type") == "array":
                assert "maxItems" in sub, f"{sub_path}: array without maxItems under a rule"
            if sub.get("type") == "object" and "additionalProperties" in sub:
                assert "maxProperties" in sub, f"{sub_path}: map without maxProperties"
            if sub.get("type") == "string":
                bounded = "maxLength" in sub or "enum" in sub
                assert bounded, f"{sub_path}: string without maxLength under a rule"


def test_spec_has_no_defaults_but_the_unnamed_task() -> None:
    """Defaults live in the Python models; the API server must not rewrite stored objects. The
    one exception is a list-map key server-side apply needs: an unnamed VCJob task's name."""
    found = {
        (kind.__name__, path, node["default"])
        for kind, crd in CRDS.values()
        for path, node in _schemas(_root(crd))
        if "default" in node
    }
    assert found == {("VCJob", ".spec.tasks[].name", "default0")}


def _resolve(schema: dict[str, Any], json_path: str) -> bool:
    node = schema
    for part in re.findall(r"(?:[^.\\]|\\.)+", json_path.lstrip(".")):
        part = part.replace("\\.", ".")
        field, _, index = part.partition("[")
        props = node.get("properties", {})
        if field in props:
            node = props[field]
        elif isinstance(node.get("additionalProperties"), dict):
            node = node["additionalProperties"]
        else:
            return False
        if index:
            node = node["items"]
    return True


@pytest.mark.parametrize("kind", KINDS, ids=[k.__name__ for k in KINDS])
def test_printer_columns_point_at_fields(kind: type[Resource]) -> None:
    root = _root(crd_for(kind))
    root["properties"]["metadata"].setdefault("properties", {})["creationTimestamp"] = {}
    for column in kind.printer_columns:
        path = column.json_path.split("[?")[0]
        assert _resolve(root, path), f"{kind.__name__}: {column.name} -> {column.json_path}"


def test_queue_root_rules_see_metadata() -> None:
    root = _root(crd_for(next(k for k in KINDS if k.__name__ == "Queue")))
    rules = [r["rule"] for r in root["x-kubernetes-validations"]]
    assert any("self.metadata.name" in r for r in rules)


def test_yaml_is_parseable_and_headed() -> None:
    for name, text in render_all().items():
        assert text.startswith("# Generated by `make crds`")
        (doc,) = [d for d in yaml.safe_load_all(text) if d]
        assert doc == CRDS[name][1]


def test_flag_columns_are_named_after_the_flags_they_show() -> None:
    """A `disableSharing: true` pool must not read as `SHARING true` in `kubectl get`."""
    for kind in KINDS:
        for column in kind.printer_columns:
            field = column.json_path.rsplit(".", 1)[-1]
            if field.startswith("disable"):
                assert column.name.replace("-", "").lower() == field.lower(), column


def test_eventsink_columns_show_only_what_is_written() -> None:
    """Status columns are exactly the fields the events operator writes."""
    written = {"delivered", "failed", "pending", "lastDeliveryTime"}
    sink = next(k for k in KINDS if k.__name__ == "EventSink")
    for column in sink.printer_columns:
        path = column.json_path
        assert path.startswith((".spec.", ".metadata.")) or path[len(".status.") :] in written
