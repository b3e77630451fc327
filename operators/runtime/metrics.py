"""Prometheus metrics of the scheduler, in their own registry (no process-global side effects)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

_LATENCY_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)


class SchedulerMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.attempts = Counter(
            "sluice_scheduling_attempts_total",
            "Scheduling attempts of pod groups, by result (scheduled, unschedulable, error).",
            ["result"],
            registry=r,
        )
        self.e2e_latency = Histogram(
            "sluice_pod_scheduling_duration_seconds",
            "From a pod's creation (as the cache first saw it) to its confirmed binding.",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.action_duration = Histogram(
            "sluice_session_action_duration_seconds",
            "Time spent in each action of a session.",
            ["action"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.cycle_duration = Histogram(
            "sluice_cycle_duration_seconds",
            "One scheduling cycle: snapshot, session, applying decisions (binds run on after).",
            ["phase"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.pods_bound = Counter(
            "sluice_pods_bound_total",
            "Pods bound (rate() of this is pods bound per second).",
            registry=r,
        )
        self.bind_failures = Counter(
            "sluice_bind_failures_total",
            "Binding POSTs that failed, by reason.",
            ["reason"],
            registry=r,
        )
        self.gang_rollbacks = Counter(
            "sluice_gang_rollbacks_total",
            "Gangs whose bound members were evicted because other members failed to bind.",
            registry=r,
        )
        self.pending_pods = Gauge(
            "sluice_pending_pods",
            "Pods waiting for a node, by queue.",
            ["queue"],
            registry=r,
        )
        self.preemptions = Counter(
            "sluice_preemptions_total",
            "Jobs chosen as preemption/reclaim victims, by kind (immediate, delayed).",
            ["kind"],
            registry=r,
        )
        self.apply_failures = Counter(
            "sluice_apply_failures_total",
            "Decisions that raised while being applied and were skipped (the rest of the cycle "
            "still applies), by decision kind (bind, evict, nominate, markwillevict, ...).",
            ["decision"],
            registry=r,
        )
        self.evictions = Counter(
            "sluice_evictions_total",
            "Eviction API calls, by outcome (evicted, gone, blocked, failed).",
            ["outcome"],
            registry=r,
        )
        self.status_writes = Counter(
            "sluice_podgroup_status_writes_total",
            "PodGroup status patches written (unchanged statuses are not written).",
            registry=r,
        )
        self.cache_objects = Gauge(
            "sluice_cache_objects",
            "Objects held in the watch cache, by kind.",
            ["kind"],
            registry=r,
        )
        self.assumed_pods = Gauge(
            "sluice_assumed_pods",
            "Pods assumed bound whose binding the watch has not confirmed yet.",
            registry=r,
        )
        self.relists = Counter(
            "sluice_watch_relists_total",
            "Full re-lists of a kind (start-up and 410 Gone).",
            ["kind"],
            registry=r,
        )
        self.triggers = Counter(
            "sluice_cycle_triggers_total",
            "Watch events that asked for a scheduling session, by cause (node, pod-new, "
            "pod-changed, pod-gone, podgroup, ...); own-write counts echoes of the scheduler's "
            "own writes, which ask for none.",
            ["cause"],
            registry=r,
        )
        self.is_leader = Gauge(
            "sluice_leader", "1 while this process holds the scheduler lease.", registry=r
        )
