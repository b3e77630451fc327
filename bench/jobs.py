"""Memory and API writes of the jobs operator running many jobs on a real cluster.

    python -m bench.jobs                      # brings up the `large` devcluster (1,000 nodes)
    python -m bench.jobs --kubeconfig PATH    # uses a running cluster instead

The jobs operator and the scheduler run as child processes (`python -m operators jobs`,
`python -m operators scheduler`). The bench creates `--jobs` VCJobs of `--pods` pods in all
(equal tasks of one task each); kwok completes every pod a few seconds after it starts, so each
job goes Pending -> Inqueue -> Running -> Completed. Reported: the jobs operator's peak RSS
(VmHWM; target: 1,000 jobs / 10,000 pods within 300 MB), how long until every job completed,
and the API writes the jobs operator made per pod, counted from the API, not from its own
counters: pods and PodGroups created, job status changes (watched: each resourceVersion change of
a job's status), and Events posted in the namespace.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import pathlib
import sys
import tempfile
import time
from typing import Any

from bench.admin import WriteLog
from bench.bind import gather_bounded
from bench.clusters import bench_cluster, bench_parser
from bench.live import peak_rss_mib
from operators.api.batch import VCJob
from operators.api.scheduling import PodGroup
from operators.runtime import kubeconfig
from operators.runtime.client import ApiError, KubeClient

NAMESPACE = "bench-jobs"


def job_body(i: int, size: int, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": VCJob.api_version_str(),
        "kind": "VCJob",
        "metadata": {"name": f"j{i}", "namespace": namespace},
        "spec": {
            "tasks": [
                {
                    "name": "w",
                    "replicas": size,
                    "template": {
                        "metadata": {"annotations": {"sluice.dev/complete-after": "5s"}},
                        "spec": {
                            "schedulerName": "sluice",
                            "restartPolicy": "Never",
                            "terminationGracePeriodSeconds": 0,
                            "containers": [
                                {
                                    "name": "c",
                                    "image": "fake",
                                    "resources": {"requests": {"cpu": "10m"}},
                                }
                            ],
                        },
                    },
                }
            ]
        },
    }


class StatusWrites:
    """Writes to the job objects after their creation, seen through a watch: one per new
    resourceVersion (status writes, and any annotation or finalizer kopf would add)."""

    def __init__(self, jobs: int) -> None:
        self.count = 0
        self.status = WriteLog()  # status changes per job, timed: the coalescing figure
        self.completed: set[str] = set()
        self.all_completed = asyncio.Event()
        self._jobs = jobs
        self._seen: dict[str, set[str]] = {}

    def see(self, obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        self.status.see("VCJob", obj)
        versions = self._seen.setdefault(meta["name"], set())
        if meta["resourceVersion"] not in versions:
            if versions:  # the first one seen is the creation (or the listing)
                self.count += 1
            versions.add(meta["resourceVersion"])
        if (obj.get("status") or {}).get("phase") == "Completed":
            self.completed.add(meta["name"])
            if len(self.completed) >= self._jobs:
                self.all_completed.set()


async def watch_jobs(client: KubeClient, writes: StatusWrites, namespace: str) -> None:
    path = VCJob.api_path(namespace)
    while True:
        items, version = await client.list(path)
        for item in items:
            writes.see(item)
        with contextlib.suppress(ApiError, TimeoutError, OSError):
            async for event in client.watch(path, version):
                if event.get("type") in ("ADDED", "MODIFIED"):
                    writes.see(event["object"])


@dataclasses.dataclass
class Side:
    """One jobs operator under test: its namespace, and the source tree it runs from."""

    label: str
    namespace: str
    source: str | None = None  # PYTHONPATH of a baseline tree; None: this tree


async def start(
    name: str, path: str, logs: pathlib.Path, *extra: str, source: str | None = None
) -> Any:
    out = (logs / f"{name}.log").open("wb")
    # `-m` puts the working directory first on sys.path: a baseline runs from its own tree.
    env = {**os.environ, "PYTHONPATH": source} if source else None
    try:
        return await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "operators",
            name,
            f"--kubeconfig={path}",
            *extra,
            stdout=out,
            stderr=asyncio.subprocess.STDOUT,
            env=env,
            cwd=source,
        )
    finally:
        out.close()  # the child has its own copy of the descriptor


async def stop(proc: Any) -> None:
    proc.terminate()
    try:
        await asyncio.wait_for(proc.wait(), 20)
    except TimeoutError:
        proc.kill()
        await proc.wait()


STOPPED = "has failed"  # what kopf logs when its multitasker ends and every handler stops


def stopped(proc: Any, log: pathlib.Path) -> str | None:
    """Why the jobs operator stopped serving during the run, or None if it did not."""
    if proc.returncode is not None:
        return f"exited with {proc.returncode}"
    text = log.read_text(errors="replace") if log.exists() else ""
    return "kopf: " + STOPPED if STOPPED in text else None


async def bench(
    path: str, jobs: int, pods: int, logs: pathlib.Path, sides: list[Side], wait_s: float
) -> list[dict[str, Any]]:
    """Every side gets the same jobs in its own namespace, served by its own jobs operator; one
    scheduler (this tree's) places them all."""
    conn = kubeconfig.load(path, None)
    size = max(1, pods // jobs)
    writes = [StatusWrites(jobs) for _ in sides]
    done_at: list[float | None] = [None] * len(sides)
    async with KubeClient(conn, limit=64) as client:
        for side in sides:
            with contextlib.suppress(ApiError):
                await client.post("/api/v1/namespaces", {"metadata": {"name": side.namespace}})
        scheduler = await start("scheduler", path, logs, "--metrics-port=0", "--no-leader-election")
        operators = [
            await start(
                "jobs",
                path,
                logs / side.label,
                "--jobs-health-port=0",
                f"--jobs-namespaces={side.namespace}",
                source=side.source,
            )
            for side in sides
        ]
        watchers = [
            asyncio.create_task(watch_jobs(client, w, side.namespace))
            for w, side in zip(writes, sides, strict=True)
        ]
        results: list[tuple[list[Any], list[Any]]] = []
        started = time.monotonic()

        async def finished(i: int) -> None:
            await writes[i].all_completed.wait()
            done_at[i] = time.monotonic() - started

        try:
            await asyncio.sleep(10)  # all started and listed
            started = time.monotonic()
            posts = [
                client.post(VCJob.api_path(side.namespace), job_body(i, size, side.namespace))
                for i in range(jobs)
                for side in sides
            ]
            await gather_bounded(32, posts)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    asyncio.gather(*(finished(i) for i in range(len(sides)))), wait_s
                )
            await asyncio.sleep(5)  # trailing writes
            for side in sides:
                groups, _ = await client.list(PodGroup.api_path(side.namespace))
                events, _ = await client.list(f"/api/v1/namespaces/{side.namespace}/events")
                results.append((groups, events))
        finally:
            for watcher in watchers:
                watcher.cancel()
            peaks = [peak_rss_mib(op.pid) for op in operators]
            stops = [
                stopped(op, logs / side.label / "jobs.log")
                for op, side in zip(operators, sides, strict=True)
            ]
            for op in operators:
                await stop(op)
            await stop(scheduler)
            for side in sides:
                with contextlib.suppress(ApiError):
                    await client.delete(f"/api/v1/namespaces/{side.namespace}")
    created_pods = size * jobs
    out = []
    for side, w, (groups, events), peak, seconds, stop_reason in zip(
        sides, writes, results, peaks, done_at, stops, strict=True
    ):
        job_events = [e for e in events if (e.get("involvedObject") or {}).get("kind") == "VCJob"]
        total = created_pods + len(groups) + w.count + len(job_events)
        out.append(
            {
                "operator": side.label,
                "source": side.source or "this tree",
                "jobs": jobs,
                "pods": created_pods,
                "completed": len(w.completed),
                "seconds": round(seconds, 1) if seconds is not None else None,
                "peak_rss_mb": round(peak, 1),
                "stopped": stop_reason,
                "status_rate": w.status.summary().get("VCJob", {}),
                "writes": {
                    "pods created": created_pods,
                    "PodGroups created": len(groups),
                    "writes to the jobs (status)": w.count,
                    "Events on jobs": len(job_events),
                },
                "writes_per_pod": round(total / max(1, created_pods), 2),
            }
        )
    return out


def report(results: list[dict[str, Any]], nodes: str, command: str) -> str:
    lines = [f"jobs operator (+ scheduler), {nodes}: `{command}`"]
    for result in results:
        lines += [
            "",
            (
                f"{result['operator']} ({result['source']}): {result['jobs']:,} VCJobs, {result['pods']:,} pods: "
                f"{result['completed']:,} Completed in {result['seconds']} s; peak RSS of the "
                f"jobs operator {result['peak_rss_mb']} MB (target <= 300 MB)"
            ),
            "| API writes by the jobs operator | count |",
            "|---|---|",
        ]
        lines += [f"| {what} | {n:,} |" for what, n in result["writes"].items()]
        lines.append(f"| **per pod** | {result['writes_per_pod']} |")
        rate = result["status_rate"]
        lines.append(
            f"status changes seen by the bench's watch: {rate.get('writes', 0):,} to "
            f"{rate.get('objects', 0):,} jobs; most to one job: {rate.get('max_in_1s', 0)} in 1 s, "
            f"{rate.get('max_in_10s', 0)} in 10 s, {rate.get('max_per_second', 0)} by one writer "
            "stamped in one API-server second; the jobs operator "
            + (f"STOPPED ({result['stopped']})" if result["stopped"] else "served to the end")
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = bench_parser("python -m bench.jobs", __doc__)
    parser.add_argument("--jobs", type=int, default=1_000)
    parser.add_argument("--pods", type=int, default=10_000)
    parser.add_argument("--keep", action="store_true", help="leave the started cluster running")
    parser.add_argument(
        "--timeout", type=float, default=3600, help="seconds to wait for every job to complete"
    )
    parser.add_argument(
        "--baseline",
        metavar="DIR",
        help="also run the jobs operator of this source tree (e.g. `git archive REV | tar -x -C "
        "DIR`) beside this tree's, on the same jobs in a namespace of its own, in the same run",
    )
    args = parser.parse_args(argv)
    sides = [Side("change", NAMESPACE)]
    if args.baseline:
        sides.append(Side("baseline", f"{NAMESPACE}-baseline", args.baseline))
    logs = pathlib.Path(tempfile.mkdtemp(prefix="sluice-bench-jobs-"))
    with bench_cluster(args.kubeconfig, args.profile, logs, args.keep, args.nodes) as (
        path,
        nodes,
        _,
    ):
        for side in sides:
            (logs / side.label).mkdir(parents=True, exist_ok=True)
        results = asyncio.run(bench(path, args.jobs, args.pods, logs, sides, args.timeout))
    command = "python -m bench.jobs " + " ".join(argv if argv is not None else sys.argv[1:])
    print()
    print(report(results, nodes, command.strip()))
    print(f"\nlogs: {logs}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
