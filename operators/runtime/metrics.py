"""Prometheus metrics of the scheduler, in their own registry (no process-global side effects)."""

from __future__ import annotations

from collections.abc import Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from operators.runtime.operator_metrics import LATENCY_BUCKETS
from operators.scheduler.session import PoolStatus, QueueStatus
from operators.scheduler.snapshot import CPU, GPU, GPU_MILLI_PER_CARD

GPU_MILLI = GPU + "-milli"

# Queue positions exported per queue: enough to follow one's job to the front of a long line.
MAX_QUEUE_POSITIONS = 500


class SchedulerMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self._series: dict[Gauge, set[tuple[str, ...]]] = {}  # replace(): what each gauge holds
        self.attempts = Counter(
            "sluice_scheduling_attempts_total",
            "Scheduling attempts of pod groups, by result (scheduled, unschedulable, error).",
            ["result"],
            registry=r,
        )
        self.e2e_latency = Histogram(
            "sluice_pod_scheduling_duration_seconds",
            "From a pod's creation (as the cache first saw it) to its confirmed binding.",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.action_duration = Histogram(
            "sluice_session_action_duration_seconds",
            "Time spent in each action of a session.",
            ["action"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.cycle_duration = Histogram(
            "sluice_cycle_duration_seconds",
            "One scheduling cycle: snapshot, session, applying decisions (binds run on after).",
            ["phase"],
            buckets=LATENCY_BUCKETS,
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
            "Jobs chosen as preemption/reclaim victims or moved by consolidation, by kind "
            "(immediate, delayed, consolidation).",
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
        self.queue_resources = Gauge(
            "sluice_queue_resources",
            "Per queue and resource (cores, bytes, GPUs, ...): the fair share the scheduler "
            "computed (kind=deserved) and what its running jobs hold (kind=allocated).",
            ["queue", "kind", "resource"],
            registry=r,
        )
        self.queue_podgroups = Gauge(
            "sluice_queue_podgroups",
            "Pod groups per queue and phase (pending, inqueue, running).",
            ["queue", "phase"],
            registry=r,
        )
        self.pool_resources = Gauge(
            "sluice_pool_resources",
            "Per pool and resource: capacity, allocatable, used, shared (the part of used taken "
            "by other pools' borrowed tasks) and pending (requests of its waiting pods).",
            ["pool", "kind", "resource"],
            registry=r,
        )
        self.pool_nodes = Gauge("sluice_pool_nodes", "Nodes in each pool.", ["pool"], registry=r)
        self.queue_position = Gauge(
            "sluice_podgroup_queue_position",
            "Place in its queue's line of a pod group still waiting (Pending or Inqueue): 1 is "
            "the next the scheduler tries; only the first positions of each queue are exported.",
            ["namespace", "podgroup", "queue"],
            registry=r,
        )

    def observe_quota(
        self, queues: Mapping[str, QueueStatus], pools: Mapping[str, PoolStatus]
    ) -> None:
        """The session's queue and pool figures, replacing the previous session's (so queues
        and pools that are gone disappear from the metrics too)."""
        resources: dict[tuple[str, ...], float] = {}
        podgroups: dict[tuple[str, ...], float] = {}
        positions: dict[tuple[str, ...], float] = {}
        for name, q in queues.items():
            for kind, values in (("deserved", q.deserved), ("allocated", q.allocated)):
                for resource, amount in base_units(values).items():
                    resources[name, kind, resource] = amount
            for phase, count in (
                ("pending", q.pending),
                ("inqueue", q.inqueue),
                ("running", q.running),
            ):
                podgroups[name, phase] = count
            # A series per waiting group: capped so a backlog of thousands stays cheap to scrape.
            for position, (namespace, group) in enumerate(q.waiting[:MAX_QUEUE_POSITIONS], 1):
                positions[namespace, group, name] = position
        nodes: dict[tuple[str, ...], float] = {}
        pool_resources: dict[tuple[str, ...], float] = {}
        for name, p in pools.items():
            nodes[(name,)] = p.nodes
            for kind, values in (
                ("capacity", p.capacity),
                ("allocatable", p.allocatable),
                ("used", p.used),
                ("shared", p.shared),
                ("pending", p.pending),
            ):
                for resource, amount in base_units(values).items():
                    pool_resources[name, kind, resource] = amount
        self.replace(self.queue_resources, resources)
        self.replace(self.queue_podgroups, podgroups)
        self.replace(self.queue_position, positions)
        self.replace(self.pool_nodes, nodes)
        self.replace(self.pool_resources, pool_resources)

    def replace(self, gauge: Gauge, values: Mapping[tuple[str, ...], float]) -> None:
        """Make `values` (label values in the gauge's label order -> value) the gauge's only
        series. Series that stay are set, not made again: clearing the gauge and adding every
        series back built up to 500 queue-position series per session, 9 % of the event loop
        while pods arrived at 200/s."""
        before = self._series.get(gauge, set())
        for labels in before - values.keys():
            gauge.remove(*labels)
        for labels, value in values.items():
            gauge.labels(*labels).set(value)
        self._series[gauge] = set(values)


def base_units(values: Mapping[str, int]) -> dict[str, float]:
    """Scheduler units to Prometheus base units: CPU millicores to cores, GPUs as exact
    (fractional) cards from the milli figure when there is one."""
    out: dict[str, float] = {}
    for name, amount in values.items():
        if name == GPU_MILLI:
            continue
        if name == CPU:
            out[name] = amount / 1000
        elif name == GPU and GPU_MILLI in values:
            out[name] = values[GPU_MILLI] / GPU_MILLI_PER_CARD
        else:
            out[name] = float(amount)
    return out


class EventsMetrics:
    """Metrics of the events operator (CloudEvents delivery to EventSinks), by sink."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.delivered = Counter(
            "sluice_events_delivered_total",
            "Events a sink acknowledged (2xx).",
            ["sink"],
            registry=r,
        )
        self.failed = Counter(
            "sluice_events_failed_total",
            "Events given up on: refused for good (4xx) or out of retry attempts.",
            ["sink"],
            registry=r,
        )
        self.retried = Counter(
            "sluice_events_retried_total",
            "Delivery attempts that failed and will be tried again after a backoff.",
            ["sink"],
            registry=r,
        )
        self.outbox = Gauge(
            "sluice_events_outbox_depth",
            "Transitions waiting for delivery to a sink (in the jobs' status, not in memory).",
            ["sink"],
            registry=r,
        )
        self.attempt_duration = Histogram(
            "sluice_event_delivery_duration_seconds",
            "One HTTP delivery attempt, request to answer.",
            ["sink"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.lag = Histogram(
            "sluice_event_delivery_latency_seconds",
            "From a transition's time (as the jobs operator recorded it) to its acknowledgement.",
            ["sink"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.status_writes = Counter(
            "sluice_events_status_writes_total",
            "Coalesced status patches, by kind (job cursors, sink statistics, PodGroup/Queue event logs).",
            ["kind"],
            registry=r,
        )
