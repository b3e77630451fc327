"""Queue usage for time-based fair share: accrued by the scheduler, written to status.usage at
most every N seconds and only on change, read back after a restart, and never taken for news
when its own write comes back through the watch."""

from __future__ import annotations

from typing import Any

from operators.runtime import records as R
from operators.runtime.usage import UsageBook
from operators.scheduler.resources import GPU_MILLI_KEY
from operators.scheduler.snapshot import GPU
from operators.scheduler.usage import UsageParams

from .test_cache import Harness

HOUR = 3600.0
T0 = 1_800_000_000.0  # some time in 2027, on a whole day


def queue(name: str, usage: dict[str, Any] | None = None, k: float | None = None) -> Any:
    spec: dict[str, Any] = {} if k is None else {"timeBasedFairShare": {"kValue": k}}
    return R.queue(
        {"metadata": {"name": name}, "spec": spec, "status": {"usage": usage} if usage else {}}
    )


def book(write_seconds: float = 60.0) -> UsageBook:
    return UsageBook(UsageParams(half_life=24 * HOUR, window=7 * 24 * HOUR), write_seconds)


def test_usage_survives_a_restart() -> None:
    first = book()
    queues = {"a": queue("a"), "b": queue("b")}
    first.advance(T0, queues)
    first.hold({"a": {GPU: 8}, "b": {GPU: 2}})
    usage = first.advance(T0 + HOUR, queues)
    assert usage == {"a": 8 * HOUR, "b": 2 * HOUR}
    bodies = first.due(T0 + HOUR)
    assert set(bodies) == {"a", "b"}
    assert bodies["a"]["gpuSeconds"] == 8 * HOUR
    # The scheduler restarts: the new process reads what the old one wrote.
    second = book()
    reread = {name: queue(name, bodies[name]) for name in ("a", "b")}
    assert second.advance(T0 + HOUR, reread) == usage
    second.hold({"a": {}, "b": {GPU: 4}})
    assert second.advance(T0 + 2 * HOUR, reread) == {"a": 8 * HOUR, "b": 6 * HOUR}


def test_writes_are_coalesced_and_only_on_change() -> None:
    b = book(write_seconds=60.0)
    queues = {"a": queue("a"), "idle": queue("idle")}
    b.advance(T0, queues)
    b.hold({"a": {GPU: 1}, "idle": {}})
    b.advance(T0 + 10, queues)
    first = b.due(T0 + 10)
    assert set(first) == {"a"}  # idle has nothing new to say
    for name, body in first.items():
        b.written(name, body)
    b.advance(T0 + 20, queues)
    assert b.due(T0 + 20) == {}  # within the interval: sessions come and go, no write
    b.advance(T0 + 80, queues)
    assert set(b.due(T0 + 80)) == {"a"}
    assert not book(write_seconds=0.0).due(T0)  # accounting off


def test_a_write_the_api_did_not_take_is_sent_again() -> None:
    b = book(write_seconds=60.0)
    queues = {"a": queue("a")}
    b.advance(T0, queues)
    b.hold({"a": {GPU_MILLI_KEY: 500}})
    b.advance(T0 + 10, queues)
    assert set(b.due(T0 + 10)) == {"a"}  # never confirmed as written ...
    b.advance(T0 + 71, queues)
    assert set(b.due(T0 + 71)) == {"a"}  # ... so it goes out again at the next chance


def test_the_echo_of_our_usage_write_starts_no_session() -> None:
    h = Harness()
    before = queue("a", k=1.0)
    h.cache.on_queue("ADDED", ("", "a"), before, None)
    h.changes.clear()
    after = queue(
        "a",
        {"buckets": [{"start": R.rfc3339(T0), "gpuSeconds": 3600.0}], "gpuSeconds": 3600.0},
        k=1.0,
    )
    assert after.usage_buckets == ((T0, 3600.0),)
    h.cache.on_queue("MODIFIED", ("", "a"), after, before)
    assert "schedule" not in h.changes
    h.cache.on_queue("MODIFIED", ("", "a"), queue("a", k=2.0), after)  # a spec change does
    assert "schedule" in h.changes


def test_the_snapshot_carries_each_queues_decayed_usage() -> None:
    h = Harness()
    h.cache.on_queue("ADDED", ("", "a"), queue("a"), None)
    snap = h.cache.snapshot(T0, queue_usage={"a": 42.0})
    assert [q.usage for q in snap.queues] == [42.0]
