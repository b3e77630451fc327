"""Prometheus metrics of the kopf operators (jobs, pool, queue, podgroup).

Kept apart from `metrics` (the scheduler's and the events operator's), which imports the scheduler
core: these operators start without loading it.
"""

from __future__ import annotations

from collections.abc import Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

LATENCY_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)


class OperatorMetrics:
    """Metrics of one kopf operator (pool, queue, podgroup, jobs), in controller-runtime's shape
    (`controller_runtime_reconcile_total` and friends), labelled by operator."""

    def __init__(self, operator: str, registry: CollectorRegistry | None = None) -> None:
        self.operator = operator
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.reconciles = Counter(
            "sluice_operator_reconcile_total",
            "Reconcile passes, by result (success, error: the pass raised).",
            ["operator", "result"],
            registry=r,
        )
        self.reconcile_time = Histogram(
            "sluice_operator_reconcile_time_seconds",
            "Time of one reconcile pass, its API writes included.",
            ["operator"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.writes = Counter(
            "sluice_operator_writes_total",
            "API writes (status patches, node labels), by result (success, error).",
            ["operator", "result"],
            registry=r,
        )
        self.objects = Gauge(
            "sluice_operator_objects",
            "Objects the operator looks after, by kind and state (pool: nodes by pool; queue: "
            "queues by state and validity; podgroup: pod groups by phase; jobs: jobs by phase).",
            ["operator", "kind", "state"],
            registry=r,
        )
        self._states: dict[str, set[str]] = {}

    def reconciled(self, seconds: float, ok: bool) -> None:
        self.reconciles.labels(self.operator, "success" if ok else "error").inc()
        self.reconcile_time.labels(self.operator).observe(seconds)

    def wrote(self, succeeded: int, failed: int) -> None:
        if succeeded:
            self.writes.labels(self.operator, "success").inc(succeeded)
        if failed:
            self.writes.labels(self.operator, "error").inc(failed)

    def count_objects(self, kind: str, by_state: Mapping[str, int]) -> None:
        """Replace the counts of `kind` (states no longer present disappear)."""
        for state in self._states.get(kind, set()) - set(by_state):
            self.objects.remove(self.operator, kind, state)
        for state, count in by_state.items():
            self.objects.labels(self.operator, kind, state).set(count)
        self._states[kind] = set(by_state)
