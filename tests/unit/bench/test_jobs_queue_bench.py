"""Smoke run of bench.jobs_queue (the figure itself is never asserted)."""

from __future__ import annotations

from bench.jobs_queue import measure
from operators.controllers import jobs


async def test_the_queue_benchmark_starts_every_job_and_restores_the_interval() -> None:
    before = jobs.STATUS_INTERVAL
    assert await measure(50) >= 0.0
    assert before == jobs.STATUS_INTERVAL
