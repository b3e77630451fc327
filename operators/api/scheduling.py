"""scheduling.sluice.dev/v1alpha1: Pool, Queue, PodGroup, Topology.

Pools partition nodes (supply); queues partition quota (demand); a PodGroup is the gang the
scheduler admits and places as a whole; a Topology names the network tiers of the cluster.
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Annotated, Any, ClassVar, Final, Literal

from pydantic import AwareDatetime, Field, model_validator

from operators.api import labels
from operators.api.base import (
    DNS_LABEL_PATTERN,
    MAX_LABEL,
    MAX_LIST,
    MAX_MESSAGE,
    MAX_NAME,
    MAX_REASON,
    MAX_TASKS,
    MAX_TENANTS,
    Conditions,
    DnsLabel,
    DnsSubdomain,
    LabelKey,
    RefusedInt,
    RefusedObject,
    RefusedString,
    ResourceList,
    Rule,
    SluiceModel,
    StatusModel,
    cel_string,
    quantities,
)
from operators.api.eventlog import EventLog
from operators.api.resource import AGE, PrinterColumn, Resource

__all__ = [
    "LabelSelectorOperator",
    "LabelSelectorRequirement",
    "LastEviction",
    "NetworkTopology",
    "NetworkTopologyMode",
    "NodeSelector",
    "PodGroup",
    "PodGroupConditionType",
    "PodGroupPhase",
    "PodGroupReason",
    "PodGroupReplicaSpec",
    "PodGroupSpec",
    "PodGroupStatus",
    "Pool",
    "PoolConditionType",
    "PoolReason",
    "PoolSpec",
    "PoolStatus",
    "PreemptionRole",
    "PreemptionStatus",
    "Queue",
    "QueueConditionType",
    "QueueReason",
    "QueueSpec",
    "QueueSpecState",
    "QueueState",
    "QueueStatus",
    "Tenant",
    "Topology",
    "TopologyLevel",
    "TopologySpec",
    "TopologyStatus",
    "TopologyUnits",
]

GROUP = labels.SCHEDULING_GROUP
API_VERSION: Final = "scheduling.sluice.dev/v1alpha1"

Int32 = Annotated[int, Field(ge=-(2**31), le=2**31 - 1)]
Count = Annotated[int, Field(ge=0, le=2**31 - 1)]

# ------------------------------------------------------------------------------------------
# shared pieces


class NetworkTopologyMode(StrEnum):
    HARD = "hard"  # all pods must fit under one domain of tier <= highestTier, or none start
    SOFT = "soft"  # prefer the lowest tier that fits, but place anyway


class TopologyUnits(SluiceModel):
    """Split a job's pods into units of `size` pods, each of which must share one `tier` domain
    (e.g. groups of 8 workers that must sit under one ToR switch)."""

    size: int = Field(ge=1, le=65536, description="Pods per unit.")
    tier: DnsLabel = Field(description="Topology level name each unit must share, e.g. `tor`.")
    replica_types: list[Annotated[str, Field(max_length=MAX_LABEL)]] | None = Field(
        default=None,
        max_length=16,
        description="Replica types (HybridJob) or tasks (VCJob) the units are made of; "
        "empty means all pods.",
    )


class NetworkTopology(SluiceModel):
    """Where a gang may be placed in the network, named by the tiers of the `Topology` object."""

    mode: NetworkTopologyMode = Field(
        default=NetworkTopologyMode.HARD, description="`hard` (default) or `soft`."
    )
    highest_tier: DnsLabel | None = Field(
        default=None,
        description="Name of the coarsest Topology level the whole gang may span; unset means any.",
    )
    soft_after_seconds: int | None = Field(
        default=None,
        ge=0,
        le=7 * 86400,
        description="`hard` only: seconds after the group's creation that it waits for one "
        "domain of `highestTier` or finer; after that it is placed as `soft` (the finest domain "
        "that holds it, else anywhere). Unset: wait for ever.",
    )
    units: TopologyUnits | None = None
    highest_tier_allowed: RefusedInt = None
    highest_tier_name: RefusedString = None

    cel_rules: ClassVar = (
        Rule(
            "!has(self.softAfterSeconds) || !has(self.mode) || self.mode == 'hard'",
            "networkTopology.softAfterSeconds applies to mode: hard only (a soft request never "
            "waits for a domain)",
            field_path=".softAfterSeconds",
        ),
    )

    refused_fields: ClassVar = {
        "highest_tier_allowed": "networkTopology.highestTierAllowed (Volcano's tier number) is "
        "not supported: name the tier instead, e.g. highestTier: tor (the level names of your "
        "Topology object)",
        "highest_tier_name": "networkTopology.highestTierName is spelled highestTier in Sluice: "
        "write highestTier: <level name of your Topology object>",
    }

    @model_validator(mode="after")
    def _soft_after_only_when_hard(self) -> NetworkTopology:
        if self.soft_after_seconds is not None and self.mode is not NetworkTopologyMode.HARD:
            raise ValueError(self.cel_rules[0].message)
        return self


class PreemptionRole(StrEnum):
    PRIVILEGED = "Privileged"  # a preemptor waiting for its victims' grace period
    WILL_EVICT = "WillEvict"  # a victim that will be evicted at `deadline`


class PreemptionStatus(StatusModel):
    """Delayed preemption in progress, shown on both the preemptor and each victim."""

    role: PreemptionRole
    deadline: AwareDatetime | None = None
    peers: list[str] | None = Field(
        default=None, description="namespace/name of the other side (victims or preemptor)."
    )
    reason: str | None = None


# ------------------------------------------------------------------------------------------
# Pool


class LabelSelectorOperator(StrEnum):
    IN = "In"
    NOT_IN = "NotIn"
    EXISTS = "Exists"
    DOES_NOT_EXIST = "DoesNotExist"


class LabelSelectorRequirement(SluiceModel):
    key: LabelKey
    operator: LabelSelectorOperator
    values: list[Annotated[str, Field(max_length=MAX_LABEL)]] | None = Field(
        default=None, max_length=MAX_LIST
    )

    cel_rules: ClassVar = (
        Rule(
            "!(self.operator in ['In', 'NotIn']) || (has(self.values) && size(self.values) > 0)",
            "matchExpressions[].values must be non-empty for operator In and NotIn",
            field_path=".values",
        ),
        Rule(
            "!(self.operator in ['Exists', 'DoesNotExist']) || !has(self.values) "
            "|| size(self.values) == 0",
            "matchExpressions[].values must be empty for operator Exists and DoesNotExist",
            field_path=".values",
        ),
    )

    @model_validator(mode="after")
    def _values_match_operator(self) -> LabelSelectorRequirement:
        needs = self.operator in (LabelSelectorOperator.IN, LabelSelectorOperator.NOT_IN)
        if needs and not self.values:
            raise ValueError(self.cel_rules[0].message)
        if not needs and self.values:
            raise ValueError(self.cel_rules[1].message)
        return self


_NOT_MEMBERSHIP_LABEL = (
    f"(!has(self.matchLabels) || !('{labels.POOL}' in self.matchLabels)) && "
    f"(!has(self.matchExpressions) || self.matchExpressions.all(e, e.key != '{labels.POOL}'))"
)


class NodeSelector(SluiceModel):
    """A label selector over nodes (the metav1.LabelSelector shape). Empty matches every node."""

    match_labels: dict[str, Annotated[str, Field(max_length=MAX_LABEL)]] | None = Field(
        default=None, max_length=MAX_LIST
    )
    match_expressions: list[LabelSelectorRequirement] | None = Field(
        default=None, max_length=MAX_LIST
    )

    # The membership label is the pool operator's output; selecting on it would make a pool's
    # nodes depend on themselves.
    cel_rules: ClassVar = (
        Rule(
            _NOT_MEMBERSHIP_LABEL,
            f"nodeSelector must not use the label {labels.POOL}: the pool operator writes it "
            "from the selectors",
        ),
    )

    @model_validator(mode="after")
    def _not_membership_label(self) -> NodeSelector:
        keys = set(self.match_labels or ()) | {e.key for e in self.match_expressions or ()}
        if labels.POOL in keys:
            raise ValueError(self.cel_rules[0].message)
        return self


_SELECTOR_NOT_EMPTY = (
    "(has(self.spec.nodeSelector.matchLabels) && size(self.spec.nodeSelector.matchLabels) > 0)"
    " || (has(self.spec.nodeSelector.matchExpressions) && "
    "size(self.spec.nodeSelector.matchExpressions) > 0)"
)


class PoolSpec(SluiceModel):
    """A pool of nodes. Nodes matching no pool, or more than one, belong to the `default` pool."""

    node_selector: NodeSelector = Field(
        description="Which nodes belong to this pool; must not be empty (an empty selector would "
        "claim every node; unclaimed nodes are the built-in `default` pool already). The "
        "built-in `default` Pool, which the pool operator creates, has an empty one."
    )
    disable_sharing: bool = Field(
        default=False, description="Other pools' tasks may not borrow nodes of this pool."
    )
    disable_borrowing: bool = Field(
        default=False, description="This pool's tasks may not borrow nodes of other pools."
    )
    disable_preemption: bool = Field(
        default=False,
        description=(
            "Nothing running on this pool's nodes is evicted to make room for another job: "
            "neither priority preemption nor cross-queue reclaim. Only tasks of other pools "
            "borrowed onto its nodes go back when this pool's own jobs need the room."
        ),
    )
    disable_consolidation: bool = Field(
        default=False,
        description=(
            "No job running on this pool's nodes is moved (evicted and placed again elsewhere) "
            "to open a placement for a fragmented gang."
        ),
    )

    def selects_something(self) -> bool:
        return bool(self.node_selector.match_labels or self.node_selector.match_expressions)


class PoolConditionType(StrEnum):
    """Conditions the pool operator writes on a Pool."""

    SELECTOR_OVERLAP = "SelectorOverlap"
    """True when some nodes this pool selects also match another pool (they go to `default`)."""


class PoolReason(StrEnum):
    NODES_IN_DEFAULT = "NodesInDefault"
    NO_OVERLAP = "NoOverlap"


class PoolStatus(StatusModel):
    """Per-resource totals (cpu, memory, nvidia.com/gpu, ephemeral-storage, nodes, pods).

    Writers (docs/admin.md): the scheduler writes capacity, allocatable, used, shared and pending;
    the pool operator writes nodeCount, observedGeneration and conditions."""

    node_count: Count | None = Field(default=None, description="Member nodes (pool operator).")
    capacity: ResourceList | None = None
    allocatable: ResourceList | None = None
    used: ResourceList | None = None
    shared: ResourceList | None = Field(
        default=None, description="Part of `used` taken by other pools' (borrowed) tasks."
    )
    pending: ResourceList | None = Field(
        default=None, description="Requests of this pool's pods waiting to be placed."
    )
    observed_generation: int | None = None
    conditions: Conditions | None = None


class Pool(Resource):
    """A set of nodes that lends idle capacity to other pools and reclaims it when needed."""

    group: ClassVar = GROUP
    plural: ClassVar = "pools"
    scope: ClassVar = "Cluster"
    short_names: ClassVar = ("spool",)
    printer_columns: ClassVar = (
        PrinterColumn("Nodes", ".status.nodeCount", "integer"),
        PrinterColumn("CPU", ".status.allocatable.cpu", description="Allocatable CPU"),
        PrinterColumn(
            "GPU", ".status.allocatable.nvidia\\.com/gpu", description="Allocatable GPUs"
        ),
        PrinterColumn("GPU-Used", ".status.used.nvidia\\.com/gpu"),
        # Named after the flags they show: an unset flag is blank, `true` means disabled.
        PrinterColumn("Disable-Sharing", ".spec.disableSharing", "boolean", priority=1),
        PrinterColumn("Disable-Borrowing", ".spec.disableBorrowing", "boolean", priority=1),
        PrinterColumn("Disable-Preemption", ".spec.disablePreemption", "boolean", priority=1),
        AGE,
    )
    # `default` exists as an object only so its status can be shown; the pool operator creates
    # it with an empty selector, which is never evaluated (it holds the nodes no pool claims).
    cel_rules: ClassVar = (
        Rule(
            f"self.metadata.name == '{labels.DEFAULT_POOL}' || {_SELECTOR_NOT_EMPTY}",
            "spec.nodeSelector must not be empty: give matchLabels or matchExpressions "
            "(nodes no pool claims are in the built-in default pool)",
            field_path=".spec.nodeSelector",
        ),
        Rule(
            f"self.metadata.name != '{labels.DEFAULT_POOL}' || !({_SELECTOR_NOT_EMPTY})",
            "metadata.name: `default` is the built-in pool of unclaimed nodes; it selects "
            "nothing itself, so name your pool differently",
            field_path=".metadata.name",
        ),
    )

    api_version: Literal["scheduling.sluice.dev/v1alpha1"] = API_VERSION
    kind: Literal["Pool"] = "Pool"
    spec: PoolSpec
    status: PoolStatus | None = None

    @model_validator(mode="after")
    def _selector_fits_name(self) -> Pool:
        built_in = self.metadata.name == labels.DEFAULT_POOL
        if not built_in and not self.spec.selects_something():
            raise ValueError(self.cel_rules[0].message)
        if built_in and self.spec.selects_something():
            raise ValueError(self.cel_rules[1].message)
        return self


# ------------------------------------------------------------------------------------------
# Queue


class QueueSpecState(StrEnum):
    """What the admin asks for."""

    OPEN = "Open"
    CLOSED = "Closed"


class QueueState(StrEnum):
    """What the queue operator observes (Closing: closed, but podgroups remain)."""

    OPEN = "Open"
    CLOSING = "Closing"
    CLOSED = "Closed"
    UNKNOWN = "Unknown"


class Tenant(SluiceModel):
    """A namespace or a user inside a queue, with its own priority and preemption right."""

    namespace: DnsLabel | None = None
    user: Annotated[str, Field(min_length=1, max_length=MAX_NAME)] | None = None
    priority: Int32 = Field(default=0, description="Higher runs first within the queue.")
    can_preempt: bool = Field(
        default=True, description="May this tenant's jobs preempt others in the queue."
    )

    cel_rules: ClassVar = (
        Rule(
            "has(self.namespace) != has(self.user)",
            "tenants[]: set exactly one of namespace or user",
        ),
    )

    @model_validator(mode="after")
    def _one_of(self) -> Tenant:
        if (self.namespace is None) == (self.user is None):
            raise ValueError(self.cel_rules[0].message)
        return self


# Quantities are int-or-string, which the API server sizes at 3 MB each when it estimates a
# rule's cost: comparing every resource of two 32-entry maps is 4x over the budget (measured on
# v1.33), so admission compares the resources quotas are made of and the Python models compare all.
GUARANTEE_CHECKED_AT_ADMISSION: Final = ("cpu", "memory", "nvidia.com/gpu")
_GUARANTEE_FITS = (
    "!has(self.guarantee) || !has(self.capability) || ("
    + " && ".join(
        f"(!('{r}' in self.guarantee) || !('{r}' in self.capability) || "
        f"quantity(string(self.guarantee['{r}'])).compareTo("
        f"quantity(string(self.capability['{r}']))) <= 0)"
        for r in GUARANTEE_CHECKED_AT_ADMISSION
    )
    + ")"
)


# A tenant is either a namespace or a user; the same one twice would make its priority ambiguous.
# (Written as filter/map/size: the all/exists_one form is estimated >100x over the cost budget.)
_TENANTS_UNIQUE = (
    "!has(self.tenants) || ("
    + " && ".join(
        f"self.tenants.filter(t, has(t.{f})).map(t, t.{f}).all(n, "
        f"self.tenants.filter(t, has(t.{f}) && t.{f} == n).size() == 1)"
        for f in ("namespace", "user")
    )
    + ")"
)


VOLCANO_GUARANTEE = (
    "spec.guarantee.resource is Volcano's shape: list the resources directly, "
    "e.g. guarantee: {cpu: 2, memory: 2Gi}"
)


class TimeBasedFairShare(SluiceModel):
    """On a parent queue: its children split the over-quota part of its share by weight
    corrected by their past GPU usage (docs/scheduling.md "Time-based fair share")."""

    k_value: float = Field(
        default=1.0,
        ge=0,
        le=100,
        description="Strength of the correction: effective weight share = max(0, w + k (w - u)) "
        "with w the weight share and u the usage share among the competing children; 0 = off.",
    )


class UsageBucket(SluiceModel):
    start: AwareDatetime
    gpu_seconds: float = Field(ge=0)


class QueueUsage(StatusModel):
    """Past GPU usage of the queue's subtree, written by the scheduler (its one writer) at most
    every `--usage-write-seconds` and read back when it starts."""

    gpu_seconds: float | None = Field(
        default=None, ge=0, description="Decayed GPU-seconds in the window at `updated`."
    )
    updated: AwareDatetime | None = None
    buckets: list[UsageBucket] | None = Field(
        default=None,
        max_length=64,
        description="GPU-seconds per slice of the window, oldest first.",
    )


class QueueSpec(SluiceModel):
    """Quota for a tenant: a node of the queue tree rooted at `root`."""

    parent: DnsLabel | None = Field(default=None, description="Parent queue; unset means `root`.")
    weight: int | None = Field(
        default=None,
        ge=1,
        le=65535,
        description="Share of idle capacity among siblings (water-filling); unset means 1.",
    )
    guarantee: ResourceList | None = Field(
        default=None,
        description="Never reclaimed below this. Children's guarantees must fit the parent's "
        "(checked by the queue operator).",
    )
    capability: ResourceList | None = Field(
        default=None, description="Hard cap per resource; unset resources are uncapped."
    )
    overcommit: bool = Field(
        default=False,
        description="Admit jobs annotated scheduling.sluice.dev/overcommit=true beyond "
        "capability (they are evicted first).",
    )
    reclaimable: bool = Field(
        default=True, description="May others reclaim what this queue borrowed above deserved."
    )
    state: QueueSpecState = Field(
        default=QueueSpecState.OPEN, description="`Open` accepts new jobs; `Closed` does not."
    )
    tenants: list[Tenant] | None = Field(default=None, max_length=MAX_TENANTS)
    preemption_delay_seconds: int | None = Field(
        default=None,
        ge=0,
        le=7 * 86400,
        description="Grace period before this queue's jobs are preempted (delayed preemption).",
    )
    time_based_fair_share: TimeBasedFairShare | None = Field(
        default=None,
        description="Correct how this queue's children split the over-quota part of its share "
        "by their past GPU usage.",
    )
    deserved: RefusedObject = None

    refused_fields: ClassVar = {
        "deserved": "spec.deserved is computed by Sluice (status.deserved) from weight, guarantee "
        "and capability: drop it, and give a floor as guarantee: {cpu: ...}",
    }

    cel_rules: ClassVar = (
        Rule(
            _GUARANTEE_FITS,
            "spec.guarantee must not exceed spec.capability",
            field_path=".guarantee",
        ),
        Rule(
            _TENANTS_UNIQUE,
            "spec.tenants: each namespace and each user may appear only once",
            field_path=".tenants",
        ),
        Rule(
            "!has(self.guarantee) || !('resource' in self.guarantee)",
            VOLCANO_GUARANTEE,
            field_path=".guarantee",
        ),
        Rule(
            f"!has(self.parent) || self.parent != '{labels.DEFAULT_QUEUE}'",
            "spec.parent: `default` is a built-in leaf queue and cannot have children",
            field_path=".parent",
        ),
    )
    immutable_fields: ClassVar = {
        "parent": "spec.parent cannot change: moving a queue would move its jobs' quota between "
        "ancestors; create a new queue instead",
    }

    @model_validator(mode="before")
    @classmethod
    def _not_volcano_guarantee(cls, data: Any) -> Any:
        guarantee = data.get("guarantee") if isinstance(data, dict) else None
        if isinstance(guarantee, dict) and isinstance(guarantee.get("resource"), dict):
            raise ValueError(VOLCANO_GUARANTEE)  # noqa: TRY004 (pydantic wants ValueError)
        return data

    @model_validator(mode="after")
    def _tenants_unique(self) -> QueueSpec:
        seen = [(t.namespace, t.user) for t in self.tenants or ()]
        if len(set(seen)) != len(seen):
            raise ValueError(self.cel_rules[1].message)
        if self.parent == labels.DEFAULT_QUEUE:
            raise ValueError(self.cel_rules[3].message)
        return self

    @model_validator(mode="after")
    def _guarantee_fits(self) -> QueueSpec:
        cap = quantities(self.capability)
        for name, amount in quantities(self.guarantee).items():
            if name in cap and amount > cap[name]:
                raise ValueError(
                    f"{self.cel_rules[0].message}: guarantee {name}={self.guarantee[name]}"  # type: ignore[index]
                    f" > capability {self.capability[name]}"  # type: ignore[index]
                )
        return self


class QueueConditionType(StrEnum):
    VALID = "Valid"
    """Written by the queue operator. `False` when a rule spanning several queues is broken
    (reason: a `QueueReason`); the scheduler then treats the queue as Closed: it admits nothing
    new, and nothing else is blocked."""


class QueueReason(StrEnum):
    """Reasons of the `Valid` condition for rules CEL cannot check on one object."""

    PARENT_NOT_FOUND = "ParentNotFound"
    PARENT_CYCLE = "ParentCycle"
    GUARANTEE_OVERCOMMITTED = "GuaranteeOvercommitted"  # children's guarantees exceed parent's
    VALID = "Valid"


class QueueStatus(StatusModel):
    """Writers (docs/admin.md): the scheduler writes deserved, allocated, pending, inqueue,
    running and usage; the queue operator writes state, observedGeneration and conditions."""

    state: QueueState | None = Field(
        default=None, description="Open, Closing (closed, work still running) or Closed."
    )
    deserved: ResourceList | None = Field(
        default=None, description="Fair share computed by the scheduler."
    )
    allocated: ResourceList | None = None
    pending: Count | None = Field(default=None, description="PodGroups Pending.")
    inqueue: Count | None = Field(default=None, description="PodGroups Inqueue.")
    running: Count | None = Field(default=None, description="PodGroups Running.")
    usage: QueueUsage | None = None
    observed_generation: int | None = None
    conditions: Conditions | None = None
    event_log: EventLog | None = Field(
        default=None, description="The events operator's outbox (docs/events.md)."
    )


class Queue(Resource):
    """A node of the hierarchical quota tree (root `root`, built-in leaf `default`)."""

    group: ClassVar = GROUP
    plural: ClassVar = "sluicequeues"
    singular: ClassVar = "sluicequeue"
    scope: ClassVar = "Cluster"
    short_names: ClassVar = ("sq",)
    printer_columns: ClassVar = (
        PrinterColumn("Parent", ".spec.parent"),
        PrinterColumn("Weight", ".spec.weight", "integer"),
        PrinterColumn("State", ".status.state"),
        PrinterColumn(
            "Valid",
            '.status.conditions[?(@.type=="Valid")].status',
            description="False: a rule of the queue tree is broken; the queue admits nothing new",
        ),
        PrinterColumn("Pending", ".status.pending", "integer"),
        PrinterColumn("Inqueue", ".status.inqueue", "integer"),
        PrinterColumn("Running", ".status.running", "integer"),
        AGE,
    )
    cel_rules: ClassVar = (
        Rule(
            "!has(self.spec.parent) || self.spec.parent != self.metadata.name",
            "spec.parent: a queue cannot be its own parent",
            field_path=".spec.parent",
        ),
        Rule(
            "self.metadata.name != 'root' || !has(self.spec.parent)",
            "spec.parent: the root queue cannot have a parent",
            field_path=".spec.parent",
        ),
    )

    api_version: Literal["scheduling.sluice.dev/v1alpha1"] = API_VERSION
    kind: Literal["Queue"] = "Queue"
    spec: QueueSpec
    status: QueueStatus | None = None

    @model_validator(mode="after")
    def _parent_is_not_self(self) -> Queue:
        if self.spec.parent is not None:
            if self.spec.parent == self.metadata.name:
                raise ValueError(self.cel_rules[0].message)
            if self.metadata.name == labels.ROOT_QUEUE:
                raise ValueError(self.cel_rules[1].message)
        return self


# ------------------------------------------------------------------------------------------
# PodGroup

QUEUE_NOT_ROOT = Rule(
    f"!has(self.queue) || self.queue != '{labels.ROOT_QUEUE}'",
    "spec.queue: `root` only holds other queues; name a leaf queue (unset means `default`)",
    field_path=".queue",
)
QUEUE_IMMUTABLE = (
    "spec.queue cannot change: the quota already charged stays with the queue; "
    "delete and re-create to move"
)


def check_queue_not_root(queue: str | None) -> None:
    """The Python side of QUEUE_NOT_ROOT (PodGroups and both job kinds)."""
    if queue == labels.ROOT_QUEUE:
        raise ValueError(QUEUE_NOT_ROOT.message)


class PodGroupPhase(StrEnum):
    PENDING = "Pending"  # waiting for enqueue (quota)
    INQUEUE = "Inqueue"  # quota reserved; the job controller may create pods now
    RUNNING = "Running"  # at least minMember pods running
    COMPLETED = "Completed"
    FAILED = "Failed"
    UNKNOWN = "Unknown"  # some pods run, but the gang can no longer be satisfied


class PodGroupConditionType(StrEnum):
    """The condition types the scheduler writes on a PodGroup."""

    ENQUEUED = "Enqueued"  # True once quota is reserved (Inqueue or Running)
    SCHEDULED = "Scheduled"  # True once minMember pods are bound
    UNSCHEDULABLE = "Unschedulable"  # True while something blocks the group (reason says what)
    PRIVILEGED = "Privileged"  # True while this group waits for its delayed-preemption victims
    WILL_EVICT = "WillEvict"  # True while this group is a victim with a deadline
    POOL_FALLBACK = "PoolFallback"  # True while spec.pool names no Pool (placed in `default`)
    CONSOLIDATED = "Consolidated"  # consolidation moved it; the time is when it last moved


class PodGroupReason(StrEnum):
    """Every `reason` the scheduler writes on a PodGroup condition.

    The scheduler core's `operators.scheduler.decisions.ReasonCode` plus the ones the status
    writer adds (`Waiting`, `DelayedPreemption`, `PoolNotFound`, `PoolFound`); a unit test keeps
    this list, the core's codes and docs/api.md equal.
    """

    SCHEDULED = "Scheduled"  # minMember pods are bound
    ADMITTED = "Admitted"  # quota reserved (Enqueued=True)
    WAITING = "Waiting"  # no scheduling cycle has looked at the group yet
    QUEUE_CLOSED = "QueueClosed"
    QUEUE_MISSING = "QueueMissing"
    QUOTA_EXCEEDED = "QuotaExceeded"  # the queue's capability (or an ancestor's) would be exceeded
    NOT_ENOUGH_RESOURCES = "NotEnoughResources"  # enqueue: the cluster cannot hold minResources
    NOT_ENOUGH_TASKS = "NotEnoughTasks"  # fewer pods exist than minMember / minTaskMember
    UNSCHEDULABLE = "Unschedulable"  # no placement for the whole gang this cycle
    TOPOLOGY_UNSATISFIED = "TopologyUnsatisfied"  # networkTopology cannot be met
    BORROWING_DISABLED = "BorrowingDisabled"  # own pool full and its disableBorrowing is set
    PREEMPTING = "Preempting"  # victims evicted, pods nominated
    WAITING_FOR_VICTIMS = "WaitingForVictims"  # delayed preemption in progress
    GROWING = "Growing"  # elastic group at its minimum, waiting for idle room to grow
    # preemptible: false, and what it needs is above its queue's deserved share
    NON_PREEMPTIBLE_OVER_QUOTA = "NonPreemptibleOverQuota"
    BINDING_REJECTED = "BindingRejected"  # the API refused its Binding; retried after a backoff
    CONSOLIDATING = "Consolidating"  # running jobs moved to open a placement, pods nominated
    CONSOLIDATED = "Consolidated"  # reason of the Consolidated condition: this group was moved
    DELAYED_PREEMPTION = "DelayedPreemption"  # reason of the Privileged / WillEvict conditions
    POOL_NOT_FOUND = "PoolNotFound"  # PoolFallback=True: spec.pool names no Pool
    POOL_FOUND = "PoolFound"  # PoolFallback=False again: the pool exists now


class PodGroupReplicaSpec(SluiceModel):
    """One elastic task of a group: the gang holds `minReplicas` of it, the scheduler grows it
    toward `maxReplicas` while capacity is idle and shrinks it back first when capacity is needed.
    Job operators write one entry per replica type (HybridJob) or task (VCJob)."""

    name: Annotated[str, Field(min_length=1, max_length=MAX_LABEL)] = Field(
        description="Task name: the pods' `batch.sluice.dev/task` label, as in `minTaskMember`."
    )
    min_replicas: Count = Field(description="Pods of this task in the gang minimum.")
    max_replicas: Count | None = Field(
        default=None, description="Grow up to this many pods while idle; unset: `minReplicas`."
    )
    priority: Int32 = Field(
        default=0, description="Tasks with higher priority grow first and shrink last."
    )

    cel_rules: ClassVar = (
        Rule(
            "!has(self.maxReplicas) || self.minReplicas <= self.maxReplicas",
            "replicaSpecs[].minReplicas must not exceed replicaSpecs[].maxReplicas",
            field_path=".minReplicas",
        ),
    )

    @model_validator(mode="after")
    def _bounds(self) -> PodGroupReplicaSpec:
        if self.max_replicas is not None and self.min_replicas > self.max_replicas:
            raise ValueError(
                f"{self.cel_rules[0].message} ({self.min_replicas} > {self.max_replicas})"
            )
        return self


class PodGroupSpec(SluiceModel):
    """A gang: the scheduler starts none of its pods unless `minMember` of them can start."""

    min_member: int = Field(
        default=1, ge=0, le=2**31 - 1, description="Gang minimum across all pods."
    )
    min_task_member: dict[str, Count] | None = Field(
        default=None, max_length=MAX_TASKS, description="Per-task gang minimum."
    )
    min_resources: ResourceList | None = Field(
        default=None, description="Resources of the minimum gang; what enqueue admits against."
    )
    queue: DnsLabel | None = Field(default=None, description="Queue charged; unset: `default`.")
    pool: DnsLabel | None = Field(default=None, description="Preferred pool; unset: `default`.")
    priority_class_name: DnsSubdomain | None = None
    network_topology: NetworkTopology | None = None
    preemptible: bool = Field(
        default=True,
        description="May this group be preempted. false: never a victim, and it runs only on "
        "in-quota room (within its queues' deserved share, in its own pool).",
    )
    preemption_delay_seconds: int | None = Field(
        default=None,
        ge=0,
        le=7 * 86400,
        description="Grace period before this group is preempted (delayed preemption); "
        "unset: the queue's.",
    )
    stale_gang_grace_seconds: int | None = Field(
        default=None,
        ge=-1,
        le=7 * 86400,
        description="Seconds this gang may run below its minimum (a pod failed or was evicted "
        "and did not come back) before it is evicted whole; -1: never. Unset: the scheduler's "
        "default (60 s), or never for a group a HybridJob/VCJob owns (the job's policies decide).",
    )
    replica_specs: list[PodGroupReplicaSpec] | None = Field(
        default=None,
        max_length=MAX_TASKS,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
        description="Elastic tasks (min..max pods each); set: the group is elastic.",
    )
    user: Annotated[str, Field(min_length=1, max_length=MAX_NAME)] | None = Field(
        default=None,
        description="Requesting user, matched against the queue's `tenants[].user`. "
        "Kubernetes does not record who created an object: the platform that submits jobs "
        "sets it. Cannot change once set.",
    )

    cel_rules: ClassVar = (
        Rule(
            "!has(self.replicaSpecs) || "
            "self.replicaSpecs.all(r, self.replicaSpecs.exists_one(s, s.name == r.name))",
            "spec.replicaSpecs[].name must be unique",
            field_path=".replicaSpecs",
        ),
        QUEUE_NOT_ROOT,
        Rule(
            "!has(self.minTaskMember) || self.minTaskMember.all(k, "
            f"size(k) <= {MAX_LABEL} && k.matches({cel_string(DNS_LABEL_PATTERN)}))",
            "spec.minTaskMember keys must be task names (DNS labels: lower-case letters, digits "
            "and '-', at most 63 characters)",
            field_path=".minTaskMember",
        ),
    )
    # minMember may change (a job's minAvailable may; Volcano allows it too); the queue and the
    # user (who is charged) may not.
    immutable_fields: ClassVar = {"queue": QUEUE_IMMUTABLE, "user": "spec.user cannot change"}

    @model_validator(mode="after")
    def _podgroup_rules(self) -> PodGroupSpec:
        names = [r.name for r in self.replica_specs or ()]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"{self.cel_rules[0].message}: duplicated {', '.join(dupes)}")
        check_queue_not_root(self.queue)
        for key in self.min_task_member or {}:
            if len(key) > MAX_LABEL or not re.match(DNS_LABEL_PATTERN, key):
                raise ValueError(f"{self.cel_rules[2].message}: got {key!r}")
        return self


MAX_MOVED_TO = 1024  # nodes one moved job's pods are planned on (one pod per node is the rule)


class MovedTo(StatusModel):
    """Node a consolidation plan placed some of a moved job's pods on again."""

    node: str = Field(max_length=MAX_NAME)
    pods: Count


class LastEviction(StatusModel):
    """The scheduler's last eviction of the group (written with the status it changes)."""

    reason: str = Field(max_length=MAX_REASON, description="Preempted, Reclaimed, ...")
    time: AwareDatetime
    message: str | None = Field(default=None, max_length=MAX_MESSAGE)
    preemptor: str | None = Field(
        default=None, max_length=MAX_NAME, description="namespace/name that needed the room."
    )
    moved_to: list[MovedTo] | None = Field(
        default=None,
        max_length=MAX_MOVED_TO,
        description="Consolidated: the nodes the plan placed the job's pods on again; held "
        "for it until they are placed (docs/scheduling.md#consolidation).",
    )


class PodGroupStatus(StatusModel):
    phase: PodGroupPhase | None = None
    running: Count | None = None
    succeeded: Count | None = None
    failed: Count | None = None
    pending: Count | None = None
    preemption: PreemptionStatus | None = None
    last_eviction: LastEviction | None = None
    observed_generation: int | None = None
    conditions: Conditions | None = None
    event_log: EventLog | None = Field(
        default=None, description="The events operator's outbox (docs/events.md)."
    )


class PodGroup(Resource):
    """The unit of admission and gang placement; jobs create one, plain pods get an implicit one."""

    group: ClassVar = GROUP
    plural: ClassVar = "sluicepodgroups"
    singular: ClassVar = "sluicepodgroup"
    scope: ClassVar = "Namespaced"
    short_names: ClassVar = ("spg",)
    # Implicit groups are named after their pod, which may be longer than a label.
    name_is_dns_label: ClassVar = False
    printer_columns: ClassVar = (
        PrinterColumn("Phase", ".status.phase"),
        PrinterColumn("MinMember", ".spec.minMember", "integer"),
        PrinterColumn("Running", ".status.running", "integer"),
        PrinterColumn("Queue", ".spec.queue"),
        PrinterColumn("Pool", ".spec.pool", priority=1),
        AGE,
    )

    api_version: Literal["scheduling.sluice.dev/v1alpha1"] = API_VERSION
    kind: Literal["PodGroup"] = "PodGroup"
    spec: PodGroupSpec = Field(default_factory=PodGroupSpec)
    status: PodGroupStatus | None = None


# ------------------------------------------------------------------------------------------
# Topology


class TopologyLevel(SluiceModel):
    name: DnsLabel = Field(description="Tier name jobs refer to, e.g. `spine`, `tor`, `host`.")
    node_label: LabelKey = Field(
        description="Node label whose value identifies the domain at this tier."
    )


class TopologySpec(SluiceModel):
    """Network tiers, coarse to fine (e.g. spine, tor, kubernetes.io/hostname)."""

    levels: list[TopologyLevel] = Field(min_length=1, max_length=16)

    cel_rules: ClassVar = (
        Rule(
            "self.levels.all(l, self.levels.exists_one(m, m.name == l.name))",
            "spec.levels[].name must be unique",
            field_path=".levels",
        ),
        Rule(
            "self.levels.all(l, self.levels.exists_one(m, m.nodeLabel == l.nodeLabel))",
            "spec.levels[].nodeLabel must be unique",
            field_path=".levels",
        ),
    )

    @model_validator(mode="after")
    def _unique(self) -> TopologySpec:
        names = [lv.name for lv in self.levels]
        if len(set(names)) != len(names):
            raise ValueError(self.cel_rules[0].message)
        keys = [lv.node_label for lv in self.levels]
        if len(set(keys)) != len(keys):
            raise ValueError(self.cel_rules[1].message)
        return self

    def level_index(self, name: str) -> int | None:
        """Position of a tier (0 = coarsest), or None if unknown."""
        for i, level in enumerate(self.levels):
            if level.name == name:
                return i
        return None


class TopologyStatus(StatusModel):
    domains: dict[str, Count] | None = Field(
        default=None, description="Number of distinct domains (label values) per level name."
    )
    observed_generation: int | None = None
    conditions: Conditions | None = None


class Topology(Resource):
    """The cluster's network tiers, named so jobs can say `highestTier: tor`."""

    group: ClassVar = GROUP
    plural: ClassVar = "sluicetopologies"
    singular: ClassVar = "sluicetopology"
    scope: ClassVar = "Cluster"
    short_names: ClassVar = ("topo",)
    # The API server's table printer shows only the first match of `[*]`, so list the ends.
    printer_columns: ClassVar = (
        PrinterColumn("Coarsest", ".spec.levels[0].name"),
        PrinterColumn("Finest", ".spec.levels[-1:].name"),
        AGE,
    )

    api_version: Literal["scheduling.sluice.dev/v1alpha1"] = API_VERSION
    kind: Literal["Topology"] = "Topology"
    spec: TopologySpec
    status: TopologyStatus | None = None
