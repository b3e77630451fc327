"""Regression tests for the review of the live scheduler runtime (findings 1-6)."""

from __future__ import annotations

import asyncio
import math
import os
import pathlib
from collections.abc import Sequence
from typing import Any

import aiohttp

from operators.controllers.scheduler_status import API, StatusWriter
from operators.runtime import kubeconfig
from operators.runtime import records as R
from operators.runtime.binder import Binder, BindRequest
from operators.runtime.cache import SchedulerCache
from operators.runtime.client import ApiError
from operators.runtime.evictor import Evictor, EvictOutcome, PodRef
from operators.runtime.informer import Informer, WatchedKind
from operators.runtime.metrics import SchedulerMetrics
from operators.scheduler import decisions as D
from operators.scheduler import snapshot as S
from operators.scheduler.session import PoolStatus, QueueStatus, SessionResult

from .factories import node, pod, podgroup
from .test_cache import Harness
from .test_informer import ScriptedApi, obj


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


# ---- finding 1: aiohttp errors are not OSError ------------------------------------------------


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


# ---- finding 2: one odd object must not stop the scheduler --------------------------------------


def test_gpu_ids_that_are_digits_only_to_unicode_are_ignored() -> None:
    assert "²".isdigit()  # the trap: int("²") raises
    assert R.parse_gpu_ids("0,²,1,٣, 2 ,9" + "9" * 5000) == (0, 1, 2)
    rec = R.pod(pod("p", annotations={"scheduling.sluice.dev/gpu-ids": "²"}))
    assert rec.gpu_ids == ()


def test_unreadable_annotations_and_quantities_degrade_to_defaults() -> None:
    raw = node("n1")
    raw["metadata"]["annotations"]["scheduling.sluice.dev/gpu-topology"] = "[" * 100_000
    assert R.node(raw).gpu_topology == S.GpuTopology()  # RecursionError inside json, not raised
    odd = pod("p", cpu="1e999999999", annotations={"scheduling.sluice.dev/gpu-milli": "²"})
    rec = R.pod(odd)
    assert rec.requests == {}
    assert rec.gpu_milli == 0


async def test_informer_skips_an_object_its_transform_cannot_read() -> None:
    def transform(raw: dict[str, Any]) -> int:
        return int(str(raw["v"]))  # "²" raises, like parse_gpu_ids did

    api = ScriptedApi(
        [[obj("a", "1", 1), {**obj("bad", "2"), "v": "²"}, obj("c", "3", 3)]],
        [
            [
                {"type": "MODIFIED", "object": {**obj("a", "11"), "v": "²"}},
                {"type": "ADDED", "object": obj("d", "12", 4)},
            ]
        ],
    )
    seen: list[tuple[str, str]] = []
    fake_client: Any = api
    informer: Informer[int] = Informer(
        fake_client,
        WatchedKind("things", "/x"),
        transform,
        lambda kind, key, new, old: seen.append((kind, key[1])),
    )
    task = asyncio.create_task(informer.run())
    await asyncio.wait_for(api.done.wait(), 5)
    task.cancel()
    assert api.list_calls == 1  # no re-list loop
    assert informer.store == {("ns", "c"): 3, ("ns", "d"): 4}
    assert ("DELETED", "a") in seen  # its unreadable new version drops the old one
    assert informer.skipped == 2


# ---- finding 3: preemption delays must be finite and bounded ------------------------------------

DELAY = "scheduling.sluice.dev/preemption-delay-seconds"


def test_preemption_delays_are_finite_and_clamped_to_thirty_days() -> None:
    month = R.MAX_PREEMPTION_DELAY
    assert month == 30 * 24 * 3600
    for raw, want in [("inf", None), ("nan", None), ("-inf", None), ("x", None), ("1e12", month)]:
        assert R.pod(pod("p", annotations={DELAY: raw})).preemption_delay == want, raw
    assert R.pod(pod("p", annotations={DELAY: "-5"})).preemption_delay == 0.0
    assert R.pod(pod("p", annotations={DELAY: "90"})).preemption_delay == 90.0
    group = podgroup("g")
    group["spec"]["preemptionDelaySeconds"] = "Infinity"
    assert R.podgroup(group).group.preemption_grace is None
    group["spec"]["preemptionDelaySeconds"] = 1e300
    assert R.podgroup(group).group.preemption_grace == month
    queue = {"metadata": {"name": "q"}, "spec": {"preemptionDelaySeconds": "nan", "weight": "inf"}}
    assert R.queue(queue).preemption_delay == 0.0
    assert R.queue(queue).weight == 1.0
    queue["spec"]["preemptionDelaySeconds"] = "1e12"
    assert R.queue(queue).preemption_delay == month


def test_rfc3339_clamps_instead_of_raising() -> None:
    assert R.rfc3339(math.inf) == "9999-12-31T23:59:59Z"
    assert R.rfc3339(1e20) == "9999-12-31T23:59:59Z"
    assert R.rfc3339(-math.inf) == "1970-01-01T00:00:00Z"
    assert R.rfc3339(math.nan) == "1970-01-01T00:00:00Z"
    assert R.rfc3339(0.0) == "1970-01-01T00:00:00Z"


# ---- finding 4: transient answers are retried; a timed-out binding may have succeeded ----------

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


# ---- finding 5: the service-account token file is not read on every request --------------------


def test_token_file_is_cached_until_it_changes(tmp_path: pathlib.Path) -> None:
    token = tmp_path / "token"
    token.write_text("one\n")
    stamp = token.stat().st_mtime_ns
    conn = kubeconfig.Connection(server="https://x", token_file=str(token))
    assert conn.bearer_token() == "one"
    token.write_text("owt\n")  # same size, mtime put back: not re-read
    os.utime(token, ns=(stamp, stamp))
    assert conn.bearer_token() == "one"
    os.utime(token, ns=(stamp + 10**9, stamp + 10**9))  # rotated
    assert conn.bearer_token() == "owt"
    token.write_text("new\n")
    os.utime(token, ns=(stamp + 10**9, stamp + 10**9))
    conn._token_cache.max_age = 0.0  # the periodic re-read catches an unchanged stamp too
    assert conn.bearer_token() == "new"


# ---- finding 6: status bookkeeping is recorded after success and pruned -----------------------


class StatusApi:
    """A narrow stand-in for KubeClient.merge_patch: the first `failures` writes answer 500."""

    def __init__(self, failures: int = 0) -> None:
        self.failures = failures
        self.patches: list[str] = []

    async def merge_patch(self, path: str, body: Any) -> dict[str, Any]:
        self.patches.append(path)
        if self.failures:
            self.failures -= 1
            raise ApiError(500, {"reason": "InternalError"})
        return {}


def status_writer(h: Harness, api: StatusApi) -> StatusWriter:
    fake: Any = api
    return StatusWriter(fake, h.cache, SchedulerMetrics(), concurrency=4)


async def test_failed_queue_and_pool_writes_are_retried_with_the_same_value() -> None:
    h = Harness()
    h.cache.on_queue("ADDED", ("", "q"), R.queue({"metadata": {"name": "q"}, "spec": {}}), None)
    h.cache.on_pool("ADDED", ("", "p"), R.pool({"metadata": {"name": "p"}, "spec": {}}), None)
    api = StatusApi(failures=2)
    writer = status_writer(h, api)
    queues = {"q": QueueStatus(deserved={}, allocated={}, pending=1, inqueue=0, running=0)}
    pools = {"p": PoolStatus(capacity={}, allocatable={}, used={}, shared={}, pending={}, nodes=1)}
    for _ in range(3):
        writer.write_queues(queues)
        writer.write_pools(pools)
        await writer.drain()
    # Failed once each, written once each, then nothing while the value stays the same.
    assert sorted(api.patches) == sorted([f"{API}/queues/q/status", f"{API}/pools/p/status"] * 2)
    h.cache.on_queue("DELETED", ("", "q"), None, h.cache.queues["q"])
    h.cache.on_pool("DELETED", ("", "p"), None, h.cache.pools["p"])
    writer.write_queues(queues)
    writer.write_pools(pools)
    assert writer._last_queue == {}
    assert writer._last_pool == {}


async def test_throttle_times_and_implicit_marks_of_vanished_objects_are_pruned() -> None:
    h = Harness()
    h.group(podgroup("g"))
    h.pod(pod("plain"))
    writer = status_writer(h, StatusApi())
    mark = D.MarkWillEvict(victim="pod:uid-plain", preemptor="pg-g", deadline=100.0)
    writer.write_groups(SessionResult(decisions=(mark,), explanations={}), 1.0, "t")
    await writer.drain()
    assert set(writer._last_message_write) == {"pg-g"}
    assert set(writer.implicit_marks) == {"pod:uid-plain"}
    h.cache.on_podgroup("DELETED", ("ns", "g"), None, h.groups.pop(("ns", "g")))
    h.delete_pod("plain")
    writer.write_groups(SessionResult(decisions=(), explanations={}), 2.0, "t")
    assert writer._last_message_write == {}
    assert writer.implicit_marks == {}
