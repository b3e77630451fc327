"""Session-wide real cluster for end-to-end tests (etcd + kube-apiserver + KCM + kwok).

Fixtures (stable names; later tests build on them):
- `cluster`   session: a running `DevCluster` (small profile) with crds/ applied and Established.
- `kubectl`   session: `kubectl(*args, input=None, check=True) -> CompletedProcess[str]`.
- `k8s`       session: a sync `kubernetes.client.ApiClient` logged in as cluster admin.
- `namespace` function: a fresh namespace, deleted after the test.
- `core`, `custom` session: CoreV1Api / CustomObjectsApi on `k8s`.
- `start_scheduler` function: `start_scheduler(*flags, identity="a") -> Scheduler`, a
  `python -m operators scheduler` process on a Lease of the test's own (e2e/scheduler_kit.py),
  stopped after the test.
- `free_nodes` function: how many of the session's GPU nodes are wholly idle (at least 6).
- `receiver` function: a CloudEvents receiver on 127.0.0.1 (e2e/events_kit.py); `sinks`
  function: `sinks(url, extra_spec) -> name` creates an EventSink, deleted after the test.
Component logs live under the session's temp folder; a failing test prints their last lines.

Bring your own cluster: with SLUICE_BYO_CLUSTER=1 (`make e2e BYO=1`) the suite runs against the
cluster in $KUBECONFIG (cluster-admin rights, the small profile's kwok nodes: docs/install.md)
instead of starting one, and leaves out the tests of the local control plane itself.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol

import pytest
from kubernetes import client

from operators.devcluster.cluster import DevCluster, kubectl_binary
from operators.devcluster.demo import apply_crds
from operators.devcluster.existing import ExistingCluster, byo_kubeconfig, byo_requested

from .events_kit import MakeSink, Receiver
from .scheduler_kit import GPU, NODE_GPUS, Scheduler, busy_gpu_nodes, wait_for

E2E_PROFILE = os.environ.get("SLUICE_E2E_PROFILE", "small")
_cluster_ref: list[DevCluster] = []


class Kubectl(Protocol):
    def __call__(
        self, *args: str, input: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]: ...


# Under pytest-xdist (`make e2e E2E_WORKERS=2`) the modules that take longest run first: whole
# modules are handed out in this order, so the last to start is a short one and the workers finish
# together. Only the order depends on this list (serial runs keep file order); a module missing
# from it runs after these. Measured serially at load ~30 (setup + call + teardown), longest first.
LONGEST_FIRST = (
    "test_scheduler",
    "test_events",
    "test_jobs",
    "test_byo_cluster",
    "test_pool_borrowing",
    "test_delayed_preemption",
    "test_install_manifests",
    "test_preemption",
    "test_bench_smoke",
    "test_queue_reclaim",
    "test_admin_operators",
    "test_volcano_migration",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if hasattr(config, "workerinput"):  # an xdist worker: all of them sort alike
        rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
        items.sort(key=lambda item: rank.get(item.path.stem, len(rank)))
    if not byo_requested():
        return
    kept = [i for i in items if i.get_closest_marker("devcluster") is None]
    config.hook.pytest_deselected(items=[i for i in items if i not in kept])
    items[:] = kept


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevCluster]:
    if byo_requested():
        dev: DevCluster = ExistingCluster(byo_kubeconfig(), tmp_path_factory.mktemp("byo"))
    else:
        dev = DevCluster(tmp_path_factory.mktemp("devcluster"))
    _cluster_ref.append(dev)
    dev.up(profile=E2E_PROFILE)
    apply_crds(dev)
    try:
        yield dev
    finally:
        dev.down()
        _cluster_ref.clear()


@pytest.fixture(scope="session")
def kubectl(cluster: DevCluster) -> Kubectl:
    binary = kubectl_binary()

    def run(
        *args: str, input: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [binary, f"--kubeconfig={cluster.kubeconfig}", *args],
            input=input,
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )
        if check and result.returncode != 0:
            raise AssertionError(
                f"kubectl {' '.join(args)} failed ({result.returncode}):\n{result.stderr}"
            )
        return result

    return run


@pytest.fixture(scope="session")
def k8s(cluster: DevCluster) -> client.ApiClient:
    api: client.ApiClient = cluster.api()
    return api


@pytest.fixture
def namespace(k8s: client.ApiClient) -> Iterator[str]:
    name = f"e2e-{uuid.uuid4().hex[:8]}"
    core = client.CoreV1Api(k8s)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    try:
        yield name
    finally:
        core.delete_namespace(name, propagation_policy="Background")


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    rec = Receiver()
    rec.up()
    try:
        yield rec
    finally:
        rec.down()


@pytest.fixture
def sinks(k8s: client.ApiClient) -> Iterator[MakeSink]:
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


@pytest.fixture(scope="session")
def core(k8s: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(k8s)


@pytest.fixture(scope="session")
def custom(k8s: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(k8s)


@pytest.fixture
def start_scheduler(cluster: DevCluster, tmp_path: Path) -> Iterator[Callable[..., Scheduler]]:
    lease = f"sluice-e2e-{uuid.uuid4().hex[:8]}"
    started: list[Scheduler] = []

    def start(*extra: str, identity: str = "a") -> Scheduler:
        sched = Scheduler(Path(cluster.kubeconfig), tmp_path, lease, identity).start(*extra)
        started.append(sched)
        return sched

    yield start
    for sched in started:
        sched.stop()
    # Captured by pytest and shown only when the test fails.
    for sched in started:
        sys.stderr.write(f"\n----- {sched.log_path} -----\n{sched.log(200)}\n")


@pytest.fixture
def free_nodes(core: client.CoreV1Api) -> int:
    """GPU nodes with every GPU free. Earlier tests' namespaces may still be terminating: wait a
    little for them, then size the test to whatever is free (at least 6 nodes)."""
    gpu_nodes = [
        n.metadata.name
        for n in core.list_node().items
        if int((n.status.allocatable or {}).get(GPU, 0)) == NODE_GPUS
    ]
    with contextlib.suppress(AssertionError):
        wait_for(lambda: not busy_gpu_nodes(core), 45, "GPUs released by earlier tests")
    free = len(set(gpu_nodes) - busy_gpu_nodes(core))
    # A skip here would hide a leak from an earlier test; fail and name it instead.
    assert free >= 6, f"only {free} idle GPU nodes: an earlier test left pods holding GPUs"
    return free


def component_logs(lines: int = 40) -> str:
    if not _cluster_ref:
        return ""
    out = []
    for log in sorted(Path(_cluster_ref[0].logs_dir).glob("*.log")):
        tail = log.read_text(errors="replace").splitlines()[-lines:]
        out.append(f"----- {log} (last {len(tail)} lines) -----\n" + "\n".join(tail))
    return "\n".join(out)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[Any]) -> Any:
    report = yield
    if report.failed and _cluster_ref:
        report.sections.append(("control-plane logs", component_logs()))
    return report
