"""A job's status write racing its deletion and a new job of the same name: the write lands on
the job it was made for or nowhere, and what the operator keeps of the successor stays."""

from __future__ import annotations

import asyncio
import copy
from typing import Any, cast

import pytest

from operators.controllers.jobs_apply import Applier, job_path
from operators.runtime.client import ApiError, KubeClient

from .test_jobs_lifecycle import KEY, Api, Operator, vcjob

JOB = job_path("VCJob", "ns", "j")
STATUS = JOB + "/status"


class SlowStatusApi(Api):
    """A status write is held twice: before the API server applies it (`apply`) and before its
    answer reaches the operator (`answer`); the test changes the world in between."""

    def __init__(self) -> None:
        super().__init__()
        self.asked = asyncio.Event()
        self.apply = asyncio.Event()
        self.answer = asyncio.Event()
        self.holding = False

    async def _held(self, path: str, write: Any) -> dict[str, Any]:
        if path != STATUS or not self.holding:
            return cast(dict[str, Any], await write())
        self.asked.set()
        await self.apply.wait()
        try:
            result = await write()
        except ApiError:
            await self.answer.wait()
            raise
        await self.answer.wait()
        return cast(dict[str, Any], result)

    async def merge_patch(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return await self._held(path, lambda: super(SlowStatusApi, self).merge_patch(path, body))

    async def json_patch(self, path: str, ops: list[dict[str, Any]]) -> dict[str, Any]:
        return await self._held(path, lambda: super(SlowStatusApi, self).json_patch(path, ops))


def successor() -> dict[str, Any]:
    body = vcjob(1, replicas=1)
    body["metadata"]["uid"] = "u2"
    return body


async def running(api: SlowStatusApi) -> Operator:
    """A one-pod job whose pods just turned Running: its next step writes a new status."""
    op = Operator(api)
    op.job(vcjob(1, replicas=1))
    await op.step()
    op.group("Inqueue")
    await op.step()
    op.pods_seen()
    op.pods_move("Running")
    op.group("Running")
    api.holding = True
    return op


async def test_a_late_status_write_of_a_deleted_job_does_not_land_on_its_successor() -> None:
    api = SlowStatusApi()
    op = await running(api)
    step = asyncio.create_task(op.step())
    await asyncio.wait_for(api.asked.wait(), 5)
    old = api.objects.pop(JOB)
    op.c.on_job("DELETED", old)
    op.job(successor())  # created again under the name before the old write reaches the server
    api.apply.set()
    api.answer.set()
    await step
    assert "status" not in api.objects[JOB]  # the successor has none of u1's status
    assert op.c.jobs[KEY].uid == "u2"
    api.holding = False
    await op.step()  # the successor's own first status, whole (it had none)
    assert api.objects[JOB]["status"]["observedGeneration"] == 1


async def test_a_status_404_answered_after_the_successor_came_keeps_the_successor() -> None:
    api = SlowStatusApi()
    op = await running(api)
    step = asyncio.create_task(op.step())
    await asyncio.wait_for(api.asked.wait(), 5)
    old = api.objects.pop(JOB)
    op.c.on_job("DELETED", old)
    api.apply.set()  # the write finds no job: 404, answered late
    await asyncio.sleep(0.01)
    op.job(successor())
    api.answer.set()
    await step
    assert op.c.jobs[KEY].uid == "u2"
    assert KEY in op.c.dirty  # and its first step is still to come


async def test_the_deleted_event_of_an_old_job_leaves_its_successor() -> None:
    api = Api()
    op = Operator(api)
    old = vcjob(1, replicas=1)
    op.job(old)
    op.job(successor())  # the new job's event first (the old one's DELETED came late)
    op.c.on_job("DELETED", old)
    assert op.c.jobs[KEY].uid == "u2"


# -- the request (Applier.write_status) ----------------------------------------------------------


def with_status(uid: str, status: dict[str, Any] | None) -> dict[str, Any]:
    body = copy.deepcopy(vcjob(1))
    body["metadata"]["uid"] = uid
    if status is not None:
        body["status"] = status
    return body


async def test_the_write_tests_the_uid_first_and_replaces_only_its_own_fields() -> None:
    api = Api()
    api.objects[JOB] = with_status("u1", {"phase": "Pending", "transitionsDelivered": 4})
    sent: list[list[dict[str, Any]]] = []
    real = api.json_patch

    async def spy(path: str, ops: list[dict[str, Any]]) -> dict[str, Any]:
        sent.append(ops)
        return await real(path, ops)

    api.json_patch = spy  # type: ignore[method-assign]
    applier = Applier(cast(KubeClient, api), 1)
    assert await applier.write_status("VCJob", "ns", "j", "u1", {"phase": "Running", "a/b": 1})
    assert sent == [
        [
            {"op": "test", "path": "/metadata/uid", "value": "u1"},
            {"op": "add", "path": "/status/phase", "value": "Running"},
            {"op": "add", "path": "/status/a~1b", "value": 1},
        ]
    ]
    # The events operator's field stays.
    assert api.objects[JOB]["status"] == {"phase": "Running", "transitionsDelivered": 4, "a/b": 1}


async def test_a_refused_write_is_told_apart_by_one_read() -> None:
    applier_api = Api()
    applier = Applier(cast(KubeClient, applier_api), 1)
    write = applier.write_status

    applier_api.objects[JOB] = with_status("u2", None)  # another job of the name
    assert not await write("VCJob", "ns", "j", "u1", {"phase": "Running"})
    assert "status" not in applier_api.objects[JOB]

    applier_api.objects.pop(JOB)  # gone
    assert not await write("VCJob", "ns", "j", "u1", {"phase": "Running"})

    # Ours, but its status was removed (someone's patch): written whole instead.
    applier_api.objects[JOB] = with_status("u1", None)
    assert await write("VCJob", "ns", "j", "u1", {"phase": "Running"})
    assert applier_api.objects[JOB]["status"] == {"phase": "Running"}

    # Ours, refused for what it says: the error is the caller's to see.
    async def invalid(path: str, ops: list[dict[str, Any]]) -> dict[str, Any]:
        raise ApiError(422, {"reason": "Invalid"}, "PATCH", path)

    applier_api.json_patch = invalid  # type: ignore[method-assign]
    with pytest.raises(ApiError):
        await write("VCJob", "ns", "j", "u1", {"phase": "Running"})


async def test_a_job_seen_without_a_status_gets_it_whole_then_field_by_field() -> None:
    api = Api()
    op = Operator(api)
    op.job(vcjob(1, replicas=1))  # as created: no status
    await op.step()
    assert api.objects[JOB]["status"]["phase"] == "Pending"
    assert [verb for verb, path in api.take_calls() if path == STATUS] == ["PATCH"]  # one write
    assert op.c.jobs[KEY].status_seen


async def test_a_whole_write_never_replaces_a_status_another_writer_gave_the_job_meanwhile() -> (
    None
):
    """The job had no status when the operator saw it; by the time its first write lands, the
    events operator has written its delivery fields (or an earlier try of the same write went
    through without an answer). `add /status` would replace that status: the whole write is
    made only where there is none, else the fields go in one by one."""
    api = Api()
    op = Operator(api)
    op.job(vcjob(1, replicas=1))  # as created: no status
    theirs = {"transitionsDelivered": 3, "delivery": [{"sink": "s", "lastDeliveredSequence": 3}]}
    api.objects[JOB]["status"] = copy.deepcopy(theirs)  # not watched yet
    await op.step()
    status = api.objects[JOB]["status"]
    assert status["phase"] == "Pending"
    assert {k: status[k] for k in theirs} == theirs
