"""consolidate: move running jobs so that a pending gang that fits in total finds a placement.

Runs after allocate and before preempt. A gang that allocate could not place although its own
pool has enough free room *in total* (the room is split over cards, nodes or domains) asks:
which running jobs, evicted and placed again elsewhere, would leave a placement for it? Nothing
is killed for good: a plan is accepted only if, in one statement, the gang is placed (kind
NOMINATE: the moved pods take time to exit) and then every moved job is placed again. The moves
are committed as evictions (reason ``Consolidated``); the re-placements are not kept (the moved
pods are re-created by their job controller and allocate places them in a later session, at
their old rank: the PodGroup and its creation time stay).

Which jobs may move (:func:`movable`): explicit groups only (``PodGroup.movable``: an implicit
one-pod group's pod is the job itself), whole and running, not protected (``preemptible:
false`` or a disruption budget below its size), without a preemption grace period (a job that
needs time to checkpoint is not moved), not part of a delayed preemption, of priority
not above the gang's, running only on nodes of the gang's pool, not moved within
``SessionConfig.consolidation_window`` seconds, and not in a pool with ``disableConsolidation``.

The search, bounded so that one gang costs a handful of placements:

0. movers that have no room, as the cluster stands, on any node other than their own are left
   out (:class:`_Room`): a plan moving one could hold only where other moves free room;
1. per node of the pool, a cheap set of movable jobs (in milli-GPUs moved, a share by its
   fraction of a card, then pods) whose departure opens room there for one replica of the
   gang's largest shape, judged per card: whole cards cleared cheapest first for a whole-card
   replica (so shares are gathered off a card when that moves fewer GPUs), one card with
   room for a share (:func:`_node_plan`); nodes are planned in order of a lower bound on
   their cost, so only the cheapest part of the pool is planned;
2. nodes cheapest first (at most ``max_consolidation_nodes``); their jobs are evicted node by
   node, and after each node, once the freed room could hold the gang (fit counts), the plan is
   tried in full: gang first, then every moved job in the order allocate will try them, and
   every job moved by an earlier plan of the session (its room is not held either);
3. on success, jobs whose nodes the gang does not use are dropped if the plan still holds
   without them, so the fewest GPUs move; at most ``max_consolidation_victims`` jobs move for
   one gang and at most ``max_consolidations`` gangs are tried per session.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from operators.scheduler.actions.eviction import grace_of
from operators.scheduler.actions.movers import mover_nodes, place_again
from operators.scheduler.actions.preempt import preemptors
from operators.scheduler.decisions import EvictReason, Explanation, ReasonCode
from operators.scheduler.framework import Vote
from operators.scheduler.placement import by_shape, place_group_tasks
from operators.scheduler.shapeviews import counts_at
from operators.scheduler.snapshot import GPU_MILLI_PER_CARD, TaskStatus
from operators.scheduler.state import CARD_EPS, Placement
from operators.scheduler.statement import Statement

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from operators.scheduler.context import Session
    from operators.scheduler.state import GroupInfo, TaskInfo


@dataclass(frozen=True, slots=True)
class Plan:
    gang: GroupInfo
    moved: tuple[GroupInfo, ...]

    @property
    def gpus(self) -> float:
        """GPUs the moves relocate, a share by its fraction of a card."""
        moved = [t for v in self.moved for t in v.tasks if t.evicted]
        return _milli(moved) / GPU_MILLI_PER_CARD


_FULL = GPU_MILLI_PER_CARD - CARD_EPS  # a card with this much free is whole


def run(ssn: Session) -> None:
    config = ssn.config
    if config.max_consolidations <= 0:
        return
    ssn.reservations.release_placed()
    tried = 0
    # Jobs moved by this session's earlier plans (Session.moved): their re-placements were not
    # kept, so each later plan must place them again too, or it could take their room.
    carried = ssn.moved
    # Nodes nominated for the gangs of this session's plans: the next session holds them whole
    # for their gang until it binds (Reservations.held_for), so no moved job is placed there.
    claimed = np.zeros(ssn.state.nodes.size, dtype=np.bool_)
    for g in preemptors(ssn):
        if tried >= config.max_consolidations:
            break
        found = consolidate(ssn, g, carried, claimed)
        if found is None:
            continue
        tried += 1
        if found.moved:
            carried.extend(found.moved)
            claimed[[t.node for t in g.tasks if t.placed == Placement.NOMINATE]] = True
            _explain(ssn, found)


def consolidate(
    ssn: Session, g: GroupInfo, carried: list[GroupInfo], claimed: NDArray[np.bool_]
) -> Plan | None:
    """Try to consolidate room for ``g``: None when it is not a fragmentation case (nothing was
    searched), a plan with no moves when the search found nothing, else the committed plan.
    ``carried``: jobs moved earlier in the session, placed again in every plan tried;
    ``claimed``: nodes nominated for earlier plans' gangs, closed to moved jobs."""
    state, ext = ssn.state, ssn.ext
    if state.nodes.pools[g.pool].disable_consolidation:
        return None
    tasks = ext.shortfall(g, ext.pending_in_order(g))
    if not tasks:
        return None
    own = next(ext.candidate_sets(g, state.nodes.schedulable), None)
    if own is None or own.borrowed:
        return None
    mask = ssn.reservations.allowed(g, own.mask)
    need = np.sum([t.req for t in tasks], axis=0)
    if ext.allocatable(g, need).vote == Vote.REJECT:
        return None  # quota, not fragmentation, keeps it out
    free = np.maximum(state.free[mask], 0.0).sum(axis=0)
    if bool((need > free + 1e-6).any()):
        return None  # does not fit even in total: preemption's business
    victims = [(v, v.running_tasks()) for v in state.groups if movable(ssn, g, v, mask)]
    if not victims:
        return Plan(g, ())
    plan = _search(ssn, g, tasks, mask, victims, carried, claimed)
    if plan is None:
        return Plan(g, ())
    return plan


def movable(ssn: Session, g: GroupInfo, v: GroupInfo, mask: NDArray[np.bool_]) -> bool:
    """May ``v`` be moved to make room for ``g`` in the nodes of ``mask``?"""
    pg = v.pg
    if v is g or not pg.movable or not pg.preemptible or pg.preemption is not None:
        return False
    if grace_of(ssn, v) > 0:
        return False  # it asked for time to checkpoint before it is evicted: never moved
    if v.priority > g.priority:
        return False
    if ssn.state.moved_recently(v):
        return False
    if not v.tasks or not v.gang_satisfied():
        return False
    running = 0
    pools = ssn.state.nodes.pools
    pool_of = ssn.state.nodes.pool_of
    for t in v.tasks:
        if t.placed != Placement.NONE or t.evicted or t.task.status == TaskStatus.RELEASING:
            return False
        if not t.held:
            continue
        if t.node < 0 or not mask[t.node] or pools[pool_of[t.node]].disable_consolidation:
            return False
        running += 1
    budget = pg.max_unavailable
    return running > 0 and (budget is None or budget >= running)


class _Room:
    """Has a job room, as the cluster stands, on nodes other than its own? A mover without it
    could be placed again only where other moves free room, and the search would spend a node
    on a plan that cannot hold (so it is left out). Per shape: the replicas that fit on the
    nodes it may use, summed, minus those on the job's own nodes; exact for one pod, a
    necessary condition for several (the plan itself still places them). Thousands of jobs
    are asked per gang searched, so totals are kept per (shape, node set)."""

    def __init__(self, ssn: Session, g: GroupInfo) -> None:
        self.ssn = ssn
        self.g = g
        self.counts: dict[object, NDArray[np.float64]] = {}  # per shape: the state is fixed
        # id(node set) -> (node set, nodes open to movers), and (shape, id(nodes open)) ->
        # (nodes open, of those where the shape may run, replicas fitting there in total);
        # the keys' arrays are kept alive in the values so their ids stay unique.
        self.opened: dict[int, tuple[NDArray[np.bool_], NDArray[np.bool_]]] = {}
        self.totals: dict[
            tuple[object, int], tuple[NDArray[np.bool_], NDArray[np.bool_], float]
        ] = {}

    def elsewhere(self, v: GroupInfo, running: list[TaskInfo]) -> bool:
        own = {t.node for t in running}
        shapes = by_shape(running) if len(running) > 1 else [running]
        for node_set in self.ssn.ext.candidate_sets(v, self.ssn.state.nodes.schedulable):
            nodes = self._open(v, node_set.mask)
            if all(self._fits(shape, nodes, own) for shape in shapes):
                return True
        return False

    def _open(self, v: GroupInfo, mask: NDArray[np.bool_]) -> NDArray[np.bool_]:
        base = self.ssn.reservations.allowed(v, mask)
        found = self.opened.get(id(base))
        if found is None or found[0] is not base:
            found = (base, mover_nodes(self.ssn, self.g, v, mask))
            self.opened[id(base)] = found
        return found[1]

    def _fits(self, shape: list[TaskInfo], nodes: NDArray[np.bool_], own: set[int]) -> bool:
        t = shape[0]
        key = t.shape[0]
        counts = self.counts.get(key)
        if counts is None:
            counts = self.counts[key] = counts_at(self.ssn.state, t, None)
        found = self.totals.get((key, id(nodes)))
        if found is None or found[0] is not nodes:
            allowed = self.ssn.views.allowed(t, nodes, self.ssn.ext.feasible)
            found = (nodes, allowed, float(counts[allowed].sum()))
            self.totals[(key, id(nodes))] = found
        allowed = found[1]
        here = sum(float(counts[n]) for n in own if allowed[n])
        return found[2] - here >= len(shape)


@dataclass(slots=True, eq=False)
class _Mover:
    """A movable job as seen from one node it runs on."""

    victim: int  # index into the search's victims
    node: int
    cost: int  # of moving the whole job: milli-GPUs, then pods (see _cost)
    room: NDArray[np.float64]  # room it frees on this node (the GPU column is not read)
    cards: dict[int, float]  # card -> milli-GPUs it frees on that card of this node


def _cost(running: list[TaskInfo]) -> int:
    # Fewest GPUs first (a share by its fraction), then fewest pods; pods < _POD_SCALE.
    return _milli(running) * _POD_SCALE + len(running)


_POD_SCALE = 1 << 20


def _milli(running: list[TaskInfo]) -> int:
    return sum(t.gpu_cards * GPU_MILLI_PER_CARD + t.gpu_milli for t in running)


def _node_costs(
    ssn: Session,
    tasks: list[TaskInfo],
    victims: list[tuple[GroupInfo, list[TaskInfo]]],
    room: _Room,
) -> list[tuple[int, list[GroupInfo]]]:
    """Per node with movable jobs, a cheap set of them whose departure opens room there for one
    replica of the hardest shape (:func:`_node_plan`; jobs without room elsewhere left out);
    nodes cheapest first, at most ``max_consolidation_nodes``. Nodes are planned in order of a
    lower bound on their cost (the GPU room they lack on their emptiest cards, which any
    plan must move at least), stopping once the bound exceeds the last node kept: the answer
    is the same as planning every node, for a fraction of them."""
    state = ssn.state
    shapes = by_shape(tasks)
    hardest = max(shapes, key=lambda s: (s[0].gpu_cards, s[0].gpu_milli, float(s[0].req.sum())))
    t = hardest[0]
    on_node: dict[int, list[int]] = {}
    for i, (_, running) in enumerate(victims):
        if len(running) == 1:  # most jobs: spare the set
            on_node.setdefault(running[0].node, []).append(i)
            continue
        for n in {r.node for r in running}:
            on_node.setdefault(n, []).append(i)
    nodes = np.fromiter(on_node, dtype=np.int64, count=len(on_node))
    bound = _lower_bound(t, state.gpu_free[nodes], state.full_cards[nodes]) * _POD_SCALE
    # What each node lacks besides cards (card room is judged per card).
    lack = t.req - np.maximum(state.free[nodes], 0.0) - 1e-6
    lack[:, state.space.gpu] = -np.inf
    free_sum = state.free[nodes].sum(axis=1)
    keep = ssn.config.max_consolidation_nodes
    movers_of: dict[int, list[_Mover]] = {}
    ranked: list[tuple[int, float, int, list[int]]] = []
    for k in np.argsort(bound, kind="stable").tolist():
        if len(ranked) >= keep and bound[k] > ranked[keep - 1][0]:
            break
        n = int(nodes[k])
        movers: list[_Mover] = []
        for i in on_node[n]:
            if i not in movers_of:
                v, running = victims[i]
                movers_of[i] = _movers(i, running) if room.elsewhere(v, running) else []
            movers.extend(m for m in movers_of[i] if m.node == n)
        if not movers:
            continue
        movers.sort(key=lambda m: (m.cost, m.victim))
        found = _node_plan(t, lack[k], state.gpu_free[n].tolist(), movers)
        if found is not None:
            ranked.append((found[0], -float(free_sum[k]), n, found[1]))
            ranked.sort()
    return [(n, [victims[i][0] for i in chosen]) for _, _, n, chosen in ranked[:keep]]


def _lower_bound(
    t: TaskInfo, cards: NDArray[np.float64], whole: NDArray[np.int64]
) -> NDArray[np.float64]:
    """Per node (rows of ``cards``: free milli-GPUs per card), milli-GPUs any plan for ``t``
    there moves at least: the used room of the emptiest cards it still needs whole, or what
    its emptiest card lacks for a share. Every mover's cost counts at least the room it frees
    on the card, so no plan costs less."""
    if t.gpu_cards:
        used = np.where(cards >= _FULL, np.inf, GPU_MILLI_PER_CARD - np.maximum(cards, 0.0))
        short = t.gpu_cards - whole
        width = cards.shape[1]
        sums = np.cumsum(np.sort(used, axis=1), axis=1) if width else np.zeros((len(cards), 1))
        at = np.clip(short - 1, 0, max(width - 1, 0))
        out = np.take_along_axis(sums, at[:, None], axis=1)[:, 0]
        bound: NDArray[np.float64] = np.where(short > 0, out, 0.0)
        bound[short > width] = np.inf  # fewer cards than it needs
        return bound
    if t.gpu_milli and cards.shape[1]:
        lacks: NDArray[np.float64] = np.maximum(t.gpu_milli - cards.max(axis=1), 0.0)
        return lacks
    return np.zeros(len(cards))


def _movers(i: int, running: list[TaskInfo]) -> list[_Mover]:
    """Job ``i`` as seen from each node it runs on."""
    cost = _cost(running)
    here: dict[int, _Mover] = {}
    for r in running:
        share = float(r.gpu_milli or GPU_MILLI_PER_CARD)
        m = here.get(r.node)
        if m is None:
            # One pod per node is the rule: its request array is shared, never written.
            here[r.node] = _Mover(i, r.node, cost, r.req, dict.fromkeys(r.gpu_ids, share))
            continue
        m.room = m.room + r.req
        for card in r.gpu_ids:
            m.cards[card] = m.cards.get(card, 0.0) + share
    return list(here.values())


def _node_plan(
    t: TaskInfo, deficit: NDArray[np.float64], cards: list[float], movers: list[_Mover]
) -> tuple[int, list[int]] | None:
    """The movers (cheapest first) to evict from one node so that a replica shaped like ``t``
    fits there, and their cost; None if no set does. Card room is judged per card: whole
    cards for a whole-card replica (cards are cleared cheapest first, so shares are gathered
    off a card when that moves fewer GPUs than a whole-card job), one card with room for a
    share; the other resources (``deficit``: what the node lacks, GPU column -inf) are then
    covered by the cheapest of the remaining movers."""
    chosen: list[_Mover] = []
    if t.gpu_cards:
        picked = _clear_cards(t.gpu_cards, cards, movers)
        if picked is None:
            return None
        chosen = picked
    elif t.gpu_milli and max(cards, default=0.0) < t.gpu_milli - CARD_EPS:
        picked = _open_share(t.gpu_milli, cards, movers)
        if picked is None:
            return None
        chosen = picked
    if chosen:
        room = np.sum([m.room for m in chosen], axis=0)
        covered = bool((room >= deficit).all())
    else:
        room = np.zeros_like(deficit)
        covered = bool((deficit <= 0.0).all())
    if not covered:
        rest = [m for m in movers if m not in chosen]
        extra = _cheapest_cover(deficit - room, [(m, m.room) for m in rest])
        if extra is None:
            return None
        chosen = chosen + extra
    return sum(m.cost for m in chosen), [m.victim for m in chosen]


def _clear_cards(k: int, cards: list[float], movers: list[_Mover]) -> list[_Mover] | None:
    """Movers whose departure leaves ``k`` whole cards: the cards that could be cleared, the
    cheapest to clear first (a mover holding several cards clears them all at once)."""
    whole = sum(1 for f in cards if f >= _FULL)
    if whole >= k:
        return []
    clearable: list[tuple[int, int, list[_Mover]]] = []
    for c, free in enumerate(cards):
        if free >= _FULL:
            continue
        on = [m for m in movers if c in m.cards]
        if on and free + sum(m.cards[c] for m in on) >= _FULL:
            clearable.append((sum(m.cost for m in on), c, on))
    if whole + len(clearable) < k:
        return None
    clearable.sort(key=lambda x: (x[0], x[1]))
    freed = [0.0] * len(cards)
    out: list[_Mover] = []
    for _, _, on in clearable:
        for m in on:
            if m in out:
                continue
            out.append(m)
            for c, milli in m.cards.items():
                if 0 <= c < len(cards):
                    was = cards[c] + freed[c] >= _FULL
                    freed[c] += milli
                    whole += int(not was and cards[c] + freed[c] >= _FULL)
        if whole >= k:
            return out
    return None


def _open_share(milli: int, cards: list[float], movers: list[_Mover]) -> list[_Mover] | None:
    """The cheapest movers whose departure leaves ``milli`` free on one card."""
    best: tuple[int, list[_Mover]] | None = None
    for c, free in enumerate(cards):
        on = [(m, np.array([m.cards[c]])) for m in movers if c in m.cards]
        if not on:
            continue
        found = _cheapest_cover(np.array([milli - free - CARD_EPS]), on)
        if found is not None:
            cost = sum(m.cost for m in found)
            if best is None or cost < best[0]:
                best = (cost, found)
    return None if best is None else best[1]


def _cheapest_cover(
    deficit: NDArray[np.float64], offers: list[tuple[_Mover, NDArray[np.float64]]]
) -> list[_Mover] | None:
    """Of ``offers`` (cheapest first), one that covers ``deficit`` alone or the shortest
    cheapest-first prefix that does, whichever costs less; None if even all do not."""
    alone = next((m for m, room in offers if bool((room >= deficit).all())), None)
    total = np.zeros_like(deficit)
    prefix: list[_Mover] | None = None
    for k, (_, room) in enumerate(offers):
        total += room
        if bool((total >= deficit).all()):
            prefix = [m for m, _ in offers[: k + 1]]
            break
    if alone is None:
        return prefix
    if prefix is None or alone.cost <= sum(m.cost for m in prefix):
        return [alone]
    return prefix


def _search(
    ssn: Session,
    g: GroupInfo,
    tasks: list[TaskInfo],
    mask: NDArray[np.bool_],
    victims: list[tuple[GroupInfo, list[TaskInfo]]],
    carried: list[GroupInfo],
    claimed: NDArray[np.bool_],
) -> Plan | None:
    limit = ssn.config.max_consolidation_victims
    stmt = Statement(ssn.state)
    moved: list[GroupInfo] = []
    for _, chosen in _node_costs(ssn, tasks, victims, _Room(ssn, g)):
        fresh = [v for v in chosen if v not in moved]
        if not fresh:
            continue
        if len(moved) + len(fresh) > limit:
            break
        for v in fresh:
            _evict(stmt, g, v)
            moved.append(v)
        if not _may_fit(ssn, tasks, mask):
            continue
        if _attempt(ssn, stmt, g, tasks, mask, [*moved, *carried], claimed):
            return _finish(ssn, stmt, g, tasks, mask, moved, carried, claimed)
    stmt.discard()
    return None


def _finish(
    ssn: Session,
    stmt: Statement,
    g: GroupInfo,
    tasks: list[TaskInfo],
    mask: NDArray[np.bool_],
    moved: list[GroupInfo],
    carried: list[GroupInfo],
    claimed: NDArray[np.bool_],
) -> Plan:
    """Keep only the moves the gang's placement needs, if the plan holds without the rest."""
    used = {t.node for t in tasks}
    needed = [v for v in moved if any(t.node in used for t in v.tasks if t.evicted)]
    if len(needed) < len(moved):
        stmt.discard()
        smaller = Statement(ssn.state)
        for v in needed:
            _evict(smaller, g, v)
        if _attempt(ssn, smaller, g, tasks, mask, [*needed, *carried], claimed):
            stmt, moved = smaller, needed
        else:
            smaller.discard()
            stmt = Statement(ssn.state)
            for v in moved:
                _evict(stmt, g, v)
            # Cannot fail: the same plan held a moment ago.
            if not _attempt(ssn, stmt, g, tasks, mask, [*moved, *carried], claimed):
                stmt.discard()
                return Plan(g, ())
    ssn.commit(stmt)
    g.preemption_done = True
    return Plan(g, tuple(moved))


def _evict(stmt: Statement, g: GroupInfo, v: GroupInfo) -> None:
    pg = g.pg
    stmt.evict_many(
        v.running_tasks(),
        EvictReason.CONSOLIDATED,
        f"moved to make room for gang {pg.namespace}/{pg.name} (consolidation); "
        "its pods are placed again elsewhere and it keeps its place in the queue",
        g.uid,
    )


def _may_fit(ssn: Session, tasks: list[TaskInfo], mask: NDArray[np.bool_]) -> bool:
    for shape_tasks in by_shape(tasks):
        t = shape_tasks[0]
        counts = ssn.views.get(t).counts * ssn.views.allowed(t, mask, ssn.ext.feasible)
        if counts.sum() < len(shape_tasks):
            return False
    return True


def _attempt(
    ssn: Session,
    stmt: Statement,
    g: GroupInfo,
    tasks: list[TaskInfo],
    mask: NDArray[np.bool_],
    moved: list[GroupInfo],
    claimed: NDArray[np.bool_],
) -> bool:
    """Place the gang, then every moved job; on success keep only the gang's placement in
    ``stmt`` (the moved jobs are placed again by a later session), else undo both. Moved jobs
    are placed off the nodes nominated for this gang and for ``claimed``: until the gang binds,
    the next sessions hold those nodes whole for it (Reservations.held_for), and a plan counting
    on that room would leave the job it was meant for without a place (others take the rest)."""
    start = stmt.mark()
    if place_group_tasks(ssn, stmt, g, tasks, mask, Placement.NOMINATE) is not None or not (
        ssn.ext.ready(g)
    ):
        stmt.rollback(start)
        return False
    closed = claimed.copy()
    closed[[t.node for t in tasks]] = True
    if not place_again(ssn, stmt, g, moved, closed):
        stmt.rollback(start)
        return False
    return True


def _explain(ssn: Session, plan: Plan) -> None:
    g = plan.gang
    names = ", ".join(f"{v.pg.namespace}/{v.pg.name}" for v in plan.moved[:4])
    more = f" (+{len(plan.moved) - 4} more)" if len(plan.moved) > 4 else ""
    ssn.state.explain(
        g,
        Explanation(
            g.uid,
            ReasonCode.CONSOLIDATING,
            f"consolidating: moving {len(plan.moved)} job(s) ({plan.gpus:g} GPU(s)) {names}{more} "
            "to open a placement; pods nominated until they exit",
        ),
    )
