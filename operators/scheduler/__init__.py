"""The pure scheduling core: snapshot in, decisions out. No kopf, no client, no I/O, no clock.

Public API: build a :class:`~operators.scheduler.snapshot.Snapshot`, call
:func:`~operators.scheduler.session.run_session`, carry out the returned decisions
(docs/scheduler.md explains the semantics).

Where things are:

* ``snapshot.py`` (input), ``decisions.py`` (output), ``session.py`` (entry point, config,
  result), ``engine.py`` (open -> actions -> close);
* ``framework.py`` - extension points and their combination rules; ``context.py`` - what an
  action receives; ``statement.py`` - gang transactions; ``phases.py`` - the group phase table;
* ``state.py`` - the session's mutable view; ``nodes.py`` - per-node arrays; ``queues.py`` - the
  quota tree and water-filling; ``resources.py`` - resource vectors; ``placement.py`` and
  ``shapeviews.py`` - placing identical replicas, vectorised over nodes;
* ``actions/`` - enqueue, allocate, preempt, reclaim, backfill (+ shared ordering, eviction);
* ``plugins/`` - gang, pool, quota, priority, drf, predicates, binpack, topology.
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
