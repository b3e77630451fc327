"""The scheduler's reader (operators/runtime/records.py) against the API it reads.

Every Sluice object the scheduler sees has gone through the API server: fields the CRD does not
declare are pruned before anyone reads them. So each reader input here is built from the API
models, pruned by the generated CRD schema in crds/ as the server would prune it, and then read;
the reader's every key access is recorded and must name a field the CRD declares, and every spec
field the API offers must be read and arrive in the record. A reader that reads an invented field,
or an API field the reader ignores, fails here rather than silently in a live cluster.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest
import yaml
from pydantic import BaseModel

from operators.api import scheduling as A
from operators.api.base import Condition, ConditionStatus, ObjectMeta
from operators.api.crdgen import filename_for
from operators.api.resource import Resource
from operators.runtime import records as R
from operators.scheduler import snapshot as S

CRDS = Path(__file__).resolve().parents[3] / "crds"
Path_ = tuple[str, ...]
ITEM = "[]"  # path segment of a list element


def crd_schema(kind: type[Resource]) -> dict[str, Any]:
    doc = yaml.safe_load((CRDS / filename_for(kind)).read_text())
    schema: dict[str, Any] = doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


# ---- structural pruning, as the API server applies it to custom resources ---------------------


def prune(value: Any, schema: Mapping[str, Any], path: Path_ = ()) -> Any:
    """Drop what the schema does not declare (unless it preserves unknown fields)."""
    if path == ("metadata",):
        return value  # ObjectMeta is pruned by its own (built-in) schema, not the CRD's
    if isinstance(value, dict):
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        out = {}
        for key, item in value.items():
            if props is not None and key in props:
                out[key] = prune(item, props[key], (*path, key))
            elif isinstance(extra, Mapping):
                out[key] = prune(item, extra, (*path, key))
            elif schema.get("x-kubernetes-preserve-unknown-fields") or extra is True:
                out[key] = item
        return out
    if isinstance(value, list) and "items" in schema:
        return [prune(item, schema["items"], (*path, ITEM)) for item in value]
    return value


def declared(schema: Mapping[str, Any], path: Path_) -> bool:
    """Does the CRD declare this path (a field, a map entry, a list element)?"""
    if path[:1] == ("metadata",):
        return len(path) == 1 or _meta_declared(path[1:])
    node: Mapping[str, Any] = schema
    for key in path:
        if key == ITEM and "items" in node:
            node = node["items"]
        elif key in (node.get("properties") or {}):
            node = node["properties"][key]
        elif isinstance(node.get("additionalProperties"), Mapping):
            node = node["additionalProperties"]
        else:
            return False
    return True


_META_FIELDS = {f.alias or name for name, f in ObjectMeta.model_fields.items()}


def _meta_declared(rest: Path_) -> bool:
    if rest[0] not in _META_FIELDS:
        return False
    return len(rest) == 1 or rest[0] in ("labels", "annotations")


# ---- recording what the reader touches ---------------------------------------------------------


class Traced(Mapping[str, Any]):
    """A read-only view of a JSON object that records every key looked up, present or not."""

    def __init__(self, data: Mapping[str, Any], path: Path_, seen: set[Path_]) -> None:
        self._data, self._path, self._seen = data, path, seen

    def __getitem__(self, key: str) -> Any:
        self._seen.add((*self._path, key))
        return _trace(self._data[key], (*self._path, key), self._seen)

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)


def _trace(value: Any, path: Path_, seen: set[Path_]) -> Any:
    if isinstance(value, Mapping):
        return Traced(value, path, seen)
    if isinstance(value, list):
        return [_trace(item, (*path, ITEM), seen) for item in value]
    return value


def leaf_paths(value: Any, path: Path_ = ()) -> Iterator[Path_]:
    if isinstance(value, Mapping) and value:
        for key, item in value.items():
            yield from leaf_paths(item, (*path, key))
    elif isinstance(value, list) and value:
        for item in value:
            yield from leaf_paths(item, (*path, ITEM))
    else:
        yield path


def read_through_api(
    kind: type[Resource], obj: Resource, reader: Callable[[Any], Any]
) -> tuple[Any, set[Path_]]:
    """Prune `obj` as the API server would, read it, and check the reader's side of the contract."""
    wire = obj.to_dict()
    schema = crd_schema(kind)
    pruned = prune(wire, schema)
    assert pruned == wire, "the fixture sets a field the CRD prunes"
    seen: set[Path_] = set()
    record = reader(_trace(pruned, (), seen))
    undeclared = sorted(p for p in seen if not declared(schema, p))
    assert not undeclared, (
        f"the reader reads fields the {kind.__name__} CRD does not have: {undeclared}"
    )
    unread = sorted(p for p in leaf_paths(wire.get("spec")) if not _read(("spec", *p), seen))
    assert not unread, f"{kind.__name__} spec fields the reader ignores: {unread}"
    return record, seen


def _read(path: Path_, seen: set[Path_]) -> bool:
    # A leaf counts as read when its key (or, for a list element, its list's key) was looked up.
    while path and path[-1] == ITEM:
        path = path[:-1]
    return path in seen


def every_field_set(model: BaseModel) -> None:
    """The fixture must set every field of the spec model and of the models inside it (over all
    elements of a list), so a new API field cannot be missing from this contract test."""
    fields_set: dict[type[BaseModel], set[str]] = {}

    def visit(node: BaseModel) -> None:
        fields_set.setdefault(type(node), set()).update(node.model_fields_set)
        for name in type(node).model_fields:
            value = getattr(node, name)
            for item in value if isinstance(value, list) else [value]:
                if isinstance(item, BaseModel):
                    visit(item)

    visit(model)
    for cls, names in fields_set.items():
        # Refused (Volcano-only) fields cannot be set: a model holding one does not validate.
        unset = set(cls.model_fields) - names - set(cls.__dict__.get("refused_fields", {}))
        assert not unset, f"{cls.__name__} fixture leaves {unset} unset"


META = ObjectMeta(
    name="train",
    namespace="team-a",
    uid="uid-train",
    generation=3,
    creation_timestamp="2026-11-22T08:00:00Z",
    annotations={"scheduling.sluice.dev/overcommit": "true"},
)


# ---- the four kinds the scheduler reads --------------------------------------------------------


def test_podgroup_every_field_arrives() -> None:
    spec = A.PodGroupSpec(
        min_member=0,
        min_task_member={"worker": 2, "ps": 1},
        min_resources={"cpu": "3", "nvidia.com/gpu": "16"},
        queue="research",
        pool="a100",
        priority_class_name="high",
        network_topology=A.NetworkTopology(
            mode=A.NetworkTopologyMode.HARD,
            highest_tier="spine",
            soft_after_seconds=900,
            units=A.TopologyUnits(size=8, tier="tor", replica_types=["worker"]),
        ),
        preemptible=False,
        preemption_delay_seconds=300,
        stale_gang_grace_seconds=-1,
        replica_specs=[
            A.PodGroupReplicaSpec(name="worker", min_replicas=2, max_replicas=8, priority=5),
            A.PodGroupReplicaSpec(name="ps", min_replicas=1, max_replicas=1, priority=9),
        ],
        user="alice",
    )
    every_field_set(spec)
    status = A.PodGroupStatus(
        phase=A.PodGroupPhase.INQUEUE,
        preemption=A.PreemptionStatus(
            role=A.PreemptionRole.WILL_EVICT,
            deadline="2026-11-22T09:00:00Z",
            peers=["team-b/big"],
        ),
    )
    obj = A.PodGroup(metadata=META, spec=spec, status=status)
    rec, _ = read_through_api(A.PodGroup, obj, R.podgroup)

    assert rec.priority_class == "high"
    assert rec.units == (8, ("worker",))
    assert rec.generation == 3
    assert rec.status["phase"] == "Inqueue"
    assert rec.group == S.PodGroup(
        uid="uid-train",
        namespace="team-a",
        name="train",
        queue="research",
        pool="a100",
        min_member=0,
        min_task_member=MappingProxyType({"worker": 2, "ps": 1}),
        replica_specs=(
            S.ReplicaSpec(name="worker", min_replicas=2, max_replicas=8, priority=5),
            S.ReplicaSpec(name="ps", min_replicas=1, max_replicas=1, priority=9),
        ),
        min_resources=MappingProxyType({"cpu": 3000, "nvidia.com/gpu": 16}),
        user="alice",
        created=R.timestamp("2026-11-22T08:00:00+00:00"),
        network_topology=S.NetworkTopology(
            mode=S.TopologyMode.HARD, highest_tier="spine", soft_after=900.0
        ),
        unit_tier="tor",
        overcommit=True,
        preemption_grace=300.0,
        phase=S.GroupPhase.INQUEUE,
        preemption=S.PreemptionMark(
            role=S.PreemptionRole.WILL_EVICT,
            peers=("team-b/big",),
            deadline=R.timestamp("2026-11-22T09:00:00+00:00"),
        ),
        max_unavailable=0,
        preemptible=False,
        stale_grace=-1.0,
    )


def test_queue_every_field_arrives() -> None:
    spec = A.QueueSpec(
        parent="research",
        weight=3,
        guarantee={"cpu": "8"},
        capability={"cpu": "16", "nvidia.com/gpu": "8"},
        overcommit=True,
        reclaimable=False,
        state=A.QueueSpecState.CLOSED,
        tenants=[
            A.Tenant(namespace="team-a", priority=5, can_preempt=False),
            A.Tenant(user="bob", priority=7),
        ],
        preemption_delay_seconds=120,
        time_based_fair_share=A.TimeBasedFairShare(k_value=0.5),
    )
    every_field_set(spec)
    obj = A.Queue(metadata=ObjectMeta(name="vision"), spec=spec)
    q, _ = read_through_api(A.Queue, obj, R.queue)
    assert q == S.Queue(
        name="vision",
        parent="research",
        weight=3.0,
        guarantee=MappingProxyType({"cpu": 8000}),
        capability=MappingProxyType({"cpu": 16000, "nvidia.com/gpu": 8}),
        overcommit=True,
        reclaimable=False,
        state=S.QueueState.CLOSED,
        tenants=(
            S.Tenant(name="team-a", kind=S.TenantKind.NAMESPACE, priority=5, can_preempt=False),
            S.Tenant(name="bob", kind=S.TenantKind.USER, priority=7, can_preempt=True),
        ),
        preemption_delay=120.0,
        usage_k=0.5,
    )


def test_queue_status_usage_is_read_back() -> None:
    """What the scheduler wrote to status.usage survives the CRD's pruning and comes back as
    the buckets it was made of (read on start: time-based fair share survives a restart)."""
    start = datetime.datetime(2026, 11, 24, tzinfo=datetime.UTC)
    obj = A.Queue(
        metadata=ObjectMeta(name="vision"),
        spec=A.QueueSpec(),
        status=A.QueueStatus(
            usage=A.QueueUsage(
                gpu_seconds=5400.0,
                updated=start,
                buckets=[
                    A.UsageBucket(start=start, gpu_seconds=3600.0),
                    A.UsageBucket(start=start + datetime.timedelta(days=1), gpu_seconds=1800.5),
                ],
            )
        ),
    )
    q = R.queue(prune(obj.to_dict(), crd_schema(A.Queue)))
    t0 = start.timestamp()
    assert q.usage_buckets == ((t0, 3600.0), (t0 + 86400, 1800.5))


def test_queue_status_state_and_validity_are_read() -> None:
    invalid = Condition(
        type="Valid",
        status=ConditionStatus.FALSE,
        reason="ParentNotFound",
        message="parent queue 'org' does not exist",
    )
    obj = A.Queue(
        metadata=ObjectMeta(name="vision"),
        spec=A.QueueSpec(),
        status=A.QueueStatus(state=A.QueueState.CLOSING, conditions=[invalid]),
    )
    schema = crd_schema(A.Queue)
    seen: set[Path_] = set()
    q = R.queue(_trace(prune(obj.to_dict(), schema), (), seen))
    assert q.state is S.QueueState.CLOSING
    assert q.closed_reason == "ParentNotFound: parent queue 'org' does not exist"
    assert all(declared(schema, p) for p in seen), sorted(seen)
    valid = invalid.model_copy(update={"status": ConditionStatus.TRUE, "reason": "Valid"})
    obj.status = A.QueueStatus(conditions=[valid])
    assert R.queue(prune(obj.to_dict(), schema)).closed_reason == ""


def test_pool_every_field_arrives() -> None:
    spec = A.PoolSpec(
        node_selector=A.NodeSelector(
            match_labels={"gpu": "a100"},
            match_expressions=[
                A.LabelSelectorRequirement(
                    key="zone", operator=A.LabelSelectorOperator.IN, values=["z1", "z2"]
                )
            ],
        ),
        disable_sharing=True,
        disable_borrowing=True,
        disable_preemption=True,
        disable_consolidation=True,
    )
    every_field_set(spec)
    p, _ = read_through_api(A.Pool, A.Pool(metadata=ObjectMeta(name="a100"), spec=spec), R.pool)
    assert p == S.Pool(
        name="a100",
        node_selector=S.LabelSelector(
            match_labels=MappingProxyType({"gpu": "a100"}),
            match_expressions=(
                S.SelectorRequirement(
                    key="zone", operator=S.SelectorOperator.IN, values=("z1", "z2")
                ),
            ),
        ),
        disable_sharing=True,
        disable_borrowing=True,
        disable_preemption=True,
        disable_consolidation=True,
    )


def test_topology_every_field_arrives() -> None:
    spec = A.TopologySpec(
        levels=[
            A.TopologyLevel(name="spine", node_label="example.com/spine"),
            A.TopologyLevel(name="host", node_label="kubernetes.io/hostname"),
        ]
    )
    every_field_set(spec)
    obj = A.Topology(metadata=ObjectMeta(name="net"), spec=spec)
    t, _ = read_through_api(A.Topology, obj, R.topology)
    assert t == S.Topology(
        name="net",
        levels=(
            S.TopologyLevel(name="spine", label="example.com/spine"),
            S.TopologyLevel(name="host", label="kubernetes.io/hostname"),
        ),
    )


# ---- the checks themselves can fail --------------------------------------------------------------


def test_a_reader_of_an_undeclared_field_is_caught() -> None:
    def reads_invented_field(obj: Any) -> object:
        return obj["spec"].get("maxUnavailable")

    obj = A.PodGroup(metadata=META, spec=A.PodGroupSpec(min_member=2))
    with pytest.raises(AssertionError, match="does not have"):
        read_through_api(A.PodGroup, obj, reads_invented_field)


def test_an_api_field_the_reader_ignores_is_caught() -> None:
    def ignores_user(obj: Any) -> object:
        return obj["spec"].get("minMember")

    obj = A.PodGroup(metadata=META, spec=A.PodGroupSpec(min_member=2, user="alice"))
    with pytest.raises(AssertionError, match="ignores"):
        read_through_api(A.PodGroup, obj, ignores_user)


def test_pruning_drops_undeclared_fields() -> None:
    wire = {"spec": {"minMember": 2, "unitTier": "tor", "minResources": {"cpu": "1"}}}
    pruned = prune(wire, crd_schema(A.PodGroup))
    assert pruned == {"spec": {"minMember": 2, "minResources": {"cpu": "1"}}}
    assert R.podgroup(pruned).group.unit_tier == ""
