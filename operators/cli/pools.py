"""`sluice pools`: the resource table of every pool (ai-scheduler's view), with the cluster total."""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

from operators.api.scheduling import Pool
from operators.cli import common
from operators.runtime.client import KubeClient

COLUMNS = ("capacity", "allocatable", "used", "shared", "pending")
HELP = """\
One row per pool and resource: Capacity (nodes' capacity), Allocatable (of schedulable nodes),
Used (by Sluice's pods running there), Shared (the part of Used taken by other pools' borrowed
tasks) and Pending (requests of the pool's waiting pods), then the cluster Total.
FLAGS: p = preemption disabled, b = borrowing disabled, s = sharing disabled.
The figures are the scheduler's (Pool status); NODES is the pool operator's.
"""


async def run(args: argparse.Namespace, client: KubeClient) -> int:
    pools, _ = await client.list(Pool.api_path())
    data = summarise(pools)
    return common.emit(args, data, render(data))


COMMAND = common.Command("pools", "resources per pool and the cluster total", HELP, run=run)


def flags(spec: Mapping[str, Any]) -> str:
    return "".join(
        letter if spec.get(field) else "-"
        for letter, field in (
            ("p", "disablePreemption"),
            ("b", "disableBorrowing"),
            ("s", "disableSharing"),
        )
    )


def summarise(pools: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """API Pool objects -> the report (what `-o json` prints)."""
    rows: list[dict[str, Any]] = []
    total: dict[str, dict[str, Decimal]] = {}
    nodes_total = 0
    for obj in sorted(pools, key=common.name_of):
        status = obj.get("status") or {}
        resources = common.ordered_resources(status.get(c) for c in COLUMNS)
        per: dict[str, dict[str, str]] = {}
        for r in resources:
            values = {c: common.quantity((status.get(c) or {}).get(r)) for c in COLUMNS}
            per[r] = {c: common.show(v) for c, v in values.items()}
            acc = total.setdefault(r, dict.fromkeys(COLUMNS, Decimal(0)))
            for c, v in values.items():
                acc[c] += v
        count = status.get("nodeCount")
        nodes_total += count if isinstance(count, int) else 0
        rows.append(
            {
                "name": common.name_of(obj),
                "flags": flags(obj.get("spec") or {}),
                "nodes": count if isinstance(count, int) else None,
                "resources": per,
            }
        )
    order = common.ordered_resources([total])
    return {
        "pools": rows,
        "total": {
            "nodes": nodes_total,
            "resources": {r: {c: common.show(total[r][c]) for c in COLUMNS} for r in order},
        },
    }


def render(data: Mapping[str, Any]) -> str:
    lines: list[list[object]] = []
    entries = [*((p["name"], p["flags"], p["nodes"], p["resources"]) for p in data["pools"])]
    total = data["total"]
    entries.append(("Total", "", total["nodes"], total["resources"]))
    for name, flag, nodes, resources in entries:
        first = True
        if not resources:
            lines.append([name, flag, "-" if nodes is None else nodes, "-", "", "", "", "", ""])
        for r, values in resources.items():
            head = [name, flag, "-" if nodes is None else nodes] if first else ["", "", ""]
            lines.append([*head, r, *(values[c] for c in COLUMNS)])
            first = False
    headers = ("POOL", "FLAGS", "NODES", "RESOURCE", *(c.upper() for c in COLUMNS))
    return common.table(headers, lines)
