"""Plugins and framework presets, the pure part: which plugins a job gets, and what each adds to
a pod (environment, volumes, hostnames) and to the job (host lists, hostfile). The operator
creates the objects (Service, ConfigMaps, the SSH Secret) idempotently; see
operators/controllers/jobs_plugins.py.

Plugins (VCJob `spec.plugins`, Volcano's names):
- `svc`: a headless Service named after the job, every pod reachable as `<pod>.<job>`, and the
  ConfigMap `<job>-svc` with one `<task>.host` file per task (mounted at /etc/sluice), plus
  `VC_<TASK>_HOSTS` / `VC_<TASK>_NUM` variables;
- `env`: `VC_TASK_INDEX` and `VK_TASK_INDEX`, the pod's index in its task;
- `ssh`: the Secret `<job>-ssh` with a key pair, authorized_keys and an ssh config, mounted at
  /root/.ssh in every pod.

Presets (annotation `batch.sluice.dev/framework`, or guessed from HybridJob replica type names);
each turns `svc` on:
- `tensorflow` (types PS/Worker/Chief/Master/Evaluator): `TF_CONFIG`;
- `pytorch` (types Master/Worker): `MASTER_ADDR`, `MASTER_PORT`, `WORLD_SIZE`, `RANK`;
- `mpi` (types Launcher/Worker): `ssh` too, and the ConfigMap `<job>-hostfile` mounted at
  /etc/mpi/hostfile (`OMPI_MCA_orte_default_hostfile`), one `<pod>.<job> slots=1` line per worker.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from operators.api import labels as L
from operators.jobs.pods import pod_hostname
from operators.jobs.shape import JobShape, TaskShape

FRAMEWORK: Final = L.FRAMEWORK
TF_PORT: Final = 2222
TORCH_PORT: Final = 23456
SVC_MOUNT: Final = "/etc/sluice"
SSH_MOUNT: Final = "/root/.ssh"
MPI_MOUNT: Final = "/etc/mpi"
_TF_TYPES: Final = frozenset({"ps", "worker", "chief", "master", "evaluator"})


def framework(job: JobShape, annotations: Mapping[str, str]) -> str:
    chosen = annotations.get(FRAMEWORK, "").lower()
    if chosen in ("tensorflow", "pytorch", "mpi"):
        return chosen
    if job.kind != "HybridJob":
        return ""
    types = {t.name.lower() for t in job.tasks}
    if types <= {"launcher", "worker"} and "launcher" in types:
        return "mpi"
    if ("ps" in types and types <= _TF_TYPES) or ("chief" in types and types <= _TF_TYPES):
        return "tensorflow"
    if types <= {"master", "worker"} and "master" in types:
        return "pytorch"
    return ""


@dataclass(frozen=True, slots=True)
class Enabled:
    svc: bool = False
    env: bool = False
    ssh: bool = False
    framework: str = ""

    @property
    def any(self) -> bool:
        return self.svc or self.env or self.ssh or bool(self.framework)


def enabled(job: JobShape, annotations: Mapping[str, str]) -> Enabled:
    fw = framework(job, annotations)
    return Enabled(
        svc="svc" in job.plugins or bool(fw),
        env="env" in job.plugins,
        ssh="ssh" in job.plugins or fw == "mpi",
        framework=fw,
    )


def host(job: JobShape, task: TaskShape, index: int) -> str:
    return f"{pod_hostname(job.name, task.name, index)}.{job.name}"


def hosts(job: JobShape, task: TaskShape) -> list[str]:
    """Every pod the task may have (up to its maximum, so elastic growth needs no rewrite)."""
    return [host(job, task, i) for i in range(task.max_replicas)]


def _env_key(task: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in task.upper())


def _ordered(job: JobShape) -> list[TaskShape]:
    """Rank order for PyTorch: the master first, then the rest by priority and name."""
    return sorted(job.tasks, key=lambda t: (t.name.lower() != "master", -t.priority, t.name))


def env(job: JobShape, on: Enabled, task: TaskShape, index: int) -> dict[str, str]:
    out: dict[str, str] = {}
    if on.env:
        out["VC_TASK_INDEX"] = str(index)
        out["VK_TASK_INDEX"] = str(index)
    if on.svc:
        for t in job.tasks:
            out[f"VC_{_env_key(t.name)}_HOSTS"] = ",".join(hosts(job, t))
            out[f"VC_{_env_key(t.name)}_NUM"] = str(t.max_replicas)
    if on.framework == "tensorflow":
        cluster = {
            t.name.lower(): [f"{h}:{TF_PORT}" for h in hosts(job, t)]
            for t in job.tasks
            if t.name.lower() != "evaluator"
        }
        spec = {"cluster": cluster, "task": {"type": task.name.lower(), "index": index}}
        out["TF_CONFIG"] = json.dumps(spec, sort_keys=True, separators=(",", ":"))
    elif on.framework == "pytorch":
        ordered = _ordered(job)
        first = ordered[0]
        rank = index
        for t in ordered:
            if t.name == task.name:
                break
            rank += t.max_replicas
        out["MASTER_ADDR"] = host(job, first, 0)
        out["MASTER_PORT"] = str(TORCH_PORT)
        out["WORLD_SIZE"] = str(sum(t.max_replicas for t in job.tasks))
        out["RANK"] = str(rank)
    elif on.framework == "mpi":
        out["OMPI_MCA_orte_default_hostfile"] = f"{MPI_MOUNT}/hostfile"
    return out


def svc_hosts_data(job: JobShape) -> dict[str, str]:
    return {f"{t.name.lower()}.host": "\n".join(hosts(job, t)) + "\n" for t in job.tasks}


def mpi_hostfile(job: JobShape) -> str:
    workers = [t for t in job.tasks if t.name.lower() != "launcher"]
    return "".join(f"{h} slots=1\n" for t in workers for h in hosts(job, t))


def svc_name(job: JobShape) -> str:
    return job.name


def config_name(job: JobShape, what: str) -> str:
    return f"{job.name}-{what}"


def decorate(job: JobShape, on: Enabled, task: TaskShape, index: int, pod: dict[str, Any]) -> None:
    """Add the plugins' environment and volumes to a pod body (user-set values win)."""
    spec = pod["spec"]
    extra_env = env(job, on, task, index)
    mounts: list[tuple[str, dict[str, Any], str]] = []
    if on.svc:
        spec.setdefault("hostname", pod_hostname(job.name, task.name, index))
        spec.setdefault("subdomain", svc_name(job))
        mounts.append(("sluice-svc", {"configMap": {"name": config_name(job, "svc")}}, SVC_MOUNT))
    if on.ssh:
        mounts.append(
            (
                "sluice-ssh",
                {"secret": {"secretName": config_name(job, "ssh"), "defaultMode": 0o600}},
                SSH_MOUNT,
            )
        )
    if on.framework == "mpi":
        mounts.append(
            ("sluice-mpi", {"configMap": {"name": config_name(job, "hostfile")}}, MPI_MOUNT)
        )
    volumes = spec.setdefault("volumes", [])
    have_volumes = {v.get("name") for v in volumes}
    for name, source, _ in mounts:
        if name not in have_volumes:
            volumes.append({"name": name, **source})
    if not volumes:
        del spec["volumes"]
    for key in ("initContainers", "containers"):
        for container in spec.get(key) or ():
            have = {e.get("name") for e in container.get("env") or ()}
            added = [{"name": k, "value": v} for k, v in extra_env.items() if k not in have]
            if added:
                container["env"] = [*(container.get("env") or []), *added]
            paths = {m.get("mountPath") for m in container.get("volumeMounts") or ()}
            new_mounts = [
                {"name": name, "mountPath": path, "readOnly": True}
                for name, _, path in mounts
                if path not in paths
            ]
            if new_mounts:
                container["volumeMounts"] = [*(container.get("volumeMounts") or []), *new_mounts]
