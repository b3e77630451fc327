"""`sluice top`: GPUs allocated per pool and per queue, with how full each is."""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

from operators.api.scheduling import Pool, Queue
from operators.cli import common, queues
from operators.runtime.client import KubeClient

HELP = """\
GPU allocation at a glance. Pools: allocatable GPUs, GPUs used by Sluice's pods, the part used by
borrowers (SHARED), GPUs requested by waiting pods, and USE% = used / allocatable. Queues (as a
tree): allocated, deserved (fair share), guarantee and capability in GPUs, and running PodGroups.
`--resource` shows another resource instead of nvidia.com/gpu.
"""


def arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--resource", default=common.GPU, help="resource to show (default: nvidia.com/gpu)"
    )


async def run(args: argparse.Namespace, client: KubeClient) -> int:
    (pools, _), (qs, _) = await asyncio.gather(
        client.list(Pool.api_path()), client.list(Queue.api_path())
    )
    data = summarise(pools, qs, args.resource)
    return common.emit(args, data, render(data))


COMMAND = common.Command(
    "top", "GPU allocation per pool and per queue", HELP, run=run, arguments=arguments
)


def _get(obj: Mapping[str, Any], part: str, field: str, resource: str) -> Decimal:
    return common.quantity(((obj.get(part) or {}).get(field) or {}).get(resource))


def _percent(part: Decimal, whole: Decimal) -> int | None:
    return int(part * 100 / whole) if whole else None


def summarise(
    pools: Sequence[Mapping[str, Any]], qs: Sequence[Mapping[str, Any]], resource: str
) -> dict[str, Any]:
    pool_rows = []
    for obj in sorted(pools, key=common.name_of):
        allocatable = _get(obj, "status", "allocatable", resource)
        used = _get(obj, "status", "used", resource)
        pool_rows.append(
            {
                "name": common.name_of(obj),
                "allocatable": common.show(allocatable),
                "used": common.show(used),
                "shared": common.show(_get(obj, "status", "shared", resource)),
                "pending": common.show(_get(obj, "status", "pending", resource)),
                "usePercent": _percent(used, allocatable),
            }
        )
    by_name = {common.name_of(q): q for q in qs}
    queue_rows = []
    for row in queues.summarise(qs)["queues"]:
        obj = by_name.get(row["name"], {})
        allocated = _get(obj, "status", "allocated", resource)
        deserved = _get(obj, "status", "deserved", resource)
        queue_rows.append(
            {
                "name": row["name"],
                "depth": row["depth"],
                "allocated": common.show(allocated),
                "deserved": common.show(deserved),
                "guarantee": common.show(_get(obj, "spec", "guarantee", resource)),
                "capability": (
                    common.show(_get(obj, "spec", "capability", resource))
                    if resource in ((obj.get("spec") or {}).get("capability") or {})
                    else None
                ),
                "ofDeservedPercent": _percent(allocated, deserved),
                "running": row["running"],
            }
        )
    return {"resource": resource, "pools": pool_rows, "queues": queue_rows}


def render(data: Mapping[str, Any]) -> str:
    def pct(value: int | None) -> str:
        return "-" if value is None else f"{value}%"

    pools = common.table(
        ("POOL", "ALLOCATABLE", "USED", "SHARED", "PENDING", "USE%"),
        (
            (
                p["name"],
                p["allocatable"],
                p["used"],
                p["shared"],
                p["pending"],
                pct(p["usePercent"]),
            )
            for p in data["pools"]
        ),
    )
    qs = common.table(
        ("QUEUE", "ALLOCATED", "DESERVED", "OF-DESERVED", "GUARANTEE", "CAPABILITY", "RUNNING"),
        (
            (
                "  " * q["depth"] + q["name"],
                q["allocated"],
                q["deserved"],
                pct(q["ofDeservedPercent"]),
                q["guarantee"],
                q["capability"] or "-",
                q["running"],
            )
            for q in data["queues"]
        ),
    )
    return f"{data['resource']} by pool\n{pools}\n{data['resource']} by queue\n{qs}"
