"""JSON patches (RFC 6902) as the API server applies them, for the stand-in APIs of unit tests.

`apply` is faithful where status writes rely on it: all or nothing, a failed `test` or a missing
member (a parent of the path; the member a `remove` names) refuses the whole patch with 422, and
a `test` for null passes where the member is missing. `as_merge` is for stand-ins that record
status writes as merge patches: the body a merge patch with the same effect would have.
"""

from __future__ import annotations

import copy
from typing import Any

from operators.runtime.client import ApiError


def apply(obj: dict[str, Any], ops: list[dict[str, Any]], path: str) -> dict[str, Any]:
    """`obj` patched (a copy); ApiError 422 if the API server would refuse `ops`."""

    def refused() -> ApiError:
        return ApiError(422, {"reason": "Invalid"}, "PATCH", path)

    out = copy.deepcopy(obj)
    for op in ops:
        *parents, last = _tokens(op["path"])
        into: Any = out
        for part in parents:
            if not isinstance(into, dict) or part not in into:
                raise refused()
            into = into[part]
        if not isinstance(into, dict):
            raise refused()
        if op["op"] == "test":
            if into.get(last) != op["value"]:
                raise refused()
        elif op["op"] == "add":
            into[last] = copy.deepcopy(op["value"])
        elif op["op"] == "remove":
            if last not in into:
                raise refused()
            del into[last]
        else:
            raise AssertionError(f"op {op['op']!r} is not one the operators send")
    return out


def as_merge(ops: list[dict[str, Any]]) -> dict[str, Any]:
    """The status merge patch that writes what `ops` write (a removed field: None)."""
    status: dict[str, Any] = {}
    for op in ops:
        tokens = _tokens(op["path"])
        if op["op"] == "test" or tokens[0] != "status":
            continue
        if len(tokens) == 1:
            status.update(copy.deepcopy(op["value"]))  # the status whole
        elif op["op"] == "add":
            status[tokens[1]] = copy.deepcopy(op["value"])
        elif op["op"] == "remove":
            status[tokens[1]] = None
    return {"status": status}


def _tokens(pointer: str) -> list[str]:
    return [t.replace("~1", "/").replace("~0", "~") for t in pointer.lstrip("/").split("/")]
