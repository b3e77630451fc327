"""The `jobs` operator with the scheduler on the real local control plane (small profile).

Both run as subprocesses (`python -m operators scheduler|jobs`), so SIGKILL and restart are real.
Pods finish through kwok's delay annotations (docs/devcluster.md).
"""

from __future__ import annotations

import copy
import json
import random
import re
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import urllib3
import yaml
from kubernetes import client, watch

from operators.api import labels as L
from operators.api.scheduling import PodGroup, Queue
from operators.api.volcano import from_volcano
from operators.devcluster import chaos, waiting
from operators.devcluster.cluster import DevCluster
from operators.devcluster.operator_process import OperatorProcess

pytestmark = pytest.mark.e2e

GROUP, VERSION = "batch.sluice.dev", "v1alpha1"
PLURALS = {"VCJob": "vcjobs", "HybridJob": "hybridjobs"}
REPO = Path(__file__).resolve().parents[1]
TERMINAL = {"Completed", "Failed", "Aborted", "Terminated"}


@pytest.fixture(scope="module")
def operators(cluster: DevCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    logs = tmp_path_factory.mktemp("jobs-operators")
    kubeconfig = Path(cluster.kubeconfig)
    scheduler = OperatorProcess(
        "scheduler",
        kubeconfig,
        logs,
        "--metrics-port=0",
        # One scheduler: a lease it may lose on a busy CI machine would only add flakiness.
        "--no-leader-election",
    ).start()
    jobs = OperatorProcess("jobs", kubeconfig, logs, "--jobs-health-port=0").start()
    procs = {"scheduler": scheduler, "jobs": jobs}
    try:
        # Importing kopf takes long on a busy machine: the first test's clock starts once both
        # are watching, not while they still load.
        waiting.wait_for(
            lambda: (
                "caches synced" in scheduler.log(100_000)
                and "operator jobs started" in jobs.log(100_000)
            ),
            timeout=300,
            interval=1.0,
            what="the scheduler and the jobs operator started",
        )
        yield procs
    finally:
        for proc in procs.values():
            proc.stop()


class Jobs:
    def __init__(self, k8s: client.ApiClient, ns: str, procs: dict[str, OperatorProcess]) -> None:
        self.custom = client.CustomObjectsApi(k8s)
        self.core = client.CoreV1Api(k8s)
        self.ns = ns
        self.procs = procs

    def create(self, kind: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": kind,
            "metadata": {"name": name},
            "spec": spec,
        }
        out: dict[str, Any] = self.custom.create_namespaced_custom_object(
            GROUP, VERSION, self.ns, PLURALS[kind], body
        )
        return out

    def get(self, kind: str, name: str) -> dict[str, Any]:
        out: dict[str, Any] = self.custom.get_namespaced_custom_object(
            GROUP, VERSION, self.ns, PLURALS[kind], name
        )
        return out

    def status(self, kind: str, name: str) -> dict[str, Any]:
        return self.get(kind, name).get("status") or {}

    def wait(self, what: str, predicate: Callable[[], Any], timeout: float = 90) -> Any:
        try:
            return waiting.wait_for(predicate, timeout=timeout, interval=0.5, what=what)
        except TimeoutError as exc:
            logs = "\n".join(f"--- {n} ---\n{p.log(60)}" for n, p in self.procs.items())
            raise AssertionError(f"{exc}\n{self.dump()}\n{logs}") from exc

    def dump(self) -> str:
        """Every job, PodGroup and pod of the namespace, for a failing test's message."""
        out = [
            yaml.safe_dump({f"{kind} {obj['metadata']['name']}": obj.get("status")})
            for kind, group, version, plural in (
                ("VCJob", GROUP, VERSION, "vcjobs"),
                ("HybridJob", GROUP, VERSION, "hybridjobs"),
                ("PodGroup", PodGroup.group, PodGroup.version, PodGroup.plural),
            )
            for obj in self.custom.list_namespaced_custom_object(group, version, self.ns, plural)[
                "items"
            ]
        ]
        out += [f"pod {p.metadata.name} {p.status.phase} {p.spec.node_name}" for p in self.pods()]
        return "\n".join(out)

    def wait_phase(
        self, kind: str, name: str, phases: set[str], timeout: float = 90
    ) -> dict[str, Any]:
        return dict(
            self.wait(
                f"{kind} {name} in {sorted(phases)}",
                lambda: (s := self.status(kind, name)).get("phase") in phases and s,
                timeout,
            )
        )

    def pods(self, job: str = "") -> list[client.V1Pod]:
        selector = f"{L.JOB_NAME}={job}" if job else L.JOB_NAME
        return list(self.core.list_namespaced_pod(self.ns, label_selector=selector).items)

    def events(self, kind: str, name: str) -> list[client.CoreV1Event]:
        uid = self.get(kind, name)["metadata"]["uid"]
        found = self.core.list_namespaced_event(
            self.ns, field_selector=f"involvedObject.uid={uid}"
        ).items
        return list(found)


@pytest.fixture
def jobs(k8s: client.ApiClient, namespace: str, operators: dict[str, OperatorProcess]) -> Jobs:
    return Jobs(k8s, namespace, operators)


def seqs_of(message: str) -> list[int]:
    """The `#seq` of each transition an Event tells (a job's transitions are coalesced)."""
    return [int(seq) for seq in re.findall(r"(?m)^#(\d+) (?:job|task|pod) ", message)]


def test_vcjob_main_task_completes_the_job_and_ttl_cleans_up(jobs: Jobs) -> None:
    jobs.create(
        "VCJob",
        "mnist",
        {
            "minAvailable": 3,
            "ttlSecondsAfterFinished": 3,
            "plugins": {"svc": [], "env": []},
            "tasks": [
                {"name": "ps", "replicas": 2, "template": chaos.template()},
                {
                    "name": "main",
                    "replicas": 1,
                    "dependsOn": {"name": ["ps"]},
                    "policies": [{"event": "TaskCompleted", "action": "CompleteJob"}],
                    "template": chaos.template(complete="3s"),
                },
            ],
        },
    )
    status = jobs.wait_phase("VCJob", "mnist", {"Completed"})
    tasks = {t["name"]: t for t in status["tasks"]}
    assert tasks["main"]["phase"] == "Completed"
    assert tasks["ps"]["phase"] != "Completed"  # still running when the main task finished
    job_moves = [t for t in status["transitions"] if t["level"] == "Job"]
    assert [t["to"] for t in job_moves[-2:]] == ["Completing", "Completed"]
    assert job_moves[-2]["reason"] == "CompleteJob"
    assert "TaskCompleted (task main)" in job_moves[-2]["message"]
    svc = jobs.core.read_namespaced_service("mnist", jobs.ns)
    assert svc.spec.cluster_ip == "None"
    # TTL: the job goes, and the garbage collector takes everything it owned.
    jobs.wait(
        "job deleted after its TTL",
        lambda: (
            not jobs.custom.list_namespaced_custom_object(GROUP, VERSION, jobs.ns, "vcjobs")[
                "items"
            ]
        ),
        60,
    )
    jobs.wait("pods garbage-collected", lambda: not jobs.pods("mnist"), 60)


def test_restart_task_on_exit_code_then_failed_after_max_retry(jobs: Jobs) -> None:
    jobs.create(
        "VCJob",
        "flaky",
        {
            "maxRetry": 2,
            "tasks": [
                {
                    "name": "w",
                    "replicas": 1,
                    "policies": [{"exitCode": 3, "action": "RestartTask"}],
                    "template": chaos.template(fail="1s", code="3"),
                }
            ],
        },
    )
    status = jobs.wait_phase("VCJob", "flaky", {"Failed"}, timeout=120)
    assert status["retryCount"] == 2
    assert status["reason"] == "MaxRetryExceeded"
    job_path = [t["to"] for t in status["transitions"] if t["level"] == "Job"]
    assert job_path.count("Restarting") == 2
    assert job_path[-1] == "Failed"
    seqs = [t["seq"] for t in status["transitions"]]
    assert seqs == sorted(seqs)
    assert seqs[-1] == status["transitionSeq"]

    def all_posted() -> list[int] | None:
        posted = sorted(s for e in jobs.events("VCJob", "flaky") for s in seqs_of(e.message))
        return posted if posted == list(range(1, status["transitionSeq"] + 1)) else None

    jobs.wait("an Event for every transition", all_posted, 30)
    restarts = [e for e in jobs.events("VCJob", "flaky") if e.reason == "RestartTask"]
    assert len(restarts) == 2


def test_bad_input_is_a_condition_on_that_job_only(jobs: Jobs) -> None:
    jobs.create(
        "VCJob",
        "lost",
        {
            "queue": "no-such-queue",
            "priorityClassName": "no-such-class",
            "tasks": [{"name": "w", "replicas": 1, "template": chaos.template()}],
        },
    )
    bad = copy.deepcopy(chaos.template(complete="1s"))
    bad["spec"]["containers"][0]["name"] = "Not_A_DNS_Label"  # the API server refuses the pod
    jobs.create("VCJob", "rejected", {"tasks": [{"name": "w", "replicas": 1, "template": bad}]})
    jobs.create(
        "VCJob",
        "fine",
        {"tasks": [{"name": "w", "replicas": 1, "template": chaos.template(complete="1s")}]},
    )

    def invalid(name: str) -> dict[str, Any] | None:
        conds = {c["type"]: c for c in jobs.status("VCJob", name).get("conditions") or ()}
        valid = conds.get("Valid")
        return valid if valid and valid["status"] == "False" else None

    lost = jobs.wait("condition on the job with a missing queue", lambda: invalid("lost"))
    assert "queue no-such-queue does not exist" in lost["message"]
    assert "PriorityClass no-such-class does not exist" in lost["message"]
    rejected = jobs.wait("condition on the job whose pod was refused", lambda: invalid("rejected"))
    assert rejected["reason"] == "PodRejected"
    jobs.wait_phase("VCJob", "fine", {"Completed"})
    assert jobs.procs["jobs"].alive


def test_sigkill_during_twenty_jobs(jobs: Jobs) -> None:
    rng = random.Random(17)
    expected: dict[str, str] = {}
    live: dict[tuple[str, str], set[str]] = defaultdict(set)
    doubles: list[str] = []
    stop = threading.Event()

    stream = watch.Watch()

    def observe() -> None:
        try:
            for ev in stream.stream(
                jobs.core.list_namespaced_pod, jobs.ns, label_selector=L.JOB_NAME
            ):
                pod = ev["object"]
                meta = pod.metadata
                slot = (
                    meta.labels[L.JOB_NAME],
                    f"{meta.labels[L.TASK]}/{meta.labels[L.REPLICA_INDEX]}",
                )
                finished = pod.status.phase in ("Succeeded", "Failed")
                if ev["type"] != "DELETED" and not finished and not meta.deletion_timestamp:
                    live[slot].add(meta.uid)
                    if len(live[slot]) > 1:
                        doubles.append(f"{slot}: {sorted(live[slot])}")
                else:
                    live[slot].discard(meta.uid)
        except (client.ApiException, urllib3.exceptions.HTTPError, OSError) as err:
            # The stream ends with the namespace.
            if not stop.is_set():
                doubles.append(f"pod watch failed: {err}")

    watcher = threading.Thread(target=observe, daemon=True)
    watcher.start()
    for i in range(20):
        name = f"j{i:02d}"
        if i % 4 == 3:
            template = chaos.template(fail=f"{rng.randint(1, 3)}s", code="3")
            spec = {
                "maxRetry": 1,
                "tasks": [
                    {
                        "name": "w",
                        "replicas": 2,
                        "policies": [{"exitCode": 3, "action": "RestartTask"}],
                        "template": template,
                    }
                ],
            }
            expected[name] = "Failed"
        else:
            spec = {
                "tasks": [
                    {
                        "name": "w",
                        "replicas": 2,
                        "template": chaos.template(complete=f"{rng.randint(1, 6)}s"),
                    }
                ]
            }
            expected[name] = "Completed"
        jobs.create("VCJob", name, spec)
    operator = jobs.procs["jobs"]
    for _ in range(3):
        time.sleep(rng.uniform(0.5, 4.0))
        operator.kill()
        time.sleep(rng.uniform(0.0, 1.0))
        operator.start()

    def phases() -> dict[str, str]:
        items = jobs.custom.list_namespaced_custom_object(GROUP, VERSION, jobs.ns, "vcjobs")
        return {
            j["metadata"]["name"]: (j.get("status") or {}).get("phase", "") for j in items["items"]
        }

    jobs.wait("every job terminal", lambda: all(p in TERMINAL for p in phases().values()), 180)
    assert phases() == expected
    stop.set()
    stream.stop()
    assert not doubles, doubles
    # Nothing orphaned: deleting the jobs takes every pod and PodGroup with them.
    jobs.custom.delete_collection_namespaced_custom_object(GROUP, VERSION, jobs.ns, "vcjobs")
    jobs.wait("pods garbage-collected", lambda: not jobs.pods(), 90)
    jobs.wait(
        "podgroups garbage-collected",
        lambda: (
            not jobs.custom.list_namespaced_custom_object(
                PodGroup.group, PodGroup.version, jobs.ns, PodGroup.plural
            )["items"]
        ),
        90,
    )


def ensure_priority_class(k8s: client.ApiClient, name: str, value: int) -> None:
    body = client.V1PriorityClass(metadata=client.V1ObjectMeta(name=name), value=value)
    try:
        client.SchedulingV1Api(k8s).create_priority_class(body)
    except client.ApiException as err:
        if err.status != 409:
            raise


def running_of(status: dict[str, Any], task: str) -> int:
    return int(next(t for t in status.get("tasks") or () if t["name"] == task).get("running") or 0)


def shrunk_workers(status: dict[str, Any]) -> set[str]:
    return {
        t["name"]
        for t in status.get("transitions") or ()
        if t["level"] == "Replica" and t.get("reason") == "Shrunk" and "-worker-" in t["name"]
    }


def test_tf_hybridjob_gang_grows_shrinks_for_priority_and_completes(
    jobs: Jobs, k8s: client.ApiClient
) -> None:
    ensure_priority_class(k8s, "e2e-jobs-low", 10)
    ensure_priority_class(k8s, "e2e-jobs-high", 1000)
    whole_node = 8  # one small-profile node's GPUs: the cluster holds 16 such workers
    jobs.create(
        "HybridJob",
        "tf",
        {
            "priorityClassName": "e2e-jobs-low",
            "replicaSpecs": {
                "PS": {
                    "minReplicas": 1,
                    "maxReplicas": 2,
                    "priority": 10,
                    "template": chaos.template(complete="50s"),
                },
                "Worker": {
                    "minReplicas": 2,
                    "maxReplicas": 8,
                    "template": chaos.template(complete="50s", gpus=whole_node),
                },
            },
        },
    )
    grown = jobs.wait(
        "tf grown to its maximum",
        lambda: (s := jobs.status("HybridJob", "tf")).get("running") == 10 and s,
        90,
    )
    assert grown["phase"] == "Running"
    assert (running_of(grown, "ps"), running_of(grown, "worker")) == (2, 8)
    env = {
        e.name: e.value
        for e in jobs.core.read_namespaced_pod("tf-worker-0", jobs.ns).spec.containers[0].env
    }
    assert '"task":{"index":0,"type":"worker"}' in env["TF_CONFIG"]

    # A higher-priority gang needs 14 of the 16 nodes: tf shrinks to its minimum, not killed.
    jobs.create(
        "VCJob",
        "urgent",
        {
            "priorityClassName": "e2e-jobs-high",
            "tasks": [
                {
                    "name": "w",
                    "replicas": 14,
                    "template": chaos.template(complete="5s", gpus=whole_node),
                }
            ],
        },
    )
    # Read from the transition log, not the momentary count: a job's status is written
    # coalesced (up to 5 s, docs/jobs.md), and urgent's 5 s pods may let tf grow back within
    # that window, so a status with 2 running workers need never be written.
    shrunk = jobs.wait(
        "tf shrunk to its minimum workers",
        lambda: len(shrunk_workers(s := jobs.status("HybridJob", "tf"))) == 6 and s,
        90,
    )
    assert shrunk["phase"] == "Running"
    assert shrunk["retryCount"] == 0
    jobs.wait_phase("VCJob", "urgent", {"Completed"}, timeout=90)
    final = jobs.wait_phase("HybridJob", "tf", {"Completed"}, timeout=150)
    assert final["succeeded"] >= 3
    reasons = {t.get("reason") for t in final["transitions"] if t["level"] == "Replica"}
    assert "Shrunk" in reasons or final["transitionsDropped"] == 0


def test_sample_jobs_run_to_completion(jobs: Jobs, kubectl: Any, k8s: client.ApiClient) -> None:
    samples = REPO / "manifests" / "samples"
    cluster_scoped = [
        samples / f for f in ("pools.yaml", "queues.yaml", "topology.yaml", "eventsink.yaml")
    ]
    for path in cluster_scoped:
        kubectl("apply", "--server-side", "-f", str(path))
    try:
        for file, kind in (("vcjob.yaml", "VCJob"), ("hybridjob-tensorflow.yaml", "HybridJob")):
            body = sample(file, jobs.ns)
            kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump(body))
            jobs.wait_phase(kind, body["metadata"]["name"], {"Completed"}, timeout=120)
    finally:
        for path in reversed(cluster_scoped):
            kubectl("delete", "--ignore-not-found", "--wait=false", "-f", str(path), check=False)


def sample(path: str, ns: str) -> dict[str, Any]:
    """A sample job from manifests/samples, moved to the test namespace, its pods finishing."""
    body: dict[str, Any] = yaml.safe_load((REPO / "manifests" / "samples" / path).read_text())
    body["metadata"]["namespace"] = ns
    spec = body["spec"]
    templates = [t["template"] for t in spec.get("tasks") or ()]
    templates += [r["template"] for r in (spec.get("replicaSpecs") or {}).values()]
    for template in templates:
        annotations = template.setdefault("metadata", {}).setdefault("annotations", {})
        annotations["sluice.dev/complete-after"] = "5s"
    return body


VOLCANO_MANIFESTS = REPO / "tests" / "unit" / "api" / "volcano_manifests.yaml"


def finishing(template: dict[str, Any], after: str = "5s") -> None:
    """kwok's pod lifetime: the pod succeeds `after` it started."""
    annotations = template.setdefault("metadata", {}).setdefault("annotations", {})
    annotations["sluice.dev/complete-after"] = after


def test_volcano_documented_manifests_run(jobs: Jobs, kubectl: Any, k8s: client.ApiClient) -> None:
    """Every manifest from Volcano's docs that Sluice accepts (tests/unit/api/
    volcano_manifests.yaml), moved by `from_volcano` only, runs: each Job to Completed, the
    PodGroup's Volcano-annotated pod and a pod of the Queue (Volcano's queue annotation) to
    Succeeded. The docs' jobs assume the PriorityClass `high-priority`, created here."""
    cases = [c for c in yaml.safe_load(VOLCANO_MANIFESTS.read_text()) if c["refused"] is None]
    ensure_priority_class(k8s, "high-priority", 1000)
    moved = {c["id"]: from_volcano(c["manifest"]) for c in cases}
    queues = [m for m in moved.values() if m["kind"] == "Queue"]
    for queue in queues:
        kubectl("apply", "--server-side", "-f", "-", input=json.dumps(queue))
    try:
        job_names = []
        for obj in moved.values():
            if obj["kind"] != "VCJob":
                continue
            obj["metadata"]["namespace"] = jobs.ns
            for task in obj["spec"]["tasks"]:
                finishing(task["template"])
            kubectl("apply", "--server-side", "-f", "-", input=json.dumps(obj))
            job_names.append(obj["metadata"]["name"])
        group = moved["podgroup"]
        group["metadata"]["namespace"] = jobs.ns
        kubectl("apply", "--server-side", "-f", "-", input=json.dumps(group))
        volcano_pods = {
            "vc-group-member": {L.VOLCANO_GROUP_NAME: group["metadata"]["name"]},
            "vc-queue-member": {L.VOLCANO_POD_QUEUE_NAME: queues[0]["metadata"]["name"]},
        }
        for name, annotations in volcano_pods.items():
            pod = chaos.template(complete="3s")
            pod["metadata"] = {"name": name, "annotations": {**pod["metadata"]["annotations"]}}
            pod["metadata"]["annotations"].update(annotations)
            jobs.core.create_namespaced_pod(jobs.ns, {"apiVersion": "v1", "kind": "Pod", **pod})
        for name in job_names:
            final = jobs.wait_phase("VCJob", name, {"Completed", "Failed"}, timeout=150)
            assert final["phase"] == "Completed", (name, final.get("conditions"))

        def succeeded() -> bool:
            pods = (jobs.core.read_namespaced_pod(n, jobs.ns) for n in volcano_pods)
            return all(p.status.phase == "Succeeded" for p in pods)

        jobs.wait("the PodGroup's and the Queue's Volcano pods Succeeded", succeeded)
    finally:
        for queue in queues:
            kubectl(
                "delete",
                f"{Queue.crd_name()}/{queue['metadata']['name']}",
                "--ignore-not-found",
                "--wait=false",
                check=False,
            )
