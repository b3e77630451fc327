"""A narrow stand-in for the client calls the scheduler loop makes, which plays the watch back.

It keeps the raw objects a `Harness` fed in and, like the API server plus the watch, answers each
write by changing the stored object and feeding the new version through the Harness again: a
Binding sets `spec.nodeName`, a status patch (merge or JSON) updates `status`. So a test sees the same
echoes of the scheduler's own writes that a real cluster sends back.
"""

from __future__ import annotations

import copy
import itertools
from typing import Any

from operators.api.scheduling import PodGroup

from . import json_patch
from .test_cache import Harness

_rv = itertools.count(10_000)


class EchoApi:
    def __init__(self, h: Harness) -> None:
        self.h = h
        self.raw: dict[tuple[str, str, str], dict[str, Any]] = {}  # (kind, namespace, name)
        self.writes: list[tuple[str, str]] = []  # (method, path)
        self.late_pods = False  # pod status writes are stored, their echo not fed (a slow watch)

    def add(self, kind: str, obj: dict[str, Any]) -> None:
        """Store a raw object and feed it as the watch would (kind: pod, podgroup, node)."""
        meta = obj["metadata"]
        self.raw[(kind, meta.get("namespace", ""), meta["name"])] = obj
        self._feed(kind, obj)

    def _feed(self, kind: str, obj: dict[str, Any]) -> None:
        obj["metadata"]["resourceVersion"] = str(next(_rv))
        getattr(self.h, {"pod": "pod", "podgroup": "group", "node": "node"}[kind])(
            copy.deepcopy(obj)
        )

    def _target(self, path: str) -> tuple[str, dict[str, Any]]:
        parts = path.strip("/").split("/")
        ns = parts[parts.index("namespaces") + 1]
        if PodGroup.plural in parts:
            return "podgroup", self.raw[("podgroup", ns, parts[parts.index(PodGroup.plural) + 1])]
        return "pod", self.raw[("pod", ns, parts[parts.index("pods") + 1])]

    async def post(self, path: str, body: Any, params: Any = None) -> dict[str, Any]:
        self.writes.append(("POST", path))
        if path.endswith("/binding"):
            kind, obj = self._target(path)
            obj["spec"]["nodeName"] = body["target"]["name"]
            obj["metadata"].setdefault("annotations", {}).update(
                body["metadata"].get("annotations") or {}
            )
            self._feed(kind, obj)
        return {}

    async def merge_patch(self, path: str, body: Any) -> dict[str, Any]:
        self.writes.append(("PATCH", path))
        if "/namespaces/" not in path:
            return {}  # a Queue's or Pool's status: nothing here watches them
        kind, obj = self._target(path)
        if not path.endswith("/status"):
            raise AssertionError(f"unexpected patch of {path}")
        status = obj.setdefault("status", {})
        for key, value in body["status"].items():
            if value is None:
                status.pop(key, None)
            else:
                status[key] = copy.deepcopy(value)
        if kind != "pod" or not self.late_pods:
            self._feed(kind, obj)
        return copy.deepcopy(obj)

    async def json_patch(self, path: str, ops: list[dict[str, Any]]) -> dict[str, Any]:
        self.writes.append(("PATCH", path))
        if not path.endswith("/status"):
            raise AssertionError(f"unexpected patch of {path}")
        kind, obj = self._target(path)
        patched = json_patch.apply(obj, ops, path)
        obj.clear()
        obj.update(patched)
        self._feed(kind, obj)
        return copy.deepcopy(obj)

    async def get(self, path: str) -> dict[str, Any]:
        return copy.deepcopy(self._target(path)[1])

    async def strategic_merge_patch(self, path: str, body: Any) -> dict[str, Any]:
        return await self.merge_patch(path, body)
