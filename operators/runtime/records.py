"""Translate raw API objects into the small records the cache keeps and the core's snapshot types.

Each object is translated once, when its watch event arrives; a cycle then only assembles
already-translated pieces. Reading is defensive: a malformed field degrades to its default rather
than failing the whole cache, because one odd object must not stop scheduling for everybody.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import json
import math
from collections.abc import Callable, Mapping
from decimal import Decimal
from types import MappingProxyType
from typing import Any

from operators.api import batch as B
from operators.api import labels as L
from operators.api.quantity import InvalidQuantityError, to_int_ceil, to_milli
from operators.scheduler import snapshot as S
from operators.scheduler.decisions import EvictReason

JsonDict = dict[str, Any]
_EMPTY: Mapping[str, int] = MappingProxyType({})


# --------------------------------------------------------------------------------------------
# scalars
# --------------------------------------------------------------------------------------------


# More cards than any machine has (8-16 GPUs, up to 56 MIG slices); a node reporting more is
# read as having this many.
MAX_GPUS_PER_NODE = 1024


@functools.lru_cache(maxsize=4096)
def _quantity(name: str, raw: str) -> int:
    # The same few quantity strings repeat across thousands of pods: parse each once.
    try:
        return to_milli(raw) if name == S.CPU else to_int_ceil(raw)
    except (InvalidQuantityError, ArithmeticError, ValueError):
        return 0


def quantity(name: str, raw: object) -> int:
    if isinstance(raw, bool):
        return 0
    if isinstance(raw, int | Decimal):
        raw = str(raw)
    if isinstance(raw, float):
        raw = repr(raw)
    if not isinstance(raw, str):
        return 0
    return _quantity(name, raw)


def resources(raw: object) -> dict[str, int]:
    """`{"cpu": "500m", "memory": "1Gi"}` -> `{"cpu": 500, "memory": 1073741824}`."""
    if not isinstance(raw, Mapping):
        return {}
    out: dict[str, int] = {}
    for name, value in raw.items():
        amount = quantity(str(name), value)
        if amount:
            out[str(name)] = amount
    return out


def timestamp(raw: object) -> float:
    if not isinstance(raw, str) or not raw:
        return 0.0
    try:
        return datetime.datetime.fromisoformat(raw).timestamp()
    except (ValueError, OverflowError, OSError):
        return 0.0


_MAX_RFC3339 = 253402300799.0  # 9999-12-31T23:59:59Z, the last second RFC 3339 can write


def rfc3339(seconds: float) -> str:
    """UTC text of a Unix time; out-of-range (or non-finite) values are clamped, never raised."""
    if not math.isfinite(seconds):
        seconds = _MAX_RFC3339 if seconds > 0 else 0.0
    seconds = min(max(seconds, 0.0), _MAX_RFC3339)
    return datetime.datetime.fromtimestamp(seconds, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _str_map(raw: object) -> dict[str, str]:
    if not isinstance(raw, Mapping):
        return {}
    return {str(k): str(v) for k, v in raw.items()}


def _int(raw: object, default: int = 0) -> int:
    if isinstance(raw, bool):
        return default
    if isinstance(raw, int):
        return raw
    try:
        return int(str(raw))
    except (TypeError, ValueError):
        return default


def _float(raw: object, default: float = 0.0) -> float:
    """A finite float; "inf", "nan" and anything unreadable give `default`."""
    if isinstance(raw, bool) or raw is None:
        return default
    try:
        value = float(str(raw))
    except (ValueError, OverflowError):
        return default
    return value if math.isfinite(value) else default


MAX_PREEMPTION_DELAY = 30 * 24 * 3600.0
"""Longest preemption delay honoured (30 days); longer values are clamped to it."""


def _delay(raw: object) -> float | None:
    """A delay in seconds (preemption delay, grace, softAfterSeconds), clamped to 0..30 days;
    None when absent or unreadable."""
    if raw is None:
        return None
    value = _float(raw, math.nan)
    if math.isnan(value):
        return None
    return min(max(value, 0.0), MAX_PREEMPTION_DELAY)


def _stale_grace(raw: object) -> float | None:
    """A stale-gang grace period in seconds (negative: never, as -1); None when absent."""
    delay = _delay(raw)
    if delay is None:
        return None
    return -1.0 if _float(raw, 0.0) < 0 else delay


def owned_by_job(refs: object) -> bool:
    """Owned by a HybridJob or VCJob (whose policies handle a gang that lost pods)."""
    if not isinstance(refs, list):
        return False
    return any(
        isinstance(ref, Mapping)
        and str(ref.get("apiVersion", "")).startswith(f"{B.GROUP}/")
        and ref.get("kind") in (B.HybridJob.__name__, B.VCJob.__name__)
        for ref in refs
    )


def _bool(raw: object) -> bool:
    if isinstance(raw, str):
        return raw.strip().lower() == "true"
    return bool(raw)


# --------------------------------------------------------------------------------------------
# selectors, taints, tolerations
# --------------------------------------------------------------------------------------------


def requirement(raw: Mapping[str, Any]) -> S.SelectorRequirement | None:
    try:
        op = S.SelectorOperator(str(raw.get("operator", "")))
    except ValueError:
        return None
    values = tuple(str(v) for v in raw.get("values") or ())
    return S.SelectorRequirement(key=str(raw.get("key", "")), operator=op, values=values)


def label_selector(raw: object) -> S.LabelSelector:
    if not isinstance(raw, Mapping):
        return S.LabelSelector()
    exprs = tuple(
        r for r in (requirement(e) for e in raw.get("matchExpressions") or ()) if r is not None
    )
    return S.LabelSelector(
        match_labels=MappingProxyType(_str_map(raw.get("matchLabels"))), match_expressions=exprs
    )


def taint(raw: Mapping[str, Any]) -> S.Taint | None:
    try:
        effect = S.TaintEffect(str(raw.get("effect", "")))
    except ValueError:
        return None
    return S.Taint(key=str(raw.get("key", "")), effect=effect, value=str(raw.get("value") or ""))


def toleration(raw: Mapping[str, Any]) -> S.Toleration:
    effect_raw = raw.get("effect")
    try:
        effect = S.TaintEffect(str(effect_raw)) if effect_raw else None
    except ValueError:
        effect = None
    return S.Toleration(
        key=str(raw.get("key") or ""),
        operator=str(raw.get("operator") or "Equal"),
        value=str(raw.get("value") or ""),
        effect=effect,
    )


def required_affinity(spec: Mapping[str, Any]) -> tuple[S.NodeSelectorTerm, ...]:
    node_aff = ((spec.get("affinity") or {}).get("nodeAffinity")) or {}
    required = node_aff.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    terms: list[S.NodeSelectorTerm] = []
    for term in required.get("nodeSelectorTerms") or ():
        exprs = tuple(
            r for r in (requirement(e) for e in term.get("matchExpressions") or ()) if r is not None
        )
        terms.append(S.NodeSelectorTerm(match_expressions=exprs))
    return tuple(terms)


# --------------------------------------------------------------------------------------------
# nodes
# --------------------------------------------------------------------------------------------


def node(obj: JsonDict) -> S.Node:
    meta, spec, status = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or ()
    )
    taints = tuple(t for t in (taint(x) for x in spec.get("taints") or ()) if t is not None)
    annotations = meta.get("annotations") or {}
    allocatable = resources(status.get("allocatable"))
    if allocatable.get(S.GPU, 0) > MAX_GPUS_PER_NODE:
        # The core keeps a row of cards per node, as wide as the widest node: one node claiming
        # a billion GPUs (a broken device plugin, a hand-edited status) would exhaust memory.
        allocatable[S.GPU] = MAX_GPUS_PER_NODE
    return S.Node(
        name=str(meta.get("name", "")),
        allocatable=MappingProxyType(allocatable),
        labels=MappingProxyType(_str_map(meta.get("labels"))),
        taints=taints,
        unschedulable=bool(spec.get("unschedulable", False)),
        ready=ready,
        gpu_topology=_gpu_topology(annotations.get(S.GPU_TOPOLOGY_ANNOTATION)),
    )


def _gpu_topology(raw: object) -> S.GpuTopology:
    """The node's GPU layout annotation; anything unreadable (even JSON nested deep enough to
    exhaust the parser's recursion) means "no layout", never an error."""
    if not isinstance(raw, str):
        return S.GpuTopology()
    try:
        return S.parse_gpu_topology(raw)
    except (ValueError, RecursionError, TypeError):
        return S.GpuTopology()


# --------------------------------------------------------------------------------------------
# pods
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class PodRecord:
    """What the scheduler needs of one pod; built once per watch event."""

    uid: str
    namespace: str
    name: str
    scheduler_name: str
    node_name: str
    phase: str
    deleting: bool
    requests: Mapping[str, int]
    priority: int | None
    created: float
    group_name: str  # PodGroup named by annotation/label ("" = implicit one-pod group)
    queue: str
    pool: str
    role: str
    index: int
    gpu_ids: tuple[int, ...]
    gpu_milli: int
    node_selector: Mapping[str, str]
    affinity: tuple[S.NodeSelectorTerm, ...]
    tolerations: tuple[S.Toleration, ...]
    nominated_node: str
    preemption_delay: float | None
    labels: Mapping[str, str]  # for PodDisruptionBudget selectors

    @property
    def terminal(self) -> bool:
        return self.phase in ("Succeeded", "Failed")

    @property
    def holds_resources(self) -> bool:
        return bool(self.node_name) and not self.terminal


def pod_requests(spec: Mapping[str, Any]) -> dict[str, int]:
    """Effective requests as the kube-scheduler computes them: the sum over containers (limits
    stand in for missing requests), at least each init container's, plus pod overhead."""
    total: dict[str, int] = {}
    for container in spec.get("containers") or ():
        res = container.get("resources") or {}
        merged = {**(res.get("limits") or {}), **(res.get("requests") or {})}
        for name, amount in resources(merged).items():
            total[name] = total.get(name, 0) + amount
    for container in spec.get("initContainers") or ():
        res = container.get("resources") or {}
        merged = {**(res.get("limits") or {}), **(res.get("requests") or {})}
        for name, amount in resources(merged).items():
            total[name] = max(total.get(name, 0), amount)
    for name, amount in resources(spec.get("overhead")).items():
        total[name] = total.get(name, 0) + amount
    return total


def parse_gpu_ids(raw: str | None) -> tuple[int, ...]:
    if not raw:
        return ()
    out: list[int] = []
    for part in raw.split(","):
        part = part.strip()
        # isdigit() alone accepts "²" or "٣", which int() refuses (or reads as another number).
        if part.isascii() and part.isdigit() and len(part) <= 6:
            out.append(int(part))
    return tuple(out)


def format_gpu_ids(ids: tuple[int, ...]) -> str:
    return ",".join(str(i) for i in ids)


def gpu_claim(
    requests: Mapping[str, int], annotations: Mapping[str, Any]
) -> tuple[tuple[int, ...], int]:
    """(card ids, fractional share) a pod holds, as the scheduler core reads it: the share only
    without a whole-GPU request, and card ids only for a pod that asks for GPUs at all, no more
    of them than it asks for (one for a share), each once. The annotations are anyone's to
    write: a pod that named cards it does not request would block them uncharged."""
    cards = requests.get(S.GPU, 0)
    milli = 0 if cards else min(max(_int(annotations.get(L.GPU_MILLI), 0), 0), 999)
    wanted = cards or (1 if milli else 0)
    ids = tuple(dict.fromkeys(parse_gpu_ids(annotations.get(L.GPU_IDS))))[:wanted]
    return ids, milli


def pod(obj: JsonDict) -> PodRecord:
    meta, spec, status = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    both = {**labels, **annotations}
    delay = annotations.get(L.PREEMPTION_DELAY)
    requests = pod_requests(spec)
    gpu_ids, gpu_milli = gpu_claim(requests, annotations)
    return PodRecord(
        uid=str(meta.get("uid", "")),
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        scheduler_name=str(spec.get("schedulerName") or "default-scheduler"),
        node_name=str(spec.get("nodeName") or ""),
        phase=str(status.get("phase") or "Pending"),
        deleting=bool(meta.get("deletionTimestamp")),
        requests=MappingProxyType(requests),
        priority=spec.get("priority") if isinstance(spec.get("priority"), int) else None,
        created=timestamp(meta.get("creationTimestamp")),
        group_name=L.first_of(both, L.POD_GROUP_KEYS) or "",
        queue=L.first_of(both, L.QUEUE_KEYS) or "",
        pool=L.first_of(both, L.POOL_KEYS) or "",
        role=str(labels.get(L.TASK) or ""),
        index=_int(labels.get(L.REPLICA_INDEX), 0),
        gpu_ids=gpu_ids,
        gpu_milli=gpu_milli,
        node_selector=MappingProxyType(_str_map(spec.get("nodeSelector"))),
        affinity=required_affinity(spec),
        tolerations=tuple(toleration(t) for t in spec.get("tolerations") or ()),
        nominated_node=str(status.get("nominatedNodeName") or ""),
        preemption_delay=_delay(delay),
        labels=MappingProxyType(_str_map(labels)),
    )


def task_status(rec: PodRecord) -> S.TaskStatus:
    if rec.phase == "Succeeded":
        return S.TaskStatus.SUCCEEDED
    if rec.phase == "Failed":
        return S.TaskStatus.FAILED
    if rec.deleting and rec.node_name:
        return S.TaskStatus.RELEASING
    if rec.node_name:
        return S.TaskStatus.BOUND
    return S.TaskStatus.PENDING


def task(rec: PodRecord, group_uid: str) -> S.Task:
    return S.Task(
        uid=rec.uid,
        group=group_uid,
        namespace=rec.namespace,
        name=rec.name,
        role=rec.role,
        index=rec.index,
        requests=rec.requests,
        gpu_milli=rec.gpu_milli,
        node_selector=rec.node_selector,
        affinity=rec.affinity,
        tolerations=rec.tolerations,
        priority=rec.priority,
        status=task_status(rec),
        node=rec.node_name or None,
        gpu_ids=rec.gpu_ids,
        nominated_node=rec.nominated_node or None,
        pool=rec.pool or None,
    )


def implicit_group_uid(pod_uid: str) -> str:
    return f"pod:{pod_uid}"


def implicit_group(rec: PodRecord, bound: bool, arrival: int = 0) -> S.PodGroup:
    """Pods with schedulerName sluice and no group are scheduled as one-pod groups."""
    return S.PodGroup(
        uid=implicit_group_uid(rec.uid),
        namespace=rec.namespace,
        name=rec.name,
        queue=rec.queue or S.DEFAULT_QUEUE,
        pool=rec.pool or S.DEFAULT_POOL,
        min_member=1,
        priority=rec.priority or 0,
        created=rec.created,
        arrival=arrival,
        preemption_grace=rec.preemption_delay,
        # Implicit groups have no object to hold a phase: bound means Running, else Pending
        # (the core's enqueue admits them in the same session).
        phase=S.GroupPhase.RUNNING if bound else S.GroupPhase.PENDING,
        movable=False,
    )


# --------------------------------------------------------------------------------------------
# PodGroups
# --------------------------------------------------------------------------------------------

PREEMPTION_CONDITIONS = {
    S.PreemptionRole.PRIVILEGED.value: S.PreemptionRole.PRIVILEGED,
    S.PreemptionRole.WILL_EVICT.value: S.PreemptionRole.WILL_EVICT,
}


@dataclasses.dataclass(frozen=True, slots=True)
class GroupRecord:
    """A PodGroup object: its scheduling-relevant spec plus the status as last written."""

    uid: str
    namespace: str
    name: str
    priority_class: str
    group: S.PodGroup  # priority filled in by the cache from the PriorityClass
    status: Mapping[str, Any]
    generation: int
    units: tuple[int, tuple[str, ...]] | None  # (pods per unit, replica types) from networkTopology


CONSOLIDATED = "Consolidated"
"""Condition type the scheduler sets when consolidation moves a group (scheduler_status.py)."""


def consolidated_at(status: Mapping[str, Any]) -> float | None:
    """When consolidation last moved the group: the later of its ``Consolidated`` condition's
    time and the time of a ``Consolidated`` lastEviction. A leader that lost its lease after a
    move's evictions wrote only the stamp (written before them), and the condition of an
    earlier move stays True, so the stamp may be the newer of the two (review s9 B)."""
    times: list[float] = []
    for cond in status.get("conditions") or ():
        if isinstance(cond, Mapping) and cond.get("type") == CONSOLIDATED:
            if cond.get("status") == "True" and cond.get("lastTransitionTime"):
                times.append(timestamp(cond.get("lastTransitionTime")))
            break
    last = status.get("lastEviction")
    if (
        isinstance(last, Mapping)
        and last.get("reason") == EvictReason.CONSOLIDATED.value
        and last.get("time")
    ):
        times.append(timestamp(last.get("time")))
    return max(times) if times else None


def moved_until(
    status: Mapping[str, Any], window: float, last: Mapping[str, Any] | None = None
) -> float | None:
    """When the move window of a group whose last eviction (``last``, else
    ``status.lastEviction``) was a consolidation move ends; None if it was none or the job
    has been placed again since (:func:`placed_again`: the move is over)."""
    last = last or status.get("lastEviction") or {}
    if not isinstance(last, Mapping) or last.get("reason") != EvictReason.CONSOLIDATED.value:
        return None
    if last.get("movedTo") == []:
        return None
    at = consolidated_at(status)
    return None if at is None else at + window


def placed_again(last: Mapping[str, Any]) -> dict[str, Any]:
    """A move's ``status.lastEviction`` once the moved job has been placed again: ``movedTo``
    emptied (the move's plan is over; `consolidated_to` reads nothing from it). A job
    that finished after that neither holds the plan's nodes again nor is kept from Completed
    for the rest of the window (review s9 R2)."""
    return {**last, "movedTo": []}


def consolidated_to(status: Mapping[str, Any]) -> tuple[tuple[str, int], ...]:
    """Where the last move's plan placed the group's pods again: (node, pods) from
    ``status.lastEviction.movedTo`` (nothing unless the last eviction was that move)."""
    last = status.get("lastEviction")
    if not isinstance(last, Mapping) or last.get("reason") != EvictReason.CONSOLIDATED.value:
        return ()
    return tuple(
        (str(item["node"]), max(1, _int(item.get("pods"), 1)))
        for item in last.get("movedTo") or ()
        if isinstance(item, Mapping) and item.get("node")
    )


def preemption_mark(
    status: Mapping[str, Any], resolve_peer: Callable[[str], str] | None = None
) -> S.PreemptionMark | None:
    """Delayed preemption is stored in the API (status.preemption) so it survives restarts.
    Peers are written as namespace/name (readable); `resolve_peer` maps them back to group uids."""
    raw = status.get("preemption")
    if not isinstance(raw, Mapping):
        return None
    try:
        role = S.PreemptionRole(str(raw.get("role", "")))
    except ValueError:
        return None
    peers = tuple(str(p) for p in raw.get("peers") or ())
    if resolve_peer is not None:
        peers = tuple(resolve_peer(p) for p in peers)
    return S.PreemptionMark(role=role, peers=peers, deadline=timestamp(raw.get("deadline")))


def _network_topology(raw: object) -> S.NetworkTopology | None:
    if not isinstance(raw, Mapping):
        return None
    try:
        mode = S.TopologyMode(str(raw.get("mode") or "hard").lower())
    except ValueError:
        mode = S.TopologyMode.HARD
    soft_after = raw.get("softAfterSeconds")
    return S.NetworkTopology(
        mode=mode,
        highest_tier=str(raw.get("highestTier") or ""),
        soft_after=_delay(soft_after) if mode is S.TopologyMode.HARD else None,
    )


def _replica_specs(raw: object) -> tuple[S.ReplicaSpec, ...]:
    if not isinstance(raw, list):
        return ()
    out = []
    for item in raw:
        if not isinstance(item, Mapping) or not item.get("name"):
            continue
        lo = _int(item.get("minReplicas"), 0)
        out.append(
            S.ReplicaSpec(
                name=str(item["name"]),
                min_replicas=lo,
                max_replicas=max(lo, _int(item.get("maxReplicas"), lo)),
                priority=_int(item.get("priority"), 0),
            )
        )
    return tuple(out)


def podgroup(obj: JsonDict) -> GroupRecord:
    meta, spec, status = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
    annotations = meta.get("annotations") or {}
    try:
        phase = S.GroupPhase(str(status.get("phase") or "Pending"))
    except ValueError:
        phase = S.GroupPhase.PENDING
    min_res = spec.get("minResources")
    topo_raw = spec.get("networkTopology")
    topo: Mapping[str, Any] = topo_raw if isinstance(topo_raw, Mapping) else {}
    units_raw = topo.get("units")
    units = None
    if isinstance(units_raw, Mapping) and units_raw:
        roles = tuple(str(r) for r in units_raw.get("replicaTypes") or ())
        units = (max(1, _int(units_raw.get("size"), 1)), roles)
    group = S.PodGroup(
        uid=str(meta.get("uid", "")),
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        queue=str(spec.get("queue") or S.DEFAULT_QUEUE),
        pool=str(spec.get("pool") or S.DEFAULT_POOL),
        # Members that succeeded count toward the gang, as Succeeded tasks count as allocated
        # in Volcano. They have left the watch (terminal pods are not listed), so without this a
        # gang half-bound when a scheduler lost its lease, whose bound member then finished,
        # would wait forever for a member that is done (status.succeeded: podgroup operator).
        min_member=max(0, _int(spec.get("minMember"), 1) - _int(status.get("succeeded"), 0)),
        min_task_member=MappingProxyType(
            {str(k): _int(v) for k, v in (spec.get("minTaskMember") or {}).items()}
        ),
        replica_specs=_replica_specs(spec.get("replicaSpecs")),
        min_resources=MappingProxyType(resources(min_res))
        if isinstance(min_res, Mapping)
        else None,
        user=str(spec.get("user") or ""),
        created=timestamp(meta.get("creationTimestamp")),
        network_topology=_network_topology(spec.get("networkTopology")),
        unit_tier=str(units_raw.get("tier") or "") if isinstance(units_raw, Mapping) else "",
        overcommit=_bool(annotations.get(L.OVERCOMMIT, False)),
        preemption_grace=_delay(spec.get("preemptionDelaySeconds")),
        phase=phase,
        preemption=preemption_mark(status),
        # A non-preemptible group is never a victim; PodDisruptionBudgets may lower it further.
        max_unavailable=0 if spec.get("preemptible") is False else None,
        preemptible=spec.get("preemptible") is not False,
        consolidated_at=consolidated_at(status),
        consolidated_to=consolidated_to(status),
        stale_grace=_stale_grace(spec.get("staleGangGraceSeconds")),
        job_owned=owned_by_job(meta.get("ownerReferences")),
    )
    return GroupRecord(
        uid=group.uid,
        namespace=group.namespace,
        name=group.name,
        priority_class=str(spec.get("priorityClassName") or ""),
        group=group,
        status=MappingProxyType(dict(status)),
        generation=_int(meta.get("generation"), 0),
        units=units,
    )


# --------------------------------------------------------------------------------------------
# Queues, Pools, Topology, PriorityClasses
# --------------------------------------------------------------------------------------------


def _tenants(raw: object) -> tuple[S.Tenant, ...]:
    if not isinstance(raw, list):
        return ()
    out = []
    for item in raw:
        if not isinstance(item, Mapping):
            continue
        if item.get("user"):
            name, kind = str(item["user"]), S.TenantKind.USER
        elif item.get("namespace"):
            name, kind = str(item["namespace"]), S.TenantKind.NAMESPACE
        else:
            continue
        out.append(
            S.Tenant(
                name=name,
                kind=kind,
                priority=_int(item.get("priority"), 0),
                can_preempt=bool(item.get("canPreempt", True)),
            )
        )
    return tuple(out)


def queue(obj: JsonDict) -> S.Queue:
    meta, spec, status = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
    name = str(meta.get("name", ""))
    state_raw = status.get("state") or spec.get("state") or "Open"
    try:
        state = S.QueueState(str(state_raw))
    except ValueError:
        state = S.QueueState.OPEN
    weight = spec.get("weight") or 1
    delay = spec.get("preemptionDelaySeconds", 0)
    invalid = _invalid(status.get("conditions"))
    return S.Queue(
        name=name,
        parent=None if name == S.ROOT_QUEUE else str(spec.get("parent") or S.ROOT_QUEUE),
        weight=_float(weight, 1.0) if not isinstance(weight, Mapping) else 1.0,
        # A queue the queue operator found invalid guarantees nothing: its guarantee may be the
        # one that overflows its parent's (docs/admin.md "Queues").
        guarantee=MappingProxyType({} if invalid else resources(spec.get("guarantee"))),
        capability=MappingProxyType(resources(spec.get("capability"))),
        overcommit=bool(spec.get("overcommit", False)),
        reclaimable=bool(spec.get("reclaimable", True)),
        state=state,
        tenants=_tenants(spec.get("tenants")),
        preemption_delay=_delay(delay) or 0.0,
        closed_reason=invalid,
        usage_k=_usage_k(spec.get("timeBasedFairShare")),
        usage_buckets=usage_buckets(status.get("usage")),
    )


def _usage_k(raw: object) -> float:
    if not isinstance(raw, Mapping):
        return 0.0
    return max(_float(raw.get("kValue", 1.0), 0.0), 0.0)


def usage_buckets(raw: object) -> tuple[tuple[float, float], ...]:
    """status.usage.buckets as the scheduler wrote them: (start, GPU-seconds), oldest first."""
    buckets = raw.get("buckets") if isinstance(raw, Mapping) else None
    out: dict[float, float] = {}
    for b in buckets if isinstance(buckets, list) else ():
        if isinstance(b, Mapping):
            start, value = timestamp(b.get("start")), _float(b.get("gpuSeconds"))
            if start > 0 and value > 0:
                out[start] = out.get(start, 0.0) + value
    return tuple(sorted(out.items()))


def _invalid(conditions: object) -> str:
    """The queue operator's `Valid=False` (a rule over several queues is broken) closes the
    queue to new work; its reason and message say why."""
    for cond in conditions if isinstance(conditions, list) else ():
        if isinstance(cond, Mapping) and cond.get("type") == "Valid":
            if cond.get("status") != "False":
                return ""
            return f"{cond.get('reason') or 'Invalid'}: {cond.get('message') or 'invalid'}"
    return ""


def pool(obj: JsonDict) -> S.Pool:
    meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
    return S.Pool(
        name=str(meta.get("name", "")),
        node_selector=label_selector(spec.get("nodeSelector")),
        disable_sharing=bool(spec.get("disableSharing", False)),
        disable_borrowing=bool(spec.get("disableBorrowing", False)),
        disable_preemption=bool(spec.get("disablePreemption", False)),
        disable_consolidation=bool(spec.get("disableConsolidation", False)),
    )


def topology(obj: JsonDict) -> S.Topology:
    meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
    levels = []
    for item in spec.get("levels") or ():
        if isinstance(item, Mapping) and item.get("nodeLabel"):
            label = str(item["nodeLabel"])
            levels.append(S.TopologyLevel(name=str(item.get("name") or label), label=label))
    return S.Topology(name=str(meta.get("name", "")), levels=tuple(levels))


def priority_class(obj: JsonDict) -> int:
    return _int(obj.get("value"), 0)


@dataclasses.dataclass(frozen=True, slots=True)
class BudgetRecord:
    """A PodDisruptionBudget: which pods it covers and how many may go now."""

    namespace: str
    selector: S.LabelSelector
    disruptions_allowed: int


def budget(obj: JsonDict) -> BudgetRecord:
    meta, spec, status = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
    return BudgetRecord(
        namespace=str(meta.get("namespace", "")),
        selector=label_selector(spec.get("selector")),
        disruptions_allowed=_int(status.get("disruptionsAllowed"), 0),
    )


def dumps_compact(value: object) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
