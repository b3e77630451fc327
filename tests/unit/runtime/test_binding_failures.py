"""Bindings and evictions when the API server drops connections, throttles, times out or
answers a conflict: a gang binds whole or is rolled back, and no assumption outlives its binding."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import aiohttp

from operators.runtime.binder import Binder, BindRequest
from operators.runtime.cache import SchedulerCache
from operators.runtime.client import ApiError
from operators.runtime.evictor import Evictor, EvictOutcome, PodRef
from operators.scheduler import snapshot as S

from .factories import pod, podgroup
from .test_cache import Harness


class FlakyApi:
    """A narrow stand-in for KubeClient.post/get: per pod name, a script of answers to its
    Binding POSTs (an exception to raise, or None for success); evictions can fail the same way."""

    def __init__(
        self,
        answers: dict[str, list[BaseException | None]] | None = None,
        eviction_error: BaseException | None = None,
        pods: dict[str, dict[str, Any]] | None = None,
    ) -> None:
        self.answers = answers or {}
        self.eviction_error = eviction_error
        self.pods = pods or {}
        self.posts: list[str] = []

    async def post(self, path: str, body: dict[str, Any], params: Any = None) -> dict[str, Any]:
        self.posts.append(path)
        name = path.split("/")[6]
        if path.endswith("/eviction"):
            if self.eviction_error is not None:
                raise self.eviction_error
            return {}
        script = self.answers.get(name) or []
        answer = script.pop(0) if script else None
        if answer is not None:
            raise answer
        return {}

    async def get(self, path: str, params: Any = None) -> dict[str, Any]:
        name = path.split("/")[6]
        if name not in self.pods:
            raise ApiError(404, {"reason": "NotFound"})
        return self.pods[name]

    def bindings(self, name: str) -> int:
        return sum(1 for p in self.posts if p.endswith(f"/{name}/binding"))

    def evicted(self) -> list[str]:
        return sorted(p.split("/")[6] for p in self.posts if p.endswith("/eviction"))


def gang_in_cache(h: Harness, n: int) -> list[BindRequest]:
    """A PodGroup of n pending pods, each assumed on its own node as apply() does."""
    h.group(podgroup("g", min_member=n, status={"phase": "Inqueue"}))
    requests = []
    for i in range(n):
        h.pod(pod(f"g-{i}", group="g"))
        h.cache.assume(f"uid-g-{i}", f"n{i}", (), now=0.0)
        requests.append(BindRequest("ns", f"g-{i}", f"uid-g-{i}", f"n{i}"))
    return requests


def wired_binder(h: Harness, api: FlakyApi) -> Binder:
    """A Binder whose answers settle the cache's assumptions, like DecisionApplier wires it."""
    sem = asyncio.Semaphore(8)
    fake: Any = api
    return Binder(
        fake,
        Evictor(fake, sem),
        sem,
        on_bound=lambda r: h.cache.finish_binding(r.uid, 1.0),
        on_failed=lambda r, why: h.cache.forget(r.uid),
        retry_backoff=0.0,
    )


def statuses(h: Harness) -> Sequence[S.TaskStatus]:
    return [t.status for t in sorted(h.cache.snapshot(2.0).tasks, key=lambda t: t.name)]


# ---- aiohttp errors are not OSError ------------------------------------------------


async def test_disconnect_during_gang_binding_rolls_back_and_forgets_every_member() -> None:
    h = Harness()
    requests = gang_in_cache(h, 3)
    gone = ApiError(404, {"reason": "NotFound"})
    api = FlakyApi({"g-1": [aiohttp.ServerDisconnectedError(), aiohttp.ClientPayloadError(), gone]})
    outcome = await wired_binder(h, api).bind_gang(requests)
    assert not outcome.ok
    assert api.evicted() == ["g-0", "g-2"]  # the bound part is taken back off
    assert h.cache.assumed == {}  # nothing stays "assumed bound"
    assert statuses(h) == [S.TaskStatus.PENDING] * 3


async def test_gang_whose_rollback_raises_still_settles_every_assumption() -> None:
    h = Harness()
    requests = gang_in_cache(h, 2)
    api = FlakyApi({"g-1": [ApiError(404, {"reason": "NotFound"})]})
    sem = asyncio.Semaphore(8)
    fake: Any = api

    class BrokenEvictor(Evictor):
        async def evict_all(self, pods: Sequence[PodRef], grace_seconds: int | None = None) -> Any:
            raise RuntimeError("bug")

    binder = Binder(
        fake,
        BrokenEvictor(fake, sem),
        sem,
        on_bound=lambda r: h.cache.finish_binding(r.uid, 1.0),
        on_failed=lambda r, why: h.cache.forget(r.uid),
    )
    outcome = await binder.bind_gang(requests)
    assert not outcome.ok
    assert h.cache.assumed == {}


async def test_eviction_survives_a_disconnect() -> None:
    sem = asyncio.Semaphore(2)
    fake: Any = FlakyApi(eviction_error=aiohttp.ServerDisconnectedError())
    outcomes = await Evictor(fake, sem).evict_all([PodRef("ns", "a", "u")])
    assert outcomes == [EvictOutcome.FAILED]


def test_assumption_whose_binding_never_answered_expires_too() -> None:
    h = Harness()
    h.pod(pod("p"))
    h.cache.assume("uid-p", "n1", (), now=0.0)  # POST issued, no callback ever arrives
    assert h.cache.expire_assumptions(100.0, ttl=60.0, in_flight_grace=60.0) == []
    assert h.cache.expire_assumptions(121.0, ttl=60.0, in_flight_grace=60.0) == ["uid-p"]
    assert h.cache.has_pending_work()
    h.cache.assume("uid-p", "n1", (), now=0.0)
    assert h.cache.expire_assumptions(
        60.0 + SchedulerCache.unconfirmed_grace_seconds + 1, ttl=60.0
    ) == ["uid-p"]


# ---- transient answers are retried; a timed-out binding may have succeeded ----------

ON_N1 = {"metadata": {"uid": "uid-g-1"}, "spec": {"nodeName": "n1"}}


async def test_throttled_and_unavailable_bindings_are_retried_not_rolled_back() -> None:
    h = Harness()
    requests = gang_in_cache(h, 3)
    api = FlakyApi(
        {
            "g-0": [ApiError(429, {"reason": "TooManyRequests"})] * 2,
            "g-2": [ApiError(503, {"reason": "ServiceUnavailable"}), TimeoutError()],
        }
    )
    outcome = await wired_binder(h, api).bind_gang(requests)
    assert outcome.ok
    assert sorted(r.name for r in outcome.bound) == ["g-0", "g-1", "g-2"]
    assert api.evicted() == []
    assert (api.bindings("g-0"), api.bindings("g-2")) == (3, 3)
    assert all(a.bound for a in h.cache.assumed.values())


async def test_persistent_server_errors_give_up_after_a_few_attempts() -> None:
    h = Harness()
    requests = gang_in_cache(h, 2)
    api = FlakyApi({"g-1": [ApiError(503, {"reason": "ServiceUnavailable"})] * 10})
    binder = wired_binder(h, api)
    outcome = await binder.bind_gang(requests)
    assert [r.name for r, _ in outcome.failed] == ["g-1"]
    assert api.bindings("g-1") == binder.attempts
    assert api.evicted() == ["g-0"]
    assert h.cache.assumed == {}


async def test_conflict_after_a_timeout_for_a_pod_already_on_the_target_node_is_success() -> None:
    h = Harness()
    requests = gang_in_cache(h, 2)
    conflict = ApiError(409, {"reason": "Conflict"})
    api = FlakyApi({"g-1": [TimeoutError(), conflict]}, pods={"g-1": ON_N1})
    outcome = await wired_binder(h, api).bind_gang(requests)
    assert outcome.ok
    assert sorted(r.name for r in outcome.bound) == ["g-0", "g-1"]
    assert api.evicted() == []


async def test_conflict_for_a_pod_bound_elsewhere_fails_the_gang() -> None:
    h = Harness()
    requests = gang_in_cache(h, 2)
    elsewhere = {"metadata": {"uid": "uid-g-1"}, "spec": {"nodeName": "n9"}}
    api = FlakyApi({"g-1": [ApiError(409, {"reason": "Conflict"})]}, pods={"g-1": elsewhere})
    outcome = await wired_binder(h, api).bind_gang(requests)
    assert [r.name for r, _ in outcome.failed] == ["g-1"]
    assert api.evicted() == ["g-0"]


async def test_binding_that_never_gets_an_answer_stays_assumed_until_watch_or_ttl() -> None:
    h = Harness()
    requests = gang_in_cache(h, 2)
    api = FlakyApi({"g-1": [TimeoutError()] * 10})
    outcome = await wired_binder(h, api).bind_gang(requests)
    assert [r.name for r, _ in outcome.uncertain] == ["g-1"]
    assert not outcome.failed
    assert api.evicted() == []  # the gang may well be whole: nothing rolled back
    assert set(h.cache.assumed) == {"uid-g-0", "uid-g-1"}
    assert statuses(h) == [S.TaskStatus.BOUND] * 2
    # The watch shows it bound: confirmed.
    h.pod(pod("g-1", group="g", node="n1"))
    assert "uid-g-1" not in h.cache.assumed
    assert statuses(h) == [S.TaskStatus.BOUND] * 2
