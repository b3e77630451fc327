"""Jobs of equal priority created within the same second are served first come, first served.

Creation timestamps have whole seconds, and the core used to break their ties by uid (random):
found by the deleted-pool e2e story, whose second pod (created right after the first) took the
only node about half of the time, and the first waited until the test gave up."""

from __future__ import annotations

from operators.runtime import records as R
from operators.scheduler import SessionConfig, run_session
from operators.scheduler import decisions as D

from .factories import node, pod, podgroup
from .test_cache import Harness


def placed(h: Harness) -> set[str]:
    result = run_session(h.cache.snapshot(0.0), SessionConfig())
    return {d.name for d in result.decisions if isinstance(d, D.Bind)}


def test_same_second_plain_pods_are_placed_in_the_order_they_arrived() -> None:
    h = Harness()
    h.node(node("n1", gpus=8))
    # Both created in the same second (the factory's timestamp); the later one has the
    # smaller uid, which used to win the tie.
    h.pod(pod("first", gpu=8, uid="uid-b"))
    h.pod(pod("second", gpu=8, uid="uid-a"))
    assert placed(h) == {"first"}


def test_same_second_podgroups_are_admitted_in_the_order_they_arrived() -> None:
    h = Harness()
    h.node(node("n1", gpus=8))
    team = R.queue({"metadata": {"name": "team-a"}, "spec": {}})
    h.cache.on_queue("ADDED", ("", "team-a"), team, None)
    for name in ("zz-first", "aa-second"):  # uids pg-zz-first > pg-aa-second
        h.group(podgroup(name))
        h.pod(pod(f"{name}-0", gpu=8, group=name))
    assert placed(h) == {"zz-first-0"}


def test_a_pod_created_again_queues_behind_those_that_arrived_meanwhile() -> None:
    h = Harness()
    h.node(node("n1", gpus=8))
    h.pod(pod("a", gpu=8, uid="uid-b"))
    h.pod(pod("b", gpu=8, uid="uid-c"))
    h.delete_pod("a")
    h.pod(pod("a", gpu=8, uid="uid-a"))  # same second again, smallest uid
    assert placed(h) == {"b"}
