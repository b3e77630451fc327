"""fragmentation plugin (node score and shared-card choice) and the extra-scorer and
card-picker hooks of SessionConfig."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from operators.scheduler import SessionConfig, run_session
from operators.scheduler.plugins.fragmentation import FragModel, scarcity
from operators.scheduler.snapshot import Node, Snapshot

from .builders import binds, group, node, tasks

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from operators.scheduler.framework import CardPicker
    from operators.scheduler.state import SessionState, TaskInfo

# The FGD paper's fragment measure (the default before the CPU reach and scarcity were on).
PAPERS_MEASURE = SessionConfig(
    fragmentation_cpu_reach=0.0, fragmentation_levels=100, fragmentation_scarcity=0.0
)


def _cluster(*pending: tuple[str, int]) -> Snapshot:
    """Node a: card 0 has 300 milli used (700 free); node b: card 0 has 600 used (400 free)."""
    nodes = (node("a", gpus=2), node("b", gpus=2))
    running = [
        *tasks("ra", 1, gpu_milli=300, on=["a"], gpu_ids=(0,)),
        *tasks("rb", 1, gpu_milli=600, on=["b"], gpu_ids=(0,)),
    ]
    groups = [group("ra"), group("rb")]
    waiting = []
    for i, (uid, milli) in enumerate(pending):
        groups.append(group(uid, created=float(i)))  # scheduled in this order
        waiting.extend(tasks(uid, 1, gpu_milli=milli))
    return Snapshot(now=0, nodes=nodes, groups=tuple(groups), tasks=(*running, *waiting))


def test_a_slice_fills_the_fragment_others_cannot_use() -> None:
    # The workload is mostly 0.7-card pods: the 400 milli left on node b's card 0 is a
    # fragment for them, the 700 on node a's card 0 is not. A 0.4-card pod should use up the
    # fragment (node b), although node a comes first.
    snap = _cluster(("small", 400), ("big1", 700), ("big2", 700), ("big3", 700))
    config = SessionConfig(binpack_weight=0.0, topology_weight=0.0, fragmentation_weight=1.0)
    placed = {b.group: (b.node, b.gpu_ids) for b in binds(run_session(snap, config))}
    assert placed["small"] == ("b", (0,))
    # With no score at all the first node in order wins.
    unscored = SessionConfig(binpack_weight=0.0, topology_weight=0.0, fragmentation_weight=0.0)
    plain = {b.group: b.node for b in binds(run_session(snap, unscored))}
    assert plain["small"] == "a"
    # Scores rounded to a single level tie everywhere: node order decides again.
    coarse = dataclasses.replace(config, fragmentation_levels=1)
    assert {b.group: b.node for b in binds(run_session(snap, coarse))}["small"] == "a"


class _LastNode:
    name = "last-node"
    weight = 1.0

    def __init__(self, state: SessionState) -> None:
        self.size = state.nodes.size

    def score(self, t: TaskInfo, nodes: NDArray[np.int64]) -> NDArray[np.float64]:
        return np.asarray(nodes, dtype=np.float64) / self.size


def test_extra_scorers_join_the_weighted_sum() -> None:
    snap = Snapshot(
        now=0,
        nodes=(node("n0", gpus=1), node("n1", gpus=1), node("n2", gpus=1)),
        groups=(group("g"),),
        tasks=tuple(tasks("g", 1, gpus=1)),
    )
    config = SessionConfig(
        binpack_weight=0.0, topology_weight=0.0, fragmentation_weight=0.0, scorers=(_LastNode,)
    )
    assert [b.node for b in binds(run_session(snap, config))] == ["n2"]
    fresh = dataclasses.replace(config, fresh_scores=True)
    assert [b.node for b in binds(run_session(snap, fresh))] == ["n2"]


def _one_node(*pending: tuple[str, int]) -> Snapshot:
    groups, waiting = [], []
    for i, (uid, milli) in enumerate(pending):
        groups.append(group(uid, created=float(i)))
        waiting.extend(tasks(uid, 1, gpu_milli=milli))
    return Snapshot(now=0, nodes=(node("n", gpus=2),), groups=tuple(groups), tasks=tuple(waiting))


def test_slices_share_the_fullest_card_when_no_card_leaves_a_fragment() -> None:
    # Only half-card pods: "b" leaves no fragment on card 0 (0 left) nor on card 1 (0.5
    # left, usable), so the fuller card 0 takes it and card 1 stays whole for "c".
    snap = _one_node(("a", 500), ("b", 500), ("c", 500))
    cards = {b.group: b.gpu_ids for b in binds(run_session(snap))}
    assert cards == {"a": (0,), "b": (0,), "c": (1,)}


def test_a_slice_avoids_leaving_a_sliver_nobody_can_use() -> None:
    # Typical pods: 0.5 and 0.3 only. "b" (0.3) on card 0 after "a" (0.5) would leave 0.2 that
    # neither can use; on the fresh card 1 it leaves 0.7 that both can. The fullest-card rule
    # (fragmentation off) shares card 0 instead.
    snap = _one_node(("a", 500), ("b", 300), ("c", 500), ("d", 300))
    cards = {b.group: b.gpu_ids for b in binds(run_session(snap))}
    assert cards["a"] == (0,)
    assert cards["b"] == (1,)
    plain = SessionConfig(fragmentation_weight=0.0)
    assert {b.group: b.gpu_ids for b in binds(run_session(snap, plain))}["b"] == (0,)


def _last_card(state: SessionState) -> CardPicker:
    def pick(t: TaskInfo, node: int, count: int) -> tuple[tuple[int, ...], ...] | None:
        if not t.gpu_milli:
            return None  # whole cards: the plugins decide
        return ((int(state.nodes.gpu_capacity[node].nonzero()[0].max()),),) * count

    return pick


def test_extra_card_pickers_are_asked_first_and_may_pass() -> None:
    snap = Snapshot(
        now=0,
        nodes=(node("n", gpus=4),),
        groups=(group("s"), group("w", created=1.0)),
        tasks=(*tasks("s", 1, gpu_milli=500), *tasks("w", 1, gpus=1)),
    )
    config = SessionConfig(card_pickers=(_last_card,))
    cards = {b.group: b.gpu_ids for b in binds(run_session(snap, config))}
    assert cards["s"] == (3,)
    assert cards["w"] != (3,)


def _cpu_pod_first(*nodes: Node, gpu_pods: int, gpu_pod_cpu: int) -> Snapshot:
    """A 2-core CPU-only pod, then ``gpu_pods`` one-card pods of ``gpu_pod_cpu`` cores."""
    return Snapshot(
        now=0,
        nodes=nodes,
        groups=(group("cpu"), *(group(f"g{i}", created=1.0 + i) for i in range(gpu_pods))),
        tasks=(
            *tasks("cpu", 1, cpu=2),
            *(t for i in range(gpu_pods) for t in tasks(f"g{i}", 1, cpu=gpu_pod_cpu, gpus=1)),
        ),
    )


def _node_of(snap: Snapshot, uid: str, config: SessionConfig | None = None) -> str:
    return {b.group: b.node for b in binds(run_session(snap, config))}[uid]


def test_a_cpu_only_pod_takes_the_node_with_the_least_idle_gpu() -> None:
    # Both nodes keep room for the GPU pods after it, so the fragment score ties; on "small"
    # (2 idle cards, not 8) its cores can strand the fewest GPUs. Without the tie-break the
    # first node in order would take it.
    snap = _cpu_pod_first(
        node("big", cpu=32, gpus=8), node("small", cpu=32, gpus=2), gpu_pods=2, gpu_pod_cpu=3
    )
    assert _node_of(snap, "cpu") == "small"
    unscored = SessionConfig(binpack_weight=0.0, topology_weight=0.0, fragmentation_weight=0.0)
    assert _node_of(snap, "cpu", unscored) == "big"


def test_the_idle_gpu_tie_break_never_outweighs_a_stranded_gpu() -> None:
    # On "small" the CPU pod would leave 2 cores, too few for the 3-core GPU pods, stranding
    # its card: the fragment score says "big" although "big" has more idle GPU.
    snap = _cpu_pod_first(
        node("small", cpu=4, gpus=1), node("big", cpu=32, gpus=8), gpu_pods=3, gpu_pod_cpu=3
    )
    assert _node_of(snap, "cpu") == "big"


def test_a_cpu_only_pod_keeps_off_a_node_whose_cores_would_run_out_before_its_cards() -> None:
    # On "tight" two 3-core GPU pods fit (7 cores, 2 cards) and after the 2-core CPU pod one
    # still fits, so the paper's measure ties and the idle-GPU tie-break picks "tight" (2 idle
    # cards, not 4): its second card is then stranded. The CPU reach (0.5 by default) sees
    # the lost core.
    snap = _cpu_pod_first(
        node("tight", cpu=7, gpus=2), node("roomy", cpu=24, gpus=4), gpu_pods=6, gpu_pod_cpu=3
    )
    placed = {b.group: b.node for b in binds(run_session(snap, SessionConfig()))}
    assert placed["cpu"] == "roomy"
    assert len(placed) == 7  # every GPU pod found a card and its cores


def test_without_the_cpu_reach_the_cpu_only_pod_strands_a_card() -> None:
    # The same cluster under the paper's measure (reach 0): what the reach is for.
    snap = _cpu_pod_first(
        node("tight", cpu=7, gpus=2), node("roomy", cpu=24, gpus=4), gpu_pods=6, gpu_pod_cpu=3
    )
    placed = {b.group: b.node for b in binds(run_session(snap, PAPERS_MEASURE))}
    assert placed["cpu"] == "tight"
    assert len(placed) == 6


def _model(cpu_reach: float) -> FragModel:
    """Typical pods: one card with 12 cores (half), half a card with 2 cores, CPU-only."""
    return FragModel(
        cpu=np.asarray([12_000.0, 2_000.0, 4_000.0]),
        milli=np.asarray([1000.0, 500.0, 0.0]),
        cards=np.asarray([1.0, 1.0, 1.0]),
        freq=np.asarray([0.5, 0.25, 0.25]),
        access=np.ones((3, 1), dtype=np.bool_),
        cpu_reach=cpu_reach,
    )


def test_idle_gpu_beyond_the_cpu_reach_counts_by_its_weight() -> None:
    cards = np.full((1, 8), 1000.0)  # 8 idle cards, 48 cores free
    # Paper's measure: every typical GPU pod fits, only the CPU-only pod sees a fragment.
    assert _model(0.0).amount(cards, np.asarray([48_000.0]), np.asarray([0]))[0] == 2000.0
    # 48 cores feed 4 one-card pods: 4,000 milli beyond reach, half of it counted, weight 0.5;
    # the half-card pods' 2 cores reach all 8 cards (24 pods' worth).
    reach = _model(0.5).amount(cards, np.asarray([48_000.0]), np.asarray([0]))[0]
    assert reach == 2000.0 + 0.5 * 0.5 * 4000.0


@settings(max_examples=200, deadline=None)
@given(
    free=st.lists(st.integers(0, 1000), min_size=4, max_size=4),
    cores=st.integers(0, 64_000),
    taken=st.integers(0, 64_000),
)
def test_the_cpu_reach_only_adds_and_grows_as_cores_go(
    free: list[int], cores: int, taken: int
) -> None:
    cards = np.asarray([free], dtype=np.float64)
    row = np.asarray([0])
    paper = _model(0.0).amount(cards, np.asarray([float(cores)]), row)[0]
    reach = _model(0.5).amount(cards, np.asarray([float(cores)]), row)[0]
    assert paper - 1e-9 <= reach <= float(cards.sum()) + 1e-9
    fewer = _model(0.5).amount(cards, np.asarray([float(max(cores - taken, 0))]), row)[0]
    assert fewer >= reach - 1e-9


@pytest.mark.parametrize(
    "bad",
    [
        {"fragmentation_levels": 0},
        {"fragmentation_levels": 126},
        {"fragmentation_cpu_reach": -0.5},
        {"fragmentation_cpu_reach": float("nan")},
        {"fragmentation_scarcity": -1.0},
        {"fragmentation_scarcity": float("inf")},
    ],
)
def test_a_fragmentation_setting_out_of_range_is_refused_when_the_config_is_made(
    bad: dict[str, float],
) -> None:
    with pytest.raises(ValueError, match="fragmentation_"):
        SessionConfig(**bad)  # type: ignore[arg-type]


def _wide_node_needed() -> Snapshot:
    """Only "wide" (16 cores) fits the 2-card, 15-core pod; "std" (12 cores) fits the rest.
    Three full nodes run the common pods (one card, 6 cores). Pending: an 8-core one-card
    pod, then the large pod."""
    full = [node(f"full{i}", cpu=12, gpus=2) for i in range(3)]
    running = [
        t for i in range(3) for t in tasks(f"run{i}", 2, cpu=6, gpus=1, on=[f"full{i}", f"full{i}"])
    ]
    return Snapshot(
        now=0,
        nodes=(node("wide", cpu=16, gpus=2), node("std", cpu=12, gpus=2), *full),
        groups=(
            *(group(f"run{i}", min_member=2) for i in range(3)),
            group("small", created=1.0),
            group("large", created=2.0),
        ),
        tasks=(
            *running,
            *tasks("small", 1, cpu=8, gpus=1),
            *tasks("large", 1, cpu=15, gpus=2),
        ),
    )


def test_a_small_pod_keeps_off_the_only_node_a_large_pod_fits() -> None:
    # The paper's measure weighs the large pod by its frequency (1 of 8 tasks): breaking
    # "wide" for it costs 125 milli, while on "std" the small pod leaves a card no common pod
    # can use (750). Scarcity adds what the large pod needs of the few nodes it fits (all of
    # wide's GPU, which is 20% of the cluster's: 0.8), so "wide" costs more than "std".
    snap = _wide_node_needed()
    reach = dataclasses.replace(
        PAPERS_MEASURE, fragmentation_cpu_reach=1.0, fragmentation_levels=20
    )
    for scarce in (
        dataclasses.replace(reach, fragmentation_scarcity=0.5),
        dataclasses.replace(PAPERS_MEASURE, fragmentation_scarcity=0.5),
        SessionConfig(),  # the default: reach 0.5, levels 20, scarcity 0.5
    ):
        placed = {b.group: b.node for b in binds(run_session(snap, scarce))}
        assert placed["small"] == "std"
        assert placed["large"] == "wide"
    # Without it - the CPU reach alone, and the paper's measure - the small pod takes "wide"
    # and the large pod finds no node.
    for old in (reach, PAPERS_MEASURE):
        placed = {b.group: b.node for b in binds(run_session(snap, old))}
        assert placed["small"] == "wide"
        assert "large" not in placed


def test_scarcity_is_the_need_for_the_gpu_of_the_few_nodes_a_pod_fits() -> None:
    node_cards = np.asarray([[1000.0, 1000.0], [1000.0, 1000.0], [1000.0, 0.0]])
    node_cpu = np.asarray([16_000.0, 12_000.0, 12_000.0])
    got = scarcity(
        # a 15-core two-card pod asking 4 cards (twice what fits it), a one-card pod, a CPU pod
        demand=np.asarray([4000.0, 1000.0, 0.0]),
        cpu=np.asarray([15_000.0, 6_000.0, 4_000.0]),
        milli=np.asarray([1000.0, 1000.0, 0.0]),
        cards=np.asarray([2.0, 1.0, 1.0]),
        access=np.ones((3, 3), dtype=np.bool_),
        node_cpu=node_cpu,
        node_cards=node_cards,
    )
    # Need capped at 1, times the 3/5 of the GPU elsewhere; the one-card pod fits every node.
    assert got.tolist() == pytest.approx([0.6, 0.0, 0.0])
    # A predicate that keeps the one-card pod to node 2 makes its one card scarce: 1 * 4/5.
    access = np.ones((3, 3), dtype=np.bool_)
    access[1, :2] = False
    got = scarcity(
        np.asarray([4000.0, 1000.0, 0.0]),
        np.asarray([15_000.0, 6_000.0, 4_000.0]),
        np.asarray([1000.0, 1000.0, 0.0]),
        np.asarray([2.0, 1.0, 1.0]),
        access,
        node_cpu,
        node_cards,
    )
    assert got.tolist() == pytest.approx([0.6, 0.8, 0.0])
