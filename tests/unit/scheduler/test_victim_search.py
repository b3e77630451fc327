"""The victim search reads no more than it needs (actions/eviction.py), deciding the same.

* A preemptor that finds no eligible victim is remembered by what the victim filters read of
  it; a look-alike preemptor asked while holdings stay as they are gets the same answer without
  asking the filters again. A preemptor named by a WillEvict mark is never answered from memory.
* The victims a search may use are handed out lazily, so the filters are asked only as far as
  the search reads; a failed search still counts every helpful victim in its message.

Decisions with and without these shortcuts are compared by the property test of
test_victim_order.py (``victim_order_cache`` off is the straightforward way).
"""

from __future__ import annotations

from dataclasses import replace

from operators.scheduler import SessionConfig
from operators.scheduler.actions.eviction import make_room
from operators.scheduler.context import Session
from operators.scheduler.engine import open_session
from operators.scheduler.framework import Purpose, VictimUnit
from operators.scheduler.snapshot import (
    GroupPhase,
    PreemptionMark,
    PreemptionRole,
    Snapshot,
)
from operators.scheduler.state import GroupInfo

from .builders import group, node, tasks


def _counted(ssn: Session) -> list[tuple[str, str]]:
    """Registers a victim filter with no opinion (asked first) that logs (preemptor, victim) per question."""
    asked: list[tuple[str, str]] = []

    def log(preemptor: GroupInfo, unit: VictimUnit, purpose: Purpose) -> bool | None:
        asked.append((preemptor.uid, unit.group.uid))
        return None

    ssn.ext.victim_filters.insert(0, log)  # first: the others may stop at a "no"
    return asked


def _full_queue(waiting: int, *, low_priority: int = 0) -> Snapshot:
    """Four nodes full of running one-pod groups and ``waiting`` look-alike pending ones."""
    nodes = tuple(node(f"n{i}", cpu=4) for i in range(4))
    running = [
        group(f"run{i}", phase=GroupPhase.RUNNING, priority=low_priority, created=float(i))
        for i in range(4)
    ]
    pending = [group(f"wait{i}", priority=0, created=10.0 + i) for i in range(waiting)]
    pods = [t for i in range(4) for t in tasks(f"run{i}", 1, cpu=4, on=[f"n{i}"])]
    pods += [t for i in range(waiting) for t in tasks(f"wait{i}", 1, cpu=4)]
    return Snapshot(now=0.0, nodes=nodes, groups=(*running, *pending), tasks=tuple(pods))


def test_a_look_alike_preemptor_is_answered_without_asking_the_filters_again() -> None:
    ssn = open_session(_full_queue(3), SessionConfig())
    asked = _counted(ssn)
    outcomes = [
        make_room(ssn, ssn.state.group_by_uid[f"wait{i}"], Purpose.PREEMPT) for i in range(3)
    ]
    assert [o.placed for o in outcomes] == [False] * 3
    assert {o.message for o in outcomes} == {"no job may be preempted for it"}
    # Only the first asked; the running jobs have the same priority, so none may go.
    assert {p for p, _ in asked} == {"wait0"}


def test_the_memory_ends_when_holdings_move() -> None:
    ssn = open_session(_full_queue(2), SessionConfig())
    asked = _counted(ssn)
    make_room(ssn, ssn.state.group_by_uid["wait0"], Purpose.PREEMPT)
    ssn.state.touched.append(0)  # what every change of holdings logs
    make_room(ssn, ssn.state.group_by_uid["wait1"], Purpose.PREEMPT)
    assert {p for p, _ in asked} == {"wait0", "wait1"}


def test_without_the_cache_every_preemptor_asks() -> None:
    ssn = open_session(_full_queue(2), SessionConfig(victim_order_cache=False))
    asked = _counted(ssn)
    for i in range(2):
        make_room(ssn, ssn.state.group_by_uid[f"wait{i}"], Purpose.PREEMPT)
    assert {p for p, _ in asked} == {"wait0", "wait1"}


def test_a_preemptor_named_by_a_will_evict_mark_is_not_answered_from_memory() -> None:
    """run0 (lower priority) is marked for wait1 only: wait0, a look-alike asked first, may
    take nothing, but wait1 still finds run0."""
    snap = _full_queue(2, low_priority=-1)
    mark = PreemptionMark(PreemptionRole.WILL_EVICT, ("wait1",), deadline=100.0)
    others = [
        g if g.uid.startswith("wait") else replace(g, priority=0)
        for g in snap.groups
        if g.uid != "run0"
    ]
    marked = replace(next(g for g in snap.groups if g.uid == "run0"), preemption=mark)
    ssn = open_session(replace(snap, groups=(marked, *others)), SessionConfig())
    first = make_room(ssn, ssn.state.group_by_uid["wait0"], Purpose.PREEMPT)
    assert not first.placed
    second = make_room(ssn, ssn.state.group_by_uid["wait1"], Purpose.PREEMPT)
    assert second.placed
    assert [u.group.uid for u in second.victims] == ["run0"]


def test_a_search_asks_the_filters_only_as_far_as_it_reads() -> None:
    """Any one of the four lower-priority jobs makes room: the first in victim order is taken
    and the others are never asked about."""
    ssn = open_session(_full_queue(1, low_priority=-1), SessionConfig())
    asked = _counted(ssn)
    outcome = make_room(ssn, ssn.state.group_by_uid["wait0"], Purpose.PREEMPT)
    assert outcome.placed
    assert [u.group.uid for u in outcome.victims] == ["run3"]  # newest first among equals
    assert asked == [("wait0", "run3")]


def test_a_failed_search_counts_every_helpful_victim() -> None:
    """A pending pod bigger than any node: all four lower-priority jobs are eligible and
    helpful, none makes it fit, and the message counts all four."""
    snap = _full_queue(0, low_priority=-1)
    big = group("big", created=20.0)
    snap = replace(snap, groups=(*snap.groups, big), tasks=(*snap.tasks, *tasks("big", 1, cpu=8)))
    ssn = open_session(snap, SessionConfig())
    outcome = make_room(ssn, ssn.state.group_by_uid["big"], Purpose.PREEMPT)
    assert not outcome.placed
    assert outcome.message == "even preempting all 4 eligible job(s) would not make it fit"
