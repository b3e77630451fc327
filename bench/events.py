"""Throughput of the events operator: a backlog of job transitions to a local receiver.

    python -m bench.events                       # brings up a `small` devcluster
    python -m bench.events --kubeconfig PATH     # uses a running cluster (CRDs applied)

The bench writes `--transitions` transitions into the status of VCJobs (64 per job, the jobs'
window; nothing else runs, so nobody rewrites them), starts `python -m operators events`, waits
until it has started, then creates an EventSink subscribed to everything that points at an HTTP
receiver in this process. Reported: the time from the sink's creation until every transition's id
has arrived, events per second, duplicates, and whether every job's events came in `seq` order.
Target (issue 22): 10,000 transitions in under 30 s.

`--batch-size N` sets the sink's `batchSize` (CloudEvents batched mode: up to N consecutive
events of one job per POST) and makes the yardstick POST the same batches.

Where the time goes: the CPU seconds each process used while the events were delivered (the
operator, this process = the receiver, kube-apiserver, etcd) and the status writes the operator
made (its metric), printed with the result.

Yardstick, in the same run: a bare aiohttp client in its own process POSTs the same number of
CloudEvents to the same receiver in the same shape (one stream per job, each strictly in order,
32 jobs at a time: the operator's default concurrency), with no API server involved. The ratio
of the two times is what the operator's bookkeeping costs on this machine at this load.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import pathlib
import socket
import sys
import tempfile
import time
from typing import Any

import aiohttp
from aiohttp import web

from bench.admin import started_up
from bench.clusters import bench_cluster, bench_parser
from operators.api.batch import TransitionLevel
from operators.devcluster.processes import free_port
from operators.jobs import delivery as D
from operators.jobs.translog import WINDOW, TransitionRec
from operators.runtime import kubeconfig
from operators.runtime.client import ApiError, KubeClient

NAMESPACE = "bench-events"
JOBS = "/apis/batch.sluice.dev/v1alpha1"
SINK = "bench-events"
SINKS = "/apis/events.sluice.dev/v1alpha1/eventsinks"
PHASES = ("Pending", "Inqueue", "Running", "Restarting")


class Receiver:
    """Acknowledges every event at once and remembers the order in which ids first arrived."""

    def __init__(self) -> None:
        self.first: dict[str, int] = {}  # id -> arrival number
        self.posts = 0
        self.last_arrival = 0.0
        self.all_in = asyncio.Event()
        self.expected = 0

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.posts += 1
        for event in body if isinstance(body, list) else [body]:
            if event["id"] not in self.first:
                self.first[event["id"]] = len(self.first)
                self.last_arrival = time.monotonic()
        if len(self.first) >= self.expected:
            self.all_in.set()
        return web.Response(status=204)


def job_body(i: int) -> dict[str, Any]:
    template = {"spec": {"containers": [{"name": "c", "image": "fake"}]}}
    return {
        "apiVersion": "batch.sluice.dev/v1alpha1",
        "kind": "VCJob",
        "metadata": {"name": f"j{i}", "namespace": NAMESPACE},
        "spec": {"tasks": [{"name": "w", "replicas": 1, "template": template}]},
    }


def transitions(name: str, count: int) -> dict[str, Any]:
    entries = [
        {
            "seq": seq,
            "level": "Replica",
            "name": f"{name}-w-0",
            "to": PHASES[seq % len(PHASES)],
            "reason": "Bench",
            "time": "2026-01-01T00:00:00Z",
        }
        for seq in range(1, count + 1)
    ]
    return {"status": {"transitions": entries, "transitionSeq": count}}


async def yardstick(url: str, total: int, batch: int, concurrency: int = 32) -> None:
    """What `--yardstick URL N BATCH` runs in a child process: the bare delivery loop."""
    limit = asyncio.Semaphore(concurrency)
    job = D.JobRef("VCJob", NAMESPACE, "yardstick", "yardstick")

    def event(seq: int) -> dict[str, Any]:
        to = PHASES[seq % len(PHASES)]
        return D.cloudevent(job, TransitionRec(seq, TransitionLevel.REPLICA, "y", None, to, "B"))

    async def stream(session: aiohttp.ClientSession, first: int, count: int) -> None:
        async with limit:
            for start in range(first, first + count, batch):
                seqs = range(start, min(start + batch, first + count))
                events = [event(seq) for seq in seqs]
                body = json.dumps(events if batch > 1 else events[0], separators=(",", ":"))
                kind = D.BATCH_CONTENT_TYPE if batch > 1 else D.CONTENT_TYPE
                async with session.post(url, data=body, headers={"Content-Type": kind}) as resp:
                    await resp.read()

    connector = aiohttp.TCPConnector(limit=0, limit_per_host=0)
    async with aiohttp.ClientSession(connector=connector) as session:
        starts = range(0, total, WINDOW)
        await asyncio.gather(*(stream(session, s + 1, min(WINDOW, total - s)) for s in starts))


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process used so far (/proc/PID/stat)."""
    fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def run_yardstick(url: str, total: int, batch: int, receiver: Receiver) -> float:
    receiver.expected = total
    started = time.monotonic()
    cmd = ("-m", "bench.events", "--yardstick", url, str(total), str(batch))
    proc = await asyncio.create_subprocess_exec(sys.executable, *cmd)
    await proc.wait()
    await asyncio.wait_for(receiver.all_in.wait(), 60)
    return receiver.last_arrival - started


async def bench(
    path: str, total: int, batch: int, logs: pathlib.Path, pids: dict[str, int]
) -> dict[str, Any]:
    """`pids`: the cluster's processes whose CPU time is reported (name -> pid)."""
    conn = kubeconfig.load(path, None)
    receiver = Receiver()
    receiver.expected = total
    bare = Receiver()
    app = web.Application()
    app.router.add_post("/", receiver.handle)
    app.router.add_post("/yardstick", bare.handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    listening = socket.socket()
    listening.bind(("127.0.0.1", 0))
    port = listening.getsockname()[1]
    await web.SockSite(runner, listening).start()
    bare_seconds = await run_yardstick(f"http://127.0.0.1:{port}/yardstick", total, batch, bare)
    sizes = [min(WINDOW, total - start) for start in range(0, total, WINDOW)]
    async with KubeClient(conn, limit=32) as client:
        with contextlib.suppress(ApiError):
            await client.post("/api/v1/namespaces", {"metadata": {"name": NAMESPACE}})
        uids: dict[str, str] = {}
        for i, size in enumerate(sizes):
            made = await client.post(f"{JOBS}/namespaces/{NAMESPACE}/vcjobs", job_body(i))
            uids[f"j{i}"] = made["metadata"]["uid"]
            await client.merge_patch(
                f"{JOBS}/namespaces/{NAMESPACE}/vcjobs/j{i}/status", transitions(f"j{i}", size)
            )
        out = (logs / "events.log").open("wb")
        metrics_port = free_port()
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "operators",
            "events",
            f"--kubeconfig={path}",
            "--events-health-port=0",
            f"--events-metrics-port={metrics_port}",
            "--events-metrics-host=127.0.0.1",
            stdout=out,
            stderr=asyncio.subprocess.STDOUT,
        )
        try:
            await started_up(logs / "events.log", names=("events",))
            spec: dict[str, Any] = {"url": f"http://127.0.0.1:{port}/", "filter": {}}
            if batch > 1:
                spec["batchSize"] = batch
            sink = {
                "apiVersion": "events.sluice.dev/v1alpha1",
                "kind": "EventSink",
                "metadata": {"name": SINK},
                "spec": spec,
            }
            with contextlib.suppress(ApiError):
                await client.delete(f"{SINKS}/{SINK}")
            pids = {"events operator": proc.pid, "receiver (bench process)": os.getpid(), **pids}
            cpu = {name: cpu_seconds(pid) for name, pid in pids.items()}
            writes = await status_writes(metrics_port)
            started = time.monotonic()
            await client.post(SINKS, sink)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(receiver.all_in.wait(), 600)
            elapsed = receiver.last_arrival - started
            cpu = {name: round(cpu_seconds(pid) - cpu[name], 1) for name, pid in pids.items()}
            await asyncio.sleep(1.0)  # the last cursor flush
            writes = {
                k: v - writes.get(k, 0) for k, v in (await status_writes(metrics_port)).items()
            }
        finally:
            proc.terminate()
            try:
                await asyncio.wait_for(proc.wait(), 20)
            except TimeoutError:
                proc.kill()
                await proc.wait()
            out.close()
            await runner.cleanup()
            with contextlib.suppress(ApiError):
                await client.delete(f"{SINKS}/{SINK}")
            await client.delete(f"/api/v1/namespaces/{NAMESPACE}")
    in_order = all(
        [receiver.first.get(f"{uids[f'j{i}']}-{seq}", -1) for seq in range(1, size + 1)]
        == sorted(receiver.first.get(f"{uids[f'j{i}']}-{seq}", -1) for seq in range(1, size + 1))
        for i, size in enumerate(sizes)
    )
    return {
        "transitions": total,
        "jobs": len(sizes),
        "received": len(receiver.first),
        "posts": receiver.posts,
        "seconds": round(elapsed, 2),
        "in_order": in_order,
        "load": os.getloadavg()[0],
        "yardstick_seconds": round(bare_seconds, 2),
        "batch": batch,
        "cpu_seconds": cpu,
        "status_writes": writes,
    }


async def status_writes(port: int) -> dict[str, float]:
    """sluice_events_status_writes_total by object kind, from the operator's /metrics."""
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://127.0.0.1:{port}/metrics") as resp,
    ):
        text = await resp.text()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("sluice_events_status_writes_total{"):
            labels, _, value = line.rpartition(" ")
            out[labels.partition('"')[2].partition('"')[0]] = float(value)
    return out


def report(result: dict[str, Any], where: str) -> str:
    rate = result["received"] / result["seconds"] if result["seconds"] > 0 else 0.0
    return "\n".join(
        [
            (
                f"events operator, {where}: {result['transitions']:,} transitions in "
                f"{result['jobs']} VCJobs -> one EventSink (filter: everything), local receiver"
            ),
            (
                f"received {result['received']:,} distinct ids ({result['posts']:,} POSTs) in "
                f"{result['seconds']} s after the sink was created = {rate:,.0f} events/s "
                f"(target: 10,000 in < 30 s); per-job order kept: {result['in_order']}; "
                f"load average {result['load']:.1f}"
            ),
            (
                "yardstick (bare aiohttp client, same shape, no API server): "
                f"{result['yardstick_seconds']} s; operator / yardstick = "
                f"{result['seconds'] / max(result['yardstick_seconds'], 0.001):.1f}x"
            ),
            f"batch size: {result['batch']} events per POST",
            "CPU seconds while delivering: "
            + ", ".join(f"{name} {sec}" for name, sec in result["cpu_seconds"].items()),
            "status writes by the operator meanwhile: "
            + (", ".join(f"{k} {v:.0f}" for k, v in result["status_writes"].items()) or "none"),
        ]
    )


def main(argv: list[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list[:1] == ["--yardstick"]:
        asyncio.run(yardstick(args_list[1], int(args_list[2]), int(args_list[3])))
        return 0
    parser = bench_parser("python -m bench.events", __doc__)
    parser.set_defaults(profile="small")
    parser.add_argument("--transitions", type=int, default=10_000)
    parser.add_argument(
        "--batch-size", type=int, default=1, help="the sink's batchSize (1: one event per POST)"
    )
    args = parser.parse_args(args_list)
    logs = pathlib.Path(tempfile.mkdtemp(prefix="sluice-bench-events-"))
    with bench_cluster(args.kubeconfig, args.profile, logs, nodes=args.nodes) as (
        path,
        where,
        cluster,
    ):
        state = cluster.state() if cluster is not None else None
        pids = {
            p.name: p.pid
            for p in (state.processes() if state else ())
            if p.name in ("kube-apiserver", "etcd")
        }
        result = asyncio.run(bench(path, args.transitions, args.batch_size, logs, pids))
    print()
    print(report(result, where))
    print(f"\nlogs: {logs}")
    return 0 if result["received"] == result["transitions"] and result["in_order"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
