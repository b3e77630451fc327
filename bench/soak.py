"""Long reliability runs: ``python -m bench.soak`` (``make soak``; figures in docs/reliability.md).

1. Faults: rounds of the mixed workload of operators/devcluster/chaos.py (100 jobs a round by
   default) under SIGKILLs of every operator and the scheduler leader, leader freezes, API server
   and etcd restarts and expired watches; one round with a throttled API server
   (--max-requests-inflight / --max-mutating-requests-inflight). Every invariant of
   operators/devcluster/invariants.py is checked after each round.
2. Load: VCJobs submitted at a fixed rate (100/s for 300 s by default) with every operator
   running: how many were accepted, how many reached `Completed` (nothing may be left behind),
   the API server's write rate (its own request counters) and the creation -> bound latency of
   the pods, followed from watches (never by re-listing every job).
3. API ceiling: the same VCJobs created as fast as 32 connections go with no operator running,
   the yardstick for the load's submit rate on the same machine at the same time.

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

import urllib3
from kubernetes import client, watch

from bench.clusters import bench_cluster, bench_parser
from operators.api.batch import VCJob
from operators.devcluster import chaos
from operators.devcluster.cluster import DevCluster

SLOW_API = {"--max-requests-inflight": "20", "--max-mutating-requests-inflight": "10"}
LATE_SECONDS = 10.0
"""A load submission that could not start within this long after the end of its window is not
sent (counted as behind schedule): the run measures a rate, not how long a backlog takes."""
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


def follow(stop: threading.Event, list_call: Any, *args: Any, seen: Any) -> None:
    """Calls `seen(object, monotonic time)` for every event of a watch, as raw JSON (kubernetes
    models would take a core of their own at 100 objects a second); watches again if the
    stream ends (a re-list replays every object, which `seen` must take as a repeat)."""
    while not stop.is_set():
        try:
            resp = list_call(*args, watch=True, _preload_content=False, timeout_seconds=600)
            for line in watch.watch.iter_resp_lines(resp):
                seen(json.loads(line)["object"], time.monotonic())
                if stop.is_set():
                    resp.close()
                    return
        except (client.ApiException, OSError, ValueError, urllib3.exceptions.HTTPError):
            time.sleep(1)


def vcjob(i: int, template: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": f"{VCJob.group}/{VCJob.version}",
        "kind": "VCJob",
        "metadata": {"name": f"l{i:06d}"},
        "spec": {"tasks": [{"name": "w", "replicas": 1, "template": template}]},
    }


def submit_at(
    custom: client.CustomObjectsApi,
    ns: str,
    rate: float | None,
    seconds: float,
    progress: Any = lambda: "",
) -> tuple[int, int, int, float]:
    """VCJobs created at `rate` a second (None: as fast as 32 connections go) for `seconds`:
    (accepted, refused, not sent because the API server fell more than `LATE_SECONDS` behind
    the schedule, seconds until the last answer)."""
    template = chaos.template(complete="5s")
    accepted, refused, late = 0, 0, 0
    lock = threading.Lock()
    t0 = time.monotonic()

    def create(i: int) -> None:
        nonlocal accepted, refused, late
        if time.monotonic() > t0 + seconds + LATE_SECONDS:
            with lock:  # the API server is behind the schedule: this one is not sent at all
                late += 1
            return
        try:
            custom.create_namespaced_custom_object(
                VCJob.group, VCJob.version, ns, VCJob.plural, vcjob(i, template)
            )
            ok = True
        except client.ApiException:
            ok = False
        with lock:
            accepted, refused = accepted + ok, refused + (not ok)

    if rate is None:
        with ThreadPoolExecutor(32) as pool:
            n = 0
            while time.monotonic() - t0 < seconds:
                list(pool.map(create, range(n, n + 32)))
                n += 32
        return accepted, refused, late, time.monotonic() - t0
    with ThreadPoolExecutor(32) as pool:
        for i in range(int(rate * seconds)):
            time.sleep(max(0.0, t0 + i / rate - time.monotonic()))
            if i % int(rate * 30) == 0:
                print(
                    f"load: {time.monotonic() - t0:.0f} s: {accepted} accepted; {progress()}",
                    flush=True,
                )
            pool.submit(create, i)
    return accepted, refused, late, time.monotonic() - t0


def load(cluster: DevCluster, args: Any, logs: pathlib.Path) -> dict[str, Any]:
    logs.mkdir(parents=True, exist_ok=True)
    api = cluster.api()
    custom, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
    ns = f"load-{uuid.uuid4().hex[:6]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
    # INFO: at DEBUG, kopf logs every watch event, which at this rate is most of the operators' work.
    # The scheduler's default lease: the fault runs' short one measures failover, not load.
    fleet = chaos.Fleet(
        pathlib.Path(cluster.kubeconfig),
        logs,
        f"load-{ns}",
        log_level="INFO",
        short_lease=False,
    )
    created: dict[str, float] = {}
    bound: dict[str, float] = {}
    phases: dict[str, str] = {}
    stop = threading.Event()

    def pod_seen(pod: dict[str, Any], now: float) -> None:
        uid = pod["metadata"]["uid"]
        created.setdefault(uid, now)
        if pod["spec"].get("nodeName"):
            bound.setdefault(uid, now)

    def job_seen(job: dict[str, Any], _: float) -> None:
        phases[job["metadata"]["name"]] = (job.get("status") or {}).get("phase", "")

    def progress() -> str:
        completed = sum(p == "Completed" for p in list(phases.values()))
        return f"{len(created)} pods seen, {len(bound)} bound, {completed} jobs completed"

    try:
        fleet.start().wait_ready(900)
        print(f"load: operators started in {logs}", flush=True)
        for target, call in (
            (pod_seen, core.list_namespaced_pod),
            (job_seen, custom.list_namespaced_custom_object),
        ):
            extra = (VCJob.group, VCJob.version, ns, VCJob.plural) if target is job_seen else (ns,)
            threading.Thread(
                target=follow, args=(stop, call, *extra), kwargs={"seen": target}, daemon=True
            ).start()
        writes0, t0 = api_writes(api), time.monotonic()
        submitted, refused, late, submit_seconds = submit_at(
            custom, ns, args.rate, args.seconds, progress
        )
        deadline = time.monotonic() + args.drain_seconds
        last = time.monotonic()
        completed = 0
        while time.monotonic() < deadline:
            completed = sum(p == "Completed" for p in list(phases.values()))
            if completed >= submitted:
                break
            if time.monotonic() - last >= 30:
                print(f"load: draining, {time.monotonic() - t0:.0f} s: {progress()}", flush=True)
                last = time.monotonic()
            time.sleep(1)
        seconds = time.monotonic() - t0
        writes = api_writes(api) - writes0
        latencies = sorted(bound[u] - created[u] for u in bound if u in created)
        unfinished: dict[str, int] = {}
        for phase in phases.values():
            if phase != "Completed":
                unfinished[phase or "(none)"] = unfinished.get(phase or "(none)", 0) + 1
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
        "not_sent_behind_schedule": late,
        "submit_rate": round(submitted / submit_seconds, 1),
        "completed": completed,
        "completed_per_second": round(completed / seconds, 1),
        "run_seconds": round(seconds, 1),
        "not_completed": submitted - completed,
        "not_completed_phases": unfinished,
        "api_writes_per_second": round(writes / seconds, 1),
        "pods_bound": len(latencies),
        "latency_p50_seconds": round(quantiles[49], 2),
        "latency_p99_seconds": round(quantiles[98], 2),
    }


def api_ceiling(cluster: DevCluster, seconds: float) -> dict[str, Any]:
    """The same VCJobs created as fast as 32 connections go, with no operator running: what the
    API server alone accepts on this machine, the yardstick for the load's submit rate."""
    api = cluster.api()
    custom, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
    ns = f"ceiling-{uuid.uuid4().hex[:6]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
    try:
        writes0 = api_writes(api)
        accepted, refused, _, took = submit_at(custom, ns, None, seconds)
        writes = api_writes(api) - writes0
    finally:
        core.delete_namespace(ns)
    return {
        "seconds": round(took, 1),
        "accepted": accepted,
        "refused": refused,
        "creates_per_second": round(accepted / took, 1),
        "api_writes_per_second": round(writes / took, 1),
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
    parser.add_argument(
        "--drain-seconds",
        type=float,
        default=600.0,
        help="after the last submission, how long the jobs get to complete",
    )
    parser.add_argument(
        "--ceiling-seconds",
        type=float,
        default=30.0,
        help="after the load: VCJob creates as fast as they go, no operators (the yardstick)",
    )
    parser.add_argument(
        "--skip", choices=("faults", "load", "ceiling"), action="append", default=[]
    )
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
        if "ceiling" not in args.skip:
            result["api_ceiling"] = api_ceiling(cluster, args.ceiling_seconds)
    print(json.dumps(result, indent=2), flush=True)
    rounds = result.get("fault_rounds", [])
    return (
        1
        if any(r["violations"] for r in rounds) or result.get("load", {}).get("not_completed")
        else 0
    )


if __name__ == "__main__":
    sys.exit(main())
