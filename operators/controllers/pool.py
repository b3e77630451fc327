"""The `pool` operator: mirrors node membership onto nodes and Pools (docs/admin.md "Pools").

Nodes and Pools are watched through kopf indexes and `on.event` only (nothing is persisted on
them by kopf). Every event pokes one coalesced reconcile, which recomputes membership with the
scheduler's own rule and writes what differs: the membership label of nodes whose label is stale,
and the operator's Pool status fields. The built-in `default` Pool is created if missing.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence
from typing import Any

import kopf

from operators.api import labels as L
from operators.api.scheduling import API_VERSION, Pool
from operators.controllers import kopf_runner
from operators.controllers.coalesce import Coalescer, run_in_background
from operators.controllers.pool_membership import (
    PoolObject,
    plan_membership,
    pool_status_patches,
)
from operators.controllers.writes import bounded, ensure_exists, failures, now_text, single
from operators.runtime import records as R
from operators.runtime.client import ApiError, KubeClient
from operators.runtime.events import EventRecorder
from operators.runtime.operator_metrics import OperatorMetrics
from operators.scheduler import snapshot as S

log = logging.getLogger(__name__)

POOLS = "/apis/scheduling.sluice.dev/v1alpha1/pools"


def default_pool() -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "Pool",
        "metadata": {"name": S.DEFAULT_POOL, "labels": {L.MANAGED_BY: "pool"}},
        # The selector of `default` is never evaluated: it holds whatever no other pool holds.
        "spec": {"nodeSelector": {}},
    }


@dataclasses.dataclass
class PoolOperator:
    client: KubeClient
    events: EventRecorder
    nodes: Mapping[str, Any] = dataclasses.field(default_factory=dict)  # kopf index
    pools: Mapping[str, Any] = dataclasses.field(default_factory=dict)  # kopf index
    writes: int = 0
    metrics: OperatorMetrics = dataclasses.field(default_factory=lambda: OperatorMetrics("pool"))

    async def reconcile(self) -> float | None:
        nodes: dict[str, Mapping[str, str]] = single(self.nodes)
        pools: dict[str, PoolObject] = single(self.pools)
        if S.DEFAULT_POOL not in pools:
            await ensure_exists(self.client, POOLS, default_pool())
        plan = plan_membership(nodes, (p.pool for p in pools.values()))
        moves = [
            self.client.merge_patch(f"/api/v1/nodes/{node}", {"metadata": {"labels": {L.POOL: to}}})
            for node, to in plan.relabel.items()
        ]
        statuses = pool_status_patches(plan, pools, now_text())
        writes = [
            self.client.merge_patch(f"{POOLS}/{name}/status", {"status": body})
            for name, body in statuses.items()
        ]
        results = await bounded([*moves, *writes])
        self.writes += len(results)
        failed = failures(results, "pool", self.metrics)
        self.metrics.count_objects("node", {p: len(n) for p, n in plan.members.items()})
        self._announce(nodes, plan.relabel, pools)
        return 5.0 if failed else None

    def _announce(
        self,
        nodes: Mapping[str, Mapping[str, str]],
        relabel: Mapping[str, str],
        pools: Mapping[str, PoolObject],
    ) -> None:
        """An Event on each Pool that gained nodes (first sighting of a node is not a move)."""
        joined: dict[str, list[str]] = {}
        for node, to in relabel.items():
            came_from = nodes[node].get(L.POOL)
            if came_from and came_from != to:
                joined.setdefault(to, []).append(f"{node} (from {came_from})")
        for pool, moved in joined.items():
            if pool in pools:
                involved = {
                    "apiVersion": API_VERSION,
                    "kind": "Pool",
                    "name": pool,
                    "uid": pools[pool].uid,
                }
                shown = ", ".join(moved[:10]) + (" ..." if len(moved) > 10 else "")
                self.events.post(
                    involved, "Normal", "NodesJoined", f"{len(moved)} node(s) joined: {shown}"
                )


def register(registry: kopf.OperatorRegistry, ctx: kopf_runner.OperatorContext) -> None:
    op = PoolOperator(ctx.client, EventRecorder(ctx.client, "sluice-pool"), metrics=ctx.metrics)
    coalescer = Coalescer("pool", op.reconcile, metrics=ctx.metrics)
    run_in_background(registry, coalescer, ctx.stop)

    @kopf.index("nodes", id="pool_nodes", registry=registry)
    async def pool_nodes(name: str, labels: kopf.Labels, **_: Any) -> dict[str, dict[str, str]]:
        return {name: dict(labels)}

    @kopf.index(*POOL_RESOURCE, id="pool_objects", registry=registry)
    async def pool_objects(name: str, body: kopf.Body, **_: Any) -> dict[str, PoolObject]:
        meta = body.get("metadata") or {}
        return {
            name: PoolObject(
                pool=R.pool(dict(body)),
                generation=int(meta.get("generation") or 0),
                status=dict(body.get("status") or {}),
                uid=str(meta.get("uid") or ""),
            )
        }

    @kopf.on.startup(registry=registry)
    async def built_in(**_: Any) -> None:
        try:
            await ensure_exists(ctx.client, POOLS, default_pool())
        except (ApiError, OSError) as err:
            raise kopf.TemporaryError(f"cannot create the default pool: {err}", delay=5) from err

    async def changed(**kwargs: Any) -> None:
        # Indexes are complete before kopf calls any event handler, so the first pass never
        # sees nodes without their pools. kopf passes each index by its function's name.
        op.nodes, op.pools = kwargs["pool_nodes"], kwargs["pool_objects"]
        coalescer.poke()

    kopf.on.event("nodes", registry=registry)(changed)
    kopf.on.event(*POOL_RESOURCE, registry=registry)(changed)


POOL_RESOURCE = (Pool.group, Pool.version, Pool.plural)

OPERATOR = kopf_runner.KopfOperator(
    "pool",
    register,
    description="Pool operator: node membership label, Pool nodeCount and conditions, "
    "built-in default pool.",
)


async def main(argv: Sequence[str]) -> int:
    return await kopf_runner.main(OPERATOR, argv)
