"""batch.sluice.dev/v1alpha1: VCJob (Volcano's job shape) and HybridJob (SkyForm's shape).

Both become one PodGroup plus pods through the same job core, and both report three levels of
state — Job, Task (HybridJob: replica type) and Replica (one pod) — so the status models are
shared. Rules that need the whole object graph (dependsOn cycles) are checked here in Python and,
for objects that reach the cluster, by the jobs operator as a `Valid=False` condition.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from enum import StrEnum
from typing import Annotated, Any, ClassVar, Final, Literal, Self, TypeVar

from pydantic import AwareDatetime, Field, field_validator, model_validator

from operators.api import labels
from operators.api.base import (
    MAX_LABEL,
    MAX_MESSAGE,
    MAX_NAME,
    MAX_POLICIES,
    MAX_REASON,
    MAX_TASKS,
    Conditions,
    DnsLabel,
    DnsSubdomain,
    PodTemplate,
    RefusedList,
    RefusedString,
    Rule,
    SluiceModel,
    StatusModel,
)
from operators.api.openapi import SERVER_DEFAULT
from operators.api.resource import AGE, PrinterColumn, Resource
from operators.api.scheduling import (
    QUEUE_IMMUTABLE,
    QUEUE_NOT_ROOT,
    NetworkTopology,
    PreemptionStatus,
    check_queue_not_root,
)

__all__ = [
    "DependsOn",
    "DependsOnIteration",
    "HybridJob",
    "HybridJobSpec",
    "HybridJobStatus",
    "JobConditionType",
    "JobPhase",
    "JobReason",
    "JobSpecBase",
    "JobStatusBase",
    "LifecyclePolicy",
    "PolicyAction",
    "PolicyEvent",
    "ReplicaPhase",
    "ReplicaSpec",
    "ReplicaStatus",
    "RestartPolicy",
    "SinkDelivery",
    "TaskPhase",
    "TaskSpec",
    "TaskStatus",
    "Transition",
    "TransitionLevel",
    "VCJob",
    "VCJobPlugins",
    "VCJobSpec",
    "VCJobStatus",
    "find_dependency_cycle",
]

GROUP = labels.BATCH_GROUP
API_VERSION: Final = "batch.sluice.dev/v1alpha1"
Count = Annotated[int, Field(ge=0, le=2**31 - 1)]
# Go duration as Volcano writes policy timeouts: "90s", "5m", "1h30m".
DURATION_PATTERN = r"^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$"
# Replica type keys are written as in TF/PyTorch operators ("PS", "Worker", "Chief"); they end up
# lower-cased in pod names, so they must be DNS-label-like apart from case.
REPLICA_TYPE_PATTERN = r"^[A-Za-z]([A-Za-z0-9-]{0,30}[A-Za-z0-9])?$"


# ------------------------------------------------------------------------------------------
# enums


class JobPhase(StrEnum):
    PENDING = "Pending"
    INQUEUE = "Inqueue"  # the PodGroup is admitted (quota reserved); pods are being created
    RUNNING = "Running"
    RESTARTING = "Restarting"
    COMPLETING = "Completing"
    COMPLETED = "Completed"
    ABORTING = "Aborting"
    ABORTED = "Aborted"
    TERMINATING = "Terminating"
    TERMINATED = "Terminated"
    FAILED = "Failed"


class TaskPhase(StrEnum):
    PENDING = "Pending"
    RUNNING = "Running"
    RESTARTING = "Restarting"
    COMPLETED = "Completed"
    FAILED = "Failed"
    TERMINATED = "Terminated"


class ReplicaPhase(StrEnum):
    PENDING = "Pending"
    SCHEDULED = "Scheduled"  # bound to a node, not running yet
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    RESTARTING = "Restarting"
    TERMINATING = "Terminating"
    EVICTED = "Evicted"
    UNKNOWN = "Unknown"


class JobConditionType(StrEnum):
    VALID = "Valid"  # False for spec problems admission cannot see (dependsOn cycles)
    SUSPENDED = "Suspended"  # spec.suspend is true and the job's pods are gone or going
    PRIVILEGED = "Privileged"  # mirrored from the PodGroup: a preemptor waiting for victims
    WILL_EVICT = "WillEvict"  # mirrored from the PodGroup: will be evicted at a deadline


class JobReason(StrEnum):
    DEPENDENCY_CYCLE = "DependencyCycle"
    SINK_NOT_FOUND = "SinkNotFound"
    VALID = "Valid"


class TransitionLevel(StrEnum):
    JOB = "Job"
    TASK = "Task"
    REPLICA = "Replica"


class PolicyEvent(StrEnum):
    """Events a lifecycle policy reacts to (the user-facing ones of Volcano)."""

    ANY = "*"
    POD_FAILED = "PodFailed"
    POD_EVICTED = "PodEvicted"
    POD_PENDING = "PodPending"  # only together with a timeout
    UNKNOWN = "Unknown"
    TASK_COMPLETED = "TaskCompleted"
    TASK_FAILED = "TaskFailed"
    JOB_UPDATED = "JobUpdated"


class PolicyAction(StrEnum):
    ABORT_JOB = "AbortJob"
    RESTART_JOB = "RestartJob"
    RESTART_TASK = "RestartTask"
    RESTART_POD = "RestartPod"
    TERMINATE_JOB = "TerminateJob"
    COMPLETE_JOB = "CompleteJob"
    RESUME_JOB = "ResumeJob"


class RestartPolicy(StrEnum):
    ALWAYS = "Always"
    ON_FAILURE = "OnFailure"
    NEVER = "Never"
    EXIT_CODE = "ExitCode"  # restart on retryable (non-zero, < 128) exit codes only


class TransitionTarget(StrEnum):
    """A phase a transition can reach at any level: what hooks and sink filters may name.

    The union of JobPhase, TaskPhase, ReplicaPhase, the delayed-preemption roles, and the
    PodGroup phases and Queue states the events operator delivers (a unit test keeps it equal to
    that union).
    """

    PENDING = "Pending"
    INQUEUE = "Inqueue"
    SCHEDULED = "Scheduled"
    RUNNING = "Running"
    RESTARTING = "Restarting"
    COMPLETING = "Completing"
    COMPLETED = "Completed"
    ABORTING = "Aborting"
    ABORTED = "Aborted"
    TERMINATING = "Terminating"
    TERMINATED = "Terminated"
    FAILED = "Failed"
    SUCCEEDED = "Succeeded"
    EVICTED = "Evicted"
    UNKNOWN = "Unknown"
    PRIVILEGED = "Privileged"
    WILL_EVICT = "WillEvict"
    OPEN = "Open"
    CLOSING = "Closing"
    CLOSED = "Closed"


class DependsOnIteration(StrEnum):
    ANY = "any"
    ALL = "all"


# ------------------------------------------------------------------------------------------
# spec pieces


class LifecyclePolicy(SluiceModel):
    """When `event` (or any of `events`) happens, or a pod exits with `exitCode`, do `action`."""

    action: PolicyAction
    event: PolicyEvent | None = None
    events: list[PolicyEvent] | None = Field(
        default=None,
        min_length=1,
        max_length=8,
        json_schema_extra={"x-kubernetes-list-type": "set"},
    )
    exit_code: int | None = Field(default=None, ge=-(2**31), le=2**31 - 1)
    timeout: Annotated[str, Field(max_length=32, pattern=DURATION_PATTERN)] | None = Field(
        default=None, description="Delay the action (Go duration, e.g. `5m`)."
    )

    cel_rules: ClassVar = (
        Rule(
            "!(has(self.exitCode) && (has(self.event) || has(self.events)))",
            "policies[]: exitCode and event/events are mutually exclusive",
            field_path=".exitCode",
        ),
        Rule(
            "has(self.exitCode) || has(self.event) || has(self.events)",
            "policies[]: one of event, events or exitCode is required",
        ),
        Rule(
            "!(has(self.event) && has(self.events))",
            "policies[]: event and events are mutually exclusive",
            field_path=".events",
        ),
        Rule(
            "!has(self.exitCode) || self.exitCode != 0",
            "policies[].exitCode must not be 0 (0 means success)",
            field_path=".exitCode",
        ),
        # Every pod passes through Pending: without a timeout the policy would fire at once.
        Rule(
            "has(self.timeout) || !((has(self.event) && self.event == 'PodPending') || "
            "(has(self.events) && 'PodPending' in self.events))",
            "policies[]: event PodPending needs a timeout",
            field_path=".timeout",
        ),
    )

    @model_validator(mode="after")
    def _one_trigger(self) -> LifecyclePolicy:
        has_event = self.event is not None or self.events is not None
        if self.exit_code is not None and has_event:
            raise ValueError(self.cel_rules[0].message)
        if self.exit_code is None and not has_event:
            raise ValueError(self.cel_rules[1].message)
        if self.event is not None and self.events is not None:
            raise ValueError(self.cel_rules[2].message)
        if self.exit_code == 0:
            raise ValueError(self.cel_rules[3].message)
        if PolicyEvent.POD_PENDING in self.triggers() and self.timeout is None:
            raise ValueError(self.cel_rules[4].message)
        return self

    def triggers(self) -> list[PolicyEvent]:
        """The events this policy reacts to (empty for an exitCode policy)."""
        if self.event is not None:
            return [self.event]
        return list(self.events or [])


Policies = Annotated[list[LifecyclePolicy], Field(max_length=MAX_POLICIES)]

_TRIGGERS = "(has({p}.event) ? [{p}.event] : has({p}.events) ? {p}.events : [])"
_HAS_EVENT = "((has({q}.event) && {q}.event == {e}) || (has({q}.events) && {e} in {q}.events))"
# Which policy fires for an event must not depend on list order, and `*` already covers every
# event, so it stands alone (Volcano's admission refuses both the same way).
POLICIES_UNIQUE = Rule(
    "!has(self.policies) || self.policies.all(p, "
    + _TRIGGERS.format(p="p")
    + ".all(e, size(self.policies.filter(q, "
    + _HAS_EVENT.format(q="q", e="e")
    + ")) == 1))",
    "policies[]: each event may appear in only one policy",
    field_path=".policies",
)
POLICIES_STAR_ALONE = Rule(
    "!has(self.policies) || !self.policies.exists(p, "
    + _HAS_EVENT.format(q="p", e="'*'")
    + ") || (size(self.policies) == 1 && size("
    + _TRIGGERS.format(p="self.policies[0]")
    + ") == 1)",
    "policies[]: a policy on event '*' must be the only policy of its list, with no other event",
    field_path=".policies",
)
POLICY_RULES = (POLICIES_UNIQUE, POLICIES_STAR_ALONE)


def check_policies(policies: list[LifecyclePolicy] | None) -> None:
    """The Python side of POLICY_RULES."""
    triggers = [e for p in policies or () for e in p.triggers()]
    if len(set(triggers)) != len(triggers):
        dupes = sorted({e.value for e in triggers if triggers.count(e) > 1})
        raise ValueError(f"{POLICIES_UNIQUE.message}: {', '.join(dupes)} repeated")
    if PolicyEvent.ANY in triggers and len(triggers) > 1:
        raise ValueError(POLICIES_STAR_ALONE.message)
    if PolicyEvent.ANY in triggers and len(policies or ()) > 1:
        raise ValueError(POLICIES_STAR_ALONE.message)


class Hook(SluiceModel):
    """Deliver this job's state transitions to an admin-defined EventSink."""

    sink: DnsSubdomain = Field(description="Name of a (cluster-scoped) EventSink.")
    levels: list[TransitionLevel] | None = Field(
        default=None, max_length=3, description="Job, Task, Replica; unset means all."
    )
    transitions: list[TransitionTarget] | None = Field(
        default=None,
        max_length=32,
        description="Target phases to deliver (e.g. Running, Completed, WillEvict); "
        "unset means all.",
    )


class JobSpecBase(SluiceModel):
    """Fields HybridJob and VCJob share (they go to the job's PodGroup)."""

    queue: DnsLabel | None = Field(default=None, description="Queue charged; unset: `default`.")
    pool: DnsLabel | None = Field(default=None, description="Preferred pool; unset: `default`.")
    priority_class_name: DnsSubdomain | None = None
    policies: Policies | None = Field(default=None, description="Job-level lifecycle policies.")
    hooks: list[Hook] | None = Field(default=None, max_length=16)
    network_topology: NetworkTopology | None = None
    max_retry: int | None = Field(
        default=None, ge=0, le=10000, description="Restarts before Failed; unset means 3."
    )
    ttl_seconds_after_finished: int | None = Field(default=None, ge=0, le=2**31 - 1)
    preemptible: bool = Field(default=True, description="May this job be preempted.")
    preemption_delay_seconds: int | None = Field(
        default=None,
        ge=0,
        le=7 * 86400,
        description="Grace period between being chosen as a victim and eviction.",
    )
    stale_gang_grace_seconds: int | None = Field(
        default=None,
        ge=-1,
        le=7 * 86400,
        description="Seconds the running job may stay below its gang minimum (a pod failed or "
        "was evicted and did not come back) before the scheduler evicts it whole (copied to its "
        "PodGroup); -1: never. Unset: never (the job's own policies decide).",
    )
    suspend: bool | None = Field(
        default=None,
        description="true stops the job's pods (phase Aborted); false again resumes it "
        '(`kubectl patch --type merge -p \'{"spec":{"suspend":true}}\'`).',
    )

    @model_validator(mode="after")
    def _common_rules(self) -> JobSpecBase:
        check_queue_not_root(self.queue)
        check_policies(self.policies)
        return self


# Rules and immutable fields of JobSpecBase; each job kind lists them again because CRD rules
# are per class (`cel_rules` is not inherited).
_JOB_RULES: tuple[Rule, ...] = (QUEUE_NOT_ROOT, *POLICY_RULES)
# What the job's PodGroup and pods were built from cannot change under them (Volcano allows
# only minAvailable, replicas and priorityClassName to change; so do we, plus the knobs that
# only steer the operator: policies, hooks, retries, TTL, preemption).
_JOB_IMMUTABLE: dict[str, str] = {
    "queue": QUEUE_IMMUTABLE,
    "pool": "spec.pool cannot change: delete and re-create the job to move it",
    "network_topology": "spec.networkTopology cannot change under placed pods: "
    "delete and re-create the job",
}
_TEMPLATE_IMMUTABLE = (
    "{where}.template cannot change (replica counts may): delete and re-create the job to "
    "change its pods"
)


class DependsOn(SluiceModel):
    name: list[DnsLabel] = Field(min_length=1, max_length=16, description="Tasks waited for.")
    iteration: DependsOnIteration = Field(
        default=DependsOnIteration.ALL, description="Wait for `all` (default) or `any`."
    )


UNNAMED_TASK: Final = "default0"
"""The name an unnamed task gets, as Volcano names the first one (its later ones are default1,
... by index; a CRD default is one value, so a second unnamed task is refused by name)."""


class TaskSpec(SluiceModel):
    """One task of a VCJob: `replicas` identical pods from `template`."""

    name: DnsLabel = Field(
        default=UNNAMED_TASK,
        description=f"Task name (keys the task list); unset means `{UNNAMED_TASK}`, as in Volcano.",
        json_schema_extra={SERVER_DEFAULT: UNNAMED_TASK},
    )
    replicas: int = Field(ge=0, le=100000)
    min_available: int | None = Field(
        default=None, ge=0, le=100000, description="Task gang minimum; unset means replicas."
    )
    template: PodTemplate = Field(description="A core/v1 PodTemplateSpec.")
    policies: Policies | None = Field(default=None, description="Task-level; override job's.")
    max_retry: int | None = Field(default=None, ge=0, le=10000)
    depends_on: DependsOn | None = None
    topology_policy: RefusedString = None

    refused_fields: ClassVar = {
        "topology_policy": "tasks[].topologyPolicy (Volcano's NUMA policy) is not supported: "
        "Sluice picks GPUs by NVLink/NUMA layout itself; remove the field",
    }

    cel_rules: ClassVar = (
        Rule(
            "!has(self.minAvailable) || self.minAvailable <= self.replicas",
            "tasks[].minAvailable must not exceed tasks[].replicas",
            field_path=".minAvailable",
        ),
        Rule(
            "!has(self.dependsOn) || !(self.name in self.dependsOn.name)",
            "tasks[].dependsOn: a task cannot depend on itself",
            field_path=".dependsOn",
        ),
        *POLICY_RULES,
    )
    immutable_fields: ClassVar = {
        "template": _TEMPLATE_IMMUTABLE.format(where="tasks[]"),
        "depends_on": "tasks[].dependsOn cannot change: delete and re-create the job",
    }

    @model_validator(mode="after")
    def _task_rules(self) -> TaskSpec:
        if self.min_available is not None and self.min_available > self.replicas:
            raise ValueError(self.cel_rules[0].message)
        if self.depends_on is not None and self.name in self.depends_on.name:
            raise ValueError(self.cel_rules[1].message)
        check_policies(self.policies)
        return self

    @property
    def effective_min_available(self) -> int:
        return self.replicas if self.min_available is None else self.min_available


PluginArgs = Annotated[list[Annotated[str, Field(max_length=256)]], Field(max_length=16)]


class VCJobPlugins(SluiceModel):
    """Job-controller plugins (Volcano's): each key enables one, the list holds its flags."""

    svc: PluginArgs | None = Field(
        default=None, description="Headless Service + hosts ConfigMap for the job's pods."
    )
    env: PluginArgs | None = Field(default=None, description="Inject VC_TASK_INDEX.")
    ssh: PluginArgs | None = Field(default=None, description="Shared SSH keys across pods.")
    pytorch: PluginArgs | None = None
    mpi: PluginArgs | None = None
    tensorflow: PluginArgs | None = None

    refused_fields: ClassVar = {
        name: f"spec.plugins.{name} is not a Sluice plugin: remove it and annotate the job "
        f"{labels.FRAMEWORK}: {name} instead; that preset {what} (docs/jobs.md, Plugins)"
        for name, what in (
            ("pytorch", "sets MASTER_ADDR, MASTER_PORT, WORLD_SIZE and RANK and turns svc on"),
            ("mpi", "turns svc and ssh on and mounts the hostfile at /etc/mpi/hostfile"),
            ("tensorflow", "sets TF_CONFIG and turns svc on"),
        )
    }


_TOTAL_REPLICAS = "self.tasks.map(t, t.replicas).sum()"


def find_dependency_cycle(edges: dict[str, list[str]]) -> list[str] | None:
    """A cycle in `task -> tasks it depends on`, as a path [a, b, ..., a], or None.

    CEL cannot express this (no recursion), so the jobs operator calls this and reports the cycle
    as a `Valid=False` condition; the pydantic model raises with the same text.
    """
    white, grey, black = 0, 1, 2
    color = dict.fromkeys(edges, white)
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        color[node] = grey
        stack.append(node)
        for nxt in edges.get(node, []):
            if color.get(nxt, black) == grey:
                return [*stack[stack.index(nxt) :], nxt]
            if color.get(nxt) == white:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        color[node] = black
        return None

    for start in sorted(edges):
        if color[start] == white:
            found = visit(start)
            if found:
                return found
    return None


_TASKS_FIXED = (
    "spec.tasks: tasks cannot be added, removed, renamed or reordered (their replicas may "
    "change): delete and re-create the job"
)


class VCJobSpec(JobSpecBase):
    """Volcano's job shape: tasks of identical pods, a gang minimum, event→action policies."""

    tasks: list[TaskSpec] = Field(
        min_length=1,
        max_length=MAX_TASKS,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )
    min_available: int | None = Field(
        default=None,
        ge=0,
        le=2**31 - 1,
        description="Job gang minimum; unset means the sum of the tasks' minAvailable.",
    )
    min_success: int | None = Field(
        default=None, ge=1, le=2**31 - 1, description="Complete once this many pods succeed."
    )
    plugins: VCJobPlugins | None = None
    volumes: RefusedList = None
    scheduler_name: DnsSubdomain | None = Field(
        default=None,
        description="schedulerName for task pods that set none; unset means sluice. Kept so "
        "Volcano job specs move over unchanged.",
    )

    cel_rules: ClassVar = (
        Rule(
            f"!has(self.minAvailable) || self.minAvailable <= {_TOTAL_REPLICAS}",
            "spec.minAvailable must not exceed the sum of spec.tasks[].replicas",
            field_path=".minAvailable",
        ),
        Rule(
            f"!has(self.minSuccess) || self.minSuccess <= {_TOTAL_REPLICAS}",
            "spec.minSuccess must not exceed the sum of spec.tasks[].replicas",
            field_path=".minSuccess",
        ),
        Rule(
            "self.tasks.all(t, self.tasks.exists_one(u, u.name == t.name))",
            f"spec.tasks[].name must be unique (a task without a name is `{UNNAMED_TASK}`, as "
            "in Volcano: name the others, e.g. default1)",
            field_path=".tasks",
        ),
        Rule(
            "self.tasks.all(t, !has(t.dependsOn) || "
            "t.dependsOn.name.all(n, self.tasks.exists(u, u.name == n)))",
            "spec.tasks[].dependsOn.name must name a task of this job",
            field_path=".tasks",
        ),
        Rule(
            "self.tasks.map(t, t.name) == oldSelf.tasks.map(t, t.name)",
            _TASKS_FIXED,
            field_path=".tasks",
        ),
        *_JOB_RULES,
    )
    refused_fields: ClassVar = {
        "volumes": "spec.volumes is not supported: create the PersistentVolumeClaims yourself "
        "and mount them in tasks[].template (volumes and volumeMounts)",
    }
    immutable_fields: ClassVar = {
        **_JOB_IMMUTABLE,
        "scheduler_name": "spec.schedulerName cannot change: delete and re-create the job",
        "plugins": "spec.plugins cannot change: delete and re-create the job",
    }

    def update_errors(self, old: Self) -> list[str]:
        errors = super().update_errors(old)
        if [t.name for t in self.tasks] != [t.name for t in old.tasks]:
            errors.append(_TASKS_FIXED)
        return errors

    @model_validator(mode="after")
    def _job_rules(self) -> VCJobSpec:
        total = sum(t.replicas for t in self.tasks)
        if self.min_available is not None and self.min_available > total:
            raise ValueError(f"{self.cel_rules[0].message} ({self.min_available} > {total})")
        if self.min_success is not None and self.min_success > total:
            raise ValueError(f"{self.cel_rules[1].message} ({self.min_success} > {total})")
        names = [t.name for t in self.tasks]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"{self.cel_rules[2].message}: duplicated {', '.join(dupes)}")
        for task in self.tasks:
            missing = [
                n for n in (task.depends_on.name if task.depends_on else []) if n not in names
            ]
            if missing:
                raise ValueError(
                    f"{self.cel_rules[3].message}: task {task.name} depends on unknown "
                    f"{', '.join(missing)}"
                )
        cycle = find_dependency_cycle(self.dependency_graph())
        if cycle:
            raise ValueError(f"spec.tasks[].dependsOn forms a cycle: {' -> '.join(cycle)}")
        return self

    def dependency_graph(self) -> dict[str, list[str]]:
        return {t.name: list(t.depends_on.name) if t.depends_on else [] for t in self.tasks}

    @property
    def effective_min_available(self) -> int:
        if self.min_available is not None:
            return self.min_available
        return sum(t.effective_min_available for t in self.tasks)


class ReplicaSpec(SluiceModel):
    """One replica type of a HybridJob (PS, Worker, Chief...): elastic between min and max."""

    template: PodTemplate = Field(description="A core/v1 PodTemplateSpec.")
    min_replicas: int = Field(ge=0, le=100000, description="Part of the job's gang minimum.")
    max_replicas: int | None = Field(
        default=None, ge=0, le=100000, description="Grow up to this when idle; unset: min."
    )
    replicas: int | None = Field(
        default=None,
        ge=0,
        le=100000,
        description="Desired count within [min, max]; unset lets the scheduler choose.",
    )
    priority: int | None = Field(
        default=None,
        ge=-(2**31),
        le=2**31 - 1,
        description="Replica types with higher priority grow first and shrink last.",
    )
    restart_policy: RestartPolicy | None = None
    policies: Policies | None = None

    cel_rules: ClassVar = (
        Rule(
            "!has(self.maxReplicas) || self.minReplicas <= self.maxReplicas",
            "replicaSpecs[].minReplicas must not exceed replicaSpecs[].maxReplicas",
            field_path=".minReplicas",
        ),
        Rule(
            "!has(self.replicas) || (self.replicas >= self.minReplicas && "
            "(has(self.maxReplicas) ? self.replicas <= self.maxReplicas "
            ": self.replicas == self.minReplicas))",
            "replicaSpecs[].replicas must lie between minReplicas and maxReplicas",
            field_path=".replicas",
        ),
        *POLICY_RULES,
    )
    immutable_fields: ClassVar = {
        "template": _TEMPLATE_IMMUTABLE.format(where="replicaSpecs[]"),
    }

    @model_validator(mode="after")
    def _bounds(self) -> ReplicaSpec:
        if self.max_replicas is not None and self.min_replicas > self.max_replicas:
            raise ValueError(
                f"{self.cel_rules[0].message} ({self.min_replicas} > {self.max_replicas})"
            )
        if self.replicas is not None and not (
            self.min_replicas <= self.replicas <= self.effective_max_replicas
        ):
            raise ValueError(self.cel_rules[1].message)
        check_policies(self.policies)
        return self

    @property
    def effective_max_replicas(self) -> int:
        return self.min_replicas if self.max_replicas is None else self.max_replicas


_REPLICA_TYPES_FIXED = (
    "spec.replicaSpecs: replica types cannot be added or removed (their replica counts may "
    "change): delete and re-create the job"
)


class HybridJobSpec(JobSpecBase):
    """SkyForm's shape: replica types, each elastic between minReplicas and maxReplicas."""

    replica_specs: dict[str, ReplicaSpec] = Field(
        min_length=1,
        max_length=16,
        description="Replica type (e.g. PS, Worker, Chief) → spec.",
    )

    cel_rules: ClassVar = (
        Rule(
            "self.replicaSpecs.all(k, k.matches('" + REPLICA_TYPE_PATTERN + "'))",
            "spec.replicaSpecs keys must be alphanumeric replica types like PS or Worker "
            "(at most 32 characters)",
            field_path=".replicaSpecs",
        ),
        Rule(
            "self.replicaSpecs.exists(k, self.replicaSpecs[k].minReplicas > 0)",
            "spec.replicaSpecs: at least one replica type needs minReplicas > 0",
            field_path=".replicaSpecs",
        ),
        Rule(
            "!has(self.networkTopology) || !has(self.networkTopology.units) || "
            "!has(self.networkTopology.units.replicaTypes) || "
            "self.networkTopology.units.replicaTypes.all(r, r in self.replicaSpecs)",
            "spec.networkTopology.units.replicaTypes must name keys of spec.replicaSpecs",
            field_path=".networkTopology.units.replicaTypes",
        ),
        # Keys are lower-cased in pod names: PS and ps would create the same pods.
        Rule(
            "self.replicaSpecs.all(k, self.replicaSpecs.exists_one(j, "
            "j.lowerAscii() == k.lowerAscii()))",
            "spec.replicaSpecs keys must differ in more than case (PS and ps name the same pods)",
            field_path=".replicaSpecs",
        ),
        Rule(
            "self.replicaSpecs.all(k, k in oldSelf.replicaSpecs) && "
            "oldSelf.replicaSpecs.all(k, k in self.replicaSpecs)",
            _REPLICA_TYPES_FIXED,
            field_path=".replicaSpecs",
        ),
        *_JOB_RULES,
    )
    immutable_fields: ClassVar = _JOB_IMMUTABLE

    @field_validator("replica_specs")
    @classmethod
    def _keys(cls, value: dict[str, ReplicaSpec]) -> dict[str, ReplicaSpec]:
        for key in value:
            if not re.match(REPLICA_TYPE_PATTERN, key):
                raise ValueError(f"{cls.cel_rules[0].message}: got {key!r}")
        if not any(spec.min_replicas > 0 for spec in value.values()):
            raise ValueError(cls.cel_rules[1].message)
        lowered = [k.lower() for k in value]
        if len(set(lowered)) != len(lowered):
            raise ValueError(f"{cls.cel_rules[3].message}: got {', '.join(sorted(value))}")
        return value

    def update_errors(self, old: Self) -> list[str]:
        errors = super().update_errors(old)
        if set(self.replica_specs) != set(old.replica_specs):
            errors.append(_REPLICA_TYPES_FIXED)
        return errors

    @model_validator(mode="after")
    def _units(self) -> HybridJobSpec:
        units = self.network_topology.units if self.network_topology else None
        if units and units.replica_types:
            unknown = [r for r in units.replica_types if r not in self.replica_specs]
            if unknown:
                raise ValueError(f"{self.cel_rules[2].message}: {', '.join(unknown)}")
        return self

    @property
    def min_member(self) -> int:
        """The job's gang minimum: every replica type's minimum."""
        return sum(s.min_replicas for s in self.replica_specs.values())


# ------------------------------------------------------------------------------------------
# status (shared by both kinds)


class Transition(StatusModel):
    """One state change at any of the three levels, as also posted as an Event and to hooks."""

    seq: int | None = Field(
        default=None,
        ge=1,
        description="Position in the job's transition log: 1, 2, 3... without gaps, per job uid.",
    )
    level: TransitionLevel
    name: str = Field(max_length=MAX_NAME, description="Job name, task name, or pod name.")
    from_: str | None = Field(default=None, alias="from", max_length=MAX_LABEL)
    to: str = Field(max_length=MAX_LABEL)
    reason: str | None = Field(default=None, max_length=MAX_REASON)
    message: str | None = Field(default=None, max_length=MAX_MESSAGE)
    time: AwareDatetime | None = None


class TaskStatus(StatusModel):
    """State of one task (VCJob) or replica type (HybridJob)."""

    name: str = Field(max_length=MAX_LABEL)
    phase: TaskPhase | None = None
    replicas: Count | None = Field(default=None, description="Current desired pod count.")
    min_available: Count | None = None
    pending: Count | None = None
    running: Count | None = None
    succeeded: Count | None = None
    failed: Count | None = None
    reason: str | None = Field(default=None, max_length=MAX_REASON)
    last_transition_time: AwareDatetime | None = None


class ReplicaStatus(StatusModel):
    """State of one pod of the job (a row of `status.replicas`; see MAX_REPLICA_ROWS)."""

    name: str = Field(max_length=MAX_NAME, description="Pod name.")
    task: str = Field(max_length=MAX_LABEL)
    index: Count
    phase: ReplicaPhase
    node: str | None = Field(default=None, max_length=MAX_NAME)
    restarts: Count | None = None
    exit_code: int | None = None
    reason: str | None = Field(default=None, max_length=MAX_REASON)
    message: str | None = Field(default=None, max_length=MAX_MESSAGE)
    last_transition_time: AwareDatetime | None = None


#: Rows `status.replicas` may hold. A job may have 100,000 pods per task, and one row per pod
#: would outgrow etcd's object limit (1.5 MiB) long before that; with these caps a job's status
#: stays below about 0.6 MiB whatever its size.
MAX_REPLICA_ROWS: Final = 256
MAX_TRANSITIONS: Final = 64
MAX_DELAYED: Final = 256
MAX_SINKS: Final = 32
# Phases a reader does not need a row for when rows are scarce: the counts already say it.
_QUIET_PHASES: Final = frozenset({ReplicaPhase.RUNNING.value, ReplicaPhase.SUCCEEDED.value})
_Row = TypeVar("_Row", ReplicaStatus, Mapping[str, Any])


def _row_order(row: ReplicaStatus | Mapping[str, Any]) -> tuple[bool, str, int]:
    if isinstance(row, ReplicaStatus):
        return (row.phase.value in _QUIET_PHASES, row.task, row.index)
    return (str(row["phase"]) in _QUIET_PHASES, str(row["task"]), int(row["index"]))


def bound_replica_rows(rows: Iterable[_Row]) -> tuple[list[_Row], int]:
    """The rows to write to `status.replicas` and how many pods they leave out.

    The rule the jobs operator follows: up to MAX_REPLICA_ROWS pods, one row per pod. Beyond,
    pods that need attention (every phase but Running and Succeeded) come first, then the rest,
    each in (task, index) order, cut at MAX_REPLICA_ROWS; `status.replicasOmitted` holds the
    number cut. The per-task counts in `status.tasks[]` always cover every pod. Rows are models
    or their wire form (dicts with `phase`, `task`, `index`).
    """
    ordered = sorted(rows, key=_row_order)
    return ordered[:MAX_REPLICA_ROWS], max(0, len(ordered) - MAX_REPLICA_ROWS)


class SinkDelivery(StatusModel):
    """Progress of one EventSink through this job's transitions (written by the events operator)."""

    sink: DnsSubdomain
    last_delivered_sequence: Count = Field(
        default=0,
        description="Every transition up to this seq is done for this sink: acknowledged, not "
        "wanted by it, or given up on after its retry policy.",
    )
    failures: Count | None = Field(default=None, description="Events given up on.")
    last_error: str | None = Field(default=None, max_length=MAX_MESSAGE)


class DelayedAction(StatusModel):
    """A policy action waiting for its `timeout`."""

    event: PolicyEvent
    task: str | None = None
    pod: str | None = None
    due: AwareDatetime


class JobStatusBase(StatusModel):
    phase: JobPhase | None = None
    reason: str | None = None
    message: str | None = None
    last_transition_time: AwareDatetime | None = None
    min_available: Count | None = None
    pending: Count | None = None
    running: Count | None = None
    succeeded: Count | None = None
    failed: Count | None = None
    terminating: Count | None = None
    unknown: Count | None = None
    retry_count: Count | None = None
    version: Count | None = Field(
        default=None, description="Bumped on every restart of the whole job."
    )
    pod_group: str | None = Field(default=None, description="Name of the job's PodGroup.")
    tasks: list[TaskStatus] | None = Field(default=None, max_length=MAX_TASKS)
    replicas: list[ReplicaStatus] | None = Field(
        default=None,
        max_length=MAX_REPLICA_ROWS,
        description=f"One row per pod for jobs of up to {MAX_REPLICA_ROWS} pods; beyond, the pods "
        "that are neither Running nor Succeeded first, then the rest, in (task, index) order, "
        f"cut at {MAX_REPLICA_ROWS} rows (replicasOmitted says how many pods have no row; "
        "tasks[] counts every pod).",
    )
    replicas_omitted: Count | None = Field(
        default=None, description="Pods of the job that have no row in `replicas`."
    )
    transitions: list[Transition] | None = Field(
        default=None,
        max_length=MAX_TRANSITIONS,
        description=f"Most recent transitions, newest last (at most {MAX_TRANSITIONS}).",
    )
    transition_seq: Count | None = Field(
        default=None, description="seq of the newest transition ever recorded for this job."
    )
    transitions_delivered: Count | None = Field(
        default=None,
        description="Transitions up to this seq are delivered to the job's hooks (written by "
        "the events operator); newer ones are kept in `transitions` until they are.",
    )
    transitions_dropped: Count | None = Field(
        default=None,
        description="Undelivered transitions that did not fit the window (0 unless a sink is "
        "down for very long).",
    )
    delivery: list[SinkDelivery] | None = Field(
        default=None,
        max_length=MAX_SINKS,
        description="Per EventSink delivery cursor (written by the events operator); "
        "transitionsDelivered is the lowest of them.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["sink"]},
    )
    max_replicas: Count | None = Field(
        default=None, description="Pods the job may grow to (sum over its tasks)."
    )
    preemption: PreemptionStatus | None = None
    delayed_actions: list[DelayedAction] | None = Field(
        default=None,
        max_length=MAX_DELAYED,
        description="Policy actions waiting for their timeout: taken at `due` if the situation "
        "still holds then (the pod still failed, the task or PodGroup still in that phase).",
    )
    observed_generation: int | None = None
    conditions: Conditions | None = None


class VCJobStatus(JobStatusBase):
    pass


class HybridJobStatus(JobStatusBase):
    pass


_JOB_COLUMNS = (
    PrinterColumn("Phase", ".status.phase"),
    PrinterColumn("Running", ".status.running", "integer"),
    PrinterColumn("Min", ".status.minAvailable", "integer"),
    PrinterColumn("Max", ".status.maxReplicas", "integer"),
    PrinterColumn("Succeeded", ".status.succeeded", "integer"),
    PrinterColumn("Failed", ".status.failed", "integer"),
    PrinterColumn("Queue", ".spec.queue"),
    PrinterColumn("Retries", ".status.retryCount", "integer", priority=1),
    AGE,
)


class VCJob(Resource):
    """A Volcano-style batch job."""

    group: ClassVar = GROUP
    plural: ClassVar = "vcjobs"
    # Volcano's Job has the short name `vcjob`.
    singular: ClassVar = "sluicevcjob"
    scope: ClassVar = "Namespaced"
    short_names: ClassVar = ("vcj",)
    printer_columns: ClassVar = _JOB_COLUMNS

    api_version: Literal["batch.sluice.dev/v1alpha1"] = API_VERSION
    kind: Literal["VCJob"] = "VCJob"
    spec: VCJobSpec
    status: VCJobStatus | None = None


class HybridJob(Resource):
    """An elastic, SkyForm-style job of several replica types."""

    group: ClassVar = GROUP
    plural: ClassVar = "hybridjobs"
    scope: ClassVar = "Namespaced"
    short_names: ClassVar = ("hj",)
    printer_columns: ClassVar = _JOB_COLUMNS

    api_version: Literal["batch.sluice.dev/v1alpha1"] = API_VERSION
    kind: Literal["HybridJob"] = "HybridJob"
    spec: HybridJobSpec
    status: HybridJobStatus | None = None
