"""Every label and annotation name Sluice reads or writes, in one place.

Names follow DESIGN.md: `<group>/<name>` with the API groups of the kinds they belong to. The
compatibility aliases are *read* (so manifests written for ai-scheduler or Volcano keep working after
changing only `schedulerName`) and never written.
"""

from __future__ import annotations

from typing import Final

SCHEDULER_NAME: Final = "sluice"
"""`pod.spec.schedulerName` that hands a pod to Sluice."""

SCHEDULING_GROUP: Final = "scheduling.sluice.dev"
BATCH_GROUP: Final = "batch.sluice.dev"
EVENTS_GROUP: Final = "events.sluice.dev"
CATEGORY: Final = "sluice"
"""CRD category: `kubectl get sluice` lists every Sluice object."""

# --- scheduling -----------------------------------------------------------------------------
POOL: Final = f"{SCHEDULING_GROUP}/pool"
"""Pod label/annotation: the pool a pod prefers to run in. On nodes, the pool operator mirrors
the node's membership into this label for people and tools (`kubectl get nodes -L`); the single
source of truth is the Pool selectors read through `operators.scheduler.snapshot.pool_of_node`,
which the scheduler applies itself, so it never waits for the label."""
QUEUE: Final = f"{SCHEDULING_GROUP}/queue"
"""Pod/job label: the queue (tenant quota) charged for the pod."""
POD_GROUP: Final = f"{SCHEDULING_GROUP}/pod-group"
"""Pod annotation: the PodGroup (gang) the pod belongs to, in the pod's namespace."""
GPU_IDS: Final = f"{SCHEDULING_GROUP}/gpu-ids"
"""Pod annotation written by the scheduler before binding: comma-separated GPU indexes."""
OVERCOMMIT: Final = f"{SCHEDULING_GROUP}/overcommit"
"""Job/PodGroup annotation `"true"`: may be admitted beyond the queue's capability (evicted first)."""
USER: Final = f"{SCHEDULING_GROUP}/user"
"""Job annotation: the requesting user, copied to the PodGroup's `spec.user` and matched against
the queue's `tenants[].user`. Kubernetes records no creator, so the platform submitting jobs sets
it; who may set it is who may create jobs (RBAC)."""
GPU_MILLI: Final = f"{SCHEDULING_GROUP}/gpu-milli"
"""Pod annotation: a fractional GPU request in thousandths (binpacked onto one GPU)."""
GPU_TOPOLOGY: Final = f"{SCHEDULING_GROUP}/gpu-topology"
"""Node annotation describing the GPU NUMA/NVLink layout the topology plugin reads."""
BOUND_BY: Final = f"{SCHEDULING_GROUP}/bound-by"
"""Pod annotation set in the same write as the binding: `<scheduler identity>/<lease term>`
(the Lease's leaseTransitions when that scheduler acquired it; no term without leader election).
Shows who placed a pod, and lets a check prove two schedulers never bound at the same time."""
PREEMPTION_DELAY: Final = f"{SCHEDULING_GROUP}/preemption-delay-seconds"
"""Pod annotation for implicit one-pod groups: grace period before this pod is preempted."""

# --- batch ----------------------------------------------------------------------------------
JOB_NAME: Final = f"{BATCH_GROUP}/job-name"
"""Pod label: name of the HybridJob/VCJob that owns the pod."""
JOB_KIND: Final = f"{BATCH_GROUP}/job-kind"
"""Pod label: `HybridJob` or `VCJob`, so one selector cannot mix two jobs of the same name."""
TASK: Final = f"{BATCH_GROUP}/task"
"""Pod label: the task (VCJob) or replica type (HybridJob) of the pod."""
REPLICA_INDEX: Final = f"{BATCH_GROUP}/replica-index"
"""Pod label: the pod's index inside its task, 0-based."""
JOB_VERSION: Final = f"{BATCH_GROUP}/job-version"
"""Pod annotation: `status.version` of the job when the pod was created (stale events ignored)."""
FRAMEWORK: Final = f"{BATCH_GROUP}/framework"
"""Job annotation: the framework preset (`tensorflow`, `pytorch`, `mpi`) wiring the job's pods."""

# --- generic --------------------------------------------------------------------------------
MANAGED_BY: Final = "sluice.dev/managed-by"
"""Label on objects Sluice creates (PodGroups, Services, ConfigMaps) naming the operator."""

# --- compatibility aliases: read, never written ----------------------------------------------
AIBEE_POOL: Final = "resource.aibee.cn/pool"
"""ai-scheduler's pod annotation naming the pool; read as an alias of POOL."""
VOLCANO_GROUP_NAME: Final = "scheduling.k8s.io/group-name"
"""Volcano's pod annotation naming the PodGroup; read as an alias of POD_GROUP."""
VOLCANO_POD_QUEUE_NAME: Final = "scheduling.volcano.sh/queue-name"
"""Volcano's pod annotation naming the queue (its job controller sets it on every pod); read as
an alias of QUEUE."""
VOLCANO_QUEUE_NAME: Final = "volcano.sh/queue-name"
"""Volcano's older queue annotation, still found on pods and jobs; read as an alias of QUEUE."""

POOL_KEYS: Final[tuple[str, ...]] = (POOL, AIBEE_POOL)
"""Where to look for a pod's pool, in order of precedence."""
QUEUE_KEYS: Final[tuple[str, ...]] = (QUEUE, VOLCANO_POD_QUEUE_NAME, VOLCANO_QUEUE_NAME)
"""Where to look for a pod's queue, in order of precedence."""
POD_GROUP_KEYS: Final[tuple[str, ...]] = (POD_GROUP, VOLCANO_GROUP_NAME)
"""Where to look for a pod's group, in order of precedence."""

DEFAULT_POOL: Final = "default"
DEFAULT_QUEUE: Final = "default"
ROOT_QUEUE: Final = "root"


def first_of(mapping: dict[str, str] | None, keys: tuple[str, ...]) -> str | None:
    """The value of the first key present in labels/annotations, e.g. `first_of(a, QUEUE_KEYS)`."""
    if not mapping:
        return None
    for key in keys:
        value = mapping.get(key)
        if value:
            return value
    return None
