"""The `sluice` subcommands' output against golden files (tests/unit/cli/golden).

After an intended change of the output, regenerate with `SLUICE_UPDATE_GOLDEN=1 make unit` and
review the diff.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from operators.cli import pools, queues, top, why

from . import objects as O

GOLDEN = Path(__file__).with_name("golden")
UPDATE = os.environ.get("SLUICE_UPDATE_GOLDEN") == "1"


def check(name: str, data: Mapping[str, Any], render: Callable[[Any], str]) -> None:
    for suffix, text in (
        (".txt", render(data)),
        (".json", json.dumps(data, indent=2, sort_keys=True) + "\n"),
    ):
        path = GOLDEN / f"{name}{suffix}"
        if UPDATE:
            path.write_text(text)
        assert text == path.read_text(), f"{path} differs (SLUICE_UPDATE_GOLDEN=1 to rewrite)"


def test_pools() -> None:
    check("pools", pools.summarise(O.POOLS), pools.render)


def test_queues() -> None:
    check("queues", queues.summarise(O.QUEUES), queues.render)


def test_top() -> None:
    check("top", top.summarise(O.POOLS, O.QUEUES, "nvidia.com/gpu"), top.render)


@pytest.mark.parametrize(
    ("name", "facts"),
    [
        ("why-waiting-group", O.WAITING_GROUP),
        ("why-running-job", O.RUNNING_JOB),
        ("why-missing-group", O.MISSING_GROUP_POD),
        ("why-plain-pod", O.PLAIN_POD),
        ("why-borrowing-job", O.BORROWING_JOB),
        ("why-borrowing-disabled", O.BORROWING_DISABLED_GROUP),
        ("why-reclaimed-job", O.RECLAIMED_JOB),
        ("why-will-evict-job", O.WILL_EVICT_JOB),
        ("why-privileged-job", O.PRIVILEGED_JOB),
        ("why-non-preemptible-job", O.NON_PREEMPTIBLE_JOB),
    ],
)
def test_why(name: str, facts: dict[str, Any]) -> None:
    check(name, why.explain(facts), why.render)
