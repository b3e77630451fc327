"""The stage the contention stories play on: real operators, real jobs, kwok nodes of their own.

One module of stories = one `python -m operators all` process (scheduler, jobs, pool, queue,
podgroup, events) and one `Stage`, which an admin uses to add nodes, pools, queues and priority
classes, and a `Team` (one namespace) uses to submit HybridJobs/VCJobs and watch them.

Isolation from the other e2e modules: every node a story uses is created here, labelled with a
pool class of its own, and deleted afterwards; the session's 16 GPU nodes stay in the built-in
`default` pool, which is told not to share for the module (so nothing borrows there; that is
itself part of the borrowing story) and restored afterwards.
"""

from __future__ import annotations

import contextlib
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes import client

from operators.api import labels as L
from operators.api.batch import API_VERSION as BATCH_API
from operators.api.batch import HybridJob, VCJob
from operators.api.scheduling import API_VERSION as SCHEDULING_API
from operators.api.scheduling import PodGroup, Pool, Queue, Topology
from operators.devcluster import profiles, waiting
from operators.devcluster.cluster import DevCluster
from operators.devcluster.operator_process import OperatorProcess
from operators.devcluster.processes import free_port

GPU = profiles.GPU_RESOURCE
SCHED_GROUP, BATCH_GROUP, V = L.SCHEDULING_GROUP, L.BATCH_GROUP, "v1alpha1"
JOB_PLURALS = {"VCJob": VCJob.plural, "HybridJob": HybridJob.plural}


def start_operators(cluster: DevCluster, logs: Path) -> OperatorProcess:
    """Every operator in one process, with no fixed ports and no leader election (one replica)."""
    return OperatorProcess(
        "all",
        Path(cluster.kubeconfig),
        logs,
        f"--metrics-port={free_port()}",
        "--metrics-host=127.0.0.1",
        "--no-leader-election",
        "--jobs-health-port=0",
        "--events-health-port=0",
        "--half-bound-grace-seconds=5",
    ).start()


def template(
    *, cpu: str = "1", gpus: int = 0, runs_for: str = "30s", on: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """A pod that kwok runs for `runs_for` and then completes (on nodes labelled `on`)."""
    resources: dict[str, Any] = {"requests": {"cpu": cpu, "memory": "1Gi"}}
    if gpus:
        resources["limits"] = {GPU: str(gpus)}
    pinned = {"nodeSelector": dict(on)} if on else {}
    return {
        "metadata": {"annotations": {"sluice.dev/complete-after": runs_for}},
        "spec": {
            **pinned,
            "schedulerName": L.SCHEDULER_NAME,
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "main", "image": "fake", "resources": resources}],
        },
    }


@dataclass(frozen=True)
class Job:
    """A job as a user writes it: kind and spec."""

    kind: str
    spec: dict[str, Any]


def vcjob(
    pods: int,
    *,
    min_available: int | None = None,
    cpu: str = "1",
    gpus: int = 0,
    runs_for: str = "30s",
    on: Mapping[str, str] | None = None,
    **spec: Any,
) -> Job:
    """A Volcano-style job: one task of `pods` identical pods, a gang of `min_available`."""
    gang = pods if min_available is None else min_available
    body: dict[str, Any] = {
        "minAvailable": gang,
        "tasks": [
            {
                "name": "worker",
                "replicas": pods,
                "minAvailable": gang,
                "template": template(cpu=cpu, gpus=gpus, runs_for=runs_for, on=on),
            }
        ],
        **spec,
    }
    return Job("VCJob", body)


def hybridjob(replicas: Mapping[str, tuple[int, int]], *, gpus: int, **spec: Any) -> Job:
    """An elastic job: replica type -> (minReplicas, maxReplicas), `gpus` per pod."""
    runs_for = spec.pop("runs_for", "60s")
    body: dict[str, Any] = {
        "replicaSpecs": {
            name: {
                "minReplicas": low,
                "maxReplicas": high,
                "template": template(cpu="1", gpus=gpus, runs_for=runs_for),
            }
            for name, (low, high) in replicas.items()
        },
        **spec,
    }
    return Job("HybridJob", body)


@dataclass
class Stage:
    """What an admin sets up for a story; everything is removed again by `tear_down`."""

    k8s: client.ApiClient
    operators: OperatorProcess
    tag: str = field(default_factory=lambda: uuid.uuid4().hex[:5])
    nodes: list[str] = field(default_factory=list)
    pools: list[str] = field(default_factory=list)
    queues: list[str] = field(default_factory=list)
    priority_classes: list[str] = field(default_factory=list)
    topologies: list[str] = field(default_factory=list)
    low: str = ""  # PriorityClass names every story may use
    high: str = ""

    def __post_init__(self) -> None:
        self.core = client.CoreV1Api(self.k8s)
        self.custom = client.CustomObjectsApi(self.k8s)
        self.sched = client.SchedulingV1Api(self.k8s)

    # -- waiting, with the operators' log when the story stalls ----------------------------------

    def wait(self, what: str, predicate: Callable[[], Any], timeout: float = 90) -> Any:
        try:
            return waiting.wait_for(predicate, timeout=timeout, interval=0.5, what=what)
        except TimeoutError as exc:
            raise AssertionError(f"{exc}\n--- operators ---\n{self.operators.log(80)}") from exc

    def wait_operators_up(self) -> None:
        # Importing kopf can take long on a busy 2-core machine: a hang detector, not a timer.
        def this_run() -> str:
            # Each start appends to the same log after a "$ <command>" line.
            return self.operators.log(10_000).rpartition("\n$ ")[2]

        self.wait(
            "every operator to start",
            lambda: (
                "caches synced" in (run := this_run())  # the scheduler's
                and all(
                    f"operator {n} started" in run for n in ("pool", "queue", "podgroup", "jobs")
                )
            ),
            300,
        )

    # -- nodes and pools -----------------------------------------------------------------------

    def node_class(self, name: str) -> str:
        """The value of `node.sluice.dev/pool` this stage's `name` nodes carry."""
        return f"{name}-{self.tag}"

    def add_nodes(
        self,
        kind: str,
        count: int,
        *,
        cpu: str,
        gpus: int = 0,
        tor: str = "",
        product: str = profiles.NodeShape.gpu_product,
    ) -> list[str]:
        names = []
        for _ in range(count):
            name = f"{kind}-{self.tag}-{len(self.nodes)}"
            tiers = {profiles.TOR_LABEL: f"{tor}-{self.tag}"} if tor else {}
            body = profiles.gpu_node(
                profiles.Placement(name, tiers),
                profiles.NodeShape(cpu=cpu, memory="1Ti", gpus=gpus, gpu_product=product),
                pool=self.node_class(kind),
            )
            if not gpus:
                body["status"]["allocatable"].pop(GPU, None)
                body["status"]["capacity"].pop(GPU, None)
            self.core.create_node(body)
            self.nodes.append(name)
            names.append(name)
        return names

    def create_pool(self, name: str, node_kind: str, **flags: bool) -> None:
        spec: dict[str, Any] = {
            "nodeSelector": {"matchLabels": {profiles.POOL_LABEL: self.node_class(node_kind)}},
            **flags,
        }
        self._create_cluster(Pool.plural, "Pool", name, spec)
        self.pools.append(name)

    def own_pool(self, name: str, nodes: int, tor: str = "") -> list[str]:
        """A pool of `nodes` 8-GPU nodes that neither lends nor borrows: a story of its own."""
        made = self.add_nodes(name, nodes, cpu="40", gpus=8, tor=tor)
        self.create_pool(name, name, disableBorrowing=True, disableSharing=True)
        self.wait_pool_nodes(name, made)
        return made

    def create_masters_pool(self) -> None:
        """The samples' `masters` pool: control-plane nodes, never lent, never borrowing."""
        self._create_cluster(
            Pool.plural,
            "Pool",
            "masters",
            {
                "nodeSelector": {
                    "matchExpressions": [
                        {"key": "node-role.kubernetes.io/control-plane", "operator": "Exists"}
                    ]
                },
                "disableSharing": True,
                "disableBorrowing": True,
                "disablePreemption": True,
            },
        )
        self.pools.append("masters")

    def pool_of(self, node: str) -> str:
        labels = self.core.read_node(node).metadata.labels or {}
        return str(labels.get(L.POOL, ""))

    def wait_pool_nodes(self, pool: str, nodes: Sequence[str]) -> None:
        self.wait(
            f"{list(nodes)} in pool {pool}", lambda: all(self.pool_of(n) == pool for n in nodes)
        )

    def set_default_pool_sharing(self, sharing: bool) -> None:
        self.wait(
            "the built-in default pool",
            lambda: self._get_cluster(Pool.plural, L.DEFAULT_POOL) is not None,
        )
        self.custom.patch_cluster_custom_object(
            SCHED_GROUP, V, Pool.plural, L.DEFAULT_POOL, {"spec": {"disableSharing": not sharing}}
        )

    def pool_status(self, name: str) -> dict[str, Any]:
        return (self._get_cluster(Pool.plural, name) or {}).get("status") or {}

    def create_topology(self, levels: Mapping[str, str]) -> None:
        """The cluster's `Topology` (tier name -> node label, coarse to fine), for this stage."""
        spec = {"levels": [{"name": n, "nodeLabel": label} for n, label in levels.items()]}
        self._create_cluster(Topology.plural, "Topology", "default", spec)
        self.topologies.append("default")

    # -- queues and priorities -----------------------------------------------------------------

    def create_queue(self, name: str, **spec: Any) -> None:
        self._create_cluster(Queue.plural, "Queue", name, spec)
        self.queues.append(name)

    def queue_status(self, name: str) -> dict[str, Any]:
        return (self._get_cluster(Queue.plural, name) or {}).get("status") or {}

    def priority(self, name: str, value: int) -> str:
        """A PriorityClass of this stage; returns its name for `priorityClassName`."""
        full = f"{name}-{self.tag}"
        self.sched.create_priority_class(
            client.V1PriorityClass(metadata=client.V1ObjectMeta(name=full), value=value)
        )
        self.priority_classes.append(full)
        return full

    # -- teams ---------------------------------------------------------------------------------

    @contextlib.contextmanager
    def team(self, name: str) -> Iterator[Team]:
        """A namespace of users submitting jobs; deleted (with its jobs) afterwards."""
        namespace = f"{name}-{uuid.uuid4().hex[:5]}"
        self.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
        try:
            yield Team(self, namespace)
        finally:
            with contextlib.suppress(client.ApiException):
                self.core.delete_namespace(namespace, propagation_policy="Background")

    # -- plumbing --------------------------------------------------------------------------------

    def _create_cluster(self, plural: str, kind: str, name: str, spec: dict[str, Any]) -> None:
        self.custom.create_cluster_custom_object(
            SCHED_GROUP,
            V,
            plural,
            {"apiVersion": SCHEDULING_API, "kind": kind, "metadata": {"name": name}, "spec": spec},
        )

    def _get_cluster(self, plural: str, name: str) -> dict[str, Any] | None:
        try:
            obj: dict[str, Any] = self.custom.get_cluster_custom_object(
                SCHED_GROUP, V, plural, name
            )
        except client.ApiException as err:
            if err.status == 404:
                return None
            raise
        return obj

    def tear_down(self) -> None:
        for plural, names in (
            (Queue.plural, self.queues),
            (Pool.plural, self.pools),
            (Topology.plural, self.topologies),
        ):
            for name in reversed(names):
                with contextlib.suppress(client.ApiException):
                    self.custom.delete_cluster_custom_object(SCHED_GROUP, V, plural, name)
        for node in self.nodes:
            with contextlib.suppress(client.ApiException):
                self.core.delete_node(node)
        for pc in self.priority_classes:
            with contextlib.suppress(client.ApiException):
                self.sched.delete_priority_class(pc)
        with contextlib.suppress(client.ApiException):
            self.set_default_pool_sharing(True)


@dataclass
class Team:
    """One namespace's users: submit jobs, watch them run, wait, get preempted."""

    stage: Stage
    namespace: str
    kinds: dict[str, str] = field(default_factory=dict)  # job name -> kind, as submitted

    def submit(
        self,
        name: str,
        job: Job,
        *,
        queue: str = "",
        pool: str = "",
        priority: str = "",
        labels: Mapping[str, str] | None = None,
        **more: Any,
    ) -> None:
        named = {"queue": queue, "pool": pool, "priorityClassName": priority}
        spec = {**job.spec, **{k: v for k, v in named.items() if v}, **more}
        self.stage.custom.create_namespaced_custom_object(
            BATCH_GROUP,
            V,
            self.namespace,
            JOB_PLURALS[job.kind],
            {
                "apiVersion": BATCH_API,
                "kind": job.kind,
                "metadata": {"name": name, "labels": dict(labels or {})},
                "spec": spec,
            },
        )
        self.kinds[name] = job.kind

    def cancel(self, name: str) -> None:
        self.stage.custom.delete_namespaced_custom_object(
            BATCH_GROUP, V, self.namespace, JOB_PLURALS[self.kinds[name]], name
        )

    # -- what a user looks at --------------------------------------------------------------------

    def job(self, name: str) -> dict[str, Any]:
        obj: dict[str, Any] = self.stage.custom.get_namespaced_custom_object(
            BATCH_GROUP, V, self.namespace, JOB_PLURALS[self.kinds[name]], name
        )
        return obj

    def phase(self, name: str) -> str:
        return str((self.job(name).get("status") or {}).get("phase") or "")

    def podgroup(self, name: str) -> dict[str, Any]:
        try:
            obj: dict[str, Any] = self.stage.custom.get_namespaced_custom_object(
                SCHED_GROUP, V, self.namespace, PodGroup.plural, name
            )
        except client.ApiException as err:
            if err.status == 404:
                return {}
            raise
        return obj

    def job_condition(self, name: str, type_: str) -> dict[str, Any]:
        conds = (self.job(name).get("status") or {}).get("conditions") or ()
        return next((c for c in conds if c["type"] == type_), {})

    def condition(self, name: str, type_: str) -> dict[str, Any]:
        conds = (self.podgroup(name).get("status") or {}).get("conditions") or ()
        return next((c for c in conds if c["type"] == type_), {})

    def pods(self, name: str) -> list[client.V1Pod]:
        """The job's live pods (not finished, not being deleted)."""
        return [
            p
            for p in self.stage.core.list_namespaced_pod(
                self.namespace, label_selector=f"{L.JOB_NAME}={name}"
            ).items
            if p.metadata.deletion_timestamp is None and p.status.phase in ("Pending", "Running")
        ]

    def running(self, name: str) -> list[client.V1Pod]:
        """The job's pods the scheduler has placed on a node and that have not finished (kwok
        may still be starting them: on a loaded machine it lags behind the bindings)."""
        return [p for p in self.pods(name) if p.spec.node_name]

    def uids(self, name: str) -> set[str]:
        """Identities of the job's running pods: a re-created pod has a new one."""
        return {p.metadata.uid for p in self.running(name)}

    def events(self, name: str, reason: str) -> list[client.CoreV1Event]:
        """Events with `reason` about the job or its PodGroup (both are named `name`)."""
        return [
            e
            for e in self.stage.core.list_namespaced_event(
                self.namespace, field_selector=f"involvedObject.name={name}"
            ).items
            if e.reason == reason
        ]

    def times(self, name: str, reason: str) -> int:
        """How often `reason` was posted about the job (Events are aggregated with a count)."""
        return sum(e.count or 1 for e in self.events(name, reason))

    def waiting_reason(self, name: str) -> str:
        """Why the scheduler says the job waits (the PodGroup's Unschedulable condition)."""
        cond = self.condition(name, "Unschedulable")
        return (
            f"{cond.get('reason')}: {cond.get('message')}" if cond.get("status") == "True" else ""
        )

    # -- waiting ---------------------------------------------------------------------------------

    def wait_running(self, name: str, pods: int, timeout: float = 120) -> list[client.V1Pod]:
        """Until `pods` of the job's pods run (placed by the scheduler)."""
        found: list[client.V1Pod] = self.stage.wait(
            f"{pods} pods of {self.namespace}/{name} running",
            lambda: len(r := self.running(name)) >= pods and r,
            timeout,
        )
        return found

    def wait_phase(self, name: str, *phases: str, timeout: float = 120) -> None:
        self.stage.wait(
            f"{self.namespace}/{name} in {phases}", lambda: self.phase(name) in phases, timeout
        )

    def wait_finished(self, name: str, timeout: float = 180) -> None:
        self.wait_phase(name, "Completed", timeout=timeout)

    def wait_waiting(self, name: str, expect: str = "", timeout: float = 60) -> str:
        """Until the scheduler has explained why the job waits (with a reason starting with
        `expect`, if given); returns the explanation. While the jobs operator is still creating
        the pods, the reason is NotEnoughTasks: not yet the answer."""

        def explained() -> str:
            reason = self.waiting_reason(name)
            if self.running(name) or not reason or reason.startswith("NotEnoughTasks"):
                return ""
            return reason if reason.startswith(expect) else ""

        reason: str = self.stage.wait(
            f"{self.namespace}/{name} told why it waits", explained, timeout
        )
        return reason


@contextlib.contextmanager
def staged(cluster: DevCluster, k8s: client.ApiClient, logs: Path) -> Iterator[Stage]:
    """A module's stage: its operators up, `default` not sharing; all undone afterwards."""
    stage = Stage(k8s, start_operators(cluster, logs))
    try:
        stage.wait_operators_up()
        stage.set_default_pool_sharing(False)
        stage.low, stage.high = stage.priority("low", 10), stage.priority("high", 1000)
        yield stage
    finally:
        stage.tear_down()
        stage.operators.stop()
        # Captured by pytest and shown only when a test fails.
        sys.stderr.write(f"\n----- {stage.operators.log_path} -----\n{stage.operators.log(300)}\n")


def stays(
    stage: Stage, what: str, predicate: Callable[[], bool], seconds: float, interval: float = 0.5
) -> None:
    """`predicate` holds at every look for `seconds` (for things that must never happen)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert predicate(), f"{what} stopped holding\n{stage.operators.log(60)}"
        time.sleep(interval)
