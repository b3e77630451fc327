"""Evictions through the Eviction API (policy/v1), so PodDisruptionBudgets are respected."""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import logging
from collections.abc import Sequence

import aiohttp

from operators.runtime.client import ApiError, KubeClient

log = logging.getLogger(__name__)


class EvictOutcome(enum.Enum):
    EVICTED = "evicted"
    GONE = "gone"
    """The pod no longer exists: the goal is met."""
    BLOCKED = "blocked"
    """A PodDisruptionBudget refused (429); retry on a later cycle."""
    FAILED = "failed"


@dataclasses.dataclass(frozen=True)
class PodRef:
    namespace: str
    name: str
    uid: str = ""


class Evictor:
    def __init__(self, client: KubeClient, semaphore: asyncio.Semaphore) -> None:
        self.client = client
        self._sem = semaphore

    async def evict(self, pod: PodRef, grace_seconds: int | None = None) -> EvictOutcome:
        body: dict[str, object] = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": pod.name, "namespace": pod.namespace},
        }
        options: dict[str, object] = {}
        if grace_seconds is not None:
            options["gracePeriodSeconds"] = grace_seconds
        if pod.uid:
            # Never evict a same-named successor of the pod we decided about.
            options["preconditions"] = {"uid": pod.uid}
        if options:
            body["deleteOptions"] = options
        path = f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}/eviction"
        async with self._sem:
            try:
                await self.client.post(path, body)
            except ApiError as err:
                if err.not_found or err.conflict:
                    return EvictOutcome.GONE
                if err.status == 429:
                    return EvictOutcome.BLOCKED
                log.warning("evicting %s/%s failed: %s", pod.namespace, pod.name, err)
                return EvictOutcome.FAILED
            except (TimeoutError, aiohttp.ClientError, OSError) as err:
                # Disconnects and timeouts are not ApiErrors; the next cycle decides again.
                log.warning(
                    "evicting %s/%s failed: %s", pod.namespace, pod.name, type(err).__name__
                )
                return EvictOutcome.FAILED
        return EvictOutcome.EVICTED

    async def evict_all(
        self, pods: Sequence[PodRef], grace_seconds: int | None = None
    ) -> list[EvictOutcome]:
        """Evict a whole job's pods at once; outcomes in the order given."""
        return list(await asyncio.gather(*(self.evict(p, grace_seconds) for p in pods)))
