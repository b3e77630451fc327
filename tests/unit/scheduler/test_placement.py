"""predicates, binpack and topology plugins: where pods land and which GPU cards they get."""

from __future__ import annotations

import dataclasses

from operators.scheduler import SessionConfig, run_session
from operators.scheduler.decisions import ReasonCode
from operators.scheduler.placement import domain_fill
from operators.scheduler.snapshot import (
    GpuTopology,
    GroupPhase,
    NetworkTopology,
    NodeSelectorTerm,
    SelectorOperator,
    SelectorRequirement,
    Snapshot,
    Taint,
    TaintEffect,
    Toleration,
    Topology,
    TopologyLevel,
    TopologyMode,
    parse_gpu_topology,
)
from operators.scheduler.state import SessionState

from .builders import binds, group, node, tasks

LAYOUT = GpuTopology(numa=((0, 1, 2, 3), (4, 5, 6, 7)), nvlink=((0, 1), (2, 3), (4, 5), (6, 7)))
TOPO = Topology(
    name="t",
    levels=(
        TopologyLevel("spine", "spine"),
        TopologyLevel("tor", "tor"),
        TopologyLevel("hostname", "kubernetes.io/hostname"),
    ),
)


def test_parse_gpu_topology_annotation() -> None:
    text = '{"numa": [[0,1,2,3],[4,5,6,7]], "nvlink": [[0,1],[2,3],[4,5],[6,7]]}'
    assert parse_gpu_topology(text) == LAYOUT
    assert parse_gpu_topology("not json") == GpuTopology()
    assert parse_gpu_topology('{"numa": [[0, "x"]]}') == GpuTopology()
    assert parse_gpu_topology(None) == GpuTopology()


def test_node_selector_affinity_and_taints() -> None:
    gpu_taint = Taint("gpu", TaintEffect.NO_SCHEDULE)
    nodes = (
        node("plain", labels={"zone": "a"}),
        node("tainted", labels={"zone": "b"}, taints=(gpu_taint,)),
        node("cordoned", labels={"zone": "b"}, unschedulable=True),
    )
    selected = tasks(
        "s", 1, node_selector={"zone": "b"}, tolerations=(Toleration("gpu", "Exists"),)
    )
    affinity = (NodeSelectorTerm((SelectorRequirement("zone", SelectorOperator.IN, ("a",)),)),)
    pinned = tasks("a", 1, affinity=affinity)
    blocked = tasks("b", 1, node_selector={"zone": "b"})
    snap = Snapshot(
        now=0,
        nodes=nodes,
        groups=(group("s"), group("a"), group("b")),
        tasks=(*selected, *pinned, *blocked),
    )
    result = run_session(snap)
    where = {b.group: b.node for b in binds(result)}
    assert where == {"s": "tainted", "a": "plain"}
    message = result.explanations["b"].message
    assert result.explanations["b"].code == ReasonCode.UNSCHEDULABLE
    assert "1 node selector mismatch" in message
    assert "1 taints not tolerated" in message
    assert "1 not ready or cordoned" in message


def test_pods_per_node_limit() -> None:
    snap = Snapshot(
        now=0,
        nodes=(node("n0", cpu=64, pods=2), node("n1", cpu=64, pods=2)),
        groups=(group("g", min_member=5),),
        tasks=tuple(tasks("g", 5)),
    )
    assert not binds(run_session(snap))


def test_binpack_fills_one_node_before_opening_another() -> None:
    snap = Snapshot(
        now=0,
        nodes=tuple(node(f"n{i}", cpu=8) for i in range(4)),
        groups=tuple(group(f"g{i}") for i in range(4)),
        tasks=tuple(t for i in range(4) for t in tasks(f"g{i}", 1, cpu=2)),
    )
    assert len({b.node for b in binds(run_session(snap))}) == 1


def test_fractional_gpus_share_a_card_before_splitting_a_fresh_one() -> None:
    # The topology plugin's card choice (best fit); with fragmentation on, its own picker
    # decides for shared cards (test_fragmentation.py).
    snap = Snapshot(
        now=0,
        nodes=(node("n0", gpus=8, layout=LAYOUT),),
        groups=(group("a"), group("b"), group("c")),
        tasks=(
            *tasks("a", 1, gpu_milli=500),
            *tasks("b", 1, gpu_milli=300),
            *tasks("c", 1, gpu_milli=400),
        ),
    )
    config = SessionConfig(fragmentation_weight=0.0)
    cards = {b.group: b.gpu_ids for b in binds(run_session(snap, config))}
    assert cards["a"] == cards["b"]  # 0.5 + 0.3 share a card
    assert cards["c"] != cards["a"]  # 0.4 more would overfill it


def test_multi_gpu_pod_gets_one_nvlink_island() -> None:
    # Cards 0 and 3 are taken: a 2-card pod must get an intact pair, not {1, 2}.
    first, second = tasks("h", 2, gpus=1, on=["n0"])
    holder = [dataclasses.replace(first, gpu_ids=(0,)), dataclasses.replace(second, gpu_ids=(3,))]
    snap = Snapshot(
        now=0,
        nodes=(node("n0", gpus=8, layout=LAYOUT),),
        groups=(group("h", min_member=2), group("p")),
        tasks=(*holder, *tasks("p", 1, gpus=2)),
    )
    [bind] = binds(run_session(snap))
    assert bind.gpu_ids in ((4, 5), (6, 7))


def test_four_gpu_pod_stays_in_one_numa_node() -> None:
    snap = Snapshot(
        now=0,
        nodes=(node("n0", gpus=8, layout=LAYOUT),),
        groups=(group("a"), group("b")),
        tasks=(*tasks("a", 1, gpus=2), *tasks("b", 1, gpus=4)),
    )
    ids = {b.group: set(b.gpu_ids) for b in binds(run_session(snap))}
    assert ids["b"] in ({0, 1, 2, 3}, {4, 5, 6, 7})
    assert not ids["a"] & ids["b"]


def _tor_cluster() -> tuple:  # type: ignore[type-arg]
    # 2 ToRs x 3 nodes x 4 GPUs; tor0 has 3 busy cards... built by the callers.
    return tuple(
        node(
            f"t{t}n{i}",
            gpus=4,
            cpu=64,
            labels={"spine": "s0", "tor": f"tor{t}", "kubernetes.io/hostname": f"t{t}n{i}"},
        )
        for t in range(2)
        for i in range(3)
    )


def test_hard_tor_constraint_explains_the_largest_free_tor() -> None:
    snap = Snapshot(
        now=0,
        nodes=_tor_cluster(),
        groups=(
            group("g", min_member=4, network_topology=NetworkTopology(TopologyMode.HARD, "tor")),
        ),
        tasks=tuple(tasks("g", 4, gpus=4)),
        topology=TOPO,
    )
    result = run_session(snap)
    assert not binds(result)
    explanation = result.explanations["g"]
    assert explanation.code == ReasonCode.TOPOLOGY
    assert "needs 16 GPUs in one tor" in explanation.message
    assert "largest free tor has 12 GPUs" in explanation.message


def test_hard_tor_gang_lands_in_one_tor_and_soft_may_spread() -> None:
    hard = NetworkTopology(TopologyMode.HARD, "tor")
    snap = Snapshot(
        now=0,
        nodes=_tor_cluster(),
        groups=(group("g", min_member=3, network_topology=hard),),
        tasks=tuple(tasks("g", 3, gpus=4)),
        topology=TOPO,
    )
    nodes = {b.node for b in binds(run_session(snap))}
    assert len({n[:2] for n in nodes}) == 1
    soft = NetworkTopology(TopologyMode.SOFT, "tor")
    snap_soft = Snapshot(
        now=0,
        nodes=_tor_cluster(),
        groups=(group("g", min_member=4, network_topology=soft),),
        tasks=tuple(tasks("g", 4, gpus=4)),
        topology=TOPO,
    )
    assert len(binds(run_session(snap_soft))) == 4


def test_same_tor_units() -> None:
    unit_a = tasks("g", 2, gpus=4, unit="a")
    unit_b = tasks("g", 2, gpus=4, unit="b", start=2)
    snap = Snapshot(
        now=0,
        nodes=_tor_cluster(),
        groups=(group("g", min_member=4),),
        tasks=(*unit_a, *unit_b),
        topology=TOPO,
    )
    where = {b.task: b.node[:2] for b in binds(run_session(snap))}
    assert where["g-0"] == where["g-1"]
    assert where["g-2"] == where["g-3"]


def _tors(mode: TopologyMode) -> Snapshot:
    """Three ToRs where each pod shape fits on its own but not both; one empty ToR."""
    topo = Topology(
        name="t",
        levels=(TopologyLevel("tor", "tor"), TopologyLevel("hostname", "kubernetes.io/hostname")),
    )
    busy = [node(f"busy{i}", cpu=8, gpus=1, labels={"tor": f"t{i}"}) for i in range(3)]
    free = [node(f"free{i}", cpu=4, gpus=1, labels={"tor": "t9"}) for i in range(2)]
    gang = [*tasks("g", 1, cpu=3, gpus=1, role="gpu"), *tasks("g", 1, cpu=3, role="cpu")]
    return Snapshot(
        now=0,
        nodes=(*busy, *free),
        topology=topo,
        groups=(
            group("filler", phase=GroupPhase.RUNNING),
            group("g", min_member=2, network_topology=NetworkTopology(mode, "tor")),
        ),
        tasks=(*tasks("filler", 3, cpu=4, on=[n.name for n in busy]), *gang),
    )


def test_hard_topology_finds_the_one_tor_that_holds_every_pod_shape() -> None:
    placed = {b.node for b in binds(run_session(_tors(TopologyMode.HARD))) if b.group == "g"}
    assert placed
    assert placed <= {"free0", "free1"}


def test_soft_topology_prefers_the_tor_that_holds_the_whole_gang() -> None:
    placed = {b.node for b in binds(run_session(_tors(TopologyMode.SOFT))) if b.group == "g"}
    assert placed
    assert placed <= {"free0", "free1"}


def test_bound_gpu_pod_without_card_ids_still_holds_its_cards() -> None:
    snap = Snapshot(
        now=0,
        nodes=(node("n0", cpu=16, gpus=4),),
        groups=(group("running", phase=GroupPhase.RUNNING), group("a"), group("b")),
        tasks=(
            *tasks("running", 1, cpu=1, gpus=2, on=["n0"]),  # no gpu_ids (e.g. spec.nodeName)
            *tasks("a", 1, cpu=1, gpus=2),
            *tasks("b", 1, cpu=1, gpus=2),
        ),
    )
    placed = binds(run_session(snap))
    assert len(placed) == 1  # two cards are free, not four
    assert len(placed[0].gpu_ids) == 2


def _racks(tors: dict[str, int], gpus: int = 4) -> tuple:  # type: ignore[type-arg]
    """Nodes ``<tor>n<i>`` of ``gpus`` cards, ToRs in the given order (node order = list order)."""
    return tuple(
        node(
            f"{tor}n{i}",
            gpus=gpus,
            cpu=64,
            labels={"spine": "s0", "tor": tor, "kubernetes.io/hostname": f"{tor}n{i}"},
        )
        for tor, count in tors.items()
        for i in range(count)
    )


def test_a_gpu_pod_fills_the_tor_in_use_and_keeps_a_whole_tor_for_the_gang() -> None:
    # tor0 comes first in node order and is empty; tor1 already runs a job. The one-node job
    # takes a node of tor1, so the 3-node gang that arrives next still finds a whole ToR.
    hard = NetworkTopology(TopologyMode.HARD, "tor")
    snap = Snapshot(
        now=0,
        nodes=_racks({"tor0": 3, "tor1": 3}),
        groups=(
            group("running", phase=GroupPhase.RUNNING),
            group("small", created=1.0),
            group("gang", min_member=3, network_topology=hard, created=2.0),
        ),
        tasks=(
            *tasks("running", 1, gpus=4, on=["tor1n0"]),
            *tasks("small", 1, gpus=4),
            *tasks("gang", 3, gpus=4),
        ),
        topology=TOPO,
    )
    where = {b.task: b.node for b in binds(run_session(snap))}
    assert where["small-0"].startswith("tor1")
    assert {where[f"gang-{i}"] for i in range(3)} == {"tor0n0", "tor0n1", "tor0n2"}


def test_among_empty_tors_a_gpu_pod_takes_the_smallest() -> None:
    snap = Snapshot(
        now=0,
        nodes=_racks({"big": 4, "small": 2}),
        groups=(group("g"),),
        tasks=tuple(tasks("g", 1, gpus=1)),
        topology=TOPO,
    )
    assert binds(run_session(snap))[0].node.startswith("small")


def test_tor_fill_only_orders_nodes_that_score_alike() -> None:
    # Filling a half-used node (fragmentation) beats opening a fresh node in a fuller ToR.
    snap = Snapshot(
        now=0,
        nodes=_racks({"tor0": 2, "tor1": 3}),
        groups=(group("running", phase=GroupPhase.RUNNING), group("g")),
        tasks=(
            *tasks("running", 1, gpus=2, on=["tor0n0"]),
            *tasks("running", 2, gpus=4, on=["tor1n0", "tor1n1"], start=1),
            *tasks("g", 1, gpus=2),
        ),
        topology=TOPO,
    )
    assert [b.node for b in binds(run_session(snap)) if b.group == "g"] == ["tor0n0"]


def test_tor_fill_leaves_pods_without_gpus_to_binpack() -> None:
    # A CPU-only pod is placed as without a network topology (binpack: the node in use).
    def placed(topology: Topology | None) -> list[str]:
        snap = Snapshot(
            now=0,
            nodes=_racks({"tor0": 2, "tor1": 2}),
            groups=(group("running", phase=GroupPhase.RUNNING), group("g")),
            tasks=(*tasks("running", 1, gpus=4, on=["tor1n0"]), *tasks("g", 1, cpu=2)),
            topology=topology,
        )
        return [b.node for b in binds(run_session(snap)) if b.group == "g"]

    assert placed(TOPO) == placed(None) == ["tor1n0"]


def test_tor_fill_orders_the_fullest_node_first_then_the_fullest_tor() -> None:
    snap = Snapshot(
        now=0,
        nodes=_racks({"tor0": 2, "tor1": 2}, gpus=8),
        groups=(group("running", phase=GroupPhase.RUNNING),),
        tasks=(
            *tasks("running", 1, gpus=4, on=["tor0n0"]),
            *tasks("running", 1, gpus=4, on=["tor1n0"], start=1),
            *tasks("running", 1, gpus=8, on=["tor1n1"], start=2),
        ),
        topology=TOPO,
    )
    fill = domain_fill(SessionState(snap, SessionConfig()))
    assert fill is not None
    by_name = dict(zip((n.name for n in snap.nodes), fill.tolist(), strict=True))
    # Half-used nodes before the empty one, the one in the fuller ToR first ...
    assert by_name["tor1n0"] > by_name["tor0n0"] > by_name["tor0n1"]
    # ... and all of it below half a fragmentation score level.
    assert max(fill) < 0.005
    assert (
        domain_fill(SessionState(dataclasses.replace(snap, topology=None), SessionConfig())) is None
    )
