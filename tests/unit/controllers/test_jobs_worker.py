"""The jobs operator's reconcile worker under overload (operators/controllers/jobs.py `run`):
at most `reconcile_concurrency` reconciles at once, and a job already on its way goes before
newer jobs. Before, every dirty job got a task queued on a semaphore, so each step of an older
job waited behind every newer job's: at 40 submissions a second (more than the operator took)
jobs completed at a fraction of the rate it sustained at 20.

The bound is a setting (`--jobs-reconcile-concurrency`, `SLUICE_JOBS_RECONCILE_CONCURRENCY`):
the tests below would fail if the flag or variable did not reach the controller, or if the worker
went on using the module's default instead of its own bound."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace
from typing import Any

import pytest

from operators.controllers import kopf_runner
from operators.controllers.jobs import (
    OPERATOR,
    RECONCILE_CONCURRENCY,
    JobsController,
    JobsSettings,
    controller_for,
)
from operators.runtime.operator_metrics import OperatorMetrics

BOUND = 5
"""Not the default: a worker that ignored its setting would start RECONCILE_CONCURRENCY."""


def vcjob(name: str, uid: str | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "batch.sluice.dev/v1alpha1",
        "kind": "VCJob",
        "metadata": {"name": name, "namespace": "ns", "uid": uid or f"u-{name}", "generation": 1},
        "spec": {"tasks": [{"name": "w", "replicas": 1, "template": {"spec": {}}}]},
    }


class Gated(JobsController):
    """Reconciles that last until the test lets each one end."""

    def __init__(self, ctx: Any, reconcile_concurrency: int) -> None:
        super().__init__(ctx, reconcile_concurrency)
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
    c = Gated(SimpleNamespace(client=None, stop=stop, metrics=OperatorMetrics("")), BOUND)
    worker = asyncio.create_task(c.run())
    c.on_job("ADDED", vcjob("old"))
    await c.until(lambda: c.started == ["old"])
    for i in range(40):
        c.on_job("ADDED", vcjob(f"new-{i:02d}"))
    await c.until(lambda: len(c.started) == BOUND)
    await asyncio.sleep(0.05)
    assert len(c.running) == BOUND  # not one task per dirty job
    assert c.started[1:] == [f"new-{i:02d}" for i in range(BOUND - 1)]
    c.mark(("VCJob", "ns", "old"))  # its pod moved: the job has its next step to take
    c.gates["old"].set()
    await c.until(lambda: len(c.started) == BOUND + 1)  # the slot went on
    # Its STATUS_INTERVAL runs out while every slot is taken: it waits, first in line.
    await asyncio.sleep(c.not_before[("VCJob", "ns", "old")] - time.monotonic() + 0.1)
    assert c.started.count("old") == 1
    c.gates["new-00"].set()  # a slot frees: the old job's step takes it, not the next new one
    await c.until(lambda: len(c.started) == BOUND + 2)
    assert c.started[-1] == "old"
    stop.set()
    for gate in c.gates.values():
        gate.set()
    c.wake.set()
    await asyncio.wait_for(worker, 5)
    await c.stop()


def test_the_bound_is_a_flag_and_a_variable_of_the_jobs_operator(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("SLUICE_JOBS_RECONCILE_CONCURRENCY", raising=False)
    parsed = kopf_runner.parse(OPERATOR, [])
    assert isinstance(parsed, JobsSettings)
    assert parsed.reconcile_concurrency == RECONCILE_CONCURRENCY
    # Under `all` every operator sees every flag: the others' flags must not stop the parse.
    flags = ["--jobs-reconcile-concurrency=48", "--events-concurrency=8"]
    assert kopf_runner.parse(OPERATOR, flags).reconcile_concurrency == 48  # type: ignore[attr-defined]
    monkeypatch.setenv("SLUICE_JOBS_RECONCILE_CONCURRENCY", "32")
    assert kopf_runner.parse(OPERATOR, []).reconcile_concurrency == 32  # type: ignore[attr-defined]
    assert kopf_runner.parse(OPERATOR, flags).reconcile_concurrency == 48  # type: ignore[attr-defined]


def test_the_controller_the_operator_runs_takes_its_bound_from_the_settings() -> None:
    ctx: Any = SimpleNamespace(client=None, settings=JobsSettings(reconcile_concurrency=BOUND))
    assert controller_for(ctx).reconcile_concurrency == BOUND
    ctx.settings = kopf_runner.KopfSettings()
    assert controller_for(ctx).reconcile_concurrency == RECONCILE_CONCURRENCY
