"""The jobs operator's worker queue at a backlog: ``python -m bench.jobs_queue [N]``.

Adds N VCJobs to a `JobsController` whose reconcile returns at once, runs its worker with 8
reconciles in flight and STATUS_INTERVAL 0, and prints the CPU seconds it took to start all N
(the cost of choosing the next job; no API server). ``--baseline DIR`` runs the same in another
source tree (``git worktree add DIR <rev>``), in its own process, for a before/after.
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import time
from types import SimpleNamespace
from typing import Any

from operators.controllers import jobs as J
from operators.runtime.operator_metrics import OperatorMetrics


def vcjob(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "batch.sluice.dev/v1alpha1",
        "kind": "VCJob",
        "metadata": {"name": name, "namespace": "ns", "uid": f"u-{name}", "generation": 1},
        "spec": {"tasks": [{"name": "w", "replicas": 1, "template": {"spec": {}}}]},
    }


async def measure(jobs: int) -> float:
    """CPU seconds to start `jobs` queued reconciles (each ends at once)."""
    interval, J.STATUS_INTERVAL = J.STATUS_INTERVAL, 0.0  # type: ignore[misc]
    try:
        return await _measure(jobs)
    finally:
        J.STATUS_INTERVAL = interval  # type: ignore[misc]


async def _measure(jobs: int) -> float:
    stop = asyncio.Event()
    done = 0

    class Instant(J.JobsController):
        async def reconcile(self, key: tuple[str, str, str]) -> None:
            nonlocal done
            done += 1
            if done >= jobs:
                stop.set()

    ctx: Any = SimpleNamespace(client=None, stop=stop, metrics=OperatorMetrics(""))
    c = Instant(ctx, 8)
    for i in range(jobs):
        c.on_job("ADDED", vcjob(f"j-{i:06d}"))
    started = time.process_time()
    worker = asyncio.create_task(c.run())
    await stop.wait()
    spent = time.process_time() - started
    c.wake.set()
    await asyncio.wait_for(worker, 10)
    return spent


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.jobs_queue", description=__doc__)
    p.add_argument("jobs", type=int, nargs="?", default=25_000)
    p.add_argument("--baseline", help="another source tree to measure the same way")
    args = p.parse_args(argv)
    print(f"this tree: {args.jobs} jobs started in {asyncio.run(measure(args.jobs)):.2f} s CPU")
    if args.baseline:
        # This file's `measure`, run with the baseline's `operators` (its folder first on the path).
        code = (
            f"import asyncio, runpy; m = runpy.run_path({__file__!r}); "
            f"print(asyncio.run(m['measure']({args.jobs})))"
        )
        out = subprocess.run(
            [sys.executable, "-c", code], cwd=args.baseline, check=True, capture_output=True
        )
        seconds = float(out.stdout.decode().split()[-1])
        print(f"baseline:  {args.jobs} jobs started in {seconds:.2f} s CPU")
    return 0


if __name__ == "__main__":
    sys.exit(main())
