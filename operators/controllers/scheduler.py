"""The `scheduler` operator: `python -m operators scheduler [flags]`.

Flags override `SLUICE_*` environment variables, which override the defaults of
`operators.runtime.settings.SchedulerSettings`; docs/operations.md lists them all.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from operators.controllers.scheduler_loop import SchedulerOperator
from operators.runtime import kubeconfig, logs, signals
from operators.runtime.settings import SchedulerSettings
from operators.runtime.settings import parse_settings as parse

PROG = "python -m operators scheduler"
DESCRIPTION = "Sluice's embedded gang scheduler (binds pods with schedulerName sluice)."

log = logging.getLogger(__name__)


def parse_settings(argv: Sequence[str]) -> SchedulerSettings:
    return parse(SchedulerSettings, argv, PROG, DESCRIPTION)


async def main(argv: Sequence[str]) -> int:
    settings = parse_settings(argv)
    logs.configure(settings.log_format, settings.log_level)
    # A stop signal that arrives between two terms (below) must still end the loop.
    stopped = asyncio.Event()
    unsubscribe = signals.on_stop_signal(stopped.set)
    try:
        while True:
            operator = SchedulerOperator(settings)
            code = await operator.run()
            if not operator.lost_lease or stopped.is_set():
                return code
            # Losing the lease ends this scheduler's term, not the process: under `all` the
            # other operators share it, and a busy machine can delay one renewal past the
            # deadline. A fresh scheduler (new cache, nothing assumed, nothing in flight)
            # campaigns again, as a restarted process would.
            log.warning("campaigning for the lease again with a fresh cache")
    except (kubeconfig.ConfigError, OSError) as err:
        log.error("cannot start: %s", err)
        return 2
    finally:
        unsubscribe()
