"""Typed extension points and the rule that combines the plugins registered at each one.

Actions never call a plugin directly: they ask :class:`Extensions`, which applies the combination
rule written beside each point. Plugins register at session open, in the order of
``PLUGIN_ORDER`` (engine.py), and that order is what "first" means below.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import numpy as np

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from operators.scheduler.decisions import ReasonCode
    from operators.scheduler.state import GroupInfo, TaskInfo

SortKey = tuple[float, ...]


class Vote(enum.IntEnum):
    REJECT = -1
    ABSTAIN = 0
    PERMIT = 1


@dataclass(frozen=True, slots=True)
class Verdict:
    vote: Vote
    code: ReasonCode | None = None
    message: str = ""


PERMIT = Verdict(Vote.PERMIT)
ABSTAIN = Verdict(Vote.ABSTAIN)


class Purpose(enum.StrEnum):
    PREEMPT = "preempt"  # same queue, same pool, by priority
    RECLAIM = "reclaim"  # across queues (over-deserved) and pools (borrowed)


@dataclass(frozen=True, slots=True)
class VictimUnit:
    """What preemption may take: a whole group, or an elastic group's surplus replicas."""

    group: GroupInfo
    tasks: tuple[TaskInfo, ...]
    surplus: bool  # True: only replicas above the group's minimum
    borrowed: bool  # at least one task runs in a pool that is not its own
    # Position in the group's own shrink order (0 goes first): the last tie-break of the
    # victim order, so it orders units of one group and never one group against another.
    order: int = 0


class VictimBudget(Protocol):
    """A limit on what one victim search may take in total (not unit by unit)."""

    def admits(self, unit: VictimUnit) -> bool:
        """May ``unit`` go too, on top of the units taken so far?"""
        ...

    def take(self, unit: VictimUnit) -> None:
        """``unit`` goes: count it (called only after ``admits`` said yes)."""
        ...


class NodePredicate(Protocol):
    """Which nodes can run one task of this shape. Combination: ALL must pass (masks ANDed);
    for explanations, a node is counted against the FIRST predicate (in order) that rejects it."""

    name: str

    def mask(self, t: TaskInfo) -> NDArray[np.bool_]: ...


class NodeScorer(Protocol):
    """Preference among feasible nodes. Combination: WEIGHTED SUM of every scorer's score."""

    name: str
    weight: float

    def score(self, t: TaskInfo, nodes: NDArray[np.int64]) -> NDArray[np.float64]: ...


# Job / task / queue order. Combination: LEXICOGRAPHIC - the first plugin whose keys differ
# decides (ascending: smaller key runs first); ties fall through to the next plugin and finally
# to creation time and uid.
JobKey = Callable[["GroupInfo"], SortKey]
TaskKey = Callable[["TaskInfo"], SortKey]
QueueKey = Callable[[int], SortKey]
# Enqueue admission. Combination: any REJECT rejects (the first reject's reason is reported);
# otherwise admitted (all-abstain admits, as a group without minResources is admitted).
EnqueueCheck = Callable[["GroupInfo", "NDArray[np.float64]"], Verdict]


class AllocatePass(enum.StrEnum):
    SHARE = "share"  # first pass: stay within deserved shares
    BORROW = "borrow"  # second pass: borrow idle room up to capability


# May this group take this much more (quota, pool rules)? Combination: ALL must permit; the
# first rejection is reported.
AllocatableCheck = Callable[["GroupInfo", "NDArray[np.float64]", AllocatePass], Verdict]
# Notifications. Combination: ALL are called, in order.
EnqueuedHook = Callable[["GroupInfo", "NDArray[np.float64]"], None]
GangPlacedHook = Callable[["GroupInfo"], None]
# Has the queue reached its deserved share (so its groups wait for allocate's borrow pass)?
# Combination: ANY true -> overused.
OverusedCheck = Callable[[int], bool]
# May ``unit`` be a victim for ``preemptor``? Combination: INTERSECTION - a unit is a victim
# only if no plugin says False (None = abstain); if every plugin abstains it is not a victim.
VictimFilter = Callable[["GroupInfo", VictimUnit, Purpose], "bool | None"]
# Could any victim exist for this preemptor (a cheap check before the victim search)?
# Combination: ANY True -> search; otherwise ANY False -> skip; all None -> search.
VictimPrecheck = Callable[["GroupInfo", Purpose], "bool | None"]
# Victim order (DESIGN.md: borrowed, overcommitted, lower priority, least disruption).
# Combination: LEXICOGRAPHIC as for job order; smallest key is evicted first. A key reads the
# unit, its group and its own queue's usage and share (``allocated``, ``deserved`` rows) only,
# never the preemptor: every preemptor of a session sees candidates in one order, which
# eviction.py sorts once and re-keys only where those change.
VictimKey = Callable[[VictimUnit], SortKey]
# Is the group's gang satisfied? Combination: ALL must be true.
ReadyCheck = Callable[["GroupInfo"], bool]
# A fresh budget for one victim search (a job's disruption budget, a queue's guarantee).
# Combination: a unit is taken only if EVERY budget admits it; then every budget takes it.
VictimBudgets = Callable[["GroupInfo", Purpose], VictimBudget]
# The pending tasks (given in task order) that must be placed together to complete the
# group's gang minimum; None while too few pods exist. Combination: the FIRST plugin
# registered decides; without one, every pending task.
Shortfall = Callable[["GroupInfo", "list[TaskInfo]"], "list[TaskInfo] | None"]
# GPU card ids for ``count`` replicas shaped like the task on one node (the state is not
# changed), or None to leave the choice to the next picker. Combination: the FIRST picker that
# answers decides (extra pickers from SessionConfig.card_pickers are asked before the
# plugins'); GPU pods need one that answers.
CardPicker = Callable[["TaskInfo", int, int], "tuple[tuple[int, ...], ...] | None"]


@dataclass(frozen=True, slots=True)
class NodeSet:
    """Nodes a group may try, e.g. its own pool, then a pool it may borrow from."""

    label: str
    mask: NDArray[np.bool_]
    borrowed: bool


# Where a group may run, in the order to try (lazily: later sets cost something to rank and are
# rarely needed). Combination: the FIRST plugin registered decides (only one provider makes
# sense; without one, every schedulable node is one set).
NodeSets = Callable[["GroupInfo"], Iterator[NodeSet]]


@dataclass(slots=True)
class Extensions:
    job_keys: list[JobKey] = field(default_factory=list)
    task_keys: list[TaskKey] = field(default_factory=list)
    queue_keys: list[QueueKey] = field(default_factory=list)
    predicates: list[NodePredicate] = field(default_factory=list)
    scorers: list[NodeScorer] = field(default_factory=list)
    enqueue_checks: list[EnqueueCheck] = field(default_factory=list)
    allocatable_checks: list[AllocatableCheck] = field(default_factory=list)
    overused_checks: list[OverusedCheck] = field(default_factory=list)
    victim_filters: list[VictimFilter] = field(default_factory=list)
    victim_keys: list[VictimKey] = field(default_factory=list)
    victim_prechecks: list[VictimPrecheck] = field(default_factory=list)
    ready_checks: list[ReadyCheck] = field(default_factory=list)
    victim_budgets: list[VictimBudgets] = field(default_factory=list)
    shortfalls: list[Shortfall] = field(default_factory=list)
    card_pickers: list[CardPicker] = field(default_factory=list)
    node_sets: list[NodeSets] = field(default_factory=list)
    enqueued_hooks: list[EnqueuedHook] = field(default_factory=list)
    placed_hooks: list[GangPlacedHook] = field(default_factory=list)
    _feasible: dict[tuple[object, ...], NDArray[np.bool_]] = field(default_factory=dict)

    def job_key(self, g: GroupInfo) -> tuple[object, ...]:
        parts = (part for key in self.job_keys for part in key(g))
        return (*parts, g.pg.created, g.pg.arrival, g.uid)

    def task_key(self, t: TaskInfo) -> tuple[object, ...]:
        # Task keys read only static task fields, so each task's key is computed once.
        key = t.order_key
        if key is None:
            parts: list[object] = []
            for task_key in self.task_keys:
                parts.extend(task_key(t))
            parts.append(t.task.uid)
            key = t.order_key = tuple(parts)
        return key

    def pending_in_order(self, g: GroupInfo) -> list[TaskInfo]:
        """``sorted(g.pending_tasks(), key=task_key)``, without sorting every time: task keys
        are static and unique, so filtering the once-sorted task list gives the same list."""
        ordered = g.ordered
        if ordered is None:
            ordered = g.ordered = sorted(g.tasks, key=self.task_key)
        return [t for t in ordered if t.pending]

    def queue_key(self, q: int) -> tuple[float, ...]:
        return (*(part for key in self.queue_keys for part in key(q)), float(q))

    def feasible(self, t: TaskInfo) -> NDArray[np.bool_]:
        # Predicates are static for a session (resource fit is separate), so the AND is cached
        # per task shape.
        found = self._feasible.get(t.shape)
        if found is not None:
            return found
        mask: NDArray[np.bool_] | None = None
        for predicate in self.predicates:
            m = predicate.mask(t)
            mask = m.copy() if mask is None else mask & m
        if mask is None:
            raise ValueError("no predicates registered")
        mask.flags.writeable = False
        self._feasible[t.shape] = mask
        return mask

    def rejections(self, t: TaskInfo) -> list[tuple[str, int]]:
        """Per predicate (in order), how many nodes it is the first to reject."""
        out: list[tuple[str, int]] = []
        alive: NDArray[np.bool_] | None = None
        for predicate in self.predicates:
            m = predicate.mask(t)
            if alive is None:
                alive = np.ones_like(m)
            rejected = int((alive & ~m).sum())
            if rejected:
                out.append((predicate.name, rejected))
            alive = alive & m
        return out

    def score(self, t: TaskInfo, nodes: NDArray[np.int64]) -> NDArray[np.float64]:
        total = np.zeros(len(nodes), dtype=np.float64)
        for scorer in self.scorers:
            weight = scorer.weight
            if weight == 1.0:  # the default: spare a temporary (x * 1.0 == x exactly)
                total += scorer.score(t, nodes)
            elif weight:
                total += weight * scorer.score(t, nodes)
        return total

    def enqueueable(self, g: GroupInfo, need: NDArray[np.float64]) -> Verdict:
        for check in self.enqueue_checks:
            verdict = check(g, need)
            if verdict.vote == Vote.REJECT:
                return verdict
        return PERMIT

    def allocatable(
        self, g: GroupInfo, need: NDArray[np.float64], phase: AllocatePass = AllocatePass.BORROW
    ) -> Verdict:
        for check in self.allocatable_checks:
            verdict = check(g, need, phase)
            if verdict.vote == Vote.REJECT:
                return verdict
        return PERMIT

    def overused(self, q: int) -> bool:
        return any(check(q) for check in self.overused_checks)

    def is_victim(self, preemptor: GroupInfo, unit: VictimUnit, purpose: Purpose) -> bool:
        said_yes = False
        for victim_filter in self.victim_filters:
            answer = victim_filter(preemptor, unit, purpose)
            if answer is False:
                return False
            said_yes = said_yes or answer is True
        return said_yes

    def victims_possible(self, preemptor: GroupInfo, purpose: Purpose) -> bool:
        answers = [check(preemptor, purpose) for check in self.victim_prechecks]
        return any(a is True for a in answers) or not any(a is False for a in answers)

    def victim_key(self, unit: VictimUnit) -> tuple[object, ...]:
        parts = (part for key in self.victim_keys for part in key(unit))
        return (*parts, -unit.group.pg.created, -unit.group.pg.arrival, unit.group.uid, unit.order)

    def budgets(self, preemptor: GroupInfo, purpose: Purpose) -> list[VictimBudget]:
        return [make(preemptor, purpose) for make in self.victim_budgets]

    def shortfall(self, g: GroupInfo, pending: list[TaskInfo]) -> list[TaskInfo] | None:
        if self.shortfalls:
            return self.shortfalls[0](g, pending)
        return pending

    def pick_cards(self, t: TaskInfo, node: int, count: int) -> tuple[tuple[int, ...], ...]:
        if not (t.gpu_cards or t.gpu_milli):
            return ((),) * count
        for picker in self.card_pickers:
            cards = picker(t, node, count)
            if cards is not None:
                return cards
        raise ValueError("no GPU card picker answered")

    def ready(self, g: GroupInfo) -> bool:
        return all(check(g) for check in self.ready_checks)

    def candidate_sets(self, g: GroupInfo, everything: NDArray[np.bool_]) -> Iterator[NodeSet]:
        if self.node_sets:
            return self.node_sets[0](g)
        return iter([NodeSet("the cluster", everything, borrowed=False)])

    def enqueued(self, g: GroupInfo, need: NDArray[np.float64]) -> None:
        for hook in self.enqueued_hooks:
            hook(g, need)

    def placed(self, g: GroupInfo) -> None:
        for hook in self.placed_hooks:
            hook(g)
