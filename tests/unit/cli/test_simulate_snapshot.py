"""``sluice simulate --snapshot``: a recorded cluster (kubectl get -o yaml) through one
session, as recorded and with what-if guarantees."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
import yaml

from operators.cli.main import main
from operators.runtime import recorded
from operators.scheduler.snapshot import GPU, GroupPhase

if TYPE_CHECKING:
    from pathlib import Path


def _meta(name: str, namespace: str = "") -> dict[str, Any]:
    meta = {"name": name, "uid": f"uid-{name}", "creationTimestamp": "2026-11-22T08:00:00Z"}
    return {**meta, "namespace": namespace} if namespace else meta


def _node(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {**_meta(name), "labels": {"kubernetes.io/hostname": name}},
        "status": {
            "allocatable": {"cpu": "96", "memory": "1Ti", "pods": "110", "nvidia.com/gpu": "8"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def _queue(name: str, gpus: int) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.sluice.dev/v1alpha1",
        "kind": "Queue",
        "metadata": _meta(name),
        "spec": {"guarantee": {"nvidia.com/gpu": gpus}},
    }


def _group(name: str, queue: str, phase: str) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.sluice.dev/v1alpha1",
        "kind": "PodGroup",
        "metadata": {**_meta(name, "ns"), "generation": 1},
        "spec": {"minMember": 1, "queue": queue},
        "status": {"phase": phase},
    }


def _pod(name: str, group: str, node: str = "", phase: str = "Pending") -> dict[str, Any]:
    spec: dict[str, Any] = {
        "schedulerName": "sluice",
        "containers": [
            {
                "name": "c",
                "resources": {"requests": {"cpu": "1"}, "limits": {"nvidia.com/gpu": "8"}},
            }
        ],
    }
    if node:
        spec["nodeName"] = node
    meta = {**_meta(name, "ns"), "annotations": {"scheduling.sluice.dev/pod-group": group}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": spec,
        "status": {"phase": phase},
    }


def _cluster() -> dict[str, Any]:
    """Two 8-GPU nodes, both taken by team-b (guaranteed all 16 GPUs); team-a (guaranteed
    none) waits with one 8-GPU pod. A finished pod and a Volcano queue are ignored."""
    items = [
        _node("n1"),
        _node("n2"),
        _queue("team-a", 0),
        _queue("team-b", 16),
        {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue", "metadata": {"name": "v"}},
        _group("b1", "team-b", "Running"),
        _group("b2", "team-b", "Running"),
        _group("a1", "team-a", "Inqueue"),
        _pod("b1-0", "b1", "n1", "Running"),
        _pod("b2-0", "b2", "n2", "Running"),
        _pod("a1-0", "a1"),
        _pod("old-0", "a1", "n1", "Succeeded"),
    ]
    return {"apiVersion": "v1", "kind": "List", "items": items}


def test_recorded_objects_become_the_schedulers_snapshot() -> None:
    snap = recorded.snapshot(recorded.objects([_cluster()]))
    assert sorted(n.name for n in snap.nodes) == ["n1", "n2"]
    assert {q.name: q.guarantee.get(GPU, 0) for q in snap.queues} == {"team-a": 0, "team-b": 16}
    assert {g.name: g.phase for g in snap.groups} == {
        "b1": GroupPhase.RUNNING,
        "b2": GroupPhase.RUNNING,
        "a1": GroupPhase.INQUEUE,
    }
    assert sorted(t.name for t in snap.tasks) == ["a1-0", "b1-0", "b2-0"]


def test_a_file_without_nodes_is_refused() -> None:
    with pytest.raises(recorded.RecordedSnapshotError, match="no Node"):
        recorded.snapshot(recorded.objects([_queue("q", 1)]))


def test_what_if_a_queue_were_guaranteed_more(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(_cluster()))
    code = main(
        [
            "simulate",
            "--snapshot",
            str(path),
            "--guarantee",
            "team-a=+8",
            "--guarantee",
            "team-b=8",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    recorded_part, changed_part = out.split("with team-a=+8, team-b=8")
    # As recorded team-b is within its guarantee: nothing to reclaim, a1 waits.
    assert "would evict (0)" in recorded_part
    assert "ns/a1:" in recorded_part
    # Guaranteed 8 GPUs, team-a reclaims one of team-b's jobs.
    assert "would evict (1)" in changed_part
    assert "team-a: 8 /" in changed_part


def test_a_guarantee_for_an_unknown_queue_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(_cluster()))
    with pytest.raises(SystemExit, match="no queue 'nope'"):
        main(["simulate", "--snapshot", str(path), "--guarantee", "nope=8"])
