"""The `events` operator: job, PodGroup and Queue transitions -> CloudEvents at EventSinks.

The outbox is the job itself: the jobs operator keeps the newest transitions in
`status.transitions` (numbered by `seq`), and this operator keeps, per sink, how far it got in
`status.delivery[]` (plus the slowest sink's cursor in `status.transitionsDelivered`, which the
jobs operator reads). Nothing lives only in memory, so a restart resumes from the cursors and may
send an event again (at least once; receivers de-duplicate by id), but never skips one.

- PodGroups and Queues have no transition log of their own: for those a sink subscribes to
  (`filter.kinds`), this operator derives their transitions (operators.jobs.sources), appends
  them to `status.eventLog` on the object, and sends them only once that write succeeded, so an
  id is never given to two different transitions; objects nobody subscribes to are not written;
- jobs, PodGroups, Queues and EventSinks are watched with `@kopf.on.event` (no progress or
  diff-base annotations);
- one worker per sink drains jobs with pending transitions, at most `concurrency` jobs at a time,
  each job strictly in `seq` order (the next event only after the previous one was acknowledged
  or given up on);
- cursor and sink-statistics writes are coalesced: at most one patch per object per flush;
- a sink's token Secret is watched by name (that one Secret only), so a rotated token is used
  from the next attempt on, without editing the sink or restarting the operator.

Settings: `operators.controllers.kopf_runner.KopfSettings` plus `EventsSettings` (prefix
`--events-`, `SLUICE_EVENTS_`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime
import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any, Final

import aiohttp
import kopf
import pydantic

from operators.api.batch import Hook
from operators.api.events import EventFilter, EventSinkSpec, RetryPolicy, SinkKind
from operators.controllers import kopf_runner
from operators.controllers.kopf_runner import KopfOperator, KopfSettings, OperatorContext
from operators.jobs import delivery as D
from operators.jobs.sources import ObjectLog, derive
from operators.jobs.translog import TransitionRec
from operators.runtime import kubeconfig, logs, status_patch
from operators.runtime.client import ApiError, KubeClient
from operators.runtime.httpserver import ProbeServer
from operators.runtime.informer import Informer, WatchedKind
from operators.runtime.metrics import EventsMetrics
from operators.runtime.settings import parse_settings
from operators.runtime.sinks import SinkConfigError, SinkTarget, post_event, resolve
from operators.runtime.wake import woken

log = logging.getLogger(__name__)

Key = tuple[str, str, str]  # (kind, namespace, name)
JOBS_API: Final = "/apis/batch.sluice.dev/v1alpha1"
SINKS_API: Final = "/apis/events.sluice.dev/v1alpha1/eventsinks"
RESOLVE_RETRY_SECONDS: Final = 10.0


@dataclasses.dataclass(frozen=True)
class EventsSettings(KopfSettings):
    concurrency: int = 32
    """Jobs delivered to at the same time, per sink (each job stays strictly ordered)."""

    flush_seconds: float = 0.5
    """Cursor and sink-statistics writes are coalesced over this interval."""

    metrics_host: str = "0.0.0.0"
    """Address of the Prometheus endpoint."""

    metrics_port: int = 0
    """Port of the Prometheus endpoint (`/metrics`); 0 disables it."""


def _now_iso() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _age(rec_time: str) -> float | None:
    try:
        then = datetime.datetime.fromisoformat(rec_time)
    except ValueError:
        return None
    return max(0.0, time.time() - then.timestamp())


@dataclasses.dataclass
class JobView:
    ref: D.JobRef
    entries: tuple[TransitionRec, ...]
    log_seq: int
    cursors: dict[str, int]
    failures: dict[str, int]
    errors: dict[str, str]
    generation: int = 0
    # PodGroups and Queues (module sources): their log as this operator keeps it, and how far
    # it is written to the object. Entries past `persisted` are not sent yet.
    log: ObjectLog | None = None
    persisted: int = 0
    status: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def sendable(self) -> tuple[tuple[TransitionRec, ...], int]:
        """(entries, log seq) delivery may act on."""
        if self.log is None:
            return self.entries, self.log_seq
        return tuple(e for e in self.entries if e.seq <= self.persisted), self.persisted


def _log_unchanged(old: JobView, body: Mapping[str, Any]) -> bool:
    """Same job, same spec (hooks) and no new transition: e.g. the echo of our own cursor write.
    Checked before parsing the transitions, which is most of the cost of an event."""
    meta = body.get("metadata") or {}
    seq = (body.get("status") or {}).get("transitionSeq")
    return (
        isinstance(seq, int)
        and seq == old.log_seq
        and str(meta.get("uid") or "") == old.ref.uid
        and int(meta.get("generation") or 0) == old.generation
    )


@dataclasses.dataclass
class Sink:
    name: str
    spec: EventSinkSpec
    generation: int
    target: SinkTarget | None = None
    problem: str = ""
    delivered: int = 0
    failed: int = 0
    last_delivery: str | None = None
    last_error: str | None = None
    dirty: set[Key] = dataclasses.field(default_factory=set)
    busy: set[Key] = dataclasses.field(default_factory=set)
    depth: dict[Key, int] = dataclasses.field(default_factory=dict)
    wake: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)
    worker: asyncio.Task[None] | None = None
    secret_watch: asyncio.Task[None] | None = None

    @property
    def flt(self) -> EventFilter | None:
        return self.spec.filter

    @property
    def retry(self) -> RetryPolicy:
        return self.spec.retry or D.DEFAULT_RETRY


def _delivery(rows: Any) -> tuple[dict[str, int], dict[str, int], dict[str, str]]:
    """Per-sink (cursor, failures, last error) from a `delivery` list, a job's or an object log's."""
    cursors: dict[str, int] = {}
    failures: dict[str, int] = {}
    errors: dict[str, str] = {}
    for row in rows or ():
        sink = str(row.get("sink") or "")
        if sink:
            cursors[sink] = int(row.get("lastDeliveredSequence") or 0)
            failures[sink] = int(row.get("failures") or 0)
            if row.get("lastError"):
                errors[sink] = str(row["lastError"])
    return cursors, failures, errors


def job_view(kind: str, body: Mapping[str, Any]) -> JobView:
    meta = body.get("metadata") or {}
    spec = body.get("spec") or {}
    status = body.get("status") or {}
    hooks: list[Hook] = []
    for raw in spec.get("hooks") or ():
        with contextlib.suppress(pydantic.ValidationError):
            hooks.append(Hook.model_validate(raw))
    entries = tuple(TransitionRec.parse(t) for t in status.get("transitions") or ())
    seq = int(status.get("transitionSeq") or (entries[-1].seq if entries else 0))
    cursors, failures, errors = _delivery(status.get("delivery"))
    ref = D.JobRef(
        kind,
        str(meta.get("namespace") or ""),
        str(meta.get("name") or ""),
        str(meta.get("uid") or ""),
        tuple(hooks),
    )
    return JobView(ref, entries, seq, cursors, failures, errors, int(meta.get("generation") or 0))


def object_view(kind: str, body: Mapping[str, Any]) -> JobView:
    """A PodGroup or Queue: its `status.eventLog` (what is written) and its current status."""
    meta = body.get("metadata") or {}
    status = body.get("status") or {}
    raw = status.get("eventLog") or {}
    log = ObjectLog.parse(raw)
    cursors, failures, errors = _delivery(raw.get("delivery"))
    ref = D.JobRef(
        kind, str(meta.get("namespace") or ""), str(meta.get("name") or ""), str(meta.get("uid"))
    )
    return JobView(
        ref,
        log.entries,
        log.seq,
        cursors,
        failures,
        errors,
        log=log,
        persisted=log.seq,
        status=status,
    )


class EventsController:
    def __init__(
        self, client: KubeClient, settings: EventsSettings, metrics: EventsMetrics
    ) -> None:
        self.client = client
        self.settings = settings
        self.metrics = metrics
        self.jobs: dict[Key, JobView] = {}
        self.sinks: dict[str, Sink] = {}
        self.dirty_jobs: set[Key] = set()
        self.dirty_sinks: set[str] = set()
        self.flush_wake = asyncio.Event()
        self.stopping = asyncio.Event()
        self._session: aiohttp.ClientSession | None = None
        self._tasks: set[asyncio.Task[Any]] = set()

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0, limit_per_host=0)
            )
        return self._session

    def _spawn(self, coro: Any, name: str) -> asyncio.Task[Any]:
        task = asyncio.create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # -- watch side ---------------------------------------------------------------------------

    def filters(self) -> dict[str, EventFilter | None]:
        return {name: sink.flt for name, sink in self.sinks.items()}

    def on_job(self, kind: str, event_type: str, body: Mapping[str, Any]) -> None:
        meta = body.get("metadata") or {}
        key = (kind, str(meta.get("namespace") or ""), str(meta.get("name") or ""))
        if event_type == "DELETED":
            self.jobs.pop(key, None)
            for sink in self.sinks.values():
                sink.depth.pop(key, None)
            return
        old = self.jobs.get(key)
        if old is not None and _log_unchanged(old, body):
            return  # our cursors in memory are at least as far as the ones in this body
        view = job_view(kind, body)
        if old is not None and old.ref.uid == view.ref.uid:
            # Our own cursor writes echo back later than we moved on: never go backwards.
            for name, seq in old.cursors.items():
                view.cursors[name] = max(seq, view.cursors.get(name, 0))
            for name, count in old.failures.items():
                view.failures[name] = max(count, view.failures.get(name, 0))
            view.errors = {**view.errors, **old.errors}
        self.jobs[key] = view
        self._route(key, view)

    def on_object(self, kind: str, event_type: str, body: Mapping[str, Any]) -> None:
        """A PodGroup or Queue changed: derive its transitions if some sink subscribes to it."""
        meta = body.get("metadata") or {}
        key = (kind, str(meta.get("namespace") or ""), str(meta.get("name") or ""))
        if event_type == "DELETED":
            self.jobs.pop(key, None)
            for sink in self.sinks.values():
                sink.depth.pop(key, None)
            return
        view = object_view(kind, body)
        old = self.jobs.get(key)
        if old is not None and old.ref.uid == view.ref.uid and old.log is not None:
            # Our own log writes come back later than we appended: the log in memory is newer.
            if old.log.seq >= view.log_seq:
                old.status = view.status
                view = old
            else:
                for name, seq in old.cursors.items():
                    view.cursors[name] = max(seq, view.cursors.get(name, 0))
        self.jobs[key] = view
        self._observe(key, view)

    def _observe(self, key: Key, view: JobView) -> None:
        if view.log is None or not D.sinks_of(view.ref, self.filters()):
            return  # nobody listens: no log, no write
        observed, changes = derive(
            SinkKind(view.ref.kind), view.ref.name, view.log.observed, view.status
        )
        if not changes and observed == view.log.observed:
            self._route(key, view)
            return
        routed = D.sinks_of(view.ref, self.filters())
        delivered = D.job_cursor(view.cursors, routed) or 0
        view.log = view.log.append(observed, changes, _now_iso(), delivered)
        view.entries, view.log_seq = view.log.entries, view.log.seq
        self.dirty_jobs.add(key)  # written before anything of it is sent
        self.flush_wake.set()

    def _route(self, key: Key, view: JobView) -> None:
        entries, log_seq = view.sendable()
        for name in D.sinks_of(view.ref, self.filters()):
            sink = self.sinks[name]
            cursor = view.cursors.get(name, 0)
            work = D.pending(name, sink.flt, view.ref, entries, log_seq, cursor)
            sink.depth[key] = len(work.send)
            if work.send or work.skip_to > cursor:
                sink.dirty.add(key)
                sink.wake.set()

    def on_sink(self, event_type: str, body: Mapping[str, Any]) -> None:
        meta = body.get("metadata") or {}
        name = str(meta.get("name") or "")
        generation = int(meta.get("generation") or 0)
        old = self.sinks.get(name)
        if event_type != "DELETED" and old is not None and old.generation == generation:
            return  # a status write (ours): nothing to reconfigure
        self.sinks.pop(name, None)
        if old is not None:
            for task in (old.worker, old.secret_watch):
                if task is not None:
                    task.cancel()
        if event_type == "DELETED":
            with contextlib.suppress(KeyError):
                self.metrics.outbox.remove(name)
            return
        try:
            spec = EventSinkSpec.model_validate(body.get("spec") or {})
        except pydantic.ValidationError as err:
            log.warning("EventSink %s is invalid, nothing is sent to it: %s", name, err)
            return
        status = body.get("status") or {}
        sink = Sink(name, spec, generation)
        sink.delivered = int(status.get("delivered") or 0) if old is None else old.delivered
        sink.failed = int(status.get("failed") or 0) if old is None else old.failed
        sink.last_delivery = status.get("lastDeliveryTime") if old is None else old.last_delivery
        self.sinks[name] = sink
        sink.worker = self._spawn(self._sink_worker(sink), f"events-sink-{name}")
        if spec.auth_secret_ref is not None:
            sink.secret_watch = self._spawn(self._watch_secret(sink), f"events-secret-{name}")
        for key, view in self.jobs.items():
            if view.log is not None:
                self._observe(key, view)
            else:
                self._route(key, view)
        self.dirty_sinks.add(name)

    async def _watch_secret(self, sink: Sink) -> None:
        """Re-read the sink's token whenever its Secret changes. The watch names that one
        Secret (fieldSelector on its name), so no other Secret is ever read."""
        ref = sink.spec.auth_secret_ref
        assert ref is not None
        kind = WatchedKind(
            f"secret {ref.namespace}/{ref.name}",
            f"/api/v1/namespaces/{ref.namespace}/secrets",
            {"fieldSelector": f"metadata.name={ref.name}"},
        )

        def changed(*_: Any) -> None:
            self._spawn(self._refresh(sink), f"events-refresh-{sink.name}")

        informer: Informer[str] = Informer(
            self.client, kind, lambda obj: str(obj["metadata"].get("resourceVersion")), changed
        )
        await informer.run()

    async def _refresh(self, sink: Sink) -> None:
        if self.sinks.get(sink.name) is not sink or sink.target is None:
            return  # replaced, or still resolving for the first time (that reads it anyway)
        try:
            sink.target = await resolve(sink.spec, self.client)
            sink.problem = ""
        except SinkConfigError as err:
            # The old token stays in use; Ready=False says the Secret is broken now.
            sink.problem = sink.last_error = str(err)
        self.dirty_sinks.add(sink.name)
        self.flush_wake.set()

    # -- delivery -----------------------------------------------------------------------------

    async def _sink_worker(self, sink: Sink) -> None:
        while sink.target is None:
            try:
                sink.target = await resolve(sink.spec, self.client)
                sink.problem = ""
            except SinkConfigError as err:
                sink.problem = sink.last_error = str(err)
                self.dirty_sinks.add(sink.name)
                await asyncio.sleep(RESOLVE_RETRY_SECONDS)
        limit = asyncio.Semaphore(max(1, self.settings.concurrency))
        while True:
            await sink.wake.wait()
            sink.wake.clear()
            if sink.spec.suspend:
                continue
            for key in list(sink.dirty - sink.busy):
                sink.dirty.discard(key)
                sink.busy.add(key)
                await limit.acquire()
                self._spawn(self._drain(sink, key, limit), f"events-{sink.name}-{key[2]}")

    async def _drain(self, sink: Sink, key: Key, limit: asyncio.Semaphore) -> None:
        try:
            await self._deliver_job(sink, key)
        except Exception:  # a bug must not stop the sink's other jobs
            log.exception("delivering %s/%s to sink %s", key[1], key[2], sink.name)
        finally:
            limit.release()
            sink.busy.discard(key)
            if key in sink.dirty:
                sink.wake.set()

    def _current(self, sink: Sink, key: Key, uid: str) -> JobView | None:
        view = self.jobs.get(key)
        if view is None or view.ref.uid != uid or self.sinks.get(sink.name) is not sink:
            return None
        return view

    async def _deliver_job(self, sink: Sink, key: Key) -> None:
        view = self.jobs.get(key)
        if view is None or sink.target is None:
            return
        uid = view.ref.uid
        cursor = view.cursors.get(sink.name, 0)
        entries, log_seq = view.sendable()
        work = D.pending(sink.name, sink.flt, view.ref, entries, log_seq, cursor)
        size = sink.spec.batch_size or 1
        done = 0
        while done < len(work.send):
            chunk = work.send[done : done + size]
            ok, error = await self._deliver_one(sink, key, view.ref, chunk, batched=size > 1)
            current = self._current(sink, key, uid)
            if current is None:
                return
            if not ok:
                current.failures[sink.name] = current.failures.get(sink.name, 0) + len(chunk)
                current.errors[sink.name] = f"seq {chunk[0].seq}: {error}"[:1024]
            done += len(chunk)
            self._advance(sink, key, current, work.cursor_after(done))
            sink.depth[key] = len(work.send) - done
        if not work.send:
            current = self._current(sink, key, uid)
            if current is not None:
                self._advance(sink, key, current, work.skip_to)

    def _advance(self, sink: Sink, key: Key, view: JobView, cursor: int) -> None:
        if cursor > view.cursors.get(sink.name, 0):
            view.cursors[sink.name] = cursor
            self.dirty_jobs.add(key)
            self.flush_wake.set()

    async def _deliver_one(
        self,
        sink: Sink,
        key: Key,
        job: D.JobRef,
        recs: Sequence[TransitionRec],
        *,
        batched: bool,
    ) -> tuple[bool, str]:
        """Try until acknowledged or the retry policy gives up; (acknowledged, last error).
        One event, or consecutive events of one object in one batch that is acknowledged or
        refused as a whole. Stops early when the object is deleted or the sink changed (the
        caller then sees that)."""
        assert sink.target is not None
        events = [D.cloudevent(job, rec) for rec in recs]
        body: dict[str, Any] | list[dict[str, Any]] = events if batched else events[0]
        rec = recs[0]
        attempts = 0
        while attempts == 0 or self._current(sink, key, job.uid) is not None:
            attempts += 1
            started = time.monotonic()
            status, error = await post_event(self.session, sink.target, body)
            self.metrics.attempt_duration.labels(sink.name).observe(time.monotonic() - started)
            if 200 <= status < 300:
                sink.delivered += len(recs)
                sink.last_delivery = _now_iso()
                self.metrics.delivered.labels(sink.name).inc(len(recs))
                for done in recs:
                    age = _age(done.time) if done.time else None
                    if age is not None:
                        self.metrics.lag.labels(sink.name).observe(age)
                self.dirty_sinks.add(sink.name)
                return True, ""
            sink.last_error = f"{D.event_id(job, rec)}: {error}"[:1024]
            self.dirty_sinks.add(sink.name)
            if (status and not D.retryable(status)) or D.gives_up(sink.retry, attempts):
                sink.failed += len(recs)
                self.metrics.failed.labels(sink.name).inc(len(recs))
                log.warning(
                    "sink %s: giving up on event %s after %d attempt(s): %s",
                    sink.name,
                    D.event_id(job, rec),
                    attempts,
                    error,
                )
                return False, error
            self.metrics.retried.labels(sink.name).inc()
            await asyncio.sleep(D.backoff_seconds(sink.retry, attempts))
        return False, "abandoned: the job or the sink changed"

    # -- coalesced writes ---------------------------------------------------------------------

    async def flusher(self) -> None:
        while not self.stopping.is_set():
            await woken(self.flush_wake, 5.0)
            self.flush_wake.clear()
            await asyncio.sleep(self.settings.flush_seconds)
            await self.flush()

    async def flush(self) -> None:
        jobs, self.dirty_jobs = self.dirty_jobs, set()
        writes = [self._write_job(key) for key in jobs]
        for name, sink in self.sinks.items():
            self.metrics.outbox.labels(name).set(sum(sink.depth.values()))
        sinks, self.dirty_sinks = self.dirty_sinks, set()
        writes += [self._write_sink(name) for name in sinks if name in self.sinks]
        await asyncio.gather(*writes)

    async def _write_job(self, key: Key) -> None:
        view = self.jobs.get(key)
        if view is None:
            return
        kind, ns, name = key
        rows = []
        for sink in sorted(view.cursors)[:32]:
            row: dict[str, Any] = {"sink": sink, "lastDeliveredSequence": view.cursors[sink]}
            if view.failures.get(sink):
                row["failures"] = view.failures[sink]
            if view.errors.get(sink):
                row["lastError"] = view.errors[sink]
            rows.append(row)
        written = view.log_seq
        resource = D.OBJECT_KINDS.get(kind)
        if view.log is not None and resource is not None:
            path = resource.api_path(ns or None, name)
            status: dict[str, Any] = {"eventLog": {**view.log.wire(), "delivery": rows}}
        else:
            plural = D.JOB_PLURALS.get(kind)
            if plural is None:
                return
            status = {"delivery": rows}
            lowest = D.job_cursor(view.cursors, D.sinks_of(view.ref, self.filters()))
            if lowest is not None:
                status["transitionsDelivered"] = lowest
            path = f"{JOBS_API}/namespaces/{ns}/{plural}/{name}"
        try:
            # Only onto the object we logged (its uid), never a namesake created after it.
            if not await status_patch.write_status(self.client, path, view.ref.uid, status):
                return  # gone: its view goes with its DELETED event
            self.metrics.status_writes.labels("job" if view.log is None else kind).inc()
            if view.log is not None and written > view.persisted:
                view.persisted = written
                self._route(key, view)
        except ApiError as err:
            if not err.not_found:
                log.warning("writing delivery cursors of %s/%s: %s", ns, name, err)
                self.dirty_jobs.add(key)  # tried again at the next flush
        except (aiohttp.ClientError, TimeoutError) as err:
            log.warning("writing delivery cursors of %s/%s: %s", ns, name, err)
            self.dirty_jobs.add(key)

    async def _write_sink(self, name: str) -> None:
        sink = self.sinks[name]
        ready = not sink.problem
        status: dict[str, Any] = {
            "delivered": sink.delivered,
            "failed": sink.failed,
            "pending": sum(sink.depth.values()),
            "lastDeliveryTime": sink.last_delivery,
            "lastError": sink.last_error,
            "observedGeneration": sink.generation,
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True" if ready else "False",
                    "reason": "Resolved" if ready else "InvalidConfig",
                    "message": "" if ready else sink.problem[:1024],
                    "lastTransitionTime": _now_iso(),
                }
            ],
        }
        try:
            await self.client.merge_patch(f"{SINKS_API}/{name}/status", {"status": status})
            self.metrics.status_writes.labels("sink").inc()
        except ApiError as err:
            if not err.not_found:
                log.warning("writing status of EventSink %s: %s", name, err)
                self.dirty_sinks.add(name)
        except (aiohttp.ClientError, TimeoutError) as err:
            log.warning("writing status of EventSink %s: %s", name, err)
            self.dirty_sinks.add(name)

    async def stop(self) -> None:
        self.stopping.set()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for sink in self.sinks.values():
            if sink.worker is not None:
                sink.worker.cancel()
        with contextlib.suppress(Exception):
            await self.flush()
        if self._session is not None:
            await self._session.close()


def make_register(settings: EventsSettings, metrics: EventsMetrics) -> kopf_runner.Register:
    def register(registry: kopf.OperatorRegistry, ctx: OperatorContext) -> None:
        controller = EventsController(ctx.client, settings, metrics)
        probe = ProbeServer(metrics.registry, alive=lambda: True, ready=lambda: True)

        # Async handlers: kopf runs sync ones in a thread, away from the loop the workers live in.
        @kopf.on.event("events.sluice.dev", "v1alpha1", "eventsinks", registry=registry)
        async def sink_event(type: str, body: kopf.Body, **_: Any) -> None:
            controller.on_sink(type or "ADDED", body)

        objects = {resource.plural: kind for kind, resource in D.OBJECT_KINDS.items()}
        for resource in D.OBJECT_KINDS.values():

            @kopf.on.event(resource.group, resource.version, resource.plural, registry=registry)
            async def object_event(
                type: str, body: kopf.Body, resource: kopf.Resource, **_: Any
            ) -> None:
                controller.on_object(objects[resource.plural], type or "ADDED", body)

        kinds = {plural: kind for kind, plural in D.JOB_PLURALS.items()}
        for plural in kinds:

            @kopf.on.event("batch.sluice.dev", "v1alpha1", plural, registry=registry)
            async def job_event(
                type: str, body: kopf.Body, resource: kopf.Resource, **_: Any
            ) -> None:
                controller.on_job(kinds[resource.plural], type or "ADDED", body)

        @kopf.on.startup(registry=registry)
        async def start(**_: Any) -> None:
            controller._spawn(controller.flusher(), "events-flusher")
            if settings.metrics_port:
                await probe.start(settings.metrics_host, settings.metrics_port)

        @kopf.on.cleanup(registry=registry)
        async def stop(**_: Any) -> None:
            await controller.stop()
            await probe.stop()

    return register


def _operator(settings: EventsSettings | None = None) -> KopfOperator:
    return KopfOperator(
        "events",
        make_register(settings or EventsSettings(), EventsMetrics()),
        description="Job lifecycle transitions -> CloudEvents 1.0 at admin-defined EventSinks.",
        health_port=8085,
    )


async def main(argv: Sequence[str]) -> int:
    base = _operator()
    settings = parse_settings(
        EventsSettings,
        argv,
        prog="python -m operators events",
        description=base.description,
        prefix=base.prefix,
        defaults={"health_port": base.health_port},
    )
    logs.configure(settings.log_format, settings.log_level)
    # kopf reports every handler call at INFO: one line per watch event of every object.
    logging.getLogger("kopf.objects").setLevel(logging.WARNING)
    operator = _operator(settings)
    try:
        return await kopf_runner.run(operator, settings)
    except (kubeconfig.ConfigError, OSError) as err:
        log.error("operator events cannot start: %s", err)
        return 2
