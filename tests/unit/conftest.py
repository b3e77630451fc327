"""Hang guards for the unit tests.

pyproject's ``timeout = 300`` is a hang guard per test. A property test is many examples in one
test (100 by default, each a few sessions), so its time is its examples' time: on a loaded
2-core machine (full ``make unit`` runs of 30 minutes against ~90 s quiet) the heaviest ones ran
past 300 s while making progress. pytest-timeout then fails the test from inside an example,
Hypothesis takes that for the example failing, replays it (it passes) and reports a
FlakyFailure, or, when the example's repr is over 30 kB, only its "overly large repr" warning:
a decision mismatch that never was. Property tests get a guard sized for their examples.

For the same reason Hypothesis's own wall-clock checks (the per-example deadline and the
"too slow" health check) are off for the unit suite: they measure the machine, not the code.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile("unit", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("unit")

PROPERTY_TIMEOUT = 1200  # seconds; ordinary tests keep pyproject's 300


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if not isinstance(item, pytest.Function) or item.get_closest_marker("timeout"):
            continue
        if getattr(item.obj, "is_hypothesis_test", False):
            item.add_marker(pytest.mark.timeout(PROPERTY_TIMEOUT))
