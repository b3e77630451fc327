"""Full-cluster steady state for the scheduler core: ``python -m bench.steady``.

What the live scheduler runs most of the time on a busy cluster: every node full of running plain
pods (one-pod groups, as from Deployments) and a backlog of pending ones that do not fit, spread
over the 44 team queues of bench.core's tree. Each session then re-checks every pending group
(admission counts idle and reclaimable room; preempt and reclaim look for victims) and decides
nothing new. Prints the median session time over a few runs, with the yardstick of bench.core
(the naive first-fit loop) measured in the same process.

``--queues 1`` puts every pod in the ``default`` queue, as ``bench.live``'s full cluster does
(plain pods of one namespace): a true steady state, where each session decides nothing. With the
44 team queues some queues hold more than their share, so every session reclaims for the others
(the victim search at full size).

``--baseline DIR`` measures another source tree (``git archive REV | tar -x -C DIR``) against
this one: one process per run (median of 3 sessions), the trees alternating (the order swapped each round), so both
see the same neighbours; it prints each round's CPU seconds per session and the medians.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import re
import statistics
import subprocess
import sys
import time
from dataclasses import replace
from typing import TYPE_CHECKING

from bench.core import build_nodes, build_queues, first_fit_yardstick
from operators.scheduler import SessionConfig, SessionResult, run_session
from operators.scheduler.session import DEFAULT_ACTIONS, ActionName
from operators.scheduler.snapshot import GroupPhase, PodGroup, Snapshot, Task, TaskStatus

if TYPE_CHECKING:
    from operators.scheduler.memo import SessionMemo

GiB = 2**30
LEAVES = tuple(f"dept-{d}-team-{t}" for d in range(4) for t in range(11))


def full_cluster(nodes: int, running: int, pending: int, queues: int = len(LEAVES)) -> Snapshot:
    """`running` one-pod groups filling `nodes` nodes (CPU-bound), plus `pending` more, spread
    over the first `queues` team queues (1: all in ``default``)."""
    leaves = LEAVES[:queues] if queues > 1 else ("default",)
    per_node = max(1, running // nodes)
    cpu = 96_000 // per_node
    node_objs = build_nodes(nodes)
    groups: list[PodGroup] = []
    tasks: list[Task] = []
    for i in range(running + pending):
        uid, name, bound = f"pod:{i:06d}", f"p-{i:06d}", i < running
        ns = f"ns-{i % 40}"
        phase = GroupPhase.RUNNING if bound else GroupPhase.PENDING
        queue = leaves[i % len(leaves)]
        groups.append(PodGroup(uid, ns, name, queue=queue, created=float(i), phase=phase))
        node = node_objs[(i // per_node) % nodes].name if bound else None
        status = TaskStatus.BOUND if bound else TaskStatus.PENDING
        requests = {"cpu": cpu, "memory": 16 * GiB}
        tasks.append(Task(f"t-{name}", uid, ns, name, requests=requests, status=status, node=node))
    return Snapshot(
        now=1_000_000.0,
        nodes=node_objs,
        queues=build_queues(),
        pools=(),
        groups=tuple(groups),
        tasks=tuple(tasks),
    )


def measure(
    snapshot: Snapshot, repeats: int, configs: dict[str, SessionConfig], memo: bool = True
) -> dict[str, tuple[float, float, float, dict[str, float], int]]:
    """Per arm: (median wall s, fastest wall s, median CPU s, phases of the last run in CPU
    s, decisions of the last run). The arms run alternately, run by run, so all see the same
    neighbours. CPU time (this process's) is what a session costs whatever the machine's load;
    wall time is what a user waits on this machine now."""
    walls: dict[str, list[float]] = {arm: [] for arm in configs}
    cpus: dict[str, list[float]] = {arm: [] for arm in configs}
    last: dict[str, tuple[dict[str, float], int]] = {}
    # One memo per arm, as the live loop keeps one: the first (untimed) session fills it,
    # as the live loop's previous session did.
    memos = {arm: _memo() if memo else None for arm in configs}
    for arm, config in configs.items():
        _session(snapshot, config, memos[arm])
    for _ in range(repeats):
        for arm, config in configs.items():
            start, cpu = time.perf_counter(), time.process_time()
            result = _session(snapshot, replace(config, timer=time.process_time), memos[arm])
            cpus[arm].append(time.process_time() - cpu)
            walls[arm].append(time.perf_counter() - start)
            last[arm] = (dict(result.timings), len(result.decisions))
    return {
        arm: (statistics.median(w), min(w), statistics.median(cpus[arm]), *last[arm])
        for arm, w in walls.items()
    }


def _memo() -> SessionMemo:
    # Imported here: with --no-memo this module also runs against cores older than the memo
    # (an old-vs-new A/B with the same scenario builder).
    from operators.scheduler.memo import SessionMemo

    return SessionMemo()


def _session(snapshot: Snapshot, config: SessionConfig, memo: SessionMemo | None) -> SessionResult:
    if memo is None:
        return run_session(snapshot, config)
    return run_session(snapshot, config, memo)


ARMS = {
    "cached": SessionConfig(),  # the default configuration
    # Every preemptor gathers, filters and sorts every candidate (the reference).
    "straightforward": SessionConfig(victim_order_cache=False),
}


def side_by_side(baseline: str, rounds: int, scenario: list[str]) -> None:
    """Old (``baseline``) and new (this tree) alternating, one process per run (each the median
    of 3 sessions after an untimed one)."""
    here = str(pathlib.Path(__file__).resolve().parents[1])
    trees = [("baseline", baseline), ("this tree", here)]
    cpus: dict[str, list[float]] = {label: [] for label, _ in trees}
    print(f"A/B {' '.join(scenario)}; load {os.getloadavg()[0]:.1f} at start")
    for r in range(rounds):
        for label, tree in trees if r % 2 == 0 else trees[::-1]:
            # `-m` puts the working directory first on sys.path: each tree runs from its own.
            out = subprocess.run(
                [sys.executable, "-m", "bench.steady", "--repeats", "3", *scenario],
                cwd=tree,
                env={**os.environ, "PYTHONPATH": tree},
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            cpu = re.search(r"CPU s median ([0-9.]+)", out)
            phases = re.search(r"phases \(last run, CPU\): (.*)", out)
            decisions = re.search(r"decisions (\d+)", out)
            if cpu is None or phases is None or decisions is None:
                raise RuntimeError(f"unexpected output of {tree}:\n{out}")
            cpus[label].append(float(cpu[1]))
            print(
                f"round {r + 1} {label}: CPU s {cpu[1]}, decisions {decisions[1]}; {phases[1]}; "
                f"load {os.getloadavg()[0]:.1f}",
                flush=True,
            )
    for label, values in cpus.items():
        print(f"{label}: median CPU s per session {statistics.median(values):.3f} of {values}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--nodes", type=int, default=1_000)
    parser.add_argument("--running", type=int, default=10_000)
    parser.add_argument("--pending", type=int, default=2_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--queues",
        type=int,
        default=len(LEAVES),
        help=f"team queues the pods are spread over (1..{len(LEAVES)}; 1: all in default, "
        "bench.live's shape, where a session decides nothing)",
    )
    parser.add_argument(
        "--actions",
        default=",".join(DEFAULT_ACTIONS),
        help="comma-separated session actions (default: all), e.g. enqueue to time admission",
    )
    parser.add_argument(
        "--arms",
        default="cached",
        help=f"comma-separated variants run alternately: {', '.join(ARMS)} (A/B of the victim "
        "order kept across preemptors; decisions are compared)",
    )
    parser.add_argument(
        "--no-memo",
        action="store_true",
        help="open every session from scratch (no SessionMemo kept across sessions)",
    )
    parser.add_argument(
        "--baseline",
        metavar="DIR",
        help="A/B: run this scenario in the source tree DIR and in this tree alternately, one "
        "process per run, --repeats rounds (CPU seconds per session)",
    )
    args = parser.parse_args(argv)
    if args.baseline:
        scenario = [f"--nodes={args.nodes}", f"--running={args.running}"]
        scenario += [f"--pending={args.pending}", f"--queues={args.queues}"]
        scenario += [f"--actions={args.actions}", *(["--no-memo"] if args.no_memo else [])]
        side_by_side(args.baseline, args.repeats, scenario)
        return
    actions = tuple(ActionName(a) for a in args.actions.split(","))
    configs = {arm: replace(ARMS[arm], actions=actions) for arm in args.arms.split(",")}
    snap = full_cluster(args.nodes, args.running, args.pending, args.queues)
    load = os.getloadavg()[0]
    outcomes = {arm: run_session(snap, config).decisions for arm, config in configs.items()}
    same = all(d == next(iter(outcomes.values())) for d in outcomes.values())
    results = measure(snap, args.repeats, configs, memo=not args.no_memo)
    yard = statistics.median(first_fit_yardstick(snap)[0] for _ in range(args.repeats))
    print(
        f"full cluster: {args.nodes} nodes, {args.running} running + {args.pending} pending "
        f"one-pod groups in {args.queues} queue(s); actions {args.actions}; "
        f"{'no memo' if args.no_memo else 'memo kept across sessions'}; load {load:.1f} at start, "
        f"{os.getloadavg()[0]:.1f} at end; yardstick {yard:.3f} s"
    )
    for arm, (median, best, cpu, phases, decisions) in results.items():
        parts = ", ".join(f"{k} {v * 1000:.0f} ms" for k, v in phases.items())
        print(
            f"{arm}: session wall s median {median:.3f}, min {best:.3f}; CPU s median "
            f"{cpu:.3f} (of {args.repeats}); decisions {decisions}\n"
            f"  phases (last run, CPU): {parts}"
        )
    if len(configs) > 1:
        print(f"decisions identical across arms: {same}")


if __name__ == "__main__":
    main()
