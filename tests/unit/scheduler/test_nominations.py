"""Room nominated for a preemptor is held for it until it binds."""

from __future__ import annotations

import dataclasses

from operators.scheduler import run_session
from operators.scheduler.snapshot import GroupPhase, Queue, Snapshot

from .builders import binds, evictions, group, node, tasks


def test_nominated_room_is_not_taken_by_another_queue() -> None:
    # "aq" sorts before "zq", so round robin serves the other queue first.
    preemptor = [dataclasses.replace(t, nominated_node="n0") for t in tasks("p", 1, cpu=8)]
    snap = Snapshot(
        now=0.0,
        nodes=(node("n0", cpu=8), node("n1", cpu=8)),
        queues=(Queue("aq"), Queue("zq")),
        groups=(
            group("low", queue="zq", phase=GroupPhase.RUNNING),
            group("p", queue="zq", priority=100),
            group("other", queue="aq"),
        ),
        tasks=(*preemptor, *tasks("low", 1, cpu=8, on=["n1"]), *tasks("other", 1, cpu=8)),
    )
    result = run_session(snap)
    placed = {b.group: b.node for b in binds(result)}
    assert placed.get("p") == "n0"
    assert "other" not in placed
    # The preemptor takes no second victim (the other queue may reclaim for itself).
    assert not [e for e in evictions(result) if e.preemptor == "p"]
