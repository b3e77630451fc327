"""Consolidation: running jobs move so that a gang that fits in total finds a placement."""

from __future__ import annotations

import dataclasses

from hypothesis import given
from hypothesis import strategies as st

from operators.scheduler import SessionConfig, run_session
from operators.scheduler.decisions import EvictReason, ReasonCode
from operators.scheduler.session import DEFAULT_ACTIONS, ActionName
from operators.scheduler.snapshot import (
    GPU,
    GPU_MILLI_PER_CARD,
    GroupPhase,
    LabelSelector,
    PodGroup,
    Pool,
    Snapshot,
    Task,
)

from .builders import binds, elastic, evictions, group, node, nominations, tasks
from .simulate import advance, assert_gangs_all_or_nothing, assert_no_node_overcommitted
from .test_properties import PROFILE

WITHOUT = SessionConfig(actions=tuple(a for a in DEFAULT_ACTIONS if a != ActionName.CONSOLIDATE))


def _split() -> Snapshot:
    """Two 8-GPU nodes, each half taken by a 4-GPU job: 8 GPUs free, but no node has 8."""
    groups = [
        group("a", phase=GroupPhase.RUNNING, created=1.0),
        group("b", phase=GroupPhase.RUNNING, created=2.0),
        group("big", created=3.0),
    ]
    return Snapshot(
        now=1000.0,
        nodes=(node("n0", cpu=32, gpus=8), node("n1", cpu=32, gpus=8)),
        groups=tuple(groups),
        tasks=(
            *tasks("a", 1, gpus=4, on=["n0"], gpu_ids=(0, 1, 2, 3)),
            *tasks("b", 1, gpus=4, on=["n1"], gpu_ids=(4, 5, 6, 7)),
            *tasks("big", 1, gpus=8),
        ),
    )


def _replace_group(snap: Snapshot, uid: str, **changes: object) -> Snapshot:
    groups = tuple(
        dataclasses.replace(g, **changes) if g.uid == uid else g  # type: ignore[arg-type]
        for g in snap.groups
    )
    return dataclasses.replace(snap, groups=groups)


def test_one_job_moves_and_both_run_after_it() -> None:
    snap = _split()
    assert not binds(run_session(snap, WITHOUT))
    assert not evictions(run_session(snap, WITHOUT))
    result = run_session(snap)
    [moved] = evictions(result)
    assert moved.reason is EvictReason.CONSOLIDATED
    assert moved.preemptor == "big"
    [nominated] = nominations(result)
    assert nominated.group == "big"
    assert result.explanations["big"].code is ReasonCode.CONSOLIDATING
    # The moved job is placed again and the gang binds where it was nominated.
    snap = advance(snap, result, 1001.0)
    after = run_session(snap)
    placed = {b.group: b.node for b in binds(after)}
    assert placed == {"big": nominated.node, moved.group: ({"n0", "n1"} - {nominated.node}).pop()}
    assert not evictions(after)


def test_nothing_moves_when_the_gang_does_not_fit_in_total() -> None:
    snap = _split()
    snap = dataclasses.replace(
        snap,
        tasks=tuple(
            dataclasses.replace(t, requests={"cpu": 1000, GPU: 9}) if t.group == "big" else t
            for t in snap.tasks
        ),
    )
    assert not evictions(run_session(snap))


def test_protected_recent_or_higher_priority_jobs_stay() -> None:
    for uid, change in (
        ("a", {"preemptible": False, "max_unavailable": 0}),  # preemptible: false
        ("a", {"max_unavailable": 0}),  # a disruption budget allowing nothing
        ("a", {"consolidated_at": 900.0}),  # moved 100 s ago, window 600 s
        ("a", {"priority": 10}),  # outranks the gang
        ("a", {"movable": False}),  # an implicit one-pod group
        ("a", {"preemption_grace": 30.0}),  # needs time to checkpoint
    ):
        snap = _replace_group(_split(), uid, **change)
        moved = {e.group for e in evictions(run_session(snap))}
        assert moved == {"b"}, (change, moved)
        both = _replace_group(snap, "b", **change)
        assert not evictions(run_session(both)), change
    # Past the window it may move again.
    again = _replace_group(_split(), "a", consolidated_at=300.0)
    again = _replace_group(again, "b", consolidated_at=300.0)
    assert evictions(run_session(again))


def test_off_per_pool() -> None:
    snap = dataclasses.replace(
        _split(), pools=(Pool("default", LabelSelector(), disable_consolidation=True),)
    )
    assert not evictions(run_session(snap))


def test_moves_the_fewest_gpus() -> None:
    """n0 holds one 2-GPU job, n1 two 3-GPU jobs (2 GPUs free on n1, 6 on n0): a 6-GPU gang fits
    once the 2-GPU job moves to n1; moving n1's jobs would move 6 GPUs."""
    groups = [
        group("small", phase=GroupPhase.RUNNING, created=1.0),
        group("m1", phase=GroupPhase.RUNNING, created=1.0),
        group("m2", phase=GroupPhase.RUNNING, created=1.0),
        group("big", created=3.0),
    ]
    snap = Snapshot(
        now=0.0,
        nodes=(node("n0", cpu=32, gpus=8), node("n1", cpu=32, gpus=8)),
        groups=tuple(groups),
        tasks=(
            *tasks("small", 1, gpus=2, on=["n0"], gpu_ids=(0, 1)),
            *tasks("m1", 1, gpus=3, on=["n1"], gpu_ids=(0, 1, 2)),
            *tasks("m2", 1, gpus=3, on=["n1"], gpu_ids=(3, 4, 5)),
            *tasks("big", 1, gpus=7),
        ),
    )
    # 7 GPUs: n0 has 6 free, n1 has 2 free; total 8 >= 7.
    result = run_session(snap)
    assert [e.group for e in evictions(result)] == ["small"]
    assert {n.node for n in nominations(result)} == {"n0"}


def test_no_plan_when_the_moved_job_cannot_be_placed_again() -> None:
    """Both jobs are 4-GPU gangs of two 2-GPU pods each pinned by CPU so that nothing fits
    elsewhere: moving either would lose it, so nothing moves (and preempt has no lower-priority
    victims either)."""
    snap = _split()
    tight = tuple(
        dataclasses.replace(t, requests={"cpu": 20000, GPU: 4}) if t.group in ("a", "b") else t
        for t in snap.tasks
    )
    snap = dataclasses.replace(snap, tasks=tight)
    assert not evictions(run_session(snap))


def test_no_moved_job_is_planned_onto_the_gangs_nominated_node() -> None:
    """Shrunk from the property below (an exploring run lost a job). n0 runs m1 (2 GPUs) and
    m2 (3 GPUs), n1 a fixed 5-GPU job: 3 + 3 GPUs free, the 6-GPU gang fits in total only.
    Moving m1 and m2 opens n0 for the gang, 2 GPUs left over there. The plan used to place m1
    again on that leftover and m2 on n1; but n0 is nominated for the gang, and the next
    sessions hold it whole for the gang until it binds, so m1 went to n1 instead and m2 (3
    GPUs) had nowhere to go: lost, and still lost once the gang bound. The movers' 5 GPUs do
    not fit off the gang's node, so nothing may move."""
    snap = Snapshot(
        now=1000.0,
        nodes=(node("n0", cpu=32, gpus=8), node("n1", cpu=32, gpus=8)),
        groups=(
            group("m1", phase=GroupPhase.RUNNING, created=1.0),
            group("m2", phase=GroupPhase.RUNNING, created=2.0),
            _fixed("f", created=0.0),
            group("big", created=3.0),
        ),
        tasks=(
            *tasks("m1", 1, gpus=2, on=["n0"], gpu_ids=(0, 1)),
            *tasks("m2", 1, gpus=3, on=["n0"], gpu_ids=(2, 3, 4)),
            *tasks("f", 1, gpus=5, on=["n1"], gpu_ids=(0, 1, 2, 3, 4)),
            *tasks("big", 1, gpus=6),
        ),
    )
    assert not evictions(run_session(snap))


def _fixed(uid: str, created: float) -> PodGroup:
    """A running job that may not move (``preemptible: false``)."""
    return group(
        uid, phase=GroupPhase.RUNNING, created=created, preemptible=False, max_unavailable=0
    )


def test_a_mover_with_no_room_elsewhere_is_left_out() -> None:
    """n0's 1-GPU job x is the cheapest move, but its 28 CPUs fit on no other node, so a plan
    through n0 cannot hold; n1's 2-GPU job y can go to n2. With one node searched per gang
    the search must not spend it on n0 (before the mover filter it did, and nothing moved)."""
    snap = Snapshot(
        now=0.0,
        nodes=tuple(node(f"n{i}", cpu=32, gpus=4) for i in range(3)),
        groups=(
            group("x", phase=GroupPhase.RUNNING, created=1.0),
            _fixed("p", created=1.0),
            group("y", phase=GroupPhase.RUNNING, created=2.0),
            _fixed("q", created=2.0),
            _fixed("r", created=2.0),
            group("big", created=3.0),
        ),
        tasks=(
            *tasks("x", 1, cpu=28, gpus=1, on=["n0"], gpu_ids=(0,)),
            *tasks("p", 1, cpu=1, gpus=2, on=["n0"], gpu_ids=(1, 2)),
            *tasks("y", 1, cpu=1, gpus=2, on=["n1"], gpu_ids=(0, 1)),
            *tasks("q", 1, cpu=4, gpus=1, on=["n1"], gpu_ids=(2,)),
            *tasks("r", 1, cpu=20, gpus=2, on=["n2"], gpu_ids=(0, 1)),
            *tasks("big", 1, cpu=20, gpus=2),
        ),
    )
    config = SessionConfig(max_consolidation_nodes=1)
    result = run_session(snap, config)
    assert [e.group for e in evictions(result)] == ["y"]
    assert {n.node for n in nominations(result)} == {"n1"}
    after = run_session(advance(snap, result, 1.0), config)
    assert {b.group: b.node for b in binds(after)} == {"big": "n1", "y": "n2"}


def test_a_later_plan_keeps_room_for_jobs_moved_by_an_earlier_one() -> None:
    """Three 4-GPU nodes, 2 GPUs idle on each (a on n0, b on n1, a fixed job on n2); gangs g1
    and g2 of 4 GPUs. g1's plan moves a (to n1 or n2). g2's plan could move b to n2, but then
    a and b both need the last 2 idle GPUs: one would be lost. So g2 waits (before, both
    plans were taken, each checked without the other's moved job)."""
    snap = Snapshot(
        now=0.0,
        nodes=tuple(node(f"n{i}", cpu=32, gpus=4) for i in range(3)),
        groups=(
            group("a", phase=GroupPhase.RUNNING, created=1.0),
            group("b", phase=GroupPhase.RUNNING, created=1.0),
            _fixed("f", created=1.0),
            group("g1", created=3.0),
            group("g2", created=4.0),
        ),
        tasks=(
            *tasks("a", 1, gpus=2, on=["n0"], gpu_ids=(0, 1)),
            *tasks("b", 1, gpus=2, on=["n1"], gpu_ids=(0, 1)),
            *tasks("f", 1, gpus=2, on=["n2"], gpu_ids=(0, 1)),
            *tasks("g1", 1, gpus=4),
            *tasks("g2", 1, gpus=4),
        ),
    )
    result = run_session(snap)
    [moved] = evictions(result)
    assert moved.group == "a"
    assert {n.group for n in nominations(result)} == {"g1"}
    assert "(2 GPU(s))" in result.explanations["g1"].message


def _shared(uid: str, milli: int, on: str, card: int, cpu: int = 1) -> list[Task]:
    return tasks(uid, 1, cpu=cpu, gpu_milli=milli, on=[on], gpu_ids=(card,))


def _cards(
    running: list[tuple[str, list[Task]]], fixed: set[str], pending: list[Task], **node_gpus: int
) -> Snapshot:
    """Nodes ``name=cards`` (8 CPUs each), running one-pod jobs (``fixed`` ones may not move)
    and one pending group ``w``."""
    groups = [
        _fixed(uid, created=float(i))
        if uid in fixed
        else group(uid, phase=GroupPhase.RUNNING, created=float(i))
        for i, (uid, _) in enumerate(running)
    ]
    return Snapshot(
        now=0.0,
        nodes=tuple(node(name, cpu=8, gpus=gpus) for name, gpus in node_gpus.items()),
        groups=(*groups, group("w", created=100.0)),
        tasks=(*(t for _, ts in running for t in ts), *pending),
    )


def _moves_then_places(snap: Snapshot) -> tuple[set[str], str]:
    """Who moves for ``w`` and where it is nominated; then every moved job is placed again."""
    result = run_session(snap)
    moved = {e.group for e in evictions(result)}
    [nominated] = {n.node for n in nominations(result)}
    again = run_session(advance(snap, result, 1.0))
    assert moved | {"w"} <= {b.group for b in binds(again)}
    return moved, nominated


def test_preempt_after_consolidation_leaves_the_moved_jobs_room() -> None:
    """n0 runs a (1 GPU, 16 CPUs), n1 runs x (2 GPUs, priority 0). Consolidation moves a so
    that big (4 GPUs) gets n0, a planned into n1's 2 idle GPUs. Then preempt, in the same
    session, made room for p2 (3 GPUs, 20 CPUs) by evicting x and nominating p2 to n1: that
    left a 1 GPU and 12 CPUs, and a was lost. Preempt may not take a moved job's room; p2
    waits (and asks again next cycle, once a runs on n1)."""
    snap = Snapshot(
        now=0.0,
        nodes=(node("n0", cpu=32, gpus=4), node("n1", cpu=32, gpus=4)),
        groups=(
            group("a", phase=GroupPhase.RUNNING, created=1.0, priority=1),
            group("x", phase=GroupPhase.RUNNING, created=2.0, priority=0),
            group("big", created=3.0, priority=1),
            group("p2", created=4.0, priority=1),
        ),
        tasks=(
            *tasks("a", 1, cpu=16, gpus=1, on=["n0"], gpu_ids=(0,)),
            *tasks("x", 1, cpu=1, gpus=2, on=["n1"], gpu_ids=(0, 1)),
            *tasks("big", 1, cpu=1, gpus=4),
            *tasks("p2", 1, cpu=20, gpus=3),
        ),
    )
    result = run_session(snap)
    assert {(e.group, e.reason) for e in evictions(result)} == {("a", EvictReason.CONSOLIDATED)}
    assert {(n.group, n.node) for n in nominations(result)} == {("big", "n0")}
    assert "planned for jobs moved by consolidation" in result.explanations["p2"].message
    after = run_session(advance(snap, result, 1.0), SessionConfig(actions=(ActionName.ALLOCATE,)))
    assert {b.group: b.node for b in binds(after)} == {"a": "n1", "big": "n0"}


def test_preempt_does_not_nominate_a_gang_into_room_planned_for_moved_jobs() -> None:
    """Shrunk by the every-action property (exploring run, 5,000 examples). p0 (6 GPUs) gets
    n1 by moving r0 (half a card, 30 CPUs) and r2 (1 GPU, 8 CPUs) to n0, which has 3 cards
    and 61 CPUs idle. Preempt then found that p2 (0.9 of a card, 40 CPUs) fits on n0 with no
    victim at all - in the room planned for r0 - and nominated it there: r0 was lost. Now p2
    waits."""
    running = GroupPhase.RUNNING
    snap = Snapshot(
        now=0.0,
        nodes=(node("n0", cpu=64, gpus=8), node("n1", cpu=64, gpus=8)),
        groups=(
            group("r0", phase=running, created=0.0),
            group("r1", min_member=2, phase=running, created=1.0),
            group("r2", phase=running, created=2.0),
            group("r4", phase=running, created=4.0),
            group("r7", phase=running, created=7.0),
            group("p0", created=100.0, priority=1),
            group("p1", created=101.0, priority=1),
            group("p2", created=102.0, priority=1),
        ),
        tasks=(
            *tasks("r0", 1, cpu=30, gpu_milli=500, on=["n1"], gpu_ids=(0,)),
            *tasks("r1", 1, cpu=1, gpus=1, on=["n0"], gpu_ids=(0,)),
            *tasks("r1", 1, cpu=1, gpus=1, on=["n0"], gpu_ids=(1,), start=1),
            *tasks("r2", 1, cpu=8, gpus=1, on=["n1"], gpu_ids=(1,)),
            *tasks("r4", 1, cpu=1, gpus=3, on=["n0"], gpu_ids=(2, 3, 4)),
            *tasks("r7", 1, cpu=1, gpus=1, on=["n1"], gpu_ids=(2,)),
            *tasks("p0", 1, cpu=1, gpus=6),
            *tasks("p1", 1, cpu=1, gpu_milli=600),
            *tasks("p2", 1, cpu=40, gpu_milli=900),
        ),
    )
    result = run_session(snap)
    assert {e.group for e in evictions(result)} == {"r0", "r2"}
    assert {(n.group, n.node) for n in nominations(result)} == {("p0", "n1")}
    after = run_session(advance(snap, result, 1.0), SessionConfig(actions=(ActionName.ALLOCATE,)))
    assert {b.group: b.node for b in binds(after)} == {"p0": "n1", "r0": "n0", "r2": "n0"}


def test_growth_after_consolidation_leaves_the_moved_jobs_room() -> None:
    """The same room, wanted by backfill: elastic ``e`` (one 2-GPU replica running on n1, one
    more wanted) grew into n1's 2 idle GPUs in the session that planned ``a`` there, and ``a``
    was lost. Growth waits for a later cycle instead."""
    snap = Snapshot(
        now=0.0,
        nodes=(node("n0", cpu=32, gpus=4), node("n1", cpu=32, gpus=4)),
        groups=(
            group("a", phase=GroupPhase.RUNNING, created=1.0, priority=1),
            elastic("e", 1, 2, created=2.0, max_unavailable=0),
            group("big", created=3.0, priority=1),
        ),
        tasks=(
            *tasks("a", 1, cpu=16, gpus=1, on=["n0"], gpu_ids=(0,)),
            *tasks("e", 1, cpu=1, gpus=2, role="w", on=["n1"], gpu_ids=(0, 1)),
            *tasks("e", 1, cpu=1, gpus=2, role="w", start=1),
            *tasks("big", 1, cpu=1, gpus=4),
        ),
    )
    result = run_session(snap)
    assert [e.group for e in evictions(result)] == ["a"]
    assert not binds(result)
    after = run_session(advance(snap, result, 1.0), SessionConfig(actions=(ActionName.ALLOCATE,)))
    assert {b.group: b.node for b in binds(after)} == {"a": "n1", "big": "n0"}


def test_a_share_counts_as_its_fraction_of_a_card() -> None:
    """n0: x holds card 0, s half of card 1; n1 has a whole free card but no CPU left for w.
    Either move opens a card for w (1 card) and both have room on n1: moving s relocates half
    a GPU, x a whole one (before, a share counted as a whole card: x moved, first on the tie)."""
    snap = _cards(
        [
            ("x", tasks("x", 1, gpus=1, on=["n0"], gpu_ids=(0,))),
            ("s", _shared("s", 500, "n0", 1)),
            ("hog", _shared("hog", 500, "n1", 1, cpu=7)),
        ],
        {"hog"},
        tasks("w", 1, cpu=4, gpus=1),
        n0=2,
        n1=2,
    )
    assert _moves_then_places(snap) == ({"s"}, "n0")


def test_room_for_a_share_is_judged_per_card() -> None:
    """w asks 600 milli of one card. n0 has 300 free on card 0 (a 200, e 500) and 400 on card 1
    (b 600): 700 in total, 600 on no card. Moving e opens 800 on card 0 and e fits n1's free
    half card; moving a opens only 500 (before, summed room made any single move look
    enough: a, first on the tie, moved, w still did not fit, and nothing moved)."""
    snap = _cards(
        [
            ("a", _shared("a", 200, "n0", 0)),
            ("e", _shared("e", 500, "n0", 0)),
            ("b", _shared("b", 600, "n0", 1)),
            ("f", _shared("f", 500, "n1", 0)),
        ],
        {"f"},
        tasks("w", 1, gpu_milli=600),
        n0=2,
        n1=1,
    )
    assert _moves_then_places(snap) == ({"e"}, "n0")


def test_shares_are_gathered_to_free_whole_cards() -> None:
    """w asks 2 whole cards. On n0, x holds card 0, s1 half of card 1, s2 and s3 0.3 each of
    card 2, card 3 is not movable; n1 has one whole free card (w needs two) and two partly
    free cards. Clearing cards 1 and 2 moves 1.1 GPUs of shares; cards 0 and 1 would move
    1.5 (before, x and s1 moved: shares counted as whole cards)."""
    snap = _cards(
        [
            ("x", tasks("x", 1, gpus=1, on=["n0"], gpu_ids=(0,))),
            ("s1", _shared("s1", 500, "n0", 1)),
            ("s2", _shared("s2", 300, "n0", 2)),
            ("s3", _shared("s3", 300, "n0", 2)),
            ("fixed", tasks("fixed", 1, gpus=1, on=["n0"], gpu_ids=(3,))),
            ("h1", _shared("h1", 500, "n1", 1)),
            ("h2", _shared("h2", 400, "n1", 2)),
            ("h3", tasks("h3", 1, gpus=1, on=["n1"], gpu_ids=(3,))),
        ],
        {"fixed", "h1", "h2", "h3"},
        tasks("w", 1, gpus=2),
        n0=4,
        n1=4,
    )
    assert _moves_then_places(snap) == ({"s1", "s2", "s3"}, "n0")


@st.composite
def fragmented(draw: st.DrawFn) -> Snapshot:
    """A few 8-GPU nodes with running jobs of 1-4 GPUs (1-2 pods) or a share of one card, and
    pending gangs of whole cards or one share (some with more CPU than is left on a node)."""
    count = draw(st.integers(2, 5))
    nodes = tuple(node(f"n{i}", cpu=64, gpus=8) for i in range(count))
    free = {n.name: [GPU_MILLI_PER_CARD] * 8 for n in nodes}  # milli free per card
    cpus = {n.name: 64 for n in nodes}
    groups: list[PodGroup] = []
    all_tasks: list[Task] = []
    for j in range(draw(st.integers(1, 10))):
        share = draw(st.sampled_from([0, 0, 300, 500, 700]))
        pods = 1 if share else draw(st.integers(1, 2))
        gpus = 0 if share else draw(st.integers(1, 4))
        cpu = draw(st.sampled_from([1, 8, 30]))
        where = [draw(st.sampled_from([n.name for n in nodes])) for _ in range(pods)]
        picks: list[tuple[int, ...]] = []
        for w in where:
            cards = free[w]
            if share:
                fits = [c for c, f in enumerate(cards) if f >= share]
                ids = tuple(fits[:1]) if fits else ()
            else:
                ids = tuple([c for c, f in enumerate(cards) if f == GPU_MILLI_PER_CARD][:gpus])
            if len(ids) < max(gpus, 1 if share else 0) or cpus[w] < cpu:
                break
            for c in ids:
                cards[c] -= share or GPU_MILLI_PER_CARD
            cpus[w] -= cpu
            picks.append(ids)
        if len(picks) < pods:
            continue  # (room taken by a job's first pod stays taken: that is fine here)
        uid = f"r{j}"
        for k, (w, ids) in enumerate(zip(where, picks, strict=True)):
            all_tasks.extend(
                tasks(uid, 1, cpu=cpu, gpus=gpus, gpu_milli=share, on=[w], gpu_ids=ids, start=k)
            )
        groups.append(
            group(
                uid,
                min_member=pods,
                phase=GroupPhase.RUNNING,
                created=float(j),
                priority=draw(st.integers(0, 1)),
                max_unavailable=draw(st.sampled_from([None, None, 0])),
            )
        )
    for j in range(draw(st.integers(1, 3))):
        share = draw(st.sampled_from([0, 0, 600, 900]))
        pods = 1 if share else draw(st.integers(1, 2))
        uid = f"p{j}"
        gpus = 0 if share else draw(st.integers(1, 8))
        cpu = draw(st.sampled_from([1, 1, 20, 40]))  # some fit only where a job is preempted
        all_tasks.extend(tasks(uid, pods, cpu=cpu, gpus=gpus, gpu_milli=share))
        groups.append(group(uid, min_member=pods, created=100.0 + j, priority=1))
    return Snapshot(now=0.0, nodes=nodes, groups=tuple(groups), tasks=tuple(all_tasks))


@PROFILE
@given(fragmented())
def test_consolidation_never_loses_a_job(snap: Snapshot) -> None:
    """Every job consolidation moves is placed again in the next session (or nothing moved),
    and no node is overcommitted on the way."""
    _never_loses_a_job(snap, SessionConfig(actions=(ActionName.ALLOCATE, ActionName.CONSOLIDATE)))


@PROFILE
@given(fragmented())
def test_consolidation_never_loses_a_job_with_every_action(snap: Snapshot) -> None:
    """The same with the default action list: preempt and reclaim run after consolidate in the
    same session, and must not give the room a moved job was planned into to someone else."""
    _never_loses_a_job(snap, SessionConfig())


def _never_loses_a_job(snap: Snapshot, config: SessionConfig) -> None:
    result = run_session(snap, config)
    assert_no_node_overcommitted(snap, result)
    assert_gangs_all_or_nothing(snap, result)
    moved = {e.group for e in evictions(result) if e.reason is EvictReason.CONSOLIDATED}
    if not moved:
        return
    # The gangs the moves were for, and preempt's own nominations: a node nominated for
    # several gangs gives each only its own pods there
    # (test_a_node_held_for_two_gangs_gives_each_only_its_nominated_pods).
    nominated = {n.group for n in nominations(result)}
    assert {e.preemptor for e in evictions(result) if e.group in moved} <= nominated
    # The moved jobs come back first in line (allocate only, so no new move interferes). A
    # gang's nominated nodes are held whole for it until it binds, so no plan puts a moved
    # job there (test_no_moved_job_is_planned_onto_the_gangs_nominated_node).
    placed: set[str] = set()
    for now in (1.0, 2.0):
        after = advance(snap, result, now)
        result = run_session(after, SessionConfig(actions=(ActionName.ALLOCATE,)))
        assert_no_node_overcommitted(after, result)
        placed |= {b.group for b in binds(result)}
        snap = after
    assert nominated <= placed
    assert moved <= placed
