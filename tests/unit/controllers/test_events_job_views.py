"""How the events operator takes in job watch events (operators/controllers/events.py on_job)."""

from __future__ import annotations

from typing import Any

from operators.controllers.events import EventsController, EventsSettings
from operators.controllers.jobs_apply import job_path
from operators.runtime.metrics import EventsMetrics

from .test_jobs_lifecycle import Api

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


async def test_a_cursor_write_of_a_deleted_job_does_not_land_on_its_successor() -> None:
    """The view's uid is a precondition of its status write (`status_patch`): a flush that comes
    after the job was deleted and created again under its name writes nothing onto the new one."""
    api = Api()
    c = EventsController(api, EventsSettings(), EventsMetrics())  # type: ignore[arg-type]
    c.on_job("VCJob", "ADDED", body(3))
    c.jobs[KEY].cursors["s"] = 3
    successor = {"metadata": {"name": "train", "namespace": "ns", "uid": "u2"}, "spec": {}}
    api.objects[job_path(*KEY)] = successor
    await c._write_job(KEY)
    assert "status" not in api.objects[job_path(*KEY)]
    api.objects[job_path(*KEY)] = body(3)  # its own job: written
    await c._write_job(KEY)
    assert api.objects[job_path(*KEY)]["status"]["delivery"] == [
        {"sink": "s", "lastDeliveredSequence": 3}
    ]
