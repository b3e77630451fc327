"""A job's transition Events and status writes racing shutdown and a job replaced under its name."""

from __future__ import annotations

import asyncio
from typing import Any

from operators.controllers.jobs_apply import job_path
from operators.jobs.coalesced_events import SEPARATOR
from operators.runtime.operator_metrics import OperatorMetrics

from .test_jobs_lifecycle import KEY, Api, Operator, vcjob

STATUS = job_path("VCJob", "ns", "j") + "/status"


class GatedApi(Api):
    """Status writes and Event posts can be held until the test lets them go."""

    def __init__(self) -> None:
        super().__init__()
        self.status_gate: asyncio.Event | None = None
        self.status_waiting = asyncio.Event()
        self.event_gate: asyncio.Event | None = None

    async def json_patch(self, path: str, ops: list[dict[str, Any]]) -> dict[str, Any]:
        if path == STATUS and self.status_gate is not None:
            self.status_waiting.set()
            await self.status_gate.wait()
        return await super().json_patch(path, ops)

    async def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        if path.endswith("/events") and self.event_gate is not None:
            await self.event_gate.wait()
        return await super().post(path, body)


def told(api: Api, uid: str = "u1") -> list[int]:
    """The transition numbers told in the Events of the job with this uid, in order."""
    lines = [
        m
        for e in api.events
        if e["involvedObject"]["uid"] == uid
        for m in e["message"].split(SEPARATOR)
        if m.startswith("#")
    ]
    return [int(m.split(" ", 1)[0].lstrip("#")) for m in lines]


def last_seq(api: Api) -> int:
    return int(api.patched[STATUS]["status"]["transitionSeq"])


async def running_job(api: GatedApi) -> Operator:
    """A one-pod job with its first transition told (so the next ones are held) and its pods
    moved to Running: its next step has transitions to tell."""
    op = Operator(api)
    op.c.ctx.stop = asyncio.Event()
    op.c.ctx.metrics = OperatorMetrics("")
    op.job(vcjob(1, replicas=1))
    await op.step()
    op.group("Inqueue")
    await op.step()
    op.pods_seen()
    op.pods_move("Running")
    op.group("Running")
    return op


async def test_stop_tells_the_transitions_of_a_reconcile_still_running() -> None:
    api = GatedApi()
    op = await running_job(api)
    assert KEY in op.c.flush_due  # Inqueue held
    api.status_gate = asyncio.Event()
    op.c.running.add(KEY)
    task = asyncio.create_task(op.c._run_one(KEY), name="reconcile-j")
    op.c._tasks.add(task)
    await asyncio.wait_for(api.status_waiting.wait(), 5)  # the step is writing status
    api.event_gate = asyncio.Event()  # the API server is slow to take Events
    stopping = asyncio.create_task(op.c.stop())
    await asyncio.sleep(0.05)
    api.status_gate.set()  # the in-flight step ends (its status with Running lands)
    await asyncio.sleep(0.05)
    api.event_gate.set()
    await stopping
    await op.c.events.drain(5)
    assert last_seq(api) >= 3
    assert told(api) == list(range(1, last_seq(api) + 1)), (told(api), last_seq(api))


async def test_a_replaced_jobs_told_lines_are_not_flushed_from_its_successor() -> None:
    api = GatedApi()
    op = await running_job(api)
    api.status_gate = asyncio.Event()
    step = asyncio.create_task(op.step())
    await asyncio.wait_for(api.status_waiting.wait(), 5)
    successor = vcjob(1, replicas=1)
    successor["metadata"]["uid"] = "u2"
    op.job(successor)  # deleted and created again: u1's held lines are told now
    api.status_gate.set()
    await step
    seq = last_seq(api)
    assert seq >= 3
    await op.c.events.drain(5)
    assert told(api) == list(range(1, seq + 1)), (told(api), seq)
