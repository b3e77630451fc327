"""The Grafana dashboard and docs/metrics.md name only metrics the operators export."""

from __future__ import annotations

import json
import re

from operators.install.kustomize import MANIFESTS, REPO
from operators.runtime.metrics import EventsMetrics, SchedulerMetrics
from operators.runtime.operator_metrics import OperatorMetrics

DASHBOARD = MANIFESTS / "monitoring" / "grafana-dashboard.json"
SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}


def exported() -> dict[str, str]:
    """Every series name the operators can expose -> its metric family."""
    names: dict[str, str] = {}
    families = [
        *SchedulerMetrics().registry.collect(),
        *EventsMetrics().registry.collect(),
        *OperatorMetrics("pool").registry.collect(),
    ]
    for family in families:
        for suffix in SUFFIXES[family.type]:
            names[family.name + suffix] = family.name
    return names


def queries() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    variables = dashboard["templating"]["list"]
    exprs.extend(v["query"]["query"] for v in variables if v["type"] == "query")
    return exprs


def test_every_dashboard_query_names_an_exported_metric() -> None:
    names = exported()
    assert len(queries()) >= 10
    for expr in queries():
        used = re.findall(r"\bsluice_[a-z_]+\b", expr)
        assert used, f"no Sluice metric in {expr!r}"
        for name in used:
            assert name in names, f"{name} in {expr!r} is not exported"


# What platform teams watch (issue 24): a panel titled with each concern, whose queries use
# what answers it.
CONCERNS: dict[str, tuple[str, ...]] = {
    "gpu allocation": ('sluice_pool_resources{kind="used",resource="nvidia.com/gpu"}',),
    "deserved vs allocated": ('kind="deserved"', 'kind="allocated"', "sluice_queue_resources"),
    "pending": ("sluice_pending_pods", 'sluice_queue_podgroups{queue=~"$queue",phase="pending"}'),
    "sharing": ('sluice_pool_resources{kind="shared"',),
    "scheduling latency": ("sluice_pod_scheduling_duration_seconds_bucket",),
    "preemption": ("sluice_preemptions_total",),
    "event delivery:": (
        "sluice_events_delivered_total",
        "sluice_events_failed_total",
        "sluice_events_retried_total",
    ),
    "outbox": ("sluice_events_outbox_depth",),
    "event delivery latency": ("sluice_event_delivery_latency_seconds_bucket",),
    "queue position": ("sluice_podgroup_queue_position",),
}


def test_the_dashboard_covers_what_platform_teams_watch() -> None:
    panels = json.loads(DASHBOARD.read_text())["panels"]
    for topic, needed in CONCERNS.items():
        exprs = [
            " ".join(t["expr"] for t in p["targets"]) for p in panels if topic in p["title"].lower()
        ]
        assert exprs, f"no panel on {topic}"
        assert any(all(n in e for n in needed) for e in exprs), f"{topic} panels miss {needed}"


def test_docs_list_every_exported_metric_and_nothing_else() -> None:
    doc = (REPO / "docs" / "metrics.md").read_text()
    documented = set(re.findall(r"`(sluice_[a-z_]+)`", doc))
    series = exported()
    for family in set(series.values()):
        names = {family} | {name for name, f in series.items() if f == family}
        assert names & documented, f"{family} is exported but not in docs/metrics.md"
    assert documented <= set(series) | set(series.values()), documented - set(series)
