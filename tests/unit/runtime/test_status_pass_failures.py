"""A status pass that fails part way (an exception, not a refused write) loses nothing: a group
whose status cannot be built is skipped and visited again on a backoff timer, the others are
written (and a Warning Event that cannot be posted stops nothing); a pass that raises before its
groups leaves them (dirty, explained anew, or whose last write failed) to the next pass; and a
failing pass between sessions does not end the scheduler's loop."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from operators.controllers import scheduler_status
from operators.controllers.scheduler_loop import SchedulerOperator
from operators.controllers.scheduler_status import StatusWriter
from operators.runtime.metrics import SchedulerMetrics
from operators.runtime.settings import SchedulerSettings
from operators.scheduler import decisions as D
from operators.scheduler.session import SessionResult

from .factories import pod, podgroup
from .test_apply import applier
from .test_cache import Harness
from .test_status_session_pass import Refusing, _reason

QUOTA = D.ReasonCode.QUOTA_EXCEEDED
ROOM = D.ReasonCode.NOT_ADMITTED


class FailingWarnings:
    """The Warning Event hook of a StatusWriter; raises while `failing` (an Event recorder
    that broke), else records the groups it was told about."""

    def __init__(self) -> None:
        self.failing = False
        self.told: list[str] = []

    def __call__(self, group_uid: str, reason: str, message: str) -> None:
        if self.failing:
            self.failing = False
            raise RuntimeError("event recorder broke")
        self.told.append(group_uid)


def explained(codes: dict[str, D.ReasonCode]) -> SessionResult:
    return SessionResult(
        (), {f"pg-{n}": D.Explanation(f"pg-{n}", c, c.value) for n, c in codes.items()}
    )


def in_missing_pool(name: str) -> dict[str, Any]:
    """A pending gang naming a pool that does not exist: each write of its status (the watch
    never shows it PoolFallback here) tells the Warning hook."""
    raw = podgroup(name, min_member=2, status={"phase": "Pending"})
    raw["spec"]["pool"] = "gone"
    return raw


def _pending(
    names: tuple[str, ...],
) -> tuple[Harness, Refusing, FailingWarnings, StatusWriter]:
    """Pending one-pod groups ``names`` in a missing pool (so each pass has a warning to post)
    and a status writer over them."""
    h = Harness()
    api = Refusing({n: {"phase": "Pending"} for n in names})
    for n in names:
        h.group(in_missing_pool(n))
        h.pod(pod(f"{n}-0", group=n))
    warn = FailingWarnings()
    fake: Any = api
    writer = StatusWriter(fake, h.cache, SchedulerMetrics(), concurrency=4, warn=warn)
    return h, api, warn, writer


async def test_a_session_pass_that_raises_leaves_its_groups_to_the_next_pass() -> None:
    names = ("dirty", "explained", "failed")
    h, api, warn, writer = _pending(names)
    api.refuse = {"failed"}
    dirty, h.cache.dirty_groups = h.cache.dirty_groups, set()
    writer.write_session(explained(dict.fromkeys(names, QUOTA)), 100.0, "t0", dirty)
    await writer.drain()
    api.refuse = set()
    assert _reason(api, "dirty") == "QuotaExceeded"
    assert "conditions" not in api.stored["failed"]["status"]  # its write failed: owed

    # The next session: `dirty` got a member, `explained` a new reason; telling the first
    # group it writes raises (after starting that write): the others are visited all the same.
    h.pod(pod("dirty-1", group="dirty"))
    warn.failing = True
    second = {"dirty": QUOTA, "explained": ROOM, "failed": QUOTA}
    dirty, h.cache.dirty_groups = h.cache.dirty_groups, set()
    assert writer.write_session(explained(second), 101.0, "t1", dirty) == 3
    await writer.drain()
    assert not warn.failing

    # The session after it explains everything the same way and changed nothing.
    dirty, h.cache.dirty_groups = h.cache.dirty_groups, set()
    writer.write_session(explained(second), 102.0, "t2", dirty)
    await writer.drain()
    assert api.stored["dirty"]["status"]["pending"] == 2
    assert _reason(api, "explained") == "NotEnoughResources"
    assert _reason(api, "failed") == "QuotaExceeded"


async def test_a_status_pass_that_raises_between_sessions_does_not_end_the_loop() -> None:
    op = SchedulerOperator(
        SchedulerSettings(metrics_port=0, coalesce_seconds=0.0, retry_period_seconds=0.02)
    )
    h = Harness()
    h.cache = op.cache
    app, _ = applier(h)
    api = Refusing({n: {"phase": "Pending"} for n in ("a", "b", "other")})
    for n in ("a", "b"):
        h.group(in_missing_pool(n))
        h.pod(pod(f"{n}-0", group=n, node="n0"))
    h.group(podgroup("other", min_member=2, status={"phase": "Pending"}))
    h.pod(pod("other-0", group="other", node="n0"))
    h.cache.dirty_groups.clear()
    warn = FailingWarnings()
    fake: Any = api
    status = StatusWriter(fake, op.cache, SchedulerMetrics(), 1, warn=warn)
    op._schedule_wanted = False
    loop = asyncio.create_task(op._loop(app, status))
    try:
        warn.failing = True
        for n in ("a", "b"):  # bound members turn Running: one status pass (no session),
            h.pod(pod(f"{n}-0", group=n, node="n0", phase="Running"))  # which raises at first
        for _ in range(100):
            if not warn.failing:
                break
            await asyncio.sleep(0.01)
        assert not warn.failing
        await asyncio.sleep(0.05)
        assert not loop.done()
        # An unrelated change: the next pass, which visits the group the failed one did not.
        h.pod(pod("other-0", group="other", node="n0", phase="Running"))
        for _ in range(100):
            if all(api.stored[n]["status"].get("running") == 1 for n in ("a", "b")):
                break
            await asyncio.sleep(0.01)
        assert [api.stored[n]["status"].get("running") for n in ("a", "b")] == [1, 1]
        assert not loop.done()
    finally:
        loop.cancel()
        await asyncio.gather(loop, return_exceptions=True)


class BrokenCredentials(Refusing):
    """Writes of the groups in `refuse` fail with an error that is not an API error (an exec
    credential plugin that failed, a closed session)."""

    async def json_patch(self, path: str, ops: list[dict[str, Any]]) -> dict[str, Any]:
        if path.rsplit("/", 2)[-2] in self.refuse:
            raise RuntimeError("credential plugin failed")
        return await super().json_patch(path, ops)


async def test_a_write_failing_with_any_error_is_sent_again_by_the_next_session_pass() -> None:
    h = Harness()
    api = BrokenCredentials({"g": {"phase": "Pending"}})
    h.group(podgroup("g", min_member=2, status={"phase": "Pending"}))
    h.pod(pod("g-0", group="g"))
    fake: Any = api
    writer = StatusWriter(fake, h.cache, SchedulerMetrics(), concurrency=2)
    result = explained({"g": QUOTA})
    api.refuse = {"g"}
    dirty, h.cache.dirty_groups = h.cache.dirty_groups, set()
    writer.write_session(result, 100.0, "t0", dirty)
    await writer.drain()
    api.refuse = set()
    writer.write_session(explained({"g": QUOTA}), 101.0, "t1", set())  # nothing else changed
    await writer.drain()
    assert _reason(api, "g") == "QuotaExceeded"


async def test_a_full_pass_that_raises_gives_its_dirty_groups_back_for_the_passes_before_the_next() -> (
    None
):
    """The first session pass of a term visits every group; should it raise, the next session
    pass is a full one again, and the dirty groups it was handed go back for the status passes
    between sessions (a quiet cluster may run no session for long)."""
    names = ("a", "b")
    h, api, _, writer = _pending(names)
    result = explained(dict.fromkeys(names, QUOTA))
    dirty, h.cache.dirty_groups = h.cache.dirty_groups, set()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(writer, "_forget_gone", lambda: _raise(RuntimeError("bookkeeping broke")))
        with pytest.raises(RuntimeError):
            writer.write_session(result, 100.0, "t0", dirty)
    await writer.drain()
    # A status pass between sessions (pod events only), as the loop runs it.
    dirty, h.cache.dirty_groups = h.cache.dirty_groups, set()
    writer.write_groups(SessionResult((), result.explanations), 101.0, "t1", only=dirty)
    await writer.drain()
    assert [_reason(api, n) for n in names] == ["QuotaExceeded", "QuotaExceeded"]


def _raise(err: Exception) -> None:
    raise err


async def test_a_group_whose_status_cannot_be_built_does_not_stop_the_others(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A status the scheduler cannot read (`preemption` not an object: a bug, or an edit that
    got past the schema) fails that group's status alone, told once, however many passes."""
    h = Harness()
    api = Refusing({n: {"phase": "Pending"} for n in ("bad", "good")})
    h.group(podgroup("bad", min_member=1, status={"phase": "Running", "preemption": "junk"}))
    h.pod(pod("bad-0", group="bad", node="n0", phase="Running"))
    h.group(podgroup("good", min_member=1, status={"phase": "Pending"}))
    h.pod(pod("good-0", group="good", node="n0", phase="Running"))
    fake: Any = api
    writer = StatusWriter(fake, h.cache, SchedulerMetrics(), concurrency=2)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(scheduler_status, "BROKEN_BACKOFF_MIN", 0.01)
        mp.setattr(scheduler_status, "BROKEN_BACKOFF_MAX", 0.04)
        dirty, h.cache.dirty_groups = h.cache.dirty_groups, set()
        for i in range(4):
            before = len(h.changes)
            writer.write_session(SessionResult((), {}), 100.0 + i, f"t{i}", dirty)
            await writer.drain()
            # Nothing else would bring a pass over it on a quiet cluster: its timer does.
            for _ in range(100):
                if h.cache.dirty_groups:
                    break
                await asyncio.sleep(0.01)
            assert h.cache.dirty_groups == {("ns", "bad")}
            assert "status" in h.changes[before:]
            dirty, h.cache.dirty_groups = h.cache.dirty_groups, set()
    assert api.stored["good"]["status"]["phase"] == "Running"
    told = [r for r in caplog.records if "ns/bad" in r.getMessage()]
    assert len(told) == 1
    assert writer._broken[h.cache.groups["ns", "bad"].uid] == 0.04  # backed off to the cap
