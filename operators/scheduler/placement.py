"""Placing a set of tasks onto nodes inside a statement: the hot path of every action.

Tasks with identical shape are placed together: one vectorised pass computes how many replicas
fit on every node (the minimum over resource dimensions, and over free GPU cards), the scorers
rank the nodes that fit, and replicas are dealt out best node first. Network topology narrows the
node mask to one domain (best fit: the fullest domain that still holds the whole set); same-ToR
units do the same per unit.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import TYPE_CHECKING

import numpy as np

from operators.scheduler.decisions import Explanation, ReasonCode
from operators.scheduler.shapeviews import NOMINATED_BONUS as _NOMINATED_BONUS
from operators.scheduler.snapshot import GPU_MILLI_PER_CARD, HOSTNAME_LABEL, TopologyMode

if TYPE_CHECKING:
    from collections.abc import Callable

    from numpy.typing import NDArray

    from operators.scheduler.context import Session
    from operators.scheduler.nodes import NodeIndex
    from operators.scheduler.snapshot import NetworkTopology
    from operators.scheduler.state import GroupInfo, Placement, SessionState, TaskInfo
    from operators.scheduler.statement import Statement

_EPS = 1e-6
# Below half a fragmentation score level (1/20 by default; SessionConfig.fragmentation_levels
# stays at most 125), so the fill of a node's network domain only orders nodes that score alike.
DOMAIN_FILL_TIEBREAK = 0.004


class PlaceFailure:
    """Why a placement failed. The message is built only when someone reads it: most
    failures are retried elsewhere (another pool, after preemption) and never shown."""

    __slots__ = ("_detail", "_message", "code")

    def __init__(self, code: ReasonCode, message: str | Callable[[], str]) -> None:
        self.code = code
        self._message = message if isinstance(message, str) else None
        self._detail = None if isinstance(message, str) else message

    @property
    def message(self) -> str:
        if self._message is None:
            assert self._detail is not None
            self._message = self._detail()
        return self._message

    def explanation(self, g: GroupInfo) -> Explanation:
        return Explanation(g.uid, self.code, self.message)


def fit_counts(ssn: Session, t: TaskInfo, mask: NDArray[np.bool_]) -> NDArray[np.float64]:
    """How many more replicas shaped like ``t`` fit on each node (0 outside ``mask``)."""
    return ssn.views.get(t).counts * mask


def _gpu_text(t: TaskInfo) -> str:
    if t.gpu_cards:
        return f"{t.gpu_cards} GPU{'s' if t.gpu_cards > 1 else ''}"
    if t.gpu_milli:
        return f"{t.gpu_milli / GPU_MILLI_PER_CARD:g} GPU"
    return ""


def _shape_failure(
    ssn: Session,
    t: TaskInfo,
    mask: NDArray[np.bool_],
    counts: NDArray[np.float64],
    need: int,
    where: str,
) -> PlaceFailure:
    """Count, per reason, the nodes that cannot take one more replica (numbers now, text
    only if someone reads it)."""
    state = ssn.state
    total = state.nodes.size
    fit = int(counts.sum())
    # Predicate masks are static for the session and ``counts`` is this call's own array, so
    # everything can be counted when (and if) the text is read.

    def text() -> str:
        feasible = ssn.ext.feasible(t)
        outside = int((feasible & ~mask).sum())
        short = int((feasible & mask).sum()) - int((counts > 0).sum())
        parts = [f"{count} {name}" for name, count in ssn.ext.rejections(t)]
        if outside:
            parts.append(f"{outside} outside {where}")
        if short:
            parts.append(f"{short} insufficient free resources")
        role = f" of task {t.task.role!r}" if t.task.role else ""
        detail = "; ".join(parts) if parts else "no nodes"
        return (
            f"needs {need} pod(s){role} with {state.space.describe(t.req)} each, only {fit} "
            f"fit (of {total} nodes: {detail})"
        )

    return PlaceFailure(ReasonCode.UNSCHEDULABLE, text)


def place_shape(
    ssn: Session,
    stmt: Statement,
    tasks: list[TaskInfo],
    mask: NDArray[np.bool_],
    kind: Placement,
    where: str,
) -> PlaceFailure | None:
    """Place identical tasks, best-scored nodes first; all or nothing (caller rolls back)."""
    t0 = tasks[0]
    need = len(tasks)
    view = ssn.views.get(t0)
    counts = view.counts * ssn.views.allowed(t0, mask, ssn.ext.feasible)
    if ssn.reservations.shared:
        ssn.reservations.cap(tasks, counts)  # a node held for it and for others too
    if counts.sum() < need:
        return _shape_failure(ssn, t0, mask, counts, need, where)
    # Best node first, one argmax per node used: a gang lands on at most ``need`` nodes, and
    # usually on a handful, so this beats selecting and sorting the top ``need`` of thousands.
    # argmax returns the lowest node index among equal scores (a deterministic tie-break).
    scores = np.where(counts > 0, view.scores, -np.inf)
    if t0.gpu_cards or t0.gpu_milli:
        fill = domain_fill(ssn.state)
        if fill is not None:
            scores += fill
    held = {t.nominated for t in tasks if t.nominated >= 0}
    for node in held:
        if counts[node] > 0:
            scores[node] += _NOMINATED_BONUS
    placed = 0
    state = ssn.state
    while placed < need:
        node = int(scores.argmax())
        scores[node] = -np.inf
        room = min(int(counts[node]), need - placed)
        batch = tuple(tasks[placed : placed + room])
        # One shape of one group: the batch shares a request vector (uniform), and the
        # queue's usage is added once for all of it below.
        gpus = ssn.ext.pick_cards(t0, node, room)
        stmt.allocate(batch, node, gpus, kind, uniform=True, usage=False)
        placed += room
    if t0.group.queue >= 0:
        state.queues.add_usage(t0.group.queue, t0.req * need, 1)
    return None


def domain_fill(state: SessionState) -> NDArray[np.float64] | None:
    """Per node, up to DOMAIN_FILL_TIEBREAK: the less free GPU the node has, then the less free
    GPU its ToR has (the finest network tier above hostname), the more; None without a network
    topology.

    Among nodes that score alike, a GPU pod goes to the fullest node, and among equally full
    nodes to the fullest ToR that has room (best fit at node, then ToR): small jobs fill nodes
    and ToRs already in use, and whole nodes and whole ToRs stay free for gangs that need
    them. Read from the current holdings at each placement (a node's score cache cannot carry
    it: it changes when other nodes of the ToR change)."""
    nodes = state.nodes
    level = _fill_level(nodes)
    if level is None:
        return None
    domains = nodes.tier_domains[level]
    gpu = state.space.gpu
    node_free = np.maximum(state.free[:, gpu], 0.0)
    domain_free = np.bincount(domains, weights=node_free)
    largest = float(nodes.tier_largest[level][gpu])
    node_most = float(nodes.capacity[:, gpu].max()) if nodes.size else 0.0
    if largest <= 0 or node_most <= 0:
        return None
    # The ToR term stays below one card of the node term, so it orders only equally full nodes.
    card = GPU_MILLI_PER_CARD / node_most
    value = (1.0 - node_free / node_most) + 0.99 * card * (1.0 - domain_free[domains] / largest)
    return np.asarray(DOMAIN_FILL_TIEBREAK * value / (1.0 + card), dtype=np.float64)


def _fill_level(nodes: NodeIndex) -> int | None:
    topo = nodes.topology
    if topo is None or not nodes.tier_domains:
        return None
    for level in range(len(topo.levels) - 1, -1, -1):
        if topo.levels[level].label != HOSTNAME_LABEL:
            return level
    return None


def by_shape(tasks: list[TaskInfo]) -> list[list[TaskInfo]]:
    if not tasks:
        return []
    first = tasks[0].shape
    if all(t.shape is first for t in tasks):  # the common case: one shape per gang
        return [tasks]
    shapes: dict[tuple[object, ...], list[TaskInfo]] = defaultdict(list)
    for t in tasks:
        shapes[t.shape].append(t)
    # Hardest first: most GPU, then most CPU per replica.
    return sorted(shapes.values(), key=lambda ts: (-ts[0].req[2], -ts[0].req[0], -len(ts)))


def _place_flat(
    ssn: Session,
    stmt: Statement,
    tasks: list[TaskInfo],
    mask: NDArray[np.bool_],
    kind: Placement,
    where: str,
    split_units: bool = True,
) -> PlaceFailure | None:
    units: dict[str, list[TaskInfo]] = defaultdict(list)
    loose: list[TaskInfo] = []
    for t in tasks:
        if t.task.unit and split_units:
            units[t.task.unit].append(t)
        else:
            loose.append(t)
    if units:
        level = _unit_level(ssn, tasks[0].group)
        for unit_tasks in sorted(units.values(), key=len, reverse=True):
            if level is None:
                loose.extend(unit_tasks)
                continue
            failure = _place_in_one_domain(
                ssn, stmt, unit_tasks, mask, kind, level, where, split_units=False
            )
            if failure is not None:
                return failure
    for shape_tasks in by_shape(loose):
        failure = place_shape(ssn, stmt, shape_tasks, mask, kind, where)
        if failure is not None:
            return failure
    return None


def _unit_level(ssn: Session, g: GroupInfo) -> int | None:
    nodes = ssn.state.nodes
    if not nodes.tier_domains:
        return None
    topo = nodes.topology
    if g.pg.unit_tier and topo is not None:
        found = topo.level_index(g.pg.unit_tier)
        if found is not None:
            return found
    # Default: the tier just above hostname (the ToR).
    return max(len(nodes.tier_domains) - 2, 0)


def _place_in_one_domain(
    ssn: Session,
    stmt: Statement,
    tasks: list[TaskInfo],
    mask: NDArray[np.bool_],
    kind: Placement,
    level: int,
    where: str,
    split_units: bool = True,
) -> PlaceFailure | None:
    """All ``tasks`` inside one domain of tier ``level``: fullest feasible domain first."""
    state = ssn.state
    domains = state.nodes.tier_domains[level]
    tier = state.nodes.tier_names[level]
    shapes = by_shape(tasks)
    size = int(domains.max()) + 1 if len(domains) else 0
    feasible = np.ones(size, dtype=np.bool_)
    slack = np.zeros(size, dtype=np.float64)
    best_fit = np.zeros(size, dtype=np.float64)
    for shape_tasks in shapes:
        counts = fit_counts(ssn, shape_tasks[0], mask & ssn.ext.feasible(shape_tasks[0]))
        per_domain = np.bincount(domains, weights=counts, minlength=size)
        feasible &= per_domain >= len(shape_tasks)
        slack += per_domain - len(shape_tasks)
        best_fit = np.maximum(best_fit, per_domain) if shape_tasks is shapes[0] else best_fit
    # The shapes share each domain's room: its free room must hold all of them together
    # (a necessary condition; counting each shape's fit alone would pass domains that hold
    # every shape but not both, and try them before one that holds the whole set).
    total = _total_request(tasks)
    for d in np.flatnonzero(total > 0).tolist():
        room = np.bincount(
            domains, weights=np.where(mask, np.maximum(state.free[:, d], 0.0), 0.0), minlength=size
        )
        feasible &= room + _EPS >= total[d]
    candidates = np.flatnonzero(feasible)
    if len(candidates) == 0:
        t0 = shapes[0][0]
        gpus = _gpu_text(t0)
        need = len(shapes[0])
        unit = f" (unit {tasks[0].task.unit!r})" if tasks[0].task.unit else ""
        what = f"{need * t0.gpu_cards} GPUs" if t0.gpu_cards else f"{need} pods"
        largest = int(best_fit.max()) if size else 0
        have = f"{largest * t0.gpu_cards} GPUs" if t0.gpu_cards else f"{largest} pods"
        return PlaceFailure(
            ReasonCode.TOPOLOGY,
            f"needs {what}{unit} in one {tier}"
            f"{f' ({need} pods of {gpus})' if gpus else ''}; largest free {tier} has {have}",
        )
    # Fullest domain first (best fit); every domain that may hold the set is tried, since
    # fit counts per shape cannot tell which one will.
    order = candidates[np.argsort(slack[candidates], kind="stable")]
    last: PlaceFailure | None = None
    for domain in order.tolist():
        mark = stmt.mark()
        last = _place_flat(
            ssn,
            stmt,
            tasks,
            mask & (domains == domain),
            kind,
            f"{where} {tier} {domain}",
            split_units,
        )
        if last is None:
            return None
        stmt.rollback(mark)
    return last


def _total_request(tasks: list[TaskInfo]) -> NDArray[np.float64]:
    first = tasks[0].req
    if all(t.req is first for t in tasks):
        return first * len(tasks)
    return np.asarray(np.sum([t.req for t in tasks], axis=0), dtype=np.float64)


def place_group_tasks(
    ssn: Session,
    stmt: Statement,
    g: GroupInfo,
    tasks: list[TaskInfo],
    mask: NDArray[np.bool_],
    kind: Placement,
    where: str = "the allowed pools",
) -> PlaceFailure | None:
    """Place ``tasks`` of ``g`` within ``mask``, honouring the group's network topology.

    Hard: one domain at ``highestTier`` or finer, trying the finest tier first. Soft: the same
    preference, then anywhere. On failure the caller discards or rolls back the statement.
    """
    if not tasks:
        return None
    state = ssn.state
    request = topology_request(state, g)
    if request is None or not state.nodes.tier_domains or state.nodes.topology is None:
        return _place_flat(ssn, stmt, tasks, mask, kind, where)
    highest = state.nodes.topology.level_index(request.highest_tier) if request.highest_tier else 0
    if highest is None:
        highest = 0
    failure: PlaceFailure | None = None
    finest_first = range(len(state.nodes.tier_domains) - 1, highest - 1, -1)
    total = _total_request(tasks)
    for level in finest_first:
        if level != highest and not bool((total <= state.nodes.tier_largest[level]).all()):
            continue  # no domain of this tier is big enough even when empty: try coarser
        mark = stmt.mark()
        failure = _place_in_one_domain(ssn, stmt, tasks, mask, kind, level, where)
        if failure is None:
            return None
        stmt.rollback(mark)
        if level == highest:
            break
    if request.mode == TopologyMode.SOFT:
        return _place_flat(ssn, stmt, tasks, mask, kind, where)
    return _until_soft(failure, g, state.now)


def topology_request(state: SessionState, g: GroupInfo) -> NetworkTopology | None:
    """The group's network topology request in force this session (a hard request with a
    ``soft_after`` bound is soft once the group has waited that long)."""
    request = g.pg.network_topology
    return None if request is None else request.at(g.pg.created, state.now)


def _until_soft(failure: PlaceFailure | None, g: GroupInfo, now: float) -> PlaceFailure | None:
    """A hard request's failure, saying when it will be placed anywhere (if it will)."""
    request = g.pg.network_topology
    soft_at = request.soft_at(g.pg.created) if request is not None else None
    if failure is None or soft_at is None:
        return failure
    first = failure

    def text() -> str:
        return f"{first.message}; may spread over domains in {math.ceil(soft_at - now)} s"

    return PlaceFailure(first.code, text)
