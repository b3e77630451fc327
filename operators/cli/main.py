"""Entry point of the `sluice` / `kubectl-sluice` command."""

from __future__ import annotations

import argparse
import sys

from operators import __version__


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sluice", description="Sluice command line")
    parser.add_argument("--version", action="version", version=f"sluice {__version__}")
    parser.parse_args(argv)
    parser.print_help(sys.stdout)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
