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
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import itertools
import json
import pathlib
import sys
import tempfile
import time
from typing import Any

from bench.bind import gather_bounded, schedulable_nodes
from bench.live import peak_rss_mib
from operators.api.scheduling import PodGroup, Pool, Queue
from operators.devcluster.cluster import kubectl_binary
from operators.runtime import kubeconfig
from operators.runtime.binder import BindRequest, binding_body
from operators.runtime.client import ApiError, KubeClient

NAMESPACE = "bench-admin"
SAMPLES = pathlib.Path(__file__).resolve().parents[1] / "manifests" / "samples"
OPERATORS = ("pool", "queue", "podgroup")


async def serve(argv: list[str]) -> int:
    """The three operators in one event loop (what `--serve` runs in the child process)."""
    from operators.__main__ import OPERATORS as TABLE

    tasks = [asyncio.create_task(TABLE[name].load()(argv)) for name in OPERATORS]
    done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    for task in pending:
        task.cancel()
    return max((t.result() for t in done if not t.exception()), default=1)


class WriteLog:
    """Status changes per object, seen through watches."""

    def __init__(self) -> None:
        self.times: dict[tuple[str, str], list[float]] = collections.defaultdict(list)
        self._last: dict[tuple[str, str], str] = {}

    def see(self, kind: str, obj: dict[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        key = (kind, f"{meta.get('namespace', '')}/{meta.get('name')}")
        status = json.dumps(obj.get("status") or {}, sort_keys=True)
        if key in self._last and self._last[key] != status:
            self.times[key].append(time.monotonic())
        self._last[key] = status

    def summary(self) -> dict[str, dict[str, float]]:
        """Per kind: writes, objects written, and the most writes one object got within any 1 s
        and any 10 s (as seen by this watch: under load the API server delivers events in
        bunches, so the 10 s figure shows the sustained rate better than the 1 s one)."""
        out: dict[str, dict[str, float]] = {}
        for (kind, _), times in self.times.items():
            row = out.setdefault(kind, {"writes": 0, "objects": 0, "max_in_1s": 0, "max_in_10s": 0})
            row["writes"] += len(times)
            row["objects"] += 1
            row["max_in_1s"] = max(row["max_in_1s"], _most_within(times, 1.0))
            row["max_in_10s"] = max(row["max_in_10s"], _most_within(times, 10.0))
        return out


def _most_within(times: list[float], window: float) -> int:
    most = start = 0
    for end, t in enumerate(times):
        while t - times[start] > window:
            start += 1
        most = max(most, end - start + 1)
    return most


async def watch_kind(client: KubeClient, kind: str, path: str, log: WriteLog) -> None:
    while True:
        items, version = await client.list(path)
        for item in items:
            log.see(kind, item)
        with contextlib.suppress(ApiError, TimeoutError, OSError):
            async for event in client.watch(path, version):
                if event.get("type") in ("ADDED", "MODIFIED"):
                    log.see(kind, event["object"])


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
                "scheduling.sluice.dev/pod-group": f"g{group}",
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


async def completed(client: KubeClient) -> int:
    groups, _ = await client.list(PodGroup.api_path(NAMESPACE))
    return sum((g.get("status") or {}).get("phase") == "Completed" for g in groups)


async def finished_groups(client: KubeClient) -> int:
    """Groups all of whose pods Succeeded (what kwok has done; the operator should follow)."""
    pods, _ = await client.list(f"/api/v1/namespaces/{NAMESPACE}/pods")
    open_groups: set[str] = set()
    groups: set[str] = set()
    for pod in pods:
        group = (pod["metadata"].get("annotations") or {}).get("scheduling.sluice.dev/pod-group")
        groups.add(str(group))
        if (pod.get("status") or {}).get("phase") != "Succeeded":
            open_groups.add(str(group))
    return len(groups - open_groups)


async def bench(
    path: str, groups: int, pods: int, relabel: int, logs: pathlib.Path
) -> dict[str, Any]:
    conn = kubeconfig.load(path, None)
    log = WriteLog()
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
            asyncio.create_task(watch_kind(client, kind.plural, kind.api_path(), log))
            for kind in (Pool, Queue, PodGroup)
        ]
        try:
            await started_up(logs / "operators.log")
            started = time.monotonic()
            size = max(1, pods // groups)
            await gather_bounded(
                32,
                [
                    client.post(PodGroup.api_path(NAMESPACE), group_body(i, size))
                    for i in range(groups)
                ],
            )
            await gather_bounded(
                64,
                [
                    client.post(f"/api/v1/namespaces/{NAMESPACE}/pods", pod_body(g, i))
                    for g in range(groups)
                    for i in range(size)
                ],
            )
            nodes = await schedulable_nodes(client)
            ring = itertools.cycle(nodes)
            pending, _ = await client.list(f"/api/v1/namespaces/{NAMESPACE}/pods")
            await gather_bounded(
                64,
                [
                    client.post(
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
            for value in ("cpu", "gpu"):  # move nodes to cpu-pool and back
                await gather_bounded(
                    32,
                    [
                        client.merge_patch(
                            f"/api/v1/nodes/{n}",
                            {"metadata": {"labels": {"node.sluice.dev/pool": value}}},
                        )
                        for n in nodes[:relabel]
                    ],
                )
                await asyncio.sleep(3)
            # Wait while groups keep completing (kwok is slow on a loaded machine), until all
            # are done or nothing moved for `stall` seconds.
            done, last_change, stall = 0, time.monotonic(), 180.0
            while time.monotonic() - last_change < stall:
                now_done = await completed(client)
                if now_done != done:
                    done, last_change = now_done, time.monotonic()
                if done >= groups:
                    break
                await asyncio.sleep(2)
            elapsed = time.monotonic() - started
            pods_done = await finished_groups(client)
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
    return {
        "peak_rss_mb": round(peak, 1),
        "groups_completed": done,
        "groups_pods_succeeded": pods_done,
        "groups": groups,
        "pods": size * groups,
        "seconds": round(elapsed, 1),
        "writes": log.summary(),
    }


def report(result: dict[str, Any], nodes: str) -> str:
    lines = [
        (
            f"pool+queue+podgroup operators, {nodes}, {result['pods']:,} pods in "
            f"{result['groups']:,} PodGroups ({result['groups_completed']:,} Completed in "
            f"{result['seconds']} s; {result['groups_pods_succeeded']:,} groups had all pods "
            "Succeeded)"
        ),
        f"peak RSS: {result['peak_rss_mb']} MB (target < 300 MB)",
        ("| kind | objects written | status writes | most writes to one object in 1 s | in 10 s |"),
        "|---|---|---|---|---|",
    ]
    for kind, row in sorted(result["writes"].items()):
        lines.append(
            f"| {kind} | {row['objects']} | {row['writes']} | {row['max_in_1s']} "
            f"| {row['max_in_10s']} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list[:1] == ["--serve"]:
        return asyncio.run(serve(args_list[1:]))
    parser = argparse.ArgumentParser(
        prog="python -m bench.admin",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--kubeconfig", help="use this running cluster instead of starting one")
    parser.add_argument("--profile", default="large", help="devcluster profile to start")
    parser.add_argument("--groups", type=int, default=1_000)
    parser.add_argument("--pods", type=int, default=10_000)
    parser.add_argument("--relabel", type=int, default=100, help="nodes moved between pools")
    parser.add_argument("--keep", action="store_true", help="leave the started cluster running")
    args = parser.parse_args(args_list)
    logs = pathlib.Path(tempfile.mkdtemp(prefix="sluice-bench-admin-"))
    cluster = None
    path = args.kubeconfig
    nodes = "an existing cluster"
    if path is None:
        from operators.devcluster.cluster import DevCluster
        from operators.devcluster.demo import apply_crds

        cluster = DevCluster(logs / "cluster")
        state = cluster.up(profile=args.profile, log=print, timeout=600)
        apply_crds(cluster)
        path = str(cluster.kubeconfig)
        nodes = f"{state.nodes:,} kwok nodes (`{args.profile}` profile)"
    try:
        result = asyncio.run(bench(path, args.groups, args.pods, args.relabel, logs))
    finally:
        if cluster is not None and not args.keep:
            cluster.down()
    print()
    print(report(result, nodes))
    print(f"\nlogs: {logs}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
