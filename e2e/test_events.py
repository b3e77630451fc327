"""The events operator against a real control plane and a real HTTP receiver on localhost.

The operator runs as a subprocess (`python -m operators events`), so it can be SIGKILLed and
restarted. Job transitions are written into the job's status by the test, the way the jobs
operator writes them (numbered `status.transitions` + `status.transitionSeq`): this file tests
delivery, not the job core.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from operators.devcluster import waiting
from operators.devcluster.cluster import DevCluster
from operators.devcluster.operator_process import OperatorProcess

from .events_kit import MakeSink, Receiver

TIMEOUT = 90.0  # a hang guard, not a speed target
# The acceptance sizes (50 jobs, a 30 s outage) run in `make soak`; CI runs the same story smaller.
SOAK_JOBS = int(os.environ.get("SLUICE_SOAK_EVENTS_JOBS", "6"))
SOAK_OUTAGE_SECONDS = float(os.environ.get("SLUICE_SOAK_OUTAGE_SECONDS", "3"))


def wait_for(check: Callable[[], bool], what: str, timeout: float = TIMEOUT) -> None:
    try:
        waiting.wait_for(check, timeout=timeout, interval=0.2, what=what)
    except TimeoutError as exc:
        raise AssertionError(str(exc)) from exc


def started(proc: OperatorProcess, name: str = "events") -> OperatorProcess:
    # Its watches start right after this line; a busy machine may take a while to import.
    wait_for(lambda: proc.said(f"operator {name} started"), f"the {name} operator", 180)
    return proc


@pytest.fixture(scope="module")
def operator(
    cluster: DevCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorProcess]:
    """One events operator for the module (its start-up dominates these tests). Each test has
    its own sinks, receiver and namespace, and a test that kills it starts it again."""
    proc = OperatorProcess(
        "events",
        Path(cluster.kubeconfig),
        tmp_path_factory.mktemp("events-operator"),
        "--events-flush-seconds=0.2",
        "--events-health-port=0",  # tests run side by side: no fixed port
    )
    started(proc.start())
    try:
        yield proc
    finally:
        proc.stop()


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
    sinks: MakeSink,
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
    sinks: MakeSink,
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
    sinks: MakeSink,
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
    sinks: MakeSink,
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
