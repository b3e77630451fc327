"""Long reliability runs: ``python -m bench.soak`` (``make soak``; figures in docs/reliability.md).

1. Faults: rounds of the mixed workload of operators/devcluster/chaos.py (100 jobs a round by
   default) under SIGKILLs of every operator and the scheduler leader, leader freezes, API server
   and etcd restarts and expired watches; one round with a throttled API server
   (--max-requests-inflight / --max-mutating-requests-inflight). Every invariant of
   operators/devcluster/invariants.py is checked after each round.
2. Load: VCJobs submitted at a fixed rate (100/s for 300 s by default) with every operator
   running: how many were accepted, how many reached `Completed` (nothing may be left behind),
   the API server's write rate (its own request counters, also per resource and per job) and
   the creation -> bound latency of the pods, followed from watches (never by re-listing every
   job). Every scheduled submission is sent, none dropped: when the API server answers slower
   than the rate, submissions start late, and the run reports how far behind the schedule they
   started and the rate the API server accepted.
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
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import urllib3
from kubernetes import client, watch

from bench.clusters import bench_cluster, bench_parser
from operators.api.batch import VCJob
from operators.devcluster import chaos
from operators.devcluster.cluster import DevCluster

SLOW_API = {"--max-requests-inflight": "20", "--max-mutating-requests-inflight": "10"}
CONNECTIONS = 32
"""Submissions in flight at once (the API client's connection pool)."""
REQUESTS = re.compile(r"^apiserver_request_total\{([^}]*)\} (\S+)$", re.MULTILINE)
LABEL = re.compile(r'(\w+)="([^"]*)"')
WRITE_VERBS = frozenset({"POST", "PUT", "PATCH", "DELETE", "APPLY"})


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


def writes_by_resource(metrics: str) -> dict[str, float]:
    """The API server's write requests so far (`apiserver_request_total`), by resource (with
    its subresource, e.g. `vcjobs/status`)."""
    out: dict[str, float] = {}
    for labels, value in REQUESTS.findall(metrics):
        got = dict(LABEL.findall(labels))
        if got.get("verb") in WRITE_VERBS:
            name = got.get("resource", "") + (
                f"/{got['subresource']}" if got.get("subresource") else ""
            )
            out[name] = out.get(name, 0.0) + float(value)
    return out


def api_writes(api: client.ApiClient) -> dict[str, float]:
    text = api.call_api("/metrics", "GET", _preload_content=False, auth_settings=["BearerToken"])[
        0
    ].data.decode()
    return writes_by_resource(text)


def writes_since(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {k: v - before.get(k, 0.0) for k, v in after.items() if v - before.get(k, 0.0) > 0}


def follow(
    stop: threading.Event,
    watch_from: Callable[[str], Iterable[dict[str, Any]]],
    seen: Callable[[dict[str, Any], float], None],
    pause: float = 1.0,
) -> None:
    """Calls `seen(object, monotonic time)` for every event of a watch; `watch_from(rv)` opens
    one from resourceVersion `rv` ("" for a replay of every object first). A watch that ends
    (the API server closes one that reads too slowly, or at its timeout) is resumed from the
    last resourceVersion seen, not replayed: a replay of 10,000 jobs on each close was most of
    the API server's VCJob watch traffic under load. Only a 410 (that version is compacted)
    starts over with a replay, which `seen` must take as repeats."""
    rv = ""
    while not stop.is_set():
        try:
            for event in watch_from(rv):
                obj = event.get("object") or {}
                if event.get("type") == "ERROR":
                    rv = ""  # 410 Gone: too old to resume from
                    break
                rv = (obj.get("metadata") or {}).get("resourceVersion") or rv
                if event.get("type") != "BOOKMARK":
                    seen(obj, time.monotonic())
                if stop.is_set():
                    return
        except (client.ApiException, OSError, ValueError, urllib3.exceptions.HTTPError):
            time.sleep(pause)


def raw_watch(
    stop: threading.Event, list_call: Any, *args: Any
) -> Callable[[str], Iterator[dict[str, Any]]]:
    """`follow`'s `watch_from` for a kubernetes client list call: events as raw JSON
    (kubernetes models would take a core of their own at 100 objects a second)."""

    def watch_from(rv: str) -> Iterator[dict[str, Any]]:
        resp = list_call(
            *args,
            watch=True,
            _preload_content=False,
            timeout_seconds=600,
            allow_watch_bookmarks=True,
            resource_version=rv or None,
        )
        try:
            for line in watch.watch.iter_resp_lines(resp):
                yield json.loads(line)
                if stop.is_set():
                    return
        finally:
            resp.close()

    return watch_from


def vcjob(i: int, template: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": f"{VCJob.group}/{VCJob.version}",
        "kind": "VCJob",
        "metadata": {"name": f"l{i:06d}"},
        "spec": {"tasks": [{"name": "w", "replicas": 1, "template": template}]},
    }


@dataclass
class Submitted:
    """What a submission run did. `behind` holds, per submission, how many seconds after its
    scheduled time it was sent (0 when the API server kept up with the rate)."""

    accepted: int = 0
    refused: int = 0
    seconds: float = 0.0
    """From the first scheduled submission to the last answer."""
    behind: list[float] = field(default_factory=list)

    def report(self) -> dict[str, Any]:
        late = sorted(self.behind) or [0.0]
        return {
            "accepted": self.accepted,
            "refused": self.refused,
            "seconds": round(self.seconds, 1),
            "accepted_per_second": round(self.accepted / self.seconds, 1) if self.seconds else 0,
            "behind_schedule_seconds_p50": round(late[len(late) // 2], 2),
            "behind_schedule_seconds_p99": round(
                late[min(len(late) - 1, len(late) * 99 // 100)], 2
            ),
            "behind_schedule_seconds_max": round(late[-1], 2),
        }


def submit_at(
    create: Callable[[int], bool],
    rate: float | None,
    seconds: float,
    progress: Callable[[Submitted], str] = lambda _: "",
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> Submitted:
    """`create(i)` (True: accepted) for i = 0, 1, ... at `rate` a second for `seconds`, from
    CONNECTIONS threads. Every scheduled one is sent: when the API server answers slower than
    the rate they queue and start late (`Submitted.behind`), so the run takes longer than
    `seconds` and the accepted rate says what the API server took. `rate` None: as fast as the
    connections go, for `seconds` (the API ceiling)."""
    out = Submitted()
    lock = threading.Lock()
    t0 = clock()

    def send(i: int, due: float) -> None:
        started = clock()
        ok = create(i)
        with lock:
            out.behind.append(max(0.0, started - due))
            out.accepted += ok
            out.refused += not ok

    with ThreadPoolExecutor(CONNECTIONS) as pool:
        if rate is None:
            n = 0
            while clock() - t0 < seconds:
                list(pool.map(lambda i: send(i, clock()), range(n, n + CONNECTIONS)))
                n += CONNECTIONS
        else:
            for i in range(int(rate * seconds)):
                due = t0 + i / rate
                sleep(max(0.0, due - clock()))
                if i % max(1, int(rate * 30)) == 0:
                    print(f"load: {clock() - t0:.0f} s: {progress(out)}", flush=True)
                pool.submit(send, i, due)
    out.seconds = clock() - t0
    return out


def vcjob_creator(custom: client.CustomObjectsApi, ns: str) -> Callable[[int], bool]:
    template = chaos.template(complete="5s")

    def create(i: int) -> bool:
        try:
            resp = custom.create_namespaced_custom_object(
                VCJob.group,
                VCJob.version,
                ns,
                VCJob.plural,
                vcjob(i, template),
                _preload_content=False,  # the answer not parsed: the bench's CPU goes to sending
            )
            _ = resp.data  # read whole, so the connection goes back to the pool clean
        except (client.ApiException, urllib3.exceptions.HTTPError):
            return False
        return True

    return create


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

    def progress(sent: Submitted | None = None) -> str:
        completed = sum(p == "Completed" for p in list(phases.values()))
        head = ""
        if sent is not None:
            late = sent.behind[-1] if sent.behind else 0.0
            head = f"{sent.accepted} accepted, the last sent {late:.1f} s behind schedule; "
        return f"{head}{len(created)} pods seen, {len(bound)} bound, {completed} jobs completed"

    try:
        fleet.start().wait_ready(900)
        print(f"load: operators started in {logs}", flush=True)
        for target, call in (
            (pod_seen, core.list_namespaced_pod),
            (job_seen, custom.list_namespaced_custom_object),
        ):
            extra = (VCJob.group, VCJob.version, ns, VCJob.plural) if target is job_seen else (ns,)
            threading.Thread(
                target=follow, args=(stop, raw_watch(stop, call, *extra), target), daemon=True
            ).start()
        writes0, t0 = api_writes(api), time.monotonic()
        sent = submit_at(vcjob_creator(custom, ns), args.rate, args.seconds, progress)
        submitted = sent.accepted
        # Completions while submissions went on vs after: whether the operators keep up with
        # the rate, or only drain a backlog once it stops.
        submitting_seconds = time.monotonic() - t0
        completed_submitting = sum(p == "Completed" for p in list(phases.values()))
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
        writes = writes_since(writes0, api_writes(api))
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
    per_job = {k: round(v / max(1, submitted), 2) for k, v in sorted(writes.items())}
    return {
        "rate": args.rate,
        "seconds": args.seconds,
        "scheduled": int(args.rate * args.seconds),
        "submitted": submitted,
        "submissions": sent.report(),
        "completed": completed,
        "completed_per_second": round(completed / seconds, 1),
        "completed_while_submitting_per_second": round(
            completed_submitting / submitting_seconds, 1
        ),
        "completed_after_submitting_per_second": round(
            (completed - completed_submitting) / max(0.1, seconds - submitting_seconds), 1
        ),
        "drain_seconds": round(seconds - submitting_seconds, 1),
        "run_seconds": round(seconds, 1),
        "not_completed": submitted - completed,
        "not_completed_phases": unfinished,
        "api_writes_per_second": round(sum(writes.values()) / seconds, 1),
        "api_writes_per_job_by_resource": {k: v for k, v in per_job.items() if v >= 0.01},
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
        sent = submit_at(vcjob_creator(custom, ns), None, seconds)
        writes = sum(writes_since(writes0, api_writes(api)).values())
    finally:
        core.delete_namespace(ns)
    return {
        "seconds": round(sent.seconds, 1),
        "accepted": sent.accepted,
        "refused": sent.refused,
        "creates_per_second": round(sent.accepted / sent.seconds, 1),
        "api_writes_per_second": round(writes / sent.seconds, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = bench_parser("python -m bench.soak", __doc__)
    parser.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="fault rounds; the last one runs on a throttled API server (see --no-slow-round), "
        "the others on a plain one: the default is 2 plain rounds, then 1 throttled",
    )
    parser.add_argument("--jobs", type=int, default=100)
    parser.add_argument("--faults", type=int, default=30, help="process faults a round")
    parser.add_argument("--seed", type=int, default=2500)
    parser.add_argument("--no-slow-round", dest="slow_round", action="store_false")
    parser.add_argument("--rate", type=float, default=100.0, help="job submissions a second")
    parser.add_argument(
        "--seconds",
        type=float,
        default=300.0,
        help="submissions scheduled: rate x seconds, each sent (late if the API server is slow)",
    )
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
            print(json.dumps({"load": result["load"]}), flush=True)
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
