"""Known failure modes of peer schedulers, each pinned by a test (issue 4)."""

from __future__ import annotations

from operators.scheduler import run_session
from operators.scheduler.decisions import ReasonCode, SetGroupPhase
from operators.scheduler.snapshot import (
    GroupPhase,
    NetworkTopology,
    Queue,
    Snapshot,
    Topology,
    TopologyLevel,
    TopologyMode,
)

from .builders import binds, evictions, group, node, nominations, tasks

TOPO = Topology(
    name="t",
    levels=(TopologyLevel("tor", "tor"), TopologyLevel("hostname", "kubernetes.io/hostname")),
)


def test_two_gangs_that_each_fit_only_alone_do_not_deadlock() -> None:
    # Volcano #3373: two gangs each grab part of the cluster and neither reaches its minimum.
    nodes = tuple(node(f"n{i}", cpu=8) for i in range(4))
    snap = Snapshot(
        now=0,
        nodes=nodes,
        groups=(group("a", min_member=3), group("b", min_member=3)),
        tasks=(*tasks("a", 3, cpu=8), *tasks("b", 3, cpu=8)),
    )
    result = run_session(snap)
    placed = {b.group for b in binds(result)}
    assert len(placed) == 1  # exactly one gang runs, whole
    assert len(binds(result)) == 3
    loser = ({"a", "b"} - placed).pop()
    assert result.explanations[loser].code == ReasonCode.UNSCHEDULABLE


def test_high_priority_gang_preempts_low_priority_job_filling_the_cluster() -> None:
    # Volcano #2034 / #3040: a multi-pod high-priority gang cannot preempt.
    nodes = tuple(node(f"n{i}", cpu=8) for i in range(4))
    snap = Snapshot(
        now=0,
        nodes=nodes,
        groups=(
            group("low", min_member=4, phase=GroupPhase.RUNNING),
            group("high", min_member=4, priority=100),
        ),
        tasks=(
            *tasks("low", 4, cpu=8, on=["n0", "n1", "n2", "n3"]),
            *tasks("high", 4, cpu=8),
        ),
    )
    result = run_session(snap)
    assert [e.group for e in evictions(result)] == ["low"]
    assert len(evictions(result)[0].tasks) == 4
    assert {n.group for n in nominations(result)} == {"high"}
    assert len(nominations(result)) == 4
    assert not binds(result)  # nothing binds into room that is still being freed
    assert result.explanations["high"].code == ReasonCode.PREEMPTING


def test_enqueue_counts_reclaimable_room_so_reclaim_can_start() -> None:
    # Volcano #4679: enqueue rejects because the cluster is full, so reclaim never runs.
    nodes = tuple(node(f"n{i}", cpu=8) for i in range(4))
    queues = (Queue("a"), Queue("b"))
    running = [group(f"a{i}", queue="a", phase=GroupPhase.RUNNING) for i in range(4)]
    bound = [t for i in range(4) for t in tasks(f"a{i}", 1, cpu=8, on=[f"n{i}"])]
    pending = group("b0", queue="b", min_member=2, phase=GroupPhase.PENDING)
    snap = Snapshot(
        now=0,
        nodes=nodes,
        queues=queues,
        groups=(*running, pending),
        tasks=(*bound, *tasks("b0", 2, cpu=8)),
    )
    first = run_session(snap)
    assert SetGroupPhase("b0", GroupPhase.INQUEUE, "Admitted") in first.decisions
    # The same session goes on to reclaim for it: queue b deserves half the cluster.
    assert len(nominations(first)) == 2
    assert sum(len(e.tasks) for e in evictions(first)) == 2
    assert all(e.reason == "Reclaimed" for e in evictions(first))


def test_preemption_respects_the_preemptors_topology_constraint() -> None:
    # Volcano #4374 / #4533: preemption ignored HyperNodes and broke a hard constraint.
    labels = {
        "n0": "tor0",
        "n1": "tor0",
        "n2": "tor1",
        "n3": "tor1",
    }
    nodes = tuple(
        node(name, cpu=8, labels={"tor": tor, "kubernetes.io/hostname": name})
        for name, tor in labels.items()
    )
    # The two cheapest victims sit in different ToRs: taking them would not help.
    victims = {"v0": ("n0", 0), "v2": ("n2", 0), "v1": ("n1", 5), "v3": ("n3", 5)}
    groups = [
        group(uid, priority=prio, phase=GroupPhase.RUNNING) for uid, (_, prio) in victims.items()
    ]
    bound = [t for uid, (where, _) in victims.items() for t in tasks(uid, 1, cpu=8, on=[where])]
    preemptor = group(
        "p",
        min_member=2,
        priority=100,
        network_topology=NetworkTopology(TopologyMode.HARD, "tor"),
    )
    snap = Snapshot(
        now=0,
        nodes=nodes,
        groups=(*groups, preemptor),
        tasks=(*bound, *tasks("p", 2, cpu=8)),
        topology=TOPO,
    )
    result = run_session(snap)
    nominated = {n.node for n in nominations(result)}
    assert nominated in ({"n0", "n1"}, {"n2", "n3"})
    evicted = {e.group for e in evictions(result)}
    assert len(evicted) == 2
    assert {victims[v][0] for v in evicted} == nominated
