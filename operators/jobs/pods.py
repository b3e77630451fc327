"""The pods (and PodGroup) a job should have: names, labels, owner references, the gang minimum.

A pod is `<job>-<task>-<index>` (the task lower-cased): one name per replica index, so the API
server itself refuses a second pod for an index (AlreadyExists) even if two operator processes
raced. Pods carry the job, kind, task and index labels, the PodGroup annotation the scheduler reads,
the job version they were created for (older ones are stale), and an owner reference to the job,
so deleting the job deletes them.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, Final

from operators.api import labels as L
from operators.jobs.shape import JobShape, TaskShape

API_VERSION: Final = "batch.sluice.dev/v1alpha1"
MANAGER: Final = "sluice-jobs"


def pod_name(job: str, task: str, index: int) -> str:
    return f"{job}-{task.lower()}-{index}"


def group_name(job: JobShape) -> str:
    return job.name


def owner_reference(job: JobShape) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": job.kind,
        "name": job.name,
        "uid": job.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def job_labels(job: JobShape) -> dict[str, str]:
    return {L.JOB_NAME: job.name, L.JOB_KIND: job.kind, L.MANAGED_BY: MANAGER}


def _merge_env(container: dict[str, Any], env: Mapping[str, str]) -> None:
    have = {e.get("name") for e in container.get("env") or ()}
    extra = [{"name": k, "value": v} for k, v in env.items() if k not in have]
    if extra:
        container["env"] = [*(container.get("env") or []), *extra]


def pod_body(
    job: JobShape,
    task: TaskShape,
    index: int,
    version: int,
    env: Mapping[str, str] | None = None,
    hostnames: bool = False,
) -> dict[str, Any]:
    """The pod for one replica index. `env` is added to every container (user values win);
    `hostnames` gives the pod a stable DNS name `<pod>.<job>` through the job's headless Service."""
    template = copy.deepcopy(dict(task.template))
    meta = dict(template.get("metadata") or {})
    spec = dict(template.get("spec") or {})
    name = pod_name(job.name, task.name, index)
    labels = {
        **(meta.get("labels") or {}),
        **job_labels(job),
        L.TASK: task.name,
        L.REPLICA_INDEX: str(index),
    }
    annotations = {
        **(meta.get("annotations") or {}),
        L.POD_GROUP: group_name(job),
        L.JOB_VERSION: str(version),
    }
    if not spec.get("schedulerName"):
        spec["schedulerName"] = job.scheduler_name or L.SCHEDULER_NAME
    if hostnames:
        spec.setdefault("hostname", name)
        spec.setdefault("subdomain", job.name)
    if env:
        for key in ("initContainers", "containers"):
            for container in spec.get(key) or ():
                _merge_env(container, env)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": job.namespace,
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [owner_reference(job)],
        },
        "spec": spec,
    }


def gang_order(job: JobShape) -> list[tuple[TaskShape, int]]:
    """The pods that make up the gang minimum, as (task, count), in the order they count:
    each task's own minimum first (higher priority first), then the rest of minAvailable filled
    from the remaining replicas in the same order (Volcano's rule for minResources)."""
    ordered = sorted(job.tasks, key=lambda t: -t.priority)
    chosen = [(t, t.min_available) for t in ordered if t.min_available > 0]
    missing = job.min_available - sum(n for _, n in chosen)
    for t in ordered:
        if missing <= 0:
            break
        extra = min(missing, t.replicas - t.min_available)
        if extra > 0:
            chosen.append((t, extra))
            missing -= extra
    return chosen


def podgroup_spec(job: JobShape, extra: Mapping[str, Any]) -> dict[str, Any]:
    """PodGroup spec fields that follow from the job's shape; `extra` adds the ones copied from
    the job spec (queue, pool, priorityClassName, networkTopology, preemption, minResources)."""
    spec: dict[str, Any] = {
        "minMember": job.min_available,
        "minTaskMember": {t.name: t.min_available for t in job.tasks},
    }
    if job.elastic:
        spec["replicaSpecs"] = [
            {
                "name": t.name,
                "minReplicas": t.min_available,
                "maxReplicas": t.max_replicas,
                "priority": t.priority,
            }
            for t in job.tasks
        ]
    spec.update({k: v for k, v in extra.items() if v is not None})
    return spec
