"""Polling with a deadline: the one waiting helper for the dev cluster, e2e tests and benches."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(
    predicate: Callable[[], T], timeout: float = 60.0, interval: float = 0.25, what: str = ""
) -> T:
    """Return the first truthy value of `predicate()`; fail with `what` after `timeout` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what or predicate}")
        time.sleep(interval)
