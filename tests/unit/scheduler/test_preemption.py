"""preempt action: priority, tenants, delayed preemption, never evicting in vain."""

from __future__ import annotations

import dataclasses

from operators.scheduler import SessionConfig, run_session
from operators.scheduler.decisions import (
    EvictReason,
    MarkPrivileged,
    MarkWillEvict,
    ReasonCode,
    RevertDelayedPreemption,
)
from operators.scheduler.session import ActionName
from operators.scheduler.snapshot import (
    GroupPhase,
    PodGroup,
    PreemptionMark,
    PreemptionRole,
    Queue,
    Snapshot,
    Tenant,
)

from .builders import binds, elastic, evictions, group, node, nominations, sessions, tasks


def _full_cluster(preemptor_priority: int = 100, **preemptor: object) -> Snapshot:
    return Snapshot(
        now=1000.0,
        nodes=(node("n0", cpu=8), node("n1", cpu=8)),
        groups=(
            group("low", min_member=2, phase=GroupPhase.RUNNING, **preemptor),  # type: ignore[arg-type]
            group("high", min_member=2, priority=preemptor_priority),
        ),
        tasks=(*tasks("low", 2, cpu=8, on=["n0", "n1"]), *tasks("high", 2, cpu=8)),
    )


def test_equal_priority_does_not_preempt() -> None:
    result = run_session(_full_cluster(preemptor_priority=0))
    assert not evictions(result)
    assert result.explanations["high"].code == ReasonCode.UNSCHEDULABLE
    # The control: the same cluster with a higher-priority preemptor does evict.
    assert evictions(run_session(_full_cluster(preemptor_priority=100)))


def test_never_evicts_for_a_job_that_still_would_not_fit() -> None:
    snap = Snapshot(
        now=0,
        nodes=(node("n0", cpu=8), node("n1", cpu=8)),
        groups=(
            group("low", phase=GroupPhase.RUNNING),
            group("big", min_member=3, priority=100),
        ),
        tasks=(*tasks("low", 1, cpu=8, on=["n0"]), *tasks("big", 3, cpu=8)),
    )
    result = run_session(snap)
    assert not evictions(result)
    assert "would not make it fit" in result.explanations["big"].message
    # The control: a gang that fits once `low` is gone does evict it.
    two = dataclasses.replace(
        snap,
        groups=(snap.groups[0], dataclasses.replace(snap.groups[1], min_member=2)),
        tasks=snap.tasks[:3],
    )
    assert [e.group for e in evictions(run_session(two))] == ["low"]


def test_only_the_needed_victims_go() -> None:
    snap = Snapshot(
        now=0,
        nodes=(node("n0", cpu=8), node("n1", cpu=8), node("n2", cpu=8)),
        groups=(
            group("v0", phase=GroupPhase.RUNNING),
            group("v1", phase=GroupPhase.RUNNING),
            group("v2", phase=GroupPhase.RUNNING),
            group("p", priority=100),
        ),
        tasks=(
            *tasks("v0", 1, cpu=8, on=["n0"]),
            *tasks("v1", 1, cpu=8, on=["n1"]),
            *tasks("v2", 1, cpu=8, on=["n2"]),
            *tasks("p", 1, cpu=8),
        ),
    )
    result = run_session(snap)
    assert len(evictions(result)) == 1
    assert len(nominations(result)) == 1


def test_victims_least_disruption_first() -> None:
    snap = Snapshot(
        now=0,
        nodes=(node("n0", cpu=8),),
        groups=(
            group("many", min_member=4, phase=GroupPhase.RUNNING),
            group("one", phase=GroupPhase.RUNNING),
            group("p", priority=100),
        ),
        tasks=(
            *tasks("many", 4, cpu=1, on=["n0"]),
            *tasks("one", 1, cpu=4, on=["n0"]),
            *tasks("p", 1, cpu=4),
        ),
    )
    [evicted] = evictions(run_session(snap))
    assert evicted.group == "one"


def test_tenant_without_can_preempt_cannot_preempt() -> None:
    def snapshot(can_preempt: bool) -> Snapshot:
        queue = Queue("q", tenants=(Tenant("ns", priority=0, can_preempt=can_preempt),))
        return Snapshot(
            now=0,
            nodes=(node("n0", cpu=8),),
            queues=(queue,),
            groups=(
                group("low", queue="q", phase=GroupPhase.RUNNING),
                group("p", queue="q", priority=100),
            ),
            tasks=(*tasks("low", 1, cpu=8, on=["n0"]), *tasks("p", 1, cpu=8)),
        )

    assert not evictions(run_session(snapshot(can_preempt=False)))
    assert evictions(run_session(snapshot(can_preempt=True)))  # the control


def test_tenant_priority_outranks_job_priority() -> None:
    # Same namespace "ns" for both builders' groups; user tenants tell them apart.
    from operators.scheduler.snapshot import TenantKind

    queue = Queue(
        "q",
        tenants=(
            Tenant("alice", TenantKind.USER, priority=10),
            Tenant("bob", TenantKind.USER, priority=0),
        ),
    )
    snap = Snapshot(
        now=0,
        nodes=(node("n0", cpu=8),),
        queues=(queue,),
        groups=(
            group("bob-job", queue="q", user="bob", priority=1000, phase=GroupPhase.RUNNING),
            group("alice-job", queue="q", user="alice", priority=0),
        ),
        tasks=(*tasks("bob-job", 1, cpu=8, on=["n0"]), *tasks("alice-job", 1, cpu=8)),
    )
    [evicted] = evictions(run_session(snap))
    assert evicted.group == "bob-job"


def test_pool_with_preemption_disabled_does_not_preempt() -> None:
    from operators.scheduler.snapshot import LabelSelector, Pool

    def snapshot(disable_preemption: bool) -> Snapshot:
        return Snapshot(
            now=0,
            nodes=(node("n0", cpu=8, labels={"p": "a"}),),
            pools=(Pool("a", LabelSelector({"p": "a"}), disable_preemption=disable_preemption),),
            groups=(
                group("low", pool="a", phase=GroupPhase.RUNNING),
                group("high", pool="a", priority=100),
            ),
            tasks=(*tasks("low", 1, cpu=8, on=["n0"]), *tasks("high", 1, cpu=8)),
        )

    assert not evictions(run_session(snapshot(disable_preemption=True)))
    assert evictions(run_session(snapshot(disable_preemption=False)))  # the control


def test_delayed_preemption_marks_then_evicts_at_the_deadline() -> None:
    first = run_session(_full_cluster(preemption_grace=120.0))
    assert not evictions(first)
    assert MarkPrivileged("high", ("low",), 1120.0) in first.decisions
    [will_evict] = [d for d in first.decisions if isinstance(d, MarkWillEvict)]
    assert will_evict.victim == "low"
    assert will_evict.deadline == 1120.0
    explanation = first.explanations["high"]
    assert explanation.code == ReasonCode.WAITING_FOR_VICTIMS
    assert "after 120 s" in explanation.message

    def marked(now: float) -> Snapshot:
        base = _full_cluster(preemption_grace=120.0)
        low, high = base.groups
        return Snapshot(
            now=now,
            nodes=base.nodes,
            groups=(
                _with(low, PreemptionMark(PreemptionRole.WILL_EVICT, ("high",), 1120.0)),
                _with(high, PreemptionMark(PreemptionRole.PRIVILEGED, ("low",), 1120.0)),
            ),
            tasks=base.tasks,
        )

    waiting = run_session(marked(1060.0))
    assert not evictions(waiting)
    assert waiting.explanations["high"].code == ReasonCode.WAITING_FOR_VICTIMS

    due = run_session(marked(1120.0))
    [evicted] = evictions(due)
    assert evicted.group == "low"
    assert evicted.reason == EvictReason.DELAYED_PREEMPTION_DUE
    assert len(nominations(due)) == 2
    assert any(isinstance(d, RevertDelayedPreemption) for d in due.decisions)


def test_delayed_preemption_reverts_when_the_preemptor_is_gone() -> None:
    base = _full_cluster(preemption_grace=120.0)
    low = _with(base.groups[0], PreemptionMark(PreemptionRole.WILL_EVICT, ("high",), 1120.0))
    snap = Snapshot(now=1000.0, nodes=base.nodes, groups=(low,), tasks=base.tasks[:2])
    result = run_session(snap)
    assert RevertDelayedPreemption(("low",), "the preemptor is gone") in result.decisions


def test_delayed_victims_are_not_taken_by_a_third_job() -> None:
    base = _full_cluster()
    low = _with(base.groups[0], PreemptionMark(PreemptionRole.WILL_EVICT, ("high",), 5000.0))
    high = _with(base.groups[1], PreemptionMark(PreemptionRole.PRIVILEGED, ("low",), 5000.0))
    third = group("third", min_member=2, priority=500)
    snap = Snapshot(
        now=1000.0,
        nodes=base.nodes,
        groups=(low, high, third),
        tasks=(*base.tasks, *tasks("third", 2, cpu=8)),
    )
    result = run_session(snap)
    assert not evictions(result)
    assert not any(isinstance(d, MarkPrivileged) for d in result.decisions)
    # The control: without the marks, the third job does preempt `low`.
    unmarked = dataclasses.replace(snap, groups=(base.groups[0], base.groups[1], third))
    assert any(e.group == "low" for e in evictions(run_session(unmarked)))


def test_preempt_disabled_by_config() -> None:
    config = SessionConfig(actions=(ActionName.ENQUEUE, ActionName.ALLOCATE))
    assert not evictions(run_session(_full_cluster(), config))
    assert not binds(run_session(_full_cluster(), config))
    assert evictions(run_session(_full_cluster()))  # the control: the default actions preempt


def _with(g: PodGroup, mark: PreemptionMark) -> PodGroup:
    return dataclasses.replace(g, preemption=mark)


def test_no_second_preemption_while_victims_terminate() -> None:
    from operators.scheduler.snapshot import TaskStatus

    base = _full_cluster()
    releasing = [dataclasses.replace(t, status=TaskStatus.RELEASING) for t in base.tasks[:2]]
    nominated = [
        dataclasses.replace(t, nominated_node=f"n{i}") for i, t in enumerate(base.tasks[2:])
    ]
    snap = dataclasses.replace(base, tasks=(*releasing, *nominated))
    result = run_session(snap)
    assert not evictions(result)
    assert not binds(result)
    assert result.explanations["high"].code == ReasonCode.PREEMPTING
    assert "waiting for 2 evicted pod(s)" in result.explanations["high"].message
    # Once they are gone, the nominated pods bind on the room kept for them.
    gone = dataclasses.replace(base, tasks=tuple(nominated))
    assert {b.node for b in binds(run_session(gone))} == {"n0", "n1"}


def test_a_gang_waiting_for_nominated_room_does_not_grow_meanwhile() -> None:
    # Found by the property tests: the extra pod bound at once while the gang minimum was
    # only nominated; later the bound pod could be reclaimed and the gang broken.
    snap = Snapshot(
        now=0,
        nodes=(node("n0", cpu=8), node("n1", cpu=4)),
        groups=(
            group("low", phase=GroupPhase.RUNNING),
            group("high", min_member=2, priority=100),
        ),
        tasks=(*tasks("low", 1, cpu=8, on=["n0"]), *tasks("high", 3, cpu=4)),
    )
    result = run_session(snap)
    assert len(nominations(result)) == 2
    assert not binds(result)


def test_delayed_reclaim_across_queues_evicts_at_the_deadline() -> None:
    queues = (Queue("a", preemption_delay=60.0), Queue("b"))
    hogs = [group(f"a{i}", queue="a", phase=GroupPhase.RUNNING) for i in range(2)]
    bound = [t for i in range(2) for t in tasks(f"a{i}", 1, cpu=8, on=[f"n{i}"])]
    base = Snapshot(
        now=1000.0,
        nodes=(node("n0", cpu=8), node("n1", cpu=8)),
        queues=queues,
        groups=(*hogs, group("b0", queue="b")),
        tasks=(*bound, *tasks("b0", 1, cpu=8)),
    )
    first = run_session(base)
    [privileged] = [d for d in first.decisions if isinstance(d, MarkPrivileged)]
    assert privileged.preemptor == "b0"
    assert privileged.deadline == 1060.0
    assert not evictions(first)
    victim = privileged.victims[0]
    marked = tuple(
        dataclasses.replace(
            g,
            preemption=PreemptionMark(PreemptionRole.WILL_EVICT, ("b0",), 1060.0)
            if g.uid == victim
            else PreemptionMark(PreemptionRole.PRIVILEGED, (victim,), 1060.0)
            if g.uid == "b0"
            else None,
        )
        for g in base.groups
    )
    due = run_session(dataclasses.replace(base, now=1060.0, groups=marked))
    [evicted] = evictions(due)
    assert evicted.group == victim
    assert evicted.reason == EvictReason.DELAYED_PREEMPTION_DUE
    assert [n.group for n in nominations(due)] == ["b0"]


def test_a_big_gang_takes_its_victims_in_one_session_and_nothing_more_after() -> None:
    """docs/scheduling.md scenario 5 as the core sees it: 24 GPUs hold an elastic job grown to
    6 x 2 GPUs (minimum 2) and two 4-GPU jobs, 4 idle; an 8 x 2 GPU gang of higher priority
    needs 12 more. The first session shrinks the elastic job to its minimum and evicts one
    4-GPU job, and nominates the whole gang to the room they leave; no later session evicts
    anything more (the victims, re-queued, never preempt), and the gang binds once they are
    gone."""
    nodes = tuple(node(f"n{i}", cpu=40, gpus=8) for i in range(3))
    snap = Snapshot(
        now=0,
        nodes=nodes,
        groups=(
            elastic("e", 2, 6, phase=GroupPhase.RUNNING),
            group("a", phase=GroupPhase.RUNNING),
            group("b", phase=GroupPhase.RUNNING),
            group("big", min_member=8, priority=100),
        ),
        tasks=(
            *tasks("e", 6, gpus=2, role="w", on=["n0", "n0", "n0", "n0", "n1", "n1"]),
            *tasks("a", 1, gpus=4, on=["n1"]),
            *tasks("b", 1, gpus=4, on=["n2"]),
            *tasks("big", 8, gpus=2),
        ),
    )
    results = [result for result, _ in sessions(snap, 4)]
    first = evictions(results[0])
    shrunk = [e for e in first if e.group == "e"]
    whole = [e for e in first if e.group != "e"]
    assert [len(e.tasks) for e in shrunk] == [4], "the elastic job shrinks to its minimum"
    assert [e.group for e in whole] in (["a"], ["b"]), "and one 4-GPU job goes whole"
    assert len(nominations(results[0])) == 8, "the whole gang waits on the room, in one step"
    assert [evictions(r) for r in results[1:]] == [[], [], []], "nothing more is evicted"
    assert sum(len(binds(r)) for r in results[1:]) == 8
