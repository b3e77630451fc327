"""The cache's per-group member counts (kept as pods come and go) against the plain walk over
the group's members, through random pod event sequences: pods bound, running, leaving, moving
between groups, deleted."""

from __future__ import annotations

from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from operators.runtime.cache import SchedulerCache

from .factories import pod as pod_obj
from .factories import podgroup
from .test_cache import Harness

GROUPS = ("a", "b", "")  # "" = a plain pod (implicit group)
Step = tuple[int, str, str, str, bool, bool]  # pod, group, node, phase, deleting, delete it

steps = st.lists(
    st.tuples(
        st.integers(0, 5),
        st.sampled_from(GROUPS),
        st.sampled_from(("", "n1", "n2")),
        st.sampled_from(("Pending", "Running")),
        st.booleans(),
        st.booleans(),
    ),
    max_size=20,
)


def walked(cache: SchedulerCache, group_uid: str) -> tuple[int, int, int]:
    bound = running = pending = 0
    for rec in cache.members(group_uid):
        if rec.deleting:
            continue
        if rec.node_name:
            bound += 1
            running += rec.phase == "Running"
        else:
            pending += 1
    return bound, running, pending


@settings(max_examples=40, deadline=None)
@given(steps)
def test_member_counts_equal_the_walk_over_members_after_every_event(sequence: list[Step]) -> None:
    h = Harness()
    for name in ("a", "b"):
        h.group(podgroup(name, min_member=2))
    for i, group, node, phase, deleting, delete in sequence:
        name = f"p{i}"
        if delete:
            if ("ns", name) in h.pods:
                h.delete_pod(name)
        else:
            raw: dict[str, Any] = pod_obj(name, group=group, node=node, phase=phase, uid=name)
            if deleting:
                raw["metadata"]["deletionTimestamp"] = "2026-11-24T10:00:00Z"
            h.pod(raw)
        uids = ["pg-a", "pg-b", *(f"pod:p{j}" for j in range(6))]
        for uid in uids:
            assert h.cache.member_counts(uid) == walked(h.cache, uid), uid


def test_a_gangs_counts_follow_its_pods() -> None:
    h = Harness()
    h.group(podgroup("g", min_member=2))
    h.pod(pod_obj("x", group="g", uid="x"))
    h.pod(pod_obj("y", group="g", uid="y"))
    assert h.cache.member_counts("pg-g") == (0, 0, 2)
    h.pod(pod_obj("x", group="g", uid="x", node="n1"))
    h.pod(pod_obj("y", group="g", uid="y", node="n1", phase="Running"))
    assert h.cache.member_counts("pg-g") == (2, 1, 0)
    leaving = pod_obj("y", group="g", uid="y", node="n1", phase="Running")
    leaving["metadata"]["deletionTimestamp"] = "2026-11-24T10:00:00Z"
    h.pod(leaving)
    assert h.cache.member_counts("pg-g") == (1, 0, 0)
    h.delete_pod("x")
    h.delete_pod("y")
    assert h.cache.member_counts("pg-g") == (0, 0, 0)
    assert h.cache.member_counts("pod:nobody") == (0, 0, 0)


def walked_orphans(cache: SchedulerCache) -> set[str]:
    return {
        rec.uid
        for rec in cache.pods.values()
        if rec.group_name
        and (rec.namespace, rec.group_name) not in cache.groups
        and rec.scheduler_name == cache.scheduler_name
        and not rec.node_name
        and not rec.deleting
    }


@settings(max_examples=60, deadline=None)
@given(steps, st.lists(st.tuples(st.sampled_from(("a", "b")), st.booleans()), max_size=20))
@example(  # a group deleted under its waiting pod, then created again
    [(0, "a", "", "Pending", False, False)] * 3, [("a", False), ("a", True), ("a", False)]
)
def test_orphans_are_the_waiting_pods_whose_podgroup_does_not_exist(
    sequence: list[Step], group_events: list[tuple[str, bool]]
) -> None:
    """orphans() reads a kept set of the group keys with pods and no PodGroup; here against
    the walk over every pod, as PodGroups are deleted and created under their pods."""
    h = Harness()
    h.group(podgroup("a", min_member=2))
    for n, (i, group, node, phase, deleting, delete) in enumerate(sequence):
        name = f"p{i}"
        if delete:
            if ("ns", name) in h.pods:
                h.delete_pod(name)
        else:
            raw: dict[str, Any] = pod_obj(name, group=group, node=node, phase=phase, uid=name)
            if deleting:
                raw["metadata"]["deletionTimestamp"] = "2026-11-24T10:00:00Z"
            h.pod(raw)
        if n < len(group_events):
            group_name, create = group_events[n]
            key = ("ns", group_name)
            if create:
                h.group(podgroup(group_name, min_member=2))
            elif key in h.groups:
                h.cache.on_podgroup("DELETED", key, None, h.groups.pop(key))
        assert {rec.uid for rec in h.cache.orphans()} == walked_orphans(h.cache)
