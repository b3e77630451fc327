"""`sluice queues`: the quota tree with guarantee, deserved, allocated, capability and counts."""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from typing import Any

from operators.api.scheduling import Queue
from operators.cli import common
from operators.runtime.client import KubeClient

ROOT = "root"
HELP = f"""\
The queue tree from `root`. GUARANTEE and CAPABILITY are the spec; DESERVED (fair share) and
ALLOCATED are the scheduler's; STATE and VALID are the queue operator's. PENDING / INQUEUE /
RUNNING count PodGroups. A queue with VALID False admits nothing new
(see `kubectl describe {Queue.singular} NAME`).
"""


async def run(args: argparse.Namespace, client: KubeClient) -> int:
    queues, _ = await client.list(Queue.api_path())
    data = summarise(queues)
    return common.emit(args, data, render(data))


COMMAND = common.Command(
    "queues", "the queue tree with guarantee/deserved/allocated/capability", HELP, run=run
)


def _parent(obj: Mapping[str, Any], names: set[str]) -> str | None:
    name = common.name_of(obj)
    if name == ROOT:
        return None
    parent = str((obj.get("spec") or {}).get("parent") or ROOT)
    # Orphans and cycle members hang off root, as the scheduler treats them.
    return parent if parent in names and parent != name else ROOT


def summarise(queues: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """API Queue objects -> the tree, depth first (what `-o json` prints)."""
    by_name = {common.name_of(q): q for q in queues}
    names = set(by_name) | {ROOT}
    children: dict[str | None, list[str]] = {}
    for name, obj in by_name.items():
        children.setdefault(_parent(obj, names), []).append(name)
    rows: list[dict[str, Any]] = []
    seen: set[str] = set()

    def visit(name: str, depth: int) -> None:
        if name in seen:
            return
        seen.add(name)
        obj = by_name.get(name, {"metadata": {"name": name}})
        spec, status = obj.get("spec") or {}, obj.get("status") or {}
        valid = common.condition(obj, "Valid")
        rows.append(
            {
                "name": name,
                "depth": depth,
                "parent": _parent(obj, names),
                "state": status.get("state") or spec.get("state") or "Open",
                "valid": None if valid is None else valid.get("status") == "True",
                "reason": None
                if valid is None or valid.get("status") == "True"
                else valid.get("reason"),
                "weight": spec.get("weight") or 1,
                "guarantee": dict(spec.get("guarantee") or {}),
                "deserved": dict(status.get("deserved") or {}),
                "allocated": dict(status.get("allocated") or {}),
                "capability": dict(spec.get("capability") or {}),
                "pending": status.get("pending") or 0,
                "inqueue": status.get("inqueue") or 0,
                "running": status.get("running") or 0,
            }
        )
        for child in sorted(children.get(name, ())):
            visit(child, depth + 1)

    visit(ROOT, 0)
    for name in sorted(set(by_name) - seen):  # unreachable: shown at the top level
        visit(name, 1)
    return {"queues": rows}


def render(data: Mapping[str, Any]) -> str:
    headers = (
        "QUEUE",
        "STATE",
        "VALID",
        "WEIGHT",
        "GUARANTEE",
        "DESERVED",
        "ALLOCATED",
        "CAPABILITY",
        "PENDING",
        "INQUEUE",
        "RUNNING",
    )
    rows = []
    for q in data["queues"]:
        valid = "-" if q["valid"] is None else ("True" if q["valid"] else f"False({q['reason']})")
        rows.append(
            [
                "  " * q["depth"] + q["name"],
                q["state"],
                valid,
                q["weight"],
                common.compact(q["guarantee"]),
                common.compact(q["deserved"]),
                common.compact(q["allocated"]),
                common.compact(q["capability"]),
                q["pending"],
                q["inqueue"],
                q["running"],
            ]
        )
    return common.table(headers, rows)
