"""Carry out a session's decisions: evictions first, then gang bindings, then nominations.

Bindings are assumed in the cache before their POSTs are issued, so the next cycle already sees
the room as taken; the binder's answers confirm (on success) or forget (on failure) each pod.
Nothing here waits for the API: writes run as tasks, bounded by the shared semaphore, so the
next cycle can start while the previous cycle's bindings are still in flight.

Every write is guarded by `may_write` (the leader elector's `valid()`): checked when a cycle's
decisions are applied and again when each gang's Binding POSTs, each eviction batch and each
nomination is about to be issued, so a leader whose lease renewal stalled stops writing before a
standby can take over. `cancel()` drops every write not yet issued when leadership is lost.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable, Collection, Coroutine, KeysView, Sequence
from typing import Any

from operators.api import labels as L
from operators.runtime import records as R
from operators.runtime.binder import NO_ROOM, BindBackoff, Binder, BindRequest, GangOutcome
from operators.runtime.cache import SchedulerCache
from operators.runtime.client import ApiError, KubeClient
from operators.runtime.events import EventRecorder, RecentKeys
from operators.runtime.evictor import Evictor, EvictOutcome, PodRef
from operators.runtime.metrics import SchedulerMetrics
from operators.scheduler import decisions as D

log = logging.getLogger(__name__)
_LEFT = (EvictOutcome.EVICTED, EvictOutcome.GONE)
"""Eviction outcomes after which the pod is leaving or gone."""

PODGROUP_API_VERSION = "scheduling.sluice.dev/v1alpha1"
# A victim not re-decided for this long (or evicted) counts again when chosen the next time.
VICTIM_MEMORY_SECONDS = 300.0


def _kind(decision: object) -> str:
    """Metric label of a decision: its class name in lower case (bind, evict, nominate, ...)."""
    return type(decision).__name__.lower()


def _group_of(decision: object) -> str:
    for attr in ("group", "victim", "preemptor"):
        value = getattr(decision, attr, None)
        if isinstance(value, str) and value:
            return value
    return "?"


class DecisionApplier:
    def __init__(
        self,
        client: KubeClient,
        cache: SchedulerCache,
        binder: Binder,
        evictor: Evictor,
        events: EventRecorder,
        metrics: SchedulerMetrics,
        *,
        write_semaphore: asyncio.Semaphore | None = None,
        may_write: Callable[[], bool] | None = None,
        bound_by: Callable[[], str] | None = None,
    ) -> None:
        self.client = client
        self.cache = cache
        self.binder = binder
        self.evictor = evictor
        self.events = events
        self.metrics = metrics
        self._tasks: set[asyncio.Task[Any]] = set()
        self._evicting: set[str] = set()  # pod uids with an eviction in flight
        # Gangs with bindings in flight, per group uid (an elastic group's growth may be in
        # flight beside its minimum when both were handed out early).
        self._binding: Counter[str] = Counter()
        # Nominations share the bind/evict bound (settings.bind_concurrency) on connections.
        self._write_sem = write_semaphore or asyncio.Semaphore(64)
        self.may_write: Callable[[], bool] = may_write or (lambda: True)
        # Stamped on each Binding (L.BOUND_BY): the API then records which leader term bound it.
        self.bound_by: Callable[[], str] = bound_by or (lambda: "")
        # Victim groups counted in sluice_preemptions_total: a victim re-decided every cycle (an
        # eviction a PodDisruptionBudget keeps refusing) is counted once, when first chosen.
        self._victims = RecentKeys(VICTIM_MEMORY_SECONDS)
        # Groups whose Bindings the API keeps rejecting wait out a growing backoff.
        self.backoff = BindBackoff()
        # Awaited before a victim group's pods are evicted (its status.lastEviction is written
        # first: `StatusWriter.stamp_eviction`).
        self.before_evict: Callable[[str], Awaitable[None]] | None = None

    @property
    def binding_groups(self) -> KeysView[str]:
        """Group uids with bindings in flight."""
        return self._binding.keys()

    def _done_binding(self, group_uid: str) -> None:
        self._binding[group_uid] -= 1
        if self._binding[group_uid] <= 0:
            del self._binding[group_uid]

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    @property
    def in_flight(self) -> int:
        return len(self._tasks)

    async def drain(self) -> None:
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    def cancel(self) -> int:
        """Cancel every write task (leadership lost: nothing more may reach the API)."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        return len(tasks)

    def involved(self, group_uid: str) -> dict[str, Any]:
        rec = self.cache.group_record(group_uid)
        if rec is not None:
            return {
                "apiVersion": PODGROUP_API_VERSION,
                "kind": "PodGroup",
                "namespace": rec.namespace,
                "name": rec.name,
                "uid": rec.uid,
            }
        pod = self.cache.pod_by_uid(group_uid.removeprefix("pod:"))
        if pod is not None:
            return {
                "apiVersion": "v1",
                "kind": "Pod",
                "namespace": pod.namespace,
                "name": pod.name,
                "uid": pod.uid,
            }
        return {"kind": "PodGroup", "name": group_uid}

    # ----------------------------------------------------------------------------------------

    def apply(
        self, result: Any, now: float, issued: Collection[str] = frozenset()
    ) -> dict[str, int]:
        """Apply in the core's order; returns counts for logging. Binds of tasks in `issued`
        (handed out early by `bind_early` while the session ran) are not issued again.

        Each decision (each gang, for bindings) is applied on its own: one that raises is logged
        with its group, counted in `sluice_apply_failures_total`, and skipped, so the rest of the
        cycle still takes effect instead of the same cycle failing over and over."""
        binds: defaultdict[str, list[D.Bind]] = defaultdict(list)
        counts = {"bind": 0, "evict": 0, "nominate": 0}
        if not self.may_write():
            log.warning("not the leader (lease not renewed in time); not applying decisions")
            return counts
        for decision in result.decisions:
            if isinstance(decision, D.Bind):
                if decision.task not in issued:
                    binds[decision.group].append(decision)
                continue
            try:
                self._apply_one(decision, counts)
            except Exception:  # noqa: BLE001 - isolate one bad decision from the rest
                self._failed(_kind(decision), _group_of(decision))
        for group_uid, members in binds.items():
            try:
                counts["bind"] += self._bind_gang(group_uid, members, now)
            except Exception:  # noqa: BLE001 - isolate one bad gang from the rest
                self._failed("bind", group_uid)
        return counts

    def bind_early(self, binds: Sequence[D.Bind], now: float) -> list[str]:
        """Issue the Binds of one committed statement while the session is still running
        (`SessionConfig.on_bind`); returns the task uids issued, each gang whole or not at all."""
        issued: list[str] = []
        if not self.may_write():
            return issued
        by_group: defaultdict[str, list[D.Bind]] = defaultdict(list)
        for bind in binds:
            by_group[bind.group].append(bind)
        for group_uid, members in by_group.items():
            try:
                if self._bind_gang(group_uid, members, now):
                    issued.extend(b.task for b in members)
            except Exception:  # noqa: BLE001 - isolate one bad gang from the rest
                self._failed("bind", group_uid)
        return issued

    def _apply_one(self, decision: Any, counts: dict[str, int]) -> None:
        if isinstance(decision, D.Evict):
            counts["evict"] += self._evict(decision)
        elif isinstance(decision, D.Nominate):
            counts["nominate"] += self._nominate(decision)
        elif isinstance(decision, D.MarkWillEvict):
            self.metrics.preemptions.labels(kind="delayed").inc()
            self.events.post(
                self.involved(decision.victim),
                "Warning",
                "WillEvict",
                f"will be preempted by {self.cache.peer_ref(decision.preemptor)} at "
                f"{R.rfc3339(decision.deadline)}",
            )
        elif isinstance(decision, D.MarkPrivileged):
            self.events.post(
                self.involved(decision.preemptor),
                "Normal",
                "Privileged",
                f"preempting {len(decision.victims)} job(s) at {R.rfc3339(decision.deadline)}",
            )

    def _failed(self, kind: str, group_uid: str) -> None:
        """Log (with the traceback of the exception being handled) and count a failed decision."""
        log.exception(
            "applying %s for %s failed; skipped this cycle", kind, self.describe(group_uid)
        )
        self.metrics.apply_failures.labels(decision=kind).inc()

    def describe(self, group_uid: str) -> str:
        """namespace/name (and uid) of a group or an implicit group's pod, for logs."""
        try:
            ref = self.involved(group_uid)
        except Exception:  # noqa: BLE001 - a log line must not fail
            return group_uid
        if "namespace" in ref:
            return f"{ref.get('kind')} {ref['namespace']}/{ref.get('name')} ({group_uid})"
        return group_uid

    # ----------------------------------------------------------------------------------------

    def _bind_gang(self, group_uid: str, members: list[D.Bind], now: float) -> int:
        requests: list[BindRequest] = []
        stamp = self.bound_by()
        for bind in members:
            rec = self.cache.pod_by_uid(bind.task)
            if rec is None or rec.node_name or bind.task in self.cache.assumed:
                continue
            annotations = {L.GPU_IDS: R.format_gpu_ids(bind.gpu_ids)} if bind.gpu_ids else {}
            if stamp:
                annotations[L.BOUND_BY] = stamp
            requests.append(BindRequest(rec.namespace, rec.name, rec.uid, bind.node, annotations))
        if len(requests) != len(members):
            # The cache moved on since the snapshot (a member vanished or got bound); the gang is
            # released as a whole or not at all, so wait for the next cycle.
            return 0
        try:
            for req, bind in zip(requests, members, strict=True):
                self.cache.assume(req.uid, bind.node, bind.gpu_ids, now)
            self._binding[group_uid] += 1
            self._spawn(self._run_gang(group_uid, requests))
        except BaseException:
            # Nothing was issued: undo the gang's assumptions so the next cycle sees it pending.
            self._done_binding(group_uid)
            for req in requests:
                self.cache.forget(req.uid)
            raise
        return len(requests)

    async def _run_gang(self, group_uid: str, requests: list[BindRequest]) -> None:
        try:
            if not self.may_write():
                log.warning("not the leader any more; not binding gang %s", group_uid)
                for req in requests:
                    self.cache.forget(req.uid)
                return
            outcome: GangOutcome = await self.binder.bind_gang(requests)
        except Exception:  # noqa: BLE001 - log and count; the binder settles assumptions
            self._failed("bind", group_uid)
            return
        finally:
            self._done_binding(group_uid)
        if outcome.failed and not self.may_write():
            return  # the lease was lost meanwhile: no backoff, no Events; the new leader decides
        if outcome.failed:
            for _, reason in outcome.failed:
                self.metrics.bind_failures.labels(reason=reason.split(" ")[0]).inc()
            self.metrics.attempts.labels(result="error").inc()
            if outcome.rolled_back:
                self.metrics.gang_rollbacks.inc()
            now = time.time()
            if all(reason.startswith(NO_ROOM) for _, reason in outcome.failed):
                # Lost a race for the room to another scheduler: nothing is wrong with the
                # group, so no Event, and the first time no backoff either: forgetting its
                # assumptions already asked for a session, which places it again from the
                # cache as it is now. Withdrawn again and again, it backs off.
                withdrawal = self.backoff.withdrawn(group_uid, now, outcome.failed[0][1])
                log.info(
                    "%s: room taken before binding (%s); placing it again%s",
                    self.describe(group_uid),
                    outcome.failed[0][1],
                    f" in {withdrawal.retry_at - now:.1f} s" if withdrawal else "",
                )
                return
            rejection = self.backoff.rejected(group_uid, now, outcome.failed[0][1])
            retry = f"retried as a whole in {rejection.retry_at - now:.0f} s"
            self.events.post(
                self.involved(group_uid),
                "Warning",
                "FailedBinding",
                f"{len(outcome.failed)} of {len(requests)} bindings failed "
                f"({outcome.failed[0][1]}); {retry}",
            )
            if not group_uid.startswith("pod:"):  # an implicit group's Event is on its pod
                for req, reason in outcome.failed:
                    self.events.post(
                        {
                            "apiVersion": "v1",
                            "kind": "Pod",
                            "namespace": req.namespace,
                            "name": req.name,
                            "uid": req.uid,
                        },
                        "Warning",
                        "FailedBinding",
                        f"binding to {req.node} failed ({reason}); {retry}",
                    )
        else:
            self.backoff.bound(group_uid)
            self.metrics.attempts.labels(result="scheduled").inc()

    def on_bound(self, req: BindRequest) -> None:
        now = time.time()
        self.cache.finish_binding(req.uid, now)
        self.metrics.pods_bound.inc()
        rec = self.cache.pod_by_uid(req.uid)
        if rec is not None and rec.created:
            self.metrics.e2e_latency.observe(max(0.0, now - rec.created))

    def on_failed(self, req: BindRequest, reason: str) -> None:
        log.info("binding %s/%s to %s failed: %s", req.namespace, req.name, req.node, reason)
        self.cache.forget(req.uid, req.node, req.gpu_ids)

    # ----------------------------------------------------------------------------------------

    def _evict(self, decision: D.Evict) -> int:
        refs: list[PodRef] = []
        for uid in decision.tasks:
            rec = self.cache.pod_by_uid(uid)
            if rec is None or rec.deleting or uid in self._evicting:
                continue
            refs.append(PodRef(rec.namespace, rec.name, rec.uid))
        if not refs:
            return 0
        self._evicting.update(r.uid for r in refs)
        self.cache.expect_eviction(r.uid for r in refs)
        # Delayed victims were counted when marked WillEvict; the eviction at the deadline is the
        # same preemption. A stale gang is no preemption at all.
        if decision.reason is D.EvictReason.CONSOLIDATED:
            self.metrics.preemptions.labels(kind="consolidation").inc()
        elif decision.reason not in (
            D.EvictReason.DELAYED_PREEMPTION_DUE,
            D.EvictReason.STALE_GANG,
        ):
            now = time.monotonic()
            if not self._victims.recent(decision.group, now):
                self.metrics.preemptions.labels(kind="immediate").inc()
            self._victims.mark(decision.group, now)
        self.events.post(
            self.involved(decision.group), "Warning", decision.reason.value, decision.message
        )
        self._spawn(self._run_evictions(refs, decision.group))
        return len(refs)

    async def evict_group(self, group_uid: str, reason: str, message: str) -> int:
        """Evict every bound pod of a group (used to undo a half-bound gang)."""
        refs = [
            PodRef(r.namespace, r.name, r.uid)
            for r in self.cache.members(group_uid)
            if r.node_name and not r.deleting and r.uid not in self._evicting
        ]
        if refs and not self.may_write():
            return 0
        if refs:
            self._evicting.update(r.uid for r in refs)
            self.cache.expect_eviction(r.uid for r in refs)
            self.events.post(self.involved(group_uid), "Warning", reason, message)
            await self._run_evictions(refs)
        return len(refs)

    async def _run_evictions(self, refs: list[PodRef], victim: str = "") -> None:
        outcomes: list[EvictOutcome] = []
        try:
            if victim and self.before_evict is not None and self.may_write():
                async with self._write_sem:  # a write of the eviction: bounded with them
                    await self.before_evict(victim)
            if not self.may_write():
                log.warning("not the leader any more; not evicting %d pods", len(refs))
                return
            outcomes = await self.evictor.evict_all(refs)
        except Exception:  # log and count; the next cycle decides again
            log.exception(
                "evicting %d pods (%s/%s, ...) failed", len(refs), refs[0].namespace, refs[0].name
            )
            self.metrics.apply_failures.labels(decision="evict").inc()
            return
        finally:
            self._evicting.difference_update(r.uid for r in refs)
            # Evicted pods stay Releasing to the core until the watch shows them leaving.
            done = {r.uid for r, o in zip(refs, outcomes, strict=False) if o in _LEFT}
            self.cache.eviction_failed(r.uid for r in refs if r.uid not in done)
        for outcome in outcomes:
            self.metrics.evictions.labels(outcome=outcome.value).inc()
        if EvictOutcome.BLOCKED in outcomes:
            log.info("eviction blocked by a PodDisruptionBudget; retried next cycle")
        elif victim and EvictOutcome.FAILED not in outcomes:
            self._victims.discard(victim)  # done: choosing it again later is a new preemption

    # ----------------------------------------------------------------------------------------

    def _nominate(self, decision: D.Nominate) -> int:
        rec = self.cache.pod_by_uid(decision.task)
        if rec is None or rec.nominated_node == decision.node:
            return 0
        path = f"/api/v1/namespaces/{rec.namespace}/pods/{rec.name}/status"
        self.cache.expect_nomination(rec.uid, decision.node)
        self._spawn(self._patch_quietly(path, {"status": {"nominatedNodeName": decision.node}}))
        return 1

    async def _patch_quietly(self, path: str, body: dict[str, Any]) -> None:
        try:
            async with self._write_sem:
                if not self.may_write():
                    return
                await self.client.merge_patch(path, body)
        except (ApiError, TimeoutError, OSError) as err:
            log.info("patch %s failed: %s", path, err)
