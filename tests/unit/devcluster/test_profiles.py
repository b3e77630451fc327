from __future__ import annotations

import json
from collections import Counter

import pytest

from operators.devcluster import profiles
from operators.devcluster.errors import DevClusterError


def gpu_nodes(name: str, nodes: int | None = None) -> list[dict]:  # type: ignore[type-arg]
    return [
        n
        for n in profiles.nodes_for(name, nodes)
        if n["metadata"]["labels"][profiles.POOL_LABEL] == "gpu"
    ]


def test_small_is_two_spines_of_two_tors_of_four_nodes() -> None:
    nodes = gpu_nodes("small")
    assert len(nodes) == 16
    tors = Counter(n["metadata"]["labels"][profiles.TOR_LABEL] for n in nodes)
    assert sorted(tors.values()) == [4, 4, 4, 4]
    spines = {n["metadata"]["labels"][profiles.SPINE_LABEL] for n in nodes}
    assert spines == {"spine-00", "spine-01"}
    assert all(n["status"]["capacity"]["nvidia.com/gpu"] == "8" for n in nodes)


def test_large_is_a_thousand_nodes_in_ten_by_ten() -> None:
    nodes = gpu_nodes("large")
    assert len(nodes) == 1000
    assert len({n["metadata"]["labels"][profiles.SPINE_LABEL] for n in nodes}) == 10
    assert len({n["metadata"]["labels"][profiles.TOR_LABEL] for n in nodes}) == 100
    assert len({n["metadata"]["name"] for n in nodes}) == 1000


def test_nodes_override_keeps_geometry() -> None:
    nodes = gpu_nodes("small", 10)
    assert len(nodes) == 10
    tors = Counter(n["metadata"]["labels"][profiles.TOR_LABEL] for n in nodes)
    assert max(tors.values()) == 4


def test_lingjun_reads_the_real_clos_layout() -> None:
    nodes = gpu_nodes("lingjun")
    assert len(nodes) == 847
    labels = [n["metadata"]["labels"] for n in nodes]
    assert len({lab[profiles.CORE_LABEL] for lab in labels}) == 1
    assert len({lab[profiles.SPINE_LABEL] for lab in labels}) == 3
    # A ToR sits under exactly one aggregation switch, which sits under one core switch.
    parents = {lab[profiles.TOR_LABEL]: lab[profiles.SPINE_LABEL] for lab in labels}
    assert all(tor.startswith(spine + "-") for tor, spine in parents.items())
    assert len(parents) >= 48


def test_every_profile_has_one_tainted_master_without_gpus() -> None:
    masters = [
        n
        for n in profiles.nodes_for("small")
        if n["metadata"]["labels"][profiles.POOL_LABEL] == "masters"
    ]
    assert len(masters) == 1
    master = masters[0]
    assert master["spec"]["taints"][0]["effect"] == "NoSchedule"
    assert "nvidia.com/gpu" not in master["status"]["allocatable"]
    assert "node-role.kubernetes.io/control-plane" in master["metadata"]["labels"]


def test_gpu_layout_annotation_covers_every_gpu_once() -> None:
    node = gpu_nodes("small")[0]
    layout = json.loads(node["metadata"]["annotations"][profiles.GPU_TOPOLOGY_ANNOTATION])
    flat = sorted(g for group in layout["nvlink"] for g in group)
    assert flat == list(range(8))
    assert layout["numa"] == [[0, 1, 2, 3], [4, 5, 6, 7]]


@pytest.mark.parametrize(("name", "nodes"), [("tiny", None), ("small", 0)])
def test_bad_profile_arguments_are_clear(name: str, nodes: int | None) -> None:
    with pytest.raises(DevClusterError) as err:
        profiles.nodes_for(name, nodes)
    assert err.value.hint


def test_missing_trace_names_the_fix(monkeypatch: pytest.MonkeyPatch, tmp_path: object) -> None:
    monkeypatch.setenv("SLUICE_TRACES_DIR", str(tmp_path))
    with pytest.raises(DevClusterError, match="SLUICE_TRACES_DIR"):
        profiles.nodes_for("lingjun")
