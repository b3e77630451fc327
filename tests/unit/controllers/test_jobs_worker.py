"""The jobs operator's reconcile worker under overload (operators/controllers/jobs.py `run`):
at most RECONCILE_CONCURRENCY reconciles at once, and a job already on its way goes before
newer jobs. Before, every dirty job got a task queued on a semaphore, so each step of an older
job waited behind every newer job's: at 40 submissions a second (more than the operator took)
jobs completed at a fraction of the rate it sustained at 20."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from operators.controllers.jobs import RECONCILE_CONCURRENCY, JobsController
from operators.runtime.operator_metrics import OperatorMetrics


def vcjob(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "batch.sluice.dev/v1alpha1",
        "kind": "VCJob",
        "metadata": {"name": name, "namespace": "ns", "uid": f"u-{name}", "generation": 1},
        "spec": {"tasks": [{"name": "w", "replicas": 1, "template": {"spec": {}}}]},
    }


class Gated(JobsController):
    """Reconciles that last until the test lets each one end."""

    def __init__(self, ctx: Any) -> None:
        super().__init__(ctx)
        self.started: list[str] = []
        self.gates: dict[str, asyncio.Event] = {}
        self.moved = asyncio.Event()

    async def reconcile(self, key: tuple[str, str, str]) -> None:
        self.started.append(key[2])
        self.moved.set()
        gate = self.gates.setdefault(key[2], asyncio.Event())
        await gate.wait()
        gate.clear()

    async def until(self, what: Any) -> None:
        while not what():
            self.moved.clear()
            await asyncio.wait_for(self.moved.wait(), 5)


async def test_an_older_job_goes_before_newer_ones_and_no_more_run_than_allowed() -> None:
    stop = asyncio.Event()
    c = Gated(SimpleNamespace(client=None, stop=stop, metrics=OperatorMetrics("")))
    worker = asyncio.create_task(c.run())
    c.on_job("ADDED", vcjob("old"))
    await c.until(lambda: c.started == ["old"])
    for i in range(40):
        c.on_job("ADDED", vcjob(f"new-{i:02d}"))
    await c.until(lambda: len(c.started) == RECONCILE_CONCURRENCY)
    await asyncio.sleep(0.05)
    assert len(c.running) == RECONCILE_CONCURRENCY  # not one task per dirty job
    assert c.started[1:] == [f"new-{i:02d}" for i in range(RECONCILE_CONCURRENCY - 1)]
    c.mark(("VCJob", "ns", "old"))  # its pod moved: the job has its next step to take
    c.gates["old"].set()
    await c.until(lambda: len(c.started) == RECONCILE_CONCURRENCY + 1)  # the slot went on
    c.not_before.pop(("VCJob", "ns", "old"))  # its STATUS_INTERVAL is over
    c.gates["new-00"].set()  # a slot frees: the old job's step takes it, not new-16
    await c.until(lambda: len(c.started) == RECONCILE_CONCURRENCY + 2)
    assert c.started[-1] == "old"
    stop.set()
    for gate in c.gates.values():
        gate.set()
    c.wake.set()
    await asyncio.wait_for(worker, 5)
    await c.stop()
