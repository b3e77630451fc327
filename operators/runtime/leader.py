"""Leader election on a coordination.k8s.io/v1 Lease, as client-go's leaderelection does it.

The holder renews every `retry_period`; a candidate takes the lease once `renewTime +
leaseDurationSeconds` has passed (judged by its own clock from when it last saw the record change,
so clock skew between machines does not matter). Writes use the Lease's resourceVersion, so two
candidates can never both win. A holder that cannot renew within `renew_deadline` loses.

Each renewal runs under a timeout of the time left until the renew deadline, so a leader stalled
on the API server notices at the deadline rather than after its request timeouts. `valid()` tells
writers whether they may still act: only within `renew_deadline` of the *start* of the last
successful renewal. A standby takes over `lease_duration` after it saw that renewal, which is
later, so a leader that writes only while `valid()` never overlaps with its successor (as long as
`renew_deadline < lease_duration`, with the difference as margin for writes already on the wire).
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import logging
import time
from typing import Any

from operators.runtime.client import ApiError, KubeClient

log = logging.getLogger(__name__)


def _now_micro() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclasses.dataclass(frozen=True)
class LeaseConfig:
    name: str
    namespace: str
    identity: str
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0


class LeaderElector:
    def __init__(self, client: KubeClient, config: LeaseConfig) -> None:
        self.client = client
        self.cfg = config
        self.is_leader = False
        self.transitions = 0
        # leaseTransitions of the lease as this process last wrote it: the term it leads in.
        self.term: int | None = None
        self._observed_record: tuple[Any, ...] | None = None
        self._observed_at = 0.0
        self._last_renew = 0.0

    @property
    def renewed_at(self) -> float:
        """time.monotonic() at the start of the last successful acquire or renewal."""
        return self._last_renew

    def valid(self, now: float | None = None) -> bool:
        """Whether this process may still act as the leader (issue Bindings, evictions, writes):
        it holds the lease and its last successful renewal began less than renew_deadline ago."""
        if not self.is_leader:
            return False
        t = time.monotonic() if now is None else now
        return t - self._last_renew < self.cfg.renew_deadline

    @property
    def _path(self) -> str:
        ns, name = self.cfg.namespace, self.cfg.name
        return f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/{name}"

    def _spec(self, acquire_time: str | None, transitions: int) -> dict[str, Any]:
        now = _now_micro()
        return {
            "holderIdentity": self.cfg.identity,
            "leaseDurationSeconds": max(1, round(self.cfg.lease_duration)),
            "acquireTime": acquire_time or now,
            "renewTime": now,
            "leaseTransitions": transitions,
        }

    async def try_acquire_or_renew(self) -> bool:
        try:
            lease = await self.client.get(self._path)
        except ApiError as err:
            if not err.not_found:
                raise
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self.cfg.name, "namespace": self.cfg.namespace},
                "spec": self._spec(None, 0),
            }
            try:
                await self.client.post(
                    f"/apis/coordination.k8s.io/v1/namespaces/{self.cfg.namespace}/leases", body
                )
            except ApiError as create_err:
                if create_err.conflict:
                    return False
                raise
            self.term = 0
            return True

        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        record = (holder, spec.get("renewTime"), spec.get("leaseDurationSeconds"))
        now = time.monotonic()
        if record != self._observed_record:
            self._observed_record = record
            self._observed_at = now
        duration = float(spec.get("leaseDurationSeconds") or self.cfg.lease_duration)
        expired = now >= self._observed_at + duration
        mine = holder == self.cfg.identity
        if holder and not mine and not expired:
            return False
        transitions = int(spec.get("leaseTransitions") or 0)
        acquire_time = spec.get("acquireTime") if mine else None
        if not mine:
            transitions += 1
        lease["spec"] = self._spec(acquire_time, transitions)
        try:
            updated = await self.client.put(self._path, lease)
        except ApiError as err:
            if err.conflict:
                return False
            raise
        new_spec = updated.get("spec") or {}
        self.term = transitions
        self._observed_record = (
            new_spec.get("holderIdentity"),
            new_spec.get("renewTime"),
            new_spec.get("leaseDurationSeconds"),
        )
        self._observed_at = now
        return True

    async def acquire(self) -> None:
        """Return once this process holds the lease."""
        announced = False
        while True:
            started = time.monotonic()
            try:
                if await self.try_acquire_or_renew():
                    self.is_leader = True
                    self._last_renew = started
                    self.transitions += 1
                    log.info(
                        "acquired lease %s/%s as %s",
                        self.cfg.namespace,
                        self.cfg.name,
                        self.cfg.identity,
                    )
                    return
            except Exception as err:  # noqa: BLE001 - any failure here just means "retry"
                log.warning("lease acquire attempt failed: %s", err)
            if not announced:
                log.info("waiting for lease %s/%s", self.cfg.namespace, self.cfg.name)
                announced = True
            await asyncio.sleep(self.cfg.retry_period)

    async def hold(self) -> None:
        """Renew until renewal fails for longer than renew_deadline; then return (leadership lost).

        Every attempt (a GET and a PUT) is cut off at the renew deadline, so a stalled API server
        cannot keep this process believing it leads after a standby may have taken over."""
        while True:
            deadline = self._last_renew + self.cfg.renew_deadline
            await asyncio.sleep(max(0.0, min(self.cfg.retry_period, deadline - time.monotonic())))
            started = time.monotonic()
            left = deadline - started
            if left <= 0:
                log.error(
                    "could not renew lease %s within %.1fs", self.cfg.name, self.cfg.renew_deadline
                )
                self.is_leader = False
                return
            try:
                # asyncio.timeout, not wait_for: on 3.11 wait_for swallows a cancel that lands
                # as the renewal answers, and this loop would renew after its release.
                async with asyncio.timeout(left):
                    renewed = await self.try_acquire_or_renew()
            except TimeoutError:
                log.warning("lease renewal got no answer within %.1fs", left)
                continue
            except Exception as err:  # noqa: BLE001 - a failed renewal is retried until the deadline
                log.warning("lease renewal failed: %s", err)
                continue
            if renewed:
                self._last_renew = started
                continue
            log.error("lease %s taken by another holder", self.cfg.name)
            self.is_leader = False
            return

    async def release(self) -> None:
        """On a clean shutdown, hand the lease over at once instead of making a standby wait."""
        if not self.is_leader:
            return
        self.is_leader = False
        try:
            lease = await self.client.get(self._path)
            spec = lease.get("spec") or {}
            if spec.get("holderIdentity") != self.cfg.identity:
                return
            spec["holderIdentity"] = ""
            spec["leaseDurationSeconds"] = 1
            spec["renewTime"] = _now_micro()
            lease["spec"] = spec
            await self.client.put(self._path, lease)
        except Exception as err:  # noqa: BLE001 - best effort; the lease expires anyway
            log.info("could not release lease: %s", err)
