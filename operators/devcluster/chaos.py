"""A mixed job workload run under seeded faults, then checked (operators/devcluster/invariants.py).

One `run()` serves the CI test (e2e/test_reliability.py: ~24 jobs, a few faults) and `make soak`
(bench/soak.py: 100+ jobs, many rounds). Every operator runs as its own subprocess, the scheduler
twice (leader + standby on one Lease), so faults are real:

- `kill:<operator>`: SIGKILL, restarted after a short random pause (as a Deployment would);
- `kill:leader`: SIGKILL the scheduler holding the Lease; `pause:leader`: SIGSTOP it past the
  lease duration so the standby takes over, then SIGCONT (it must notice, write nothing, exit);
- `restart:apiserver`, `restart:etcd`: stop and start the control-plane process;
- `expire:watches`: compact etcd to its current revision, then restart the API server, so every
  watch resumed from an older resourceVersion is answered 410 Gone;
- `kill:receiver`: the CloudEvents receiver (docs/event_receiver.py) goes down for a while.

The times and targets come from `random.Random(seed)`: a failing run is replayed by its seed.
"""

from __future__ import annotations

import contextlib
import json
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from operators.api import labels as L
from operators.api.batch import HybridJob, VCJob
from operators.api.events import EventSink
from operators.api.scheduling import PodGroup, Queue
from operators.devcluster import invariants as inv
from operators.devcluster.cluster import DevCluster
from operators.devcluster.operator_process import OperatorProcess
from operators.devcluster.processes import dies_with_parent, free_port

REPO = Path(__file__).resolve().parents[2]
OPERATORS = ("jobs", "podgroup", "queue", "pool", "events")
SCHEDULERS = ("sched-a", "sched-b")
LEASE = {"duration": 10, "renew": 7, "retry": 2}
STOP_GRACE_SECONDS = 10.0
"""How long stopped operators get to exit on SIGTERM before SIGKILL, all of them together."""
FAULTS = (
    "kill:jobs",
    "kill:podgroup",
    "kill:queue",
    "kill:pool",
    "kill:events",
    "kill:leader",
    "kill:standby",
    "kill:receiver",
)
CONTROL_PLANE_FAULTS = ("restart:apiserver", "expire:watches", "restart:etcd")
TERMINAL = {"Completed", "Failed", "Aborted", "Terminated"}


@dataclass(frozen=True)
class Plan:
    jobs: int = 24
    seed: int = 25
    process_faults: int = 8  # drawn at random from FAULTS
    kills: tuple[str, ...] = ()  # injected in any case (each once), at random moments
    leader_pauses: int = 1
    control_plane_faults: tuple[str, ...] = ("expire:watches",)
    submit_seconds: float = 20.0  # submissions are spread over this window, faults too
    finish_timeout: float = 240.0


@dataclass
class Report:
    plan: Plan
    jobs: int = 0
    pods_bound: int = 0
    faults: list[str] = field(default_factory=list)
    events_delivered: int = 0
    lease_terms: int = 0
    watch_relists: int = 0
    seconds: float = 0.0
    violations: dict[str, list[str]] = field(default_factory=dict)
    refused: dict[str, str] = field(default_factory=dict)  # hostile input the API refused

    def summary(self) -> dict[str, Any]:
        kinds: dict[str, int] = {}
        for fault in self.faults:
            kinds[fault] = kinds.get(fault, 0) + 1
        return {
            "seed": self.plan.seed,
            "jobs": self.jobs,
            "pods_bound": self.pods_bound,
            "faults": len(self.faults),
            "fault_kinds": kinds,
            "events_delivered": self.events_delivered,
            "lease_terms": self.lease_terms,
            "violations": sum(len(v) for v in self.violations.values()),
            "hostile_refused_at_admission": sorted(self.refused),
            "seconds": round(self.seconds, 1),
        }


def template(
    *,
    complete: str = "",
    fail: str = "",
    code: str = "",
    cpu: str = "100m",
    memory: str = "64Mi",
    gpus: int = 0,
) -> Any:
    """A pod template kwok runs (docs/devcluster.md: its lifecycle annotations): it completes
    after `complete`, or fails after `fail` with exit code `code`; no duration: it runs on."""
    annotations = {}
    if complete:
        annotations["sluice.dev/complete-after"] = complete
    if fail:
        annotations["sluice.dev/fail-after"] = fail
    if code:
        annotations["sluice.dev/exit-code"] = code
    resources: dict[str, Any] = {"requests": {"cpu": cpu, "memory": memory}}
    if gpus:
        resources["limits"] = {"nvidia.com/gpu": str(gpus)}
    return {
        "metadata": {"annotations": annotations},
        "spec": {
            "schedulerName": "sluice",
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "c", "image": "fake", "resources": resources}],
        },
    }


def workload(rng: random.Random, count: int, queue: str) -> list[tuple[str, str, Any, str]]:
    """(kind, name, spec, expected final phase): finishing, failing, GPU-gang and elastic jobs,
    plus two that keep running (so quota accounting is checked on something non-zero)."""
    out: list[tuple[str, str, Any, str]] = []
    for i in range(count):
        name, shape = f"j{i:03d}", ("done", "fail", "gang", "elastic")[i % 4]
        spec: dict[str, Any]
        if i < 2:
            spec = {"queue": queue, "tasks": [{"name": "w", "replicas": 1, "template": template()}]}
            out.append((VCJob.__name__, name, spec, "Running"))
        elif shape == "done":
            done = template(complete=f"{rng.randint(1, 8)}s")
            spec = {"queue": queue, "tasks": [{"name": "w", "replicas": 2, "template": done}]}
            out.append((VCJob.__name__, name, spec, "Completed"))
        elif shape == "fail":
            task = {
                "name": "w",
                "replicas": 2,
                "policies": [{"exitCode": 3, "action": "RestartTask"}],
                "template": template(fail=f"{rng.randint(1, 3)}s", code="3"),
            }
            out.append(
                (VCJob.__name__, name, {"queue": queue, "maxRetry": 1, "tasks": [task]}, "Failed")
            )
        elif shape == "gang":
            gang = template(complete=f"{rng.randint(2, 6)}s", gpus=rng.choice((1, 2, 4)))
            spec = {
                "queue": queue,
                "minAvailable": 3,
                "tasks": [{"name": "w", "replicas": 3, "template": gang}],
            }
            out.append((VCJob.__name__, name, spec, "Completed"))
        else:
            worker = template(complete=f"{rng.randint(2, 6)}s", gpus=1)
            spec = {
                "queue": queue,
                "replicaSpecs": {"w": {"minReplicas": 1, "maxReplicas": 3, "template": worker}},
            }
            out.append((HybridJob.__name__, name, spec, "Completed"))
    return out


def _body(model: Any, name: str, spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{model.group}/{model.version}",
        "kind": model.__name__,
        "metadata": {"name": name},
        "spec": spec,
    }


def hostile(queue: str) -> tuple[list[dict[str, Any]], list[tuple[str, dict[str, Any]]]]:
    """Objects that get past the API server's checks but are wrong (each must end with a condition
    or a Warning Event on it, and block nobody), and objects it must refuse with a clear error."""
    bare = template()["spec"]
    annotated = {
        L.GPU_IDS: "²,x,-1",
        L.GPU_MILLI: "lots",
        L.PREEMPTION_DELAY: "-5",
        L.POD_GROUP: "no-such-group",
    }
    huge = template()
    huge["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "100000"
    long_name = "l" + "o" * 61 + "g"  # 63: the longest DNS label
    reach = [
        _body(PodGroup, "pg-missing-queue", {"queue": "no-such-queue", "minMember": 1}),
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "pod-garbage-annotations", "annotations": annotated},
            "spec": bare,
        },
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "pod-absurd-request"},
            "spec": huge["spec"],
        },
        _body(
            VCJob,
            "job-missing-priorityclass",
            {
                "queue": queue,
                "priorityClassName": "no-such-class",
                "tasks": [{"name": "w", "replicas": 1, "template": template()}],
            },
        ),
        _body(
            VCJob,
            "job-1000-replicas",
            {"queue": queue, "tasks": [{"name": "w", "replicas": 1000, "template": huge}]},
        ),
        _body(
            VCJob,
            long_name,
            {
                "queue": queue,
                "plugins": {"svc": []},
                "tasks": [{"name": long_name, "replicas": 1, "template": template(complete="3s")}],
            },
        ),
    ]
    five_mb = template()
    five_mb["metadata"]["annotations"]["padding"] = "x" * (5 * 1024 * 1024)
    many = [{"name": f"t{i}", "replicas": 1, "template": template()} for i in range(1000)]
    refused = [
        (
            "5 MB pod template",
            _body(VCJob, "job-5mb", {"tasks": [{"name": "w", "template": five_mb}]}),
        ),
        ("1,000 tasks", _body(VCJob, "job-1000-tasks", {"tasks": many})),
        ("a unicode name", _body(VCJob, "jöb-ünicode", {"tasks": many[:1]})),
    ]
    return reach, refused


class Fleet:
    """The operators as subprocesses, restarted when they die (a supervisor, like a Deployment),
    except while a fault holds one down."""

    def __init__(
        self,
        kubeconfig: Path,
        logs: Path,
        lease: str,
        log_level: str = "DEBUG",
        short_lease: bool = True,
    ) -> None:
        """`short_lease`: the fault runs' `LEASE`, so a killed leader is replaced within seconds;
        False keeps the scheduler's own defaults (the load: what an installation runs)."""
        self.procs: dict[str, OperatorProcess] = {}
        lease_flags: tuple[str, ...] = (f"--lease-name={lease}", "--lease-namespace=kube-system")
        if short_lease:
            lease_flags += (
                f"--lease-duration-seconds={LEASE['duration']}",
                f"--renew-deadline-seconds={LEASE['renew']}",
                f"--retry-period-seconds={LEASE['retry']}",
            )
        for ident in SCHEDULERS:
            self.procs[ident] = OperatorProcess(
                "scheduler",
                kubeconfig,
                logs,
                f"--identity={ident}",
                "--metrics-port=0",
                "--half-bound-grace-seconds=10",
                *lease_flags,
                log_name=ident,
                log_level=log_level,
            )
        for name in OPERATORS:
            extra = (
                ("--events-flush-seconds=0.2", "--events-metrics-port=0")
                if name == "events"
                else ()
            )
            self.procs[name] = OperatorProcess(
                name, kubeconfig, logs, f"--{name}-health-port=0", *extra, log_level=log_level
            )
        self.held: set[str] = set()
        self.restarts = 0
        self.deaths: list[str] = []  # exits no fault caused: crashes
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._supervise, daemon=True, name="supervisor")

    def start(self) -> Fleet:
        for proc in self.procs.values():
            proc.start()
        self._thread.start()
        return self

    def wait_ready(self, timeout: float) -> None:
        """Until every operator has started its watches and the schedulers their caches: faults
        are aimed at working operators, not at interpreters still importing."""
        marks = {name: f"operator {name} started" for name in OPERATORS}
        marks |= dict.fromkeys(SCHEDULERS, "caches synced")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            waiting = [n for n, mark in marks.items() if not self.procs[n].said(mark)]
            if not waiting:
                return
            time.sleep(0.5)
        raise TimeoutError(f"operators not started after {timeout:.0f} s: {waiting}")

    def _supervise(self) -> None:
        while not self._stop.wait(0.5):
            with self._lock:
                for name, proc in self.procs.items():
                    if name not in self.held and not proc.alive:
                        if proc.proc is not None and not self._by_design(proc):
                            self.deaths.append(f"{name} exited with {proc.proc.returncode}")
                        proc.start()
                        self.restarts += 1

    def kill(self, name: str, down_for: float) -> None:
        with self._lock:
            self.held.add(name)
            self.procs[name].kill()
        time.sleep(down_for)
        with self._lock:
            self.procs[name].start()  # restarted here: the supervisor counts only other exits
            self.restarts += 1
            self.held.discard(name)

    def pause(self, name: str, seconds: float) -> None:
        proc = self.procs[name]
        with self._lock:
            self.held.add(name)
        if proc.proc is not None:
            proc.proc.send_signal(signal.SIGSTOP)
            time.sleep(seconds)
            proc.proc.send_signal(signal.SIGCONT)
        with self._lock:
            self.held.discard(name)

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(5)
        # All at once: one by one, each operator's graceful stop adds its seconds to the run.
        for proc in self.procs.values():
            if proc.proc is not None and proc.alive:
                proc.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_SECONDS
        for proc in self.procs.values():
            if proc.proc is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.proc.wait(max(0.1, deadline - time.monotonic()))
        for proc in self.procs.values():
            proc.kill()

    @staticmethod
    def _by_design(proc: OperatorProcess) -> bool:
        """A scheduler that lost its lease exits on purpose, to start again clean."""
        last_run = proc.log(400).rsplit("\n$ ", 1)[-1]
        return "lost the scheduler lease" in last_run


class Receiver:
    """docs/event_receiver.py as a subprocess: what a platform would run behind an EventSink."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Receiver:
        with self.out.with_suffix(".log").open("ab") as log:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    str(REPO / "docs" / "event_receiver.py"),
                    f"--port={self.port}",
                    f"--out={self.out}",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                preexec_fn=dies_with_parent(),  # noqa: PLW1509 - see dies_with_parent
            )
        return self

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(10)

    def ids(self) -> set[str]:
        if not self.out.exists():
            return set()
        return {json.loads(line)["id"] for line in self.out.read_text().splitlines() if line}


class Run:
    def __init__(self, cluster: DevCluster, plan: Plan, logs: Path) -> None:
        self.cluster = cluster
        self.plan = plan
        self.logs = logs
        self.api = cluster.api()
        self.custom = client.CustomObjectsApi(self.api)
        self.rng = random.Random(plan.seed)
        suffix = uuid.uuid4().hex[:6]
        self.ns = f"chaos-{suffix}"
        self.queue = f"chaos-{suffix}"
        self.sink = f"chaos-{suffix}"
        self.lease = f"chaos-{suffix}"
        self.report = Report(plan)
        self.expected: dict[str, str] = {}
        self.hostile_names: list[str] = []
        self._t0 = time.monotonic()

    def note(self, message: str) -> None:
        """A line in `<logs>/chaos.log`: what happened when, to read beside the operator logs."""
        stamp = time.strftime("%H:%M:%S")
        with (self.logs / "chaos.log").open("a") as out:
            out.write(f"{stamp} +{time.monotonic() - self._t0:6.1f}s {message}\n")

    # -- setup ---------------------------------------------------------------------------
    def _objects(self, receiver: Receiver) -> None:
        client.CoreV1Api(self.api).create_namespace(
            client.V1Namespace(metadata=client.V1ObjectMeta(name=self.ns))
        )
        queue = {
            "apiVersion": f"{Queue.group}/{Queue.version}",
            "kind": "Queue",
            "metadata": {"name": self.queue},
            "spec": {"capability": {"cpu": "500", "nvidia.com/gpu": "64"}},
        }
        self.custom.create_cluster_custom_object(Queue.group, Queue.version, Queue.plural, queue)
        sink = {
            "apiVersion": f"{EventSink.group}/{EventSink.version}",
            "kind": "EventSink",
            "metadata": {"name": self.sink},
            "spec": {
                "url": f"http://127.0.0.1:{receiver.port}/events",
                "filter": {"namespaces": [self.ns]},
                "retry": {"backoffSeconds": 1, "maxBackoffSeconds": 2, "maxAttempts": 1000},
            },
        }
        self.custom.create_cluster_custom_object(
            EventSink.group, EventSink.version, EventSink.plural, sink
        )

    def _hostile(self) -> None:
        reach, refused = hostile(self.queue)
        core = client.CoreV1Api(self.api)
        for body in reach:
            if body["kind"] == "Pod":
                core.create_namespaced_pod(self.ns, body)
            else:
                model = {m.__name__: m for m in (VCJob, HybridJob, PodGroup)}[body["kind"]]
                self.custom.create_namespaced_custom_object(
                    model.group, model.version, self.ns, model.plural, body
                )
            name = body["metadata"]["name"]
            if body["spec"].get("plugins"):
                self.expected[name] = "Completed"  # longest names are not wrong: it must run
            else:
                self.hostile_names.append(name)
        for what, body in refused:
            try:
                self.custom.create_namespaced_custom_object(
                    VCJob.group, VCJob.version, self.ns, VCJob.plural, body
                )
            except ApiException as err:
                self.report.refused[what] = f"{err.status} {str(err.body)[:160]}"
            else:
                self.report.refused[what] = "ACCEPTED"

    def _submit(self, jobs: list[tuple[str, str, Any, str]]) -> None:
        gap = self.plan.submit_seconds / max(1, len(jobs))
        for kind, name, spec, want in jobs:
            model = VCJob if kind == VCJob.__name__ else HybridJob
            body = {
                "apiVersion": f"{model.group}/{model.version}",
                "kind": kind,
                "metadata": {"name": name},
                "spec": spec,
            }
            for _ in range(120):  # the API server may be down for a fault: keep trying
                try:
                    self.custom.create_namespaced_custom_object(
                        model.group, model.version, self.ns, model.plural, body
                    )
                    break
                except ApiException as err:
                    if err.status == 409:
                        break
                    time.sleep(1)
                except (OSError, urllib3.exceptions.HTTPError):
                    time.sleep(1)
            self.expected[name] = want
            time.sleep(gap)

    # -- faults --------------------------------------------------------------------------
    def _schedule(self) -> list[tuple[float, str]]:
        p, rng = self.plan, self.rng
        faults = [rng.choice(FAULTS) for _ in range(p.process_faults)] + list(p.kills)
        faults += ["pause:leader"] * p.leader_pauses + list(p.control_plane_faults)
        window = max(p.submit_seconds, 10.0)
        return sorted((rng.uniform(1.0, window), f) for f in faults)

    def _inject(self, fleet: Fleet, receiver: Receiver, leases: inv.LeaseWatch, fault: str) -> None:
        down = self.rng.uniform(0.0, 1.5)
        if fault in ("kill:leader", "kill:standby", "pause:leader"):
            leader = leases.holder()
            if leader not in SCHEDULERS:
                return  # no leader right now: nothing to aim at
            target = (
                leader if fault != "kill:standby" else next(s for s in SCHEDULERS if s != leader)
            )
            if fault == "pause:leader":
                fleet.pause(target, LEASE["duration"] + 3)
            else:
                fleet.kill(target, down)
        elif fault.startswith("kill:receiver"):
            receiver.kill()
            time.sleep(self.rng.uniform(1.0, 4.0))
            receiver.start()
        elif fault.startswith("kill:"):
            fleet.kill(fault.split(":", 1)[1], down)
        elif fault == "restart:apiserver":
            self.cluster.restart_process("kube-apiserver")
        elif fault == "restart:etcd":
            self.cluster.restart_process("etcd")
        elif fault == "expire:watches":
            self.cluster.compact_etcd()
            self.cluster.restart_process("kube-apiserver")
        else:
            raise ValueError(f"unknown fault {fault}")
        self.report.faults.append(fault)
        self.note(f"fault {fault} done")

    # -- the run -------------------------------------------------------------------------
    def phases(self) -> dict[str, str]:
        return {
            j["metadata"]["name"]: (j.get("status") or {}).get("phase", "")
            for j in inv._jobs(self.custom, self.ns)
        }

    def execute(self) -> Report:
        started = time.monotonic()
        receiver = Receiver(self.logs / "events.jsonl").start()
        fleet = Fleet(Path(self.cluster.kubeconfig), self.logs, self.lease)
        pods = inv.PodWatch(self.api, self.ns)
        leases = inv.LeaseWatch(self.api, "kube-system", self.lease)
        try:
            self._objects(receiver)
            self._hostile()
            fleet.start().wait_ready(600)
            self.note("operators ready")
            pods.start()
            leases.start()
            jobs = workload(self.rng, self.plan.jobs, self.queue)
            submitter = threading.Thread(target=self._submit, args=(jobs,), daemon=True)
            submitter.start()
            t0 = time.monotonic()
            for at, fault in self._schedule():
                time.sleep(max(0.0, at - (time.monotonic() - t0)))
                self._inject(fleet, receiver, leases, fault)
            submitter.join()
            self._finish(fleet, receiver, pods, leases)
        finally:
            pods.stop()
            leases.stop()
            fleet.stop()
            receiver.kill()
        self.report.seconds = time.monotonic() - started
        return self.report

    def _finish(
        self, fleet: Fleet, receiver: Receiver, pods: inv.PodWatch, leases: inv.LeaseWatch
    ) -> None:
        r, api, ns = self.report, self.api, self.ns
        finishing = {n for n, want in self.expected.items() if want in TERMINAL}
        deadline = time.monotonic() + self.plan.finish_timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(ApiException, OSError, urllib3.exceptions.HTTPError):
                got = self.phases()
                if all(got.get(n) in TERMINAL for n in finishing):
                    break
            time.sleep(1)
        found: dict[str, Callable[[], list[str]]] = {
            "job phases": lambda: inv.job_phases(api, ns, self.expected),
            "replica slots": lambda: inv.replica_slots(api, ns),
            "partial gangs": lambda: inv.partial_gangs(api, ns),
            "quota accounting": lambda: inv.quota_accounting(api, [self.queue]),
            "hook events": lambda: inv.hooks_delivered(api, ns, receiver.ids()),
            "hostile input reported": lambda: inv.reported(api, ns, self.hostile_names),
        }
        self.note(f"jobs settled: {sorted(set(self.phases().values()))}")
        for name, check in found.items():
            r.violations[name] = inv.settle(check, 60)
            self.note(f"checked {name}: {len(r.violations[name])} violations")
        r.violations["replica slots (live)"] = list(pods.doubles)
        r.violations["two schedulers binding"] = pods.overlapping_binds(leases.terms)
        r.violations["hostile input accepted"] = [
            f"{what} was accepted" for what, answer in r.refused.items() if answer == "ACCEPTED"
        ]
        r.violations["operator crashes"] = list(fleet.deaths)
        r.jobs = len(self.expected)
        r.pods_bound = len(pods.bindings)
        r.events_delivered = len(receiver.ids())
        r.lease_terms = len(leases.terms)
        r.watch_relists = pods.relists
        # Delete everything: the garbage collector must leave nothing behind.
        for model in (VCJob, HybridJob):
            self.custom.delete_collection_namespaced_custom_object(
                model.group, model.version, ns, model.plural
            )
        self.note("jobs deleted")
        r.violations["orphans"] = inv.settle(
            lambda: inv.orphans(api, ns) + [f"job {n} still exists" for n in self.phases()], 90
        )
        r.violations = {k: v for k, v in r.violations.items() if v}

    def cleanup(self) -> None:
        with contextlib.suppress(ApiException):
            client.CoreV1Api(self.api).delete_namespace(self.ns)
        for model, name in ((Queue, self.queue), (EventSink, self.sink)):
            with contextlib.suppress(ApiException):
                self.custom.delete_cluster_custom_object(
                    model.group, model.version, model.plural, name
                )


def run(cluster: DevCluster, plan: Plan, logs: Path) -> Report:
    """Run `plan` on `cluster`; logs (operators, receiver) go to `logs`."""
    logs.mkdir(parents=True, exist_ok=True)
    chaos = Run(cluster, plan, logs)
    try:
        report = chaos.execute()
    finally:
        chaos.cleanup()
    summary = report.summary() | {"violations_found": report.violations}
    (logs / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return report
