"""The PodGroup phase the scheduler writes for a job consolidation moved: it keeps its
admission (Inqueue), where a preempted one is admitted again (Pending)."""

from __future__ import annotations

from typing import Any

from operators.api.scheduling import LastEviction
from operators.controllers.scheduler_phase import GroupCounts, next_phase
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
T0 = 1.8e9  # when the session evicts the group


def test_the_phase_rule_keeps_a_moved_group_admitted() -> None:
    waiting = GroupCounts(bound=0, running=0, pending=2)
    assert next_phase(P.RUNNING, None, 2, waiting, moved=True) is P.INQUEUE
    assert next_phase(P.UNKNOWN, None, 2, waiting, moved=True) is P.INQUEUE
    assert next_phase(P.RUNNING, None, 2, waiting) is P.PENDING
    # Placed again: Running as any gang.
    assert next_phase(P.INQUEUE, None, 2, GroupCounts(2, 2, 0), moved=True) is P.RUNNING
    # Part of it still runs while the rest is replaced: Unknown, as before.
    assert next_phase(P.RUNNING, None, 2, GroupCounts(1, 1, 1), moved=True) is P.UNKNOWN


async def _evicted_then_recreated(reason: D.EvictReason, later: float = 5.0) -> str:
    """A running 2-pod group is evicted for ``reason`` (the core moves it to the phase its
    table says); the pass of that session still sees its pods on their nodes. Then the pods
    leave, its job controller re-creates them, and the pass over the changed group runs
    ``later`` seconds after the eviction. Returns the phase written last."""
    h = Harness()
    h.group(podgroup("g", min_member=2, status={"phase": "Running", "running": 2}))
    for i in range(2):
        h.pod(pod(f"g-{i}", group="g", node="n1", phase="Running"))
    api = StoringApi({"g": {"phase": "Running", "running": 2}})
    fake: Any = api
    writer = StatusWriter(fake, h.cache, SchedulerMetrics(), concurrency=2)
    moved = reason is D.EvictReason.CONSOLIDATED
    decisions = (
        D.Evict("pg-g", ("uid-g-0", "uid-g-1"), reason, "why", "pg-big"),
        D.SetGroupPhase("pg-g", P.INQUEUE if moved else P.PENDING, "Moved"),
    )
    writer.write_groups(SessionResult(decisions=decisions, explanations={}), T0, R.rfc3339(T0))
    await writer.drain()
    assert api.stored["g"]["status"]["phase"] == "Running"  # quorum: the pods are still there
    h.group(podgroup("g", min_member=2, status=api.stored["g"]["status"]))  # the echo
    for i in range(2):
        h.delete_pod(f"g-{i}")
        h.pod(pod(f"g-{i}", group="g", uid=f"new-{i}"))
    now = T0 + later
    idle = SessionResult(decisions=(), explanations={})
    writer.write_groups(idle, now, R.rfc3339(now), only={("ns", "g")})
    await writer.drain()
    status = api.stored["g"]["status"]
    assert status["lastEviction"]["reason"] == reason.value
    return str(status["phase"])


async def test_a_moved_groups_recreated_pods_keep_its_admission() -> None:
    """The session's own Inqueue is not what is written (quorum: the watch still shows the
    pods), so before, the re-created pods made the group Pending and it waited for admission
    again behind work that arrived meanwhile."""
    assert await _evicted_then_recreated(D.EvictReason.CONSOLIDATED) == "Inqueue"


async def test_a_preempted_group_or_a_move_past_the_window_is_admitted_again() -> None:
    assert await _evicted_then_recreated(D.EvictReason.PREEMPTED) == "Pending"
    assert await _evicted_then_recreated(D.EvictReason.CONSOLIDATED, MOVE_WINDOW + 1) == "Pending"


async def test_the_nodes_a_move_planned_are_written_and_read_back() -> None:
    """The move's planned nodes (Evict.moved_to) go into status.lastEviction.movedTo, valid
    against the CRD's model, and come back as PodGroup.consolidated_to, which later sessions
    hold for the job until it is placed again; a later eviction of another kind drops them."""
    h = Harness()
    h.group(podgroup("g", status={"phase": "Running", "running": 1}))
    h.pod(pod("g-0", group="g", node="n1", phase="Running"))
    api = StoringApi({"g": {"phase": "Running", "running": 1}})
    fake: Any = api
    writer = StatusWriter(fake, h.cache, SchedulerMetrics(), concurrency=2)
    evict = D.Evict("pg-g", ("uid-g-0",), D.EvictReason.CONSOLIDATED, "why", "pg-big", (("n2", 1),))
    decisions = (evict, D.SetGroupPhase("pg-g", P.INQUEUE, "Moved"))
    writer.write_groups(SessionResult(decisions=decisions, explanations={}), T0, R.rfc3339(T0))
    await writer.drain()
    status = api.stored["g"]["status"]
    assert status["lastEviction"]["movedTo"] == [{"node": "n2", "pods": 1}]
    LastEviction.model_validate(status["lastEviction"])
    read = R.podgroup(podgroup("g", status=status)).group
    assert read.consolidated_to == (("n2", 1),)
    assert read.consolidated_at == T0
    preempted = {**status["lastEviction"], "reason": D.EvictReason.PREEMPTED.value}
    assert R.consolidated_to({"lastEviction": preempted}) == ()


def test_a_move_is_read_from_its_eviction_stamp_alone() -> None:
    """A leader that lost its lease right after a move's evictions wrote only the stamp
    (status.lastEviction, before the evictions), not the ``Consolidated`` condition of the
    group's later status write. Before, the next leader read no move time: no room held, the
    job not first in line, movable again. (Review s9 R3.)"""
    stamp = {
        "reason": D.EvictReason.CONSOLIDATED.value,
        "time": R.rfc3339(T0),
        "message": "moved",
        "movedTo": [{"node": "n2", "pods": 1}],
    }
    read = R.podgroup(podgroup("g", status={"phase": "Running", "lastEviction": stamp})).group
    assert read.consolidated_to == (("n2", 1),)
    assert read.consolidated_at == T0
    preempted = {**stamp, "reason": D.EvictReason.PREEMPTED.value}
    assert R.consolidated_at({"lastEviction": preempted}) is None
