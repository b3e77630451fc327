"""Property tests carry the longer hang guard (tests/unit/conftest.py); others keep 300 s."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st


@given(st.integers())
def _a_property(x: int) -> None:
    assert isinstance(x, int)


def _plain() -> None:
    pass


@pytest.mark.timeout(42)
def _own_guard() -> None:
    pass


def _guard(item: pytest.Item) -> float | None:
    marker = item.get_closest_marker("timeout")
    return None if marker is None else float(marker.args[0])


def _conftest(config: pytest.Config) -> Any:
    """tests/unit/conftest.py as pytest loaded it (tests/unit is no package to import from)."""
    here = Path(__file__).with_name("conftest.py")
    return next(
        p for p in config.pluginmanager.get_plugins() if getattr(p, "__file__", None) == str(here)
    )


def test_property_tests_get_the_longer_hang_guard(request: pytest.FixtureRequest) -> None:
    conftest = _conftest(request.config)
    parent = request.node.parent
    assert parent is not None
    items: list[pytest.Item] = [
        pytest.Function.from_parent(parent, name=name, callobj=obj)
        for name, obj in (("prop", _a_property), ("plain", _plain), ("own", _own_guard))
    ]
    conftest.pytest_collection_modifyitems(items)
    assert [_guard(i) for i in items] == [conftest.PROPERTY_TIMEOUT, None, 42]
    assert conftest.PROPERTY_TIMEOUT > 300  # longer than pyproject's guard
