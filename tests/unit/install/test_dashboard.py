"""The Grafana dashboard and docs/metrics.md name only metrics the operators export."""

from __future__ import annotations

import json
import re

from operators.install.kustomize import MANIFESTS, REPO
from operators.runtime.metrics import EventsMetrics, SchedulerMetrics

DASHBOARD = MANIFESTS / "monitoring" / "grafana-dashboard.json"
SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}


def exported() -> dict[str, str]:
    """Every series name the operators can expose -> its metric family."""
    names: dict[str, str] = {}
    families = [*SchedulerMetrics().registry.collect(), *EventsMetrics().registry.collect()]
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


def test_the_dashboard_covers_what_platform_teams_watch() -> None:
    titles = " ".join(p["title"].lower() for p in json.loads(DASHBOARD.read_text())["panels"])
    for topic in ("gpu allocation", "deserved", "pending", "sharing", "latency", "preemption"):
        assert topic in titles, topic


def test_docs_list_every_exported_metric_and_nothing_else() -> None:
    doc = (REPO / "docs" / "metrics.md").read_text()
    documented = set(re.findall(r"`(sluice_[a-z_]+)`", doc))
    series = exported()
    for family in set(series.values()):
        names = {family} | {name for name, f in series.items() if f == family}
        assert names & documented, f"{family} is exported but not in docs/metrics.md"
    assert documented <= set(series) | set(series.values()), documented - set(series)
