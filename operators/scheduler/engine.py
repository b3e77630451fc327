"""Session engine (work in progress: the interface is committed first)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from operators.scheduler.session import SessionConfig, SessionResult

if TYPE_CHECKING:
    from operators.scheduler.snapshot import Snapshot


def execute(snapshot: Snapshot, config: SessionConfig) -> SessionResult:
    del snapshot, config
    return SessionResult(decisions=(), explanations={})
