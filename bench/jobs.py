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
import pathlib
import sys
import tempfile
import time
from typing import Any

from bench.bind import gather_bounded
from bench.clusters import bench_cluster, bench_parser
from bench.live import peak_rss_mib
from operators.api.batch import VCJob
from operators.api.scheduling import PodGroup
from operators.runtime import kubeconfig
from operators.runtime.client import ApiError, KubeClient

NAMESPACE = "bench-jobs"


def job_body(i: int, size: int) -> dict[str, Any]:
    return {
        "apiVersion": VCJob.api_version_str(),
        "kind": "VCJob",
        "metadata": {"name": f"j{i}", "namespace": NAMESPACE},
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
        self.completed: set[str] = set()
        self.all_completed = asyncio.Event()
        self._jobs = jobs
        self._seen: dict[str, set[str]] = {}

    def see(self, obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        versions = self._seen.setdefault(meta["name"], set())
        if meta["resourceVersion"] not in versions:
            if versions:  # the first one seen is the creation (or the listing)
                self.count += 1
            versions.add(meta["resourceVersion"])
        if (obj.get("status") or {}).get("phase") == "Completed":
            self.completed.add(meta["name"])
            if len(self.completed) >= self._jobs:
                self.all_completed.set()


async def watch_jobs(client: KubeClient, writes: StatusWrites) -> None:
    path = VCJob.api_path(NAMESPACE)
    while True:
        items, version = await client.list(path)
        for item in items:
            writes.see(item)
        with contextlib.suppress(ApiError, TimeoutError, OSError):
            async for event in client.watch(path, version):
                if event.get("type") in ("ADDED", "MODIFIED"):
                    writes.see(event["object"])


async def start(name: str, path: str, logs: pathlib.Path, *extra: str) -> Any:
    out = (logs / f"{name}.log").open("wb")
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "operators",
        name,
        f"--kubeconfig={path}",
        *extra,
        stdout=out,
        stderr=asyncio.subprocess.STDOUT,
    )


async def stop(proc: Any) -> None:
    proc.terminate()
    try:
        await asyncio.wait_for(proc.wait(), 20)
    except TimeoutError:
        proc.kill()
        await proc.wait()


async def bench(path: str, jobs: int, pods: int, logs: pathlib.Path) -> dict[str, Any]:
    conn = kubeconfig.load(path, None)
    writes = StatusWrites(jobs)
    size = max(1, pods // jobs)
    async with KubeClient(conn, limit=64) as client:
        with contextlib.suppress(ApiError):
            await client.post("/api/v1/namespaces", {"metadata": {"name": NAMESPACE}})
        scheduler = await start("scheduler", path, logs, "--metrics-port=0", "--no-leader-election")
        operator = await start("jobs", path, logs, "--jobs-health-port=0")
        watcher = asyncio.create_task(watch_jobs(client, writes))
        elapsed = 0.0
        try:
            await asyncio.sleep(10)  # both started and listed
            started = time.monotonic()
            await gather_bounded(
                32, [client.post(VCJob.api_path(NAMESPACE), job_body(i, size)) for i in range(jobs)]
            )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(writes.all_completed.wait(), 3600)
            elapsed = time.monotonic() - started
            await asyncio.sleep(5)  # trailing writes
            groups, _ = await client.list(PodGroup.api_path(NAMESPACE))
            events, _ = await client.list(f"/api/v1/namespaces/{NAMESPACE}/events")
        finally:
            watcher.cancel()
            peak = peak_rss_mib(operator.pid)
            await stop(operator)
            await stop(scheduler)
            with contextlib.suppress(ApiError):
                await client.delete(f"/api/v1/namespaces/{NAMESPACE}")
    created_pods = size * jobs
    job_events = [e for e in events if (e.get("involvedObject") or {}).get("kind") == "VCJob"]
    total = created_pods + len(groups) + writes.count + len(job_events)
    return {
        "jobs": jobs,
        "pods": created_pods,
        "completed": len(writes.completed),
        "seconds": round(elapsed, 1),
        "peak_rss_mb": round(peak, 1),
        "writes": {
            "pods created": created_pods,
            "PodGroups created": len(groups),
            "writes to the jobs (status)": writes.count,
            "Events on jobs": len(job_events),
        },
        "writes_per_pod": round(total / max(1, created_pods), 2),
    }


def report(result: dict[str, Any], nodes: str, command: str) -> str:
    lines = [
        f"jobs operator (+ scheduler), {nodes}: `{command}`",
        (
            f"{result['jobs']:,} VCJobs, {result['pods']:,} pods: {result['completed']:,} "
            f"Completed in {result['seconds']} s; peak RSS of the jobs operator "
            f"{result['peak_rss_mb']} MB (target <= 300 MB)"
        ),
        "| API writes by the jobs operator | count |",
        "|---|---|",
    ]
    lines += [f"| {what} | {n:,} |" for what, n in result["writes"].items()]
    lines.append(f"| **per pod** | {result['writes_per_pod']} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = bench_parser("python -m bench.jobs", __doc__)
    parser.add_argument("--jobs", type=int, default=1_000)
    parser.add_argument("--pods", type=int, default=10_000)
    parser.add_argument("--keep", action="store_true", help="leave the started cluster running")
    args = parser.parse_args(argv)
    logs = pathlib.Path(tempfile.mkdtemp(prefix="sluice-bench-jobs-"))
    with bench_cluster(args.kubeconfig, args.profile, logs, args.keep, args.nodes) as (
        path,
        nodes,
        _,
    ):
        result = asyncio.run(bench(path, args.jobs, args.pods, logs))
    command = "python -m bench.jobs " + " ".join(argv if argv is not None else sys.argv[1:])
    print()
    print(report(result, nodes, command.strip()))
    print(f"\nlogs: {logs}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
