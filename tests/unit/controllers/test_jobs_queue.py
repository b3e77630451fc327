"""The jobs operator's ready queue (heaps with one live entry per waiting job): a job re-created
under its name gets in line as the new job it is, a job marked on every run keeps one entry, no
dirty job is left without an entry, and nothing is kept of a job deleted while it ran."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from operators.controllers import jobs as J
from operators.controllers.jobs import JobsController
from operators.runtime.operator_metrics import OperatorMetrics

from .test_jobs_worker import vcjob


def key(name: str) -> tuple[str, str, str]:
    return ("VCJob", "ns", name)


class Recorded(JobsController):
    """Reconciles that record their job and wait for `gate` (when the job is `blocker`)."""

    def __init__(self, slots: int) -> None:
        ctx: Any = SimpleNamespace(client=None, stop=asyncio.Event(), metrics=OperatorMetrics(""))
        super().__init__(ctx, slots)
        self.started: list[str] = []
        self.gate = asyncio.Event()

    async def reconcile(self, key: tuple[str, str, str]) -> None:
        self.started.append(key[2])
        if key[2] == "blocker":
            await self.gate.wait()

    def without_entry(self) -> set[tuple[str, str, str]]:
        return {k for k in self.dirty - self.running if k not in self._entry}

    async def finish(self, worker: asyncio.Task[None]) -> None:
        self.ctx.stop.set()
        self.wake.set()
        await asyncio.wait_for(worker, 5)


@pytest.mark.parametrize("deleted_first", [True, False])
async def test_a_job_created_again_under_its_name_waits_behind_the_older_ones(
    deleted_first: bool,
) -> None:
    """Its old entry (the first `x`'s arrival) no longer counts: the new `x` is the newest."""
    c = Recorded(1)
    worker = asyncio.create_task(c.run())
    c.on_job("ADDED", vcjob("blocker"))
    await asyncio.sleep(0.02)
    c.on_job("ADDED", vcjob("x"))
    for i in range(3):
        c.on_job("ADDED", vcjob(f"n{i}"))
    if deleted_first:
        c.on_job("DELETED", vcjob("x"))
    c.on_job("ADDED", vcjob("x", uid="u-x2"))
    c.gate.set()
    for _ in range(100):
        if len(c.started) == 5:
            break
        await asyncio.sleep(0.01)
    await c.finish(worker)
    assert c.started == ["blocker", "n0", "n1", "n2", "x"]


async def test_a_job_marked_on_every_run_keeps_one_entry(monkeypatch: pytest.MonkeyPatch) -> None:
    """Marked while it runs and every slot busy: each run used to leave a copy of its entry."""
    monkeypatch.setattr(J, "STATUS_INTERVAL", 0.002)
    c = Recorded(2)

    async def reconcile(k: tuple[str, str, str]) -> None:
        c.started.append(k[2])
        for _ in range(20):
            c.mark(key("hot"))
            await asyncio.sleep(0)
        await asyncio.sleep(0.001)

    c.reconcile = reconcile  # type: ignore[method-assign,assignment]
    worker = asyncio.create_task(c.run())
    for name in ("hot", *(f"o{i}" for i in range(20))):
        c.on_job("ADDED", vcjob(name))
    most = 0
    for i in range(400):
        c.mark(key(f"o{i % 20}"))
        await asyncio.sleep(0.001)
        most = max(most, len(c._queue) + len(c._later))
        assert not c.without_entry()
    await c.finish(worker)
    assert c.started.count("hot") > 3
    assert most <= 21 + 2  # one live entry per job, and the few a replacement supersedes


async def test_nothing_is_kept_of_a_job_deleted_while_it_ran() -> None:
    c = Recorded(2)
    worker = asyncio.create_task(c.run())
    c.on_job("ADDED", vcjob("blocker"))
    await asyncio.sleep(0.02)
    c.on_job("DELETED", vcjob("blocker"))
    c.gate.set()
    await asyncio.sleep(0.02)
    await c.finish(worker)
    assert key("blocker") not in c.not_before
    assert key("blocker") not in c._entry
