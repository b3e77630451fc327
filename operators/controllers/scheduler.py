"""The `scheduler` operator: `python -m operators scheduler [flags]`.

Flags override `SLUICE_*` environment variables, which override the defaults of
`operators.runtime.settings.SchedulerSettings`; docs/operations.md lists them all.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
from collections.abc import Sequence
from typing import Any

from operators.controllers.scheduler_loop import SchedulerOperator
from operators.runtime import kubeconfig, logs
from operators.runtime.settings import SchedulerSettings, env_name, settings_from


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m operators scheduler",
        description="Sluice's embedded gang scheduler (binds pods with schedulerName sluice).",
    )
    for field in dataclasses.fields(SchedulerSettings):
        kind = field.type if isinstance(field.type, str) else str(field.type)
        help_text = f"(env {env_name(field.name)})"
        if kind.startswith("bool"):
            parser.add_argument(
                _flag(field.name),
                dest=field.name,
                action=argparse.BooleanOptionalAction,
                default=None,
                help=help_text,
            )
        else:
            conv: Any = (
                int if kind.startswith("int") else float if kind.startswith("float") else str
            )
            parser.add_argument(
                _flag(field.name), dest=field.name, type=conv, default=None, help=help_text
            )
    return parser


def parse_settings(argv: Sequence[str]) -> SchedulerSettings:
    args, _unknown = build_parser().parse_known_args(list(argv))
    return settings_from(vars(args))


async def main(argv: Sequence[str]) -> int:
    settings = parse_settings(argv)
    logs.configure(settings.log_format, settings.log_level)
    try:
        return await SchedulerOperator(settings).run()
    except (kubeconfig.ConfigError, OSError) as err:
        logging.getLogger(__name__).error("cannot start: %s", err)
        return 2
