"""PodGroup, Queue and Pool status as the scheduler sees it, written coalesced.

The scheduler writes only the status fields it computes; the pool, queue and podgroup operators
own the rest (docs/admin.md has the table). Every write names only the writer's own fields, so two
writers never overwrite each other. A PodGroup's is a JSON patch that lands only on the group it
was computed for (`status_patch`: its first op tests the uid): a late write must not land on a
group deleted and created again under the name (a job re-applied); a Queue's, a Pool's and a
pod's are merge patches.

Each cycle computes the desired status of every live group from the cache and the session's
output, compares it with what the API already holds (as last seen by the watch), and writes only
what differs: at most one write per object per cycle, none when nothing changed. Three kinds
of change are held back so that they cannot become a write storm: messages that change while the
reason stays the same (at most every `message_interval` seconds: an explanation with a moving
figure in it), changes of the member counts and of condition reasons alone, every condition's
status as written (each waits `count_interval` seconds from when it was first seen, and goes out
with whatever came meanwhile: a gang's pods are bound and turn Running one by one; an admitted
group is explained `Admitted`, then `Waiting` for its pods, then `Scheduled`), and a Queue's or
Pool's status (at most one write per `cluster_interval`, the newest value). A held-back change is
not dropped: a timer asks for a pass over the group when its interval has run out, so the last
value lands even if nothing else happens. Phase changes, condition status flips and
delayed-preemption changes go out at once (with whatever was held), so each phase a group goes
through is written, in order.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import math
from collections.abc import Awaitable, Callable, Iterable, Mapping
from decimal import Decimal
from typing import Any, Literal

import aiohttp

from operators.api import labels as L
from operators.api.quantity import format_quantity
from operators.api.scheduling import PodGroup, Pool, Queue
from operators.controllers.scheduler_phase import GroupCounts, next_phase
from operators.runtime import records as R
from operators.runtime import status_patch
from operators.runtime.cache import FINISHED_PHASES, SchedulerCache
from operators.runtime.client import ApiError, KubeClient
from operators.runtime.metrics import SchedulerMetrics
from operators.scheduler import decisions as D
from operators.scheduler import snapshot as S
from operators.scheduler.session import PoolStatus, QueueStatus, SessionConfig, SessionResult

log = logging.getLogger(__name__)

OWNED_CONDITIONS = (
    "Scheduled",
    "Unschedulable",
    "Enqueued",
    "Privileged",
    "WillEvict",
    "PoolFallback",
    R.CONSOLIDATED,
)
POOL_NOT_FOUND = "PoolNotFound"
"""Reason of `PoolFallback=True` and of its Warning Event: `spec.pool` names no Pool, so the
group is placed in `default` (as the nodes of a deleted pool are)."""
MOVE_WINDOW = SessionConfig().consolidation_window
"""The live loop runs the core with the default window (`SchedulerLoop.session_config`)."""
Warn = Callable[[str, str, str], None]
"""(group uid, reason, message) -> post a Warning Event about that group."""
_HAPPY = (D.ReasonCode.SCHEDULED, D.ReasonCode.ADMITTED)
SHOWN_WHILE_RUNNING = (D.ReasonCode.QUEUE_MISSING,)
"""Reasons a running group's waiting pods are shown with (`Unschedulable=True`, Scheduled stays
True): the pods of a job whose queue was deleted wait for good."""
BROKEN_BACKOFF_MIN = 1.0
BROKEN_BACKOFF_MAX = 60.0
"""Seconds before a group whose status could not be built is visited again (doubling)."""
SOLE_FIELDS = ("preemption", "lastEviction")
"""PodGroup status fields no one but the scheduler writes: while it leads, what it last sent of
them is their value, whatever an older watch event still shows."""


@dataclasses.dataclass
class _Sent:
    """SOLE_FIELDS of a group's last status write, and whether the API confirmed that write."""

    values: dict[str, Any]
    confirmed: bool = False


Request = Callable[[], Awaitable[bool]]
"""One status write, sent when called: False when its object is gone (deleted or replaced)."""

_NO_MARK = object()  # write_groups: the session changed no delayed-preemption mark of the group


@dataclasses.dataclass(frozen=True)
class _Pass:
    """What one status pass knows from its session, besides the cache."""

    result: SessionResult
    now: float
    now_text: str
    decided: dict[str, S.GroupPhase]  # group uid -> phase the session decided
    preemption: dict[str, dict[str, Any] | None]  # group uid -> new status.preemption
    moved: dict[str, str]  # group uid -> message of its consolidation move
    placed: set[str]  # group uids the session bound pods of


def desired_group_status(
    rec: R.GroupRecord,
    old: Mapping[str, Any],
    counts: GroupCounts,
    phase: S.GroupPhase,
    mark: Any,
    evicted: Mapping[str, Any] | None,
    *,
    placed_again: bool,
    explanation: D.Explanation | None,
    now_text: str,
    missing_pool: str,
    moved_message: str,
) -> dict[str, Any]:
    """The status fields the scheduler owns of one group, from the status as written (`old`),
    its counts and phase, this session's delayed-preemption mark (`_NO_MARK`: none changed),
    eviction stamp and explanation. `placed_again`: the group is bound again after a move."""
    desired: dict[str, Any] = {
        "phase": phase.value,
        "running": counts.running,
        "pending": counts.pending,
        "observedGeneration": rec.generation,
    }
    if mark is not _NO_MARK:
        desired["preemption"] = mark
    elif (
        phase is S.GroupPhase.RUNNING
        and old.get("preemption")
        and (old["preemption"].get("role") == S.PreemptionRole.PRIVILEGED.value)
    ):
        desired["preemption"] = None  # the preemptor got its room
    else:
        desired["preemption"] = old.get("preemption")
    if evicted is not None or old.get("lastEviction"):
        desired["lastEviction"] = evicted or old["lastEviction"]
        if evicted is None and R.consolidated_to(old) and placed_again:
            desired["lastEviction"] = R.placed_again(old["lastEviction"])
    desired["conditions"] = desired_conditions(
        phase,
        explanation,
        old.get("conditions") or (),
        now_text,
        desired["preemption"],
        missing_pool,
        moved_message,
    )
    return desired


def count_members(cache: SchedulerCache, group_uid: str) -> GroupCounts:
    """Leaving pods are no members (Volcano does not count Releasing tasks as allocated either):
    a restarted job's group, set back to Pending by the jobs operator, must not be read as
    Running from the pods it is killing. Only bindings the watch confirmed count as bound: a
    Binding POST still in flight may fail, and a phase written from it would flap (Running,
    then back) for jobs and hooks to see."""
    return GroupCounts(*cache.member_counts(group_uid))


def _condition(
    type_: str, status: bool, reason: str, message: str, old: Mapping[str, Any] | None, now: str
) -> dict[str, Any]:
    status_text = "True" if status else "False"
    unchanged = old is not None and old.get("status") == status_text
    return {
        "type": type_,
        "status": status_text,
        "reason": reason,
        "message": message[:1024],
        "lastTransitionTime": (old or {}).get("lastTransitionTime") if unchanged else now,
    }


def desired_conditions(
    phase: S.GroupPhase,
    explanation: D.Explanation | None,
    old: Iterable[Mapping[str, Any]],
    now: str,
    preemption: Mapping[str, Any] | None = None,
    missing_pool: str = "",
    consolidated: str = "",
) -> list[dict[str, Any]]:
    """``consolidated``: this session moved the group (the message why); its ``Consolidated``
    condition is stamped now. Otherwise an existing one is kept as written: its time is when
    the group was last moved, which the core reads back (PodGroup.consolidated_at)."""
    by_type = {str(c.get("type")): c for c in old}
    running = phase is S.GroupPhase.RUNNING
    enqueued = phase in (S.GroupPhase.INQUEUE, S.GroupPhase.RUNNING)
    bound = (D.ReasonCode.SCHEDULED.value, "minMember pods are bound")
    if running:
        reason, message = bound
        blocked = False
        # Its pods beyond the minimum waiting for room are no trouble (that changes with every
        # session); held back by a problem no room solves, they are shown.
        if explanation is not None and explanation.code in SHOWN_WHILE_RUNNING:
            reason, message, blocked = explanation.code.value, explanation.message, True
    elif explanation is not None:
        reason, message = explanation.code.value, explanation.message
        blocked = explanation.code not in _HAPPY
    else:
        reason, message = "Waiting", "waiting for a scheduling cycle"
        blocked = False
    out = [
        dict(c) for t, c in by_type.items() if t not in OWNED_CONDITIONS
    ]  # others' conditions stay
    if not consolidated and R.CONSOLIDATED in by_type:
        out.append(dict(by_type[R.CONSOLIDATED]))
    elif consolidated:
        out.append(
            {
                "type": R.CONSOLIDATED,
                "status": "True",
                "reason": D.EvictReason.CONSOLIDATED.value,
                "message": consolidated[:1024],
                "lastTransitionTime": now,
            }
        )
    out.append(
        _condition(
            "Enqueued",
            enqueued,
            "Admitted" if enqueued else reason,
            "quota reserved" if enqueued else message,
            by_type.get("Enqueued"),
            now,
        )
    )
    scheduled = bound if running else (reason, message)
    out.append(_condition("Scheduled", running, *scheduled, by_type.get("Scheduled"), now))
    out.append(
        _condition(
            "Unschedulable",
            blocked,
            reason,
            message if blocked else "",
            by_type.get("Unschedulable"),
            now,
        )
    )
    # Delayed preemption, visible in `kubectl describe`: the deadline is in the message and in
    # status.preemption (the machine-readable copy the scheduler reads back after a restart).
    for role in (S.PreemptionRole.PRIVILEGED.value, S.PreemptionRole.WILL_EVICT.value):
        active = bool(preemption) and (preemption or {}).get("role") == role
        if not active and role not in by_type:
            continue
        text = ""
        if active and preemption is not None:
            peers = ", ".join(preemption.get("peers") or ())
            text = f"until {preemption.get('deadline')}; peers: {peers}"
        out.append(_condition(role, active, "DelayedPreemption", text, by_type.get(role), now))
    # Shown only once a group named a missing pool; afterwards kept, False, as history.
    if missing_pool or "PoolFallback" in by_type:
        if missing_pool:
            reason, text = POOL_NOT_FOUND, pool_fallback_message(missing_pool)
        else:
            reason, text = "PoolFound", ""
        old_fallback = by_type.get("PoolFallback")
        out.append(_condition("PoolFallback", bool(missing_pool), reason, text, old_fallback, now))
    return out


def missing_group_message(rec: R.PodRecord) -> str:
    return (
        f"PodGroup {rec.group_name!r} does not exist in namespace {rec.namespace!r}: the pod "
        "waits until it is created (the group is named by the pod's annotation "
        f"{' or '.join(L.POD_GROUP_KEYS)})"
    )


def pool_fallback_message(pool: str) -> str:
    return f"pool {pool!r} does not exist; the group is placed in the {S.DEFAULT_POOL!r} pool"


def _last_eviction(d: D.Evict, now_text: str, peer_ref: Callable[[str], str]) -> dict[str, Any]:
    """status.lastEviction: what the events operator turns into an `Evicted` notice."""
    out: dict[str, Any] = {"reason": d.reason.value, "time": now_text, "message": d.message[:1024]}
    if d.preemptor:
        out["preemptor"] = peer_ref(d.preemptor)
    if d.moved_to:
        out["movedTo"] = [{"node": node, "pods": pods} for node, pods in d.moved_to]
    return out


def _moved(status: Mapping[str, Any], evicted: Mapping[str, Any] | None, now: float) -> bool:
    """Was the group's last eviction a consolidation move, less than MOVE_WINDOW ago?"""
    until = R.moved_until(status, MOVE_WINDOW, evicted)
    return until is not None and now < until


def _comparable(status: Mapping[str, Any]) -> Any:
    conds = status.get("conditions") or []
    return (
        status.get("phase"),
        status.get("running"),
        status.get("pending"),
        R.dumps_compact(status.get("preemption")),
        tuple(sorted((str(c.get("type")), c.get("status"), c.get("reason")) for c in conds)),
    )


def _coalescible(desired: Mapping[str, Any], held: Mapping[str, Any]) -> bool:
    """Whether `desired` differs from `held` only in the member counts and in condition reasons
    (each condition's status the same): a change that may wait `count_interval`. A one-pod
    job's group is `Admitted`, then `Waiting` for its pod, then `Scheduled` with one pending
    member within a second or two: each was a write of its own."""
    a, b = _comparable(desired), _comparable(held)
    return bool(a[0] == b[0] and a[3] == b[3] and _statuses(a[4]) == _statuses(b[4]))


def _statuses(conditions: tuple[tuple[str, Any, Any], ...]) -> tuple[tuple[str, Any], ...]:
    return tuple((type_, status) for type_, status, _ in conditions)


def _messages(status: Mapping[str, Any]) -> Any:
    return tuple(
        sorted((str(c.get("type")), c.get("message")) for c in status.get("conditions") or [])
    )


def format_resources(values: Mapping[str, int]) -> dict[str, str]:
    out = {}
    for name, amount in values.items():
        if name == S.CPU:
            out[name] = format_quantity(Decimal(amount) / 1000)
        elif name.endswith("-milli"):
            continue
        else:
            out[name] = format_quantity(amount)
    return out


# A JSON merge patch keeps the keys it leaves out, and format_resources leaves out zeros: a
# resource that fell to zero would keep its last amount in the API (a queue showing GPUs that
# nothing holds). These names, and any a map held before, are sent as null (removed) instead.
CLEARED = (S.CPU, S.MEMORY, S.GPU, S.PODS)


def resource_patch(values: Mapping[str, int], before: Mapping[str, Any] | None) -> dict[str, Any]:
    out: dict[str, Any] = dict.fromkeys((*CLEARED, *(before or {})))
    out.update(format_resources(values))
    return out


class StatusWriter:
    def __init__(
        self,
        client: KubeClient,
        cache: SchedulerCache,
        metrics: SchedulerMetrics,
        concurrency: int,
        message_interval: float = 10.0,
        warn: Warn | None = None,
        retry_seconds: float = 1.0,
        count_interval: float = 0.0,
        cluster_interval: float = 0.0,
    ) -> None:
        self.client = client
        self.cache = cache
        self.metrics = metrics
        self._sem = asyncio.Semaphore(concurrency)
        self._in_flight: set[str] = set()
        # group uid -> key of groups whose pass was skipped while their write was in flight: the
        # write's end asks for another pass (its watch echo may have come before the answer, and
        # then nothing else would).
        self._owed: dict[str, tuple[str, str]] = {}
        # object key (group uid, `pod/<uid>`) -> when its status was last written
        self._last_write: dict[str, float] = {}
        self._message_interval = message_interval
        self._count_interval = count_interval
        # group uid -> (its record, what else its status was made of) when a pass last found
        # nothing of it to write
        self._unchanged: dict[str, tuple[R.GroupRecord, tuple[Any, ...]]] = {}
        # group uid -> when a change of its counts alone was first held back (not written yet)
        self._counts_since: dict[str, float] = {}
        # group uid -> the timer that asks for a pass once a held-back change may be written
        self._held: dict[str, asyncio.TimerHandle] = {}
        self._warn = warn
        self._tasks: set[asyncio.Task[None]] = set()
        self._last_queue: dict[str, Any] = {}
        self._last_pool: dict[str, Any] = {}
        # Queue/Pool status key -> the newest write wanted and not yet known to be in the API.
        self._latest: dict[str, tuple[str, dict[str, Any], Callable[[], None]]] = {}
        self._retry_seconds = retry_seconds
        self._cluster_interval = cluster_interval
        self._cluster_sent: dict[str, float] = {}  # Queue/Pool status key -> when last sent
        self._closing = False
        # Delayed-preemption marks of implicit groups have no object to live in: memory only.
        self.implicit_marks: dict[str, S.PreemptionMark] = {}
        self._last_pod_reason: dict[str, str] = {}  # pod uid -> PodScheduled message written
        self._pool_warned: set[str] = set()  # plain pods told (Event) that their pool is missing
        # The waiting plain pods (uid, message) of the last session's explanations, worked out
        # once per session: between sessions the loop calls write_pod_reasons on every wake
        # (pod events only), and going over every explanation each time cost a burst of
        # 10,000 plain pods a tenth of the event loop's time while its Bindings waited.
        self._explained: tuple[Mapping[str, D.Explanation], list[tuple[str, str]]] | None = None
        # group uid -> (the eviction, its status.lastEviction) not known to be in the API yet
        # (kept across passes: a group whose write is in flight when it is evicted gets it with
        # its next write). The decision tells a new eviction from one noted already.
        self._evictions: dict[str, tuple[D.Evict, dict[str, Any]]] = {}
        # group uid -> the scheduler-only fields (SOLE_FIELDS) of our last write, kept for the
        # whole term: a pass reading an older watch event must not send its values back (an
        # evicted victim's WillEvict mark). Never dropped when the watch matches them: an older
        # event can match too (a mark written and revoked before the watch showed either).
        self._sent: dict[str, _Sent] = {}
        # What the last session pass worked from (write_session): a group the next session
        # explains the same way, decides nothing for and whose record and pods did not move
        # needs no visit. None: the next session pass visits every group (a new term).
        self._session_explanations: Mapping[str, D.Explanation] | None = None
        self._session_pools: frozenset[str] = frozenset()
        self._failed: set[str] = set()  # group uids whose last status write failed
        self._broken: dict[str, float] = {}  # group uid -> backoff of its failing status
        self._failure_kinds: set[str] = set()  # failures building a status, logged once each

    def _spawn(
        self,
        key: str,
        path: str,
        request: Request,
        on_success: Callable[[], None] | None = None,
        on_failure: Callable[[], None] | None = None,
    ) -> None:
        self._in_flight.add(key)
        task = asyncio.create_task(self._write(key, path, request, on_success, on_failure))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _write(
        self,
        key: str,
        path: str,
        request: Request,
        on_success: Callable[[], None] | None = None,
        on_failure: Callable[[], None] | None = None,
    ) -> None:
        try:
            outcome = await self._send(path, request)
            sent = self._sent.get(key)
            if outcome == "written":
                if sent is not None:
                    sent.confirmed = True
                if on_success is not None:
                    on_success()
            elif outcome == "gone":
                self._sent.pop(key, None)
            elif on_failure is not None:
                on_failure()
        finally:
            self._in_flight.discard(key)
            owed = self._owed.pop(key, None)
            if owed is not None:
                self.cache.status_owed(owed)

    async def _send(self, path: str, request: Request) -> Literal["written", "gone", "failed"]:
        """`path` names the object in the log."""
        try:
            async with self._sem:
                if not await request():
                    return "gone"
            self.metrics.status_writes.inc()
            return "written"
        except ApiError as err:
            if err.not_found:
                return "gone"
            log.warning("status write %s failed: %s", path, err)
        except (TimeoutError, aiohttp.ClientError, OSError) as err:
            log.warning("status write %s failed: %s", path, type(err).__name__)
        except Exception:  # e.g. a credential plugin that failed: still a write to retry
            log.exception("status write %s failed", path)
        return "failed"

    def _merge(self, path: str, body: dict[str, Any], strategic: bool = False) -> Request:
        """A merge patch (`strategic`: for built-in kinds, lists merged by their key)."""
        send = self.client.strategic_merge_patch if strategic else self.client.merge_patch

        async def request() -> bool:
            await send(path, body)
            return True  # a 404 is raised: _send tells it as gone

        return request

    def _as_written(self, group_uid: str, watched: Mapping[str, Any]) -> dict[str, Any]:
        """The group's status as the watch shows it, with SOLE_FIELDS as our last write sent
        them."""
        status = dict(watched)
        sent = self._sent.get(group_uid)
        if sent is None:
            return status
        status.update(sent.values)
        return status

    async def _write_latest(self, key: str) -> None:
        """Write the newest wanted status of one Queue or Pool until the API holds it: a value
        wanted while an older one is on the wire goes right after it, and a failed write is
        retried, without waiting for another session. A quiet cluster runs no session, so a
        value left unwritten (GPUs of pods that just finished) would stay wrong for good."""
        delay = self._retry_seconds
        loop = asyncio.get_running_loop()
        sent_at = self._cluster_sent.get(key, -math.inf)
        try:
            while (want := self._latest.get(key)) is not None:
                # At most one write per cluster_interval: what came meanwhile replaced `want`.
                wait = sent_at + self._cluster_interval - loop.time()
                if wait > 0 and not self._closing:
                    await asyncio.sleep(wait)
                    continue
                path, body, remember = want
                sent_at = self._cluster_sent[key] = loop.time()
                outcome = await self._send(path, self._merge(path, body))
                if outcome == "failed":
                    if self._closing:
                        return  # a clean stop does not wait for an API server that is away
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, 10.0)
                    continue
                if outcome == "written":
                    remember()
                if self._latest.get(key) is want:
                    del self._latest[key]
                delay = self._retry_seconds
        finally:
            self._in_flight.discard(key)

    def preemption_updates(
        self, decisions: Iterable[D.Decision], now: float
    ) -> dict[str, dict[str, Any] | None]:
        """group uid -> new status.preemption (None clears it), from this session's marks."""
        out: dict[str, dict[str, Any] | None] = {}
        for d in decisions:
            if isinstance(d, D.MarkPrivileged):
                out[d.preemptor] = {
                    "role": S.PreemptionRole.PRIVILEGED.value,
                    "deadline": R.rfc3339(d.deadline),
                    "peers": [self.cache.peer_ref(v) for v in d.victims],
                    "reason": "waiting for victims' grace period",
                }
                self.implicit_marks[d.preemptor] = S.PreemptionMark(
                    S.PreemptionRole.PRIVILEGED, d.victims, d.deadline
                )
            elif isinstance(d, D.MarkWillEvict):
                out[d.victim] = {
                    "role": S.PreemptionRole.WILL_EVICT.value,
                    "deadline": R.rfc3339(d.deadline),
                    "peers": [self.cache.peer_ref(d.preemptor)],
                    "reason": "preempted with a grace period",
                }
                self.implicit_marks[d.victim] = S.PreemptionMark(
                    S.PreemptionRole.WILL_EVICT, (d.preemptor,), d.deadline
                )
            elif isinstance(d, D.RevertDelayedPreemption):
                for uid in d.groups:
                    out[uid] = None
                    self.implicit_marks.pop(uid, None)
        # Only implicit groups keep their marks in memory; explicit ones live in the API. Marks
        # of pods that are gone go too.
        for uid in list(self.implicit_marks):
            if not uid.startswith("pod:") or uid[4:] not in self.cache.pods:
                del self.implicit_marks[uid]
        return out

    def write_groups(
        self,
        result: SessionResult,
        now: float,
        now_text: str,
        only: set[tuple[str, str]] | None = None,
    ) -> int:
        """Write the groups whose status differs; `only` limits the pass to those keys and the
        groups the result decides a phase, a mark or an eviction for (a pass after pod-phase
        changes need not look at groups none of whose pods moved). Should the pass raise part
        way, `only` goes back into the cache's dirty set: the next pass visits them (nothing
        else would: the cache marked them once)."""
        try:
            return self._write_groups(result, now, now_text, only)
        except BaseException:
            if only is not None:
                self.cache.dirty_groups |= only
            raise

    def _placed_again(self, key: tuple[str, str], old: Mapping[str, Any]) -> bool:
        """A moved group the watch shows bound again since its move, whether or not this
        result binds it: the pass that held its Bind may have skipped it (a write in flight) or
        never run (a lease lost, a pass that raised), and the move must end all the same
        (review s9 A)."""
        at = R.consolidated_at(old)
        return at is not None and self.cache.bound_since(key, at)

    def _write_groups(
        self,
        result: SessionResult,
        now: float,
        now_text: str,
        only: set[tuple[str, str]] | None,
    ) -> int:
        decisions = result.decisions
        preemption = self.preemption_updates(decisions, now)
        ctx = _Pass(
            result,
            now,
            now_text,
            decided={d.group: d.phase for d in decisions if isinstance(d, D.SetGroupPhase)},
            preemption=preemption,
            moved={
                d.group: d.message
                for d in decisions
                if isinstance(d, D.Evict) and d.reason is D.EvictReason.CONSOLIDATED
            },
            # Groups the session placed: a moved one among them is placed again, its move is over.
            placed={d.group for d in decisions if isinstance(d, D.Bind)},
        )
        self.note_evictions(decisions, now_text)
        evicted_keys: set[tuple[str, str]] = set()
        for uid in list(self._evictions):
            grp_rec = self.cache.group_record(uid)
            if grp_rec is None:  # an implicit group (no object to write) or one that is gone
                del self._evictions[uid]
            else:
                evicted_keys.add((grp_rec.namespace, grp_rec.name))
        if only is None:
            items = list(self.cache.groups.items())
            self._forget_gone()
        else:
            # The groups the result decides something for are visited whatever `only` says.
            keys = (
                set(only) | evicted_keys | self._keys_of([*ctx.decided, *preemption, *ctx.placed])
            )
            items = [(k, self.cache.groups[k]) for k in keys if k in self.cache.groups]
        written = 0
        for key, rec in items:
            try:
                written += self._write_group(key, rec, ctx)
            except Exception as err:  # noqa: BLE001 - told and retried by _status_failed
                self._status_failed(rec.uid, key, err)
            else:
                self._broken.pop(rec.uid, None)
        return written

    def _status_failed(self, group_uid: str, key: tuple[str, str], err: Exception) -> None:
        """One group whose status cannot be built (a bug meeting odd input) must not stop every
        other group's: it is skipped, and a timer brings a pass over it again, backing off (1 s
        doubling to BROKEN_BACKOFF_MAX: a failure that always comes back costs one visit a
        minute, and a passing one is retried on a quiet cluster too). Each kind of failure is
        logged once, with its first group."""
        delay = min(self._broken.get(group_uid, BROKEN_BACKOFF_MIN / 2) * 2, BROKEN_BACKOFF_MAX)
        self._broken[group_uid] = delay
        self._arm(group_uid, key, delay)
        kind = f"{type(err).__name__}: {err}"
        if kind not in self._failure_kinds:
            self._failure_kinds.add(kind)
            log.error("status of PodGroup %s/%s not written", *key, exc_info=err)

    def _write_group(self, key: tuple[str, str], rec: R.GroupRecord, ctx: _Pass) -> int:
        """Write one group's status if it differs from what the API holds (or hold the change
        back, `_hold`/`_hold_counts`); 1 if a write went out."""
        grp = rec.group
        if grp.phase in FINISHED_PHASES:
            return 0
        if rec.uid in self._in_flight:
            self._owed[rec.uid] = key
            return 0
        counts = count_members(self.cache, rec.uid)
        evicted = self._evictions[rec.uid][1] if rec.uid in self._evictions else None
        missing_pool = "" if self._pool_exists(grp.pool) else grp.pool
        sent = self._sent.get(rec.uid)
        explanation = ctx.result.explanations.get(rec.uid)
        # Everything the desired status is made of besides the record itself; when all of
        # it and the record are what the last pass found already written, the group is
        # skipped without building its status (a full pass over 16,000 unchanged groups
        # held the event loop for about a second per session).
        basis = (
            counts,
            ctx.decided.get(rec.uid),
            ctx.preemption.get(rec.uid, _NO_MARK),
            explanation,
            missing_pool,
            None if sent is None else (sent.values, sent.confirmed),
        )
        seen = self._unchanged.get(rec.uid)
        moved = rec.uid in ctx.moved
        if (
            seen
            and seen[0] is rec
            and seen[1] == basis
            and not evicted
            and not moved
            and rec.uid not in ctx.placed
        ):
            return 0
        self._unchanged.pop(rec.uid, None)
        old = self._as_written(rec.uid, rec.status)
        desired = desired_group_status(
            rec,
            old,
            counts,
            next_phase(
                grp.phase,
                ctx.decided.get(rec.uid),
                grp.min_member,
                counts,
                _moved(old, evicted, ctx.now),
            ),
            ctx.preemption.get(rec.uid, _NO_MARK),
            evicted,
            placed_again=bool(R.consolidated_to(old))
            and (rec.uid in ctx.placed or self._placed_again(key, old)),
            explanation=explanation,
            now_text=ctx.now_text,
            missing_pool=missing_pool,
            moved_message=ctx.moved.get(rec.uid, ""),
        )
        # Until the API confirms our last write, compare with the watch: a write that failed
        # or lost its answer is sent again unless the watch shows it arrived.
        held = old if sent is None or sent.confirmed else rec.status
        # The end of a move goes out at once (and again until the watch shows it).
        released = bool(R.consolidated_to(held)) and not R.consolidated_to(desired)
        if not moved and not evicted and not released:
            if _comparable(desired) == _comparable(held):
                self._counts_since.pop(rec.uid, None)
                if _messages(desired) == _messages(held):
                    self._unchanged[rec.uid] = (rec, basis)
                    return 0
                if self._hold(rec.uid, key, ctx.now, self._message_interval):
                    return 0
            elif _coalescible(desired, held) and self._hold_counts(rec.uid, key, ctx.now):
                return 0
        self._last_write[rec.uid] = ctx.now
        self._counts_since.pop(rec.uid, None)
        if (timer := self._held.pop(rec.uid, None)) is not None:
            timer.cancel()
        self._sent[rec.uid] = _Sent({f: desired[f] for f in SOLE_FIELDS if f in desired})
        self.cache.expect_group_status(rec.uid, desired)
        body = dict(desired)
        if desired["phase"] == old.get("phase"):
            # A phase we do not change is not re-sent: the podgroup operator may have just
            # written Completed/Failed, which our view has not caught up with yet.
            del body["phase"]
        done = None if evicted is None else functools.partial(self._stamped, rec.uid, evicted)
        retry = functools.partial(self._failed.add, rec.uid)
        path = PodGroup.api_path(*key)
        # A group the watch shows without a status (as created) gets it whole, else field by
        # field; write_status tells a guess the API proves wrong by one read and writes again.
        request = functools.partial(
            status_patch.write_status, self.client, path, rec.uid, body, whole=not rec.status
        )
        self._spawn(rec.uid, path, request, done, on_failure=retry)
        if missing_pool and self._warn is not None and not _has_true(old, "PoolFallback"):
            try:
                self._warn(rec.uid, POOL_NOT_FOUND, pool_fallback_message(missing_pool))
            except Exception:
                # The status (PoolFallback=True) is on its way; the Event is a courtesy.
                log.exception("PoolFallback Event of PodGroup %s/%s not posted", *key)
        return 1

    def write_session(
        self, result: SessionResult, now: float, now_text: str, dirty: set[tuple[str, str]]
    ) -> int:
        """A session's status pass. It visits the groups whose record or pods changed
        (`dirty`: the cache's set since the last pass), the groups the session decided
        something for, those it explains differently from the last session pass, and those
        whose last write failed: nothing else of a group's status can have moved (held-back
        changes bring their own pass when they are due). Every group is visited on the
        first session pass of a term and when the set of Pools changed (a group's
        PoolFallback reads it). A pass over every group after every session took a quarter
        of the event loop in a sustained arrival (13,000 groups; py-spy, docs/benchmarks.md)."""
        before, failed = self._session_explanations, set(self._failed)
        pools = frozenset(self.cache.pools)
        if before is None or pools != self._session_pools:
            try:
                written = self.write_groups(result, now, now_text)
            except BaseException:
                self.cache.dirty_groups |= dirty  # for the status passes before the next session
                raise
        else:
            changed = set(failed)
            if before is not result.explanations:
                after = result.explanations
                changed |= {uid for uid, why in after.items() if before.get(uid) != why}
                changed.update(uid for uid in before if uid not in after)
            # Amortized: entries of deleted groups and pods pile up between sweeps (a plain
            # pod's write time too: on a cluster without PodGroups, nothing else sweeps it).
            groups = len(self.cache.groups)
            if (
                len(self._sent) + len(self._unchanged) > 4 * groups + 256
                or len(self._last_write) > 2 * (groups + len(self.cache.pods)) + 256
            ):
                self._forget_gone()
            written = self.write_groups(result, now, now_text, only=dirty | self._keys_of(changed))
        # Only a pass that went through is what the next one compares with (one that raised
        # left the groups it did not reach to the next: their change would be taken as seen).
        self._session_explanations, self._session_pools = result.explanations, pools
        self._failed -= failed
        return written

    def _keys_of(self, group_uids: Iterable[str]) -> set[tuple[str, str]]:
        """(namespace, name) of those of `group_uids` that are PodGroup objects in the cache."""
        out = set()
        for uid in group_uids:
            rec = self.cache.group_record(uid)
            if rec is not None:
                out.add((rec.namespace, rec.name))
        return out

    def _forget_gone(self) -> None:
        """Forget the bookkeeping of groups that no longer exist, and the write times of plain
        pods that are gone (`pod/<uid>`; those of live pods throttle their reason messages)."""
        live = {rec.uid for rec in self.cache.groups.values()}
        pods = self.cache.pods
        for key in [
            k for k in self._last_write if (k[4:] not in pods if k[:4] == "pod/" else k not in live)
        ]:
            del self._last_write[key]
        for table in (self._sent, self._unchanged, self._counts_since, self._broken):
            for uid in [u for u in table if u not in live]:
                del table[uid]

    def _hold(self, group_uid: str, key: tuple[str, str], now: float, interval: float) -> bool:
        """Whether a change of this group must wait, the group having been written less than
        `interval` seconds ago; if so, a timer asks for a pass over it once it may be written
        (one timer per group: the pass it brings writes whatever is newest by then)."""
        wait = self._last_write.get(group_uid, -math.inf) + interval - now
        if wait <= 0:
            return False
        self._arm(group_uid, key, wait)
        return True

    def _hold_counts(self, group_uid: str, key: tuple[str, str], now: float) -> bool:
        """Whether a change of the group's counts (and condition reasons) alone must wait: each
        waits `count_interval`
        from when it was first seen (not from the last write: a gang's first bindings would
        be written at once, and its Running phase a moment later again), and is written with
        whatever came meanwhile, or goes out earlier with a phase or condition change."""
        since = self._counts_since.setdefault(group_uid, now)
        wait = since + self._count_interval - now
        if wait <= 0:
            return False
        self._arm(group_uid, key, wait)
        return True

    def _arm(self, group_uid: str, key: tuple[str, str], wait: float) -> None:
        """One timer per group, due when the first of its held changes may go out: a count
        held behind a message's longer timer would otherwise wait for that one."""
        loop = asyncio.get_running_loop()
        armed = self._held.get(group_uid)
        if armed is not None:
            if armed.when() <= loop.time() + wait:
                return
            armed.cancel()
        self._held[group_uid] = loop.call_later(wait, self._release, group_uid, key)

    def _release(self, group_uid: str, key: tuple[str, str]) -> None:
        del self._held[group_uid]
        self.cache.status_owed(key)

    def note_evictions(self, decisions: Iterable[D.Decision], now_text: str) -> None:
        """The status.lastEviction of each eviction decided, once per decision (the cycle notes
        them before its evictions go out, so `stamp_eviction` finds them; `write_groups` again)."""
        for d in decisions:
            if isinstance(d, D.Evict):
                noted = self._evictions.get(d.group)
                if noted is None or noted[0] is not d:
                    stamp = _last_eviction(d, now_text, self.cache.peer_ref)
                    self._evictions[d.group] = (d, stamp)

    async def stamp_eviction(self, group_uid: str) -> None:
        """Write a victim's status.lastEviction now; the applier awaits it before the group's
        pods are evicted. In the group's status write it may wait behind many others, and a
        leader that loses its lease cancels the writes still waiting, after its evictions went
        out: no leader would write it then (it records an action, the next leader cannot derive
        it), and the hooks' `Evicted` notice would be lost. So it is not bounded by the status
        writes' semaphore (the applier bounds it with the evictions), and it stays noted until
        that status write lands (which repeats it, and keeps SOLE_FIELDS' bookkeeping). It
        tests the group's uid: a same-name successor the watch has not shown yet gets nothing.
        A failed write is logged; the eviction goes on."""
        noted = self._evictions.get(group_uid)
        rec = self.cache.group_record(group_uid)
        if noted is None or rec is None:
            return
        path = PodGroup.api_path(rec.namespace, rec.name)
        try:
            if await status_patch.write_status(
                self.client, path, rec.uid, {"lastEviction": noted[1]}
            ):
                self.metrics.status_writes.inc()
        except (ApiError, TimeoutError, aiohttp.ClientError, OSError) as err:
            log.warning(
                "status.lastEviction of %s/%s before its eviction: %s", rec.namespace, rec.name, err
            )

    def _stamped(self, group_uid: str, stamp: dict[str, Any]) -> None:
        """A lastEviction is in the API: forget it (unless a newer one came meanwhile). A failed
        write keeps it for the next pass."""
        noted = self._evictions.get(group_uid)
        if noted is not None and noted[1] is stamp:
            del self._evictions[group_uid]

    def _pool_exists(self, name: str) -> bool:
        return name == S.DEFAULT_POOL or name in self.cache.pools

    def write_queues(self, queues: Mapping[str, QueueStatus]) -> None:
        for name, qs in queues.items():
            if name not in self.cache.queues:
                continue  # built-in queues the core adds have no object
            before = self._last_queue.get(name) or {}
            body = {
                "deserved": resource_patch(qs.deserved, before.get("deserved")),
                "allocated": resource_patch(qs.allocated, before.get("allocated")),
                "pending": qs.pending,
                "inqueue": qs.inqueue,
                "running": qs.running,
            }
            self._write_cluster_status(Queue, name, body, self._last_queue)
        _forget_missing(self._last_queue, self.cache.queues)

    def write_usage(
        self, bodies: Mapping[str, Mapping[str, Any]], written: Callable[[str, Any], None]
    ) -> None:
        """Queues' status.usage (UsageBook.due: already coalesced); ``written`` is told each
        body the API took. A merge patch naming only `usage`, so the session's fields stay."""
        for name, body in bodies.items():
            key = f"{Queue.singular_name()}-usage/{name}"
            if name not in self.cache.queues or key in self._in_flight:
                continue
            path = f"{Queue.api_path(name=name)}/status"
            self._spawn(
                key,
                path,
                self._merge(path, {"status": {"usage": dict(body)}}),
                functools.partial(written, name, body),
            )

    def write_pools(self, pools: Mapping[str, PoolStatus]) -> None:
        for name, ps in pools.items():
            if name not in self.cache.pools:
                continue
            before = self._last_pool.get(name) or {}
            body = {
                field: resource_patch(values, before.get(field))
                for field, values in (
                    ("capacity", ps.capacity),
                    ("allocatable", ps.allocatable),
                    ("used", ps.used),
                    ("shared", ps.shared),
                    ("pending", ps.pending),
                )
            }
            self._write_cluster_status(Pool, name, body, self._last_pool)
        _forget_missing(self._last_pool, self.cache.pools)

    def write_pod_reasons(
        self, result: SessionResult, now: float, now_text: str
    ) -> list[tuple[R.PodRecord, str]]:
        """Pods with no PodGroup object to show why they wait get what kube-scheduler gives its
        pods: `PodScheduled=False, reason Unschedulable` with a message. Those are plain pods
        (implicit one-pod groups: the core's explanation) and pods naming a PodGroup that does
        not exist (they are not scheduled until it does). Written when the message changes, at
        most once per message interval per pod. Returns (pod, message) of each write, for a
        FailedScheduling Event."""
        explained, fresh = self._explained, False
        if explained is None or explained[0] is not result.explanations:
            explained = self._explained = (result.explanations, self._waiting_explained(result))
            fresh = True
        waiting = [
            *explained[1],
            *((rec.uid, missing_group_message(rec)) for rec in self.cache.orphans()),
        ]
        written: list[tuple[R.PodRecord, str]] = []
        for pod_uid, text in waiting:
            rec = self.cache.pods.get(pod_uid)
            key = f"pod/{pod_uid}"
            if rec is None or rec.node_name or pod_uid in self.cache.assumed:
                continue
            message = text[:1024]
            if self._last_pod_reason.get(pod_uid) == message or key in self._in_flight:
                continue
            last = self._last_write.get(key, 0.0)
            if pod_uid in self._last_pod_reason and now - last < self._message_interval:
                continue
            self._last_write[key] = now
            condition = {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": message,
                "lastTransitionTime": now_text,
            }
            path = f"/api/v1/namespaces/{rec.namespace}/pods/{rec.name}/status"
            # Strategic: pod conditions merge by type, so the other conditions stay.
            body = {"status": {"conditions": [condition]}}
            self._spawn(
                key,
                path,
                self._merge(path, body, strategic=True),
                functools.partial(self._last_pod_reason.__setitem__, pod_uid, message),
            )
            written.append((rec, message))
        if fresh:  # once per session: both walks are as long as the cluster's pod list
            for uid in [u for u in self._last_pod_reason if u not in self.cache.pods]:
                del self._last_pod_reason[uid]
                self._last_write.pop(f"pod/{uid}", None)
            self._pool_warned.intersection_update(self.cache.pods)
        return written

    def _waiting_explained(self, result: SessionResult) -> list[tuple[str, str]]:
        """(pod uid, message) of the plain pods the session left waiting; warns (once per pod)
        about plain pods naming a missing pool, placed or not."""
        waiting: list[tuple[str, str]] = []
        for group_uid, why in result.explanations.items():
            if not group_uid.startswith("pod:"):
                continue
            rec = self.cache.pods.get(group_uid[4:])
            if rec is None:
                continue
            # Like a PodGroup's PoolFallback: a plain pod naming a missing pool is placed in
            # the default pool, with one Warning Event and the fact in its waiting message.
            missing_pool = "" if self._pool_exists(rec.pool or S.DEFAULT_POOL) else rec.pool
            if missing_pool and rec.uid not in self._pool_warned and self._warn is not None:
                self._pool_warned.add(rec.uid)
                self._warn(group_uid, POOL_NOT_FOUND, pool_fallback_message(missing_pool))
            if why.code is not D.ReasonCode.SCHEDULED:
                prefix = f"{pool_fallback_message(missing_pool)}; " if missing_pool else ""
                waiting.append((rec.uid, prefix + why.message))
        return waiting

    def _write_cluster_status(
        self,
        kind: type[Queue | Pool],
        name: str,
        body: dict[str, Any],
        last: dict[str, dict[str, Any]],
    ) -> None:
        """Write a Queue's or Pool's status unless the API has it already; while an older write
        of it is on the wire, this one follows it."""
        key = f"{kind.singular_name()}/{name}"
        if last.get(name) == body and key not in self._in_flight:
            return
        # Remembered only once written (`last`): a failed write is retried.
        self._latest[key] = (
            f"{kind.api_path(name=name)}/status",
            {"status": body},
            functools.partial(last.__setitem__, name, body),
        )
        if key not in self._in_flight:  # else the write on the wire takes this one next
            self._in_flight.add(key)
            task = asyncio.create_task(self._write_latest(key))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def cancel(self) -> int:
        """Cancel every write (leadership lost: the new leader's status must not be overwritten
        by ours)."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        self._latest.clear()
        for timer in self._held.values():
            timer.cancel()
        self._held.clear()
        self._counts_since.clear()
        self._sent.clear()  # a new leader may write them: the watch is the truth again
        self._unchanged.clear()
        self._owed.clear()
        self._session_explanations = None  # a new term's first session pass visits every group
        self._failed.clear()
        return len(tasks)

    async def drain(self) -> None:
        """Wait for the writes started; failed Queue/Pool writes are not retried meanwhile (one
        waiting out its `cluster_interval` is sent when that ends)."""
        self._closing = True
        try:
            while self._tasks:
                await asyncio.gather(*self._tasks, return_exceptions=True)
        finally:
            self._closing = False


def _forget_missing(last: dict[str, Any], live: Mapping[str, Any]) -> None:
    for name in [n for n in last if n not in live]:
        del last[name]


def _has_true(status: Mapping[str, Any], type_: str) -> bool:
    return any(
        c.get("type") == type_ and c.get("status") == "True" for c in status.get("conditions") or ()
    )
