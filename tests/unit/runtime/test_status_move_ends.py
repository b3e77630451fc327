"""A consolidation move is over once the moved job is placed again (review s9 R2/R2b).

The status writer empties ``status.lastEviction.movedTo`` when a session binds the moved
group's re-created pods; from then on the group reads as moved but not waiting for its room
(no ``consolidated_to``, no move window), so a job that ran again and finished within the
window neither has the plan's nodes held for it again nor is kept from Completed."""

from __future__ import annotations

from typing import Any

from operators.api.scheduling import LastEviction
from operators.controllers.scheduler_status import MOVE_WINDOW, StatusWriter
from operators.runtime import records as R
from operators.runtime.metrics import SchedulerMetrics
from operators.scheduler import decisions as D
from operators.scheduler import snapshot as S
from operators.scheduler.session import SessionResult

from .factories import pod, podgroup
from .test_cache import Harness
from .test_status import StoringApi

P = S.GroupPhase
T0 = 1.8e9  # when the session moves the group
MOVE = (("n2", 1),)


def _recreated(**kw: Any) -> dict[str, Any]:
    """The moved job's pod as its controller creates it again, after the move."""
    obj = pod("g-0", group="g", uid="new-0", **kw)
    obj["metadata"]["creationTimestamp"] = R.rfc3339(T0 + 2.0)
    return obj


def _echo(h: Harness, api: StoringApi) -> None:
    """The watch brings the group back as last written."""
    h.group(podgroup("g", status=api.stored["g"]["status"]))


async def _moved(recreated: dict[str, Any]) -> tuple[Harness, StoringApi, StatusWriter]:
    """A 1-pod group running on n1 is moved at T0 (planned onto n2); its pod leaves and
    ``recreated`` comes in its place."""
    h = Harness()
    h.group(podgroup("g", status={"phase": "Running", "running": 1}))
    h.pod(pod("g-0", group="g", node="n1", phase="Running"))
    api = StoringApi({"g": {"phase": "Running", "running": 1}})
    fake: Any = api
    writer = StatusWriter(fake, h.cache, SchedulerMetrics(), concurrency=2)
    evict = D.Evict("pg-g", ("uid-g-0",), D.EvictReason.CONSOLIDATED, "why", "pg-big", MOVE)
    moved = SessionResult(
        decisions=(evict, D.SetGroupPhase("pg-g", P.INQUEUE, "Moved")), explanations={}
    )
    writer.write_groups(moved, T0, R.rfc3339(T0))
    await writer.drain()
    _echo(h, api)
    h.delete_pod("g-0")
    h.pod(recreated)
    return h, api, writer


async def _moved_then_placed_again(bind: bool) -> dict[str, Any]:
    """A 1-pod group is moved (planned onto n2); its pod leaves and is re-created; 5 s later a
    session binds the new pod (``bind``) or places nothing. Returns the status stored."""
    h, api, writer = await _moved(pod("g-0", group="g", uid="new-0"))
    now = T0 + 5.0
    writer.write_groups(SessionResult(decisions=(), explanations={}), now, R.rfc3339(now))
    await writer.drain()
    _echo(h, api)
    assert R.consolidated_to(api.stored["g"]["status"]) == MOVE  # waiting: still held
    decisions: tuple[D.Decision, ...] = (
        (D.Bind("new-0", "pg-g", "ns", "g-0", "n2"),) if bind else ()
    )
    writer.write_groups(
        SessionResult(decisions=decisions, explanations={}), now + 1, R.rfc3339(now + 1)
    )
    await writer.drain()
    return dict(api.stored["g"]["status"])


async def test_placing_a_moved_group_again_empties_its_moved_to() -> None:
    status = await _moved_then_placed_again(bind=True)
    assert status["lastEviction"]["movedTo"] == []
    assert status["lastEviction"]["reason"] == D.EvictReason.CONSOLIDATED.value
    LastEviction.model_validate(status["lastEviction"])
    read = R.podgroup(podgroup("g", status=status)).group
    assert read.consolidated_to == ()
    assert read.consolidated_at == T0  # when it moved: kept (not moved twice within the window)
    assert R.moved_until(status, MOVE_WINDOW) is None  # no `moving` guard any more


async def test_a_moved_group_not_placed_yet_keeps_its_moved_to() -> None:
    status = await _moved_then_placed_again(bind=False)
    assert status["lastEviction"]["movedTo"] == [{"node": "n2", "pods": 1}]
    assert R.moved_until(status, MOVE_WINDOW) == T0 + MOVE_WINDOW


async def test_the_move_ends_though_the_binding_pass_skipped_the_group() -> None:
    """The re-created pod's pending-count write is still unanswered when the session that binds
    it writes its statuses: that pass skips the group (owed), and the passes after it see no
    Bind; the watch's bound pod ends the move all the same."""
    h, api, writer = await _moved(_recreated())
    now = T0 + 5.0
    writer.write_groups(SessionResult(decisions=(), explanations={}), now, R.rfc3339(now))
    bind = (D.Bind("new-0", "pg-g", "ns", "g-0", "n2"),)  # while that write is in flight
    writer.write_groups(SessionResult(decisions=bind, explanations={}), now + 1, R.rfc3339(now + 1))
    await writer.drain()
    _echo(h, api)
    h.delete_pod("g-0")
    h.pod(_recreated(node="n2", phase="Running"))
    for i in range(2, 5):
        writer.write_groups(SessionResult((), {}), now + i, R.rfc3339(now + i))
        await writer.drain()
        _echo(h, api)
    status = api.stored["g"]["status"]
    assert status["lastEviction"]["movedTo"] == []
    assert R.moved_until(status, MOVE_WINDOW) is None


def _moved_status(**extra: Any) -> dict[str, Any]:
    return {
        "phase": "Running",
        "running": 1,
        "lastEviction": {
            "reason": D.EvictReason.CONSOLIDATED.value,
            "time": R.rfc3339(T0),
            "message": "why",
            "movedTo": [{"node": "n2", "pods": 1}],
        },
        **extra,
    }


async def test_a_new_leader_ends_a_move_whose_job_is_bound_again() -> None:
    """The leader that bound the re-created pod lost its lease before its status pass; the next
    leader's passes see the bound pod and end the move."""
    consolidated = {
        "type": "Consolidated",
        "status": "True",
        "lastTransitionTime": R.rfc3339(T0),
        "reason": "Moved",
        "message": "why",
    }
    status = _moved_status(conditions=[consolidated])
    h = Harness()
    h.group(podgroup("g", status=status))
    h.pod(_recreated(node="n2", phase="Running"))
    api = StoringApi({"g": dict(status)})
    fake: Any = api
    writer = StatusWriter(fake, h.cache, SchedulerMetrics(), concurrency=2)
    writer.write_groups(SessionResult((), {}), T0 + 10, R.rfc3339(T0 + 10))
    await writer.drain()
    assert api.stored["g"]["status"]["lastEviction"]["movedTo"] == []


async def test_pods_from_before_the_move_do_not_end_it() -> None:
    """The moved job's old pod, still bound while its eviction goes out, is no placement again."""
    h = Harness()
    h.group(podgroup("g", status=_moved_status()))
    h.pod(pod("g-0", group="g", node="n1", phase="Running"))  # created before T0
    api = StoringApi({"g": _moved_status()})
    fake: Any = api
    writer = StatusWriter(fake, h.cache, SchedulerMetrics(), concurrency=2)
    writer.write_groups(SessionResult((), {}), T0 + 10, R.rfc3339(T0 + 10))
    await writer.drain()
    assert R.consolidated_to(api.stored["g"]["status"]) == MOVE


def test_a_second_moves_stamp_is_newer_than_the_first_moves_condition() -> None:
    """A lease lost after a second move's evictions leaves only its stamp; the first move's
    condition (still True) must not hide it, or the second move has no window."""
    first = {
        "type": "Consolidated",
        "status": "True",
        "reason": "Consolidated",
        "message": "first",
        "lastTransitionTime": R.rfc3339(T0 - 3600.0),
    }
    status = _moved_status(conditions=[first])
    assert R.consolidated_at(status) == T0
    assert R.moved_until(status, MOVE_WINDOW) == T0 + MOVE_WINDOW
