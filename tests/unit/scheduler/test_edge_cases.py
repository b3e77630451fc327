"""Odd snapshots must not crash a session: the live scheduler feeds whatever the cluster holds."""

from __future__ import annotations

from operators.scheduler import run_session
from operators.scheduler.decisions import ReasonCode
from operators.scheduler.snapshot import (
    GroupPhase,
    Node,
    Queue,
    Snapshot,
    Task,
    TaskStatus,
    Topology,
    TopologyLevel,
)

from .builders import binds, group, node, tasks


def test_empty_cluster() -> None:
    result = run_session(Snapshot(now=0, nodes=()))
    assert result.decisions == ()
    snap = Snapshot(now=0, nodes=(), groups=(group("g"),), tasks=tuple(tasks("g", 1)))
    result = run_session(snap)
    assert not binds(result)
    assert result.explanations["g"].code == ReasonCode.UNSCHEDULABLE


def test_gpu_request_on_cpu_only_nodes_is_explained() -> None:
    snap = Snapshot(
        now=0, nodes=(node("n0"),), groups=(group("g"),), tasks=tuple(tasks("g", 1, gpus=1))
    )
    result = run_session(snap)
    assert not binds(result)
    assert "insufficient free resources" in result.explanations["g"].message


def test_queue_cycle_and_unknown_parent_hang_off_root() -> None:
    queues = (Queue("a", parent="b"), Queue("b", parent="a"), Queue("c", parent="nope"))
    snap = Snapshot(
        now=0,
        nodes=(node("n0"),),
        queues=queues,
        groups=(group("g", queue="c"), group("h", queue="a")),
        tasks=(*tasks("g", 1), *tasks("h", 1)),
    )
    result = run_session(snap)
    assert {b.group for b in binds(result)} == {"g", "h"}
    assert set(result.queues) >= {"root", "default", "a", "b", "c"}


def test_orphans_and_unknown_nodes_are_ignored() -> None:
    orphan = Task(uid="x", group="missing", namespace="ns", name="x", requests={"cpu": 1000})
    ghost = Task(
        uid="y",
        group="g",
        namespace="ns",
        name="y",
        requests={"cpu": 1000},
        status=TaskStatus.BOUND,
        node="gone",
    )
    snap = Snapshot(
        now=0,
        nodes=(node("n0", cpu=1),),
        groups=(group("g", min_member=1, phase=GroupPhase.RUNNING),),
        tasks=(orphan, ghost, *tasks("g", 1, start=5)),
    )
    result = run_session(snap)
    assert [b.task for b in binds(result)] == ["g-5"]


def test_nodes_without_topology_labels_are_their_own_domains() -> None:
    topo = Topology(name="t", levels=(TopologyLevel("tor", "tor"),))
    snap = Snapshot(
        now=0,
        nodes=(
            Node(name="a", allocatable={"cpu": 4000}),
            Node(name="b", allocatable={"cpu": 4000}),
        ),
        groups=(group("g", min_member=2, unit_tier="tor"),),
        tasks=tuple(tasks("g", 2, cpu=4, unit="u")),
        topology=topo,
    )
    assert not binds(run_session(snap))  # two unlabeled nodes never share a ToR


def test_overcommitted_snapshot_does_not_go_negative() -> None:
    # The cluster already holds more than a node offers (e.g. allocatable shrank).
    snap = Snapshot(
        now=0,
        nodes=(node("n0", cpu=2),),
        groups=(group("old", phase=GroupPhase.RUNNING), group("new")),
        tasks=(*tasks("old", 1, cpu=4, on=["n0"]), *tasks("new", 1, cpu=1)),
    )
    result = run_session(snap)
    assert not binds(result)
