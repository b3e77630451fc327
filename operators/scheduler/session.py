"""What a session is asked to do and what it returns: ``SessionConfig`` and ``SessionResult``.

Plain types at the bottom of the core's layers (engine.py, which runs a session, imports them;
nothing here imports the engine). The entry point is :func:`operators.scheduler.run_session`.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from operators.scheduler.decisions import Bind, Decision, Explanation
    from operators.scheduler.framework import CardPicker, NodeScorer
    from operators.scheduler.snapshot import Resources
    from operators.scheduler.state import SessionState


class ActionName(enum.StrEnum):
    ENQUEUE = "enqueue"
    ALLOCATE = "allocate"
    CONSOLIDATE = "consolidate"
    PREEMPT = "preempt"
    RECLAIM = "reclaim"
    BACKFILL = "backfill"


DEFAULT_ACTIONS: tuple[ActionName, ...] = (
    ActionName.ENQUEUE,
    ActionName.ALLOCATE,
    ActionName.CONSOLIDATE,
    ActionName.PREEMPT,
    ActionName.RECLAIM,
    ActionName.BACKFILL,
)

BindSink = Callable[[tuple["Bind", ...]], None]
"""Receives early Bind decisions (see ``SessionConfig.on_bind``)."""

Timer = Callable[[], float]
"""A monotonic clock the *caller* injects (e.g. ``time.perf_counter``); the core never reads one."""

ScorerFactory = Callable[["SessionState"], "NodeScorer"]
"""Builds an extra node scorer from the opened session (e.g. a simulator reference policy)."""

CardPickerFactory = Callable[["SessionState"], "CardPicker"]
"""Builds an extra GPU card picker from the opened session (e.g. a simulator reference policy)."""


@dataclass(frozen=True, slots=True)
class SessionConfig:
    actions: tuple[ActionName, ...] = DEFAULT_ACTIONS
    # Node score = binpack_weight * binpack + topology_weight * topology
    # + fragmentation_weight * fragmentation (weighted sum; plugins/fragmentation.py).
    binpack_weight: float = 1.0
    topology_weight: float = 1.0
    fragmentation_weight: float = 1.0
    # Share of a node's usable idle GPU that its free CPU cannot feed which the fragmentation
    # score counts as fragment (0: the FGD paper's measure; plugins/fragmentation.py). With the
    # scarcity and levels below, the default leaves fewer GPUs unallocated than FGD's published
    # figure on all four openb traces (docs/quality.md part A).
    fragmentation_cpu_reach: float = 0.5
    # Added to a typical pod's frequency, times its scarcity: how much of the GPU of the few
    # nodes it fits its demand needs (0..1; plugins/fragmentation.py scarcity()), so large pods
    # keep the nodes only they fit (0: weights are frequencies, as in the paper).
    fragmentation_scarcity: float = 0.5
    # The fragmentation score is rounded down to 1/levels, so near-equal nodes tie and the first
    # in order wins; at most 125, so placement's domain fill (0.004) stays below half a level.
    fragmentation_levels: int = 20
    # Grace period for victims when neither their group nor their queue sets one (seconds).
    default_preemption_delay: float = 0.0
    # A running gang below its minimum this long is evicted whole (stale gang; seconds;
    # negative: never). PodGroup.stale_grace overrides it per group.
    stale_gang_grace: float = 60.0
    # Upper bound on victim groups considered for one preemptor (bounds session time).
    max_victims_per_preemptor: int = 64
    # Upper bound on preemptors tried per action (bounds session time under heavy contention).
    max_preemptors: int = 256
    # Consolidation (actions/consolidate.py): a job moved less than ``consolidation_window``
    # seconds ago is not moved again; per gang at most ``max_consolidation_victims`` jobs move
    # and ``max_consolidation_nodes`` nodes are examined; at most ``max_consolidations`` gangs
    # are searched per session (0 turns the action off, as does leaving it out of ``actions``).
    consolidation_window: float = 600.0
    max_consolidation_victims: int = 16
    max_consolidation_nodes: int = 64
    max_consolidations: int = 8
    # Gangs per pool that may reserve nodes when they do not fit yet (backfill with
    # reservation, reservation.py); 0 turns reservations off.
    max_reservations: int = 1
    # Within one pass of allocate or of backfill's borrowing, a group equivalent to one that
    # already failed to fit (same pool, topology request and pod shapes; room only shrinks
    # within a pass) fails the same way without being placed again, and shares that failure's
    # explanation text. Likewise admission: a Pending group holding nothing gets the verdict
    # of an equivalent one (same queue, pool, priority, gang minimum) asked while nothing that
    # verdict reads has moved. Same decisions either way; off only to check that (tests).
    equivalence_cache: bool = True
    # Preempt and reclaim keep their candidates in victim order across preemptors (sorted once
    # per change of queue usage or of a candidate's holdings) and ask the victim filters only
    # as far as a search reads. Same decisions either way; off only to check that (tests,
    # bench.steady).
    victim_order_cache: bool = True
    timer: Timer | None = None
    # Called with the Bind decisions of each committed statement that only binds (no
    # evictions, no nominations), as soon as it commits, so that the caller can start binding
    # while the session goes on. Committed statements are final: the same Binds are in the
    # result's decisions, in the same order. Decisions are the same with or without it. The
    # caller owns what the callback does (the core does no I/O).
    on_bind: BindSink | None = None
    # Extra node scorers, built at session open and registered after the built-in ones (so the
    # weighted sum of framework.NodeScorer simply gains terms). Set binpack_weight and
    # topology_weight to 0 to let them decide alone (the simulator's reference policies).
    scorers: tuple[ScorerFactory, ...] = ()
    # Extra GPU card pickers, built at session open and asked before the plugins' (the first
    # that answers decides, framework.CardPicker): a reference policy's own card choice.
    card_pickers: tuple[CardPickerFactory, ...] = ()
    # Score every node again for every placement instead of refreshing only the nodes whose
    # holdings changed (shapeviews.py): for scorers whose value is not a function of the node's
    # own holdings, such as a random score. Slow; decisions are otherwise identical.
    fresh_scores: bool = False

    def __post_init__(self) -> None:
        # A bad tuning value is a caller's error, said at once, not a ZeroDivisionError (or a
        # tie-break silently outweighing the score) somewhere inside a session.
        if not 1 <= self.fragmentation_levels <= 125:
            raise ValueError(
                f"fragmentation_levels must be 1..125, not {self.fragmentation_levels}"
            )
        if not 0.0 <= self.fragmentation_cpu_reach < float("inf"):
            raise ValueError(
                f"fragmentation_cpu_reach must be finite and >= 0, not {self.fragmentation_cpu_reach}"
            )
        if not 0.0 <= self.fragmentation_scarcity < float("inf"):
            raise ValueError(
                f"fragmentation_scarcity must be finite and >= 0, not {self.fragmentation_scarcity}"
            )


@dataclass(frozen=True, slots=True)
class QueueStatus:
    """Computed per queue each session; the runtime writes it to ``Queue.status`` (coalesced).

    Resource maps use snapshot units, with GPUs in whole cards rounded up and the exact figure in
    ``nvidia.com/gpu-milli``.
    """

    deserved: Resources
    allocated: Resources
    pending: int  # groups in Pending
    inqueue: int
    running: int
    # (namespace, name) of its groups still Pending or Inqueue when the session ends, in the
    # session's job order (the order allocate takes them in): first = next in line.
    waiting: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class PoolStatus:
    capacity: Resources
    allocatable: Resources
    used: Resources
    shared: Resources  # used by tasks of other pools (borrowers)
    pending: Resources  # requests of this pool's pending tasks
    nodes: int


@dataclass(frozen=True, slots=True)
class SessionResult:
    decisions: tuple[Decision, ...]
    explanations: Mapping[str, Explanation]  # group uid -> why it is (not) scheduled
    timings: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    queues: Mapping[str, QueueStatus] = field(default_factory=lambda: MappingProxyType({}))
    pools: Mapping[str, PoolStatus] = field(default_factory=lambda: MappingProxyType({}))
    # group uid -> names of the nodes reserved for it (lower-ranked work is kept off them).
    reservations: Mapping[str, tuple[str, ...]] = field(
        default_factory=lambda: MappingProxyType({})
    )
