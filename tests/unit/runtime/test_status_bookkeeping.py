"""Status writes: remembered only after they succeeded (a failed write is retried), and
bookkeeping of objects that are gone is pruned."""

from __future__ import annotations

import asyncio
from typing import Any

from operators.api.scheduling import Pool, Queue
from operators.controllers.scheduler_status import StatusWriter
from operators.runtime import records as R
from operators.runtime.client import ApiError
from operators.runtime.metrics import SchedulerMetrics
from operators.scheduler import decisions as D
from operators.scheduler.session import PoolStatus, QueueStatus, SessionResult

from .factories import pod, podgroup
from .test_cache import Harness

# ---- status bookkeeping is recorded after success and pruned -----------------------


class StatusApi:
    """A narrow stand-in for the client's status patches: the first `failures` writes answer
    500."""

    def __init__(self, failures: int = 0) -> None:
        self.failures = failures
        self.patches: list[str] = []

    async def merge_patch(self, path: str, body: Any) -> dict[str, Any]:
        self.patches.append(path)
        if self.failures:
            self.failures -= 1
            raise ApiError(500, {"reason": "InternalError"})
        return {}

    json_patch = merge_patch


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
    assert sorted(api.patches) == sorted(
        [f"{Queue.api_path(name='q')}/status", f"{Pool.api_path(name='p')}/status"] * 2
    )
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
    assert set(writer._last_write) == {"pg-g"}
    assert set(writer.implicit_marks) == {"pod:uid-plain"}
    h.cache.on_podgroup("DELETED", ("ns", "g"), None, h.groups.pop(("ns", "g")))
    h.delete_pod("plain")
    writer.write_groups(SessionResult(decisions=(), explanations={}), 2.0, "t")
    assert writer._last_write == {}
    assert writer.implicit_marks == {}


def merged(stored: Any, patch: Any) -> Any:
    """What the API server holds after a JSON merge patch (RFC 7386): null removes a key, a key
    left out stays."""
    if not isinstance(patch, dict):
        return patch
    out = dict(stored) if isinstance(stored, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merged(out.get(key), value)
    return out


class SlowStatusApi:
    """Queue/Pool status PATCHes that wait for `release`, applied as merge patches; the stored
    `allocated` after each, in the order they land."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.stored: dict[str, Any] = {}
        self.landed: list[Any] = []

    async def merge_patch(self, path: str, body: Any) -> dict[str, Any]:
        await self.release.wait()
        self.stored = merged(self.stored, body)
        self.landed.append(self.stored["status"]["allocated"])
        return {}


async def test_a_resource_that_fell_to_zero_is_removed_from_the_stored_status() -> None:
    # Seen in the fault run: after every GPU job was deleted the Queue and the Pools still showed
    # `nvidia.com/gpu: 2` (a merge patch that leaves a key out keeps it), while cpu stayed exact.
    h = Harness()
    h.cache.on_queue("ADDED", ("", "q"), R.queue({"metadata": {"name": "q"}, "spec": {}}), None)
    api = SlowStatusApi()
    api.release.set()
    fake: Any = api
    writer = StatusWriter(fake, h.cache, SchedulerMetrics(), concurrency=4)
    held = {"cpu": 2000, "nvidia.com/gpu": 2}
    writer.write_queues(
        {"q": QueueStatus(deserved={}, allocated=held, pending=0, inqueue=0, running=0)}
    )
    await writer.drain()
    writer.write_queues(
        {"q": QueueStatus(deserved={}, allocated={"cpu": 1000}, pending=0, inqueue=0, running=0)}
    )
    await writer.drain()
    assert api.landed == [{"cpu": "2", "nvidia.com/gpu": "2"}, {"cpu": "1"}]


def queue_status(gpus: int) -> dict[str, QueueStatus]:
    allocated = {"nvidia.com/gpu": gpus} if gpus else {}
    return {"q": QueueStatus(deserved={}, allocated=allocated, pending=0, inqueue=0, running=0)}


async def test_a_queue_value_wanted_while_a_write_is_on_the_wire_is_written_after_it() -> None:
    # The last session after a gang's pods finished wants 0 GPUs while its previous write
    # (6 GPUs) is still on the wire; no session follows on a quiet cluster. The API must end
    # with 0, not 6 (the fault run's "GPUs of finished pods still charged").
    h = Harness()
    h.cache.on_queue("ADDED", ("", "q"), R.queue({"metadata": {"name": "q"}, "spec": {}}), None)
    api = SlowStatusApi()
    fake: Any = api
    writer = StatusWriter(fake, h.cache, SchedulerMetrics(), concurrency=4)
    writer.write_queues(queue_status(6))
    await asyncio.sleep(0)
    writer.write_queues(queue_status(0))
    api.release.set()
    await writer.drain()
    assert api.landed == [{"nvidia.com/gpu": "6"}, {}]
    writer.write_queues(queue_status(0))  # the API has it now: nothing more
    await writer.drain()
    assert len(api.landed) == 2
    # Back to the value written before while another is on the wire: the API must end with it.
    api.release.clear()
    writer.write_queues(queue_status(6))
    await asyncio.sleep(0)
    writer.write_queues(queue_status(0))
    api.release.set()
    await writer.drain()
    assert api.landed[-1] == {}


async def test_a_failed_queue_write_is_retried_without_another_session() -> None:
    h = Harness()
    h.cache.on_queue("ADDED", ("", "q"), R.queue({"metadata": {"name": "q"}, "spec": {}}), None)
    api = StatusApi(failures=2)
    fake: Any = api
    writer = StatusWriter(fake, h.cache, SchedulerMetrics(), concurrency=4, retry_seconds=0.01)
    writer.write_queues(queue_status(0))
    # No drain (a clean stop gives up on failed writes): the writer retries on its own.
    await asyncio.wait_for(asyncio.gather(*writer._tasks), timeout=60)  # a hang guard
    assert api.patches == [f"{Queue.api_path(name='q')}/status"] * 3
    assert writer._last_queue == {"q": writer._last_queue["q"]}
    assert writer._tasks == set()


async def test_a_queue_is_written_at_most_once_per_interval_with_its_newest_value() -> None:
    """A session changes a queue's counts; at 100 jobs a second that was a Queue write per
    session (1.85 per job at 25 jobs a second). Within `cluster_interval` of a write the next
    waits, and the value sent then is the newest one wanted meanwhile; none is lost."""
    h = Harness()
    h.cache.on_queue("ADDED", ("", "q"), R.queue({"metadata": {"name": "q"}, "spec": {}}), None)
    api = SlowStatusApi()
    api.release.set()
    fake: Any = api
    writer = StatusWriter(fake, h.cache, SchedulerMetrics(), concurrency=4, cluster_interval=2.0)
    writer.write_queues(queue_status(1))
    await asyncio.sleep(0.01)
    assert api.landed == [{"nvidia.com/gpu": "1"}]
    for gpus in (2, 3, 4):  # three sessions within the interval
        writer.write_queues(queue_status(gpus))
        await asyncio.sleep(0)
    assert api.landed == [{"nvidia.com/gpu": "1"}]  # waiting out the interval
    await writer.drain()  # the interval runs out: the newest value goes
    assert api.landed == [{"nvidia.com/gpu": "1"}, {"nvidia.com/gpu": "4"}]
