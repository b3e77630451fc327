"""Consolidation's value on openb: pods arrive one batch at a time, a session per batch.

The one-shot protocol (``openb.py``) is a single session with nothing running, so consolidation
has nothing to move. Here the FGD paper's arrival order is kept (seeded node order, seeded pod
shuffle, pods appended until the arrived GPU request reaches ``tune`` x capacity) but pods arrive
``batch`` at a time and every batch gets its own session over the cluster as it stands: pods
placed earlier run (explicit one-pod groups, preemptible, equal priority, so the core may move
them), the new pods wait. A new pod the session neither binds nor nominates is dropped, as in
FGD (no queue, no retry). Evictions are carried forward the way the replay does (``replay.py``):
a moved pod goes back to pending keeping its group and creation time, the gang keeps its
nomination, and follow-up sessions place them. ``consolidate`` switches the core's own action
on or off; nothing here decides a placement.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import hashlib
import json
import sys
import time
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import TYPE_CHECKING, Any

from operators.scheduler import ActionName, SessionConfig, run_session
from operators.scheduler.actions import consolidate as consolidate_action
from operators.scheduler.actions import movers
from operators.scheduler.decisions import Bind, Evict, EvictReason, Nominate
from operators.scheduler.memo import SessionMemo
from operators.scheduler.snapshot import GroupPhase, PodGroup, Snapshot, Task, TaskStatus
from operators.simulator.fragmentation import MILLI
from operators.simulator.openb import (
    SEEDS,
    TRACES,
    arrival_order,
    load_nodes,
    load_pods,
    node_order,
    snapshot,
)
from operators.simulator.quality import (
    FRAGMENTATION_KEY,
    PAPERS_MEASURE,
    SLUICE_VARIANTS,
    default_knobs,
)
from operators.simulator.report import mean_std, replace_section
from operators.traces import traces_dir

if TYPE_CHECKING:
    from collections.abc import Sequence

    from operators.simulator.openb import TraceNode, TracePod

FOLLOW_UP_SESSIONS = 4


def session_config(consolidate: bool) -> SessionConfig:
    """The core's defaults for the actions that matter here; ``consolidate`` adds its action."""
    actions = (
        (ActionName.ALLOCATE, ActionName.CONSOLIDATE) if consolidate else (ActionName.ALLOCATE,)
    )
    return SessionConfig(actions=actions, max_reservations=0)


@dataclass(frozen=True, slots=True)
class ArrivalResult:
    unallocated: float  # % of GPU capacity unallocated once the arrived request reached tune
    failed: int  # arrived pods never placed
    moves: int  # jobs moved by consolidation
    moved_gpus: float  # GPUs those moves relocated (a shared card's share counts as its fraction)
    lost: int  # moved pods not placed again by the end (must be 0)
    sessions: int


@dataclass(slots=True)
class Arrivals:
    nodes: Sequence[TraceNode]
    config: SessionConfig
    groups: dict[str, PodGroup] = field(default_factory=dict)
    tasks: dict[str, Task] = field(default_factory=dict)
    gpu_milli: dict[str, int] = field(default_factory=dict)  # pod uid -> GPU request (milli)
    failed: int = 0
    moves: int = 0
    moved_milli: int = 0
    sessions: int = 0
    _now: float = 0.0
    _base: Snapshot | None = None
    # Unchanged groups and tasks are the same objects from session to session: the memo
    # spares session open from deriving them again (decisions are the same without it).
    _memo: SessionMemo = field(default_factory=SessionMemo)

    def add(self, index: int, pod: TracePod) -> str:
        """Make ``pod`` (the ``index``-th arrival) a pending admitted one-pod group."""
        one = snapshot((), (pod,))
        uid = f"p{index:06d}"
        self.groups[uid] = dataclasses.replace(
            one.groups[0], uid=uid, name=uid, created=float(index), phase=GroupPhase.INQUEUE
        )
        self.tasks[uid] = dataclasses.replace(one.tasks[0], uid=uid, group=uid)
        self.gpu_milli[uid] = pod.gpu_total
        return uid

    def settle(self, arrived: Sequence[str]) -> None:
        """Sessions until nothing is evicted any more; then drop the new pods left unplaced."""
        for _ in range(FOLLOW_UP_SESSIONS + 1):
            if not self._session():
                break
        for uid in arrived:
            task = self.tasks[uid]
            if task.status != TaskStatus.BOUND and task.nominated_node is None:
                self.failed += 1
                del self.tasks[uid], self.groups[uid]

    def _session(self) -> bool:
        self._now += 1.0
        if self._base is None:
            self._base = snapshot(self.nodes, ())
        base = self._base
        snap = Snapshot(
            now=self._now,
            nodes=base.nodes,
            groups=tuple(self.groups.values()),
            tasks=tuple(self.tasks.values()),
        )
        result = run_session(snap, self.config, self._memo)
        self.sessions += 1
        evicted = False
        moved_now = {d.group for d in result.decisions if isinstance(d, Evict)}
        for d in result.decisions:
            if isinstance(d, Evict):
                evicted = True
                for uid in d.tasks:
                    self.tasks[uid] = dataclasses.replace(
                        self.tasks[uid], status=TaskStatus.PENDING, node=None, gpu_ids=()
                    )
                    if d.reason is EvictReason.CONSOLIDATED:
                        self.moves += 1
                        self.moved_milli += self.gpu_milli[uid]
                was = self.groups[d.group]
                moved = d.reason is EvictReason.CONSOLIDATED
                self.groups[d.group] = dataclasses.replace(
                    was,
                    phase=GroupPhase.INQUEUE,
                    consolidated_at=self._now if moved else was.consolidated_at,
                    consolidated_to=d.moved_to if moved else was.consolidated_to,
                )
            elif isinstance(d, Bind):
                self.tasks[d.task] = dataclasses.replace(
                    self.tasks[d.task],
                    status=TaskStatus.BOUND,
                    node=d.node,
                    gpu_ids=d.gpu_ids,
                    nominated_node=None,
                )
                was = self.groups[d.group]
                # Placed again: the live status writer ends its move (records.placed_again).
                self.groups[d.group] = dataclasses.replace(
                    was,
                    phase=GroupPhase.RUNNING,
                    consolidated_to=was.consolidated_to if d.group in moved_now else (),
                )
            elif isinstance(d, Nominate):
                self.tasks[d.task] = dataclasses.replace(self.tasks[d.task], nominated_node=d.node)
        return evicted or any(
            t.nominated_node is not None and t.status != TaskStatus.BOUND
            for t in self.tasks.values()
        )

    def result(self, capacity_milli: int) -> ArrivalResult:
        used = sum(
            self.gpu_milli[uid] for uid, t in self.tasks.items() if t.status == TaskStatus.BOUND
        )
        waiting = [t for t in self.tasks.values() if t.status != TaskStatus.BOUND]
        # A moved pod still waiting is lost; a new pod whose nominated room never came failed.
        lost = sum(1 for t in waiting if self.groups[t.group].consolidated_at is not None)
        return ArrivalResult(
            unallocated=100.0 - 100.0 * used / capacity_milli,
            failed=self.failed + len(waiting) - lost,
            moves=self.moves,
            moved_gpus=self.moved_milli / MILLI,
            lost=lost,
            sessions=self.sessions,
        )


def run(
    nodes: Sequence[TraceNode],
    pods: Sequence[TracePod],
    seed: int,
    consolidate: bool,
    batch: int = 1,
    tune: float = 1.0,
    limit: int | None = None,
    warmup: float = 0.0,
) -> ArrivalResult:
    """One seed: FGD's arrival order up to ``tune`` x capacity, ``batch`` pods per session,
    except that the pods arriving until ``warmup`` x capacity come in one first session (a
    batch like the others, only larger: it costs one session instead of hundreds while the
    cluster is too empty for anything to fail)."""
    ordered = node_order(nodes, seed)
    capacity = sum(n.gpus for n in nodes) * MILLI
    arrived = arrival_order(pods, capacity, seed, tune)
    # arrival_order may overshoot: stop at the first pod that reaches tune x capacity.
    total, cut = 0, len(arrived)
    for i, p in enumerate(arrived):
        total += p.gpu_total
        if total >= tune * capacity:
            cut = i + 1
            break
    arrived = arrived[: cut if limit is None else min(cut, limit)]
    state = Arrivals(ordered, session_config(consolidate))
    first, total = 0, 0
    while first < len(arrived) and total + arrived[first].gpu_total <= warmup * capacity:
        total += arrived[first].gpu_total
        first += 1
    bounds = [0, *range(first or batch, len(arrived), batch), len(arrived)]
    for start, end in pairwise(bounds):
        if end > start:
            state.settle([state.add(i, arrived[i]) for i in range(start, end)])
    return state.result(capacity)


RESULTS = Path("docs/quality/consolidation-results.jsonl")
DOC = Path("docs/quality.md")


def search_version() -> str:
    """Digest of the core's consolidation search (its code without docstrings: the action and
    the check that keeps its moved jobs' room), kept with every "on" row: a cached "on" row is
    reused, and shown, only while the search is unchanged."""
    dumps = []
    for path in (consolidate_action.__file__, movers.__file__):
        tree = ast.parse(Path(path).read_text())
        for node in ast.walk(tree):
            body = getattr(node, "body", None)
            if (
                isinstance(body, list)
                and body
                and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)
            ):
                body[0] = ast.Pass()
        dumps.append(ast.dump(tree))
    return hashlib.sha256("\n".join(dumps).encode()).hexdigest()[:12]


def cache_key(row: dict[str, Any], version: str) -> tuple[object, ...] | None:
    """The cache key of a results row; None for an "on" row of another search version, and
    for any row run with other fragmentation knobs than the core's defaults today (rows from
    before the knobs were recorded ran with the paper's measure, the default then)."""
    if row["consolidate"] and row.get("search") != version:
        return None
    knobs = tuple(row.get(FRAGMENTATION_KEY, SLUICE_VARIANTS[PAPERS_MEASURE]))
    if knobs != default_knobs():
        return None
    return (row["trace"], row["seed"], row["consolidate"], row["batch"], row["warmup"])


def run_matrix(
    traces: Sequence[str], seeds: Sequence[int], batch: int, warmup: float, path: Path
) -> None:
    """Every (trace, seed, on/off) not yet in ``path``, one JSON line each (resumable)."""
    version = search_version()
    done = set()
    if path.is_file():
        for line in path.read_text().splitlines():
            done.add(cache_key(json.loads(line), version))
    folder = traces_dir() / "openb"
    nodes = load_nodes(folder / "openb_node_list_gpu_node.csv")
    for seed in seeds:
        for trace in traces:
            pods = load_pods(folder / f"openb_pod_list_{trace}.csv")
            for on in (False, True):
                if (trace, seed, on, batch, warmup) in done:
                    continue
                started = time.perf_counter()
                result = run(nodes, pods, seed, on, batch=batch, warmup=warmup)
                row = {"trace": trace, "seed": seed, "consolidate": on}
                row |= {"batch": batch, "warmup": warmup}
                row[FRAGMENTATION_KEY] = list(default_knobs())
                if on:
                    row["search"] = version
                row |= dataclasses.asdict(result)
                row["seconds"] = round(time.perf_counter() - started, 1)
                with path.open("a") as f:
                    f.write(json.dumps(row) + "\n")
                sys.stderr.write(f"{json.dumps(row)}\n")


def table(path: Path, batch: int, warmup: float) -> str:
    """Per trace, over the seeds run both ways: unallocated GPU % off and on (mean ± std),
    their difference, and what moved."""
    version = search_version()
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    rows = [r for r in rows if cache_key(r, version) is not None]
    out = [
        (
            "| trace | seeds | unallocated % off | unallocated % on | off - on (pp) | "
            "failed pods off / on | moves | moved GPUs | sessions off / on | lost |"
        ),
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for trace in TRACES:
        pair = {
            on: {
                r["seed"]: r
                for r in rows
                if r["trace"] == trace
                and r["batch"] == batch
                and r["warmup"] == warmup
                and r["consolidate"] is on
            }
            for on in (False, True)
        }
        seeds = sorted(pair[False].keys() & pair[True].keys())
        if not seeds:
            continue
        off = [pair[False][s] for s in seeds]
        on = [pair[True][s] for s in seeds]

        def col(rs: list[dict[str, Any]], key: str) -> list[float]:
            return [float(r[key]) for r in rs]

        gain = [a - b for a, b in zip(col(off, "unallocated"), col(on, "unallocated"), strict=True)]
        out.append(
            f"| {trace} | {len(seeds)} | {mean_std(col(off, 'unallocated'))} | "
            f"{mean_std(col(on, 'unallocated'))} | {mean_std(gain)} | "
            f"{mean_std(col(off, 'failed'), 0)} / {mean_std(col(on, 'failed'), 0)} | "
            f"{mean_std(col(on, 'moves'), 1)} | {mean_std(col(on, 'moved_gpus'), 1)} | "
            f"{mean_std(col(off, 'sessions'), 0)} / {mean_std(col(on, 'sessions'), 0)} | "
            f"{sum(int(r['lost']) for r in on)} |"
        )
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--traces", nargs="+", default=list(TRACES), choices=TRACES)
    parser.add_argument("--seeds", nargs="+", type=int, default=list(SEEDS[:1]))
    parser.add_argument("--batch", type=int, default=10, help="pods per session")
    parser.add_argument(
        "--warmup", type=float, default=0.8, help="arrived share of capacity placed in one session"
    )
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument(
        "--doc", type=Path, default=DOC, help="the doc whose consolidation section gets the table"
    )
    args = parser.parse_args(argv)
    args.results.parent.mkdir(parents=True, exist_ok=True)
    run_matrix(args.traces, args.seeds, args.batch, args.warmup, args.results)
    body = table(args.results, args.batch, args.warmup)
    replace_section(args.doc, "consolidation", body)
    sys.stdout.write(body + "\n")


if __name__ == "__main__":
    main()
