"""The `scheduler` operator: `python -m operators scheduler [flags]`.

Flags override `SLUICE_*` environment variables, which override the defaults of
`operators.runtime.settings.SchedulerSettings`; docs/operations.md lists them all.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from operators.controllers.scheduler_loop import SchedulerOperator
from operators.runtime import kubeconfig, logs
from operators.runtime.settings import SchedulerSettings
from operators.runtime.settings import parse_settings as parse

PROG = "python -m operators scheduler"
DESCRIPTION = "Sluice's embedded gang scheduler (binds pods with schedulerName sluice)."


def parse_settings(argv: Sequence[str]) -> SchedulerSettings:
    return parse(SchedulerSettings, argv, PROG, DESCRIPTION)


async def main(argv: Sequence[str]) -> int:
    settings = parse_settings(argv)
    logs.configure(settings.log_format, settings.log_level)
    try:
        return await SchedulerOperator(settings).run()
    except (kubeconfig.ConfigError, OSError) as err:
        logging.getLogger(__name__).error("cannot start: %s", err)
        return 2
