"""Bring your own cluster: a cluster someone else runs (kind, a cloud cluster, a dev cluster
started in another shell), named by a kubeconfig. `make run`, `make deploy` and the e2e suite use
it as it is: it is never started or stopped, only the processes Sluice started are.

Chosen with SLUICE_BYO_CLUSTER=1 (`make ... BYO=1`); the kubeconfig is the first file of
$KUBECONFIG, else ~/.kube/config.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from operators.devcluster.cluster import ClusterState, DevCluster, default_state_dir
from operators.devcluster.errors import DevClusterError


def byo_requested(environ: os._Environ[str] | dict[str, str] = os.environ) -> bool:
    return environ.get("SLUICE_BYO_CLUSTER", "").lower() in ("1", "true", "yes")


def byo_kubeconfig() -> Path:
    first = os.environ.get("KUBECONFIG", "").split(os.pathsep)[0]
    path = Path(first or "~/.kube/config").expanduser()
    if not path.exists():
        raise DevClusterError(
            f"SLUICE_BYO_CLUSTER is set but the kubeconfig {path} does not exist",
            "export KUBECONFIG=<your cluster's kubeconfig> (docs/install.md, Bring your own "
            "cluster)",
        )
    return path.resolve()


class ExistingCluster(DevCluster):
    """DevCluster's interface over a cluster that runs without us."""

    def __init__(self, kubeconfig: Path, state_dir: Path | None = None) -> None:
        super().__init__(state_dir or default_state_dir().with_name("byo"))
        self.kubeconfig = kubeconfig
        self.logs_dir.mkdir(parents=True, exist_ok=True)

    def _current_cluster(self) -> dict[str, Any]:
        doc = yaml.safe_load(self.kubeconfig.read_text()) or {}
        ctx_name = doc.get("current-context")
        ctx: dict[str, Any] = next(
            (c["context"] for c in doc.get("contexts") or [] if c["name"] == ctx_name), {}
        )
        for entry in doc.get("clusters") or []:
            if entry["name"] == ctx.get("cluster"):
                return dict(entry["cluster"])
        raise DevClusterError(f"{self.kubeconfig}: no current cluster", "check current-context")

    @property
    def server(self) -> str:
        return str(self._current_cluster()["server"]).rstrip("/")

    def running(self) -> bool:
        return True

    def state(self) -> ClusterState:
        # Only the processes Sluice starts (operators) are recorded; the cluster has no ports
        # or processes of ours.
        return super().state() or ClusterState(
            profile="existing",
            nodes=0,
            apiserver_port=0,
            etcd_port=0,
            etcd_peer_port=0,
            kubeconfig=str(self.kubeconfig),
        )

    def up(self, *args: Any, **kwargs: Any) -> ClusterState:
        return self.state()

    def down(self) -> None:
        """Stop what Sluice started against the cluster; the cluster itself keeps running."""
        super().down()
