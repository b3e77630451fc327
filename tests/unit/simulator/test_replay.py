"""Jobs replayed in simulated time on tiny clusters whose outcome is known by hand."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from operators.cli import simulate
from operators.cli.main import main
from operators.scheduler.session import DEFAULT_ACTIONS, ActionName, SessionConfig
from operators.scheduler.snapshot import NetworkTopology, PodGroup, TopologyMode
from operators.simulator import replay
from operators.simulator.replay import TraceJob

if TYPE_CHECKING:
    from pathlib import Path

    from operators.scheduler.snapshot import Node


def _clos(tors: int, per_tor: int) -> tuple[Node, ...]:
    return tuple(
        replay.gpu_node(f"t{t}-n{n}", {replay.TOR_LABEL: f"t{t}", replay.AGG_LABEL: "a"})
        for t in range(tors)
        for n in range(per_tor)
    )


def test_a_gang_waits_for_the_whole_cluster_and_its_jct_adds_the_wait() -> None:
    # 16 GPUs. j0 takes all of them for 100 s; j1 arrives at 10 s and needs 8: it waits
    # until j0 ends at 100 s, runs 50 s, and ends at 150 s.
    jobs = [TraceJob("j0", 0.0, 16, 100.0), TraceJob("j1", 10.0, 8, 50.0)]
    records = replay.Replay(_clos(1, 2), jobs, SessionConfig()).run()
    first, second = records
    assert (first.start, first.end, first.jct) == (0.0, 100.0, 100.0)
    assert (second.start, second.end) == (100.0, 150.0)
    assert (second.wait, second.jct) == (90.0, 140.0)
    assert len(first.nodes) == 2
    stats = replay.summarise(records, _clos(1, 2))
    assert stats.avg_jct == 120.0
    assert stats.avg_wait == 45.0
    # 16 GPUs x 100 s + 8 x 50 s busy over 150 s of 16 GPUs.
    assert stats.utilisation == pytest.approx(100 * (1600 + 400) / (16 * 150))


def test_soft_topology_keeps_a_two_node_gang_inside_one_tor() -> None:
    # Two ToRs of two 8-GPU nodes. A one-node job sits on the first ToR; a 16-GPU gang then
    # fits inside one ToR only on the second.
    nodes = _clos(2, 2)
    jobs = [TraceJob("j0", 0.0, 8, 1000.0), TraceJob("j1", 1.0, 16, 10.0)]
    sim = replay.Replay(nodes, jobs, SessionConfig(), shape=replay.soft_topology)
    records = sim.run()
    assert set(records[1].nodes) == {"t1-n0", "t1-n1"}
    stats = replay.summarise(records, nodes)
    assert (stats.multi_node, stats.tor_fit, stats.in_one_tor, stats.tors_mean) == (
        1,
        1,
        100.0,
        1.0,
    )


def test_pod_sizes_split_jobs_into_whole_nodes_and_a_remainder() -> None:
    assert replay.pod_sizes(4) == [4]
    assert replay.pod_sizes(8) == [8]
    assert replay.pod_sizes(20) == [8, 8, 4]


def test_cli_simulate_prints_the_replay_summary(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    jobs = tmp_path / "jobs.csv"
    jobs.write_text(
        "#job id,arrival time (sec),topology,shape,size,duration (sec)\n"
        "0,0.0,CLOS,16,16,100.0\n"
        "1,10.0,CLOS,8,8,50.0\n"
    )
    plot = tmp_path / "gpus.png"
    code = main(["simulate", "--nodes", "clos:1x1x2", "--jobs", str(jobs), "--plot", str(plot)])
    out = capsys.readouterr().out
    assert code == 0
    assert "2 nodes, 16 GPUs; 2 jobs; policy sluice" in out
    assert "2 / 2" in out  # jobs finished
    assert "average / p95 queueing delay" in out
    assert plot.stat().st_size > 0


def test_tor_first_waits_for_one_tor_where_soft_spreads() -> None:
    # ToR t0 has two nodes, t1 one. A long one-node job takes t0-n0; a two-node gang then fits
    # in no single ToR: soft spreads it over both ToRs at once, ToR-hard waits for t0.
    nodes = (*_clos(1, 2), replay.gpu_node("t1-n0", {replay.TOR_LABEL: "t1"}))
    jobs = [TraceJob("j0", 0.0, 8, 1000.0), TraceJob("j1", 1.0, 16, 10.0)]
    soft = replay.Replay(nodes, jobs, SessionConfig(), shape=replay.soft_topology).run()
    assert soft[1].start == 1.0
    assert set(soft[1].nodes) == {"t0-n1", "t1-n0"}
    # Without consolidation the ToR-hard gang waits for j0 to end.
    still = SessionConfig(actions=tuple(a for a in DEFAULT_ACTIONS if a != ActionName.CONSOLIDATE))
    hard = replay.Replay(nodes, jobs, still, shape=replay.tor_first).run()
    assert hard[1].start == 1000.0
    assert set(hard[1].nodes) == {"t0-n0", "t0-n1"}
    # With it (the default), j0 moves to t1 (one restart) and the gang starts at once in t0.
    moved = replay.Replay(nodes, jobs, SessionConfig(), shape=replay.tor_first).run()
    assert moved[1].start == 1.0
    assert set(moved[1].nodes) == {"t0-n0", "t0-n1"}
    assert moved[0].restarts == 1
    assert moved[0].nodes == ("t1-n0",)


def test_a_gang_waits_for_one_tor_at_most_its_soft_after_then_spreads() -> None:
    # The scene above without consolidation: no ToR frees until j0 ends at 1000 s, and no
    # arrival or end happens before; the replay still runs a session when the gang's 100 s
    # are up (as the live loop wakes for it), and the gang spreads then.
    nodes = (*_clos(1, 2), replay.gpu_node("t1-n0", {replay.TOR_LABEL: "t1"}))
    jobs = [TraceJob("j0", 0.0, 8, 1000.0), TraceJob("j1", 1.0, 16, 10.0)]
    still = SessionConfig(actions=tuple(a for a in DEFAULT_ACTIONS if a != ActionName.CONSOLIDATE))
    records = replay.Replay(nodes, jobs, still, shape=replay.tor_for(100.0)).run()
    assert records[1].start == 101.0
    assert set(records[1].nodes) == {"t0-n1", "t1-n0"}


def test_a_job_that_can_never_start_is_reported_with_the_reason() -> None:
    # 16 GPUs; a 24-GPU job can never fit: when no event is left, the replay says why.
    jobs = [TraceJob("j0", 0.0, 8, 10.0), TraceJob("j1", 1.0, 24, 10.0)]
    sim = replay.Replay(_clos(1, 2), jobs, SessionConfig())
    records = sim.run()
    assert records[0].end == 10.0
    assert records[1].start is None
    assert list(sim.unstarted) == ["j1"]
    assert sim.unstarted["j1"].startswith("0/3 pods bound; ")


def test_a_run_ending_twice_finishes_once() -> None:
    # A job evicted and bound again at the instant it started (consolidation moving it in a
    # follow-up session) has the same end pushed twice; the second must not fail the replay.
    sim = replay.Replay(_clos(1, 1), [TraceJob("j0", 0.0, 8, 30.0)], SessionConfig())
    sim._arrive(sim.jobs[0])
    sim.records["j0"].start, sim.records["j0"].end = 0.0, 30.0
    sim._finish("j0", 30.0)
    sim._finish("j0", 30.0)
    assert "j0" not in sim.groups
    assert sim.records["j0"].end == 30.0


def test_cli_simulate_bounds_the_tor_wait_as_the_api_does() -> None:
    # --topology tor: gangs that fit one ToR ask hard for one; --soft-after N bounds the wait
    # (softAfterSeconds); larger gangs ask softly. Out of range or without tor it is refused,
    # as the API refuses softAfterSeconds without a hard request.
    _, bounded = simulate.config_for("sluice", "tor", 1800)
    _, unbounded = simulate.config_for("sluice", "tor")
    gang = PodGroup(uid="g", namespace="ns", name="g", min_member=4)
    wide = PodGroup(uid="w", namespace="ns", name="w", min_member=16)
    assert bounded(gang).network_topology == NetworkTopology(TopologyMode.HARD, "tor", 1800.0)
    assert unbounded(gang).network_topology == NetworkTopology(TopologyMode.HARD, "tor")
    assert bounded(wide).network_topology == NetworkTopology(TopologyMode.SOFT, "")
    for policy, topology, seconds in (
        ("sluice", "soft", 60),
        ("fifo-bestfit", "tor", 60),
        ("sluice", "tor", -1),
        ("sluice", "tor", simulate.MAX_SOFT_AFTER + 1),
    ):
        with pytest.raises(SystemExit, match="--soft-after"):
            simulate.config_for(policy, topology, seconds)
