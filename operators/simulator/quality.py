"""``make quality``: the FGD-paper matrix through the simulator, and docs/quality.md from it.

Runs (trace x policy x seed) are cached one JSON line each in a results file, so an
interrupted matrix resumes where it stopped and the report can be rebuilt without rerunning.
``python -m operators.simulator.quality run --traces default --seeds 42`` runs a slice;
``... report`` writes the openb section of docs/quality.md and its plot.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from dataclasses import asdict
from pathlib import Path

from operators.scheduler.session import SessionConfig
from operators.scheduler.usage import UsageParams
from operators.simulator import openb, quotas, replay
from operators.simulator.policies import Policy, scorer
from operators.traces import traces_dir

OURS = "Sluice"
REFERENCE = {
    "Random": Policy.RANDOM,
    "DotProd": Policy.DOTPROD,
    "Packing": Policy.PACKING,
    "BestFit": Policy.BESTFIT,
    "FGD": Policy.FGD,
}
ALL_POLICIES = (*REFERENCE, OURS)
# Sluice with fragmentation knobs away from the defaults, run only when named (``--policies``):
# the variants measured in docs/quality.md part A. "Sluice, paper's measure" is the default
# before session 9 (the FGD paper's fragment measure, scores in whole percent).
# Name -> (fragmentation_cpu_reach, fragmentation_levels, fragmentation_scarcity).
PAPERS_MEASURE = "Sluice, paper's measure"
SLUICE_VARIANTS: dict[str, tuple[float, int, float]] = {
    PAPERS_MEASURE: (0.0, 100, 0.0),
    "Sluice, CPU reach": (1.0, 20, 0.0),
    "Sluice, CPU reach 0.5": (0.5, 100, 0.0),
    "Sluice, CPU reach + scarcity": (1.0, 20, 0.5),
}
FRAGMENTATION_KEY = "fragmentation"  # a cached Sluice row's [cpu_reach, levels, scarcity]
LINGJUN_RESULTS = Path("docs/quality/lingjun-results.json")
PHILLY_RESULTS = Path("docs/quality/philly-results.json")
# Part C variants: the core's defaults, and the same with time-based fair share on the root
# (kValue 1; usage over the replayed day: 6 h half-life, 24 one-hour slices) for the on/off
# comparison of per-queue wait.
PHILLY_USAGE = UsageParams(half_life=6 * 3600.0, window=quotas.DAY, buckets=24)
PHILLY_VARIANTS: dict[str, quotas.Variant] = {
    "Sluice": quotas.Variant(SessionConfig()),
    "Sluice, fair share": quotas.Variant(SessionConfig(), fair_share_k=1.0, usage=PHILLY_USAGE),
}


def results_path() -> Path:
    return Path(os.environ.get("SLUICE_QUALITY_RESULTS", "docs/quality/openb-results.jsonl"))


def default_knobs() -> tuple[float, int, float]:
    """The core's default (fragmentation_cpu_reach, fragmentation_levels, fragmentation_scarcity)."""
    d = SessionConfig()
    return (d.fragmentation_cpu_reach, d.fragmentation_levels, d.fragmentation_scarcity)


def fragmentation_knobs(policy: str) -> tuple[float, int, float] | None:
    """The fragmentation knobs a Sluice policy name runs with today (None: a reference policy)."""
    return default_knobs() if policy == OURS else SLUICE_VARIANTS.get(policy)


def load_results(path: Path) -> dict[tuple[str, str, int], dict[str, object]]:
    """Cached runs by (trace, policy, seed). Runs are keyed by policy name, and what "Sluice"
    means moves with the core's defaults: a Sluice row whose recorded knobs are not what its
    name runs with today is an error here, not a silent mix of two configurations."""
    out: dict[tuple[str, str, int], dict[str, object]] = {}
    if path.is_file():
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if line.strip():
                row = json.loads(line)
                check_knobs(row, f"{path}:{number}")
                out[(row["trace"], row["policy"], int(row["seed"]))] = row
    return out


def check_knobs(row: dict[str, object], where: str) -> None:
    policy = str(row["policy"])
    wanted = fragmentation_knobs(policy)
    if wanted is None:
        return
    got = row.get(FRAGMENTATION_KEY)
    if not isinstance(got, list) or tuple(got) != wanted:
        raise ValueError(
            f"{where}: the cached {policy!r} run (trace {row['trace']}, seed {row['seed']}) "
            f"has fragmentation knobs {got}, but {policy!r} runs with {list(wanted)} now "
            "(cpu_reach, levels, scarcity): rename its rows to the variant that matches, "
            "or delete them to run again"
        )


def run_matrix(traces: list[str], policies: list[str], seeds: list[int], path: Path) -> None:
    unknown = [p for p in policies if p not in REFERENCE and fragmentation_knobs(p) is None]
    if unknown:
        # Not run as the default under a name of its own (a variant that became the default
        # is "Sluice" now): the cache would keep it under that name.
        known = ", ".join(repr(p) for p in (*ALL_POLICIES, *SLUICE_VARIANTS))
        raise ValueError(f"unknown policies {unknown}; known: {known}")
    done = load_results(path)
    folder = traces_dir() / "openb"
    nodes = openb.load_nodes(folder / "openb_node_list_gpu_node.csv")
    path.parent.mkdir(parents=True, exist_ok=True)
    workloads = {t: openb.load_pods(folder / f"openb_pod_list_{t}.csv") for t in traces}
    # Seeds outermost: an interrupted matrix still covers every trace and policy.
    for seed in seeds:
        for trace in traces:
            for policy in policies:
                if (trace, policy, seed) in done:
                    continue
                started = time.perf_counter()
                knobs = fragmentation_knobs(policy)
                config = (
                    dataclasses.replace(
                        openb.session_config(None, seed, ()),
                        fragmentation_cpu_reach=knobs[0],
                        fragmentation_levels=knobs[1],
                        fragmentation_scarcity=knobs[2],
                    )
                    if knobs is not None
                    else None
                )
                result = openb.run(nodes, workloads[trace], REFERENCE.get(policy), seed, config)
                row: dict[str, object] = {"trace": trace, "policy": policy, "seed": seed}
                if knobs is not None:
                    row[FRAGMENTATION_KEY] = list(knobs)
                row.update(asdict(result))
                row["allocation"] = [round(v, 3) for v in result.allocation]
                row["seconds"] = round(time.perf_counter() - started, 1)
                with path.open("a") as f:
                    f.write(json.dumps(row) + "\n")
                sys.stderr.write(
                    f"{trace} {policy} seed {seed}: {result.unallocated():.2f}% unallocated "
                    f"({row['seconds']} s)\n"
                )


# Gangs that fit one ToR ask hard for one with softAfterSeconds: seconds each waits at most.
LINGJUN_TOR_WAITS = {"Sluice, ToR for 600 s": 600.0, "Sluice, ToR for 1800 s": 1800.0}
LINGJUN_POLICIES = (
    "Sluice",
    *LINGJUN_TOR_WAITS,
    "Sluice, ToR-hard",
    "FIFO+random",
    "FIFO+best-fit",
)


def lingjun_config(policy: str) -> tuple[SessionConfig, replay.GroupShaper]:
    """Sluice: the core's defaults, gangs asking for a soft network topology; the baselines:
    the same queueing (the core's gang FIFO with backfill), placement by one scorer alone."""
    if policy == "Sluice":
        return SessionConfig(), replay.soft_topology
    if policy == "Sluice, ToR-hard":
        return SessionConfig(), replay.tor_first
    if policy in LINGJUN_TOR_WAITS:
        return SessionConfig(), replay.tor_for(LINGJUN_TOR_WAITS[policy])
    only = SessionConfig(binpack_weight=0.0, topology_weight=0.0, fragmentation_weight=0.0)
    if policy == "FIFO+random":
        return dataclasses.replace(
            only, scorers=(scorer(Policy.RANDOM, seed=42),), fresh_scores=True
        ), replay.as_is
    return dataclasses.replace(only, scorers=(scorer(Policy.BESTFIT),)), replay.as_is


def lingjun_path(compress: float) -> Path:
    """Lingjun replays with arrivals compressed by ``compress`` are cached here."""
    if compress == 1.0:
        return LINGJUN_RESULTS
    return LINGJUN_RESULTS.with_name(f"{LINGJUN_RESULTS.stem}-x{compress:g}.json")


LIMITED_SUFFIX = " jobs"  # the end of a partial replay's key: ", first N jobs"


def lingjun_key(policy: str, compress: float, limit: int | None) -> str:
    """A replay's name in the results file: a replay of the first ``limit`` jobs is not the
    full replay, so it is cached under its own name (and stays out of the report's table)."""
    key = policy if compress == 1.0 else f"{policy}, arrivals x{compress:g}"
    return key if limit is None else f"{key}, first {limit}{LIMITED_SUFFIX}"


def run_lingjun(policies: list[str], path: Path, limit: int | None, compress: float) -> None:
    folder = traces_dir() / "lingjun"
    nodes = replay.load_lingjun_hosts(folder / "topo.csv")
    jobs = replay.load_jobs(folder / "crux_jobs.csv", limit, compress)
    done = json.loads(path.read_text()) if path.is_file() else {}
    for policy in policies:
        key = lingjun_key(policy, compress, limit)
        if key in done:
            continue  # cached: delete the results file to replay again
        config, shape = lingjun_config(policy)
        started = time.perf_counter()
        run = replay.Replay(nodes, jobs, config, shape=shape)
        stats = replay.summarise(run.run(), nodes)
        done[key] = {
            **asdict(stats),
            "sessions": run.sessions,
            "unstarted": dict(list(run.unstarted.items())[:50]),
            "seconds": round(time.perf_counter() - started, 1),
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        # Merge with what is on disk now: replays of other policies may run side by side.
        current = json.loads(path.read_text()) if path.is_file() else {}
        path.write_text(json.dumps({**current, key: done[key]}, indent=1) + "\n")
        sys.stderr.write(f"lingjun {key}: {done[key]}\n")


def run_philly(variants: list[str], path: Path, window: tuple[float, float], seed: int) -> None:
    jobs = replay.load_jobs(traces_dir() / "philly" / "philly_jobs.csv")
    split = quotas.split(jobs, quotas.DEFAULT_PLAN, seed, window)
    nodes = replay.clos_nodes(*quotas.DEFAULT_CLOS)
    done = json.loads(path.read_text()) if path.is_file() else {}
    for variant in variants:
        if variant in done:
            continue  # cached: delete the results file to replay again
        started = time.perf_counter()
        stats, sim = quotas.run(nodes, split, quotas.DEFAULT_PLAN, PHILLY_VARIANTS[variant])
        summary = replay.summarise(list(sim.records.values()), nodes)
        entry = {
            "queues": [asdict(q) for q in stats],
            "jobs": len(split),
            "gpus": sum(n.gpu_count for n in nodes),
            "window_days": [window[0] / quotas.DAY, window[1] / quotas.DAY],
            "seed": seed,
            "utilisation": summary.utilisation,
            "avg_wait": summary.avg_wait,
            "sessions": sim.sessions,
            "evictions": sim.evictions,
            "seconds": round(time.perf_counter() - started, 1),
        }
        current = json.loads(path.read_text()) if path.is_file() else {}
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({**current, variant: entry}, indent=1) + "\n")
        sys.stderr.write(f"philly {variant}: {entry['seconds']} s, {sim.sessions} sessions\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m operators.simulator.quality")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run (and cache) the openb matrix")
    run.add_argument("--traces", nargs="+", default=list(openb.TRACES))
    run.add_argument("--policies", nargs="+", default=list(ALL_POLICIES))
    run.add_argument("--seeds", nargs="+", type=int, default=list(openb.SEEDS))
    lingjun = sub.add_parser("lingjun", help="replay the Lingjun jobs on its Clos layout")
    lingjun.add_argument("--policies", nargs="+", default=list(LINGJUN_POLICIES))
    lingjun.add_argument("--limit", type=int, default=None, help="first N jobs only")
    lingjun.add_argument(
        "--compress", type=float, default=1.0, help="divide arrival times by this (busier)"
    )
    philly = sub.add_parser("philly", help="replay a window of Philly split among queues")
    philly.add_argument("--variants", nargs="+", default=list(PHILLY_VARIANTS))
    philly.add_argument(
        "--days",
        nargs=2,
        type=float,
        default=[d / quotas.DAY for d in quotas.DEFAULT_WINDOW],
        help="window of the trace (days from its start)",
    )
    philly.add_argument("--seed", type=int, default=42, help="seed of the split among queues")
    report = sub.add_parser("report", help="write docs/quality.md sections and plots")
    report.add_argument("--docs", type=Path, default=Path("docs"))
    args = parser.parse_args(argv)
    if args.command == "run":
        run_matrix(args.traces, args.policies, args.seeds, results_path())
        return 0
    if args.command == "lingjun":
        run_lingjun(args.policies, lingjun_path(args.compress), args.limit, args.compress)
        return 0
    if args.command == "philly":
        window = (args.days[0] * quotas.DAY, args.days[1] * quotas.DAY)
        run_philly(args.variants, PHILLY_RESULTS, window, args.seed)
        return 0
    from operators.simulator import report as report_module  # matplotlib only when needed

    report_module.write_openb(load_results(results_path()), traces_dir(), args.docs)
    replays: dict[str, dict[str, object]] = {}
    # The table has the arrivals `make quality` replays; other factors (a check that a
    # difference is not the chain of decisions) are cached beside them and quoted in the prose.
    for found in (lingjun_path(10.0), lingjun_path(1.0)):
        if found.is_file():
            replays.update(
                (key, row)
                for key, row in json.loads(found.read_text()).items()
                if not key.endswith(LIMITED_SUFFIX)
            )
    if replays:
        report_module.write_lingjun(replays, args.docs)
    if PHILLY_RESULTS.is_file():
        report_module.write_philly(json.loads(PHILLY_RESULTS.read_text()), args.docs)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
