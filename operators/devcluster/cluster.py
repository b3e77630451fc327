"""The dev cluster: etcd + kube-apiserver + kube-controller-manager + kwok as local processes.

`DevCluster.up()` starts everything, creates the profile's fake nodes and waits until they are
Ready; `down()` stops every process it started (also from another process: the pids and ports live
in `<state_dir>/state.json`). Any failure on the way up stops what was started and raises a
`DevClusterError` that says what broke, with the last lines of the failing component's log.
"""

from __future__ import annotations

import json
import os
import shutil
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from operators.devcluster import pki, processes, profiles
from operators.devcluster.errors import DevClusterError
from operators.devcluster.processes import Proc
from operators.devcluster.versions import COMPONENTS, bin_dir, binary_path

KCM_CONTROLLERS = (
    "job-controller",
    "garbage-collector-controller",
    "namespace-controller",
    "serviceaccount-controller",
    "serviceaccount-token-controller",
    "node-lifecycle-controller",
    "ttl-after-finished-controller",
    "pod-garbage-collector-controller",
    "replicaset-controller",
    "deployment-controller",
    "cronjob-controller",
    "disruption-controller",
)
# kwok renews each node's Lease; a long lease keeps 1,000 fake nodes from flooding the API
# server with renewals, and the node-lifecycle controller's grace period must outlast it.
NODE_LEASE_SECONDS = 120
NODE_MONITOR_GRACE = "300s"


def default_state_dir() -> Path:
    env = os.environ.get("SLUICE_STATE_DIR")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[2] / ".sluice" / "dev"


def kubectl_binary() -> str:
    """Our version-matched build when present, else the machine's kubectl."""
    built = binary_path("kubectl")
    if os.access(built, os.X_OK):
        return str(built)
    found = shutil.which("kubectl")
    if found is None:
        raise DevClusterError("kubectl is not installed", "run `make setup`, which builds one")
    return found


@dataclass
class ClusterState:
    profile: str
    nodes: int
    apiserver_port: int
    etcd_port: int
    etcd_peer_port: int
    kubeconfig: str
    procs: list[dict[str, Any]] = field(default_factory=list)
    started_at: float = 0.0
    ready_seconds: float = 0.0

    def processes(self) -> list[Proc]:
        return [
            Proc(name=p["name"], pid=p["pid"], binary=p["binary"], log=Path(p["log"]))
            for p in self.procs
        ]


def with_flags(args: list[str], flags: Mapping[str, str]) -> list[str]:
    """`args` with each `--flag=value` of `flags` replaced, or appended when absent."""
    out = [a for a in args if a.split("=", 1)[0] not in flags]
    return out + [f"{flag}={value}" for flag, value in flags.items()]


def _etcd_post(url: str, body: dict[str, Any]) -> dict[str, Any]:
    request = urllib.request.Request(
        url, json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=30) as resp:
        answer: dict[str, Any] = json.loads(resp.read())
    return answer


class DevCluster:
    """One local cluster rooted at `state_dir` (PKI, etcd data, logs, kubeconfig, state.json).

    Its processes die with the Python process that started them (tests, benchmarks), even when
    that one is SIGKILLed; `die_with_parent=False` (the `up`/`run` CLI) lets them outlive it
    until `make cluster-down`."""

    def __init__(self, state_dir: Path | None = None, *, die_with_parent: bool = True) -> None:
        self.die_with_parent = die_with_parent
        self.state_dir = (state_dir or default_state_dir()).resolve()
        self.kubeconfig = self.state_dir / "kubeconfig"
        self.logs_dir = self.state_dir / "logs"
        self._state_file = self.state_dir / "state.json"

    # -- state ---------------------------------------------------------------------------
    def state(self) -> ClusterState | None:
        try:
            raw = json.loads(self._state_file.read_text())
        except (OSError, ValueError):
            return None
        return ClusterState(**raw)

    def _save(self, state: ClusterState) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        tmp = self._state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(state), indent=2))
        tmp.replace(self._state_file)

    def running(self) -> bool:
        state = self.state()
        return state is not None and all(processes.alive(p) for p in state.processes())

    @property
    def server(self) -> str:
        state = self.state()
        if state is None:
            raise DevClusterError("no cluster state", "run `make cluster-up` first")
        return f"https://127.0.0.1:{state.apiserver_port}"

    # -- up ------------------------------------------------------------------------------
    def up(
        self,
        profile: str = "small",
        nodes: int | None = None,
        apiserver_port: int = 0,
        etcd_port: int = 0,
        log: Callable[[str], None] = lambda _msg: None,
        timeout: float = 180.0,
    ) -> ClusterState:
        if self.running():
            state = self.state()
            assert state is not None
            log(
                f"cluster already running in {self.state_dir} ({state.profile} profile, "
                f"{state.nodes} nodes); `make cluster-down` first for another profile"
            )
            return state
        self._stop_leftovers()
        node_objects = profiles.nodes_for(profile, nodes)  # validates before starting anything
        self._check_binaries()
        for port, flag in ((apiserver_port, "--apiserver-port"), (etcd_port, "--etcd-port")):
            if port:
                processes.ensure_port_free(port, flag)
        started = time.monotonic()
        shutil.rmtree(self.state_dir, ignore_errors=True)
        self.state_dir.mkdir(parents=True)
        keys = pki.generate(self.state_dir / "pki")
        state = ClusterState(
            profile=profile,
            nodes=len(node_objects),
            apiserver_port=apiserver_port or processes.free_port(),
            etcd_port=etcd_port or processes.free_port(),
            etcd_peer_port=processes.free_port(),
            kubeconfig=str(self.kubeconfig),
            started_at=time.time(),
        )
        self.kubeconfig.write_text(
            pki.kubeconfig(keys, f"https://127.0.0.1:{state.apiserver_port}")
        )
        try:
            log(f"starting etcd on 127.0.0.1:{state.etcd_port}")
            self._start(state, "etcd", self._etcd_args(state))
            self._wait(state, "etcd", lambda: self._etcd_healthy(state), timeout)
            log(f"starting kube-apiserver on https://127.0.0.1:{state.apiserver_port}")
            self._start(state, "kube-apiserver", self._apiserver_args(state, keys))
            self._wait(state, "kube-apiserver", lambda: self._readyz(state, keys), timeout)
            log("starting kube-controller-manager and kwok")
            self._start(state, "kube-controller-manager", self._kcm_args(keys))
            self._start(state, "kwok", self._kwok_args())
            log(f"creating {len(node_objects)} fake nodes ({profile} profile)")
            self.create_nodes(node_objects)
            self._wait(
                state,
                "kwok",
                lambda: self._ready_nodes() >= len(node_objects),
                timeout + len(node_objects) * 0.2,
                what=f"{len(node_objects)} Ready nodes",
            )
            self._wait(
                state,
                "kube-controller-manager",
                self._default_service_account_exists,
                timeout,
                what="the default ServiceAccount",
            )
        except BaseException:
            self.down()
            raise
        state.ready_seconds = time.monotonic() - started
        self._save(state)
        log(f"ready in {state.ready_seconds:.1f} s; kubeconfig: {self.kubeconfig}")
        return state

    def _check_binaries(self) -> None:
        missing = [
            str(bin_dir(c) / name)
            for c in COMPONENTS
            if c.cluster
            for name, _ in c.packages
            if not os.access(bin_dir(c) / name, os.X_OK)
        ]
        if missing:
            raise DevClusterError(
                "control-plane binaries are not built: " + ", ".join(missing),
                "run `make setup` (the first build takes about 9 minutes)",
            )

    def _start(self, state: ClusterState, name: str, args: list[str]) -> Proc:
        proc = processes.spawn(
            name, args, self.logs_dir / f"{name}.log", die_with_parent=self.die_with_parent
        )
        state.procs.append(
            {
                "name": proc.name,
                "pid": proc.pid,
                "binary": proc.binary,
                "log": str(proc.log),
                "args": args,
            }
        )
        self._save(state)
        return proc

    def _wait(
        self,
        state: ClusterState,
        name: str,
        ready: Callable[[], bool],
        timeout: float,
        what: str = "",
    ) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for proc in state.processes():
                if not processes.alive(proc):
                    raise DevClusterError(
                        f"{proc.name} exited while starting; last lines of {proc.log}:\n"
                        + processes.log_tail(proc),
                        "read the log above; a port in use or a stale data dir are the usual "
                        "causes (`make cluster-down` cleans up)",
                    )
            if ready():
                return
            time.sleep(0.25)
        proc = next(p for p in state.processes() if p.name == name)
        raise DevClusterError(
            f"timed out after {timeout:.0f} s waiting for {what or name}; last lines of "
            f"{proc.log}:\n" + processes.log_tail(proc),
            "the machine may be overloaded; retry, or raise the timeout",
        )

    # -- component flags -----------------------------------------------------------------
    def _etcd_args(self, state: ClusterState) -> list[str]:
        peer = f"http://127.0.0.1:{state.etcd_peer_port}"
        client = f"http://127.0.0.1:{state.etcd_port}"
        return [
            str(binary_path("etcd")),
            "--name=sluice",
            f"--data-dir={self.state_dir / 'etcd'}",
            f"--listen-client-urls={client}",
            f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=sluice={peer}",
            "--unsafe-no-fsync",  # test data; fsync would dominate on a shared disk
            "--quota-backend-bytes=8589934592",
            "--log-level=warn",
        ]

    def _apiserver_args(self, state: ClusterState, keys: pki.Pki) -> list[str]:
        return [
            str(binary_path("kube-apiserver")),
            f"--etcd-servers=http://127.0.0.1:{state.etcd_port}",
            "--bind-address=127.0.0.1",
            # Without it the API server looks for a default route, which a sandbox may lack.
            "--advertise-address=127.0.0.1",
            f"--secure-port={state.apiserver_port}",
            f"--tls-cert-file={keys.serving_cert}",
            f"--tls-private-key-file={keys.serving_key}",
            f"--client-ca-file={keys.ca_cert}",
            "--authorization-mode=RBAC",
            "--service-account-issuer=https://kubernetes.default.svc",
            f"--service-account-key-file={keys.sa_pub}",
            f"--service-account-signing-key-file={keys.sa_key}",
            "--service-cluster-ip-range=10.96.0.0/16",
            "--allow-privileged=true",
            # ServiceAccount admission would race pod creation against the SA controller;
            # TaintNodesByCondition would taint every fake node not-ready until a heartbeat.
            "--disable-admission-plugins=ServiceAccount,TaintNodesByCondition",
            "--endpoint-reconciler-type=none",
            # The API server's own ceiling, not its default throttle, is what benchmarks compare.
            "--max-requests-inflight=1600",
            "--max-mutating-requests-inflight=800",
            "--profiling=false",
            "--v=1",
        ]

    def _kcm_args(self, keys: pki.Pki) -> list[str]:
        kubeconfig = str(self.kubeconfig)
        return [
            str(binary_path("kube-controller-manager")),
            f"--kubeconfig={kubeconfig}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            "--leader-elect=false",
            "--bind-address=127.0.0.1",
            "--secure-port=0",
            f"--service-account-private-key-file={keys.sa_key}",
            f"--root-ca-file={keys.ca_cert}",
            "--controllers=" + ",".join(KCM_CONTROLLERS),
            f"--node-monitor-grace-period={NODE_MONITOR_GRACE}",
            "--kube-api-qps=500",
            "--kube-api-burst=1000",
            "--concurrent-job-syncs=20",
            "--v=1",
        ]

    def _kwok_args(self) -> list[str]:
        stages = self.state_dir / "kwok-stages.yaml"
        stages.write_text(
            (resources.files("operators.devcluster") / "kwok-stages.yaml").read_text()
        )
        return [
            str(binary_path("kwok")),
            f"--kubeconfig={self.kubeconfig}",
            "--manage-all-nodes=false",
            f"--manage-nodes-with-annotation-selector={profiles.KWOK_ANNOTATION}=fake",
            "--manage-nodes-with-label-selector=",
            "--cidr=10.0.0.0/16",
            "--node-ip=10.0.0.1",
            f"--node-lease-duration-seconds={NODE_LEASE_SECONDS}",
            f"--config={stages}",
            "--v=WARN",  # INFO logs every node patch and lease renewal
        ]

    def kube_scheduler_args(self) -> list[str]:
        """kube-scheduler, the yardstick in benchmarks; not started by default."""
        config = self.state_dir / "kube-scheduler.yaml"
        config.write_text(
            "apiVersion: kubescheduler.config.k8s.io/v1\n"
            "kind: KubeSchedulerConfiguration\n"
            "leaderElection: {leaderElect: false}\n"
            f"clientConnection: {{kubeconfig: {self.kubeconfig}, qps: 5000, burst: 5000}}\n"
        )
        return [
            str(binary_path("kube-scheduler")),
            f"--config={config}",
            f"--authentication-kubeconfig={self.kubeconfig}",
            f"--authorization-kubeconfig={self.kubeconfig}",
            "--bind-address=127.0.0.1",
            "--secure-port=0",
            "--v=1",
        ]

    def start_kube_scheduler(self) -> Proc:
        state = self.state()
        if state is None:
            raise DevClusterError("no cluster is running", "run `make cluster-up` first")
        return self._start(state, "kube-scheduler", self.kube_scheduler_args())

    def stop_process(self, name: str) -> None:
        state = self.state()
        if state is None:
            return
        for proc in state.processes():
            if proc.name == name:
                processes.stop(proc)
        state.procs = [p for p in state.procs if p["name"] != name]
        self._save(state)

    def restart_process(
        self, name: str, flags: Mapping[str, str] | None = None, timeout: float = 180.0
    ) -> None:
        """Stop a component (SIGTERM, then SIGKILL) and start it again with the same command
        line, `flags` (`{"--max-requests-inflight": "10"}`) set or replaced; wait until it serves
        again (etcd: healthy; kube-apiserver: ready). For fault tests and `make soak`."""
        state = self.state()
        if state is None:
            raise DevClusterError("no cluster is running", "run `make cluster-up` first")
        entry = next((p for p in state.procs if p["name"] == name), None)
        if entry is None or "args" not in entry:
            raise DevClusterError(
                f"{name} was not started by this cluster (or by an older version of it)",
                "restart the cluster with `make cluster-down cluster-up`",
            )
        args = with_flags(list(entry["args"]), flags or {})
        processes.stop(next(p for p in state.processes() if p.name == name))
        state.procs.remove(entry)
        self._start(state, name, args)
        if name == "etcd":
            self._wait(state, name, lambda: self._etcd_healthy(state), timeout)
        elif name == "kube-apiserver":
            keys = pki.load(self.state_dir / "pki")
            self._wait(state, name, lambda: self._readyz(state, keys), timeout)

    def compact_etcd(self) -> int:
        """Compact etcd's history up to its current revision and return that revision: every
        watch resumed from an older resourceVersion then gets 410 Gone (when the API server's
        watch cache no longer holds it, e.g. after a restart)."""
        state = self.state()
        if state is None:
            raise DevClusterError("no cluster is running", "run `make cluster-up` first")
        base = f"http://127.0.0.1:{state.etcd_port}/v3/kv"
        header = _etcd_post(f"{base}/range", {"key": "AA==", "limit": 1})["header"]
        revision = int(header["revision"])
        _etcd_post(f"{base}/compaction", {"revision": revision, "physical": True})
        return revision

    # -- readiness probes ----------------------------------------------------------------
    def _etcd_healthy(self, state: ClusterState) -> bool:
        try:
            with urllib.request.urlopen(
                f"http://127.0.0.1:{state.etcd_port}/health", timeout=2
            ) as resp:
                return bool(json.loads(resp.read()).get("health") == "true")
        except (OSError, ValueError):
            return False

    def _ssl(self, keys: pki.Pki) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(keys.ca_cert))
        ctx.load_cert_chain(str(keys.admin_cert), str(keys.admin_key))
        return ctx

    def _readyz(self, state: ClusterState, keys: pki.Pki) -> bool:
        try:
            with urllib.request.urlopen(
                f"https://127.0.0.1:{state.apiserver_port}/readyz",
                timeout=3,
                context=self._ssl(keys),
            ) as resp:
                return bool(resp.status == 200)
        except (OSError, urllib.error.URLError):
            return False

    def api(self) -> Any:
        """A sync `kubernetes.client.ApiClient` logged in as the cluster admin."""
        from kubernetes import client, config

        configuration = client.Configuration()
        config.load_kube_config(
            config_file=str(self.kubeconfig), client_configuration=configuration
        )
        configuration.connection_pool_maxsize = 32
        return client.ApiClient(configuration)

    def create_nodes(self, nodes: list[dict[str, Any]]) -> None:
        """Create the Node objects (kwok then runs them); existing ones are left alone."""
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        core = client.CoreV1Api(self.api())

        def create(node: dict[str, Any]) -> None:
            try:
                core.create_node(node)
            except ApiException as exc:
                if exc.status != 409:
                    raise

        with ThreadPoolExecutor(max_workers=16) as pool:
            list(pool.map(create, nodes))

    def _ready_nodes(self) -> int:
        from kubernetes import client

        core = client.CoreV1Api(self.api())
        ready = 0
        for node in core.list_node(resource_version="0").items:
            for cond in (node.status.conditions if node.status else None) or ():
                if cond.type == "Ready" and cond.status == "True":
                    ready += 1
        return ready

    def _default_service_account_exists(self) -> bool:
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        try:
            client.CoreV1Api(self.api()).read_namespaced_service_account("default", "default")
        except ApiException:
            return False
        return True

    # -- down / status -------------------------------------------------------------------
    def _stop_leftovers(self) -> None:
        state = self.state()
        if state is not None:
            for proc in reversed(state.processes()):
                processes.stop(proc)

    def down(self) -> None:
        """Stop every process this cluster started (newest first) and forget its state."""
        self._stop_leftovers()
        self._state_file.unlink(missing_ok=True)

    def status(self) -> dict[str, Any]:
        state = self.state()
        if state is None:
            return {"running": False, "state_dir": str(self.state_dir)}
        return {
            "running": self.running(),
            "state_dir": str(self.state_dir),
            "kubeconfig": state.kubeconfig,
            "server": f"https://127.0.0.1:{state.apiserver_port}",
            "profile": state.profile,
            "nodes": state.nodes,
            "ready_seconds": round(state.ready_seconds, 1),
            "processes": {
                p.name: {"pid": p.pid, "alive": processes.alive(p), "log": str(p.log)}
                for p in state.processes()
            },
        }
