"""Wait until API discovery lists every resource a kopf operator serves, before kopf starts.

kopf resolves its handlers' resources once, from discovery, when it starts; afterwards it
re-resolves a group only when a CustomResourceDefinition of that group changes. An API server
that is still warming up (just restarted: its CRD handlers not yet registered) leaves our groups
out of `/apis` or answers 503 for them, so an operator started in that window logs "Unresolved
resources cannot be served" and never serves them, although the CRDs exist (nothing changes them
afterwards). The runner therefore waits, with backoff, until every selector of the registry
matches a discovered resource, and only then spawns kopf.

The matching is kopf's own (`Selector.select` over kopf `Resource`s built from discovery, as
kopf's scanner builds them), so "resolved" here means what it means to kopf.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection, Iterable
from typing import Any, Protocol

import aiohttp
import kopf
from kopf._cogs.structs.references import Insights, Resource, Selector

from operators.runtime.client import ApiError
from operators.runtime.wake import woken

log = logging.getLogger(__name__)

FIRST_DELAY_SECONDS = 0.5
MAX_DELAY_SECONDS = 15.0


class DiscoveryClient(Protocol):
    async def get(self, path: str) -> dict[str, Any]: ...


def served_selectors(registry: kopf.OperatorRegistry) -> frozenset[Selector]:
    """The selectors kopf watches for this registry (indexes, events, daemons, changes): the same
    union kopf checks for "Unresolved resources". kopf has no public accessor for it."""
    return (
        registry._indexing.get_all_selectors()
        | registry._watching.get_all_selectors()
        | registry._spawning.get_all_selectors()
        | registry._changing.get_all_selectors()
    )


def _resources(group: str, version: str, preferred: bool, listing: dict[str, Any]) -> set[Resource]:
    # Any API group can be served by an aggregated API server: entries without a name or kind
    # are skipped, not trusted to be well formed.
    entries = [
        e
        for e in listing.get("resources") or []
        if isinstance(e, dict) and isinstance(e.get("name"), str) and isinstance(e.get("kind"), str)
    ]
    return {
        Resource(
            group=group,
            version=version,
            kind=entry["kind"],
            plural=entry["name"],
            singular=entry.get("singularName") or entry["kind"].lower(),
            shortcuts=frozenset(entry.get("shortNames") or []),
            categories=frozenset(entry.get("categories") or []),
            subresources=frozenset(
                sub["name"].split("/", 1)[1]
                for sub in entries
                if sub["name"].startswith(f"{entry['name']}/")
            ),
            namespaced=bool(entry.get("namespaced")),
            preferred=preferred,
            verbs=frozenset(entry.get("verbs") or []),
        )
        for entry in entries
        if "/" not in entry["name"]
    }


async def discover(
    client: DiscoveryClient, groups: Collection[str | None]
) -> tuple[set[Resource], list[str]]:
    """Resources of `groups` ("" is the core group; None in `groups` means every group) that
    discovery lists now, and the errors of the listings that failed. A failed group-version
    (503 while the API server warms up, an aggregated API that is down) is skipped: it matters
    only if a selector needs it, and then that selector stays unresolved."""
    every = None in groups
    found: set[Resource] = set()
    errors: list[str] = []

    async def read(path: str) -> dict[str, Any]:
        try:
            return await client.get(path)
        except (TimeoutError, ApiError, aiohttp.ClientError, OSError) as err:
            errors.append(f"{path}: {err}")
            return {}

    if every or "" in groups:
        for version in (await read("/api")).get("versions") or []:
            found |= _resources("", version, True, await read(f"/api/{version}"))
    if every or set(groups) - {"", None}:
        for item in (await read("/apis")).get("groups") or []:
            if not every and item["name"] not in groups:
                continue
            preferred = (item.get("preferredVersion") or {}).get("version")
            for version in item.get("versions") or []:
                listing = await read(f"/apis/{item['name']}/{version['version']}")
                found |= _resources(
                    item["name"], version["version"], version["version"] == preferred, listing
                )
    return found, errors


def unresolved(selectors: Iterable[Selector], resources: Collection[Resource]) -> list[Selector]:
    return [selector for selector in selectors if not selector.select(resources)]


async def wait_until_discovered(
    client: DiscoveryClient,
    selectors: Collection[Selector],
    stop: asyncio.Event,
    *,
    operator: str = "",
    first_delay: float = FIRST_DELAY_SECONDS,
    max_delay: float = MAX_DELAY_SECONDS,
) -> bool:
    """True once discovery lists a resource for every selector; False if `stop` is set first.
    Retries with doubling delays up to `max_delay`, logging what is missing and why."""
    groups = {selector.group for selector in selectors}
    delay = first_delay
    attempt = 0
    while not stop.is_set():
        attempt += 1
        resources, errors = await discover(client, groups)
        missing = unresolved(selectors, resources)
        if not missing:
            if attempt > 1:
                log.info("operator %s: discovery lists every served resource now", operator)
            return True
        log.warning(
            "operator %s: waiting %.1f s before starting: %s (%s)",
            operator,
            delay,
            ", ".join(sorted(str(s) for s in missing)),
            "; ".join(errors) or "not listed by discovery",
        )
        await woken(stop, delay)
        delay = min(delay * 2, max_delay)
    return False


async def unserved(
    insights: Insights, selectors: Collection[Selector], stop: asyncio.Event, *, operator: str = ""
) -> list[Selector]:
    """What kopf, once it has resolved its resources, does not serve: a race the wait above
    cannot close (the API server restarted again between our discovery and kopf's). Returns
    that list as soon as it is known and not empty; otherwise waits for `stop` and returns []."""
    await insights.ready_resources.wait()
    missing = unresolved(selectors, insights.watched_resources)
    if missing:
        log.error(
            "operator %s: kopf started without %s; stopping, to start again",
            operator,
            ", ".join(sorted(str(s) for s in missing)),
        )
        return missing
    await stop.wait()
    return []
