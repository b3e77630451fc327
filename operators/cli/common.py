"""What every `sluice` subcommand shares: kubectl-like connection flags, `-o`, tables, quantities."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from decimal import Decimal
from typing import Any

import aiohttp

from operators.api.quantity import InvalidQuantityError, format_quantity, parse_quantity
from operators.runtime import kubeconfig
from operators.runtime.client import ApiError, KubeClient

Run = Callable[[argparse.Namespace, KubeClient], Awaitable[int]]
LocalRun = Callable[[argparse.Namespace], int]
Arguments = Callable[[argparse.ArgumentParser], None]
GPU = "nvidia.com/gpu"
RESOURCE_ORDER = ("cpu", "memory", GPU, "ephemeral-storage", "pods")
SHORT_NAMES = {"memory": "mem", GPU: "gpu", "ephemeral-storage": "storage"}


def shared_flags() -> argparse.ArgumentParser:
    """Flags every subcommand accepts, after its name (like kubectl's)."""
    shared = argparse.ArgumentParser(add_help=False)
    shared.add_argument(
        "--kubeconfig",
        help="path of the kubeconfig file (default: $KUBECONFIG, then ~/.kube/config, "
        "then the in-cluster service account)",
    )
    shared.add_argument("--context", help="kubeconfig context to use (default: current)")
    shared.add_argument(
        "-o",
        "--output",
        choices=("table", "json"),
        default="table",
        help="output format (default: table)",
    )
    shared.add_argument(
        "--request-timeout", type=float, default=30.0, help="seconds per API request"
    )
    return shared


def _no_arguments(_: argparse.ArgumentParser) -> None:
    return None


@dataclasses.dataclass(frozen=True)
class Command:
    """One `sluice` subcommand. Exactly one of `run` (async, given an API client built from the
    shared connection flags) and `run_local` (needs no cluster, so takes none of those flags)."""

    name: str
    help: str
    description: str
    run: Run | None = None
    run_local: LocalRun | None = None
    arguments: Arguments = _no_arguments
    """Adds the subcommand's own arguments to its parser."""


def add_command(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
    shared: argparse.ArgumentParser,
    command: Command,
) -> argparse.ArgumentParser:
    """Add `command`'s parser, with the kubectl-like shared flags when it talks to a cluster."""
    if (command.run is None) == (command.run_local is None):
        raise ValueError(f"command {command.name!r}: give exactly one of run and run_local")
    parser = sub.add_parser(
        command.name,
        parents=[] if command.run is None else [shared],
        help=command.help,
        description=command.description,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    command.arguments(parser)
    if command.run is not None:
        parser.set_defaults(run=command.run)
    else:
        parser.set_defaults(run_local=command.run_local)
    return parser


async def with_client(args: argparse.Namespace) -> int:
    try:
        conn = kubeconfig.load(args.kubeconfig, args.context)
    except (kubeconfig.ConfigError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    run: Run = args.run
    try:
        async with KubeClient(conn, limit=8, request_timeout=args.request_timeout) as client:
            return await run(args, client)
    except ApiError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    except (aiohttp.ClientError, OSError, TimeoutError) as err:
        print(f"error: cannot reach the API server at {conn.server}: {err}", file=sys.stderr)
        return 1


def emit(args: argparse.Namespace, data: Any, text: str) -> int:
    if args.output == "json":
        print(json.dumps(data, indent=2, sort_keys=True))
    else:
        print(text, end="" if text.endswith("\n") else "\n")
    return 0


def table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """kubectl-style columns: left-aligned, separated by three spaces."""
    cells = [[str(h) for h in headers], *([str(c) for c in row] for row in rows)]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    return "".join(
        "   ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() + "\n"
        for r in cells
    )


def quantity(raw: object) -> Decimal:
    """A status quantity as a number; missing or unreadable counts as 0."""
    if raw is None or isinstance(raw, bool):
        return Decimal(0)
    try:
        return parse_quantity(str(raw))
    except (InvalidQuantityError, ArithmeticError, ValueError):
        return Decimal(0)


def show(value: Decimal) -> str:
    """Whole numbers as quantities (`256Gi`, `32`), fractions as decimals (`1.5` CPUs)."""
    if value == value.to_integral_value():
        return format_quantity(value)
    return format(value.normalize(), "f")


def ordered_resources(maps: Iterable[Mapping[str, object] | None]) -> list[str]:
    """Resource names present in any map: the well-known ones first, then the rest by name."""
    names = {str(k) for m in maps if isinstance(m, Mapping) for k in m if not k.endswith("-milli")}
    known = [r for r in RESOURCE_ORDER if r in names]
    return known + sorted(names - set(known))


def compact(resources: Mapping[str, object] | None) -> str:
    """`{"cpu": "4", "nvidia.com/gpu": "2"}` -> `cpu:4 gpu:2`; `-` when empty."""
    if not resources:
        return "-"
    return " ".join(
        f"{SHORT_NAMES.get(r, r)}:{show(quantity(resources[r]))}"
        for r in ordered_resources([resources])
    )


def condition(obj: Mapping[str, Any], type_: str) -> Mapping[str, Any] | None:
    for c in (obj.get("status") or {}).get("conditions") or ():
        if c.get("type") == type_:
            return dict(c)
    return None


def name_of(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")
