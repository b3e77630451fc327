"""Binding throughput on a real cluster: the Sluice scheduler vs a bare round-robin binding loop.

    python -m bench.bind                      # brings up the `large` devcluster (1,000 nodes)
    python -m bench.bind --kubeconfig PATH    # uses a running cluster instead

Both contestants bind the same number of pre-created pending pods with the same client
concurrency (Binding POSTs in flight), in the same run, on the same cluster:

* yardstick: a bare loop that lists the pods and POSTs Bindings round-robin over the nodes, with
  no cache, no decisions and no bookkeeping: the API server's own ceiling on this machine;
* sluice: `python -m operators scheduler` started with the pods already pending; every pod is a
  single-pod group (no PodGroup), so each one is a scheduling decision of its own.

Rate = pods / (last binding answered - first binding answered). For the scheduler the times come
from polling its `sluice_pods_bound_total` metric every 50 ms; its time from process start
(cache sync + first session included) is reported too.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import pathlib
import re
import signal
import socket
import statistics
import sys
import tempfile
import time
import urllib.request
import uuid
from typing import Any

from bench.clusters import bench_cluster, bench_parser
from operators.runtime import kubeconfig
from operators.runtime.binder import BindRequest, binding_body
from operators.runtime.client import ApiError, KubeClient

NAMESPACE = "bench-bind"
IDLE_SCHEDULER = "bench-nobody"  # pods nobody schedules until the bare loop binds them


def pod_body(
    name: str, scheduler: str, cpu: str = "100m", annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": NAMESPACE, "labels": {"app": "bench-bind"}}
    if annotations:
        meta["annotations"] = annotations
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {
            "schedulerName": scheduler,
            "containers": [
                {
                    "name": "c",
                    "image": "fake",
                    "resources": {"requests": {"cpu": cpu, "memory": "128Mi"}},
                }
            ],
        },
    }


async def gather_bounded(concurrency: int, coros: Any) -> list[Any]:
    sem = asyncio.Semaphore(concurrency)

    async def run(coro: Any) -> Any:
        async with sem:
            return await coro

    return list(await asyncio.gather(*(run(c) for c in coros)))


async def ensure_namespace(client: KubeClient) -> None:
    with contextlib.suppress(ApiError):
        await client.post(
            "/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
        )


async def create_pods(client: KubeClient, count: int, scheduler: str, prefix: str) -> float:
    started = time.monotonic()
    path = f"/api/v1/namespaces/{NAMESPACE}/pods"
    await gather_bounded(
        64, (client.post(path, pod_body(f"{prefix}-{i:05d}", scheduler)) for i in range(count))
    )
    return time.monotonic() - started


async def delete_pods(client: KubeClient) -> None:
    """Force-delete (grace 0: kwok pods have no kubelet to wait for) every bench pod, many at
    once: one DELETE per pod is faster than a deletecollection on a busy API server."""
    path = f"/api/v1/namespaces/{NAMESPACE}/pods"

    async def delete(name: str) -> None:
        with contextlib.suppress(ApiError):
            await client.request(
                "DELETE", f"{path}/{name}", params={"gracePeriodSeconds": "0"}, deadline=120
            )

    while True:
        items, _ = await client.list(path, {"labelSelector": "app=bench-bind"})
        if not items:
            return
        await gather_bounded(64, (delete(p["metadata"]["name"]) for p in items))
        await asyncio.sleep(0.5)


async def schedulable_nodes(client: KubeClient) -> list[str]:
    nodes, _ = await client.list("/api/v1/nodes")
    return [
        n["metadata"]["name"]
        for n in nodes
        if not (n.get("spec") or {}).get("taints")
        and not (n.get("spec") or {}).get("unschedulable")
    ]


async def bare_loop(client: KubeClient, concurrency: int) -> tuple[int, float]:
    """List the pending pods and bind them round-robin: the API server's ceiling."""
    nodes = await schedulable_nodes(client)
    pods, _ = await client.list(
        f"/api/v1/namespaces/{NAMESPACE}/pods", {"fieldSelector": "spec.nodeName="}
    )
    ring = itertools.cycle(nodes)
    requests = [
        BindRequest(NAMESPACE, p["metadata"]["name"], p["metadata"]["uid"], next(ring))
        for p in pods
    ]
    sem = asyncio.Semaphore(concurrency)
    first: list[float] = []
    last = [0.0]

    async def bind(req: BindRequest) -> None:
        async with sem:
            await client.post(
                f"/api/v1/namespaces/{NAMESPACE}/pods/{req.name}/binding", binding_body(req)
            )
        now = time.monotonic()
        if not first:
            first.append(now)
        last[0] = now

    await asyncio.gather(*(bind(r) for r in requests))
    return len(requests), last[0] - first[0]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def bound_metric(port: int) -> float | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as resp:
            text = resp.read().decode()
    except OSError:
        return None
    match = re.search(r"^sluice_pods_bound_total (\S+)$", text, re.MULTILINE)
    return float(match.group(1)) if match else None


async def run_scheduler(
    kubeconfig_path: str, count: int, concurrency: int, log: pathlib.Path
) -> tuple[float, float]:
    """Start the scheduler with `count` pods pending; (first->last binding, start->last)."""
    port = free_port()
    cmd = [
        sys.executable,
        "-m",
        "operators",
        "scheduler",
        f"--kubeconfig={kubeconfig_path}",
        f"--bind-concurrency={concurrency}",
        f"--metrics-port={port}",
        "--metrics-host=127.0.0.1",
        "--lease-name=sluice-bench",
        f"--identity=bench-{os.getpid()}",
    ]
    with log.open("w") as out:
        started = time.monotonic()
        proc = await asyncio.create_subprocess_exec(
            *cmd, stdout=out, stderr=asyncio.subprocess.STDOUT
        )
        try:
            first = last = 0.0
            deadline = started + 600
            while time.monotonic() < deadline:
                value = bound_metric(port)
                now = time.monotonic()
                if value and not first:
                    first = now
                if value is not None and value >= count:
                    last = now
                    break
                if proc.returncode is not None:
                    raise RuntimeError(f"scheduler exited with {proc.returncode}; see {log}")
                await asyncio.sleep(0.05)
            if not last:
                raise RuntimeError(f"scheduler did not bind {count} pods in time; see {log}")
            return last - first, last - started
        finally:
            if proc.returncode is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    await asyncio.wait_for(proc.wait(), 30)
                except TimeoutError:
                    proc.kill()


async def count_bound(client: KubeClient) -> int:
    pods, _ = await client.list(f"/api/v1/namespaces/{NAMESPACE}/pods")
    return sum(1 for p in pods if (p.get("spec") or {}).get("nodeName"))


async def bench(
    kubeconfig_path: str, pods: int, concurrency: int, rounds: int, logs: pathlib.Path
) -> dict[str, Any]:
    conn = kubeconfig.load(kubeconfig_path)
    # Fresh pod names every run: the pod garbage collector acts on names from its (possibly
    # lagging) cache and would delete a new pod that reuses an old, force-deleted pod's name.
    run = uuid.uuid4().hex[:5]
    bare_rates: list[float] = []
    sched_rates: list[float] = []
    sched_totals: list[float] = []
    async with KubeClient(conn, limit=concurrency + 16, request_timeout=60) as client:
        await ensure_namespace(client)
        await delete_pods(client)
        for r in range(rounds):
            secs = await create_pods(client, pods, IDLE_SCHEDULER, f"bare{r}-{run}")
            print(f"round {r + 1}: created {pods} pods for the bare loop in {secs:.1f}s")
            n, elapsed = await bare_loop(client, concurrency)
            assert await count_bound(client) == pods, "bare loop left pods unbound"
            bare_rates.append(n / elapsed)
            print(
                f"round {r + 1}: bare loop bound {n} pods in {elapsed:.2f}s "
                f"= {n / elapsed:.0f} pods/s"
            )
            await delete_pods(client)

            secs = await create_pods(client, pods, "sluice", f"sluice{r}-{run}")
            print(f"round {r + 1}: created {pods} pods for sluice in {secs:.1f}s")
            window, total = await run_scheduler(
                kubeconfig_path, pods, concurrency, logs / f"scheduler-{r + 1}.log"
            )
            bound = await count_bound(client)
            assert bound == pods, f"sluice left {pods - bound} pods unbound"
            sched_rates.append(pods / window)
            sched_totals.append(total)
            print(
                f"round {r + 1}: sluice bound {pods} pods in {window:.2f}s "
                f"= {pods / window:.0f} pods/s ({total:.1f}s from process start)"
            )
            await delete_pods(client)
    bare = statistics.median(bare_rates)
    sched = statistics.median(sched_rates)
    return {
        "pods": pods,
        "concurrency": concurrency,
        "rounds": rounds,
        "bare": bare_rates,
        "sluice": sched_rates,
        "sluice_total_seconds": sched_totals,
        "ratio": sched / bare,
    }


def report(result: dict[str, Any], nodes: str, command: str) -> str:
    bare = ", ".join(f"{x:.0f}" for x in result["bare"])
    sluice = ", ".join(f"{x:.0f}" for x in result["sluice"])
    totals = ", ".join(f"{x:.1f}" for x in result["sluice_total_seconds"])
    return "\n".join(
        [
            f"Command: `{command}`",
            "",
            (
                f"{result['pods']:,} single-pod groups, {nodes}, {result['concurrency']} Binding POSTs "
                f"in flight for both; {result['rounds']} round(s), yardstick and Sluice alternating."
            ),
            "",
            "| contestant | pods/s per round | median |",
            "|---|---|---|",
            (
                f"| bare round-robin binding loop (yardstick) | {bare} | "
                f"{statistics.median(result['bare']):.0f} |"
            ),
            (
                f"| Sluice scheduler (`python -m operators scheduler`) | {sluice} | "
                f"{statistics.median(result['sluice']):.0f} |"
            ),
            "",
            (
                f"Sluice / yardstick: **{result['ratio']:.0%}** (target: at least 80%). Sluice's time from "
                f"process start to the last binding (cache sync and first session included): {totals} s."
            ),
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = bench_parser("python -m bench.bind", __doc__)
    parser.add_argument("--pods", type=int, default=10_000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--keep", action="store_true", help="leave the started cluster running")
    args = parser.parse_args(argv)

    logs = pathlib.Path(tempfile.mkdtemp(prefix="sluice-bench-bind-"))
    with bench_cluster(args.kubeconfig, args.profile, logs, args.keep, args.nodes) as (
        path,
        nodes,
        _,
    ):
        result = asyncio.run(bench(path, args.pods, args.concurrency, args.rounds, logs))
    command = "python -m bench.bind " + " ".join(argv if argv is not None else sys.argv[1:])
    print()
    print(report(result, nodes, command.strip()))
    print(f"\nlogs: {logs}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
