"""``sluice simulate``: what-if questions answered by the scheduler core in simulated time.

Nodes come from a profile (``lingjun``: Alibaba Lingjun's 847-host Clos; ``clos:AxTxN``:
A aggregation switches x T ToRs x N nodes of 8 GPUs) or a CSV (the openb node list
``sn,cpu_milli,memory_mib,gpu,model``, Lingjun's ``topo.csv``, or ``name,gpus,tor,agg``).
Jobs come from a CSV in the RFold format (``id,arrival s,topology,shape,GPUs,duration s``,
optionally a 7th column with the queue). The replay prints job-completion and queueing
statistics, topology locality and utilisation, and can plot GPUs in use over time.
``--snapshot`` instead takes a recorded cluster (simulate_snapshot.py).
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from operators.cli import common
from operators.scheduler.session import SessionConfig
from operators.scheduler.snapshot import Node
from operators.simulator import replay
from operators.simulator.policies import Policy, scorer
from operators.traces import traces_dir

if TYPE_CHECKING:
    from collections.abc import Sequence

POLICIES = ("sluice", "fifo-random", "fifo-bestfit")
MAX_SOFT_AFTER = 604_800  # the API's bound on networkTopology.softAfterSeconds (one week)


def arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--nodes", help="profile (lingjun, clos:AxTxN) or CSV")
    parser.add_argument("--jobs", type=Path, help="job CSV (RFold format)")
    parser.add_argument(
        "--snapshot",
        type=Path,
        help="instead of --nodes/--jobs: a recorded cluster (kubectl get ... -o yaml) for one "
        "session, as is and with --guarantee changes",
    )
    parser.add_argument(
        "--guarantee",
        action="append",
        default=[],
        metavar="QUEUE=[+]GPUS",
        help="with --snapshot: what if QUEUE were guaranteed GPUS (or +GPUS more); repeatable",
    )
    parser.add_argument("--limit", type=int, help="replay only the first N jobs")
    parser.add_argument("--policy", choices=POLICIES, default="sluice")
    parser.add_argument(
        "--topology",
        choices=("soft", "hard", "tor", "none"),
        default="soft",
        help="network topology the gangs ask for (sluice policy only; default soft; tor: gangs "
        "that fit one ToR wait for one, the others soft)",
    )
    parser.add_argument(
        "--soft-after",
        type=int,
        metavar="SECONDS",
        help="with --topology tor: a gang waits for one ToR at most SECONDS after it arrives, "
        "then spreads as soft (networkTopology.softAfterSeconds)",
    )
    parser.add_argument("--plot", type=Path, help="write GPUs in use over time (.png/.svg)")


def load_nodes(spec: str) -> tuple[Node, ...]:
    if spec == "lingjun":
        return replay.load_lingjun_hosts(traces_dir() / "lingjun" / "topo.csv")
    if spec.startswith("clos:"):
        aggs, tors, per_tor = (int(x) for x in spec.removeprefix("clos:").split("x"))
        return replay.clos_nodes(aggs, tors, per_tor)
    path = Path(spec)
    if not path.is_file():
        raise SystemExit(f"sluice simulate: no such node profile or file: {spec}")
    with path.open(newline="") as f:
        header = next(csv.reader(f), [])
    if "DSW" in header:
        return replay.load_lingjun_hosts(path)
    out: list[Node] = []
    with path.open(newline="") as f:
        for row in csv.DictReader(f):
            name = row.get("sn") or row.get("name") or f"node-{len(out)}"
            gpus = int(row.get("gpu") or row.get("gpus") or 0)
            labels = {
                k: v
                for k, v in ((replay.TOR_LABEL, row.get("tor")), (replay.AGG_LABEL, row.get("agg")))
                if v
            }
            out.append(replay.gpu_node(name, labels, gpus))
    return tuple(out)


def config_for(
    policy: str, topology: str, soft_after: int | None = None
) -> tuple[SessionConfig, replay.GroupShaper]:
    if soft_after is not None:
        # Refused as the API refuses it (softAfterSeconds only bounds a hard request).
        if policy != "sluice" or topology != "tor":
            raise SystemExit("sluice simulate: --soft-after goes with --topology tor")
        if not 0 <= soft_after <= MAX_SOFT_AFTER:
            raise SystemExit(f"sluice simulate: --soft-after must be 0..{MAX_SOFT_AFTER} seconds")
    if policy == "sluice":
        if topology == "tor":
            shape = replay.tor_first if soft_after is None else replay.tor_for(float(soft_after))
            return SessionConfig(), shape
        mode = {"soft": replay.soft_topology, "hard": replay.hard_topology}
        return SessionConfig(), mode.get(topology, replay.as_is)
    only = SessionConfig(binpack_weight=0.0, topology_weight=0.0, fragmentation_weight=0.0)
    if policy == "fifo-random":
        return dataclasses.replace(
            only, scorers=(scorer(Policy.RANDOM, seed=42),), fresh_scores=True
        ), replay.as_is
    return dataclasses.replace(only, scorers=(scorer(Policy.BESTFIT),)), replay.as_is


def run(args: argparse.Namespace) -> int:
    if args.snapshot is not None:
        from operators.cli import simulate_snapshot

        return simulate_snapshot.run(args.snapshot, args.guarantee)
    if args.nodes is None or args.jobs is None:
        raise SystemExit("sluice simulate: give --nodes and --jobs, or --snapshot")
    if args.guarantee:
        raise SystemExit("sluice simulate: --guarantee goes with --snapshot")
    config, shape = config_for(args.policy, args.topology, args.soft_after)
    nodes = load_nodes(args.nodes)
    if not args.jobs.is_file():
        raise SystemExit(f"sluice simulate: no such job file: {args.jobs}")
    jobs = replay.load_jobs(args.jobs, args.limit)
    sim = replay.Replay(nodes, jobs, config, shape=shape)
    stats = replay.summarise(sim.run(), nodes)
    gpus = sum(n.gpu_count for n in nodes)
    sys.stdout.write(f"{len(nodes)} nodes, {gpus} GPUs; {len(jobs)} jobs; policy {args.policy}\n")
    for label, value in _lines(stats, sim.sessions):
        sys.stdout.write(f"  {label:<44} {value}\n")
    if args.plot:
        _plot(sim.timeline, gpus, args.plot)
        sys.stdout.write(f"plot written to {args.plot}\n")
    return 0


COMMAND = common.Command(
    "simulate",
    "replay nodes and jobs through the scheduler core in simulated time",
    __doc__ or "",
    run_local=run,
    arguments=arguments,
)


def _lines(stats: replay.ReplayStats, sessions: int) -> Sequence[tuple[str, str]]:
    return (
        ("jobs finished", f"{stats.finished} / {stats.jobs}"),
        ("average / p95 JCT", f"{stats.avg_jct / 3600:.2f} h / {stats.p95_jct / 3600:.2f} h"),
        (
            "average / p95 queueing delay",
            f"{stats.avg_wait / 60:.1f} min / {stats.p95_wait / 60:.1f} min",
        ),
        ("GPU utilisation over the makespan", f"{stats.utilisation:.1f}%"),
        ("multi-node jobs", str(stats.multi_node)),
        ("  fitting one ToR, placed inside one ToR", f"{stats.in_one_tor:.1f}%"),
        ("  inside one aggregation switch", f"{stats.in_one_agg:.1f}%"),
        ("  ToRs per job (mean / p95)", f"{stats.tors_mean:.2f} / {stats.tors_p95:.0f}"),
        ("scheduler sessions", str(sessions)),
    )


def _plot(timeline: list[tuple[float, int, int]], gpus: int, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    hours = [t / 3600 for t, _, _ in timeline]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 5), sharex=True)
    top.step(hours, [100 * held / gpus for _, held, _ in timeline], where="post")
    top.set_ylabel("GPUs in use %")
    top.set_ylim(0, 100)
    bottom.step(hours, [w for _, _, w in timeline], where="post", color="tab:red")
    bottom.set_ylabel("jobs waiting")
    bottom.set_xlabel("simulated time (h)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
