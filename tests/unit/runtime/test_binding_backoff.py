"""A gang whose Binding the API server (or an admission webhook) rejects: its assumptions are
dropped at once, an Event carries the API's message, and the group backs off (exponential,
capped) before it is placed again - the snapshot tells the core when."""

from __future__ import annotations

import asyncio
from typing import Any

from operators.controllers.scheduler_apply import DecisionApplier
from operators.runtime.binder import BindBackoff, Binder
from operators.runtime.client import ApiError
from operators.runtime.events import EventRecorder
from operators.runtime.evictor import Evictor
from operators.runtime.metrics import SchedulerMetrics
from operators.scheduler.session import SessionResult

from .test_apply import bind, gang
from .test_binding_failures import FlakyApi
from .test_cache import Harness

DENIED = 'admission webhook "deny.example" denied the request: pod g-1 may not run'


class RecordedEvents(EventRecorder):
    def __init__(self) -> None:
        super().__init__(object(), "t")  # type: ignore[arg-type]
        self.posted: list[tuple[str, str, str]] = []

    def post(self, involved: dict[str, Any], event_type: str, reason: str, message: str) -> None:
        self.posted.append((str(involved.get("name")), reason, message))


def test_backoff_doubles_up_to_its_cap_and_clears_on_success() -> None:
    backoff = BindBackoff(base=1.0, cap=5.0)
    delays = [backoff.rejected("g", 100.0, "no").retry_at - 100.0 for _ in range(5)]
    assert delays == [1.0, 2.0, 4.0, 5.0, 5.0]
    backoff.bound("g")
    assert backoff.rejected("g", 100.0, "no").retry_at == 101.0


def test_withdrawals_retry_at_once_then_double_up_to_their_cap_apart_from_rejections() -> None:
    """A lost race for the room is normal once; in a row it means the core keeps choosing room
    the re-check refuses, and each further session would only repeat it."""
    backoff = BindBackoff(room_base=0.5, room_cap=4.0)
    assert backoff.withdrawn("g", 100.0, "NoRoom (x)") is None
    delays = []
    for _ in range(5):
        entry = backoff.withdrawn("g", 100.0, "NoRoom (x)")
        assert entry is not None
        delays.append(entry.retry_at - 100.0)
    assert delays == [0.5, 1.0, 2.0, 4.0, 4.0]
    assert backoff.current(lambda uid: True)["g"].message == "NoRoom (x)"
    assert backoff.rejected("g", 100.0, "denied").retry_at == 101.0  # its own streak
    backoff.bound("g")
    assert not backoff.current(lambda uid: True)
    assert backoff.withdrawn("g", 100.0, "NoRoom (x)") is None  # a binding ends the streak


def test_a_group_that_is_gone_is_forgotten() -> None:
    backoff = BindBackoff()
    backoff.rejected("gone", 0.0, "no")
    backoff.withdrawn("gone", 0.0, "no")
    backoff.rejected("here", 0.0, "no")
    assert set(backoff.current(lambda uid: uid == "here")) == {"here"}
    assert backoff.withdrawn("gone", 0.0, "no") is None  # its streak went with it


async def test_a_rejected_gang_is_forgotten_told_and_backed_off() -> None:
    h = Harness()
    gang(h, 2)
    api = FlakyApi({"g-1": [ApiError(403, {"reason": "Forbidden", "message": DENIED})]})
    fake: Any = api
    sem = asyncio.Semaphore(4)
    events = RecordedEvents()
    binder = Binder(fake, Evictor(fake, sem), sem, retry_backoff=0.0)
    app = DecisionApplier(fake, h.cache, binder, Evictor(fake, sem), events, SchedulerMetrics())
    binder.on_bound, binder.on_failed = app.on_bound, app.on_failed
    app.apply(SessionResult(decisions=(bind("g-0", "n0"), bind("g-1", "n1")), explanations={}), 1.0)
    await app.drain()
    assert not h.cache.assumed  # the room reserved for the gang is released at once
    assert api.evicted() == ["g-0"]  # the member that did bind is taken back
    assert any(name == "g-1" and DENIED in message for name, _, message in events.posted)
    rejection = app.backoff.current(h.cache.has_group)["pg-g"]
    assert DENIED in rejection.message
    snap = h.cache.snapshot(now=2.0, rejections=app.backoff.current(h.cache.has_group))
    group = next(g for g in snap.groups if g.uid == "pg-g")
    assert group.retry_binding_at == rejection.retry_at
    assert DENIED in group.binding_error
