"""The load's submitter (bench/soak.py `submit_at`) under backpressure: every scheduled
submission is sent, none silently dropped; how far behind the schedule they started and the
rate the API server accepted are reported."""

from __future__ import annotations

import threading
import time
from typing import Any

from bench.soak import follow, submit_at, writes_by_resource


def test_an_api_server_slower_than_the_rate_delays_submissions_and_drops_none() -> None:
    server = threading.Semaphore(2)  # takes two at a time, 20 ms each: 100 a second

    def create(i: int) -> bool:
        with server:
            time.sleep(0.02)
        return i % 10 != 9  # every tenth refused

    sent = submit_at(create, rate=1000.0, seconds=0.1)
    report = sent.report()
    assert (sent.accepted, sent.refused, len(sent.behind)) == (90, 10, 100)
    assert report["behind_schedule_seconds_max"] >= 0.5  # 100 at 100/s, scheduled within 0.1 s
    assert report["accepted_per_second"] < 200
    assert sent.seconds >= 0.9


class Keeping:
    """Virtual time for `submit_at`: a sleep moves the clock only once every submission so far
    has started, as an API server that keeps up would let it (no wall clock, so a loaded
    machine cannot make this test fail)."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps = 0
        self.started = 0
        self.changed = threading.Condition()

    def clock(self) -> float:
        return self.now

    def create(self, _: int) -> bool:
        with self.changed:
            self.started += 1
            self.changed.notify_all()
        return True

    def sleep(self, seconds: float) -> None:
        with self.changed:
            self.changed.wait_for(lambda: self.started >= self.sleeps)
            self.sleeps += 1
            self.now += seconds


def test_an_api_server_that_keeps_up_leaves_nothing_behind() -> None:
    api = Keeping()
    sent = submit_at(api.create, rate=100.0, seconds=0.2, clock=api.clock, sleep=api.sleep)
    assert sent.accepted == 20
    assert max(sent.behind) == 0.0
    assert sent.report()["behind_schedule_seconds_p50"] == 0.0


def test_writes_are_counted_by_resource_from_the_api_servers_metrics() -> None:
    metrics = """
apiserver_request_total{code="201",resource="events",verb="POST"} 7
apiserver_request_total{code="409",resource="events",verb="POST"} 1
apiserver_request_total{code="200",resource="vcjobs",subresource="status",verb="PATCH"} 3
apiserver_request_total{code="200",resource="vcjobs",verb="LIST"} 50
"""
    assert writes_by_resource(metrics) == {"events": 8.0, "vcjobs/status": 3.0}


def test_a_closed_watch_resumes_where_it_was_and_replays_only_after_a_410() -> None:
    """A watch the API server closes (too slow a reader) resumes from the last resourceVersion:
    replaying every job on each close was most of the API server's VCJob watch traffic."""
    stop = threading.Event()
    opened: list[str] = []
    streams = [
        [{"type": "ADDED", "object": {"metadata": {"name": "a", "resourceVersion": "5"}}}],
        [{"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "9"}}}],
        [{"type": "ERROR", "object": {"code": 410}}],
        [{"type": "MODIFIED", "object": {"metadata": {"name": "a", "resourceVersion": "12"}}}],
    ]

    def watch_from(rv: str) -> list[dict[str, Any]]:
        opened.append(rv)
        if len(opened) == len(streams):
            stop.set()
        return streams[len(opened) - 1]

    seen: list[str] = []
    follow(stop, watch_from, lambda obj, _: seen.append(obj["metadata"]["resourceVersion"]))
    assert opened == ["", "5", "9", ""]
    assert seen == ["5", "12"]  # bookmarks and errors are not objects
