from __future__ import annotations

import asyncio
from typing import Any

from operators.runtime.binder import Binder, BindRequest, binding_body
from operators.runtime.client import ApiError
from operators.runtime.evictor import Evictor


class FakeApi:
    """Records POSTs; bindings of pods listed in `fail` answer 404."""

    def __init__(self, fail: set[str]) -> None:
        self.fail = fail
        self.posts: list[tuple[str, dict[str, Any]]] = []

    async def post(self, path: str, body: dict[str, Any], params: Any = None) -> dict[str, Any]:
        self.posts.append((path, body))
        name = path.split("/")[6]
        if path.endswith("/binding") and name in self.fail:
            raise ApiError(404, {"reason": "NotFound"})
        return {}


def gang(n: int) -> list[BindRequest]:
    return [BindRequest("ns", f"w-{i}", f"u{i}", f"node-{i}") for i in range(n)]


def test_binding_body_carries_gpu_ids_as_annotations() -> None:
    body = binding_body(BindRequest("ns", "p", "u", "n1", {"scheduling.sluice.dev/gpu-ids": "0,1"}))
    assert body["target"] == {"apiVersion": "v1", "kind": "Node", "name": "n1"}
    assert body["metadata"] == {
        "name": "p",
        "namespace": "ns",
        "uid": "u",
        "annotations": {"scheduling.sluice.dev/gpu-ids": "0,1"},
    }


async def test_whole_gang_binds() -> None:
    api = FakeApi(set())
    sem = asyncio.Semaphore(2)
    bound: list[str] = []
    binder = Binder(api, Evictor(api, sem), sem, on_bound=lambda r: bound.append(r.name))  # type: ignore[arg-type]
    outcome = await binder.bind_gang(gang(4))
    assert outcome.ok
    assert sorted(bound) == ["w-0", "w-1", "w-2", "w-3"]
    assert all(p.endswith("/binding") for p, _ in api.posts)


async def test_partly_failed_gang_is_rolled_back() -> None:
    api = FakeApi({"w-2"})
    sem = asyncio.Semaphore(8)
    failed: list[str] = []
    binder = Binder(api, Evictor(api, sem), sem, on_failed=lambda r, why: failed.append(r.name))  # type: ignore[arg-type]
    outcome = await binder.bind_gang(gang(4))
    assert not outcome.ok
    assert [r.name for r, _ in outcome.failed] == ["w-2"]
    assert sorted(r.name for r in outcome.rolled_back) == ["w-0", "w-1", "w-3"]
    evicted = sorted(p.split("/")[6] for p, _ in api.posts if p.endswith("/eviction"))
    assert evicted == ["w-0", "w-1", "w-3"]
    assert sorted(failed) == ["w-0", "w-1", "w-2", "w-3"]  # all forgotten in the cache


class FlakyApi(FakeApi):
    """Every binding answers 503 (the API server restarting)."""

    async def post(self, path: str, body: dict[str, Any], params: Any = None) -> dict[str, Any]:
        self.posts.append((path, body))
        raise ApiError(503, {"reason": "ServiceUnavailable"})


async def test_a_scheduler_that_lost_its_lease_sends_no_retry() -> None:
    # Found by e2e/test_reliability.py: retries after a 5xx went out seconds after the lease was
    # lost, and landed after the new leader's first bindings.
    api = FlakyApi(set())
    sem = asyncio.Semaphore(8)
    leading = [True]

    def may_send() -> bool:
        alive = leading[0]
        leading[0] = False  # the lease is lost while the first attempt is on the wire
        return alive

    binder = Binder(api, Evictor(api, sem), sem, retry_backoff=0.0, may_send=may_send)  # type: ignore[arg-type]
    outcome = await binder.bind_gang(gang(1))
    assert len(api.posts) == 1  # not the 4 attempts a leader makes
    assert [why for _, why in outcome.failed] == ["not the leader"]
