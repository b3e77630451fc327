"""How the events operator takes in job watch events (operators/controllers/events.py on_job)."""

from __future__ import annotations

from typing import Any

from operators.controllers.events import EventsController, EventsSettings
from operators.runtime.metrics import EventsMetrics

KEY = ("VCJob", "ns", "train")


def body(seq: int, generation: int = 1, delivered: int = 0) -> dict[str, Any]:
    entries = [
        {"seq": n, "level": "Job", "name": "train", "to": "Running"} for n in range(1, seq + 1)
    ]
    status: dict[str, Any] = {"transitions": entries, "transitionSeq": seq}
    if delivered:
        status["delivery"] = [{"sink": "s", "lastDeliveredSequence": delivered}]
    meta = {"name": "train", "namespace": "ns", "uid": "u1", "generation": generation}
    return {"metadata": meta, "spec": {}, "status": status}


def controller() -> EventsController:
    return EventsController(None, EventsSettings(), EventsMetrics())  # type: ignore[arg-type]


async def test_an_echo_of_a_cursor_write_is_not_parsed_again_but_new_transitions_are() -> None:
    c = controller()
    c.on_job("VCJob", "ADDED", body(3))
    first = c.jobs[KEY]
    first.cursors["s"] = 3  # delivered meanwhile; the write's echo below carries an older cursor
    c.on_job("VCJob", "MODIFIED", body(3, delivered=2))
    assert c.jobs[KEY] is first
    assert first.cursors["s"] == 3
    c.on_job("VCJob", "MODIFIED", body(4, delivered=3))
    assert c.jobs[KEY].log_seq == 4
    assert [e.seq for e in c.jobs[KEY].entries] == [1, 2, 3, 4]
    assert c.jobs[KEY].cursors["s"] == 3


async def test_a_spec_change_is_read_even_without_new_transitions() -> None:
    c = controller()
    c.on_job("VCJob", "ADDED", body(2))
    first = c.jobs[KEY]
    c.on_job("VCJob", "MODIFIED", body(2, generation=2))
    assert c.jobs[KEY] is not first
    assert c.jobs[KEY].generation == 2
    c.on_job("VCJob", "DELETED", body(2, generation=2))
    assert KEY not in c.jobs
