"""Backfill with reservation: a stream of small jobs cannot starve a big gang."""

from __future__ import annotations

import dataclasses

from operators.scheduler import SessionConfig, run_session
from operators.scheduler.snapshot import (
    GroupPhase,
    NetworkTopology,
    Snapshot,
    Task,
    Topology,
    TopologyLevel,
    TopologyMode,
)

from .builders import binds, group, node, tasks
from .simulate import advance, assert_gangs_all_or_nothing, assert_no_node_overcommitted

RUN_FOR = 2  # sessions a small job runs before it completes
ARRIVALS = 3  # new one-node jobs per session: as many as finish, so the queue never drains


def _stream(max_reservations: int, sessions: int = 12) -> tuple[int | None, list[str]]:
    """Six 8-CPU nodes, all busy with one-node jobs that end at staggered times; every session
    ARRIVALS new one-node jobs arrive (created later, so ranked below the big gang). The big gang
    needs four whole nodes. Returns the session in which the big gang was bound (or None) and
    the nodes small jobs were bound to until then."""
    nodes = tuple(node(f"n{i}", cpu=8) for i in range(6))
    groups = [group("big", min_member=4, created=0.0)]
    all_tasks: list[Task] = list(tasks("big", 4, cpu=8))
    started: dict[str, int] = {}
    for i in range(6):
        uid = f"init{i}"
        groups.append(group(uid, phase=GroupPhase.RUNNING, created=-1.0))
        all_tasks.extend(tasks(uid, 1, cpu=8, on=[f"n{i}"]))
        started[uid] = -(i % RUN_FOR)  # half end after one session, half after two
    snap = Snapshot(now=0, nodes=nodes, groups=tuple(groups), tasks=tuple(all_tasks))
    small_nodes: list[str] = []
    config = SessionConfig(max_reservations=max_reservations)
    for session in range(sessions):
        done = {uid for uid, at in started.items() if session - at >= RUN_FOR}
        for uid in done:
            del started[uid]
        arrivals = [f"s{session}-{k}" for k in range(ARRIVALS)]
        snap = dataclasses.replace(
            snap,
            now=float(session),
            groups=(
                *(g for g in snap.groups if g.uid not in done),
                *(group(uid, created=float(session + 1)) for uid in arrivals),
            ),
            tasks=(
                *(t for t in snap.tasks if t.group not in done),
                *(t for uid in arrivals for t in tasks(uid, 1, cpu=8)),
            ),
        )
        result = run_session(snap, config)
        assert_no_node_overcommitted(snap, result)
        assert_gangs_all_or_nothing(snap, result)
        bound = {b.group for b in binds(result)}
        small_nodes.extend(b.node for b in binds(result) if b.group != "big")
        if "big" in bound:
            return session, small_nodes
        if max_reservations:
            assert "big" in result.reservations
            assert "reserved nodes" in result.explanations["big"].message
            # Lower-ranked work lands only on unreserved nodes.
            reserved = set(result.reservations["big"])
            assert not {b.node for b in binds(result)} & reserved
        for uid in bound:
            started[uid] = session
        snap = advance(snap, result, float(session))
    return None, small_nodes


def test_stream_of_small_jobs_starves_a_big_gang_without_reservation() -> None:
    at, _ = _stream(max_reservations=0)
    assert at is None  # the failure mode the reservation exists for


def test_reserved_nodes_drain_and_the_big_gang_runs() -> None:
    at, small_nodes = _stream(max_reservations=1)
    assert at is not None
    assert at <= RUN_FOR  # as soon as the reserved nodes have drained, not "eventually"
    # Small jobs still ran in the unreserved holes (backfill keeps working).
    assert small_nodes


def test_no_reservation_when_the_gang_cannot_fit_even_on_an_empty_pool() -> None:
    nodes = tuple(node(f"n{i}", cpu=8) for i in range(2))
    snap = Snapshot(
        now=0,
        nodes=nodes,
        groups=(group("huge", min_member=3), group("small", created=1.0)),
        tasks=(*tasks("huge", 3, cpu=8), *tasks("small", 1, cpu=8)),
    )
    result = run_session(snap)
    assert not result.reservations
    assert {b.group for b in binds(result)} == {"small"}


def test_hard_topology_gang_reserves_inside_one_domain() -> None:
    topo = Topology(
        name="t",
        levels=(TopologyLevel("tor", "tor"), TopologyLevel("hostname", "kubernetes.io/hostname")),
    )
    names = [f"n{i}" for i in range(6)]
    nodes = tuple(
        node(n, cpu=8, labels={"tor": f"tor{i // 3}", "kubernetes.io/hostname": n})
        for i, n in enumerate(names)
    )
    # tor0 is busier than tor1: tor1's nodes free up first, so it is the one held.
    busy = {"n0": 8, "n1": 8, "n2": 8, "n3": 8, "n4": 4}
    running = [group(f"r{n}", phase=GroupPhase.RUNNING, created=-1.0) for n in busy]
    bound = [t for n, cpu in busy.items() for t in tasks(f"r{n}", 1, cpu=cpu, on=[n])]
    big = group("big", min_member=3, network_topology=NetworkTopology(TopologyMode.HARD, "tor"))
    snap = Snapshot(
        now=0,
        nodes=nodes,
        groups=(*running, big, group("small", created=1.0)),
        tasks=(*bound, *tasks("big", 3, cpu=8), *tasks("small", 1, cpu=4)),
        topology=topo,
    )
    result = run_session(snap)
    assert result.reservations["big"] == ("n3", "n4", "n5")
    # The small job may not take the hole on n4 or n5 (reserved), and tor0 is full.
    assert not binds(result)


def test_small_jobs_still_use_holes_outside_the_reservation() -> None:
    nodes = tuple(node(f"n{i}", cpu=8) for i in range(5))
    busy = {"n0": 4, "n1": 4, "n2": 4, "n3": 6, "n4": 6}  # CPU in use per node
    running = [group(f"r{n}", phase=GroupPhase.RUNNING, created=-1.0) for n in busy]
    bound = [t for n, cpu in busy.items() for t in tasks(f"r{n}", 1, cpu=cpu, on=[n])]
    snap = Snapshot(
        now=0,
        nodes=nodes,
        groups=(*running, group("big", min_member=3), group("small", created=1.0)),
        tasks=(*bound, *tasks("big", 3, cpu=8), *tasks("small", 2, cpu=2)),
    )
    result = run_session(snap)
    # The freest nodes are held for the big gang; the 2-CPU holes elsewhere are backfilled.
    assert result.reservations["big"] == ("n0", "n1", "n2")
    assert "reserved nodes n0,n1,n2 for gang ns/big" in result.explanations["big"].message
    assert sorted(b.node for b in binds(result)) == ["n3", "n4"]
