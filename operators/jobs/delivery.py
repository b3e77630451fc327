"""Which job transitions go to which EventSink, as what CloudEvent, and when to try again.

Pure: the events operator feeds it what it watched (sinks, a job's spec and status) and applies
what it returns (HTTP posts, cursor writes). Routing is the union of two ways in:

- a sink's `spec.filter` is an admin's subscription: every transition of every job it matches
  (an unset list inside the filter matches everything; a sink without `filter` subscribes to
  nothing and only gets what hooks send it);
- a job's `hooks[]` name sinks and the levels/transitions they want.

Jobs can only name sinks, never URLs, so nothing a user writes makes the operator call an address
an admin did not define.

Per sink and job, the cursor `lastDeliveredSequence` means: every transition up to it is done for
this sink (acknowledged by the receiver, not wanted by it, or given up on after the retry policy).
Transitions are sent one at a time in `seq` order, so a receiver never sees seq n+1 of a job
before n was acknowledged.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from operators.api.batch import Hook, TransitionLevel
from operators.api.events import CLOUDEVENT_TYPE_PREFIX, EventFilter, RetryPolicy
from operators.api.scheduling import PodGroup, Queue
from operators.jobs.translog import TransitionRec

SPEC_VERSION: Final = "1.0"
CONTENT_TYPE: Final = "application/cloudevents+json"
BATCH_CONTENT_TYPE: Final = "application/cloudevents-batch+json"
DATA_CONTENT_TYPE: Final = "application/json"
JOB_PLURALS: Final = {"HybridJob": "hybridjobs", "VCJob": "vcjobs"}
#: Kinds whose transitions the events operator derives itself (module sources): only sinks
#: that name them in `filter.kinds` get them.
OBJECT_KINDS: Final = {"PodGroup": PodGroup, "Queue": Queue}
DEFAULT_RETRY: Final = RetryPolicy()
DEFAULT_TIMEOUT_SECONDS: Final = 10


@dataclass(frozen=True, slots=True)
class JobRef:
    """What routing needs to know about a job: who it is and which hooks it declares."""

    kind: str
    namespace: str
    name: str
    uid: str
    hooks: tuple[Hook, ...] = ()

    @property
    def source(self) -> str:
        """CloudEvents `source`: the object's API path (unique per name; `id` adds the uid)."""
        resource = OBJECT_KINDS.get(self.kind)
        if resource is not None:
            return resource.api_path(self.namespace or None, self.name)
        plural = JOB_PLURALS.get(self.kind, self.kind.lower() + "s")
        return f"/apis/batch.sluice.dev/v1alpha1/namespaces/{self.namespace}/{plural}/{self.name}"


def _listed(values: Sequence[Any] | None, value: str) -> bool:
    return values is None or value in values


def filter_admits_job(flt: EventFilter, job: JobRef) -> bool:
    """Does the filter subscribe to this object at all? PodGroups and Queues only when their kind
    is listed (every subscribed object costs writes); a Queue has no namespace, so a filter that
    limits namespaces gets none."""
    if job.kind in OBJECT_KINDS and flt.kinds is None:
        return False
    # A Queue's namespace is "", which no `namespaces` list holds.
    return _listed(flt.namespaces, job.namespace) and _listed(flt.kinds, job.kind)


def filter_admits(flt: EventFilter, job: JobRef, rec: TransitionRec) -> bool:
    """`levels` are the levels of job transitions; a PodGroup's or Queue's own is its kind."""
    level_ok = job.kind in OBJECT_KINDS or _listed(flt.levels, rec.level.value)
    return filter_admits_job(flt, job) and level_ok and _listed(flt.transitions, rec.to)


def hook_admits(hook: Hook, rec: TransitionRec) -> bool:
    return _listed(hook.levels, rec.level.value) and _listed(hook.transitions, rec.to)


def sinks_of(job: JobRef, filters: Mapping[str, EventFilter | None]) -> list[str]:
    """Existing sinks that may receive transitions of `job` (hooks first, then subscriptions)."""
    named = [h.sink for h in job.hooks if h.sink in filters]
    subscribed = [
        name
        for name, flt in sorted(filters.items())
        if flt is not None and filter_admits_job(flt, job)
    ]
    return list(dict.fromkeys([*named, *subscribed]))


def missing_sinks(job: JobRef, existing: Iterable[str]) -> list[str]:
    have = set(existing)
    return sorted({h.sink for h in job.hooks if h.sink not in have})


def wants(sink: str, flt: EventFilter | None, job: JobRef, rec: TransitionRec) -> bool:
    """Does `sink` (with its filter) get this transition of this job?"""
    if flt is not None and filter_admits(flt, job, rec):
        return True
    return any(h.sink == sink and hook_admits(h, rec) for h in job.hooks)


@dataclass(frozen=True, slots=True)
class Pending:
    """The work of one sink for one job: what to send, in order, and how far the cursor may move
    without sending anything (over transitions the sink does not want)."""

    send: tuple[TransitionRec, ...]
    skip_to: int

    def cursor_after(self, acknowledged: int) -> int:
        """The cursor once `send[:acknowledged]` are done: up to the next unsent one, or all."""
        if acknowledged < len(self.send):
            return self.send[acknowledged].seq - 1
        return self.skip_to


def pending(
    sink: str,
    flt: EventFilter | None,
    job: JobRef,
    entries: Iterable[TransitionRec],
    log_seq: int,
    cursor: int,
) -> Pending:
    """Transitions after `cursor` this sink wants, oldest first. Entries that already fell out of
    the job's window are gone (the jobs operator counts them in `transitionsDropped`)."""
    after = sorted((e for e in entries if e.seq > cursor), key=lambda e: e.seq)
    send = tuple(e for e in after if wants(sink, flt, job, e))
    return Pending(send, max(cursor, log_seq, after[-1].seq if after else 0))


def event_id(job: JobRef, rec: TransitionRec) -> str:
    """Stable across retries and restarts, so a receiver can de-duplicate."""
    return f"{job.uid}-{rec.seq}"


def event_type(rec: TransitionRec) -> str:
    return f"{CLOUDEVENT_TYPE_PREFIX}.{rec.level.value}.{rec.to}".lower()


def cloudevent(job: JobRef, rec: TransitionRec) -> dict[str, Any]:
    """A CloudEvents 1.0 event in structured JSON mode (the whole event is the HTTP body)."""
    is_job = job.kind not in OBJECT_KINDS
    data: dict[str, Any] = {
        "kind": job.kind,
        "namespace": job.namespace or None,
        "job": job.name if is_job else None,
        "uid": job.uid,
        "seq": rec.seq,
        "level": rec.level.value,
        "name": rec.name,
        "from": rec.from_,
        "to": rec.to,
        "reason": rec.reason or None,
        "message": rec.message or None,
        "deadline": rec.deadline or None,
        "peers": list(rec.peers) or None,
    }
    event: dict[str, Any] = {
        "specversion": SPEC_VERSION,
        "id": event_id(job, rec),
        "source": job.source,
        "type": event_type(rec),
        "subject": rec.name if rec.level is not TransitionLevel.JOB else job.name,
        "datacontenttype": DATA_CONTENT_TYPE,
        "data": {k: v for k, v in data.items() if v is not None},
    }
    if rec.time:
        event["time"] = rec.time
    return event


def backoff_seconds(policy: RetryPolicy, attempt: int) -> float:
    """Wait after failed attempt number `attempt` (1-based): backoff, 2x, 4x ... capped at max."""
    exponent = max(0, attempt - 1)
    if exponent >= 32:
        return float(policy.max_backoff_seconds)
    return float(min(policy.backoff_seconds * (1 << exponent), policy.max_backoff_seconds))


def gives_up(policy: RetryPolicy, attempts: int) -> bool:
    return attempts >= policy.max_attempts


def retryable(status: int) -> bool:
    """HTTP statuses worth another attempt; other 4xx mean the receiver refuses this event for
    good (retrying would block the job's later events forever)."""
    return status >= 500 or status in (408, 409, 425, 429)


def job_cursor(cursors: Mapping[str, int], sinks: Iterable[str]) -> int | None:
    """`status.transitionsDelivered`: delivered to every sink the job goes to (None: no sinks)."""
    values = [cursors.get(s, 0) for s in sinks]
    return min(values) if values else None
