"""The `jobs` operator: HybridJob and VCJob -> one PodGroup + pods, through the job core.

`python -m operators jobs [flags]` (or under `all`). Flags/variables: see
`operators.controllers.kopf_runner.KopfSettings` plus `JobsSettings` (prefix `--jobs-`,
`SLUICE_JOBS_`).

How it runs at scale (no handler writes to Pods, nothing persists per event):
- pods of jobs are watched by an informer (`pod_watch`: the API server selects pods with the job
  labels), which keeps a slim record per pod under its job and only marks the job dirty and
  notes pods that disappeared without us deleting them;
- jobs and PodGroups are watched with `@kopf.on.event` too: no progress or diff-base annotations
  are written, no finalizers are added; the job's status (written by us) is the only state;
- a reconcile worker takes dirty jobs, at most one reconcile per job at a time and at most one
  per `STATUS_INTERVAL` per job, so status writes coalesce to about one per job per second under
  churn, and creates/deletes pods with bounded concurrency;
- when more jobs are dirty than `reconcile_concurrency` reconciles can take, the oldest jobs (in
  the order this process first saw them) go first: under overload the jobs already on their way
  finish at the rate the operator and API server sustain, instead of every job's next step
  queueing behind every newer job's (throughput collapsed to a fraction of that rate);
- a job's status write is held back while the job only makes progress (Pending, Inqueue,
  Running, the same version and retry count: `STATUS_HOLD` from its first unwritten change),
  so admission, pod creation and Running go out in one write; a terminal phase, a restart or a
  delayed action is written at once (`Progress`);
- a job's transition Events are coalesced (`operators.jobs.coalesced_events`): the transitions
  of each `EVENT_INTERVAL` (counted from the first one held) go out in one Event, and all that
  is held goes out at once when the job reaches a terminal phase.
"""

from __future__ import annotations

import asyncio
import hashlib
import heapq
import itertools
import json
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final

import kopf
import pydantic

from operators.api import labels as L
from operators.api.batch import HybridJob, JobPhase, TransitionLevel, VCJob
from operators.api.scheduling import PodGroup, Pool, Queue
from operators.controllers import jobs_apply as AP
from operators.controllers.jobs_plugins import Plugins
from operators.controllers.kopf_runner import (
    KopfOperator,
    KopfSettings,
    OperatorContext,
    events_only,
)
from operators.controllers.kopf_runner import main as run_operator
from operators.controllers.pod_watch import watch_pods
from operators.jobs import pods as P
from operators.jobs import presets
from operators.jobs.coalesced_events import combine
from operators.jobs.observed import GroupObs, PodObs, group_obs, pod_obs
from operators.jobs.reconcile import (
    FINISHED_GROUP_PHASES,
    Event,
    Memory,
    Observed,
    Plan,
    reconcile,
)
from operators.jobs.shape import JobShape, from_hybridjob, from_vcjob
from operators.jobs.tables import TERMINAL
from operators.runtime.events import EventRecorder
from operators.runtime.informer import Informer, WatchedKind
from operators.runtime.informer import Key as PodKey
from operators.runtime.wake import woken

log = logging.getLogger(__name__)

STATUS_INTERVAL: Final = 1.0
"""Seconds between two reconciles (and so status writes) of one job."""
COUNT_INTERVAL = 5.0
"""Seconds between two counts of jobs by phase (`sluice_operator_objects`)."""
RECONCILE_CONCURRENCY: Final = 8
"""Default of `JobsSettings.reconcile_concurrency`."""
EVENT_INTERVAL: Final = 10.0
"""Seconds a job's transition Events are held, from the first one held (a terminal phase
writes them at once): a one-pod job that ends within it writes one Event in its life."""
STATUS_HOLD: Final = 5.0
"""Seconds a job's status write is held while the job only makes progress (`Progress`), from
its first unwritten change: a one-pod job writes Pending..Running once and its end once."""
HELD_PHASES: Final = frozenset({JobPhase.PENDING, JobPhase.INQUEUE, JobPhase.RUNNING})
POD_CONCURRENCY: Final = 32
"""Pod creates/deletes in flight at once, over all jobs."""
RECHECK_PROBLEMS: Final = 30.0
"""Seconds before a missing queue, pool, PriorityClass or sink is looked for again."""
RETRY_AFTER_ERROR: Final = 5.0
STOP_EVENTS_SECONDS: Final = 2.0
"""On shutdown, how long the held-back transition Events get to be written."""
STOP_RECONCILES_SECONDS: Final = 5.0
"""How long `stop` lets in-flight reconciles end, so their transitions are written, not lost."""
FORGET_DELETES: Final = 300.0
"""Seconds after which a delete whose DELETED event never came (the pod was already gone) is
forgotten."""
FORGET_CREATES: Final = 60.0
"""Seconds after which a create the watch never showed (the pod went before we saw it) is
forgotten: the next step creates it again if it is missing (AlreadyExists if not)."""
WAITING_FOR_ADMISSION: Final = frozenset({None, JobPhase.PENDING, JobPhase.RESTARTING})
RAN_GROUP_PHASES: Final = frozenset({"Running", "Unknown"})
"""Group phases the scheduler derives from bound members, not from an admission."""


@dataclass(frozen=True)
class JobsSettings(KopfSettings):
    reconcile_concurrency: int = RECONCILE_CONCURRENCY
    """Job steps (reconciles) in flight at once. A step is mostly one API call (the PodGroup's
    create, the pods' creates, a status write), so this bounds the operator's share of the API
    server. More is not faster when the API server or the machine is the limit: steps wait
    longer, jobs outlive the status and Event holds and write more (on a 2-core machine 8
    drained a flood fastest, with the fewest writes per job; docs/reliability.md, session 10)."""


Key = tuple[str, str, str]  # kind, namespace, name
JobPod = tuple[Key, PodObs]
"""What the operator keeps of a pod: its job and its record."""
JOB_PODS: Final = {"labelSelector": f"{L.JOB_NAME},{L.JOB_KIND}"}


@dataclass(frozen=True)
class Progress:
    """What of a job's status decides whether a change of it may be held (`STATUS_HOLD`): a
    change that keeps the phase among HELD_PHASES and the version, retry count and delayed
    actions as the API holds them is progress an operator restart derives again from the
    cluster (admission, pods created, bound, running). Anything else (a terminal phase, a
    restart, a delayed action's clock) is written at once: a restart must read it back."""

    phase: JobPhase | None
    version: int
    retry_count: int
    delayed: tuple[Any, ...]

    @classmethod
    def of(cls, memory: Memory) -> Progress:
        return cls(memory.phase, memory.version, memory.retry_count, memory.delayed)

    def may_hold(self, after: Progress) -> bool:
        return (
            after.phase in HELD_PHASES
            and (self.phase is None or self.phase in HELD_PHASES)
            and (self.version, self.retry_count, self.delayed)
            == (after.version, after.retry_count, after.delayed)
        )


@dataclass(frozen=True)
class HeldStatus:
    """A status write held back (`STATUS_HOLD`), as its step decided it: a pass that runs no
    step (a stop, a spec that no longer validates) writes it as it is, deciding nothing new."""

    status: dict[str, Any]
    digest: bytes
    progress: Progress


def job_pod(body: Mapping[str, Any]) -> JobPod:
    meta = body.get("metadata") or {}
    labels = meta.get("labels") or {}
    key = (str(labels.get(L.JOB_KIND, "")), str(meta.get("namespace")), str(labels.get(L.JOB_NAME)))
    return key, pod_obs(body)


@dataclass
class JobState:
    body: dict[str, Any]
    """The job as last watched, slimmed (`kept`): what it asks for, not what we wrote."""
    memory: Memory
    written: bytes = b""
    """Digest of the status this process last wrote (a 16-byte stand-in for a copy of it)."""
    gone: list[PodObs] = field(default_factory=list)
    deleting: dict[str, float] = field(default_factory=dict)
    """uids of pods we deleted -> when; until their DELETED event arrives (or it is long ago)."""
    creating: dict[str, float] = field(default_factory=dict)
    """Names of pods we created -> when; until the watch shows them (or it is long ago): the
    expectations that keep a lagging watch from causing a second create."""
    problems: dict[str, tuple[str, str]] = field(default_factory=dict)
    checked: tuple[int, float] = (-1, 0.0)  # (generation, time) of the last bad-input check
    rejected: dict[str, tuple[str, str]] = field(default_factory=dict)
    group_spec: Mapping[str, Any] | None = None
    """The PodGroup spec this process last sent (created or patched with)."""
    group_created: bool = False
    arrival: int = 0
    """Order in which this process first saw the job: the older job is reconciled first."""
    transitions: list[Event] = field(default_factory=list)
    """Transition Events not yet written (`EVENT_INTERVAL`)."""
    status_seen: bool = False
    """Whether the job has a status object (watched, or written by us): status fields are
    written one by one into it; a job without one gets it whole (`Applier.write_status`)."""
    in_api: Progress = Progress(None, 0, 0, ())
    """`Progress` of the status the API holds (as first watched, then as we wrote it)."""
    held_since: float | None = None
    """When a status change not yet written was first held (`STATUS_HOLD`); None: none is."""
    unwritten: HeldStatus | None = None
    """The newest status a step decided that the API has not confirmed (held back, or a step
    that failed after deciding, or a write whose answer was lost): what a pass that runs no
    step writes. Never an older one: each step replaces it, only a confirmed write clears it."""

    @property
    def uid(self) -> str:
        return str(self.body["metadata"].get("uid"))


KEPT_STATUS: Final = ("phase", "transitionsDelivered")
"""Status fields read after the first sight of a job; the rest is the job's Memory."""


def kept(body: Mapping[str, Any]) -> dict[str, Any]:
    """What the operator keeps of a watched job until its next event: the spec and metadata
    without managedFields, and of the status (which this operator wrote; its Memory holds what
    it decided) only KEPT_STATUS. A job's full status, with its transition log and replica rows,
    was most of the operator's memory per job."""
    meta = {k: v for k, v in (body.get("metadata") or {}).items() if k != "managedFields"}
    status = body.get("status") or {}
    return {
        "apiVersion": body.get("apiVersion"),
        "kind": body.get("kind"),
        "metadata": meta,
        "spec": body.get("spec") or {},
        "status": {k: status[k] for k in KEPT_STATUS if k in status},
    }


def digest(status: Mapping[str, Any]) -> bytes:
    text = json.dumps(status, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.blake2b(text.encode(), digest_size=16).digest()


def queue_name(body: Mapping[str, Any]) -> str:
    return str((body.get("metadata") or {}).get("name"))


def key_of(body: Mapping[str, Any]) -> Key:
    meta = body.get("metadata") or {}
    return (str(body.get("kind")), str(meta.get("namespace")), str(meta.get("name")))


def shape_of(body: Mapping[str, Any]) -> JobShape:
    if body.get("kind") == "HybridJob":
        return from_hybridjob(HybridJob.model_validate(body))
    return from_vcjob(VCJob.model_validate(body))


class JobsController:
    def __init__(
        self, ctx: OperatorContext, reconcile_concurrency: int = RECONCILE_CONCURRENCY
    ) -> None:
        self.ctx = ctx
        self.reconcile_concurrency = reconcile_concurrency
        self._counted = 0.0
        self.apply = AP.Applier(ctx.client, POD_CONCURRENCY)
        self.events = EventRecorder(ctx.client, "sluice-jobs")
        self.plugins = Plugins(ctx.client)
        self.jobs: dict[Key, JobState] = {}
        self.groups: dict[tuple[str, str], GroupObs] = {}
        self.group_specs: dict[tuple[str, str], dict[str, Any]] = {}
        # Groups set back to Pending by a restart, with the resourceVersion of that write, until
        # the scheduler admits them again (Inqueue): an older event (a scheduler status write
        # from before it, delivered late) must not make the job look admitted again, and a newer
        # Running/Unknown is believed only if the job's own pods hold the gang (`_ensure_group`).
        self.readmitted: dict[tuple[str, str], int] = {}
        # Groups this operator deleted, with the resourceVersion of the delete, until their
        # DELETED event: an event from before the delete, delivered after it, must not bring
        # back a group that is gone (a resumed job would be admitted by its old phase).
        self.released: dict[tuple[str, str], int] = {}
        self.pods: dict[Key, dict[PodKey, PodObs]] = {}
        """job -> its pods' records, kept from the pod informer's changes (`on_pod`)."""
        self.dirty: set[Key] = set()
        # The dirty jobs in the order they are started (oldest arrival first), and those whose
        # next pass must wait (`not_before`): heaps, so starting one costs log(n) however many
        # wait (a list rebuilt per start took 80 % of the operator's CPU at 25,000 waiting).
        # Each dirty job that is not running has one live entry (`_entry`: its token); a
        # running one has none until it ends. Superseded entries are skipped when popped.
        self._queue: list[tuple[int, int, Key]] = []
        self._later: list[tuple[float, int, int, Key]] = []
        self._entry: dict[Key, int] = {}
        self._tokens = itertools.count()
        self.not_before: dict[Key, float] = {}
        self.timers: dict[Key, float] = {}
        self.running: set[Key] = set()
        self.flush_due: dict[Key, float] = {}
        """Jobs with transition Events held back, and when they are written."""
        self.stopping = False
        """Set by `stop`: no new reconciles start, and transitions are written at once."""
        self.event_interval = EVENT_INTERVAL
        self.status_hold = STATUS_HOLD
        self.wake = asyncio.Event()
        self._arrivals = itertools.count()
        self._tasks: set[asyncio.Task[None]] = set()

    # -- watch side ---------------------------------------------------------------------------

    def mark(self, key: Key) -> None:
        state = self.jobs.get(key)
        if state is not None:
            self._enqueue(key, state.arrival)
            self.wake.set()

    def _enqueue(self, key: Key, arrival: int) -> None:
        if key not in self.dirty:
            self.dirty.add(key)
            if key not in self.running:  # else queued when its reconcile ends (`_run_one`)
                self._push(key, arrival)

    def _push(self, key: Key, arrival: int) -> None:
        """Give the job its one live entry (a new arrival, or back from a run)."""
        token = self._entry[key] = next(self._tokens)
        heapq.heappush(self._queue, (arrival, token, key))

    def on_job(self, event_type: str, body: Mapping[str, Any]) -> None:
        key = key_of(body)
        if event_type == "DELETED":
            self.forget(key, str(body["metadata"].get("uid")))
            return
        state = self.jobs.get(key)
        if state is None or state.body.get("metadata", {}).get("uid") != body["metadata"].get(
            "uid"
        ):
            # First sight (or a new job of the same name): what the status says was decided.
            if state is not None:
                self._flush_events(key, state)  # the old job's last transitions still get told
            memory = Memory.from_status(body.get("status"))
            self.jobs[key] = JobState(
                kept(body),
                memory,
                arrival=next(self._arrivals),
                status_seen="status" in body,
                in_api=Progress.of(memory),
            )
            if key in self.dirty and key not in self.running:
                self._push(key, self.jobs[key].arrival)  # in line as the new job it is
            self.mark(key)
            return
        state.status_seen = state.status_seen or "status" in body
        old_generation = state.body.get("metadata", {}).get("generation")
        state.body = kept(body)
        delivered = int((body.get("status") or {}).get("transitionsDelivered") or 0)
        if delivered > state.memory.log.delivered:
            state.memory = replace(state.memory, log=replace(state.memory.log, delivered=delivered))
        if body["metadata"].get("generation") != old_generation:
            self.mark(key)

    def forget(self, key: Key, uid: str) -> None:
        """The job with this uid is gone: drop what is kept of it. Only of that job: a job
        created again under its name (a late write of the old one found it) keeps its own."""
        self.plugins.forget(uid)
        state = self.jobs.get(key)
        if state is None or state.uid != uid:
            return  # the old job's lines were told when its successor came (`on_job`)
        del self.jobs[key]
        self._flush_events(key, state)  # a deleted job's last transitions still get told
        self.flush_due.pop(key, None)
        self.released.pop(key[1:], None)  # the group is named after its job (pods.group_name)
        self.dirty.discard(key)
        self._entry.pop(key, None)
        self.not_before.pop(key, None)
        self.timers.pop(key, None)

    def on_pod(self, _: str, pod: PodKey, new: JobPod | None, old: JobPod | None) -> None:
        """A pod changed (the informer's handler): keep its record under its job; a pod gone
        that we did not delete is remembered (as last seen) for the job's next step."""
        if old is not None and (new is None or new[0] != old[0]):
            pods = self.pods.get(old[0])
            if pods is not None:
                pods.pop(pod, None)
                if not pods:
                    del self.pods[old[0]]
            state = self.jobs.get(old[0])
            if state is not None and state.deleting.pop(old[1].uid, None) is None:
                state.gone.append(old[1])
            self.mark(old[0])
        if new is not None:
            self.pods.setdefault(new[0], {})[pod] = new[1]
            state = self.jobs.get(new[0])
            if state is not None:
                state.creating.pop(new[1].name, None)
            self.mark(new[0])

    def on_queue(self, _: str, __: PodKey, new: str | None, old: str | None) -> None:
        """A queue went away: the jobs that name it are checked again now (a missing queue is a
        condition on the job; otherwise a running job would not notice until its spec changes)."""
        if new is not None or old is None:
            return
        for key, state in self.jobs.items():
            if (state.body.get("spec") or {}).get("queue") == old:
                state.checked = (-1, 0.0)
                self.mark(key)

    def on_group(self, event_type: str, body: Mapping[str, Any]) -> None:
        meta = body.get("metadata") or {}
        gkey = (str(meta.get("namespace")), str(meta.get("name")))
        if event_type == "DELETED":
            self.groups.pop(gkey, None)
            self.group_specs.pop(gkey, None)
            self.readmitted.pop(gkey, None)
            self.released.pop(gkey, None)
        else:
            version = AP.resource_version(body)
            if gkey in self.released:
                # At or before the delete: whether the answer to a delete carries the delete's
                # revision or the object's last one, an event up to it is not a new group's.
                if version <= self.released[gkey]:
                    return
                del self.released[gkey]  # a group created after the delete
            if gkey in self.readmitted:
                if version < self.readmitted[gkey]:
                    return
                if (body.get("status") or {}).get("phase") not in ("Pending", *RAN_GROUP_PHASES):
                    del self.readmitted[gkey]
            new = (group_obs(body), dict(body.get("spec") or {}))
            if gkey in self.groups and (self.groups[gkey], self.group_specs.get(gkey)) == new:
                return  # nothing a job reads moved (scheduler counts, the events operator's log)
            self.groups[gkey], self.group_specs[gkey] = new
        for owner in meta.get("ownerReferences") or ():
            if owner.get("kind") in AP.PLURALS:
                key = (str(owner["kind"]), gkey[0], str(owner.get("name")))
                state = self.jobs.get(key)
                if state is not None and event_type == "DELETED":
                    state.group_created = False  # deleted by someone: create it again
                self.mark(key)

    # -- worker -------------------------------------------------------------------------------

    async def run(self, listed: Sequence[asyncio.Event] = ()) -> None:
        """The reconcile worker; it starts once every pod informer has listed (`listed`), so no
        job is judged from a view without its pods."""
        for event in listed:
            await event.wait()
        while not self.ctx.stop.is_set():
            now = time.monotonic()
            for key, due in list(self.timers.items()):
                if due <= now:
                    del self.timers[key]
                    self.mark(key)
            for key, due in list(self.flush_due.items()):
                if due <= now:
                    del self.flush_due[key]
                    if (state := self.jobs.get(key)) is not None:
                        self._flush_events(key, state)
            waits = [*self.timers.values(), *self.flush_due.values()]
            if not self.stopping:  # else no reconcile starts any more
                self._start_ready(now)
                if self._later:
                    waits.append(self._later[0][0])
            timeout = max(0.05, min(waits) - now) if waits else None
            self.wake.clear()
            await woken(self.wake, timeout)

    def _start_ready(self, now: float) -> None:
        """Start the oldest dirty jobs whose interval is over, up to the free reconcile slots
        (a reconcile ending wakes the loop for the next)."""
        while self._later and self._later[0][0] <= now:
            _, arrival, token, key = heapq.heappop(self._later)
            if self._entry.get(key) == token:
                heapq.heappush(self._queue, (arrival, token, key))
        free = self.reconcile_concurrency - len(self.running)
        while free > 0 and self._queue:
            arrival, token, key = heapq.heappop(self._queue)
            if self._entry.get(key) != token:
                continue  # superseded (a new job of the name, a later push) or forgotten
            if key not in self.dirty:
                del self._entry[key]
                continue
            due = self.not_before.get(key, 0.0)
            if due > now:
                heapq.heappush(self._later, (due, arrival, token, key))
                continue
            del self._entry[key]
            self.dirty.discard(key)
            self.running.add(key)
            task = asyncio.create_task(self._run_one(key), name=f"reconcile-{key[2]}")
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            free -= 1

    async def stop(self) -> None:
        # Reconciles still running would tell transitions after the flush below: let them end
        # first (bounded), with `_tell_transitions` writing at once from now on.
        self.stopping = True
        reconciles = [t for t in self._tasks if t.get_name().startswith("reconcile-")]
        # Held status writes go out too (`stopping` holds nothing), in the same bound.
        held = asyncio.create_task(self._write_held(), name="reconcile-held")
        self._tasks.add(held)
        held.add_done_callback(self._tasks.discard)
        reconciles.append(held)
        if reconciles:
            await asyncio.wait(reconciles, timeout=STOP_RECONCILES_SECONDS)
        for key, state in list(self.jobs.items()):
            self._flush_events(key, state)
        await self.events.drain(STOP_EVENTS_SECONDS)
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _write_held(self) -> None:
        """On stop: each status write held is made as its step decided it,
        `reconcile_concurrency` at a time. No step runs: a stopping operator creates and deletes
        no pods, and sends no group for admission (its successor decides from the cluster). A
        job whose step is running writes there (`stopping` holds nothing); a step that held
        its status has ended already (nothing after `_hold_status` awaits for a held phase)."""
        sem = asyncio.Semaphore(self.reconcile_concurrency)

        async def one(key: Key, state: JobState) -> None:
            async with sem:
                if key in self.running or self.jobs.get(key) is not state:
                    return
                self.running.add(key)
                try:
                    await self._write_held_status(key, state)
                except Exception:
                    log.exception("writing the held status of %s %s/%s failed", *key)
                finally:
                    self.running.discard(key)

        held = [(k, s) for k, s in self.jobs.items() if s.unwritten is not None]
        await asyncio.gather(*(one(k, s) for k, s in held))

    async def _run_one(self, key: Key) -> None:
        started, ok = time.monotonic(), False
        try:
            await self.reconcile(key)
            ok = True
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("reconciling %s %s/%s failed; retrying", *key)
            self.timers[key] = time.monotonic() + RETRY_AFTER_ERROR
        finally:
            self.running.discard(key)
            if (state := self.jobs.get(key)) is not None:  # not a job forgotten meanwhile
                self.not_before[key] = time.monotonic() + STATUS_INTERVAL
                if key in self.dirty and key not in self._entry:
                    self._push(key, state.arrival)  # marked while it ran
            self.wake.set()
            self.ctx.metrics.reconciled(time.monotonic() - started, ok)
            self._count_jobs()

    def _count_jobs(self) -> None:
        """Jobs by phase for the metrics, at most every COUNT_INTERVAL (it walks every job)."""
        now = time.monotonic()
        if now - self._counted < COUNT_INTERVAL:
            return
        self._counted = now
        phases: dict[str, int] = {}
        for state in self.jobs.values():
            phase = str((state.body.get("status") or {}).get("phase") or "Pending")
            phases[phase] = phases.get(phase, 0) + 1
        self.ctx.metrics.count_objects("job", phases)

    def _pods_of(self, key: Key) -> list[PodObs]:
        return list(self.pods.get(key, {}).values())

    async def _check_input(self, state: JobState, shape: JobShape) -> None:
        """Missing queue, pool, PriorityClass or sink: conditions on this job (re-checked)."""
        generation = int(state.body["metadata"].get("generation") or 0)
        last_gen, last_at = state.checked
        now = time.monotonic()
        if last_gen == generation and (not state.problems or now - last_at < RECHECK_PROBLEMS):
            return
        spec = state.body.get("spec") or {}
        wanted: list[tuple[str, str, str]] = []
        queue, pool, pc = spec.get("queue"), spec.get("pool"), spec.get("priorityClassName")
        if queue and queue != L.DEFAULT_QUEUE:
            wanted.append(("QueueNotFound", Queue.api_path(name=queue), f"queue {queue}"))
        if pool and pool != L.DEFAULT_POOL:
            wanted.append(("PoolNotFound", Pool.api_path(name=pool), f"pool {pool}"))
        if pc:
            path = f"/apis/scheduling.k8s.io/v1/priorityclasses/{pc}"
            wanted.append(("PriorityClassNotFound", path, f"PriorityClass {pc}"))
        for hook in spec.get("hooks") or ():
            sink = hook.get("sink")
            path = f"/apis/events.sluice.dev/v1alpha1/eventsinks/{sink}"
            wanted.append(("SinkNotFound", path, f"EventSink {sink}"))
        problems: dict[str, tuple[str, str]] = {}
        for reason, path, what in wanted:
            if await self.apply.exists(path) is False:
                old = problems.get(reason)
                text = f"{what} does not exist"
                problems[reason] = ("Valid", f"{old[1]}; {text}" if old else text)
        state.problems = problems
        state.checked = (generation, now)
        if problems:
            self.timers[key_of(state.body)] = now + RECHECK_PROBLEMS

    async def reconcile(self, key: Key) -> None:
        state = self.jobs.get(key)
        if state is None:
            return
        body = state.body
        if body.get("metadata", {}).get("deletionTimestamp"):
            return  # owner references take the pods and the group with the job
        try:
            shape = shape_of(body)
        except pydantic.ValidationError as err:
            self._tell(key, state, [Event("Warning", "InvalidSpec", str(err)[:1024])])
            # No step runs until the spec validates again, so the pass the hold's timer brings
            # would write nothing: what the last step decided and held is written now.
            await self._write_held_status(key, state)
            return
        await self._check_input(state, shape)
        memory = state.memory
        gkey = (shape.namespace, P.group_name(shape))
        await self._ensure_group(state, shape, gkey, memory)
        gone, state.gone = state.gone, []
        now = time.monotonic()
        for uid, at in list(state.deleting.items()):
            if now - at > FORGET_DELETES:
                del state.deleting[uid]
        for name, at in list(state.creating.items()):
            if now - at > FORGET_CREATES:
                del state.creating[name]
        obs = Observed(
            pods=tuple(self._pods_of(key)),
            gone=tuple(gone),
            group=self.groups.get(gkey),
            deleting=frozenset(state.deleting),
            creating=frozenset(state.creating),
            problems={**state.problems, **state.rejected},
            hooks=bool((body.get("spec") or {}).get("hooks")),
        )
        plan = reconcile(shape, memory, obs, time.time())
        await self._apply(key, state, shape, plan)

    async def _ensure_group(
        self, state: JobState, shape: JobShape, gkey: tuple[str, str], memory: Memory
    ) -> None:
        body = state.body
        group = AP.podgroup_body(shape, body.get("spec") or {}, body["metadata"])
        seen = self.groups.get(gkey)
        if (
            seen is not None
            and seen.phase in FINISHED_GROUP_PHASES
            and memory.phase in WAITING_FOR_ADMISSION
        ):
            # A finished group is out of scheduling; a restarted job asks for admission again.
            await self._readmit(state, gkey)
        elif (
            seen is not None
            and seen.phase in RAN_GROUP_PHASES
            and gkey in self.readmitted
            and memory.phase in WAITING_FOR_ADMISSION
        ):
            if self._holds_gang(key_of(body), state, shape):
                del self.readmitted[gkey]  # the members a task restart kept hold the gang
            else:
                # Written by a scheduler whose pod watch had not shown our deletes yet: a
                # Running built on pods that are gone, which it would keep (members that left
                # keep a group's phase). Sent back until the scheduler's view has caught up.
                await self._readmit(state, gkey)
        known = self.group_specs.get(gkey)
        if known is None and state.group_created:
            return  # created; its first event has not arrived yet
        if known is None and memory.phase in TERMINAL:
            return  # released (Plan.release_group) or removed: a final job needs none
        error, state.group_spec = await self.apply.ensure_podgroup(group, known, state.group_spec)
        if error:
            state.rejected["PodGroupRejected"] = ("Valid", error)
        else:
            state.group_created = True
            state.rejected.pop("PodGroupRejected", None)

    async def _readmit(self, state: JobState, gkey: tuple[str, str]) -> None:
        """Back to Pending: the scheduler admits the group again (its enqueue reserves the
        minimum anew) and only then does the job create pods. Our view is updated at once, so
        the stale phase cannot let this job create pods before that."""
        written = await self.apply.readmit_podgroup(*gkey)
        if written is not None:
            seen = self.groups.get(gkey)
            self.groups[gkey] = replace(seen or GroupObs(), phase="Pending")
            if written:
                self.readmitted[gkey] = written
        else:
            await self._drop_group(state, gkey)
            # No event of the group will come: the next pass creates it anew.
            self.mark(key_of(state.body))

    def _holds_gang(self, key: Key, state: JobState, shape: JobShape) -> bool:
        """Whether the job's pods, as this operator sees them (its own deletes included), hold
        the gang as the scheduler counts it: bound, alive and staying, or succeeded, at least
        the group's minMember."""
        version = state.memory.version
        held = sum(
            1
            for p in self._pods_of(key)
            if p.version >= version
            and not p.deleting
            and p.uid not in state.deleting
            and (p.phase == "Succeeded" or (p.alive and p.node))
        )
        return held >= max(P.gang_min(shape), 1)  # the group's minMember, as the scheduler's

    async def _drop_group(self, state: JobState, gkey: tuple[str, str]) -> None:
        deleted = await self.apply.delete_podgroup(*gkey)
        if deleted:
            self.released[gkey] = deleted
        self.groups.pop(gkey, None)
        self.group_specs.pop(gkey, None)
        state.group_created = False

    async def _apply(self, key: Key, state: JobState, shape: JobShape, plan: Plan) -> None:
        body = state.body
        if plan.delete:
            now = time.monotonic()
            state.deleting.update({p.uid: now for p in plan.delete})
            await self.apply.delete_pods(shape.namespace, plan.delete)
        # The deletes carry out the step's decision; from here on it is what happened.
        state.memory = plan.memory
        status = HeldStatus(plan.status, digest(plan.status), Progress.of(plan.memory))
        # Until written, this is what a pass that runs no step writes (stop, InvalidSpec):
        # never an older status, whatever happens to this step after here.
        state.unwritten = None if status.digest == state.written else status
        if any(t.level == TransitionLevel.JOB and t.to == "Restarting" for t in plan.transitions):
            # A restarted job waits for admission again, as Volcano's does.
            await self._readmit(state, (shape.namespace, P.group_name(shape)))
        if plan.create or plan.delete:
            # Host lists follow the replicas both ways (a scale-down deletes, creates nothing);
            # ensure writes only what changed.
            on = presets.enabled(shape, body["metadata"].get("annotations") or {})
            await self.plugins.ensure(shape, on)
        if plan.create:
            bodies = []
            for task, index in plan.create:
                pod = P.pod_body(shape, task, index, plan.memory.version)
                presets.decorate(shape, on, task, index, pod)
                bodies.append(pod)
            names = [b["metadata"]["name"] for b in bodies]
            now = time.monotonic()
            state.creating.update(dict.fromkeys(names, now))  # before the POSTs: the watch may win
            try:
                created, refused = await self.apply.create_pods(
                    bodies, lambda: self._wanted(key, state)
                )
            except BaseException:
                for name in names:
                    state.creating.pop(name, None)
                raise
            for name in set(names) - set(created):
                state.creating.pop(name, None)
            if refused:
                state.rejected["PodRejected"] = ("Valid", "; ".join(refused)[:2048])
                self.timers[key] = time.monotonic() + RECHECK_PROBLEMS
                self.mark(key)
            else:
                state.rejected.pop("PodRejected", None)
        if state.creating:
            # A create held back by an expectation (the pod not seen yet) is looked at again
            # when the expectation lapses, not at some unrelated later event.
            due = min(state.creating.values()) + FORGET_CREATES + 0.1
            self.timers[key] = min(self.timers.get(key, due), due)
        if status.digest == state.written:
            state.held_since = None  # back to what the API holds: nothing is held
        elif not self._hold_status(key, state, plan.memory) and not await self._write_status(
            key, state, status
        ):
            return
        self._tell(key, state, plan.events)
        if plan.requeue_after is not None:
            due = time.monotonic() + plan.requeue_after
            self.timers[key] = min(self.timers.get(key, due), due)
        if plan.release_group:
            await self._drop_group(state, (shape.namespace, P.group_name(shape)))
        if plan.delete_job:
            await self.apply.delete_job(*key, shape.uid)

    async def _write_status(self, key: Key, state: JobState, status: HeldStatus) -> bool:
        """Write `status`; False (and the job forgotten) when the job is gone or replaced."""
        whole = not state.status_seen
        if not await self.apply.write_status(*key, state.uid, status.status, whole):
            self.forget(key, state.uid)
            return False
        state.written, state.status_seen = status.digest, True
        state.in_api, state.held_since, state.unwritten = status.progress, None, None
        return True

    async def _write_held_status(self, key: Key, state: JobState) -> None:
        """Write the status held back as its step decided it, running no step: nothing is
        created, deleted or decided anew."""
        if state.unwritten is not None:
            await self._write_status(key, state, state.unwritten)

    def _hold_status(self, key: Key, state: JobState, memory: Memory) -> bool:
        """Whether this status write waits (`STATUS_HOLD` from the first change held): the
        step's timer brings a pass when it is due, which writes whatever is newest by then."""
        if self.stopping or not state.in_api.may_hold(Progress.of(memory)):
            return False
        now = time.monotonic()
        if state.held_since is None:
            state.held_since = now
        due = state.held_since + self.status_hold
        if now >= due:
            return False
        self.timers[key] = min(self.timers.get(key, due), due)
        return True

    def _wanted(self, key: Key, state: JobState) -> bool:
        """Whether this job (not a deleted one, nor a new one of its name) still exists."""
        return self.jobs.get(key) is state and not state.body["metadata"].get("deletionTimestamp")

    def _tell(self, key: Key, state: JobState, events: Sequence[Event]) -> None:
        """A step's Events. Another Event than a transition (an action such as `RestartTask`,
        `InvalidSpec`, a missing queue) is written at once, so the transitions held until
        then, this step's among them, go out before it: `kubectl describe` lists Events as
        they were written, and an action listed before the transitions that led to it (a
        pod's `-> Failed`) read as if it had come first."""
        others = [e for e in events if not e.transition]
        self._tell_transitions(key, state, [e for e in events if e.transition], bool(others))
        if others:
            self._post(state.body, others)

    def _tell_transitions(
        self, key: Key, state: JobState, events: Sequence[Event], now: bool = False
    ) -> None:
        """Transition Events: held EVENT_INTERVAL from the first one held and written together
        then (`run`); all at once when the job reaches a terminal phase (its story is told) or
        when `now` (another Event of the job follows them: `_tell`)."""
        if not events and not now:
            return
        state.transitions.extend(events)
        # A job replaced under its name (or gone) meanwhile: `flush_due` is keyed by name and
        # would be flushed from its successor's state, so this job's lines are written now.
        replaced = self.jobs.get(key) is not state
        if now or self.stopping or replaced or state.memory.phase in TERMINAL:
            self._flush_events(key, state)
        elif key not in self.flush_due:
            self.flush_due[key] = time.monotonic() + self.event_interval
            self.wake.set()

    def _flush_events(self, key: Key, state: JobState) -> None:
        if self.jobs.get(key, state) is state:
            self.flush_due.pop(key, None)  # else it is the timer of a successor of its name
        if state.transitions:
            events, state.transitions = combine(state.transitions), []
            self._post(state.body, events)

    def _post(self, body: Mapping[str, Any], events: Sequence[Event]) -> None:
        meta = body.get("metadata") or {}
        involved = {
            "apiVersion": str(body.get("apiVersion")),
            "kind": str(body.get("kind")),
            "name": str(meta.get("name")),
            "namespace": str(meta.get("namespace")),
            "uid": str(meta.get("uid")),
        }
        # In order: the parts of a split flush are read as one story (`kubectl describe`).
        self.events.post_in_order(involved, [(ev.type, ev.reason, ev.message) for ev in events])


def controller_for(ctx: OperatorContext) -> JobsController:
    """The controller `register` runs, with the operator's settings. `OPERATOR.settings_class`
    makes them JobsSettings; a caller running the operator with plain KopfSettings gets the
    defaults of the jobs' own fields."""
    settings = ctx.settings if isinstance(ctx.settings, JobsSettings) else JobsSettings()
    return JobsController(ctx, settings.reconcile_concurrency)


def register(registry: kopf.OperatorRegistry, ctx: OperatorContext) -> None:
    controller = controller_for(ctx)
    pods = watch_pods(registry, ctx, job_pod, controller.on_pod, JOB_PODS)
    queues = Informer(
        ctx.client,
        WatchedKind(Queue.plural, Queue.api_path(), optional=True),
        queue_name,
        controller.on_queue,
        watch_timeout_seconds=ctx.settings.watch_timeout_seconds,
    )

    @kopf.on.event(
        PodGroup.group,
        PodGroup.version,
        PodGroup.plural,
        labels={L.MANAGED_BY: P.MANAGER},
        registry=registry,
    )
    async def group_event(type: str, body: kopf.Body, **_: Any) -> None:
        controller.on_group(type or "ADDED", body)

    # Handlers are coroutines: kopf would run plain functions in worker threads, and the
    # controller's state (and its asyncio.Event) belongs to the event loop.
    for plural in AP.PLURALS.values():

        @kopf.on.event("batch.sluice.dev", "v1alpha1", plural, registry=registry)
        async def job_event(type: str, body: kopf.Body, **_: Any) -> None:
            controller.on_job(type or "ADDED", body)

    @kopf.on.startup(registry=registry)
    async def start(**_: Any) -> None:
        listed = [informer.synced for informer in pods]
        task = asyncio.create_task(controller.run(listed), name="jobs-reconciler")
        controller._tasks.add(task)
        watch = asyncio.create_task(queues.run(), name="jobs-queues")
        controller._tasks.add(watch)

    @kopf.on.cleanup(registry=registry)
    async def stop(**_: Any) -> None:
        await controller.stop()


OPERATOR = KopfOperator(
    "jobs",
    register,
    description="HybridJob and VCJob -> PodGroup + pods (the job core), with plugins and presets.",
    configure=events_only,
    health_port=8081,
    settings_class=JobsSettings,
)


async def main(argv: Sequence[str]) -> int:
    return await run_operator(OPERATOR, argv)
