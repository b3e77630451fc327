"""The dev cluster is a real control plane: nodes, Jobs, garbage collection, clear failures."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
from kubernetes import client

from operators.devcluster import processes, profiles
from operators.devcluster.cluster import DevCluster
from operators.devcluster.errors import DevClusterError
from operators.devcluster.waiting import wait_for

# Tests of the local control plane itself: not run against a cluster brought by the user.
pytestmark = pytest.mark.devcluster


def test_small_profile_nodes_are_ready_gpu_nodes(k8s: client.ApiClient) -> None:
    nodes = client.CoreV1Api(k8s).list_node().items
    gpu_nodes = [n for n in nodes if n.metadata.labels.get(profiles.POOL_LABEL) == "gpu"]
    assert len(gpu_nodes) == 16
    assert {n.metadata.labels[profiles.SPINE_LABEL] for n in gpu_nodes} == {"spine-00", "spine-01"}
    assert len({n.metadata.labels[profiles.TOR_LABEL] for n in gpu_nodes}) == 4
    for node in nodes:
        ready = [c for c in node.status.conditions if c.type == "Ready"]
        assert [c.status for c in ready] == ["True"], node.metadata.name
    for node in gpu_nodes:
        assert node.status.allocatable[profiles.GPU_RESOURCE] == "8"
        layout = json.loads(node.metadata.annotations[profiles.GPU_TOPOLOGY_ANNOTATION])
        assert sorted(g for group in layout["nvlink"] for g in group) == list(range(8))
    masters = [n for n in nodes if n.metadata.labels.get(profiles.POOL_LABEL) == "masters"]
    assert len(masters) == 1
    assert masters[0].spec.taints[0].effect == "NoSchedule"


def test_batch_job_completes_on_kwok_nodes_and_is_garbage_collected(
    cluster: DevCluster, k8s: client.ApiClient, namespace: str
) -> None:
    scheduler = cluster.start_kube_scheduler()
    try:
        batch = client.BatchV1Api(k8s)
        core = client.CoreV1Api(k8s)
        job = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "sleepy"},
            "spec": {
                "completions": 3,
                "parallelism": 3,
                "backoffLimit": 0,
                "template": {
                    "metadata": {"annotations": {"sluice.dev/complete-after": "2s"}},
                    "spec": {
                        "restartPolicy": "Never",
                        "containers": [{"name": "main", "image": "busybox"}],
                    },
                },
            },
        }
        batch.create_namespaced_job(namespace, job)

        def complete() -> bool:
            status = batch.read_namespaced_job_status("sleepy", namespace).status
            return any(c.type == "Complete" and c.status == "True" for c in status.conditions or ())

        wait_for(complete, timeout=90, what="the Job to complete")
        pods = core.list_namespaced_pod(namespace, label_selector="job-name=sleepy").items
        assert len(pods) == 3
        assert all(p.status.phase == "Succeeded" for p in pods)
        assert all(p.spec.node_name.startswith("gpu-") for p in pods)

        batch.delete_namespaced_job("sleepy", namespace, propagation_policy="Background")
        wait_for(
            lambda: not core.list_namespaced_pod(namespace, label_selector="job-name=sleepy").items,
            timeout=60,
            what="the garbage collector to delete the Job's pods",
        )
    finally:
        cluster.stop_process("kube-scheduler")
    assert not processes.alive(scheduler)


def test_port_in_use_is_reported_before_anything_starts(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        dev = DevCluster(tmp_path / "c")
        with pytest.raises(DevClusterError, match=rf"port {port} .* in use") as err:
            dev.up(apiserver_port=port)
    assert "--apiserver-port" in str(err.value)
    assert dev.state() is None


def test_failed_start_stops_what_it_started(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dev = DevCluster(tmp_path / "c")
    original = DevCluster._apiserver_args

    def broken(self: DevCluster, state: object, keys: object) -> list[str]:
        return [*original(self, state, keys), "--no-such-flag"]  # type: ignore[arg-type]

    monkeypatch.setattr(DevCluster, "_apiserver_args", broken)
    started: list[processes.Proc] = []
    real_spawn = processes.spawn

    def spy(
        name: str, args: list[str], log: Path, *, die_with_parent: bool = False
    ) -> processes.Proc:
        proc = real_spawn(name, args, log, die_with_parent=die_with_parent)
        started.append(proc)
        return proc

    monkeypatch.setattr(processes, "spawn", spy)
    with pytest.raises(DevClusterError, match="kube-apiserver exited while starting") as err:
        dev.up()
    assert "no-such-flag" in str(err.value)
    assert [p.name for p in started] == ["etcd", "kube-apiserver"]
    assert not any(processes.alive(p) for p in started)
