"""A status a step decided but the API has not confirmed is what a stop or an invalid spec
writes, never an older one: a held status overtaken by a newer step, a write whose answer was
lost, a step that failed after acting; and nothing lands on a deleted or replaced job."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from operators.runtime.client import ApiError
from operators.runtime.operator_metrics import OperatorMetrics

from .test_jobs_lifecycle import KEY, Api, vcjob
from .test_jobs_status_hold import STATUS, held_operator, status_writes, to_running


class LostAnswer(Api):
    """The API server applies a status write, but its answer is lost (a timeout, a reset
    connection): the client raises although the write landed."""

    def __init__(self) -> None:
        super().__init__()
        self.lose = False

    async def json_patch(self, path: str, ops: list[dict[str, Any]]) -> dict[str, Any]:
        answer = await super().json_patch(path, ops)
        if self.lose and path == STATUS:
            self.lose = False
            raise TimeoutError("answer lost")
        return answer


def api_phase(api: Api) -> str:
    return str(api.objects[STATUS.removesuffix("/status")]["status"]["phase"])


async def completed_but_answer_lost(api: LostAnswer) -> Any:
    op = held_operator(api)
    op.c.ctx.stop = asyncio.Event()
    op.c.ctx.metrics = OperatorMetrics("")
    await to_running(op)
    assert op.c.jobs[KEY].unwritten is not None  # Running, held
    op.pods_move("Succeeded")
    api.lose = True
    with pytest.raises(TimeoutError):  # _run_one logs it and retries in RETRY_AFTER_ERROR
        await op.step()
    assert api_phase(api) == "Completed"  # the write landed
    return op


async def test_stop_does_not_write_an_older_held_status_over_a_newer_one() -> None:
    """Completed was decided and written (its answer lost); the Running held before it was
    kept, and stop wrote it back: the job went Completed -> Running in the API
    and its log loses the Completed transition."""
    api = LostAnswer()
    op = await completed_but_answer_lost(api)
    await op.c.stop()
    assert api_phase(api) == "Completed"


async def test_invalid_spec_does_not_write_an_older_held_status_over_a_newer_one() -> None:
    """As above, with the spec turning invalid before the retry: InvalidSpec writes the old
    held Running over Completed."""
    api = LostAnswer()
    op = await completed_but_answer_lost(api)
    invalid = vcjob(2, replicas=-1)
    invalid["status"] = api.objects[STATUS.removesuffix("/status")]["status"]
    op.job(invalid)
    await op.step()
    assert api_phase(api) == "Completed"


async def test_a_job_deleted_while_held_is_not_written_at_stop() -> None:
    api = Api()
    op = held_operator(api)
    op.c.ctx.stop = asyncio.Event()
    op.c.ctx.metrics = OperatorMetrics("")
    await to_running(op)
    body = api.objects.pop(STATUS.removesuffix("/status"))
    op.c.on_job("DELETED", body)
    api.take_calls()
    await op.c.stop()
    assert status_writes(api) == 0


async def test_a_job_replaced_while_held_gets_no_status_of_its_predecessor() -> None:
    api = Api()
    op = held_operator(api)
    op.c.ctx.stop = asyncio.Event()
    op.c.ctx.metrics = OperatorMetrics("")
    await to_running(op)
    new = vcjob(1, replicas=1)
    new["metadata"]["uid"] = "u2"
    op.job(new)
    api.take_calls()
    await op.c.stop()
    assert status_writes(api) == 0
    assert "status" not in api.objects[STATUS.removesuffix("/status")]


class GroupRefuses(Api):
    """The group's readmission (a restart's) is refused once with a 500."""

    def __init__(self) -> None:
        super().__init__()
        self.refuse = False

    async def merge_patch(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        if self.refuse and "podgroups" in path and path.endswith("/status"):
            self.refuse = False
            raise ApiError(500, {"reason": "InternalError"}, "PATCH", path)
        return await super().merge_patch(path, body)


async def test_stop_after_a_step_that_raised_past_its_decision_writes_no_status_older_than_it() -> (
    None
):
    """A restart was decided (pods deleted, `state.memory` = Restarting v1) and the step raised
    at the group's readmission, before its status write; stop comes before the retry. Before
    49557be stop ran a step from that memory and wrote Restarting; now it writes the Running
    held earlier, older than what the operator already acted on (the pods are deleted)."""
    api = GroupRefuses()
    op = held_operator(api)
    op.c.ctx.stop = asyncio.Event()
    op.c.ctx.metrics = OperatorMetrics("")
    op.job(vcjob(1, replicas=1, policies=[{"event": "PodFailed", "action": "RestartJob"}]))
    await op.step()
    op.group("Inqueue")
    await op.step()
    op.pods_seen()
    op.pods_move("Running")
    op.group("Running")
    await op.step()
    assert op.c.jobs[KEY].unwritten is not None
    assert status_writes(api) == 0
    op.pods_move("Failed")
    api.refuse = True
    with pytest.raises(ApiError):
        await op.step()
    assert op.phase() == "Restarting"
    assert not api.pods()  # decided and acted on
    await op.c.stop()
    status = api.objects[STATUS.removesuffix("/status")].get("status") or {}
    assert status.get("phase") != "Running"
