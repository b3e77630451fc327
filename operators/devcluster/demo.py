"""`make run`: the dev cluster plus Sluice's CRDs, operators and samples, ready to explore."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from operators.devcluster import processes
from operators.devcluster.cluster import DevCluster, kubectl_binary
from operators.devcluster.errors import DevClusterError
from operators.devcluster.existing import ExistingCluster

REPO = Path(__file__).resolve().parents[2]


def kubectl(cluster: DevCluster, *args: str, check: bool = True) -> str:
    cmd = [kubectl_binary(), f"--kubeconfig={cluster.kubeconfig}", *args]
    result = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if check and result.returncode != 0:
        raise DevClusterError(
            f"`kubectl {' '.join(args)}` failed:\n{result.stderr.strip()}",
            "see the message above; `make cluster-down && make run` starts from scratch",
        )
    return result.stdout


def apply_crds(cluster: DevCluster, crds: Path = REPO / "crds") -> int:
    files = sorted(crds.glob("*.yaml"))
    if not files:
        return 0
    kubectl(cluster, "apply", "--server-side", "--force-conflicts", "-f", str(crds))
    kubectl(cluster, "wait", "--for=condition=Established", "--timeout=60s", "crd", "--all")
    return len(files)


def run_demo(cluster: DevCluster) -> None:
    say = print
    count = apply_crds(cluster)
    say(f"devcluster: applied {count} CRDs from crds/")
    state = cluster.state()
    assert state is not None
    if (REPO / "operators" / "__main__.py").exists() and not any(
        p.name == "operators" and processes.alive(p) for p in state.processes()
    ):
        log = cluster.logs_dir / "operators.log"
        proc = processes.spawn(
            "operators",
            [sys.executable, "-m", "operators", "all", f"--kubeconfig={cluster.kubeconfig}"],
            log,
        )
        state.procs.append(
            {"name": proc.name, "pid": proc.pid, "binary": proc.binary, "log": str(proc.log)}
        )
        cluster._save(state)
        say(f"devcluster: operators running (pid {proc.pid}, log {log})")
    for folder in ("samples", "demo"):
        path = REPO / "manifests" / folder
        if any(path.glob("*.yaml")):
            out = kubectl(cluster, "apply", "--server-side", "-f", str(path), check=False)
            say(f"devcluster: applied manifests/{folder}:\n" + out)
    say(
        "\nTry next:\n"
        f"  export KUBECONFIG={cluster.kubeconfig}\n"
        "  kubectl get nodes -L node.sluice.dev/pool,topology.sluice.dev/tor\n"
        "  kubectl get sluice                    # every Sluice object\n"
        "  kubectl describe spg -A               # why is a group pending?\n"
        "  kubectl get pods -o wide -L scheduling.sluice.dev/pod-group\n"
        "  kubectl get pods -o custom-columns=NAME:.metadata.name,NODE:.spec.nodeName,"
        "GPUS:.metadata.annotations.scheduling\\.sluice\\.dev/gpu-ids\n"
        f"  tail -f {cluster.logs_dir}/operators.log\n"
        + (
            "  make cluster-down BYO=1               # stop the operators; your cluster stays"
            if isinstance(cluster, ExistingCluster)
            else "  make cluster-down                     # stop everything"
        )
    )
