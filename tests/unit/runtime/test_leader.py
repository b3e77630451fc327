from __future__ import annotations

import asyncio
import copy
import time
from typing import Any

from operators.runtime.client import ApiError
from operators.runtime.leader import LeaderElector, LeaseConfig


class LeaseStore:
    """A narrow stand-in for the three Lease calls, with resourceVersion conflicts."""

    def __init__(self) -> None:
        self.lease: dict[str, Any] | None = None
        self.rv = 0

    async def get(self, path: str, params: Any = None) -> dict[str, Any]:
        if self.lease is None:
            raise ApiError(404, {"reason": "NotFound"})
        return copy.deepcopy(self.lease)

    async def post(self, path: str, body: dict[str, Any], params: Any = None) -> dict[str, Any]:
        if self.lease is not None:
            raise ApiError(409, {"reason": "AlreadyExists"})
        self.rv += 1
        body["metadata"]["resourceVersion"] = str(self.rv)
        self.lease = copy.deepcopy(body)
        return body

    async def put(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        assert self.lease is not None
        if body["metadata"].get("resourceVersion") != self.lease["metadata"]["resourceVersion"]:
            raise ApiError(409, {"reason": "Conflict"})
        self.rv += 1
        body["metadata"]["resourceVersion"] = str(self.rv)
        self.lease = copy.deepcopy(body)
        return body


def elector(store: LeaseStore, identity: str, duration: float = 15.0) -> LeaderElector:
    return LeaderElector(store, LeaseConfig("sched", "kube-system", identity, duration))  # type: ignore[arg-type]


async def test_first_candidate_creates_and_second_waits() -> None:
    store = LeaseStore()
    a, b = elector(store, "a"), elector(store, "b")
    assert await a.try_acquire_or_renew()
    assert store.lease is not None
    assert store.lease["spec"]["holderIdentity"] == "a"
    assert not await b.try_acquire_or_renew()
    assert await a.try_acquire_or_renew()  # renewal


async def test_expired_lease_is_taken_over(monkeypatch: Any) -> None:
    store = LeaseStore()
    a, b = elector(store, "a"), elector(store, "b", duration=15.0)
    assert await a.try_acquire_or_renew()
    clock = [1000.0]
    monkeypatch.setattr("operators.runtime.leader.time.monotonic", lambda: clock[0])
    assert not await b.try_acquire_or_renew()  # b starts observing the record now
    clock[0] += 16.0  # no renewal seen for longer than the lease duration
    assert await b.try_acquire_or_renew()
    assert store.lease is not None
    assert store.lease["spec"]["holderIdentity"] == "b"
    assert store.lease["spec"]["leaseTransitions"] == 1


async def test_same_identity_retakes_its_own_lease_at_once() -> None:
    store = LeaseStore()
    assert await elector(store, "pod-0").try_acquire_or_renew()
    restarted = elector(store, "pod-0")  # same pod, new process: no need to wait out the lease
    assert await restarted.try_acquire_or_renew()


async def test_release_hands_over_immediately() -> None:
    store = LeaseStore()
    a, b = elector(store, "a"), elector(store, "b")
    assert await a.try_acquire_or_renew()
    a.is_leader = True
    await a.release()
    assert await b.try_acquire_or_renew()


async def test_term_is_the_lease_transitions_this_process_leads_in(monkeypatch: Any) -> None:
    store = LeaseStore()
    a, b = elector(store, "a"), elector(store, "b")
    terms: list[int | None] = [a.term]
    assert await a.try_acquire_or_renew()
    terms.append(a.term)
    clock = [1000.0]
    monkeypatch.setattr("operators.runtime.leader.time.monotonic", lambda: clock[0])
    assert not await b.try_acquire_or_renew()
    terms.append(b.term)  # a standby has no term
    clock[0] += 16.0
    assert await b.try_acquire_or_renew()
    terms.append(b.term)
    assert await b.try_acquire_or_renew()  # a renewal stays in the same term
    terms.append(b.term)
    assert terms == [None, 0, None, 1, 1]


async def test_hold_stops_when_cancelled_as_a_renewal_answers() -> None:
    """With asyncio.wait_for around the renewal (Python 3.11), a cancel in the iteration in
    which a renewal's answer arrives was swallowed and hold renewed on, after the scheduler's
    stop had released the lease (a standby then waited a whole lease more)."""
    fake: Any = object()
    elector = LeaderElector(fake, LeaseConfig("l", "ns", "me", 15.0, 10.0, 0.01))
    elector.is_leader = True
    elector._last_renew = time.monotonic()
    answers: list[asyncio.Future[bool]] = []
    asked = asyncio.Event()

    async def renew() -> bool:
        fut: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        answers.append(fut)
        asked.set()
        return await fut

    elector.try_acquire_or_renew = renew  # type: ignore[method-assign]
    hold = asyncio.create_task(elector.hold())
    await asyncio.wait_for(asked.wait(), 2.0)
    answers[0].set_result(True)
    hold.cancel()
    done, _ = await asyncio.wait({hold}, timeout=0.5)
    renewals = len(answers)
    hold.cancel()
    for f in answers:
        if not f.done():
            f.set_result(True)
    await asyncio.wait({hold}, timeout=0.5)
    assert hold in done
    assert renewals == 1, f"hold renewed {renewals - 1} times after its cancel"
