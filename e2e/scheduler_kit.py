"""What the bare-pod scheduler e2e modules share: one `python -m operators scheduler` process,
pods and PodGroups as a user writes them, and what the cluster shows of them (small profile: 16
kwok nodes with 8 GPUs each, NVLink islands {0-3} and {4-7}). Their fixtures (`core`, `custom`,
`start_scheduler`, `free_nodes`) are in conftest.py.
"""

from __future__ import annotations

import threading
import time
import urllib.request
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kubernetes import client, watch

from operators.api import labels
from operators.api.scheduling import PodGroup
from operators.devcluster import waiting
from operators.devcluster.operator_process import OperatorProcess
from operators.devcluster.processes import free_port

GPU = "nvidia.com/gpu"
GPU_IDS = labels.GPU_IDS
POD_GROUP = labels.POD_GROUP
NODE_GPUS = 8
NVLINK_ISLANDS = ({0, 1, 2, 3}, {4, 5, 6, 7})


class Scheduler(OperatorProcess):
    """One `python -m operators scheduler` process; restartable, killable, with its log kept."""

    def __init__(self, kubeconfig: Path, log_dir: Path, lease: str, identity: str) -> None:
        super().__init__("scheduler", kubeconfig, log_dir, log_name=f"scheduler-{identity}")
        self.lease = lease
        self.identity = identity
        self.port = free_port()
        self.extra: list[str] = []

    def start(self, *extra: str) -> Scheduler:
        self.extra = list(extra) or self.extra
        self.flags = [
            f"--metrics-port={self.port}",
            "--metrics-host=127.0.0.1",
            f"--lease-name={self.lease}",
            f"--identity={self.identity}",
            "--lease-duration-seconds=6",
            "--renew-deadline-seconds=4",
            "--retry-period-seconds=1",
            "--half-bound-grace-seconds=5",
            *self.extra,
        ]
        super().start()
        return self

    def get(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=2) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as err:
            return err.code, ""
        except OSError:
            return 0, ""

    def wait_ready(self, timeout: float = 300) -> None:
        # A hang detector, not a speed check: a 2-core machine at load 30 took over 90 s to
        # import (as long as the operators' start-up waits in stage.py and test_jobs.py).
        wait_for(lambda: self.get("/readyz")[0] == 200, timeout, "scheduler /readyz", self)

    def metric(self, name: str, missing: float | None = None) -> float:
        """A sample's value. A series that is not exported fails the test (so a renamed or
        never-registered metric cannot read as 0), unless `missing` says what absence means
        (e.g. while polling a scheduler that is still starting)."""
        _, text = self.get("/metrics")
        for line in text.splitlines():
            if line.startswith((name + " ", name + "{")):
                return float(line.rsplit(" ", 1)[1])
        if missing is None:
            raise AssertionError(f"metric {name} is not exported\n{self.log()}")
        return missing


def wait_for(
    predicate: Callable[[], Any],
    timeout: float,
    what: str,
    scheduler: Scheduler | None = None,
    interval: float = 0.2,
) -> Any:
    """`operators.devcluster.waiting.wait_for`, with the scheduler's log on a timeout."""
    try:
        return waiting.wait_for(predicate, timeout=timeout, interval=interval, what=what)
    except TimeoutError as exc:
        tail = f"\nscheduler log:\n{scheduler.log()}" if scheduler else ""
        raise AssertionError(f"{exc}{tail}") from exc


def pod(
    name: str,
    gpus: int = 0,
    *,
    group: str = "",
    cpu: str = "1",
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    ann = dict(annotations or {})
    if group:
        ann[POD_GROUP] = group
    limits = {GPU: str(gpus)} if gpus else {}
    tags = {"app": name.rsplit("-", 1)[0], **(labels or {})}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": ann, "labels": tags},
        "spec": {
            "schedulerName": "sluice",
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "c",
                    "image": "fake",
                    "resources": {"requests": {"cpu": cpu}, "limits": limits},
                }
            ],
        },
    }


def podgroup(name: str, min_member: int) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.sluice.dev/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": name},
        "spec": {"minMember": min_member},
    }


def create_group(
    core: client.CoreV1Api,
    custom: client.CustomObjectsApi,
    ns: str,
    name: str,
    size: int,
    gpus: int,
    annotations: dict[str, str] | None = None,
) -> None:
    custom.create_namespaced_custom_object(
        PodGroup.group, PodGroup.version, ns, PodGroup.plural, podgroup(name, size)
    )
    for i in range(size):
        core.create_namespaced_pod(
            ns, pod(f"{name}-{i}", gpus, group=name, annotations=annotations)
        )


def pods(core: client.CoreV1Api, ns: str, prefix: str = "") -> list[client.V1Pod]:
    return [p for p in core.list_namespaced_pod(ns).items if p.metadata.name.startswith(prefix)]


def bound(core: client.CoreV1Api, ns: str, prefix: str = "") -> list[client.V1Pod]:
    return [p for p in pods(core, ns, prefix) if p.spec.node_name]


def gpu_ids(p: client.V1Pod) -> set[int]:
    raw = (p.metadata.annotations or {}).get(GPU_IDS, "")
    return {int(x) for x in raw.split(",") if x}


def busy_gpu_nodes(core: client.CoreV1Api) -> set[str]:
    busy: set[str] = set()
    for p in core.list_pod_for_all_namespaces().items:
        if p.spec.node_name and p.status.phase not in ("Succeeded", "Failed"):
            for c in p.spec.containers:
                if int(((c.resources and c.resources.limits) or {}).get(GPU, 0)):
                    busy.add(p.spec.node_name)
    return busy


def fill_cluster(core: client.CoreV1Api, ns: str, nodes: int, sched: Scheduler) -> None:
    """Take `nodes` whole nodes with 8-GPU blocker pods (bound by the scheduler itself)."""
    for i in range(nodes):
        core.create_namespaced_pod(ns, pod(f"blocker-{i}", NODE_GPUS))
    wait_for(lambda: len(bound(core, ns, "blocker-")) == nodes, 30, "blockers bound", sched)


def assert_no_gpu_shared(core: client.CoreV1Api) -> None:
    """No two live pods on one node hold the same GPU id, and no node gives out more than 8."""
    held: dict[str, list[int]] = defaultdict(list)
    for p in core.list_pod_for_all_namespaces().items:
        if p.spec.node_name and p.status.phase not in ("Succeeded", "Failed"):
            held[p.spec.node_name].extend(gpu_ids(p))
    for node, ids in held.items():
        assert len(ids) == len(set(ids)), f"GPU handed out twice on {node}: {sorted(ids)}"
        assert len(ids) <= NODE_GPUS


def gpu_node_names(core: client.CoreV1Api) -> list[str]:
    """The dev cluster's ordinary GPU nodes (8 cards, no taint), by name."""
    return sorted(
        n.metadata.name
        for n in core.list_node().items
        if int((n.status.allocatable or {}).get(GPU, 0)) == NODE_GPUS and not n.spec.taints
    )


def wait_event(
    core: client.CoreV1Api,
    ns: str,
    reason: str,
    about: str,
    sched: Scheduler | None = None,
    timeout: float = 15,
) -> list[client.CoreV1Event]:
    """Until an Event with `reason` about the object named `about` is posted in `ns`; returns
    those Events."""
    found: list[client.CoreV1Event] = wait_for(
        lambda: [
            e
            for e in core.list_namespaced_event(ns).items
            if e.reason == reason and e.involved_object.name == about
        ],
        timeout,
        f"a {reason} Event about {about}",
        sched,
    )
    return found


class BindingWatch:
    """Watches a namespace's pods from a thread; by default records every nodeName each pod is
    seen with (double binding detector). Subclasses see every event through `on_event`."""

    def __init__(self, core: client.CoreV1Api, ns: str) -> None:
        self.nodes: dict[str, set[str]] = defaultdict(set)
        self._stop = threading.Event()
        self._watch = watch.Watch()
        self._thread = threading.Thread(target=self._run, args=(core, ns), daemon=True)
        self._thread.start()

    def on_event(self, kind: str, obj: client.V1Pod) -> None:
        if obj.spec.node_name:
            self.nodes[obj.metadata.name].add(obj.spec.node_name)

    def _run(self, core: client.CoreV1Api, ns: str) -> None:
        while not self._stop.is_set():
            try:
                for event in self._watch.stream(core.list_namespaced_pod, ns, timeout_seconds=60):
                    self.on_event(event["type"], event["object"])
                    if self._stop.is_set():
                        return
            except Exception:  # noqa: BLE001 - a dropped stream: watch again (a re-list replays the state)
                time.sleep(0.2)

    def stop(self) -> None:
        self._stop.set()
        self._watch.stop()
