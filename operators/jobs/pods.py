"""The pods (and PodGroup) a job should have: names, labels, owner references, the gang minimum.

A pod is `<job>-<task>-<index>` (the task lower-cased): one name per replica index, so the API
server itself refuses a second pod for an index (AlreadyExists) even if two operator processes
raced. Pods carry the job, kind, task and index labels, the PodGroup annotation the scheduler reads,
the job version they were created for (older ones are stale), and an owner reference to the job,
so deleting the job deletes them.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Mapping
from typing import Any, Final

from operators.api import labels as L
from operators.jobs.shape import JobShape, TaskShape

API_VERSION: Final = "batch.sluice.dev/v1alpha1"
MANAGER: Final = "sluice-jobs"


MAX_HOSTNAME: Final = 63  # spec.hostname is a DNS label
_HASH = 8


def pod_name(job: str, task: str, index: int) -> str:
    return f"{job}-{task.lower()}-{index}"


def pod_hostname(job: str, task: str, index: int) -> str:
    """The pod's hostname when a plugin gives pods DNS names (svc): its name when that is a DNS
    label, else its first characters and a hash of the whole name, 63 in all. Job and task
    names may each be 63 characters, so the pod name may not fit; the API server refuses a pod
    whose spec.hostname is longer (the job would wait for pods that are never made). The hash
    keeps the hostnames of one job's pods distinct where plain truncation (what the kubelet
    does to a pod name it uses as hostname) would give two replicas the same one."""
    name = pod_name(job, task, index)
    if len(name) <= MAX_HOSTNAME:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:_HASH]
    return f"{name[: MAX_HOSTNAME - _HASH - 1].rstrip('-')}-{digest}"


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


def pod_body(job: JobShape, task: TaskShape, index: int, version: int) -> dict[str, Any]:
    """The pod for one replica index (plugins add to it: `presets.decorate`)."""
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


def gang_tasks(job: JobShape) -> list[TaskShape]:
    """Tasks whose pods are created up front, so they can form the gang: a task that waits for
    its dependencies (dependsOn) cannot be part of it (its pods do not exist yet)."""
    return [t for t in job.tasks if not t.depends_on]


def gang_min(job: JobShape) -> int:
    """The PodGroup's minMember: the job's minimum, capped by what the up-front tasks can give."""
    upfront = gang_tasks(job)
    if len(upfront) == len(job.tasks):
        return job.min_available
    return min(job.min_available, sum(t.replicas for t in upfront))


def gang_order(job: JobShape) -> list[tuple[TaskShape, int]]:
    """The pods that make up the gang minimum, as (task, count), in the order they count:
    each task's own minimum first (higher priority first), then the rest of minMember filled
    from the remaining replicas in the same order (Volcano's rule for minResources)."""
    ordered = sorted(gang_tasks(job), key=lambda t: -t.priority)
    chosen = [(t, t.min_available) for t in ordered if t.min_available > 0]
    missing = gang_min(job) - sum(n for _, n in chosen)
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
        "minMember": gang_min(job),
        "minTaskMember": {t.name: t.min_available for t in gang_tasks(job)},
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
