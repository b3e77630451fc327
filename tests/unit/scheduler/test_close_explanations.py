"""Session close gives every group that still waits a reason (engine._fill_explanations): the
same ones as the plain pass over every group that it replaced, which looked each group's
explanation up before anything else (the pass now skips groups with nothing waiting first)."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from operators.scheduler import SessionConfig, run_session
from operators.scheduler.context import Session
from operators.scheduler.decisions import ReasonCode
from operators.scheduler.engine import ACTIONS, _fill_explanations, open_session
from operators.scheduler.session import DEFAULT_ACTIONS
from operators.scheduler.snapshot import GroupPhase

from .builders import group
from .drawn import drawn_snapshot
from .simulate import advance
from .test_properties import PROFILE


def plain_reasons(ssn: Session) -> dict[str, tuple[ReasonCode, str]]:
    """What the pass as first written adds: (code, message) per group uid."""
    state = ssn.state
    out: dict[str, tuple[ReasonCode, str]] = {}
    for g in state.groups:
        if state.has_explanation(g.uid):
            continue
        if g.phase == GroupPhase.PENDING and not g.tasks:
            message = "waiting for admission (enqueue is not configured)"
        elif not g.pending_tasks():
            continue
        elif g.gang_satisfied():
            pending = len(g.pending_tasks())
            out[g.uid] = (
                ReasonCode.GROWING,
                f"gang minimum running; {pending} more pod(s) pending",
            )
            continue
        else:
            message = "not considered this session"
        out[g.uid] = (ReasonCode.UNSCHEDULABLE, message)
    return out


@PROFILE
@given(st.data())
def test_close_explains_the_groups_the_plain_pass_explains(data: st.DataObject) -> None:
    snap, second = drawn_snapshot(data)
    # Groups without pods yet too (a job's PodGroup comes before its pods), in either phase.
    empty = [
        group(f"empty-{phase}", phase=phase) for phase in (GroupPhase.PENDING, GroupPhase.INQUEUE)
    ]
    snap = replace(snap, groups=(*snap.groups, *second[0], *empty), tasks=(*snap.tasks, *second[1]))
    if data.draw(st.booleans()):
        snap = advance(snap, run_session(snap), now=30.0)
    actions = data.draw(st.sampled_from((DEFAULT_ACTIONS, DEFAULT_ACTIONS[1:], ())))
    ssn = open_session(snap, SessionConfig(actions=actions))
    for action in actions:
        ACTIONS[action](ssn)
    before = set(ssn.state.all_explanations())
    expected = plain_reasons(ssn)
    _fill_explanations(ssn)
    added = {
        uid: (e.code, e.message)
        for uid, e in ssn.state.all_explanations().items()
        if uid not in before
    }
    assert added == expected
