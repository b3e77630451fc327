"""The pure scheduling core: snapshot in, decisions out. No kopf, no client, no I/O, no clock.

Public API: build a :class:`~operators.scheduler.snapshot.Snapshot`, call
:func:`~operators.scheduler.session.run_session`, carry out the returned decisions.
"""

# Load the engine with the package, so the first session does not pay for importing it.
from operators.scheduler import engine as _engine  # noqa: F401
from operators.scheduler.session import (
    ActionName,
    PoolStatus,
    QueueStatus,
    SessionConfig,
    SessionResult,
    run_session,
)

__all__ = [
    "ActionName",
    "PoolStatus",
    "QueueStatus",
    "SessionConfig",
    "SessionResult",
    "run_session",
]
