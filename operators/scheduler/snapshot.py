"""What the scheduling core sees: one immutable snapshot of the cluster, taken by the runtime.

Everything here is a frozen plain dataclass with no behaviour beyond small pure helpers, so the
live scheduler (fed by watches) and the trace simulator (fed by a CSV) build exactly the same input.
The core never reads a clock: ``Snapshot.now`` is the only notion of time it has.

How the runtime fills each field
--------------------------------
Resources (:data:`Resources`) are plain ``{name: int}`` mappings in base units:

* ``"cpu"`` in **millicores** (``"500m"`` -> 500, ``"2"`` -> 2000);
* ``"memory"`` and ``"ephemeral-storage"`` in **bytes**;
* ``"nvidia.com/gpu"`` as a **whole-card count** (the extended resource the device plugin
  advertises); a fractional request is carried separately in ``Task.gpu_milli``;
* ``"pods"`` as a count: ``Node.allocatable["pods"]`` is the kubelet's max pods; every task
  implicitly requests one pod, so the runtime need not put ``pods`` in task requests;
* any other extended resource by its Kubernetes name, as an integer count.

A resource missing from a mapping means zero, except in ``Queue.capability`` where a missing
resource means "no cap".

Nodes: ``allocatable`` is ``node.status.allocatable``. Pods on the node that the core does not
schedule (other schedulers, DaemonSets, static pods) are summed by the runtime into
``foreign_used`` (and ``foreign_pods``); GPU cards held by such pods go to ``gpu_foreign_milli``.
Pods the core does know about are ``Task`` objects with ``node`` set, and the core subtracts them
itself. The GPU layout comes from the node annotation ``scheduling.sluice.dev/gpu-topology``
(see :func:`parse_gpu_topology` and docs/scheduler.md).

Pools: the runtime passes every ``Pool`` with its label selector; the core resolves node
membership itself (:func:`pool_of_node`), so the live scheduler and the simulator agree: a node
matching no pool, or more than one, belongs to the built-in ``default`` pool.

Queues: every ``Queue`` object, plus ``root`` and ``default`` (the core adds them when missing).

Groups: every PodGroup that is not finished. Pods with ``schedulerName: sluice`` and no group are
wrapped by the runtime in an implicit one-pod group (``uid = "pod:<pod uid>"``, ``min_member=1``).
Tasks: every pod of those groups that is Pending, Bound/Running or Releasing (terminating).
"""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

Resources = Mapping[str, int]
"""Resource name -> integer quantity in base units (see the module docstring)."""

CPU = "cpu"
MEMORY = "memory"
GPU = "nvidia.com/gpu"
PODS = "pods"
GPU_MILLI_PER_CARD = 1000

DEFAULT_POOL = "default"
ROOT_QUEUE = "root"
DEFAULT_QUEUE = "default"
GPU_TOPOLOGY_ANNOTATION = "scheduling.sluice.dev/gpu-topology"
GPU_IDS_ANNOTATION = "scheduling.sluice.dev/gpu-ids"
HOSTNAME_LABEL = "kubernetes.io/hostname"

_EMPTY: Mapping[str, int] = MappingProxyType({})
_NO_LABELS: Mapping[str, str] = MappingProxyType({})


def frozen_map(values: Mapping[str, int] | None = None) -> Mapping[str, int]:
    """A read-only copy, so a snapshot cannot be mutated through a shared dict."""
    return MappingProxyType(dict(values or {}))


# --------------------------------------------------------------------------------------------
# Label selectors, taints, tolerations (the subset of core/v1 the predicates evaluate)
# --------------------------------------------------------------------------------------------


class SelectorOperator(enum.StrEnum):
    IN = "In"
    NOT_IN = "NotIn"
    EXISTS = "Exists"
    DOES_NOT_EXIST = "DoesNotExist"
    GT = "Gt"
    LT = "Lt"


@dataclass(frozen=True, slots=True)
class SelectorRequirement:
    """One ``matchExpressions`` entry (also used for node-affinity ``matchExpressions``)."""

    key: str
    operator: SelectorOperator
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        match self.operator:
            case SelectorOperator.IN:
                return present and labels[self.key] in self.values
            case SelectorOperator.NOT_IN:
                return not present or labels[self.key] not in self.values
            case SelectorOperator.EXISTS:
                return present
            case SelectorOperator.DOES_NOT_EXIST:
                return not present
            case SelectorOperator.GT | SelectorOperator.LT:
                if not present or not self.values:
                    return False
                try:
                    have, want = int(labels[self.key]), int(self.values[0])
                except ValueError:
                    return False
                return have > want if self.operator is SelectorOperator.GT else have < want


@dataclass(frozen=True, slots=True)
class LabelSelector:
    """``matchLabels`` AND ``matchExpressions``; an empty selector matches every node."""

    match_labels: Mapping[str, str] = field(default_factory=lambda: _NO_LABELS)
    match_expressions: tuple[SelectorRequirement, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        for key, value in self.match_labels.items():
            if labels.get(key) != value:
                return False
        return all(req.matches(labels) for req in self.match_expressions)

    def key(self) -> tuple[object, ...]:
        """Hashable identity, used to cache per-selector node masks."""
        return (tuple(sorted(self.match_labels.items())), self.match_expressions)


@dataclass(frozen=True, slots=True)
class NodeSelectorTerm:
    """One term of ``requiredDuringSchedulingIgnoredDuringExecution``; terms are ORed."""

    match_expressions: tuple[SelectorRequirement, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(req.matches(labels) for req in self.match_expressions)


class TaintEffect(enum.StrEnum):
    NO_SCHEDULE = "NoSchedule"
    PREFER_NO_SCHEDULE = "PreferNoSchedule"
    NO_EXECUTE = "NoExecute"


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    effect: TaintEffect
    value: str = ""


@dataclass(frozen=True, slots=True)
class Toleration:
    """core/v1 Toleration. ``key=""`` with ``operator="Exists"`` tolerates everything."""

    key: str = ""
    operator: str = "Equal"  # "Equal" or "Exists"
    value: str = ""
    effect: TaintEffect | None = None  # None tolerates every effect

    def tolerates(self, taint: Taint) -> bool:
        if self.effect is not None and self.effect != taint.effect:
            return False
        if self.key == "" and self.operator == "Exists":
            return True
        if self.key != taint.key:
            return False
        return self.operator == "Exists" or self.value == taint.value


# --------------------------------------------------------------------------------------------
# Nodes, GPU layout, topology, pools
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GpuTopology:
    """Intra-node GPU layout: card ids grouped by NUMA node and by NVLink island.

    Annotation ``scheduling.sluice.dev/gpu-topology`` holds JSON such as
    ``{"numa": [[0,1,2,3],[4,5,6,7]], "nvlink": [[0,1],[2,3],[4,5],[6,7]]}``. Each list is a
    partition of (a subset of) the card ids ``0..gpus-1``; a card missing from every group is its
    own group. Either key may be absent. Cards in one NVLink island are the best-connected set;
    cards in one NUMA node share a CPU socket / PCIe root.
    """

    numa: tuple[tuple[int, ...], ...] = ()
    nvlink: tuple[tuple[int, ...], ...] = ()


def parse_gpu_topology(text: str | None) -> GpuTopology:
    """Parse the ``scheduling.sluice.dev/gpu-topology`` annotation; malformed text -> no layout.

    Malformed annotations degrade to "no topology" rather than failing the session, because one
    bad node must not stop scheduling for the whole cluster.
    """
    if not text:
        return GpuTopology()
    try:
        raw = json.loads(text)
    except ValueError:
        return GpuTopology()
    if not isinstance(raw, dict):
        return GpuTopology()

    def groups(key: str) -> tuple[tuple[int, ...], ...]:
        value = raw.get(key)
        if not isinstance(value, list):
            return ()
        return tuple(
            tuple(group)
            for group in value
            if isinstance(group, list)
            and all(isinstance(i, int) and not isinstance(i, bool) for i in group)
        )

    return GpuTopology(numa=groups("numa"), nvlink=groups("nvlink"))


@dataclass(frozen=True, slots=True)
class Node:
    name: str
    allocatable: Resources
    labels: Mapping[str, str] = field(default_factory=lambda: _NO_LABELS)
    taints: tuple[Taint, ...] = ()
    unschedulable: bool = False
    ready: bool = True
    # Requests of pods on this node that are not Tasks of this snapshot (other schedulers,
    # DaemonSets). The core treats them as permanently used.
    foreign_used: Resources = field(default_factory=lambda: _EMPTY)
    foreign_pods: int = 0
    # Per-card milli-GPU held by foreign pods, index = card id; shorter tuples pad with 0.
    gpu_foreign_milli: tuple[int, ...] = ()
    gpu_topology: GpuTopology = field(default_factory=GpuTopology)

    @property
    def gpu_count(self) -> int:
        return int(self.allocatable.get(GPU, 0))


@dataclass(frozen=True, slots=True)
class TopologyLevel:
    """One network tier: a human name (``"tor"``) and the node label that carries it."""

    name: str
    label: str


@dataclass(frozen=True, slots=True)
class Topology:
    """Network tiers, coarse to fine, e.g. spine -> tor -> hostname.

    A node without a tier's label is its own domain at that tier (it cannot share it). The
    hostname tier may use ``kubernetes.io/hostname``; a node without that label uses its name.
    """

    name: str
    levels: tuple[TopologyLevel, ...]

    def level_index(self, tier: str) -> int | None:
        """Index of a tier given by name or label key; None when unknown."""
        for i, level in enumerate(self.levels):
            if tier in (level.name, level.label):
                return i
        return None


@dataclass(frozen=True, slots=True)
class Pool:
    """A pool of nodes (supply). Membership is resolved by the core from ``node_selector``."""

    name: str
    node_selector: LabelSelector = field(default_factory=LabelSelector)
    disable_sharing: bool = False  # other pools' tasks may not borrow these nodes
    disable_borrowing: bool = False  # this pool's tasks may not borrow elsewhere
    disable_preemption: bool = False  # no priority preemption among this pool's own jobs
    disable_consolidation: bool = False  # no job here is moved to defragment (consolidate)


def pool_of_node(node: Node, pools: tuple[Pool, ...]) -> str:
    """The node's pool: the only named pool whose selector matches it, else ``default``."""
    found: str | None = None
    for pool in pools:
        if pool.name == DEFAULT_POOL:
            continue
        if pool.node_selector.matches(node.labels):
            if found is not None:
                return DEFAULT_POOL
            found = pool.name
    return found if found is not None else DEFAULT_POOL


# --------------------------------------------------------------------------------------------
# Queues (demand)
# --------------------------------------------------------------------------------------------


class QueueState(enum.StrEnum):
    OPEN = "Open"
    CLOSING = "Closing"
    CLOSED = "Closed"


class TenantKind(enum.StrEnum):
    NAMESPACE = "namespace"
    USER = "user"


@dataclass(frozen=True, slots=True)
class Tenant:
    """``spec.tenants[]`` entry: who (a namespace or a user), their priority and rights."""

    name: str
    kind: TenantKind = TenantKind.NAMESPACE
    priority: int = 0
    can_preempt: bool = True


@dataclass(frozen=True, slots=True)
class Queue:
    name: str
    parent: str | None = ROOT_QUEUE  # None only for ``root``
    weight: float = 1.0
    guarantee: Resources = field(default_factory=lambda: _EMPTY)
    capability: Resources = field(default_factory=lambda: _EMPTY)  # missing resource = no cap
    overcommit: bool = False
    reclaimable: bool = True
    state: QueueState = QueueState.OPEN
    tenants: tuple[Tenant, ...] = ()
    # Grace period (seconds) given to this queue's jobs when they are chosen as victims.
    preemption_delay: float = 0.0
    # Why an otherwise Open queue admits nothing new (e.g. the queue operator found it invalid);
    # "" = nothing wrong. Shown in the waiting groups' explanation.
    closed_reason: str = ""
    # Time-based fair share (operators/scheduler/usage.py): ``usage_k`` (spec, on a parent)
    # corrects how its children split the over-quota part of its share by their ``usage``
    # (decayed GPU-seconds as of ``Snapshot.now``, an input the runtime or simulator computes).
    usage_k: float = 0.0
    usage: float = 0.0
    # The usage buckets last written to status.usage, read back by the runtime when it starts;
    # never compared (our own status writes must not look like a change) and ignored by the core.
    usage_buckets: tuple[tuple[float, float], ...] = field(default=(), compare=False, repr=False)


# --------------------------------------------------------------------------------------------
# Groups (jobs) and tasks (pods)
# --------------------------------------------------------------------------------------------


class GroupPhase(enum.StrEnum):
    PENDING = "Pending"
    INQUEUE = "Inqueue"
    RUNNING = "Running"
    COMPLETED = "Completed"
    FAILED = "Failed"
    UNKNOWN = "Unknown"


class TopologyMode(enum.StrEnum):
    HARD = "hard"
    SOFT = "soft"


@dataclass(frozen=True, slots=True)
class NetworkTopology:
    """``networkTopology``: keep all pods under one domain of ``highest_tier`` or finer.

    ``soft_after`` bounds how long a hard request waits for such a domain: once the group is
    that many seconds old (``Snapshot.now - PodGroup.created``) it is placed as a soft request
    over every tier (the finest domain that holds it, else anywhere). None: hard for ever.
    """

    mode: TopologyMode = TopologyMode.HARD
    highest_tier: str = ""  # tier name or label key from the Topology; "" = coarsest tier
    soft_after: float | None = None  # seconds; only meaningful for a hard request

    def at(self, created: float, now: float) -> NetworkTopology:
        """The request in force at ``now`` for a group created at ``created``; the answer
        carries no ``soft_after``, so groups whose requests act alike compare equal."""
        if self.soft_after is None:
            return self
        if self.mode is TopologyMode.HARD and now - created >= self.soft_after:
            return NetworkTopology(TopologyMode.SOFT)
        return NetworkTopology(self.mode, self.highest_tier)

    def soft_at(self, created: float) -> float | None:
        """When a hard request with ``soft_after`` turns soft (None: never, or already soft)."""
        if self.mode is not TopologyMode.HARD or self.soft_after is None:
            return None
        return created + self.soft_after


@dataclass(frozen=True, slots=True)
class ReplicaSpec:
    """Elastic replica type (HybridJob ``replicaSpecs``): min..max replicas and growth priority.

    The gang binds ``min_replicas`` of every type at once; then the group grows toward
    ``max_replicas`` one replica at a time, higher ``priority`` types first, while capacity is
    idle, and shrinks in the reverse order when someone else needs the room.
    """

    name: str
    min_replicas: int
    max_replicas: int
    priority: int = 0


class PreemptionRole(enum.StrEnum):
    PRIVILEGED = "Privileged"  # a preemptor waiting for its victims' grace period
    WILL_EVICT = "WillEvict"  # a victim that will be evicted at the deadline


@dataclass(frozen=True, slots=True)
class PreemptionMark:
    """Delayed-preemption state the runtime read back from the group's status.

    The core emitted it earlier as MarkPrivileged / MarkWillEvict; feeding it back lets the core
    keep the pair reserved, evict at ``deadline`` or revert when the preemptor is gone.
    """

    role: PreemptionRole
    peers: tuple[str, ...]  # Privileged: victim group uids; WillEvict: the preemptor's uid
    deadline: float


@dataclass(frozen=True, slots=True)
class PodGroup:
    uid: str
    namespace: str
    name: str
    queue: str = DEFAULT_QUEUE
    pool: str = DEFAULT_POOL  # the pool its pods prefer (own pool)
    min_member: int = 1
    min_task_member: Mapping[str, int] = field(default_factory=lambda: _EMPTY)
    replica_specs: tuple[ReplicaSpec, ...] = ()  # non-empty = elastic group
    # Resources for the gang minimum, used by enqueue before pods exist. None: computed from
    # the group's tasks (min_member of them, highest replica priority first).
    min_resources: Resources | None = None
    priority: int = 0
    user: str = ""  # requesting user, matched against queue tenants of kind "user"
    created: float = 0.0  # creation time (seconds)
    # Order in which the runtime first saw the group: creation times have whole seconds, so two
    # jobs submitted within one second are still served first come, first served. Ties after
    # that (e.g. groups read from one list) are broken by uid.
    arrival: int = 0
    network_topology: NetworkTopology | None = None
    # Tasks with the same ``Task.unit`` must share one domain of this tier ("" = the tier just
    # above hostname, i.e. the ToR).
    unit_tier: str = ""
    overcommit: bool = False  # annotation scheduling.sluice.dev/overcommit: "true"
    preemption_grace: float | None = None  # seconds given to this job when it is a victim
    phase: GroupPhase = GroupPhase.PENDING
    preemption: PreemptionMark | None = None
    # PodDisruptionBudget-like floor: running pods this group tolerates losing; None = any.
    max_unavailable: int | None = None
    # False (spec.preemptible: false): runs only on in-quota room - within its queue chain's
    # deserved share, in its own pool - since nothing could take borrowed room back from it.
    preemptible: bool = True
    # The API server (or a webhook) rejected this group's Binding: nothing of it is placed
    # before ``retry_binding_at`` (the runtime's backoff), so it holds no room meanwhile;
    # ``binding_error`` is the API's message.
    retry_binding_at: float = 0.0
    binding_error: str = ""
    # Consolidation may move it (evict; its pods are re-created by its job controller and
    # placed again). False for implicit one-pod groups: their pod is the whole job.
    movable: bool = True
    # When consolidation last moved it (condition ``Consolidated``); None = never.
    consolidated_at: float | None = None
    # Where that move's plan placed its pods again: (node name, pods), from
    # ``Evict.moved_to``. Within the window and until it is placed again, those nodes are held
    # for it (Reservations.held_for): its pods are re-created some time after the move.
    consolidated_to: tuple[tuple[str, int], ...] = ()
    # Stale gangs: a running gang below its minimum since ``below_minimum_since`` (the
    # runtime's observation; None = not below) is evicted whole once ``stale_grace`` seconds
    # have passed (None: SessionConfig.stale_gang_grace; negative: never). A group a job
    # operator owns (``job_owned``) is left to the job's own policies unless it sets
    # ``stale_grace`` itself.
    below_minimum_since: float | None = None
    stale_grace: float | None = None
    job_owned: bool = False


class TaskStatus(enum.StrEnum):
    PENDING = "Pending"  # not bound to a node
    BOUND = "Bound"  # bound or running: holds resources
    RELEASING = "Releasing"  # being deleted/evicted: still holds resources
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


@dataclass(frozen=True, slots=True)
class Task:
    uid: str
    group: str  # PodGroup uid
    namespace: str
    name: str
    role: str = ""  # task name inside the job (batch.sluice.dev/task)
    index: int = 0  # replica index inside the role (batch.sluice.dev/replica-index)
    requests: Resources = field(default_factory=lambda: _EMPTY)  # GPUs as whole cards
    gpu_milli: int = 0  # fractional share of one card, 1..999; 0 = none
    node_selector: Mapping[str, str] = field(default_factory=lambda: _NO_LABELS)
    affinity: tuple[NodeSelectorTerm, ...] = ()  # required node affinity; terms are ORed
    tolerations: tuple[Toleration, ...] = ()
    priority: int | None = None  # None = the group's priority
    status: TaskStatus = TaskStatus.PENDING
    node: str | None = None
    gpu_ids: tuple[int, ...] = ()  # cards held (from scheduling.sluice.dev/gpu-ids)
    nominated_node: str | None = None  # reserved for this task by an earlier preemption
    unit: str = ""  # same-ToR unit id within the group ("" = none)
    pool: str | None = None  # per-pod pool override; None = the group's pool


# --------------------------------------------------------------------------------------------
# The snapshot
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Snapshot:
    now: float  # seconds since the epoch, supplied by the caller
    nodes: tuple[Node, ...]
    queues: tuple[Queue, ...] = ()
    pools: tuple[Pool, ...] = ()
    groups: tuple[PodGroup, ...] = ()
    tasks: tuple[Task, ...] = ()
    topology: Topology | None = None
