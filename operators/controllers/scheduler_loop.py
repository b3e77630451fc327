"""The embedded scheduling loop: watch-fed cache -> snapshot -> session -> decisions -> API.

A cycle runs when a relevant change arrives (after a short coalescing window, so a burst of pod
creations becomes one cycle), when a delayed-preemption deadline or an unfinished gang needs
attention, and on a periodic safety tick while pending work exists. A quiet cluster runs no
cycles at all. Only the holder of the scheduler Lease runs cycles; a standby keeps its cache warm
so that it can take over within the lease duration.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any

from operators.api.scheduling import PodGroup, Pool, Queue, Topology
from operators.controllers.scheduler_apply import DecisionApplier
from operators.controllers.scheduler_status import MOVE_WINDOW, StatusWriter, count_members
from operators.runtime import kubeconfig, signals
from operators.runtime import records as R
from operators.runtime.binder import BindBackoff, Binder, BindRequest
from operators.runtime.cache import ChangeKind, SchedulerCache
from operators.runtime.client import KubeClient
from operators.runtime.events import EventRecorder
from operators.runtime.evictor import Evictor
from operators.runtime.httpserver import ProbeServer
from operators.runtime.informer import Informer, WatchedKind
from operators.runtime.leader import LeaderElector, LeaseConfig
from operators.runtime.metrics import SchedulerMetrics
from operators.runtime.settings import SchedulerSettings
from operators.runtime.usage import UsageBook
from operators.runtime.wake import woken
from operators.scheduler import SessionConfig, SessionMemo, SessionResult, run_session
from operators.scheduler import decisions as D
from operators.scheduler import snapshot as S
from operators.scheduler.actions import stale
from operators.scheduler.usage import UsageParams

log = logging.getLogger(__name__)

# Terminal pods hold no resources; the API server filters them out (and sends DELETED when a pod
# finishes), which keeps the cache small on clusters with many completed jobs.
LIVE_PODS = {"fieldSelector": "status.phase!=Succeeded,status.phase!=Failed"}
# Phases of a gang that has not reached minMember yet: the only ones a half-bound repair touches.
NEVER_RAN = frozenset({S.GroupPhase.PENDING, S.GroupPhase.INQUEUE})
RAN = frozenset({S.GroupPhase.RUNNING, S.GroupPhase.UNKNOWN})


class SchedulerOperator:
    def __init__(self, settings: SchedulerSettings) -> None:
        self.settings = settings
        self.metrics = SchedulerMetrics()
        self.cache = SchedulerCache(settings.scheduler_name, self._on_change)
        self._wake = asyncio.Event()
        self._backoff: BindBackoff | None = None
        self._schedule_wanted = True
        self._stopping = asyncio.Event()
        self._half_bound_since: dict[str, float] = {}
        self._below_minimum_since: dict[str, float] = {}  # stale-gang candidates (uid -> since)
        # Stale gangs a session has already seen past their grace (uid -> when to look again):
        # an eviction refused (a budget) or still in flight leaves the gang below its minimum,
        # and without this its passed deadline would start a session every 50 ms.
        self._stale_retry_at: dict[str, float] = {}
        s = self.settings
        self.usage = UsageBook(
            UsageParams(s.usage_half_life_seconds, s.usage_window_seconds),
            s.usage_write_seconds,
        )
        self._last_result: SessionResult | None = None
        # What session open derived from the cache's objects, reused by the next session for
        # every object the cache did not rebuild (sessions run one at a time).
        self._memo = SessionMemo()
        # Cache changes seen (any kind), and their count when the last session took its
        # snapshot: the safety tick skips a session over an unchanged cache.
        self._changes = 0
        self._changes_at_session = -1
        self._last_session_at = -math.inf  # the last session's clock (Snapshot.now)
        # A cycle or status pass put off while the lease renewal was overdue: no event will
        # ask for it again, so the loop looks every retry period whether it may act again.
        self._put_off = False
        # When the first change not yet served by a cycle or status pass arrived (the loop's
        # clock, replaceable in tests): the coalescing window counts from it, so changes that
        # came while a cycle ran are not held back a second window after it.
        self.clock: Callable[[], float] = time.monotonic
        self._unserved_since = -math.inf
        self.cycles = 0
        self._relists_seen: dict[str, int] = {}
        self._triggers_seen: dict[str, int] = {}
        self.informers: list[Informer[Any]] = []
        self.elector: LeaderElector | None = None
        self.ready = False
        self.lost_lease = False  # run() ended because the lease was lost, not by a stop or fault

    # ----------------------------------------------------------------------------------------

    def _on_change(self, kind: ChangeKind) -> None:
        self._changes += 1
        if kind == "schedule":
            self._schedule_wanted = True
        if not self._wake.is_set():
            self._unserved_since = self.clock()
        self._wake.set()

    def _coalesce_delay(self) -> float:
        """What is left of the coalescing window of the first change not served yet: a burst of
        changes becomes one cycle, and a change that arrived during a cycle longer than the
        window is served as soon as that cycle ends (it has waited for company long enough)."""
        window = self.settings.coalesce_seconds
        return min(window, max(0.0, window - (self.clock() - self._unserved_since)))

    def _recheck(self, req: BindRequest) -> str | None:
        """The binder's last look before a POST. Logged (debug) with the pod watch's position:
        which other schedulers' bindings Sluice had seen when it decided (e2e/test_coexistence
        tells a race it could not have avoided from one it could have)."""
        taken = self.cache.room_conflict(req.uid, req.node, req.gpu_ids)
        if log.isEnabledFor(logging.DEBUG):
            seen = next((i.resource_version for i in self.informers if i.kind.name == "pods"), "")
            log.debug(
                "bind re-check %s/%s on %s at pods resourceVersion %s: %s",
                req.namespace,
                req.name,
                req.node,
                seen,
                taken or "fits",
            )
        return taken

    def _informers(self, client: KubeClient) -> list[Informer[Any]]:
        c, t = self.cache, self.settings.watch_timeout_seconds

        def make(kind: WatchedKind, transform: Any, handler: Any) -> Informer[Any]:
            return Informer(client, kind, transform, handler, watch_timeout_seconds=t)

        return [
            make(WatchedKind("nodes", "/api/v1/nodes"), R.node, c.on_node),
            make(
                WatchedKind("priorityclasses", "/apis/scheduling.k8s.io/v1/priorityclasses"),
                R.priority_class,
                c.on_priority_class,
            ),
            make(WatchedKind(Queue.plural, Queue.api_path(), optional=True), R.queue, c.on_queue),
            make(WatchedKind(Pool.plural, Pool.api_path(), optional=True), R.pool, c.on_pool),
            make(
                WatchedKind(Topology.plural, Topology.api_path(), optional=True),
                R.topology,
                c.on_topology,
            ),
            make(
                WatchedKind(PodGroup.plural, PodGroup.api_path(), optional=True),
                R.podgroup,
                c.on_podgroup,
            ),
            make(
                WatchedKind("poddisruptionbudgets", "/apis/policy/v1/poddisruptionbudgets"),
                R.budget,
                c.on_budget,
            ),
            # Pods last: their group membership resolves against the groups listed above.
            make(WatchedKind("pods", "/api/v1/pods", LIVE_PODS), R.pod, c.on_pod),
        ]

    # ----------------------------------------------------------------------------------------

    async def run(self) -> int:
        s = self.settings
        conn = kubeconfig.load(s.kubeconfig, s.context)
        # Enough connections for every binding in flight plus watches and status writes.
        client = KubeClient(
            conn,
            limit=s.bind_concurrency + s.status_concurrency + 16,
            request_timeout=s.request_timeout_seconds,
        )
        unsubscribe = signals.on_stop_signal(self._stopping.set)

        probes = ProbeServer(
            self.metrics.registry,
            alive=lambda: not self._stopping.is_set(),
            ready=lambda: self.ready,
        )
        if s.metrics_port:
            await probes.start(s.metrics_host, s.metrics_port)
            log.info("serving /metrics /healthz /readyz on %s:%d", s.metrics_host, probes.port)

        # Lease renewals get their own small connection pool, so that a pool saturated by
        # watches, bindings and status writes cannot delay them past the renew deadline.
        lease_client = KubeClient(conn, limit=2, request_timeout=s.renew_deadline_seconds)
        sem = asyncio.Semaphore(s.bind_concurrency)
        evictor = Evictor(client, sem)
        events = EventRecorder(client, "sluice-scheduler")
        applier = DecisionApplier(
            client,
            self.cache,
            Binder(
                client,
                evictor,
                sem,
                may_send=self.leading,
                recheck=self._recheck,
            ),
            evictor,
            events,
            self.metrics,
            write_semaphore=sem,
            may_write=self.leading,
            bound_by=self.bound_by,
        )
        self._backoff = applier.backoff
        applier.binder.on_bound = applier.on_bound
        applier.binder.on_failed = applier.on_failed
        status = StatusWriter(
            client,
            self.cache,
            self.metrics,
            s.status_concurrency,
            count_interval=s.status_count_interval_seconds,
            cluster_interval=s.status_cluster_interval_seconds,
            warn=lambda uid, reason, text: events.post(
                applier.involved(uid), "Warning", reason, text
            ),
        )
        applier.before_evict = status.stamp_eviction

        self.informers = self._informers(client)
        watch_tasks = [
            asyncio.create_task(i.run(), name=f"watch-{i.kind.name}") for i in self.informers
        ]
        exit_code = 0
        try:
            started = time.monotonic()
            await self._until(asyncio.gather(*(i.synced.wait() for i in self.informers)))
            if self._stopping.is_set():
                return 0
            log.info(
                "caches synced in %.2fs: %d nodes, %d pods, %d podgroups",
                time.monotonic() - started,
                len(self.cache.nodes),
                len(self.cache.pods),
                len(self.cache.groups),
            )
            self.ready = True

            hold: asyncio.Task[None] | None = None
            if s.leader_election:
                self.elector = LeaderElector(
                    lease_client,
                    LeaseConfig(
                        s.lease_name,
                        s.lease_namespace,
                        s.identity,
                        s.lease_duration_seconds,
                        s.renew_deadline_seconds,
                        s.retry_period_seconds,
                    ),
                )
                await self._until(self.elector.acquire())
                if self._stopping.is_set():
                    return 0
                hold = asyncio.create_task(self.elector.hold(), name="lease")
            self.metrics.is_leader.set(1)
            # A fresh memo per term: a session of an earlier term may still be finishing in its
            # thread (cancelling the cycle does not stop it), and a memo serves one at a time.
            self._memo = SessionMemo()
            cycles = asyncio.create_task(self._loop(applier, status), name="cycles")
            stop = asyncio.create_task(self._stopping.wait())
            waiting: set[asyncio.Task[Any]] = {cycles, stop, *watch_tasks}
            if hold is not None:
                waiting.add(hold)
            done, _ = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
            if hold is not None and hold in done:
                # Nothing more may reach the API: a standby may be placing pods by now.
                dropped = applier.cancel() + status.cancel()
                log.error(
                    "lost the scheduler lease; cancelled %d pending writes; standing down",
                    dropped,
                )
                self.lost_lease = True
                exit_code = 1
            for task in done:
                if task is not stop and task.exception() is not None:
                    log.error("task %s failed", task.get_name(), exc_info=task.exception())
                    exit_code = 1
            cycles.cancel()
            stop.cancel()
            if hold is not None:
                hold.cancel()
            if exit_code == 0:
                # A clean stop lets bindings already issued finish. After losing the lease we do
                # not wait: another scheduler may already be placing pods with its own view.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(applier.drain(), timeout=10)
                await status.drain()
        finally:
            self.metrics.is_leader.set(0)
            for task in watch_tasks:
                task.cancel()
            await asyncio.gather(*watch_tasks, return_exceptions=True)
            if self.elector is not None and exit_code == 0:
                await self.elector.release()
            await probes.stop()
            await client.close()
            await lease_client.close()
            unsubscribe()
        return exit_code

    def leading(self) -> bool:
        """Whether this process may write to the API now: always without leader election, else
        only within the renew deadline of its last successful lease renewal."""
        return self.elector is None or self.elector.valid()

    def bound_by(self) -> str:
        """`<identity>/<lease term>` (just the identity without leader election)."""
        identity = self.settings.identity
        if self.elector is None or self.elector.term is None:
            return identity
        return f"{identity}/{self.elector.term}"

    async def _until(self, awaitable: Awaitable[Any]) -> None:
        """Await something, unless a stop signal comes first."""
        task = asyncio.ensure_future(awaitable)
        stop = asyncio.create_task(self._stopping.wait())
        await asyncio.wait({task, stop}, return_when=asyncio.FIRST_COMPLETED)
        for t in (task, stop):
            if not t.done():
                t.cancel()

    # ----------------------------------------------------------------------------------------

    def _next_deadline(self, now: float) -> float:
        """Seconds until something needs a cycle without any event: a delayed-preemption
        deadline, a half-bound gang's grace, a waiting gang's hard topology turning soft, a
        moved job's window ending, or the safety tick (only if work is pending)."""
        wait = self.settings.safety_tick_seconds
        for deadline in self.cache.preemption_deadlines():
            wait = min(wait, max(0.0, deadline - now) + 0.05)
        for since in self._half_bound_since.values():
            wait = min(wait, max(0.0, since + self.settings.half_bound_grace_seconds - now) + 0.05)
        if self.cache.assumed:
            wait = min(wait, self.settings.assume_ttl_seconds)
        for _, at in self._stale_deadlines():
            wait = min(wait, max(0.0, at - now) + 0.05)
        if self._backoff is not None:  # a group whose binding was rejected is due again
            for rejection in self._backoff.current(self.cache.has_group).values():
                if rejection.retry_at > now:
                    wait = min(wait, rejection.retry_at - now + 0.05)
        for at in self._timed_changes():
            if at > now:
                wait = min(wait, at - now + 0.05)
        return wait

    def _timed_changes(self) -> list[float]:
        """When the core's answer changes with time alone: a waiting gang's hard topology turns
        soft, a moved job's held room opens to others at the end of its window."""
        return self.cache.timed_changes(MOVE_WINDOW)

    def _stale_deadlines(self) -> Iterator[tuple[str, float]]:
        """When each gang running below its minimum becomes stale (groups without a grace
        period never do), or, once a session has tried it, when it is due for another try."""
        for uid, since in self._below_minimum_since.items():
            rec = self.cache.group_record(uid)
            default = self.settings.stale_gang_grace_seconds
            grace = stale.grace_of(rec.group, default) if rec is not None else None
            if grace is not None:
                yield uid, max(since + grace, self._stale_retry_at.get(uid, 0.0))

    async def _loop(self, applier: DecisionApplier, status: StatusWriter) -> None:
        while True:
            waited_from = time.time()
            timeout = self._next_deadline(waited_from)
            if self._put_off:
                timeout = min(timeout, self.settings.retry_period_seconds)
            woke = await woken(self._wake, timeout)
            if woke:
                await asyncio.sleep(self._coalesce_delay())
            self._wake.clear()
            # A wake just before a deadline does not hide it: with status changes arriving more
            # often than the coalescing window, a passed deadline (a stale gang's grace, a
            # backoff) would otherwise wait for a change that asks for a session.
            due = not woke or time.time() >= waited_from + timeout
            timed_work = due and self._timed_session_due(time.time())
            if self._schedule_wanted or timed_work:
                self._schedule_wanted = False
                try:
                    await self.cycle(applier, status)
                except Exception:
                    # One bad snapshot (a core bug, an odd object) must not stop scheduling for
                    # everybody: log it, count it, and try again shortly with a fresh snapshot.
                    log.exception("scheduling cycle failed; retrying")
                    self.metrics.attempts.labels(result="error").inc()
                    self._schedule_wanted = True
                    await asyncio.sleep(1.0)
            elif woke or self._put_off:
                # Not leading for a moment (a renewal late): the dirty groups wait for the
                # next look, not for an unrelated event (a released status timer's group would).
                self._put_off = not self.leading()
                if not self._put_off:
                    try:
                        self.status_pass(applier, status)
                    except Exception:
                        # As a failed cycle: the scheduler goes on; the groups the pass was to
                        # visit are back in the dirty set for the next pass (write_groups).
                        log.exception("status pass failed")

    def status_pass(self, applier: DecisionApplier, status: StatusWriter) -> None:
        """Only pod phases or statuses moved (e.g. Running): refresh the statuses of the groups
        they touched with the last session's explanations; no session needed."""
        now = time.time()
        result = self._last_result or SessionResult(decisions=(), explanations={})
        dirty, self.cache.dirty_groups = self.cache.dirty_groups, set()
        known = SessionResult(decisions=(), explanations=result.explanations)
        status.write_groups(known, now, R.rfc3339(now), only=dirty)  # `dirty` back if it raises
        self._track_dirty_below_minimum(applier, dirty, now)
        # A pod naming a missing PodGroup starts no session; say why it waits anyway.
        self._write_pod_reasons(applier, status, known, now)
        self._export_triggers()

    def session_config(self, on_bind: Callable[[tuple[D.Bind, ...]], None] | None) -> SessionConfig:
        """The core's knobs that the scheduler's settings carry."""
        return SessionConfig(
            timer=time.perf_counter,
            on_bind=on_bind,
            stale_gang_grace=self.settings.stale_gang_grace_seconds,
        )

    def _timed_session_due(self, now: float) -> bool:
        """Woken by no event (a deadline or the safety tick): is a session due?

        Deadlines, half-bound gangs and binding backoffs always get one; gangs running below
        their minimum get one once a stale-gang grace period has run out (before that, or with
        no grace at all, the core's stale-gang check decides nothing), waiting gangs once their
        hard topology request turned soft (softAfterSeconds). Pending work gets one
        only if the cache changed since the last session's snapshot (or an assumed binding may
        expire): the core decides from the snapshot alone, and time enters only through the
        deadlines and backoffs above, so a session over an unchanged cache would decide what
        the last one decided (on a full cluster with a backlog: nothing, at the price of a full
        session every tick)."""
        if self._half_bound_since or self.cache.preemption_deadlines():
            return True
        if any(at <= now for _, at in self._stale_deadlines()):
            return True
        if self._backoff is not None and self._backoff.current(self.cache.has_group):
            return True
        # A waiting gang's hard topology request turned soft, or a moved job's window ended,
        # since the last session's clock.
        if any(self._last_session_at < at <= now for at in self._timed_changes()):
            return True
        if not self.cache.has_pending_work():
            return False
        if self.cache.assumed or self._changes != self._changes_at_session:
            self.cache.triggers["tick"] += 1
            return True
        self.cache.triggers["tick-unchanged"] += 1
        self._export_triggers()
        return False

    @staticmethod
    def _write_pod_reasons(
        applier: DecisionApplier, status: StatusWriter, result: SessionResult, now: float
    ) -> None:
        for pod, message in status.write_pod_reasons(result, now, R.rfc3339(now)):
            involved = applier.involved(R.implicit_group_uid(pod.uid))
            applier.events.post(involved, "Warning", "FailedScheduling", message)

    async def cycle(self, applier: DecisionApplier, status: StatusWriter) -> None:
        t0 = time.perf_counter()
        now = time.time()
        self.cycles += 1
        self._last_session_at = now
        self.cache.expire_assumptions(now, self.settings.assume_ttl_seconds)
        rejections = applier.backoff.current(self.cache.has_group)
        self._changes_at_session = self._changes
        below = self._track_below_minimum(applier, now)
        # This session's core sees these gangs past their grace and evicts what it can; if the
        # gang is still below its minimum afterwards, the next timed try waits a safety tick
        # (an event - a pod gone, a budget changed - still starts a session at once).
        for uid, at in list(self._stale_deadlines()):
            if at <= now:
                self._stale_retry_at[uid] = now + self.settings.safety_tick_seconds
        usage = self.usage.advance(now, self.cache.queues) if self.usage.enabled else None
        snap = self.cache.snapshot(now, status.implicit_marks, rejections, below, usage)
        t1 = time.perf_counter()
        # The snapshot is immutable, so the session can run off the event loop while watches
        # and in-flight bindings keep being served; and each gang the session commits (binds
        # only, no evictions) is bound at once, not after the whole session: a burst of
        # 10,000 pods sees its first Binding within the first gangs' placement.
        loop = asyncio.get_running_loop()
        issued: set[str] = set()
        first_bind: list[float] = []

        def early(binds: Sequence[D.Bind]) -> None:
            if not self.leading():
                return  # applied (or not) with the rest at the end, under the same check
            if not first_bind:
                first_bind.append(time.perf_counter())
            issued.update(applier.bind_early(binds, time.time()))

        def on_bind(binds: tuple[D.Bind, ...]) -> None:  # runs in the session's thread
            loop.call_soon_threadsafe(early, binds)

        config = self.session_config(on_bind)
        result = await asyncio.to_thread(run_session, snap, config, self._memo)
        t2 = time.perf_counter()
        self._last_result = result
        if not self.leading():
            # The lease renewal is overdue: a standby may take over at any moment, so this cycle
            # writes nothing (the lease task ends the process once the deadline has passed).
            log.warning("cycle %d: lease not renewed in time; not applying", self.cycles)
            self._schedule_wanted = True  # should the renewal still succeed, decide afresh
            self._put_off = True
            return
        self._put_off = False  # this cycle writes every group's status
        status.note_evictions(result.decisions, R.rfc3339(now))  # stamped before they go out
        counts = applier.apply(result, time.time(), issued)
        counts["bind"] += len(issued)
        bound_now = {d.group for d in result.decisions if isinstance(d, D.Bind)}
        await self._repair_half_bound(applier, bound_now, now)
        # A gang this session brought back to its minimum (bindings issued) is no longer a
        # candidate: a later drop gets its own grace, not the first drop's deadline (the
        # bindings' echoes are cleared next, so no pass between sessions would see it).
        self._forget_recovered(applier)
        dirty, self.cache.dirty_groups = self.cache.dirty_groups, set()
        written = status.write_session(result, now, R.rfc3339(now), dirty)  # put back if it raises
        self._write_pod_reasons(applier, status, result, now)
        status.write_queues(result.queues)
        if self.usage.enabled:
            self.usage.hold({name: q.allocated for name, q in result.queues.items()})
            status.write_usage(self.usage.due(now), self.usage.written)
        status.write_pools(result.pools)
        t3 = time.perf_counter()

        m = self.metrics
        m.cycle_duration.labels(phase="snapshot").observe(t1 - t0)
        m.cycle_duration.labels(phase="session").observe(t2 - t1)
        m.cycle_duration.labels(phase="apply").observe(t3 - t2)
        m.cycle_duration.labels(phase="total").observe(t3 - t0)
        for action, seconds in result.timings.items():
            m.action_duration.labels(action=action).observe(seconds)
        unschedulable = sum(
            1 for e in result.explanations.values() if e.code.value not in ("Scheduled", "Admitted")
        )
        if unschedulable:
            m.attempts.labels(result="unschedulable").inc(unschedulable)
        m.replace(m.pending_pods, {(q,): n for q, n in self.cache.pending_by_queue().items()})
        m.assumed_pods.set(len(self.cache.assumed))
        self._export_triggers()
        m.observe_quota(result.queues, result.pools)
        for informer in self.informers:
            name = informer.kind.name
            m.cache_objects.labels(kind=name).set(len(informer.store))
            new_relists = informer.relists - self._relists_seen.get(name, 0)
            if new_relists:
                m.relists.labels(kind=name).inc(new_relists)
                self._relists_seen[name] = informer.relists
        if counts["bind"] or counts["evict"] or written or (t3 - t0) > 1.0:
            log.info(
                "cycle %d: %d nodes, %d groups, %d tasks; bind %d (%d during the session, "
                "first after %.3fs), evict %d, nominate %d, status writes %d; snapshot %.3fs "
                "session %.3fs apply %.3fs",
                self.cycles,
                len(snap.nodes),
                len(snap.groups),
                len(snap.tasks),
                counts["bind"],
                len(issued),
                (first_bind[0] - t1) if first_bind else t2 - t1,
                counts["evict"],
                counts["nominate"],
                written,
                t1 - t0,
                t2 - t1,
                t3 - t2,
            )

    def _export_triggers(self) -> None:
        for cause, n in self.cache.triggers.items():
            new = n - self._triggers_seen.get(cause, 0)
            if new:
                self.metrics.triggers.labels(cause=cause).inc(new)
                self._triggers_seen[cause] = n

    def _track_below_minimum(self, applier: DecisionApplier, now: float) -> dict[str, float]:
        """Running gangs with fewer than minMember pods bound (and not terminating), and since
        when: the core evicts them whole once their stale-gang grace period has passed."""
        seen: dict[str, float] = {}
        for rec in self.cache.groups.values():
            if self._below_minimum(rec, applier):
                seen[rec.uid] = self._below_minimum_since.get(rec.uid, now)
        self._below_minimum_since = seen
        self._stale_retry_at = {u: t for u, t in self._stale_retry_at.items() if u in seen}
        return seen

    def _track_dirty_below_minimum(
        self, applier: DecisionApplier, dirty: set[tuple[str, str]], now: float
    ) -> None:
        """Between sessions, the gangs whose pods or status moved: a gang the last session did
        not count (its phase echo or its bindings not back yet) gets its grace deadline now,
        not at the next session, which nothing else may start; a gang back at its minimum is
        forgotten, so its next drop starts a grace of its own."""
        for key in dirty:
            rec = self.cache.groups.get(key)
            if rec is not None and self._below_minimum(rec, applier):
                self._below_minimum_since.setdefault(rec.uid, now)
        self._forget_recovered(applier)

    def _forget_recovered(self, applier: DecisionApplier) -> None:
        """Drop the tracked gangs that are gone or back at their minimum (a gang being bound
        counts as back). Only the tracked ones are looked at: a handful, not every group."""
        for uid in list(self._below_minimum_since):
            rec = self.cache.group_record(uid)
            if rec is None or not self._below_minimum(rec, applier):
                del self._below_minimum_since[uid]
                self._stale_retry_at.pop(uid, None)

    def _below_minimum(self, rec: R.GroupRecord, applier: DecisionApplier) -> bool:
        grp = rec.group
        # A one-pod group is never between none and its minimum: only gangs are looked at.
        if grp.min_member < 2 or rec.uid in applier.binding_groups:
            return False
        counts = count_members(self.cache, rec.uid)
        # Only a gang that still holds something is stale (evicting it frees room).
        if not 0 < counts.bound < grp.min_member:
            return False
        # A gang whose phase says it never ran but of which nothing waits was placed whole and
        # lost a member before a status pass saw it whole (so Running was never written): the
        # half-bound repair wants members waiting, and without this nothing would ever free it.
        return grp.phase in RAN or (grp.phase in NEVER_RAN and not counts.pending)

    async def _repair_half_bound(
        self, applier: DecisionApplier, bound_now: set[str], now: float
    ) -> None:
        """A gang some of whose pods are bound but not minMember (a crash between Binding POSTs)
        is given `half_bound_grace_seconds` to complete; after that its bound pods are evicted so
        it can start over whole, rather than hold nodes it cannot use.

        Only gangs that never ran are repaired (phase Pending or Inqueue): a gang that was Running
        and lost a pod (now Running or Unknown) keeps its healthy pods; its job controller decides
        what a lost member means, not the scheduler."""
        seen: set[str] = set()
        for rec in list(self.cache.groups.values()):
            grp = rec.group
            if grp.min_member <= 1 or grp.phase not in NEVER_RAN:
                continue
            if rec.uid in applier.binding_groups:
                continue
            counts = count_members(self.cache, rec.uid)
            if not (0 < counts.bound < grp.min_member and counts.pending > 0):
                continue
            if rec.uid in bound_now:
                continue
            seen.add(rec.uid)
            since = self._half_bound_since.setdefault(rec.uid, now)
            if now - since >= self.settings.half_bound_grace_seconds:
                n = await applier.evict_group(
                    rec.uid,
                    "GangIncomplete",
                    f"only {counts.bound} of minMember {grp.min_member} pods were bound and the "
                    "rest could not follow; evicting them so the gang restarts whole",
                )
                log.warning("evicted %d pods of half-bound gang %s/%s", n, rec.namespace, rec.name)
                seen.discard(rec.uid)
        for uid in list(self._half_bound_since):
            if uid not in seen:
                del self._half_bound_since[uid]
