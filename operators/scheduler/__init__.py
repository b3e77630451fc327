"""The pure scheduling core: snapshot in, decisions out. No kopf, no client, no I/O, no clock.

Public API: build a :class:`~operators.scheduler.snapshot.Snapshot`, call
:func:`~operators.scheduler.engine.run_session`, carry out the returned decisions
(docs/scheduler.md explains the semantics).

Where things are:

* ``snapshot.py`` (input), ``decisions.py`` (output), ``session.py`` (config and result
  types), ``engine.py`` (``run_session``: open -> actions -> close), ``memo.py`` (what
  session open derives, kept across sessions);
* ``framework.py`` - extension points and their combination rules; ``context.py`` - what an
  action receives; ``statement.py`` - gang transactions; ``phases.py`` - the group phase table;
* ``state.py`` - the session's mutable view; ``nodes.py`` - per-node arrays; ``queues.py`` - the
  quota tree and water-filling; ``resources.py`` - resource vectors; ``placement.py`` and
  ``shapeviews.py`` - placing identical replicas, vectorised over nodes;
* ``actions/`` - enqueue, allocate, preempt, reclaim, backfill (+ shared ordering, eviction);
* ``plugins/`` - gang, pool, quota, priority, drf, predicates, binpack, topology.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from operators.scheduler.engine import run_session
    from operators.scheduler.memo import SessionMemo
    from operators.scheduler.session import (
        ActionName,
        PoolStatus,
        QueueStatus,
        SessionConfig,
        SessionResult,
    )

# Loaded on first use: the operators that only read the input types (`snapshot`) - pool, queue,
# podgroup, jobs - never import the engine and numpy with it (~14 MB of RSS each).
_LAZY = {
    "run_session": "operators.scheduler.engine",
    "SessionMemo": "operators.scheduler.memo",
    "ActionName": "operators.scheduler.session",
    "PoolStatus": "operators.scheduler.session",
    "QueueStatus": "operators.scheduler.session",
    "SessionConfig": "operators.scheduler.session",
    "SessionResult": "operators.scheduler.session",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


__all__ = [
    "ActionName",
    "PoolStatus",
    "QueueStatus",
    "SessionConfig",
    "SessionMemo",
    "SessionResult",
    "run_session",
]
