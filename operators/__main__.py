"""`python -m operators <name> [flags]`: run one Sluice operator, or `all` of them in one process.

The table below is the only place an operator is registered: add a row, pointing at an async
`main(argv) -> int` that parses its own flags with `parse_known_args` (under `all`, every operator
sees the same argv). Operators are imported lazily, so running one never imports the others.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import importlib
import logging
import sys
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, cast

Main = Callable[[Sequence[str]], Coroutine[Any, Any, int]]


@dataclasses.dataclass(frozen=True)
class OperatorEntry:
    name: str
    target: str  # "package.module:function", an async main(argv) -> exit code
    help: str

    def load(self) -> Main:
        module_name, _, func = self.target.partition(":")
        return cast(Main, getattr(importlib.import_module(module_name), func))


OPERATORS: dict[str, OperatorEntry] = {
    entry.name: entry
    for entry in (
        OperatorEntry(
            "scheduler",
            "operators.controllers.scheduler:main",
            "embedded gang scheduler: cache -> session -> bindings, evictions, PodGroup status",
        ),
        OperatorEntry(
            "pool",
            "operators.controllers.pool:main",
            "node membership label, Pool nodeCount/conditions, built-in default pool",
        ),
        OperatorEntry(
            "queue",
            "operators.controllers.queue:main",
            "queue tree validation, Open/Closing/Closed, built-in root and default queues",
        ),
        OperatorEntry(
            "podgroup",
            "operators.controllers.podgroup:main",
            "PodGroup Completed/Failed and succeeded/failed counts from the pods",
        ),
        OperatorEntry(
            "jobs",
            "operators.controllers.jobs:main",
            "HybridJob and VCJob -> one PodGroup + pods (job core, policies, plugins, presets)",
        ),
        OperatorEntry(
            "events",
            "operators.controllers.events:main",
            "job transitions -> CloudEvents 1.0 at admin-defined EventSinks (at least once)",
        ),
    )
}


async def run_all(argv: Sequence[str], names: Sequence[str] = tuple(OPERATORS)) -> int:
    """The named operators (all registered ones by default) in one event loop; the first to exit
    stops the rest."""
    tasks = [asyncio.create_task(OPERATORS[n].load()(argv), name=n) for n in names]
    done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    codes = []
    for task in done:
        error = task.exception()
        if error is not None:
            logging.getLogger("operators").error(
                "operator %s failed", task.get_name(), exc_info=error
            )
            codes.append(1)
        else:
            codes.append(task.result())
    return max(codes, default=0)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(
        prog="python -m operators",
        description="Run a Sluice operator. Flags after the name go to that operator "
        "(`python -m operators scheduler --help`).",
    )
    parser.add_argument("name", choices=[*OPERATORS, "all"], help="operator to run")
    if not args or args[0] in ("-h", "--help"):
        parser.print_help()
        for entry in OPERATORS.values():
            print(f"  {entry.name:<10} {entry.help}")  # noqa: T201 - CLI help output
        return 0 if args else 2
    ns = parser.parse_args(args[:1])
    rest = args[1:]
    if ns.name == "all":
        return asyncio.run(run_all(rest))
    return asyncio.run(OPERATORS[ns.name].load()(rest))


if __name__ == "__main__":
    raise SystemExit(main())
