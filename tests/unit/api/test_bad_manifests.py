"""Every bad manifest is refused by the models with the same words the API server uses."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from operators.api import parse_object

BAD_MANIFESTS = Path(__file__).with_name("bad_manifests.yaml")
CASES: list[dict[str, Any]] = yaml.safe_load(BAD_MANIFESTS.read_text())


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch, as `kubectl patch --type=merge` applies it."""
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_bad_manifest_rejected(case: dict[str, Any]) -> None:
    if "update" in case:
        old = parse_object(case["manifest"])
        new = parse_object(merge_patch(case["manifest"], case["update"]))
        errors = new.update_errors(old)
        if case["python"] is None:
            assert errors == []
        else:
            assert any(case["python"] in e for e in errors), errors
        return
    with pytest.raises(ValidationError) as info:
        parse_object(case["manifest"])
    assert case["python"] in str(info.value)


def test_case_ids_unique() -> None:
    ids = [c["id"] for c in CASES]
    assert len(ids) == len(set(ids))


def test_merge_patch() -> None:
    assert merge_patch({"a": {"b": 1, "c": 2}, "d": [1]}, {"a": {"b": None, "e": 3}, "d": [2]}) == {
        "a": {"c": 2, "e": 3},
        "d": [2],
    }
