"""Waiting for API discovery before kopf starts (operators/controllers/kopf_discovery.py), against
a fake of the client's `get` that answers like an API server warming up."""

from __future__ import annotations

import asyncio
import logging
from typing import Any, cast

import kopf
import pytest
from kopf._cogs.structs.references import Insights

from operators.controllers.kopf_discovery import (
    discover,
    served_selectors,
    unserved,
    wait_until_discovered,
)
from operators.runtime.client import ApiError

CORE = {
    "/api": {"versions": ["v1"]},
    "/api/v1": {
        "resources": [
            {"name": "pods", "singularName": "pod", "namespaced": True, "kind": "Pod"},
            {"name": "pods/status", "singularName": "", "namespaced": True, "kind": "Pod"},
            {"name": "nodes", "singularName": "node", "namespaced": False, "kind": "Node"},
        ]
    },
}
SINKS_GROUP = {
    "name": "events.sluice.dev",
    "versions": [{"groupVersion": "events.sluice.dev/v1alpha1", "version": "v1alpha1"}],
    "preferredVersion": {"groupVersion": "events.sluice.dev/v1alpha1", "version": "v1alpha1"},
}
METRICS_GROUP = {
    "name": "metrics.k8s.io",
    "versions": [{"groupVersion": "metrics.k8s.io/v1beta1", "version": "v1beta1"}],
    "preferredVersion": {"groupVersion": "metrics.k8s.io/v1beta1", "version": "v1beta1"},
}
SINKS = {
    "resources": [
        {
            "name": "eventsinks",
            "singularName": "eventsink",
            "namespaced": False,
            "kind": "EventSink",
            "verbs": ["get", "list", "watch", "patch"],
        }
    ]
}
UNAVAILABLE = ApiError(503, {"reason": "ServiceUnavailable", "message": "warming up"})

WARMING_UP = CORE | {"/apis": {"groups": []}}
GROUP_NOT_READY = CORE | {
    "/apis": {"groups": [SINKS_GROUP]},
    "/apis/events.sluice.dev/v1alpha1": UNAVAILABLE,
}
READY = CORE | {"/apis": {"groups": [SINKS_GROUP]}, "/apis/events.sluice.dev/v1alpha1": SINKS}


class Discovery:
    """The API server's discovery answers, one map of path -> answer per round of reads (a round
    starts at `/api`); the last map stays."""

    def __init__(self, *rounds: dict[str, Any]) -> None:
        self.rounds = list(rounds)
        self.round = -1

    async def get(self, path: str) -> dict[str, Any]:
        if path == "/api":
            self.round += 1
        answer = self.rounds[min(self.round, len(self.rounds) - 1)].get(path)
        if answer is None:
            raise ApiError(404, {"reason": "NotFound"}, "GET", path)
        if isinstance(answer, Exception):
            raise answer
        return dict(answer)


def registry() -> kopf.OperatorRegistry:
    reg = kopf.OperatorRegistry()

    async def handler(**_: Any) -> None:
        return None

    kopf.on.event("pods", registry=reg)(handler)
    kopf.index("nodes", registry=reg)(handler)
    kopf.on.event("events.sluice.dev", "v1alpha1", "eventsinks", registry=reg)(handler)
    return reg


def test_served_selectors_are_every_watched_and_indexed_resource() -> None:
    names = {(s.group, s.plural or s.any_name) for s in served_selectors(registry())}
    assert names == {(None, "pods"), (None, "nodes"), ("events.sluice.dev", "eventsinks")}


async def test_waits_through_a_warming_up_api_server_until_every_resource_is_listed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    api = Discovery(WARMING_UP, GROUP_NOT_READY, READY)
    with caplog.at_level(logging.WARNING):
        ok = await wait_until_discovered(
            api, served_selectors(registry()), asyncio.Event(), operator="events", first_delay=0
        )
    assert ok
    assert api.round == 2  # started only on the third look, when the group was served
    waits = [r.getMessage() for r in caplog.records if "before starting" in r.getMessage()]
    assert len(waits) == 2
    assert "eventsinks" in waits[0]
    assert "pods" not in waits[0]
    assert "not listed by discovery" in waits[0]
    assert "503" in waits[1]
    assert "/apis/events.sluice.dev/v1alpha1" in waits[1]


async def test_a_broken_api_group_nobody_serves_does_not_hold_the_start() -> None:
    # "pods" has no group, so every group is read; a down aggregated API must not matter.
    api = Discovery(
        READY
        | {
            "/apis": {"groups": [METRICS_GROUP, SINKS_GROUP]},
            "/apis/metrics.k8s.io/v1beta1": UNAVAILABLE,
        }
    )
    assert await wait_until_discovered(api, served_selectors(registry()), asyncio.Event())
    assert api.round == 0


async def test_backoff_doubles_up_to_its_cap(caplog: pytest.LogCaptureFixture) -> None:
    api = Discovery(WARMING_UP, WARMING_UP, WARMING_UP, WARMING_UP, READY)
    with caplog.at_level(logging.WARNING):
        await wait_until_discovered(
            api, served_selectors(registry()), asyncio.Event(), first_delay=0.001, max_delay=0.004
        )
    waits = [
        cast(tuple[Any, ...], r.args)[1]
        for r in caplog.records
        if "before starting" in r.getMessage()
    ]
    assert waits == [0.001, 0.002, 0.004, 0.004]


async def test_a_stop_while_waiting_ends_the_wait_without_starting() -> None:
    stop = asyncio.Event()
    waiting = asyncio.create_task(
        wait_until_discovered(Discovery(WARMING_UP), served_selectors(registry()), stop)
    )
    await asyncio.sleep(0.05)
    stop.set()
    assert await asyncio.wait_for(waiting, 2) is False


async def test_kopf_resolving_without_a_served_resource_is_reported_at_once() -> None:
    selectors = served_selectors(registry())
    resources, _ = await discover(Discovery(GROUP_NOT_READY), {None})
    insights = Insights(watched_resources=resources)
    insights.ready_resources.set()
    missing = await asyncio.wait_for(unserved(insights, selectors, asyncio.Event()), 2)
    assert [s.plural or s.any_name for s in missing] == ["eventsinks"]


async def test_kopf_serving_everything_is_left_alone_until_stop() -> None:
    selectors = served_selectors(registry())
    resources, _ = await discover(Discovery(READY), {None})
    insights, stop = Insights(), asyncio.Event()
    check = asyncio.create_task(unserved(insights, selectors, stop))
    await asyncio.sleep(0.01)
    insights.watched_resources.update(resources)
    insights.ready_resources.set()
    await asyncio.sleep(0.05)
    assert not check.done()
    stop.set()
    assert await asyncio.wait_for(check, 2) == []


async def test_malformed_discovery_entries_are_skipped() -> None:
    garbage = {"resources": [{"name": "broken"}, "text", {"kind": "NoName"}, *SINKS["resources"]]}
    api = Discovery(READY | {"/apis/events.sluice.dev/v1alpha1": garbage})
    assert await wait_until_discovered(api, served_selectors(registry()), asyncio.Event())
