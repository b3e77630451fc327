"""Entry point of the `sluice` / `kubectl-sluice` command."""

from __future__ import annotations

import argparse
import sys

from operators import __version__
from operators.cli import simulate


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sluice", description="Sluice command line")
    parser.add_argument("--version", action="version", version=f"sluice {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    simulate.register(commands)
    args = parser.parse_args(argv)
    if getattr(args, "run", None) is None:
        parser.print_help(sys.stdout)
        return 0
    return int(args.run(args))


if __name__ == "__main__":
    raise SystemExit(main())
