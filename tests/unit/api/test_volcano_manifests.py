"""Volcano's documented manifests: accepted after `from_volcano`, or refused with what to write."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from operators.api import parse_object
from operators.api.volcano import VOLCANO_KINDS, from_volcano

VOLCANO_MANIFESTS = Path(__file__).with_name("volcano_manifests.yaml")
CASES: list[dict[str, Any]] = yaml.safe_load(VOLCANO_MANIFESTS.read_text())


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_volcano_manifest(case: dict[str, Any]) -> None:
    obj = from_volcano(case["manifest"])
    if case["refused"] is None:
        assert parse_object(obj).to_dict()["kind"] == obj["kind"]
        return
    with pytest.raises(ValidationError) as info:
        parse_object(obj)
    assert case["refused"] in str(info.value)


def test_cases_are_volcano_objects_of_each_kind() -> None:
    kinds = {(c["manifest"]["apiVersion"], c["manifest"]["kind"]) for c in CASES}
    assert kinds == set(VOLCANO_KINDS)
    accepted = {c["manifest"]["kind"] for c in CASES if c["refused"] is None}
    assert accepted == {"Job", "Queue", "PodGroup"}


def test_from_volcano_changes_only_api_version_kind_and_scheduler_name() -> None:
    job = next(c["manifest"] for c in CASES if c["id"] == "job-nginx")
    moved = from_volcano(job)
    assert (moved["apiVersion"], moved["kind"]) == ("batch.sluice.dev/v1alpha1", "VCJob")
    assert moved["spec"]["schedulerName"] == "sluice"
    rest = {k: v for k, v in moved["spec"].items() if k != "schedulerName"}
    assert rest == {k: v for k, v in job["spec"].items() if k != "schedulerName"}
    assert job["spec"]["schedulerName"] == "volcano"  # the input is not modified
    other = {"apiVersion": "v1", "kind": "Pod", "spec": {"schedulerName": "volcano"}}
    assert from_volcano(other) == other


def test_unquoted_integer_quantities_are_taken_as_strings() -> None:
    queue = parse_object(from_volcano(CASES[0]["manifest"]))
    assert queue.to_dict()["spec"]["capability"] == {"cpu": "2", "memory": "4Gi"}
