"""round_robin (actions/ordering.py) yields groups in the order of the straightforward loop
that re-keys every queue after each group, also while the keys move between yields (callers
place groups as they go), and when it stops asking keys once a single queue is left."""

from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from operators.scheduler import SessionConfig, run_session
from operators.scheduler.actions.ordering import round_robin
from operators.scheduler.context import Session
from operators.scheduler.engine import open_session
from operators.scheduler.snapshot import Snapshot
from operators.scheduler.state import GroupInfo

from .drawn import drawn_snapshot
from .simulate import advance
from .test_properties import PROFILE


def plain_round_robin(ssn: Session, groups: list[GroupInfo]) -> Iterator[GroupInfo]:
    """The loop as first written: every queue with groups left is pushed back re-keyed."""
    ext = ssn.ext
    per_queue: dict[int, list[GroupInfo]] = defaultdict(list)
    for g in groups:
        per_queue[g.queue].append(g)
    for members in per_queue.values():
        members.sort(key=ext.job_key, reverse=True)
    heap = [(ext.queue_key(q), q) for q in per_queue]
    heapq.heapify(heap)
    while heap:
        _, q = heapq.heappop(heap)
        members = per_queue[q]
        yield members.pop()
        if members:
            heapq.heappush(heap, (ext.queue_key(q), q))


def _order(snap: Snapshot, plain: bool, charge: bool) -> list[str]:
    ssn = open_session(snap, SessionConfig())
    state = ssn.state
    groups = [g for g in state.groups if g.pending_tasks() or not g.tasks]
    out: list[str] = []
    for g in (plain_round_robin if plain else round_robin)(ssn, groups):
        out.append(g.uid)
        if charge and g.queue >= 0:  # as if placed: its queue's share and key move
            state.queues.add_usage(g.queue, state.min_resources(g), 1)
    return out


@PROFILE
@given(st.data())
def test_round_robin_is_the_plain_loop(data: st.DataObject) -> None:
    snap, second = drawn_snapshot(data)
    snap = replace(snap, groups=(*snap.groups, *second[0]), tasks=(*snap.tasks, *second[1]))
    if data.draw(st.booleans()):
        snap = advance(snap, run_session(snap), now=30.0)
    for charge in (False, True):
        assert _order(snap, plain=False, charge=charge) == _order(snap, plain=True, charge=charge)
