"""Pool membership as the pool operator mirrors it (operators/controllers/pool_membership.py)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from operators.api import labels as L
from operators.controllers.pool_membership import (
    PoolObject,
    plan_membership,
    pool_status_patches,
)
from operators.runtime import records as R
from operators.scheduler import snapshot as S


def pool(name: str, **match: str) -> S.Pool:
    return R.pool({"metadata": {"name": name}, "spec": {"nodeSelector": {"matchLabels": match}}})


CPU = pool("cpu-pool", kind="cpu")
GPU = pool("gpu-pool", kind="gpu")
ZONE_A = pool("zone-a", zone="a")


def test_each_node_goes_to_its_only_matching_pool_and_conflicts_go_to_default() -> None:
    nodes = {
        "c1": {"kind": "cpu"},
        "g1": {"kind": "gpu", L.POOL: "gpu-pool"},
        "both": {"kind": "gpu", "zone": "a"},
        "none": {},
    }
    plan = plan_membership(nodes, [CPU, GPU, ZONE_A])
    assert plan.members == {
        "cpu-pool": ["c1"],
        "gpu-pool": ["g1"],
        "zone-a": [],
        "default": ["both", "none"],
    }
    # g1 already carries the right label: it is not rewritten.
    assert plan.relabel == {"c1": "cpu-pool", "both": "default", "none": "default"}
    assert plan.overlaps == {"gpu-pool": ["both"], "zone-a": ["both"]}


def test_a_stale_label_is_corrected_and_the_label_never_decides_membership() -> None:
    plan = plan_membership({"n": {"kind": "cpu", L.POOL: "gpu-pool"}}, [CPU, GPU])
    assert plan.relabel == {"n": "cpu-pool"}


def test_deleting_a_pool_returns_its_nodes_to_default() -> None:
    nodes = {"g1": {"kind": "gpu", L.POOL: "gpu-pool"}}
    assert plan_membership(nodes, [CPU]).relabel == {"g1": "default"}


label_values = st.sampled_from(["cpu", "gpu", "a", "b"])
node_labels = st.dictionaries(st.sampled_from(["kind", "zone"]), label_values, max_size=2)


@given(st.dictionaries(st.sampled_from([f"n{i}" for i in range(8)]), node_labels))
def test_membership_is_the_schedulers_rule(nodes: dict[str, dict[str, str]]) -> None:
    pools = (CPU, GPU, ZONE_A)
    plan = plan_membership(nodes, pools)
    for name, node_labels in nodes.items():
        node = S.Node(name=name, allocatable={}, labels=node_labels)
        assert name in plan.members[S.pool_of_node(node, pools)]
    assert sum(len(m) for m in plan.members.values()) == len(nodes)


def test_status_is_patched_only_when_it_differs() -> None:
    plan = plan_membership(
        {"c1": {"kind": "cpu"}, "x": {"kind": "cpu", "zone": "a"}}, [CPU, ZONE_A]
    )
    objects = {"cpu-pool": PoolObject(CPU, 3, {}), "zone-a": PoolObject(ZONE_A, 1, {})}
    first = pool_status_patches(plan, objects, "t1")
    assert first["cpu-pool"]["nodeCount"] == 1
    assert first["cpu-pool"]["observedGeneration"] == 3
    (overlap,) = first["cpu-pool"]["conditions"]
    assert overlap["status"] == "True"
    assert overlap["reason"] == "NodesInDefault"
    assert "x" in overlap["message"]
    assert first["zone-a"]["nodeCount"] == 0
    written = {name: PoolObject(o.pool, o.generation, first[name]) for name, o in objects.items()}
    assert pool_status_patches(plan, written, "t2") == {}
    # The overlap resolves: the condition flips and gets a new transition time.
    plan2 = plan_membership({"c1": {"kind": "cpu"}, "x": {"kind": "cpu"}}, [CPU, ZONE_A])
    second = pool_status_patches(plan2, written, "t3")
    (cond,) = second["cpu-pool"]["conditions"]
    assert (cond["status"], cond["lastTransitionTime"], second["cpu-pool"]["nodeCount"]) == (
        "False",
        "t3",
        2,
    )
