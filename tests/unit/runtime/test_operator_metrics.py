"""Metrics of the kopf operators (OperatorMetrics; Coalescer and write accounting feed them)."""

from __future__ import annotations

import asyncio

from prometheus_client import generate_latest

from operators.controllers.coalesce import Coalescer
from operators.controllers.writes import failures
from operators.runtime.client import ApiError
from operators.runtime.operator_metrics import OperatorMetrics


def value(metrics: OperatorMetrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, {"operator": metrics.operator, **labels})


async def test_reconcile_passes_are_counted_by_result_and_timed() -> None:
    metrics = OperatorMetrics("pool")
    stop = asyncio.Event()
    calls = 0

    async def reconcile() -> float | None:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("boom")
        stop.set()
        return None

    coalescer = Coalescer("pool", reconcile, interval=0.0, retry=0.0, metrics=metrics)
    coalescer.poke()
    await asyncio.wait_for(coalescer.run(stop), 10)
    assert value(metrics, "sluice_operator_reconcile_total", result="error") == 1
    assert value(metrics, "sluice_operator_reconcile_total", result="success") == 1
    assert value(metrics, "sluice_operator_reconcile_time_seconds_count") == 2


def test_writes_count_success_and_errors_but_not_objects_gone() -> None:
    metrics = OperatorMetrics("queue")
    gone = ApiError(404, "not found")
    failed = failures([{}, {}, gone, OSError("reset")], "queue", metrics)
    assert len(failed) == 1
    assert value(metrics, "sluice_operator_writes_total", result="success") == 3
    assert value(metrics, "sluice_operator_writes_total", result="error") == 1


def test_object_counts_replace_the_previous_ones() -> None:
    metrics = OperatorMetrics("podgroup")
    metrics.count_objects("podgroup", {"Running": 2, "Pending": 1})
    metrics.count_objects("podgroup", {"Completed": 3})
    text = generate_latest(metrics.registry).decode()
    assert 'state="Completed"} 3.0' in text
    assert 'state="Running"' not in text
    assert 'state="Pending"' not in text
