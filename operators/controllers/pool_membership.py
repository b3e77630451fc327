"""Which node is in which pool, and what the pool operator writes about it (pure).

Membership has one rule, the core's `pool_of_node`: a node matching exactly one named pool is in
it, any other node is in `default`. The scheduler applies that rule itself; the pool operator
mirrors its result into each node's `scheduling.sluice.dev/pool` label (written only when it
changes) and into each Pool's `status.nodeCount` and `SelectorOverlap` condition.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from operators.api import labels as L
from operators.api.scheduling import PoolConditionType, PoolReason
from operators.scheduler import snapshot as S

MAX_NAMED_NODES = 5
"""Nodes named in a condition message; the rest are counted."""


@dataclasses.dataclass(frozen=True)
class PoolObject:
    """What the operator knows of one Pool object."""

    pool: S.Pool
    generation: int
    status: Mapping[str, Any]
    uid: str = ""


@dataclasses.dataclass(frozen=True)
class MembershipPlan:
    relabel: dict[str, str]  # node -> pool label value to write (only nodes whose label is stale)
    members: dict[str, list[str]]  # pool -> member nodes, sorted; every existing pool is a key
    overlaps: dict[str, list[str]]  # pool -> nodes it selects that went to default (conflicts)


def plan_membership(
    nodes: Mapping[str, Mapping[str, str]], pools: Iterable[S.Pool]
) -> MembershipPlan:
    """`nodes`: node name -> its labels."""
    pool_list = tuple(pools)
    members: dict[str, list[str]] = {p.name: [] for p in pool_list}
    members.setdefault(S.DEFAULT_POOL, [])
    overlaps: dict[str, list[str]] = {}
    relabel: dict[str, str] = {}
    for name in sorted(nodes):
        node_labels = nodes[name]
        pool = S.pool_of_node(S.Node(name=name, allocatable={}, labels=node_labels), pool_list)
        members[pool].append(name)
        if node_labels.get(L.POOL) != pool:
            relabel[name] = pool
        if pool == S.DEFAULT_POOL:
            for p in pool_list:
                if p.name != S.DEFAULT_POOL and p.node_selector.matches(node_labels):
                    overlaps.setdefault(p.name, []).append(name)
    return MembershipPlan(relabel=relabel, members=members, overlaps=overlaps)


def overlap_condition(
    pool: str, overlapping: list[str], old: Iterable[Mapping[str, Any]], now: str
) -> dict[str, Any]:
    """`SelectorOverlap`: True while some of the pool's nodes also match another pool."""
    previous = next((c for c in old if c.get("type") == PoolConditionType.SELECTOR_OVERLAP), None)
    status = "True" if overlapping else "False"
    if overlapping:
        shown = ", ".join(overlapping[:MAX_NAMED_NODES])
        more = len(overlapping) - MAX_NAMED_NODES
        shown += f" and {more} more" if more > 0 else ""
        reason = PoolReason.NODES_IN_DEFAULT.value
        message = (
            f"{len(overlapping)} node(s) selected by {pool} also match another pool and are in "
            f"{S.DEFAULT_POOL}: {shown}"
        )
    else:
        reason, message = PoolReason.NO_OVERLAP.value, "every selected node is in this pool"
    same = previous is not None and previous.get("status") == status
    return {
        "type": PoolConditionType.SELECTOR_OVERLAP.value,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": previous.get("lastTransitionTime") if same and previous else now,
    }


def pool_status_patches(
    plan: MembershipPlan, objects: Mapping[str, PoolObject], now: str
) -> dict[str, dict[str, Any]]:
    """Pool name -> the operator's status fields, for the pools whose fields differ."""
    out: dict[str, dict[str, Any]] = {}
    for name, obj in objects.items():
        old_conditions = obj.status.get("conditions") or []
        desired = {
            "nodeCount": len(plan.members.get(name, ())),
            "observedGeneration": obj.generation,
            "conditions": [
                overlap_condition(name, plan.overlaps.get(name, []), old_conditions, now)
            ],
        }
        if any(obj.status.get(k) != v for k, v in desired.items()):
            out[name] = desired
    return out
