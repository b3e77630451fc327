"""Memory and status-write rate of the pool, queue and podgroup operators on a real cluster.

    python -m bench.admin                      # brings up the `large` devcluster (1,000 nodes)
    python -m bench.admin --kubeconfig PATH    # uses a running cluster instead

The three operators run together in one process (no scheduler). The bench applies the sample
pools and queues, creates `--groups` PodGroups with `--pods` pods in all, binds the pods itself
(bare Binding POSTs, round-robin), and kwok completes them after a few seconds, so the podgroup
operator writes Completed for every group; meanwhile it moves `--relabel` nodes between pools and
back. Reported: the operators' peak RSS (VmHWM), and per object kind the number of status writes
and the most writes one object received within any one second (from watching the API, not from
the operators' own counters). Targets (issue 18): under 300 MB; about one write per object per
second at most.

Latency: for each PodGroup, from the moment the bench's pod watch saw its last pod Succeeded (what
kwok did) to the moment its watch saw the group Completed (what the podgroup operator did). The
yardstick beside it is kwok itself: how long kwok took from the last Binding until every pod had
Succeeded. The run ends when every group is Completed, or when neither kwok nor the operator has
moved for `--stall` seconds.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import json
import pathlib
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from bench.bind import gather_bounded, schedulable_nodes
from bench.clusters import bench_cluster, bench_parser
from bench.live import create_retrying, peak_rss_mib
from operators.api.scheduling import PodGroup, Pool, Queue
from operators.devcluster.cluster import kubectl_binary
from operators.runtime import kubeconfig
from operators.runtime.binder import BindRequest, binding_body
from operators.runtime.client import ApiError, KubeClient

NAMESPACE = "bench-admin"
SAMPLES = pathlib.Path(__file__).resolve().parents[1] / "manifests" / "samples"
OPERATORS = ("pool", "queue", "podgroup")
GROUP_ANNOTATION = "scheduling.sluice.dev/pod-group"


async def serve(argv: list[str]) -> int:
    """The three operators in one event loop (what `--serve` runs in the child process)."""
    from operators.__main__ import run_all

    return await run_all(argv, OPERATORS)


class WriteLog:
    """Status changes per object, seen through watches."""

    def __init__(self) -> None:
        self.times: dict[tuple[str, str], list[float]] = collections.defaultdict(list)
        self.stamps: dict[tuple[str, str], list[tuple[str, str]]] = collections.defaultdict(list)
        self._last: dict[tuple[str, str], str] = {}

    def see(self, kind: str, obj: dict[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        key = (kind, f"{meta.get('namespace', '')}/{meta.get('name')}")
        status = json.dumps(obj.get("status") or {}, sort_keys=True)
        if key in self._last and self._last[key] != status:
            self.times[key].append(time.monotonic())
            stamp = status_stamp(meta)
            if stamp is not None:
                self.stamps[key].append(stamp)
        self._last[key] = status

    def summary(self) -> dict[str, dict[str, float]]:
        """Per kind: writes, objects written, and the most writes one object got within any 1 s
        and any 10 s (as seen by this watch: under load the API server delivers events in
        bunches, so the 10 s figure shows the sustained rate better than the 1 s one), and the
        most status changes of one object by one writer that the API server stamped with the
        same second (`managedFields` time: when the writer's request arrived, not when this
        watch got it; two writes at least 1 s apart never share a second)."""
        out: dict[str, dict[str, float]] = {}
        for key, times in self.times.items():
            row = out.setdefault(
                key[0],
                {"writes": 0, "objects": 0, "max_in_1s": 0, "max_in_10s": 0, "max_per_second": 0},
            )
            row["writes"] += len(times)
            row["objects"] += 1
            row["max_in_1s"] = max(row["max_in_1s"], _most_within(times, 1.0))
            row["max_in_10s"] = max(row["max_in_10s"], _most_within(times, 10.0))
            same = collections.Counter(self.stamps.get(key, ())).most_common(1)
            row["max_per_second"] = max(row["max_per_second"], same[0][1] if same else 0)
        return out


def status_stamp(meta: dict[str, Any]) -> tuple[str, str] | None:
    """(writer, second) of the newest status write the API server recorded in managedFields."""
    entries = [
        e
        for e in meta.get("managedFields") or ()
        if e.get("subresource") == "status" and e.get("time")
    ]
    if not entries:
        return None
    newest = max(entries, key=lambda e: str(e["time"]))
    return str(newest.get("manager")), str(newest["time"])


def _most_within(times: list[float], window: float) -> int:
    most = start = 0
    for end, t in enumerate(times):
        while t - times[start] > window:
            start += 1
        most = max(most, end - start + 1)
    return most


class Progress:
    """When kwok finished each group (its last pod seen Succeeded) and when the podgroup operator
    said so (the group seen Completed), from the bench's own watches."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._succeeded: dict[str, set[str]] = collections.defaultdict(set)
        self.pods_done: dict[str, float] = {}  # group -> when its last pod was seen Succeeded
        self.completed: dict[str, float] = {}  # group -> when it was seen Completed
        self.last_move = time.monotonic()

    def see_pod(self, obj: dict[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        group = (meta.get("annotations") or {}).get(GROUP_ANNOTATION)
        if group is None or (obj.get("status") or {}).get("phase") != "Succeeded":
            return
        done = self._succeeded[group]
        if meta.get("name") in done:
            return
        done.add(str(meta.get("name")))
        self.last_move = time.monotonic()
        if len(done) >= self.size:
            self.pods_done.setdefault(group, self.last_move)

    def see_group(self, obj: dict[str, Any]) -> None:
        name = str((obj.get("metadata") or {}).get("name"))
        if (obj.get("status") or {}).get("phase") == "Completed" and name not in self.completed:
            self.last_move = time.monotonic()
            self.completed[name] = self.last_move

    def latencies(self) -> list[float]:
        """Seconds from a group's last pod Succeeded to the group Completed (groups with both)."""
        return sorted(
            max(0.0, self.completed[g] - t)
            for g, t in self.pods_done.items()
            if g in self.completed
        )


async def watch_path(client: KubeClient, path: str, see: Callable[[dict[str, Any]], None]) -> None:
    while True:
        items, version = await client.list(path)
        for item in items:
            see(item)
        with contextlib.suppress(ApiError, TimeoutError, OSError):
            async for event in client.watch(path, version):
                if event.get("type") in ("ADDED", "MODIFIED"):
                    see(event["object"])


def percentile(values: list[float], q: float) -> float:
    return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")


async def apply_samples(kubeconfig_path: str) -> None:
    for sample in ("pools.yaml", "queues.yaml"):
        proc = await asyncio.create_subprocess_exec(
            kubectl_binary(),
            f"--kubeconfig={kubeconfig_path}",
            "apply",
            "-f",
            str(SAMPLES / sample),
            stdout=asyncio.subprocess.DEVNULL,
        )
        await proc.wait()


def group_body(i: int, size: int) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.sluice.dev/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": f"g{i}", "namespace": NAMESPACE},
        "spec": {"minMember": size, "queue": "vision-detection"},
    }


def pod_body(group: int, index: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"g{group}-{index}",
            "namespace": NAMESPACE,
            "annotations": {
                GROUP_ANNOTATION: f"g{group}",
                "sluice.dev/complete-after": "5s",
            },
        },
        "spec": {
            "schedulerName": "sluice",
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {"name": "c", "image": "fake", "resources": {"requests": {"cpu": "10m"}}}
            ],
        },
    }


def _text(path: pathlib.Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""


async def started_up(
    log_path: pathlib.Path, within: float = 300, names: tuple[str, ...] = OPERATORS
) -> None:
    """Wait until each operator has logged its start (importing kopf is slow on a busy box)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if all(f"operator {name} started" in _text(log_path) for name in names):
            await asyncio.sleep(3)  # the initial listing
            return
        await asyncio.sleep(0.5)
    raise TimeoutError(f"the operators did not start within {within:.0f} s ({log_path})")


async def label(client: KubeClient, node: str, value: str) -> None:
    """Set a node's pool class label, retrying what an overloaded API server drops."""
    for attempt in range(4):
        try:
            await client.merge_patch(
                f"/api/v1/nodes/{node}", {"metadata": {"labels": {"node.sluice.dev/pool": value}}}
            )
            return
        except (ApiError, TimeoutError, OSError):
            if attempt == 3:
                raise
            await asyncio.sleep(1.0 * 2**attempt)


async def bench(
    path: str, groups: int, pods: int, relabel: int, stall: float, logs: pathlib.Path
) -> dict[str, Any]:
    conn = kubeconfig.load(path, None)
    log = WriteLog()
    size = max(1, pods // groups)
    progress = Progress(size)

    def see_group(obj: dict[str, Any]) -> None:
        log.see(PodGroup.plural, obj)
        if (obj.get("metadata") or {}).get("namespace") == NAMESPACE:
            progress.see_group(obj)

    async with KubeClient(conn, limit=64) as client:
        with contextlib.suppress(ApiError):
            await client.post("/api/v1/namespaces", {"metadata": {"name": NAMESPACE}})
        await apply_samples(path)
        out = (logs / "operators.log").open("wb")
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "bench.admin",
            "--serve",
            f"--kubeconfig={path}",
            stdout=out,
            stderr=asyncio.subprocess.STDOUT,
        )
        watchers = [
            asyncio.create_task(watch_path(client, Pool.api_path(), partial(log.see, Pool.plural))),
            asyncio.create_task(
                watch_path(client, Queue.api_path(), partial(log.see, Queue.plural))
            ),
            asyncio.create_task(watch_path(client, PodGroup.api_path(), see_group)),
            asyncio.create_task(
                watch_path(client, f"/api/v1/namespaces/{NAMESPACE}/pods", progress.see_pod)
            ),
        ]
        try:
            await started_up(logs / "operators.log")
            rss_idle = peak_rss_mib(proc.pid)
            started = time.monotonic()
            await gather_bounded(
                32,
                [
                    create_retrying(client, PodGroup.api_path(NAMESPACE), group_body(i, size))
                    for i in range(groups)
                ],
            )
            await gather_bounded(
                64,
                [
                    create_retrying(client, f"/api/v1/namespaces/{NAMESPACE}/pods", pod_body(g, i))
                    for g in range(groups)
                    for i in range(size)
                ],
            )
            nodes = await schedulable_nodes(client)
            ring = itertools.cycle(nodes)
            pending, _ = await client.list(f"/api/v1/namespaces/{NAMESPACE}/pods")
            await gather_bounded(
                32,
                [
                    create_retrying(
                        client,
                        f"/api/v1/namespaces/{NAMESPACE}/pods/{p['metadata']['name']}/binding",
                        binding_body(
                            BindRequest(
                                NAMESPACE, p["metadata"]["name"], p["metadata"]["uid"], next(ring)
                            )
                        ),
                    )
                    for p in pending
                ],
            )
            bound = time.monotonic()
            for value in ("cpu", "gpu"):  # move nodes to cpu-pool and back
                await gather_bounded(32, [label(client, n, value) for n in nodes[:relabel]])
                await asyncio.sleep(3)
            # Until every group is Completed, or neither kwok (pods Succeeded) nor the operator
            # (groups Completed) has moved for `stall` seconds.
            progress.last_move = max(progress.last_move, time.monotonic())
            while len(progress.completed) < groups:
                if time.monotonic() - progress.last_move > stall:
                    break
                await asyncio.sleep(1)
            elapsed = time.monotonic() - started
            await asyncio.sleep(3)  # let trailing writes arrive
        finally:
            for task in watchers:
                task.cancel()
            peak = peak_rss_mib(proc.pid)
            proc.terminate()
            try:
                await asyncio.wait_for(proc.wait(), 20)
            except TimeoutError:
                proc.kill()
                await proc.wait()
            out.close()
            await client.delete(f"/api/v1/namespaces/{NAMESPACE}")
    latencies = progress.latencies()
    kwok_done = max(progress.pods_done.values(), default=bound)
    return {
        "peak_rss_mb": round(peak, 1),
        "idle_rss_mb": round(rss_idle, 1),
        "groups_completed": len(progress.completed),
        "groups_pods_succeeded": len(progress.pods_done),
        "groups": groups,
        "pods": size * groups,
        "seconds": round(elapsed, 1),
        "kwok_seconds": round(kwok_done - bound, 1),
        "latency_p50": round(percentile(latencies, 0.5), 2),
        "latency_p99": round(percentile(latencies, 0.99), 2),
        "latency_max": round(latencies[-1] if latencies else float("nan"), 2),
        "writes": log.summary(),
    }


def report(result: dict[str, Any], nodes: str) -> str:
    lines = [
        (
            f"pool+queue+podgroup operators, {nodes}, {result['pods']:,} pods in "
            f"{result['groups']:,} PodGroups: {result['groups_completed']:,} Completed in "
            f"{result['seconds']} s; kwok had all pods of {result['groups_pods_succeeded']:,} "
            f"groups Succeeded, {result['kwok_seconds']} s after the last Binding"
        ),
        (
            f"peak RSS: {result['peak_rss_mb']} MB (target < 300 MB; "
            f"{result['idle_rss_mb']} MB once started, before any PodGroup)"
        ),
        (
            f"last pod Succeeded -> group Completed: p50 {result['latency_p50']} s, "
            f"p99 {result['latency_p99']} s, max {result['latency_max']} s"
        ),
        (
            "| kind | objects written | status writes | most writes to one object in 1 s "
            "| in 10 s | by one writer in one API-server second |"
        ),
        "|---|---|---|---|---|---|",
    ]
    for kind, row in sorted(result["writes"].items()):
        lines.append(
            f"| {kind} | {row['objects']} | {row['writes']} | {row['max_in_1s']} "
            f"| {row['max_in_10s']} | {row['max_per_second']} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list[:1] == ["--serve"]:
        return asyncio.run(serve(args_list[1:]))
    parser = bench_parser("python -m bench.admin", __doc__)
    parser.add_argument("--groups", type=int, default=1_000)
    parser.add_argument("--pods", type=int, default=10_000)
    parser.add_argument("--relabel", type=int, default=100, help="nodes moved between pools")
    parser.add_argument(
        "--stall", type=float, default=300.0, help="give up after this long without progress"
    )
    parser.add_argument("--keep", action="store_true", help="leave the started cluster running")
    args = parser.parse_args(args_list)
    logs = pathlib.Path(tempfile.mkdtemp(prefix="sluice-bench-admin-"))
    with bench_cluster(args.kubeconfig, args.profile, logs, args.keep, args.nodes) as (
        path,
        nodes,
        _,
    ):
        result = asyncio.run(bench(path, args.groups, args.pods, args.relabel, args.stall, logs))
    print()
    print(report(result, nodes))
    print(f"\nlogs: {logs}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
