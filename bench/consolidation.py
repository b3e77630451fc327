"""Cost of consolidation on a fragmented cluster: ``python -m bench.consolidation``.

1,000 nodes with 8 GPUs each. Every node runs one-to-four small jobs (1 or 2 GPUs, one pod each)
that leave 2-5 of its GPUs idle, so thousands of GPUs are idle in total but no node is empty.
Pending: ``--gangs`` gangs of two 8-GPU pods (whole nodes), which only consolidation can place.
The session runs allocate + consolidate; the figure is the ``consolidate`` phase timed with
``time.perf_counter`` (the search the action does for every gang it tries, bounded by
``SessionConfig.max_consolidations`` / ``max_consolidation_nodes`` /
``max_consolidation_victims``), next to allocate alone for scale, and the whole session's CPU
time (a fairer figure than wall time on a busy machine). Prints a markdown table.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time

from operators.scheduler import SessionConfig, run_session
from operators.scheduler.decisions import Evict, Nominate
from operators.scheduler.session import ActionName
from operators.scheduler.snapshot import GPU, GroupPhase, Node, PodGroup, Snapshot, Task, TaskStatus

GiB = 2**30
NODE_GPUS = 8


def fragmented(nodes: int, gangs: int, seed: int) -> Snapshot:
    rng = random.Random(seed)
    node_list: list[Node] = []
    groups: list[PodGroup] = []
    tasks: list[Task] = []
    for n in range(nodes):
        name = f"node-{n:05d}"
        node_list.append(
            Node(name, {"cpu": 96_000, "memory": 1024 * GiB, GPU: NODE_GPUS, "pods": 110})
        )
        used = 0
        target = rng.randint(3, 6)  # GPUs in use: 2-5 idle
        while used < target:
            gpus = min(rng.choice((1, 2)), target - used)
            uid = f"run-{n:05d}-{used}"
            groups.append(
                PodGroup(uid, "ns", uid, created=float(n), phase=GroupPhase.RUNNING, priority=0)
            )
            tasks.append(
                Task(
                    f"{uid}-0",
                    uid,
                    "ns",
                    f"{uid}-0",
                    requests={"cpu": 4_000, "memory": 16 * GiB, GPU: gpus},
                    status=TaskStatus.BOUND,
                    node=name,
                    gpu_ids=tuple(range(used, used + gpus)),
                )
            )
            used += gpus
    for g in range(gangs):
        uid = f"gang-{g:03d}"
        groups.append(
            PodGroup(uid, "ns", uid, min_member=2, created=1e6 + g, phase=GroupPhase.INQUEUE)
        )
        tasks.extend(
            Task(f"{uid}-{i}", uid, "ns", f"{uid}-{i}", index=i, requests={"cpu": 8_000, GPU: 8})
            for i in range(2)
        )
    return Snapshot(now=0.0, nodes=tuple(node_list), groups=tuple(groups), tasks=tuple(tasks))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--gangs", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    snap = fragmented(args.nodes, args.gangs, args.seed)
    idle = args.nodes * NODE_GPUS - sum(t.requests[GPU] for t in snap.tasks if t.node)
    config = SessionConfig(
        actions=(ActionName.ALLOCATE, ActionName.CONSOLIDATE), timer=time.perf_counter
    )
    search: list[float] = []
    allocate: list[float] = []
    cpu: list[float] = []
    moved = nominated = 0
    for _ in range(args.repeats):
        started = time.process_time()
        result = run_session(snap, config)
        cpu.append(time.process_time() - started)
        search.append(result.timings["consolidate"])
        allocate.append(result.timings["allocate"])
        moved = sum(1 for d in result.decisions if isinstance(d, Evict))
        nominated = len({d.group for d in result.decisions if isinstance(d, Nominate)})
    per_gang = statistics.median(search) / max(1, min(args.gangs, config.max_consolidations))
    print(f"## Consolidation search (median of {args.repeats} runs)\n")
    print(f"load average at start: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs\n")
    print(
        "| nodes | running jobs | idle GPUs (no node empty) | pending gangs (2 x 8 GPUs) "
        "| gangs placed by moving | jobs moved | consolidate phase | per gang searched "
        "| allocate phase | whole session, CPU time |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    print(
        f"| {args.nodes:,} | {len(snap.groups) - args.gangs:,} | {idle:,} | {args.gangs} "
        f"| {nominated} | {moved} | {statistics.median(search) * 1000:.0f} ms "
        f"| {per_gang * 1000:.0f} ms | {statistics.median(allocate) * 1000:.0f} ms "
        f"| {statistics.median(cpu) * 1000:.0f} ms |"
    )


if __name__ == "__main__":
    main()
