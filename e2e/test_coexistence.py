"""Sluice beside other schedulers on the same nodes (docs/scheduling.md, "Beside other
schedulers"; #28 item 6): pods kube-scheduler or a DaemonSet-like controller bound are counted
as soon as Sluice sees them, and under load Sluice never binds into room it saw taken.

Both tests share one Sluice scheduler and one kube-scheduler (started for this module; so not
on a cluster brought by the user) and check from the API, with a watch of their own, that no
node holds bound pods whose requests exceed its allocatable (CPU, memory, GPUs) and that no GPU
card is handed out twice.

The race no scheduler can close alone: two schedulers that see each other's pods only through
a watch can both take the last room when it frees, each within the other's watch delay. On a
real node the kubelet's admission rejects the pod that arrives second (OutOf<resource>); kwok
has no kubelet, so here such an overcommit stays. The load test tells them apart exactly: the
scheduler logs, for each Binding, the pod watch's resourceVersion when it re-checked the room,
so an overcommit is Sluice's fault only if every pod that made it was visible to Sluice then.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import re
import sys
import time
import uuid
from collections import defaultdict
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from e2e.scheduler_kit import (
    GPU,
    GPU_IDS,
    BindingWatch,
    Scheduler,
    bound,
    busy_gpu_nodes,
    gpu_ids,
    gpu_node_names,
    pod,
    wait_for,
)
from operators.api.quantity import parse_quantity
from operators.devcluster.cluster import DevCluster

pytestmark = [pytest.mark.e2e, pytest.mark.devcluster]

LABEL = "e2e.sluice.dev/shared"
NODES = 3
CPU_PER_POD = "12"  # 8 per node fill its 96 CPUs
PER_SCHEDULER = 40  # pods each scheduler gets: 80 in all for 24 pod slots at a time
RESOURCES = ("cpu", "memory", GPU)
RECHECK = re.compile(r"bind re-check (\S+)/(\S+) on \S+ at pods resourceVersion (\d+): fits")


def _requests(p: client.V1Pod) -> dict[str, float]:
    out: dict[str, float] = defaultdict(float)
    for c in p.spec.containers:
        res = c.resources
        want = {**((res and res.limits) or {}), **((res and res.requests) or {})}
        for name in RESOURCES:
            out[name] += float(parse_quantity(str(want.get(name, 0))))
    return out


def _live(p: client.V1Pod) -> bool:
    return bool(p.spec.node_name) and p.status.phase not in ("Succeeded", "Failed")


def over(pods: Iterable[client.V1Pod], allocatable: dict[str, float]) -> list[str]:
    """The resources the given pods of one node take beyond its allocatable."""
    used: dict[str, float] = defaultdict(float)
    for p in pods:
        for name, amount in _requests(p).items():
            used[name] += amount
    return [f"{n} {used[n]:g} > {allocatable[n]:g}" for n in RESOURCES if used[n] > allocatable[n]]


def overcommits(
    pods: Iterable[client.V1Pod], allocatable: dict[str, dict[str, float]], cause: str
) -> list[str]:
    """What is wrong on the given nodes: bound live pods whose requests exceed a node's
    allocatable, or a GPU card held by two pods."""
    by_node: dict[str, list[client.V1Pod]] = defaultdict(list)
    for p in pods:
        if _live(p) and p.spec.node_name in allocatable:
            by_node[p.spec.node_name].append(p)
    found = []
    for node, here in by_node.items():
        held = sorted(f"{p.metadata.name}:{p.status.phase}" for p in here)
        found += [f"{node}: {o} after {cause}: {held}" for o in over(here, allocatable[node])]
        cards = [card for p in here for card in gpu_ids(p)]
        if len(cards) != len(set(cards)):
            found.append(f"{node}: GPU card handed out twice {sorted(cards)}: {held}")
    return found


@dataclasses.dataclass(frozen=True)
class Binding:
    pod: str
    scheduler: str
    node: str
    rv: int  # resourceVersion of the first pod event that showed it bound
    at: float  # when this test's watch saw it (monotonic)


@dataclasses.dataclass
class Overbinding:
    """A binding after which its node held more than its allocatable, with the node's pods."""

    binding: Binding
    pod: client.V1Pod
    others: list[tuple[Binding, client.V1Pod]]
    what: list[str]


class Overcommit(BindingWatch):
    """After every pod event of the namespace, checks each node's bound pods; remembers each
    pod's binding and every binding that took its node over its allocatable."""

    def __init__(self, core: client.CoreV1Api, ns: str, nodes: dict[str, dict[str, float]]):
        self.allocatable = nodes
        self.pods: dict[str, client.V1Pod] = {}
        self.bindings: dict[str, Binding] = {}
        self.overbindings: list[Overbinding] = []
        self.violations: list[str] = []
        self.events = 0
        super().__init__(core, ns)

    def on_event(self, kind: str, obj: client.V1Pod) -> None:
        name = obj.metadata.name
        if kind == "DELETED":
            self.pods.pop(name, None)
        else:
            self.pods[name] = obj
        self.events += 1
        node = obj.spec.node_name
        if node in self.allocatable and name not in self.bindings:
            b = Binding(
                name,
                obj.spec.scheduler_name,
                node,
                int(obj.metadata.resource_version),
                time.monotonic(),
            )
            self.bindings[name] = b
            here = [p for p in self.pods.values() if _live(p) and p.spec.node_name == node]
            if what := over(here, self.allocatable[node]):
                others = [
                    (self.bindings[p.metadata.name], p) for p in here if p.metadata.name != name
                ]
                self.overbindings.append(Overbinding(b, obj, others, what))
        self.violations += overcommits(self.pods.values(), self.allocatable, f"{kind} {name}")


def seen_at_recheck(log: str, namespace: str) -> dict[str, int]:
    """Pod name -> the pod watch's resourceVersion at its last passing bind re-check."""
    return {m[2]: int(m[3]) for m in RECHECK.finditer(log) if m[1] == namespace}


def sluice_at_fault(ob: Overbinding, seen: dict[str, int], allocatable: dict[str, float]) -> bool:
    """Sluice bound last, and the node was over even counting only the pods Sluice had seen
    when it re-checked the room: its own (always known to it) and other schedulers' pods whose
    binding its watch had delivered. One it had not seen yet is the race no watch closes."""
    if ob.binding.scheduler != "sluice":
        return False
    mine = seen.get(ob.binding.pod)
    if mine is None:
        return True  # bound without a re-check that let it through
    visible = [p for b, p in ob.others if b.scheduler == "sluice" or b.rv <= mine]
    return bool(over([*visible, ob.pod], allocatable))


@contextlib.contextmanager
def labelled_nodes(
    core: client.CoreV1Api, count: int, value: str
) -> Iterator[dict[str, dict[str, float]]]:
    """`count` idle GPU nodes labelled `LABEL=value` -> their allocatable. Each test labels with
    its namespace: a pod left from an earlier test (its namespace still terminating) must not
    match the next test's nodes."""
    wait_for(lambda: len(set(gpu_node_names(core)) - busy_gpu_nodes(core)) >= count, 45, "idle")
    names = sorted(set(gpu_node_names(core)) - busy_gpu_nodes(core))[:count]
    out = {}
    try:
        for n in names:
            core.patch_node(n, {"metadata": {"labels": {LABEL: value}}})
            alloc = core.read_node(n).status.allocatable
            out[n] = {k: float(parse_quantity(alloc[k])) for k in RESOURCES}
        yield out
    finally:
        for n in names:
            core.patch_node(n, {"metadata": {"labels": {LABEL: None}}})


@pytest.fixture(scope="module")
def kube_scheduler(cluster: DevCluster) -> Iterator[None]:
    cluster.start_kube_scheduler()
    try:
        yield
    finally:
        cluster.stop_process("kube-scheduler")


@pytest.fixture(scope="module")
def sluice(cluster: DevCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scheduler]:
    """One Sluice scheduler for the module (its log, at debug level, has the re-check lines)."""
    lease = f"sluice-e2e-{uuid.uuid4().hex[:8]}"
    sched = Scheduler(Path(cluster.kubeconfig), tmp_path_factory.mktemp("coexist"), lease, "a")
    sched.start()
    try:
        yield sched
    finally:
        sched.stop()
        sys.stderr.write(f"\n----- {sched.log_path} -----\n{sched.log(200)}\n")


def _pod(name: str, gpus: int, scheduler: str, namespace: str) -> dict[str, Any]:
    body = pod(name, gpus, cpu=CPU_PER_POD, annotations={"sluice.dev/complete-after": "4s"})
    body["spec"]["schedulerName"] = scheduler
    body["spec"]["nodeSelector"] = {LABEL: namespace}
    body["spec"]["containers"][0]["resources"]["requests"]["memory"] = "8Gi"
    return body


def _unschedulable(core: client.CoreV1Api, ns: str, name: str) -> bool:
    conds = core.read_namespaced_pod_status(name, ns).status.conditions or []
    return any(c.type == "PodScheduled" and c.reason == "Unschedulable" for c in conds)


def test_pods_other_schedulers_bound_are_counted_card_by_card(
    core: client.CoreV1Api,
    namespace: str,
    sluice: Scheduler,
    kube_scheduler: None,
) -> None:
    """One node (96 CPUs, 8 GPUs) already holds two pods Sluice did not bind: a DaemonSet-like
    pod placed by nodeName with card 0 named in its gpu-ids annotation (1 GPU, 40 CPUs), and
    kube-scheduler's pod with 4 GPUs and no card ids (40 CPUs): 3 GPUs and 16 CPUs are left.
    Sluice gives a 3-GPU pod three cards other than 0, and says a 4-GPU pod and a 9-CPU pod
    do not fit there (PodScheduled=False/Unschedulable) instead of binding them; from the API,
    the node is never over its allocatable and no card is held twice.

    Deterministic: Sluice sees all pods through one watch, in resourceVersion order, so the
    foreign pods (bound before Sluice's pods are created) are in its cache when it first sees
    its own. Fails on the main before 27f1d95 (run at 009694a: the core counted only the
    numbered foreign card, 7 free, so it chose the 4-GPU pod every session and the bind-time
    re-check withdrew it every time: never reported Unschedulable) and before 7f7eebf (run at
    14be25a, no re-check: the 4-GPU pod was bound beside the 3-GPU one, 12 GPUs on the node)."""
    sched = sluice
    with labelled_nodes(core, 1, namespace) as nodes:
        node = next(iter(nodes))
        daemon = pod("daemon", 1, cpu="40", annotations={GPU_IDS: "0"})
        daemon["spec"]["schedulerName"] = "default-scheduler"
        daemon["spec"]["nodeName"] = node
        core.create_namespaced_pod(namespace, daemon)
        kube = pod("kube", 4, cpu="40")
        kube["spec"]["schedulerName"] = "default-scheduler"
        kube["spec"]["nodeSelector"] = {LABEL: namespace}
        core.create_namespaced_pod(namespace, kube)
        wait_for(lambda: len(bound(core, namespace)) == 2, 60, "kube-scheduler bound its pod")
        sched.wait_ready()

        def on_node(name: str, gpus: int, cpu: str) -> None:
            body = pod(name, gpus, cpu=cpu)
            body["spec"]["nodeSelector"] = {LABEL: namespace}
            core.create_namespaced_pod(namespace, body)

        on_node("fits", 3, "8")
        wait_for(lambda: len(bound(core, namespace, "fits")) == 1, 60, "3-GPU pod bound", sched)
        on_node("gpu4", 4, "1")
        on_node("cpu9", 0, "9")  # 80 + 8 + 9 > 96

        def settled(name: str) -> bool:
            return bool(bound(core, namespace, name)) or _unschedulable(core, namespace, name)

        for name in ("gpu4", "cpu9"):
            wait_for(functools.partial(settled, name), 60, f"{name} bound or Unschedulable", sched)
        wrong = overcommits(core.list_namespaced_pod(namespace).items, nodes, "the last pods")
        assert not wrong, wrong
        assert not bound(core, namespace, "gpu4")
        assert not bound(core, namespace, "cpu9")
        cards = gpu_ids(bound(core, namespace, "fits")[0])
        assert len(cards) == 3, cards
        assert 0 not in cards, cards


def test_beside_kube_scheduler_under_load_sluice_never_binds_into_room_it_saw_taken(
    core: client.CoreV1Api, namespace: str, sluice: Scheduler, kube_scheduler: None
) -> None:
    """Three nodes take pods from both schedulers at once: kube-scheduler's (every other one
    with a GPU) and Sluice's (one GPU each), 80 in all for 24 slots, each finishing after 4 s
    so room keeps changing hands. Every binding that took a node over its allocatable is
    attributed: if Sluice bound last and the node was over even counting only the pods Sluice
    had seen when it re-checked the room, Sluice is at fault (strict). Otherwise it is the
    inherent race (kube-scheduler bound last, or Sluice's watch had not delivered the other
    binding yet), reported with how far apart the two bindings were. No GPU card is ever
    handed out twice, and both schedulers' pods all ran.

    Before 7f7eebf Sluice posted Bindings chosen from a session's snapshot after its watch had
    shown kube-scheduler filling the room (a node at 108 of 96 CPUs in session 4's runs); there
    each such binding counts as Sluice's fault (no re-check let it through). With the re-check
    switched off (an experiment on 2026-11-24's main, load ~25) one run found 1 of 15
    overcommitting bindings Sluice's fault and failed; with it, three runs found 0 of 1, 12 and
    9. Not deterministic: a run in which the schedulers happen not to collide passes anywhere;
    the deterministic regression tests are the one above and tests/unit/runtime/
    test_bind_recheck.py."""
    sluice.wait_ready()
    with labelled_nodes(core, NODES, namespace) as nodes:
        checker = Overcommit(core, namespace, nodes)
        try:
            for i in range(PER_SCHEDULER):
                core.create_namespaced_pod(
                    namespace, _pod(f"kube-{i}", i % 2, "default-scheduler", namespace)
                )
                core.create_namespaced_pod(namespace, _pod(f"sluice-{i}", 1, "sluice", namespace))

            def all_done() -> bool:
                done = [p for p in list(checker.pods.values()) if p.status.phase == "Succeeded"]
                return len(done) == 2 * PER_SCHEDULER

            wait_for(all_done, 180, "every pod of both schedulers ran and finished", sluice)
        finally:
            checker.stop()
    assert checker.events, "the watch saw nothing"
    both = {b.scheduler for b in checker.bindings.values()}
    assert both == {"default-scheduler", "sluice"}, both
    assert not [v for v in checker.violations if "twice" in v], checker.violations[:5]
    seen = seen_at_recheck(sluice.log_path.read_text(errors="replace"), namespace)
    faults, races = [], []
    for ob in checker.overbindings:
        line = f"{ob.binding.pod} on {ob.binding.node}: {', '.join(ob.what)}"
        if sluice_at_fault(ob, seen, nodes[ob.binding.node]):
            faults.append(line)
            continue
        rivals = [b for b, _ in ob.others if b.scheduler != ob.binding.scheduler]
        last = max(rivals, key=lambda b: b.rv, default=None)
        gap = f"{ob.binding.at - last.at:.3f} s after {last.pod}" if last else "no rival"
        if last and ob.binding.scheduler == "sluice":
            gap += f" (bound at rv {last.rv}; Sluice's watch was at rv {seen[ob.binding.pod]})"
        races.append(f"{line}; {ob.binding.scheduler} bound last, {gap}")
    print(f"overcommits: {len(faults)} Sluice's fault, {len(races)} races", *races, sep="\n")
    assert not faults, "\n".join(faults + races)
