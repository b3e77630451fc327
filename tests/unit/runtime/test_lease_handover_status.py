"""Status writes a leader had pending when it lost the lease are cancelled (a load run dropped
233 and 558 at once). Nothing of them is lost: each is derived from the cluster as the watch
shows it (which the cancelled writes never reached), so the next leader's first session writes
them again (operators/controllers/scheduler_status.py)."""

from __future__ import annotations

import asyncio
from typing import Any

from operators.api.scheduling import PodGroup, Queue
from operators.controllers.scheduler_status import StatusWriter
from operators.runtime import records as R
from operators.runtime.metrics import SchedulerMetrics
from operators.scheduler import decisions as D
from operators.scheduler.session import PoolStatus, QueueStatus, SessionResult

from .factories import node, pod, podgroup
from .test_apply import applier
from .test_cache import Harness


class StalledApi:
    """Status writes that never get an answer (the leader loses its lease meanwhile)."""

    def __init__(self) -> None:
        self.sent: dict[str, Any] = {}

    async def merge_patch(self, path: str, body: Any) -> dict[str, Any]:
        self.sent[path] = body
        await asyncio.Event().wait()
        return {}

    strategic_merge_patch = json_patch = merge_patch


class Api:
    def __init__(self) -> None:
        self.sent: dict[str, Any] = {}

    async def merge_patch(self, path: str, body: Any) -> dict[str, Any]:
        self.sent[path] = body
        return {}

    strategic_merge_patch = json_patch = merge_patch


def cluster() -> Harness:
    h = Harness()
    h.node(node("n1"))
    h.cache.on_queue(
        "ADDED", ("", "team-a"), R.queue({"metadata": {"name": "team-a"}, "spec": {}}), None
    )
    h.cache.on_pool("ADDED", ("", "gpu"), R.pool({"metadata": {"name": "gpu"}, "spec": {}}), None)
    h.group(podgroup("g", min_member=2, status={"phase": "Inqueue"}))
    for i in range(2):
        h.pod(pod(f"g-{i}", group="g", node="n1", phase="Running"))
    h.group(podgroup("w", min_member=1, status={"phase": "Pending"}))
    h.pod(pod("w-0", group="w"))
    h.pod(pod("plain"))
    return h


def session() -> SessionResult:
    """What a session of either leader says about this cluster."""
    return SessionResult(
        decisions=(),
        explanations={
            "pg-w": D.Explanation("pg-w", D.ReasonCode.NOT_ADMITTED, "needs cpu 1; idle 0"),
            "pod:uid-plain": D.Explanation("pod:uid-plain", D.ReasonCode.UNSCHEDULABLE, "no fit"),
        },
        queues={"team-a": QueueStatus({"cpu": 2000}, {"cpu": 2000}, 1, 0, 1)},
        pools={"gpu": PoolStatus({"cpu": 96000}, {"cpu": 96000}, {"cpu": 2000}, {}, {}, 1)},
    )


def write_all(writer: StatusWriter, result: SessionResult) -> None:
    writer.write_groups(result, 1.0, "t")
    writer.write_pod_reasons(result, 1.0, "t")
    writer.write_queues(result.queues)
    writer.write_pools(result.pools)


async def test_writes_cancelled_at_a_lease_loss_are_written_by_the_next_leader() -> None:
    h = cluster()
    stalled = StalledApi()
    old: Any = stalled
    leader = StatusWriter(old, h.cache, SchedulerMetrics(), concurrency=8)
    write_all(leader, session())
    await asyncio.sleep(0.01)  # every write on the wire
    cancelled = leader.cancel()
    await leader.drain()
    # Group phase/counts/conditions (g Running, w's reason), the plain pod's PodScheduled,
    # the queue and the pool.
    assert cancelled == 5
    assert len(stalled.sent) == 5

    # The next leader: a fresh writer over a cache fed by its own watch, which shows none of
    # the cancelled writes (none reached the API).
    api = Api()
    new: Any = api
    successor = StatusWriter(new, cluster().cache, SchedulerMetrics(), concurrency=8)
    write_all(successor, session())
    await successor.drain()
    assert api.sent == stalled.sent


class EvictionApi:
    """Records status writes and evictions in order; Queue status writes never get an answer
    (a long queue of status writes: the status writer's one slot stays taken)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    async def merge_patch(self, path: str, body: Any) -> dict[str, Any]:
        self.calls.append((path, body))
        if Queue.plural in path:
            await asyncio.Event().wait()
        return {}

    async def json_patch(self, path: str, ops: Any) -> dict[str, Any]:
        self.calls.append((path, ops))
        return {}

    async def post(self, path: str, body: Any, params: Any = None) -> dict[str, Any]:
        self.calls.append((path, body))
        return {}


async def test_an_eviction_sent_before_a_lease_loss_has_its_last_eviction_in_the_api() -> None:
    """status.lastEviction records an action (the next leader cannot derive it): it is in the
    API before the victim's pods are evicted, not queued behind other status writes that a
    lease loss cancels."""
    h = cluster()
    api = EvictionApi()
    client: Any = api
    writer = StatusWriter(client, h.cache, SchedulerMetrics(), concurrency=1)
    app, _ = applier(h)
    app.client = app.evictor.client = app.events.client = client
    app.before_evict = writer.stamp_eviction
    writer.write_queues(session().queues)  # takes the writer's one slot, never answered
    evict = D.Evict("pg-g", ("uid-g-0", "uid-g-1"), D.EvictReason.PREEMPTED, "room for w")
    result = SessionResult(decisions=(evict,), explanations={})
    writer.note_evictions(result.decisions, "t")  # as the cycle does, before applying
    app.apply(result, 1.0)
    writer.write_groups(result, 1.0, "t")  # the group's write waits for the slot
    await app.drain()
    writer.cancel()  # the lease is lost: the queued status writes go
    await writer.drain()
    paths = [path for path, _ in api.calls]
    status = f"{PodGroup.api_path('ns', 'g')}/status"
    assert paths.count(status) == 1  # its queued write never went
    stamp = paths.index(status)
    evicted = [i for i, path in enumerate(paths) if path.endswith("/eviction")]
    assert len(evicted) == 2
    assert stamp < min(evicted)  # in the API before the pods went
    assert api.calls[stamp][1] == [
        {"op": "test", "path": "/metadata/uid", "value": "pg-g"},
        {
            "op": "add",
            "path": "/status/lastEviction",
            "value": {"reason": "Preempted", "time": "t", "message": "room for w"},
        },
    ]
