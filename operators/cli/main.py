"""Entry point of the `sluice` command, also installed as `kubectl-sluice` (`kubectl sluice ...`).

Each subcommand lives in its own module with a `COMMAND` (`common.Command`: name, help, its own
arguments, and either `run`, async, called with the parsed arguments and an API client built from
the kubectl-like shared flags, or `run_local`, needing no cluster); `common.add_command` builds
its parser. To add one, write the module and add a line to SUBCOMMANDS.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import sys
from collections.abc import Sequence

from operators import __version__
from operators.cli import common

SUBCOMMANDS: tuple[str, ...] = (
    "operators.cli.pools",
    "operators.cli.queues",
    "operators.cli.why",
    "operators.cli.top",
    "operators.cli.simulate",
)

DESCRIPTION = """\
Inspect Sluice's pools, queues and jobs (what `kubectl get` cannot show in one view).

examples:
  kubectl sluice pools                  resources per pool, with the cluster total
  kubectl sluice queues -o json         the quota tree, machine-readable
  kubectl sluice why job/train -n ml    why a job waits, and what would unblock it
  kubectl sluice top                    GPUs allocated per queue and per pool
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sluice",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"sluice {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    shared = common.shared_flags()
    for module in SUBCOMMANDS:
        common.add_command(sub, shared, importlib.import_module(module).COMMAND)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    if getattr(args, "run_local", None) is not None:
        code: int = args.run_local(args)
        return code
    if getattr(args, "run", None) is None:
        parser.print_help(sys.stdout)
        return 0
    return asyncio.run(common.with_client(args))


if __name__ == "__main__":
    raise SystemExit(main())
