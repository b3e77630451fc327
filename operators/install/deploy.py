"""`make deploy`: the dev overlay applied to a cluster, and the operators run from this checkout
against it, each under its own ServiceAccount (so RBAC that is too narrow shows up as 403s).

The operators run as local processes, not as the Deployments' pods: the dev cluster has no
container runtime, and on a laptop cluster the image may not be built. The Deployments are applied
(so the API server validates them) and scaled to zero; each process gets the Deployment's own
arguments and environment, as the pod would.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

from operators.__main__ import OPERATORS
from operators.devcluster import processes
from operators.devcluster.cluster import kubectl_binary
from operators.install import identity
from operators.install.kustomize import MANIFESTS, REPO, build, deployments, operator_container

DEV_OVERLAY = MANIFESTS / "overlays" / "dev"


@dataclass(frozen=True)
class Running:
    operator: str
    pid: int
    log: str
    metrics_port: int
    kubeconfig: str

    def proc(self) -> processes.Proc:
        return processes.Proc(self.operator, self.pid, sys.executable, Path(self.log))


class Deployer:
    def __init__(
        self,
        admin_kubeconfig: Path,
        state_dir: Path,
        overlay: Path = DEV_OVERLAY,
        say: Callable[[str], None] = print,
    ) -> None:
        self.admin_kubeconfig = admin_kubeconfig
        self.state_dir = state_dir
        self.overlay = overlay
        self.say = say
        self._state_file = state_dir / "deploy.json"

    def kubectl(self, *args: str, input: str | None = None) -> str:
        cmd = [kubectl_binary(), f"--kubeconfig={self.admin_kubeconfig}", *args]
        result = subprocess.run(
            cmd, input=input, capture_output=True, text=True, check=False, timeout=180
        )
        if result.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)} failed:\n{result.stderr.strip()}")
        return result.stdout

    def apply(self) -> list[dict[str, Any]]:
        """CRDs and the namespace first (a server-side dry run of the overlay needs both: custom
        resources need their CRD Established, namespaced objects their namespace), then the
        overlay: a server-side dry run, then for real."""
        objects = build(self.overlay)
        first = [o for o in objects if o["kind"] in ("CustomResourceDefinition", "Namespace")]
        apply = ("apply", "--server-side", "--force-conflicts")
        for ns in (o["metadata"]["name"] for o in first if o["kind"] == "Namespace"):
            # Left over from an uninstall and still terminating: nothing can be created in it.
            phase = self.kubectl("get", "namespace", ns, "--ignore-not-found",
                                 "-o", "jsonpath={.status.phase}")  # fmt: skip
            if phase == "Terminating":
                self.say(f"deploy: waiting for namespace {ns} to finish terminating")
                self.kubectl("wait", "--for=delete", f"namespace/{ns}", "--timeout=180s")
        self.kubectl(*apply, "-f", "-", input=yaml.safe_dump_all(first))
        self.kubectl("wait", "--for=condition=Established", "--timeout=60s", "crd", "--all")
        self.kubectl(*apply, "-k", str(self.overlay), "--dry-run=server")
        self.kubectl(*apply, "-k", str(self.overlay))
        self.say(f"deploy: applied {self.overlay.relative_to(REPO)} ({len(objects)} objects)")
        return objects

    def run_operators(self, objects: list[dict[str, Any]]) -> list[Running]:
        self.stop()
        running: list[Running] = []
        folder = self.state_dir / "deploy"
        folder.mkdir(parents=True, exist_ok=True)
        for deployment in deployments(objects):
            meta = deployment["metadata"]
            pod = deployment["spec"]["template"]["spec"]
            container = operator_container(deployment)
            args = [str(a) for a in container.get("args") or []]
            if not args or args[0] not in OPERATORS:
                continue
            if deployment["spec"].get("replicas") != 0:
                self.kubectl("scale", "deployment", meta["name"], "-n", meta["namespace"],
                             "--replicas=0")  # fmt: skip
            kubeconfig = folder / f"{args[0]}.kubeconfig"
            kubeconfig.write_text(
                yaml.safe_dump(
                    identity.kubeconfig_for(
                        self.admin_kubeconfig, meta["namespace"], pod["serviceAccountName"]
                    )
                )
            )
            port = processes.free_port()
            own = container_env(container, meta["namespace"], f"{meta['name']}-local")
            served = {str(p["containerPort"]) for p in container.get("ports") or []}
            # The pod's port is the host's here: move whatever listens on it to a free one.
            own = {
                k: str(port) if k.endswith("_PORT") and v in served else v for k, v in own.items()
            }
            env = {
                **os.environ,
                **own,
                "KUBECONFIG": str(kubeconfig),
                "SLUICE_KUBECONFIG": str(kubeconfig),
                "SLUICE_METRICS_HOST": "127.0.0.1",
                "SLUICE_METRICS_PORT": str(port),
            }
            log = folder / f"{args[0]}.log"
            proc = processes.spawn(args[0], [sys.executable, "-m", "operators", *args], log, env)
            running.append(Running(args[0], proc.pid, str(log), port, str(kubeconfig)))
            self.say(
                f"deploy: {args[0]} running as {meta['namespace']}:{pod['serviceAccountName']} "
                f"(pid {proc.pid}, metrics http://127.0.0.1:{port}/metrics, log {log})"
            )
        self._state_file.write_text(json.dumps([asdict(r) for r in running], indent=2))
        return running

    def running(self) -> list[Running]:
        try:
            return [Running(**r) for r in json.loads(self._state_file.read_text())]
        except (OSError, ValueError):
            return []

    def stop(self) -> None:
        for r in self.running():
            processes.stop(r.proc())
        self._state_file.unlink(missing_ok=True)


def container_env(container: dict[str, Any], namespace: str, pod_name: str) -> dict[str, str]:
    """The container's environment as the kubelet would resolve it (the fields it reads)."""
    fields = {"metadata.namespace": namespace, "metadata.name": pod_name}
    env: dict[str, str] = {}
    for item in container.get("env") or []:
        if "value" in item:
            env[item["name"]] = str(item["value"])
        elif "fieldRef" in (item.get("valueFrom") or {}):
            path = item["valueFrom"]["fieldRef"]["fieldPath"]
            if path not in fields:
                raise ValueError(f"env {item['name']}: fieldRef {path} is not resolved locally")
            env[item["name"]] = fields[path]
        else:
            raise ValueError(f"env {item['name']}: only values and fieldRefs are resolved locally")
    return env
