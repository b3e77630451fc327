"""The events operator against a real control plane and a real HTTP receiver on localhost.

The operator runs as a subprocess (`python -m operators events`), so it can be SIGKILLed and
restarted. Job transitions are written into the job's status by the test, the way the jobs
operator writes them (numbered `status.transitions` + `status.transitionSeq`): this file tests
delivery, not the job core.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from operators.api.scheduling import Queue
from operators.devcluster.cluster import DevCluster
from operators.devcluster.operator_process import OperatorProcess

from .stage import staged, vcjob

TIMEOUT = 90.0  # a hang guard, not a speed target
# The acceptance sizes (50 jobs, a 30 s outage) run in `make soak`; CI runs the same story smaller.
SOAK_JOBS = int(os.environ.get("SLUICE_SOAK_EVENTS_JOBS", "6"))
SOAK_OUTAGE_SECONDS = float(os.environ.get("SLUICE_SOAK_OUTAGE_SECONDS", "3"))


def wait_for(check: Callable[[], bool], what: str, timeout: float = TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


class Receiver:
    """A CloudEvents receiver on 127.0.0.1 that can go down (stop listening) and come back."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.server: ThreadingHTTPServer | None = None
        self.port = 0

    def up(self) -> None:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with receiver.lock:
                    receiver.events.append(json.loads(body))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *_: Any) -> None:
                return None

        ThreadingHTTPServer.allow_reuse_address = True
        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def down(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/events"

    def ids(self) -> list[str]:
        with self.lock:
            return [e["id"] for e in self.events]

    def first_seen(self) -> list[str]:
        """Ids in order of first arrival (what a receiver keeps after de-duplication)."""
        return list(dict.fromkeys(self.ids()))


def started(proc: OperatorProcess, name: str = "events") -> OperatorProcess:
    # Its watches start right after this line; a busy machine may take a while to import.
    wait_for(lambda: f"operator {name} started" in proc.log(), f"the {name} operator", 180)
    return proc


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    rec = Receiver()
    rec.up()
    try:
        yield rec
    finally:
        rec.down()


@pytest.fixture
def operator(cluster: DevCluster, tmp_path: Path) -> Iterator[OperatorProcess]:
    proc = OperatorProcess(
        "events",
        Path(cluster.kubeconfig),
        tmp_path,
        "--events-flush-seconds=0.2",
        "--events-health-port=0",  # tests run side by side: no fixed port
    )
    started(proc.start())
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture
def sinks(k8s: client.ApiClient) -> Iterator[Callable[[str, dict[str, Any]], str]]:
    api = client.CustomObjectsApi(k8s)
    made: list[str] = []

    def make(url: str, extra: dict[str, Any]) -> str:
        name = f"e2e-{uuid.uuid4().hex[:8]}"
        retry = {"backoffSeconds": 1, "maxBackoffSeconds": 1, "maxAttempts": 1000}
        spec = {"url": url, "retry": retry, **extra}
        body = {"apiVersion": "events.sluice.dev/v1alpha1", "kind": "EventSink"}
        api.create_cluster_custom_object(
            "events.sluice.dev",
            "v1alpha1",
            "eventsinks",
            {**body, "metadata": {"name": name}, "spec": spec},
        )
        made.append(name)
        return name

    yield make
    for name in made:
        with contextlib.suppress(client.ApiException):
            api.delete_cluster_custom_object("events.sluice.dev", "v1alpha1", "eventsinks", name)


def make_job(k8s: client.ApiClient, ns: str, name: str, hooks: list[dict[str, Any]]) -> str:
    spec = {
        "hooks": hooks,
        "tasks": [
            {
                "name": "worker",
                "replicas": 1,
                "template": {"spec": {"containers": [{"name": "c", "image": "busybox"}]}},
            }
        ],
    }
    body = {
        "apiVersion": "batch.sluice.dev/v1alpha1",
        "kind": "VCJob",
        "metadata": {"name": name},
        "spec": spec,
    }
    made = client.CustomObjectsApi(k8s).create_namespaced_custom_object(
        "batch.sluice.dev", "v1alpha1", ns, "vcjobs", body
    )
    return str(made["metadata"]["uid"])


PHASES = ["Pending", "Inqueue", "Running", "Completing", "Completed"]


def record(k8s: client.ApiClient, ns: str, name: str, upto: int) -> None:
    """Write transitions 1..upto into the job's status, as the jobs operator would."""
    entries = []
    for seq in range(1, upto + 1):
        to = PHASES[(seq - 1) % len(PHASES)]
        entries.append(
            {
                "seq": seq,
                "level": "Job",
                "name": name,
                "to": to,
                "reason": "E2E",
                "time": "2026-01-01T00:00:00Z",
            }
        )
    client.CustomObjectsApi(k8s).patch_namespaced_custom_object_status(
        "batch.sluice.dev",
        "v1alpha1",
        ns,
        "vcjobs",
        name,
        {"status": {"transitions": entries[-64:], "transitionSeq": upto}},
    )


def job_status(k8s: client.ApiClient, ns: str, name: str) -> dict[str, Any]:
    job = client.CustomObjectsApi(k8s).get_namespaced_custom_object(
        "batch.sluice.dev", "v1alpha1", ns, "vcjobs", name
    )
    return dict(job.get("status") or {})


def test_in_order_through_receiver_outage_and_operator_kill(
    k8s: client.ApiClient,
    kubectl: Callable[..., Any],
    namespace: str,
    receiver: Receiver,
    operator: OperatorProcess,
    sinks: Callable[[str, dict[str, Any]], str],
) -> None:
    sink = sinks(receiver.url, {})
    uid = make_job(k8s, namespace, "billed", [{"sink": sink}])
    expected = [f"{uid}-{n}" for n in range(1, 10)]

    record(k8s, namespace, "billed", 3)
    wait_for(lambda: receiver.first_seen() == expected[:3], f"3 events\n{operator.log()}")
    first = receiver.events[0]
    assert first["specversion"] == "1.0"
    assert first["type"] == "dev.sluice.job.pending"
    assert (
        first["source"] == f"/apis/batch.sluice.dev/v1alpha1/namespaces/{namespace}/vcjobs/billed"
    )
    assert first["data"]["seq"] == 1

    receiver.down()
    record(k8s, namespace, "billed", 6)

    def sink_status() -> dict[str, Any]:
        out = kubectl("get", "eventsink", sink, "-o", "json").stdout
        return dict(json.loads(out).get("status") or {})

    wait_for(lambda: f"{uid}-4" in str(sink_status().get("lastError")), "a failed attempt")
    assert job_status(k8s, namespace, "billed")["delivery"] == [
        {"sink": sink, "lastDeliveredSequence": 3}
    ]
    receiver.up()
    wait_for(lambda: receiver.first_seen() == expected[:6], f"6 events\n{operator.log()}")

    operator.kill()
    record(k8s, namespace, "billed", 9)
    started(operator.start())
    wait_for(lambda: receiver.first_seen() == expected, f"9 events\n{operator.log()}")
    wait_for(
        lambda: job_status(k8s, namespace, "billed").get("transitionsDelivered") == 9,
        "transitionsDelivered to reach 9",
    )
    wait_for(lambda: sink_status().get("delivered", 0) >= 9, "the sink's delivered count")
    assert sink_status()["failed"] == 0


def test_namespace_filter_sends_only_that_namespace(
    k8s: client.ApiClient,
    namespace: str,
    receiver: Receiver,
    operator: OperatorProcess,
    sinks: Callable[[str, dict[str, Any]], str],
) -> None:
    core = client.CoreV1Api(k8s)
    other = f"{namespace}-other"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=other)))
    try:
        sinks(receiver.url, {"filter": {"namespaces": [namespace]}})
        mine = make_job(k8s, namespace, "mine", [])
        make_job(k8s, other, "theirs", [])
        record(k8s, other, "theirs", 2)
        record(k8s, namespace, "mine", 2)
        wait_for(
            lambda: receiver.first_seen() == [f"{mine}-1", f"{mine}-2"],
            f"the subscribed namespace's events\n{operator.log()}",
        )
        wait_for(
            lambda: job_status(k8s, namespace, "mine").get("transitionsDelivered") == 2,
            "the cursor of the subscribed job",
        )
        assert "delivery" not in job_status(k8s, other, "theirs")
        assert all(e["data"]["namespace"] == namespace for e in receiver.events)
    finally:
        core.delete_namespace(other, propagation_policy="Background")


def test_a_real_job_life_and_a_missing_sink(
    cluster: DevCluster,
    k8s: client.ApiClient,
    namespace: str,
    receiver: Receiver,
    operator: OperatorProcess,
    sinks: Callable[[str, dict[str, Any]], str],
    tmp_path: Path,
) -> None:
    """With the jobs operator and the scheduler: the job's Job-level transitions arrive in the
    order of its log, and the hook naming a missing sink is a condition, not a stuck job."""
    kubeconfig = Path(cluster.kubeconfig)
    procs = [
        OperatorProcess(
            "scheduler", kubeconfig, tmp_path, "--metrics-port=0", "--no-leader-election"
        ).start(),
        OperatorProcess("jobs", kubeconfig, tmp_path, "--jobs-health-port=0").start(),
    ]
    try:
        started(procs[1], "jobs")  # the wait below is for the condition, not for an import
        sink = sinks(receiver.url, {})
        template = {
            "metadata": {"annotations": {"sluice.dev/complete-after": "1s"}},
            "spec": {
                "schedulerName": "sluice",
                "restartPolicy": "Never",
                "containers": [
                    {"name": "c", "image": "fake", "resources": {"requests": {"cpu": "100m"}}}
                ],
            },
        }
        spec = {
            "hooks": [{"sink": sink, "levels": ["Job"]}, {"sink": "no-such-sink"}],
            "tasks": [{"name": "w", "replicas": 1, "template": template}],
        }
        body = {
            "apiVersion": "batch.sluice.dev/v1alpha1",
            "kind": "VCJob",
            "metadata": {"name": "life"},
            "spec": spec,
        }
        uid = client.CustomObjectsApi(k8s).create_namespaced_custom_object(
            "batch.sluice.dev", "v1alpha1", namespace, "vcjobs", body
        )["metadata"]["uid"]

        def condition() -> dict[str, Any] | None:
            conds = job_status(k8s, namespace, "life").get("conditions") or ()
            return next((c for c in conds if c["type"] == "Valid" and c["status"] == "False"), None)

        wait_for(lambda: condition() is not None, "the missing-sink condition")
        assert "EventSink no-such-sink does not exist" in str(condition())
        wait_for(
            lambda: job_status(k8s, namespace, "life").get("phase") == "Completed",
            f"the job to complete\n{procs[1].log(40)}",
        )
        status = job_status(k8s, namespace, "life")
        job_level = [t["seq"] for t in status["transitions"] if t["level"] == "Job"]
        expected = [f"{uid}-{seq}" for seq in job_level]
        wait_for(lambda: receiver.first_seen() == expected, f"the job's events\n{operator.log(40)}")
        assert receiver.events[-1]["type"] == "dev.sluice.job.completed"
        assert all(e["data"]["level"] == "Job" for e in receiver.events)
    finally:
        for proc in procs:
            proc.stop()


def test_many_jobs_through_an_outage_and_a_kill(
    k8s: client.ApiClient,
    namespace: str,
    receiver: Receiver,
    operator: OperatorProcess,
    sinks: Callable[[str, dict[str, Any]], str],
) -> None:
    """SOAK_JOBS jobs: the receiver is down for SOAK_OUTAGE_SECONDS while transitions pile up,
    then the operator is SIGKILLed while it delivers more. Every id arrives, each job's in order."""
    sinks(receiver.url, {"filter": {"namespaces": [namespace]}})
    names = [f"job-{i}" for i in range(SOAK_JOBS)]
    uids = {name: make_job(k8s, namespace, name, []) for name in names}
    expected = {name: [f"{uids[name]}-{seq}" for seq in range(1, 10)] for name in names}

    def arrived(upto: int) -> bool:
        seen = set(receiver.ids())
        return all(set(ids[:upto]) <= seen for ids in expected.values())

    for name in names:
        record(k8s, namespace, name, 3)
    wait_for(lambda: arrived(3), f"3 events per job\n{operator.log()}")

    receiver.down()
    for name in names:
        record(k8s, namespace, name, 6)
    time.sleep(SOAK_OUTAGE_SECONDS)
    receiver.up()
    wait_for(lambda: arrived(4), f"deliveries resumed\n{operator.log()}")
    for name in names:
        record(k8s, namespace, name, 9)
    operator.kill()  # while the backlog of the outage is still being delivered
    started(operator.start())
    wait_for(lambda: arrived(9), f"every event\n{operator.log()}", timeout=TIMEOUT + SOAK_JOBS)

    first = receiver.first_seen()
    for name, ids in expected.items():
        assert [i for i in first if i in set(ids)] == ids, name


def test_podgroup_and_queue_notices_of_a_delayed_preemption(
    cluster: DevCluster,
    k8s: client.ApiClient,
    receiver: Receiver,
    sinks: Callable[[str, dict[str, Any]], str],
    tmp_path: Path,
) -> None:
    """With every operator (`all`): a sink subscribed to one team's PodGroups sees a job's group
    run, get WillEvict with the deadline of a delayed preemption, be evicted at it and go back
    to Pending, and its preemptor turn Privileged with the same deadline; a sink subscribed to
    Queues sees the queue close. Each object's events arrive in `seq` order, without gaps."""
    grace = 4
    with staged(cluster, k8s, tmp_path) as stage, stage.team("notices") as team:
        queue = f"noticed-{stage.tag}"
        stage.create_queue(queue, preemptionDelaySeconds=grace)
        sinks(receiver.url, {"filter": {"kinds": ["PodGroup"], "namespaces": [team.namespace]}})
        sinks(receiver.url, {"filter": {"kinds": ["Queue"]}})
        stage.own_pool(f"notice-pool-{stage.tag}", 1)
        pool = f"notice-pool-{stage.tag}"
        job = vcjob(2, gpus=4, runs_for="600s")
        team.submit("victim", job, queue=queue, pool=pool, priority=stage.low)
        team.wait_running("victim", 2)
        job = vcjob(1, gpus=8, runs_for="600s")
        team.submit("urgent", job, queue=queue, pool=pool, priority=stage.high)
        team.wait_running("urgent", 1)
        victim, urgent = (team.podgroup(n)["metadata"]["uid"] for n in ("victim", "urgent"))

        def of(uid: str) -> list[dict[str, Any]]:
            with receiver.lock:
                events = list(receiver.events)
            return list({e["id"]: e for e in events if e["data"].get("uid") == uid}.values())

        def types(uid: str) -> list[str]:
            return [e["type"].rpartition(".")[2] for e in of(uid)]

        stage.wait("the victim's notices", lambda: "evicted" in types(victim)[:-1])
        got = of(victim)
        assert [e["data"]["seq"] for e in got] == list(range(1, len(got) + 1)), got
        at = types(victim).index("willevict")
        assert types(victim)[at : at + 3] == ["willevict", "evicted", "pending"], got
        will_evict, evicted, _ = got[at : at + 3]
        assert "running" in types(victim)[:at]
        assert evicted["data"]["reason"] == "DelayedPreemptionDue"
        assert evicted["data"]["peers"] == [f"{team.namespace}/urgent"]
        assert will_evict["data"]["peers"] == [f"{team.namespace}/urgent"]
        assert evicted["time"] >= will_evict["data"]["deadline"] >= will_evict["time"]
        stage.wait("the preemptor's notice", lambda: "privileged" in types(urgent))
        privileged = of(urgent)[types(urgent).index("privileged")]
        assert privileged["data"]["deadline"] == will_evict["data"]["deadline"]
        assert all(
            e["data"].get("namespace") == team.namespace
            for e in receiver.events
            if e["data"]["kind"] == "PodGroup"
        )

        client.CustomObjectsApi(k8s).patch_cluster_custom_object(
            "scheduling.sluice.dev", "v1alpha1", Queue.plural, queue, {"spec": {"state": "Closed"}}
        )
        queue_uid = stage.custom.get_cluster_custom_object(
            "scheduling.sluice.dev", "v1alpha1", Queue.plural, queue
        )["metadata"]["uid"]
        stage.wait("the queue's notice", lambda: "closing" in types(queue_uid))
        assert types(queue_uid)[0] == "open"
