"""Long reliability runs: ``python -m bench.soak`` (``make soak``; figures in docs/reliability.md).

1. Faults: rounds of the mixed workload of operators/devcluster/chaos.py (100 jobs a round by
   default) under SIGKILLs of every operator and the scheduler leader, leader freezes, API server
   and etcd restarts and expired watches; one round with a throttled API server
   (--max-requests-inflight / --max-mutating-requests-inflight). Every invariant of
   operators/devcluster/invariants.py is checked after each round.
2. Load: VCJobs submitted at a fixed rate (100/s for 300 s by default) with every operator
   running: how many were accepted, how many finished (nothing may be dropped), the API
   server's write rate (its own request counters) and the creation -> bound latency of the pods.

Prints one JSON document with every figure. Long: run it in the background, e.g.
``nice make soak > /tmp/sluice-soak.log 2>&1 &``.
"""

from __future__ import annotations

import json
import pathlib
import re
import statistics
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kubernetes import client, watch

from bench.clusters import bench_cluster, bench_parser
from operators.api.batch import VCJob
from operators.devcluster import chaos
from operators.devcluster.cluster import DevCluster

SLOW_API = {"--max-requests-inflight": "20", "--max-mutating-requests-inflight": "10"}
WRITES = re.compile(
    r'^apiserver_request_total\{[^}]*verb="(POST|PUT|PATCH|DELETE|APPLY)"[^}]*\} (\S+)$',
    re.MULTILINE,
)


def fault_rounds(cluster: DevCluster, args: Any, logs: pathlib.Path) -> list[dict[str, Any]]:
    out = []
    for i in range(args.rounds):
        slow = i == args.rounds - 1 and args.slow_round
        if slow:
            cluster.restart_process("kube-apiserver", SLOW_API)
        plan = chaos.Plan(
            jobs=args.jobs,
            seed=args.seed + i,
            process_faults=args.faults,
            leader_pauses=2,
            control_plane_faults=("expire:watches", "restart:apiserver", "restart:etcd"),
            submit_seconds=args.jobs * 0.6,
            finish_timeout=900,
        )
        report = chaos.run(cluster, plan, logs / f"round-{i}")
        if slow:
            # The restarts above used the throttled flags too; give the next user a plain one.
            cluster.restart_process(
                "kube-apiserver",
                {"--max-requests-inflight": "1600", "--max-mutating-requests-inflight": "800"},
            )
        summary = report.summary() | {"slow_api": slow, "violations_found": report.violations}
        print(json.dumps(summary), flush=True)
        out.append(summary)
    return out


def api_writes(api: client.ApiClient) -> float:
    text = api.call_api("/metrics", "GET", _preload_content=False, auth_settings=["BearerToken"])[
        0
    ].data.decode()
    return sum(float(v) for _, v in WRITES.findall(text))


def load(cluster: DevCluster, args: Any, logs: pathlib.Path) -> dict[str, Any]:
    logs.mkdir(parents=True, exist_ok=True)
    api = cluster.api()
    custom, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
    ns = f"load-{uuid.uuid4().hex[:6]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
    # INFO: at DEBUG, kopf logs every watch event, which at this rate is most of the operators' work.
    fleet = chaos.Fleet(pathlib.Path(cluster.kubeconfig), logs, f"load-{ns}", log_level="INFO")
    created: dict[str, float] = {}
    bound: dict[str, float] = {}
    stop = threading.Event()

    def observe() -> None:
        # Raw JSON lines, not kubernetes models: at 100 pods a second the models' decoding would
        # take a core of its own from the machine being measured.
        resp = core.list_namespaced_pod(ns, watch=True, _preload_content=False, timeout_seconds=0)
        for line in watch.watch.iter_resp_lines(resp):
            pod, now = json.loads(line)["object"], time.monotonic()
            uid = pod["metadata"]["uid"]
            created.setdefault(uid, now)
            if pod["spec"].get("nodeName"):
                bound.setdefault(uid, now)
            if stop.is_set():
                resp.close()
                return

    template = chaos.template(complete="5s")
    submitted, refused = 0, 0
    try:
        fleet.start().wait_ready(900)
        print(f"load: operators started in {logs}", flush=True)
        threading.Thread(target=observe, daemon=True).start()
        writes0, t0 = api_writes(api), time.monotonic()

        def submit(i: int) -> bool:
            body = {
                "apiVersion": f"{VCJob.group}/{VCJob.version}",
                "kind": "VCJob",
                "metadata": {"name": f"l{i:06d}"},
                "spec": {"tasks": [{"name": "w", "replicas": 1, "template": template}]},
            }
            try:
                custom.create_namespaced_custom_object(
                    VCJob.group, VCJob.version, ns, VCJob.plural, body
                )
            except client.ApiException:
                return False
            return True

        total = int(args.rate * args.seconds)
        with ThreadPoolExecutor(32) as pool:
            futures = []
            for i in range(total):
                time.sleep(max(0.0, t0 + i / args.rate - time.monotonic()))
                if i % int(args.rate * 30) == 0:
                    print(
                        f"load: {time.monotonic() - t0:.0f} s: {i} submitted,"
                        f" {len(created)} pods seen, {len(bound)} bound",
                        flush=True,
                    )
                futures.append(pool.submit(submit, i))
            results = [f.result() for f in futures]
        submit_seconds = time.monotonic() - t0
        submitted, refused = sum(results), len(results) - sum(results)
        deadline = time.monotonic() + max(args.seconds * 3, 600)
        finished = 0
        while time.monotonic() < deadline:
            items = custom.list_namespaced_custom_object(
                VCJob.group, VCJob.version, ns, VCJob.plural
            )
            finished = sum(
                (j.get("status") or {}).get("phase") == "Completed" for j in items["items"]
            )
            if finished >= submitted:
                break
            time.sleep(5)
        seconds = time.monotonic() - t0
        drain_seconds = seconds - submit_seconds
        writes = api_writes(api) - writes0
        latencies = sorted(bound[u] - created[u] for u in bound if u in created)
    finally:
        stop.set()
        fleet.stop()
        core.delete_namespace(ns)
    quantiles = statistics.quantiles(latencies, n=100) if len(latencies) > 2 else [0.0] * 99
    return {
        "rate": args.rate,
        "seconds": args.seconds,
        "submitted": submitted,
        "refused": refused,
        "submit_rate": round(submitted / submit_seconds, 1),
        "completed": finished,
        "last_completed_after_last_submission_seconds": round(drain_seconds, 1),
        "dropped": submitted - finished,
        "api_writes_per_second": round(writes / seconds, 1),
        "pods_bound": len(latencies),
        "latency_p50_seconds": round(quantiles[49], 2),
        "latency_p99_seconds": round(quantiles[98], 2),
    }


def main(argv: list[str] | None = None) -> int:
    parser = bench_parser("python -m bench.soak", __doc__)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=100)
    parser.add_argument("--faults", type=int, default=30, help="process faults a round")
    parser.add_argument("--seed", type=int, default=2500)
    parser.add_argument("--no-slow-round", dest="slow_round", action="store_false")
    parser.add_argument("--rate", type=float, default=100.0, help="job submissions a second")
    parser.add_argument("--seconds", type=float, default=300.0)
    parser.add_argument("--skip", choices=("faults", "load"), action="append", default=[])
    args = parser.parse_args(argv)
    if args.kubeconfig:
        parser.error("the soak restarts control-plane processes: it starts its own cluster")
    logs = pathlib.Path(tempfile.mkdtemp(prefix="sluice-soak-"))
    print(f"logs in {logs}", flush=True)
    result: dict[str, Any] = {"profile": args.profile, "logs": str(logs)}
    with bench_cluster(None, args.profile, logs) as (_, described, cluster):
        result["cluster"] = described
        if "faults" not in args.skip:
            result["fault_rounds"] = fault_rounds(cluster, args, logs)
        if "load" not in args.skip:
            result["load"] = load(cluster, args, logs / "load")
    print(json.dumps(result, indent=2), flush=True)
    rounds = result.get("fault_rounds", [])
    return 1 if any(r["violations"] for r in rounds) or result.get("load", {}).get("dropped") else 0


if __name__ == "__main__":
    sys.exit(main())
