"""Admission's reclaimable room, indexed once per holdings version, is bit for bit the figure of
the plain loop over every group and task that it replaced (which cost O(all tasks) per
Pending group: quadratic on a full cluster). Groups are asked in turn over one state, so groups
that share the figure computed for a look-alike (same pool, queue, priority, may preempt; holding
nothing) are checked against the loop too: leaving any of those out of the key fails here."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from numpy.typing import NDArray

from operators.scheduler import run_session
from operators.scheduler.engine import PLUGIN_ORDER
from operators.scheduler.framework import Extensions
from operators.scheduler.plugins.quota import Quota
from operators.scheduler.session import SessionConfig
from operators.scheduler.snapshot import Snapshot
from operators.scheduler.state import GroupInfo, SessionState

from .drawn import drawn_snapshot
from .simulate import advance
from .test_properties import PROFILE


def plain_loop(quota: Quota, g: GroupInfo) -> NDArray[np.float64]:
    """The reclaimable room as first written: every task of every group (room other queues
    hold above their share is no credit, see Quota._reclaimable)."""
    state = quota.state
    total = state.space.zeros()
    for other in state.groups:
        if other is g:
            continue
        lower = other.queue == g.queue and other.priority < g.priority and g.can_preempt
        for t in other.tasks:
            if t.held and (
                lower or (state.is_borrowed(t) and state.nodes.node_pool[t.node] == g.pool)
            ):
                total += t.req
    return total


def session_quota(snap: Snapshot) -> Quota:
    state = SessionState(snap, SessionConfig())
    ext = Extensions()
    quota = None
    for name, register in PLUGIN_ORDER:
        plugin = register(state, ext)
        if name == "quota":
            quota = plugin
    assert isinstance(quota, Quota)
    return quota


@PROFILE
@given(st.data())
def test_indexed_reclaimable_room_equals_the_plain_loop(data: st.DataObject) -> None:
    snap, second = drawn_snapshot(data)
    snap = replace(snap, groups=(*snap.groups, *second[0]), tasks=(*snap.tasks, *second[1]))
    # Some groups running (some borrowed elsewhere), some still pending.
    for step in range(data.draw(st.integers(0, 2))):
        snap = advance(snap, run_session(snap), now=30.0 * (step + 1))
    quota = session_quota(snap)
    for g in quota.state.groups:
        assert np.array_equal(quota._reclaimable(g), plain_loop(quota, g)), g.uid


def plain_rows(state: SessionState) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
    """The held-task index as first written: a tuple per held task, in group then task order
    (group index, queue, tenant priority, job priority, pool it borrows or -1), and its row."""
    rows: list[tuple[int, int, int, int, int]] = []
    reqs: list[NDArray[np.float64]] = []
    for other in state.groups:
        for t in other.tasks:
            if t.held:
                pool = int(state.nodes.node_pool[t.node]) if state.is_borrowed(t) else -1
                rows.append((other.index, other.queue, *other.priority, pool))
                reqs.append(t.req)
    cols = np.asarray(rows, dtype=np.int64).reshape(-1, 5).T
    return cols, np.vstack(reqs) if reqs else np.zeros((0, state.space.size))


@PROFILE
@given(st.data())
def test_held_index_built_by_columns_has_the_plain_rows(data: st.DataObject) -> None:
    snap, second = drawn_snapshot(data)
    snap = replace(snap, groups=(*snap.groups, *second[0]), tasks=(*snap.tasks, *second[1]))
    for step in range(data.draw(st.integers(0, 2))):
        snap = advance(snap, run_session(snap), now=30.0 * (step + 1))
    quota = session_quota(snap)
    held = quota._held_index()
    cols, req = plain_rows(quota.state)
    built = (held.group, held.queue, held.tenant, held.job, held.borrowed_pool)
    for name, mine, plain in zip(
        ("group", "queue", "tenant", "job", "pool"), built, cols, strict=True
    ):
        assert np.array_equal(mine, plain), name
    assert req.dtype == held.req.dtype
    assert np.array_equal(req, held.req)
