"""Events of one object posted in order (`EventRecorder.post_in_order`): a job's transitions
split over several Events reach the API server, and are listed by it, in the order told."""

from __future__ import annotations

import asyncio
from typing import Any

from operators.runtime.events import EventRecorder

JOB = {"kind": "VCJob", "namespace": "ns", "name": "j", "uid": "u1"}


class SlowFirstApi:
    """The API server takes an Event's POST slowly when its message says so."""

    def __init__(self) -> None:
        self.taken: list[dict[str, Any]] = []

    async def post(self, path: str, body: dict[str, Any], params: Any = None) -> dict[str, Any]:
        if "slow" in body["message"]:
            await asyncio.sleep(0.05)
        self.taken.append(body)
        return body


async def test_the_parts_of_a_flush_are_written_one_after_another() -> None:
    api = SlowFirstApi()
    recorder = EventRecorder(api, "sluice-jobs")  # type: ignore[arg-type]
    recorder.post_in_order(
        JOB, [("Normal", "JobPending", "#1 slow"), ("Normal", "JobRunning", "#2")]
    )
    recorder.post_in_order(JOB, [("Normal", "JobCompleted", "#3")])  # a later flush
    recorder.post_in_order({**JOB, "uid": "u2"}, [("Normal", "JobPending", "#1 other")])
    await recorder.drain(5)
    mine = [e["message"] for e in api.taken if e["involvedObject"]["uid"] == "u1"]
    assert mine == ["#1 slow", "#2", "#3"]
    assert api.taken[0]["message"] == "#1 other"  # another object does not wait for this one


async def test_event_names_sort_in_the_order_they_were_posted() -> None:
    """The API server lists Events by name, and `kubectl describe` keeps that order for
    Events of the same second."""
    api = SlowFirstApi()
    recorder = EventRecorder(api, "sluice-jobs")  # type: ignore[arg-type]
    recorder.post_in_order(JOB, [("Normal", "R", f"#{n}") for n in range(1, 50)])
    await recorder.drain(5)
    names = [e["metadata"]["name"] for e in api.taken]
    assert len(set(names)) == len(names)
    assert sorted(names) == names
    assert [e["message"] for e in api.taken] == [f"#{n}" for n in range(1, 50)]


async def test_a_part_posted_recently_is_left_out_and_the_rest_still_go() -> None:
    api = SlowFirstApi()
    recorder = EventRecorder(api, "sluice-jobs")  # type: ignore[arg-type]
    recorder.post(JOB, "Normal", "R", "#1")
    recorder.post_in_order(JOB, [("Normal", "R", "#1"), ("Normal", "R", "#2")])
    await recorder.drain(5)
    assert [e["message"] for e in api.taken] == ["#1", "#2"]
