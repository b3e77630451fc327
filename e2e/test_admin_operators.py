"""The pool, queue and podgroup operators (and the `sluice` CLI) on the real local control plane.

All operators run as one `python -m operators all` process for the module. The tests share the
sample pools and queues (manifests/samples) and remove them at the end, so later modules see the
cluster as it was (every node back in `default`).
"""

from __future__ import annotations

import contextlib
import datetime
import json
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from operators.api import labels as L
from operators.api.scheduling import PodGroup, Queue
from operators.devcluster import waiting
from operators.devcluster.processes import dies_with_parent, free_port

from .scheduler_kit import GPU, pod

REPO = Path(__file__).resolve().parents[1]
SAMPLES = REPO / "manifests" / "samples"
GROUP, VERSION = "scheduling.sluice.dev", "v1alpha1"
SAMPLE_POOLS = ("cpu-pool", "gpu-pool", "masters")
SAMPLE_QUEUES = ("research", "research-vision", "vision-detection")


class Operators:
    def __init__(self, kubeconfig: str, log_path: Path) -> None:
        self.log_path = log_path
        self.lease = f"sluice-e2e-admin-{uuid.uuid4().hex[:6]}"
        cmd = [
            sys.executable,
            "-m",
            "operators",
            "all",
            f"--kubeconfig={kubeconfig}",
            f"--metrics-port={free_port()}",
            "--metrics-host=127.0.0.1",
            "--jobs-health-port=0",  # tests run side by side: no fixed port
            "--events-health-port=0",
            f"--lease-name={self.lease}",
            "--lease-duration-seconds=6",
            "--renew-deadline-seconds=4",
            "--retry-period-seconds=1",
        ]
        with log_path.open("ab") as out:
            self.proc = subprocess.Popen(
                cmd,
                stdout=out,
                stderr=subprocess.STDOUT,
                preexec_fn=dies_with_parent(),  # noqa: PLW1509 - see dies_with_parent
            )

    def log(self, lines: int = 80) -> str:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(20)
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


@pytest.fixture(scope="module")
def operators(cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Operators]:
    ops = Operators(str(cluster.kubeconfig), tmp_path_factory.mktemp("ops") / "operators.log")
    # Importing kopf can take long on a busy machine: the tests' waits start once all are up.
    wait_for(
        lambda: all(
            f"operator {n} started" in ops.log(10_000) for n in ("pool", "queue", "podgroup")
        ),
        "the pool, queue and podgroup operators to start",
        ops,
        timeout=300,
    )
    yield ops
    ops.stop()
    sys.stderr.write(f"\n----- {ops.log_path} -----\n{ops.log(200)}\n")


def wait_for(predicate: Callable[[], Any], what: str, ops: Operators, timeout: float = 90) -> Any:
    try:
        return waiting.wait_for(predicate, timeout=timeout, interval=0.3, what=what)
    except TimeoutError as exc:
        raise AssertionError(f"{exc}\noperators log:\n{ops.log()}") from exc


def get(custom: client.CustomObjectsApi, plural: str, name: str) -> dict[str, Any] | None:
    try:
        obj: dict[str, Any] = custom.get_cluster_custom_object(GROUP, VERSION, plural, name)
    except client.ApiException as err:
        if err.status == 404:
            return None
        raise
    return obj


def status(custom: client.CustomObjectsApi, plural: str, name: str) -> dict[str, Any]:
    return (get(custom, plural, name) or {}).get("status") or {}


def condition(obj_status: dict[str, Any], type_: str) -> dict[str, Any]:
    return next((c for c in obj_status.get("conditions") or () if c["type"] == type_), {})


def pool_labels(core: client.CoreV1Api) -> dict[str, str]:
    return {
        n.metadata.name: (n.metadata.labels or {}).get(L.POOL, "") for n in core.list_node().items
    }


def delete(custom: client.CustomObjectsApi, plural: str, name: str) -> None:
    with contextlib.suppress(client.ApiException):
        custom.delete_cluster_custom_object(GROUP, VERSION, plural, name)


@pytest.fixture(scope="module")
def samples(
    kubectl: Any, core: client.CoreV1Api, custom: client.CustomObjectsApi, operators: Operators
) -> Iterator[None]:
    kubectl("apply", "-f", str(SAMPLES / "pools.yaml"), "-f", str(SAMPLES / "queues.yaml"))
    yield
    for name in SAMPLE_QUEUES:
        delete(custom, Queue.plural, name)
    for name in SAMPLE_POOLS:
        delete(custom, "pools", name)
    # Leave every node in default for the modules that follow.
    wait_for(
        lambda: set(pool_labels(core).values()) == {"default"}, "nodes back in default", operators
    )


def test_node_labels_move_nodes_between_pools(
    samples: None, core: client.CoreV1Api, custom: client.CustomObjectsApi, operators: Operators
) -> None:
    nodes = pool_labels(core)
    gpu_nodes = sorted(n for n in nodes if n != "master-0")

    def settled() -> bool:
        labels = pool_labels(core)
        return labels["master-0"] == "masters" and all(labels[n] == "gpu-pool" for n in gpu_nodes)

    wait_for(settled, "sample pools' membership on the nodes", operators)
    assert get(custom, "pools", "default") is not None  # built in, created by the operator
    wait_for(
        lambda: status(custom, "pools", "gpu-pool").get("nodeCount") == len(gpu_nodes),
        "gpu-pool nodeCount",
        operators,
    )
    assert status(custom, "pools", "masters")["nodeCount"] == 1

    # A node whose class label changes moves to the pool that now selects it.
    moved, contested = gpu_nodes[0], gpu_nodes[1]
    core.patch_node(moved, {"metadata": {"labels": {"node.sluice.dev/pool": "cpu"}}})
    wait_for(lambda: pool_labels(core)[moved] == "cpu-pool", "node moved to cpu-pool", operators)

    # A node two pools select goes to default, and both pools say so.
    custom.create_cluster_custom_object(
        GROUP,
        VERSION,
        "pools",
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "Pool",
            "metadata": {"name": "e2e-overlap"},
            "spec": {"nodeSelector": {"matchLabels": {"kubernetes.io/hostname": contested}}},
        },
    )
    try:
        wait_for(
            lambda: pool_labels(core)[contested] == "default", "conflict in default", operators
        )
        wait_for(
            lambda: (
                condition(status(custom, "pools", "e2e-overlap"), "SelectorOverlap").get("status")
                == "True"
            ),
            "SelectorOverlap on the new pool",
            operators,
        )
        assert (
            contested
            in condition(status(custom, "pools", "gpu-pool"), "SelectorOverlap")["message"]
        )
    finally:
        delete(custom, "pools", "e2e-overlap")
    wait_for(lambda: pool_labels(core)[contested] == "gpu-pool", "conflict resolved", operators)

    # Deleting a pool returns its nodes to default.
    delete(custom, "pools", "cpu-pool")
    wait_for(lambda: pool_labels(core)[moved] == "default", "deleted pool's node", operators)
    core.patch_node(moved, {"metadata": {"labels": {"node.sluice.dev/pool": "gpu"}}})
    kubectl_apply_pools(custom)
    wait_for(lambda: pool_labels(core)[moved] == "gpu-pool", "node back in gpu-pool", operators)


def kubectl_apply_pools(custom: client.CustomObjectsApi) -> None:
    """Re-create cpu-pool as in the samples (the test deleted it)."""
    custom.create_cluster_custom_object(
        GROUP,
        VERSION,
        "pools",
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "Pool",
            "metadata": {"name": "cpu-pool"},
            "spec": {"nodeSelector": {"matchLabels": {"node.sluice.dev/pool": "cpu"}}},
        },
    )


def bound_gpus_by_pool(core: client.CoreV1Api) -> dict[str, int]:
    """GPUs held by live Sluice pods, per pool of the node they are bound to (from the API)."""
    labels = pool_labels(core)
    out: dict[str, int] = {}
    for p in core.list_pod_for_all_namespaces().items:
        if p.spec.scheduler_name != "sluice" or not p.spec.node_name:
            continue
        if p.status.phase in ("Succeeded", "Failed"):
            continue
        gpus = sum(
            int(((c.resources and c.resources.limits) or {}).get(GPU, 0)) for c in p.spec.containers
        )
        pool = labels.get(p.spec.node_name, "default")
        out[pool] = out.get(pool, 0) + gpus
    return out


def test_pool_status_equals_what_is_bound_and_the_cli_shows_it(
    samples: None,
    core: client.CoreV1Api,
    custom: client.CustomObjectsApi,
    namespace: str,
    operators: Operators,
    cluster: Any,
) -> None:
    for i in range(3):
        core.create_namespaced_pod(
            namespace, pod(f"w-{i}", 2, cpu="2", annotations={L.POOL: "gpu-pool"})
        )
    wait_for(
        lambda: all(p.spec.node_name for p in core.list_namespaced_pod(namespace).items),
        "pods bound",
        operators,
    )

    def agrees() -> bool:
        used = status(custom, "pools", "gpu-pool").get("used") or {}
        return int(used.get(GPU, 0)) == bound_gpus_by_pool(core).get("gpu-pool", 0) >= 6

    wait_for(agrees, "gpu-pool status.used equal to the GPUs bound there", operators)

    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "operators.cli.main",
            "pools",
            "-o",
            "json",
            f"--kubeconfig={cluster.kubeconfig}",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    report = {p["name"]: p for p in json.loads(out.stdout)["pools"]}
    assert report["masters"]["flags"] == "pbs"
    assert int(report["gpu-pool"]["resources"][GPU]["used"]) >= 6


def queue(name: str, parent: str, gpus: int) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Queue",
        "metadata": {"name": name},
        "spec": {"parent": parent, "guarantee": {GPU: str(gpus)}},
    }


def test_queue_tree_flags_an_invalid_child_and_closing_waits_for_running_work(
    samples: None,
    kubectl: Any,
    core: client.CoreV1Api,
    custom: client.CustomObjectsApi,
    namespace: str,
    operators: Operators,
) -> None:
    def valid(name: str) -> str | None:
        return condition(status(custom, Queue.plural, name), "Valid").get("status")

    names = ("root", "default", *SAMPLE_QUEUES)
    wait_for(
        lambda: all(valid(n) == "True" for n in names),
        "built-in and sample queues valid",
        operators,
    )
    # research-vision guarantees 16 GPUs and vision-detection takes 8: 12 more do not fit.
    custom.create_cluster_custom_object(
        GROUP, VERSION, Queue.plural, queue("vision-greedy", "research-vision", 12)
    )
    try:
        wait_for(lambda: valid("vision-greedy") == "False", "greedy child flagged", operators)
        why = condition(status(custom, Queue.plural, "vision-greedy"), "Valid")
        assert why["reason"] == "GuaranteeOvercommitted"
        table = kubectl("get", Queue.plural, "vision-greedy").stdout.splitlines()
        assert "VALID" in table[0].split()
        assert "False" in table[1].split()
        assert all(valid(n) == "True" for n in SAMPLE_QUEUES)
        events = core.list_namespaced_event(
            "default", field_selector="involvedObject.name=vision-greedy"
        ).items
        assert any(e.reason == "GuaranteeOvercommitted" for e in events)

        # The flagged queue admits nothing (the scheduler reads Valid=False as closed); its
        # sibling keeps working.
        core.create_namespaced_pod(
            namespace, pod("greedy-0", 1, cpu="2", labels={L.QUEUE: "vision-greedy"})
        )
        custom.create_namespaced_custom_object(
            GROUP,
            VERSION,
            namespace,
            PodGroup.plural,
            {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": "PodGroup",
                "metadata": {"name": "det"},
                "spec": {"minMember": 1, "queue": "vision-detection", "pool": "gpu-pool"},
            },
        )
        core.create_namespaced_pod(
            namespace,
            pod(
                "det-0",
                1,
                cpu="2",
                annotations={L.POD_GROUP: "det", "sluice.dev/complete-after": "6s"},
            ),
        )
        wait_for(
            lambda: core.read_namespaced_pod("det-0", namespace).spec.node_name,
            "sibling's pod bound",
            operators,
        )
        assert not core.read_namespaced_pod("greedy-0", namespace).spec.node_name

        # Closing with work running: Closing, then Closed when the work has finished.
        custom.patch_cluster_custom_object(
            GROUP, VERSION, Queue.plural, "vision-detection", {"spec": {"state": "Closed"}}
        )
        wait_for(
            lambda: status(custom, Queue.plural, "vision-detection").get("state") == "Closing",
            "Closing while det runs",
            operators,
        )
        wait_for(
            lambda: status(custom, Queue.plural, "vision-detection").get("state") == "Closed",
            "Closed once det completed",
            operators,
        )
        group = custom.get_namespaced_custom_object(
            GROUP, VERSION, namespace, PodGroup.plural, "det"
        )
        assert group["status"]["phase"] == "Completed"
        assert group["status"]["succeeded"] == 1
    finally:
        delete(custom, Queue.plural, "vision-greedy")


def test_why_explains_a_pod_naming_a_missing_podgroup(
    samples: None, core: client.CoreV1Api, namespace: str, operators: Operators, cluster: Any
) -> None:
    core.create_namespaced_pod(
        namespace, pod("lost-0", 1, cpu="2", annotations={L.VOLCANO_GROUP_NAME: "nope"})
    )
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "operators.cli.main",
            "why",
            "pod/lost-0",
            "-n",
            namespace,
            f"--kubeconfig={cluster.kubeconfig}",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert "PodGroup 'nope' does not exist" in out.stdout
    assert "create the PodGroup" in out.stdout


def pool_of_hosts(name: str, hosts: list[str], **flags: bool) -> dict[str, Any]:
    selector = {
        "matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": hosts}]
    }
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Pool",
        "metadata": {"name": name},
        "spec": {"nodeSelector": selector, **flags},
    }


@contextlib.contextmanager
def nodes_of_own_pools(
    core: client.CoreV1Api, custom: client.CustomObjectsApi, operators: Operators, count: int
) -> Iterator[list[str]]:
    """`count` GPU nodes with nothing bound, taken out of gpu-pool (their class label changes) for
    pools the test makes; given back to gpu-pool afterwards."""

    def free() -> list[str]:
        busy = {p.spec.node_name for p in core.list_pod_for_all_namespaces().items}
        labels = pool_labels(core)
        return sorted(n for n, pool in labels.items() if pool == "gpu-pool" and n not in busy)

    wait_for(lambda: len(free()) >= count, f"{count} idle nodes in gpu-pool", operators)
    hosts = free()[-count:]
    for host in hosts:
        core.patch_node(host, {"metadata": {"labels": {"node.sluice.dev/pool": "e2e"}}})
    try:
        yield hosts
    finally:
        for host in hosts:
            core.patch_node(host, {"metadata": {"labels": {"node.sluice.dev/pool": "gpu"}}})
        wait_for(
            lambda: all(pool_labels(core)[h] == "gpu-pool" for h in hosts),
            "nodes back in gpu-pool",
            operators,
        )


def node_of(core: client.CoreV1Api, namespace: str, name: str) -> str | None:
    try:
        node: str | None = core.read_namespaced_pod(name, namespace).spec.node_name
    except client.ApiException as err:
        if err.status == 404:
            return None
        raise
    return node


def test_a_selector_change_makes_tasks_on_departed_nodes_borrowed_and_reclaimable(
    samples: None,
    core: client.CoreV1Api,
    custom: client.CustomObjectsApi,
    namespace: str,
    operators: Operators,
) -> None:
    with nodes_of_own_pools(core, custom, operators, 2) as (lent, home):
        pools = {"e2e-lender": [lent], "e2e-owner": [home]}
        for name, hosts in pools.items():
            custom.create_cluster_custom_object(GROUP, VERSION, "pools", pool_of_hosts(name, hosts))
        try:
            wait_for(
                lambda: pool_labels(core)[lent] == "e2e-lender", "lender owns its node", operators
            )
            core.create_namespaced_pod(
                namespace, pod("guest", 8, cpu="2", annotations={L.POOL: "e2e-lender"})
            )
            wait_for(lambda: node_of(core, namespace, "guest") == lent, "guest placed", operators)

            # The lender's node moves to the owner: the guest, still running there, is borrowed.
            custom.patch_cluster_custom_object(
                GROUP, VERSION, "pools", "e2e-lender", pool_of_hosts("e2e-lender", ["e2e-none"])
            )
            custom.patch_cluster_custom_object(
                GROUP, VERSION, "pools", "e2e-owner", pool_of_hosts("e2e-owner", [lent, home])
            )
            wait_for(lambda: pool_labels(core)[lent] == "e2e-owner", "node moved", operators)
            wait_for(
                lambda: (status(custom, "pools", "e2e-owner").get("shared") or {}).get(GPU) == "8",
                "the guest's 8 GPUs shown as shared in the owner pool",
                operators,
            )

            # The owner's own work needs both nodes: the borrowed guest is reclaimed.
            for name in ("own-0", "own-1"):
                core.create_namespaced_pod(
                    namespace, pod(name, 8, cpu="2", annotations={L.POOL: "e2e-owner"})
                )
            wait_for(
                lambda: {node_of(core, namespace, n) for n in ("own-0", "own-1")} == {lent, home},
                "the owner's pods on both of its nodes",
                operators,
            )
            assert node_of(core, namespace, "guest") is None  # evicted, not re-created
        finally:
            for name in pools:
                delete(custom, "pools", name)


def test_a_deleted_pools_pending_work_is_scheduled_in_default(
    samples: None,
    core: client.CoreV1Api,
    custom: client.CustomObjectsApi,
    namespace: str,
    operators: Operators,
) -> None:
    with nodes_of_own_pools(core, custom, operators, 2) as (own, spare):
        # `spare` is in default; the pool may not borrow it, so its second pod has to wait.
        # (The two pods are created within one second: `first` is placed first because the
        # scheduler serves same-second arrivals in order; see tests/unit/runtime/
        # test_arrival_order.py.)
        custom.create_cluster_custom_object(
            GROUP, VERSION, "pools", pool_of_hosts("e2e-gone", [own], disableBorrowing=True)
        )
        try:
            wait_for(lambda: pool_labels(core)[own] == "e2e-gone", "the pool's node", operators)
            for name in ("first", "waiting"):
                core.create_namespaced_pod(
                    namespace, pod(name, 8, cpu="2", annotations={L.POOL: "e2e-gone"})
                )
            wait_for(lambda: node_of(core, namespace, "first") == own, "first placed", operators)

            def told_to_wait() -> bool:
                conds = core.read_namespaced_pod("waiting", namespace).status.conditions or ()
                return any(c.type == "PodScheduled" and c.status == "False" for c in conds)

            wait_for(told_to_wait, "the second pod told why it waits", operators)
            assert node_of(core, namespace, "waiting") is None
        finally:
            delete(custom, "pools", "e2e-gone")
        wait_for(lambda: pool_labels(core)[own] == "default", "the node back in default", operators)
        wait_for(
            lambda: node_of(core, namespace, "waiting") == spare,
            "the waiting pod scheduled as default's work",
            operators,
        )


def test_losing_the_lease_stands_the_scheduler_down_not_the_process(
    samples: None,
    k8s: client.ApiClient,
    core: client.CoreV1Api,
    namespace: str,
    operators: Operators,
) -> None:
    leases = client.CoordinationV1Api(k8s)
    lost = "lost the scheduler lease"

    def held() -> Any:
        try:
            lease = leases.read_namespaced_lease(operators.lease, "kube-system")
        except client.ApiException as err:
            if err.status == 404:
                return None
            raise
        return lease if lease.spec.holder_identity else None

    ours = wait_for(held, "the scheduler to hold its lease", operators).spec.holder_identity
    losses = operators.log(100_000).count(lost)  # a busy machine may already have made some

    def taken() -> Any:
        """Another candidate takes the lease for 3 s, as a standby does after a missed renewal."""
        lease = wait_for(held, "the scheduler to hold its lease", operators)
        lease.spec.holder_identity = "e2e-other"
        lease.spec.lease_duration_seconds = 3
        lease.spec.renew_time = datetime.datetime.now(datetime.UTC)
        lease.spec.lease_transitions = (lease.spec.lease_transitions or 0) + 1
        try:
            leases.replace_namespaced_lease(operators.lease, "kube-system", lease)
        except client.ApiException as err:
            if err.status == 409:  # renewed meanwhile: read it again
                return None
            raise
        return lease.spec.lease_transitions

    term = wait_for(taken, "the lease taken by another holder", operators)
    wait_for(
        lambda: operators.log(100_000).count(lost) > losses, "the scheduler stands down", operators
    )
    core.create_namespaced_pod(
        namespace, pod("after-lease", 1, cpu="2", annotations={L.POOL: "gpu-pool"})
    )
    # The same process campaigns again, wins once the other holder's lease expires, and binds.
    wait_for(lambda: node_of(core, namespace, "after-lease"), "bound after re-election", operators)
    assert operators.proc.poll() is None
    lease = leases.read_namespaced_lease(operators.lease, "kube-system")
    assert lease.spec.holder_identity == ours
    assert lease.spec.lease_transitions > term
