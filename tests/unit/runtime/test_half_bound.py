"""A gang left part-bound (a crash between its Binding POSTs) is completed or undone whole."""

from __future__ import annotations

from typing import Any

from operators.controllers.scheduler_loop import SchedulerOperator
from operators.runtime import records as R
from operators.runtime.settings import SchedulerSettings
from operators.scheduler import SessionConfig, run_session
from operators.scheduler import decisions as D

from .factories import node, pod, podgroup
from .test_cache import Harness


class RecordingApplier:
    def __init__(self) -> None:
        self.binding_groups: set[str] = set()
        self.evicted: list[str] = []

    async def evict_group(self, group_uid: str, reason: str, message: str) -> int:
        self.evicted.append(group_uid)
        return 1


def operator_with(h: Harness) -> SchedulerOperator:
    op = SchedulerOperator(SchedulerSettings(half_bound_grace_seconds=10.0, metrics_port=0))
    op.cache = h.cache
    return op


def half_bound_gang(h: Harness) -> None:
    h.group(podgroup("g", min_member=4, status={"phase": "Inqueue"}))
    h.pod(pod("g-0", group="g", node="n1"))
    h.pod(pod("g-1", group="g", node="n2"))
    h.pod(pod("g-2", group="g"))
    h.pod(pod("g-3", group="g"))


async def test_half_bound_gang_is_evicted_after_the_grace_period() -> None:
    h = Harness()
    half_bound_gang(h)
    op, applier = operator_with(h), RecordingApplier()
    fake: Any = applier
    await op._repair_half_bound(fake, set(), now=100.0)
    assert applier.evicted == []  # first sighting starts the clock
    await op._repair_half_bound(fake, set(), now=105.0)
    assert applier.evicted == []
    await op._repair_half_bound(fake, set(), now=111.0)
    assert applier.evicted == ["pg-g"]


async def test_gang_being_completed_is_left_alone() -> None:
    h = Harness()
    half_bound_gang(h)
    op, applier = operator_with(h), RecordingApplier()
    fake: Any = applier
    await op._repair_half_bound(fake, set(), now=100.0)
    await op._repair_half_bound(fake, {"pg-g"}, now=200.0)  # this cycle binds the rest
    assert applier.evicted == []
    h.pod(pod("g-2", group="g", node="n3"))
    h.pod(pod("g-3", group="g", node="n4"))
    await op._repair_half_bound(fake, set(), now=300.0)
    assert applier.evicted == []
    assert op._half_bound_since == {}


def running_gang_that_lost_a_pod(h: Harness, phase: str) -> None:
    """64 pods ran; one was lost and its replacement waits for a node (bound 63 < minMember)."""
    h.group(podgroup("big", min_member=64, status={"phase": phase}))
    for i in range(63):
        h.pod(pod(f"big-{i}", group="big", node=f"n{i % 8}", phase="Running"))
    h.pod(pod("big-63", group="big"))


async def test_running_gang_that_lost_a_pod_keeps_its_healthy_pods() -> None:
    for phase in ("Unknown", "Running"):
        h = Harness()
        running_gang_that_lost_a_pod(h, phase)
        op, applier = operator_with(h), RecordingApplier()
        fake: Any = applier
        for now in (100.0, 116.0, 200.0, 1000.0):
            await op._repair_half_bound(fake, set(), now=now)
        assert applier.evicted == [], phase
        assert op._half_bound_since == {}


async def test_pending_gang_left_half_bound_by_a_crash_is_still_repaired() -> None:
    h = Harness()
    h.group(podgroup("g", min_member=4, status={"phase": "Pending"}))
    h.pod(pod("g-0", group="g", node="n1", phase="Running"))
    h.pod(pod("g-1", group="g"))
    op, applier = operator_with(h), RecordingApplier()
    fake: Any = applier
    await op._repair_half_bound(fake, set(), now=100.0)
    await op._repair_half_bound(fake, set(), now=116.0)
    assert applier.evicted == ["pg-g"]


def test_a_gang_whose_bound_members_finished_meanwhile_still_completes() -> None:
    """A scheduler lost its lease between the Binding POSTs of a 4-pod gang; the 2 bound pods
    ran and succeeded (they left the watch; the podgroup operator counted them). The next
    scheduler sees 2 pending pods: they are the rest of the gang and are placed together."""

    def placed(succeeded: int) -> set[str]:
        h = Harness()
        h.node(node("n1"))
        team = R.queue({"metadata": {"name": "team-a"}, "spec": {}})
        h.cache.on_queue("ADDED", ("", "team-a"), team, None)
        status = {"phase": "Inqueue", "succeeded": succeeded}
        h.group(podgroup("g", min_member=4, status=status))
        h.pod(pod("g-2", group="g"))
        h.pod(pod("g-3", group="g"))
        result = run_session(h.cache.snapshot(0.0), SessionConfig())
        return {d.task for d in result.decisions if isinstance(d, D.Bind)}

    assert placed(succeeded=2) == {"uid-g-2", "uid-g-3"}
    assert placed(succeeded=0) == set()  # control: half a gang is not placed


def test_the_cluster_wide_stale_gang_default_is_a_setting() -> None:
    op = SchedulerOperator(SchedulerSettings(stale_gang_grace_seconds=5.0, metrics_port=0))
    assert op.session_config(None).stale_gang_grace == 5.0
    off = SchedulerOperator(SchedulerSettings(stale_gang_grace_seconds=-1.0, metrics_port=0))
    assert off.session_config(None).stale_gang_grace == -1.0
