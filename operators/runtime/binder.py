"""Binding pods to nodes through the pods/binding subresource, many in flight at once.

The chosen GPU ids travel as annotations *on the Binding object*: the API server copies a
Binding's annotations onto the pod in the same write that sets spec.nodeName, so a pod is never
bound without its gpu-ids, nor annotated for a node it never got (one request, not two).

A gang is bound as a whole: all of its Binding POSTs are issued together; if any of them fails,
the members that did bind are evicted again, so no group is left half-running (by a leader only:
a process that lost its lease sends nothing more, and the new leader's half-bound repair decides).

Transient answers are not failures: 429 (API priority and fairness), 5xx and transport errors are
retried a few times with a short backoff before the gang is given up. A request that timed out or
lost its connection may have bound the pod all the same, so a later 409 for a pod that already sits
on the chosen node counts as success; if no attempt ever gets a definite answer the member is
*uncertain*: its assumption is kept (no callback) until the watch confirms it or the cache's TTL
forgets it, rather than forgetting a pod that may well be running.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import random
from collections.abc import Callable, Mapping, Sequence

import aiohttp

from operators.api.labels import GPU_IDS
from operators.runtime.client import ApiError, KubeClient
from operators.runtime.evictor import Evictor, PodRef
from operators.runtime.records import parse_gpu_ids

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class BindRequest:
    namespace: str
    name: str
    uid: str
    node: str
    annotations: Mapping[str, str] = dataclasses.field(default_factory=dict)

    @property
    def ref(self) -> PodRef:
        return PodRef(self.namespace, self.name, self.uid)

    @property
    def gpu_ids(self) -> tuple[int, ...]:
        """The cards the Binding hands out (its gpu-ids annotation)."""
        return parse_gpu_ids(self.annotations.get(GPU_IDS))


@dataclasses.dataclass(frozen=True)
class BindAnswer:
    reason: str | None = None
    """None: bound. Else why not (or why we do not know)."""
    uncertain: bool = False
    """No definite answer (timeouts, lost connections): the pod may be bound."""


@dataclasses.dataclass
class GangOutcome:
    bound: list[BindRequest] = dataclasses.field(default_factory=list)
    failed: list[tuple[BindRequest, str]] = dataclasses.field(default_factory=list)
    rolled_back: list[BindRequest] = dataclasses.field(default_factory=list)
    uncertain: list[tuple[BindRequest, str]] = dataclasses.field(default_factory=list)
    """Left assumed: the watch (bound) or the assume TTL (not bound) settles them."""

    @property
    def ok(self) -> bool:
        return not self.failed


NOT_LEADER = "not the leader"
NO_ROOM = "NoRoom"
"""Reason prefix of a binding withdrawn before its POST: the room was taken meanwhile."""


def binding_body(req: BindRequest) -> dict[str, object]:
    meta: dict[str, object] = {"name": req.name, "namespace": req.namespace}
    if req.uid:
        meta["uid"] = req.uid
    if req.annotations:
        meta["annotations"] = dict(req.annotations)
    return {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": meta,
        "target": {"apiVersion": "v1", "kind": "Node", "name": req.node},
    }


@dataclasses.dataclass(frozen=True)
class Rejection:
    retry_at: float  # wall-clock seconds
    message: str  # the API's answer to the last attempt
    failures: int


class BindBackoff:
    """Groups whose Bindings keep failing: the API server (or an admission webhook) rejects
    them, or the bind-time re-check keeps withdrawing them (NoRoom).

    After the n-th rejection in a row a group waits ``base * 2**(n-1)`` seconds (at most
    ``cap``) before it is placed again; the scheduler core skips it meanwhile (it holds no
    room, so it never takes a cycle's room from pods that can bind). A withdrawal is a lost
    race for the room, normally seen once: the first in a row is placed again at once, the
    n-th after ``room_base * 2**(n-2)`` seconds (at most ``room_cap``), so a core that keeps
    choosing room the re-check refuses cannot loop every session. The two streaks are counted
    apart. A successful binding, or a group that is gone, clears both. Clock readings are
    passed in, so it is testable as is.
    """

    def __init__(
        self, base: float = 1.0, cap: float = 300.0, room_base: float = 0.5, room_cap: float = 30.0
    ) -> None:
        self.base = base
        self.cap = cap
        self.room_base = room_base
        self.room_cap = room_cap
        self._by_group: dict[str, Rejection] = {}
        self._rejections: dict[str, int] = {}  # per group: API rejections in a row
        self._withdrawals: dict[str, int] = {}  # per group: NoRoom withdrawals in a row

    def rejected(self, group_uid: str, now: float, message: str) -> Rejection:
        failures = self._rejections.get(group_uid, 0) + 1
        self._rejections[group_uid] = failures
        delay = min(self.cap, self.base * 2 ** (failures - 1))
        entry = Rejection(now + delay, message, failures)
        self._by_group[group_uid] = entry
        return entry

    def withdrawn(self, group_uid: str, now: float, message: str) -> Rejection | None:
        """A binding of the group withdrawn before its POST; None: place it again at once."""
        withdrawals = self._withdrawals.get(group_uid, 0) + 1
        self._withdrawals[group_uid] = withdrawals
        if withdrawals == 1:
            return None
        delay = min(self.room_cap, self.room_base * 2 ** (withdrawals - 2))
        entry = Rejection(now + delay, message, withdrawals)
        self._by_group[group_uid] = entry
        return entry

    def bound(self, group_uid: str) -> None:
        for book in (self._by_group, self._rejections, self._withdrawals):
            book.pop(group_uid, None)

    def current(self, live: Callable[[str], bool]) -> Mapping[str, Rejection]:
        """Every group still backed off or due for a retry; groups ``live`` no longer knows
        are dropped."""
        for book in (self._rejections, self._withdrawals):
            for uid in [uid for uid in book if not live(uid)]:
                del book[uid]
        for uid in [uid for uid in self._by_group if not live(uid)]:
            del self._by_group[uid]
        return self._by_group


class Binder:
    """`on_bound`/`on_failed` let the cache confirm or forget each assumed pod as answers arrive."""

    def __init__(
        self,
        client: KubeClient,
        evictor: Evictor,
        semaphore: asyncio.Semaphore,
        *,
        on_bound: Callable[[BindRequest], None] | None = None,
        on_failed: Callable[[BindRequest, str], None] | None = None,
        attempts: int = 4,
        retry_backoff: float = 0.1,
        may_send: Callable[[], bool] | None = None,
        recheck: Callable[[BindRequest], str | None] | None = None,
    ) -> None:
        self.client = client
        # Asked right before each POST, once a connection slot is ours: does the room the
        # session chose still fit, now that the watch may show pods other schedulers bound
        # meanwhile? A reason withdraws the binding (no POST) and fails its gang.
        self.recheck = recheck
        # Asked before every attempt, once a connection slot is ours: a leader that lost its
        # lease while a gang waited for slots or backed off after a 5xx sends nothing more.
        self.may_send: Callable[[], bool] = may_send or (lambda: True)
        self.attempts = attempts
        self.retry_backoff = retry_backoff
        self.evictor = evictor
        self._sem = semaphore
        self.on_bound = on_bound
        self.on_failed = on_failed

    async def bind_one(self, req: BindRequest) -> BindAnswer:
        path = f"/api/v1/namespaces/{req.namespace}/pods/{req.name}/binding"
        maybe_bound = False
        reason = ""
        for attempt in range(max(1, self.attempts)):
            if attempt:
                await asyncio.sleep(
                    self.retry_backoff * 2 ** (attempt - 1) * (0.5 + random.random())
                )
            async with self._sem:
                if not self.may_send():
                    return BindAnswer(NOT_LEADER, uncertain=maybe_bound)
                taken = self.recheck(req) if self.recheck is not None else None
                if taken is not None:
                    return BindAnswer(f"{NO_ROOM} ({taken})", uncertain=maybe_bound)
                try:
                    await self.client.post(path, binding_body(req))
                    return BindAnswer()
                except ApiError as err:
                    # "<status> <reason>: <message>": the metric label is the status code; the
                    # message (e.g. an admission webhook's denial) is what the user needs.
                    reason = f"{err.status} {err.reason}".strip()
                    if err.message:
                        reason = f"{reason}: {err.message}"
                    if err.conflict:
                        on_target = await self._already_on_target(req)
                        if on_target:
                            return BindAnswer()
                        return BindAnswer(reason, uncertain=on_target is None and maybe_bound)
                    if err.status != 429 and err.status < 500:
                        return BindAnswer(reason)
                    # 5xx (a 504 may still be processed) and 429 (throttled): try again.
                    maybe_bound = maybe_bound or err.status in (500, 504)
                except aiohttp.ClientConnectorError as err:
                    reason = type(err).__name__  # never reached the server
                except (TimeoutError, aiohttp.ClientError, OSError) as err:
                    # aiohttp's disconnect/payload/response errors are not OSError: catch them
                    # all. The request may have been carried out before the answer was lost.
                    reason = type(err).__name__
                    maybe_bound = True
        return BindAnswer(reason, uncertain=maybe_bound)

    async def _already_on_target(self, req: BindRequest) -> bool | None:
        """After a 409: is the pod (this very pod) already bound to the node we chose?
        None when that cannot be told."""
        try:
            obj = await self.client.get(f"/api/v1/namespaces/{req.namespace}/pods/{req.name}")
        except ApiError as err:
            return False if err.not_found else None
        except (TimeoutError, aiohttp.ClientError, OSError):
            return None
        meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
        if req.uid and meta.get("uid") != req.uid:
            return False
        return spec.get("nodeName") == req.node

    async def bind_gang(self, requests: Sequence[BindRequest]) -> GangOutcome:
        try:
            return await self._bind_gang(requests)
        except Exception:
            # Whatever went wrong, every assumed member must be forgotten (or confirmed by the
            # watch later): never leave an assumption no callback will ever settle.
            log.exception("binding a gang of %d failed unexpectedly", len(requests))
            outcome = GangOutcome(failed=[(r, "internal error") for r in requests])
            self._report(outcome)
            return outcome

    async def _bind_gang(self, requests: Sequence[BindRequest]) -> GangOutcome:
        outcome = GangOutcome()
        answers = await asyncio.gather(
            *(self.bind_one(r) for r in requests), return_exceptions=True
        )
        for req, answer in zip(requests, answers, strict=True):
            if isinstance(answer, BaseException):
                if not isinstance(answer, Exception):
                    raise answer  # cancellation and the like
                outcome.failed.append((req, type(answer).__name__))
            elif answer.reason is None:
                outcome.bound.append(req)
            elif answer.uncertain:
                outcome.uncertain.append((req, answer.reason))
            else:
                outcome.failed.append((req, answer.reason))
        for req, reason in outcome.uncertain:
            log.warning(
                "binding %s/%s to %s: no definite answer (%s); keeping it assumed until the "
                "watch or the TTL decides",
                req.namespace,
                req.name,
                req.node,
                reason,
            )
        if outcome.failed and outcome.bound and self.may_send():
            # Part of the gang is on nodes and the rest will not follow in this attempt: take the
            # bound part back off rather than leave it holding resources it cannot use.
            log.warning(
                "gang of %s/%s: %d of %d bindings failed (%s); evicting the %d bound",
                requests[0].namespace,
                requests[0].name,
                len(outcome.failed),
                len(requests),
                outcome.failed[0][1],
                len(outcome.bound),
            )
            await self.evictor.evict_all([r.ref for r in outcome.bound], grace_seconds=0)
            outcome.rolled_back = outcome.bound
            outcome.bound = []
        self._report(outcome)
        return outcome

    def _report(self, outcome: GangOutcome) -> None:
        """Settle every member's assumption once; a failing callback must not skip the others."""
        calls: list[tuple[Callable[..., None] | None, tuple[object, ...]]] = [
            *((self.on_bound, (req,)) for req in outcome.bound),
            *((self.on_failed, (req, reason)) for req, reason in outcome.failed),
            *((self.on_failed, (req, "rolled back with its gang")) for req in outcome.rolled_back),
        ]
        for callback, args in calls:
            if callback is None:
                continue
            try:
                callback(*args)
            except Exception:
                log.exception("binding callback failed")
