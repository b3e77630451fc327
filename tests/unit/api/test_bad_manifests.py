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


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_bad_manifest_rejected(case: dict[str, Any]) -> None:
    with pytest.raises(ValidationError) as info:
        parse_object(case["manifest"])
    assert case["python"] in str(info.value)


def test_case_ids_unique() -> None:
    ids = [c["id"] for c in CASES]
    assert len(ids) == len(set(ids))
