"""Pools lend idle capacity and take it back (ai-scheduler's sharing and borrowing), with real
VCJobs through the jobs operator and the scheduler.

The cluster of these stories: `cpu-pool` (two 40-CPU nodes), `gpu-pool` (two 40-CPU nodes with 8
GPUs each), `vault` (one big 64-CPU node that does not share), the samples' `masters` pool
(the control-plane node), and the built-in `default` pool, told not to share for the module.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import pytest
from kubernetes import client

from operators.devcluster.cluster import DevCluster

from .stage import Stage, staged, stays, vcjob

pytestmark = pytest.mark.e2e

CPU_NODE_CPUS, GPU_NODE_CPUS = 40, 40


@pytest.fixture(scope="module")
def stage(
    cluster: DevCluster, k8s: client.ApiClient, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stage]:
    with staged(cluster, k8s, tmp_path_factory.mktemp("pool-borrowing")) as s:
        cpu_nodes = s.add_nodes("cpu", 2, cpu=str(CPU_NODE_CPUS))
        gpu_nodes = s.add_nodes("gpu", 2, cpu=str(GPU_NODE_CPUS), gpus=8)
        vault_nodes = s.add_nodes("vault", 1, cpu="64")
        s.create_pool("cpu-pool", "cpu")
        s.create_pool("gpu-pool", "gpu")
        s.create_pool("vault", "vault", disableSharing=True)
        s.create_masters_pool()
        s.wait_pool_nodes("cpu-pool", cpu_nodes)
        s.wait_pool_nodes("gpu-pool", gpu_nodes)
        s.wait_pool_nodes("vault", vault_nodes)
        yield s


def test_a_cpu_sweep_borrows_gpu_pool_cpus_and_gives_them_back_when_training_arrives(
    stage: Stage,
) -> None:
    """The ai-scheduler flow: a sweep of 130 one-CPU pods fills cpu-pool (80 CPUs) and borrows the
    rest from gpu-pool, never from `vault` (no sharing), `default` (no sharing) or `masters`.
    A training job of gpu-pool arrives; only borrowed pods are evicted for it, they are re-queued
    by the sweep's own pool, and both jobs finish."""
    with stage.team("research") as research, stage.team("vision") as vision:
        research.submit("sweep", vcjob(130, min_available=1, runs_for="60s"), pool="cpu-pool")
        pods = research.wait_running("sweep", 130)
        placed = {p.metadata.name: p.spec.node_name for p in pods}
        pool_of = {node: stage.pool_of(node) for node in set(placed.values())}
        by_pool = Counter(pool_of[node] for node in placed.values())
        assert by_pool == {"cpu-pool": 2 * CPU_NODE_CPUS, "gpu-pool": 130 - 2 * CPU_NODE_CPUS}
        home = {name for name, node in placed.items() if pool_of[node] == "cpu-pool"}
        stage.wait(
            "gpu-pool reports the borrowed CPUs as shared",
            lambda: stage.pool_status("gpu-pool").get("shared", {}).get("cpu") in ("50", "50000m"),
        )

        # Two 8-GPU workers that need 30 CPUs each: gpu-pool has 30 idle CPUs, so borrowers must go.
        vision.submit("train", vcjob(2, cpu="30", gpus=8, runs_for="5s"), pool="gpu-pool")
        vision.wait_running("train", 2)
        reclaimed = research.events("sweep", "Reclaimed")
        assert reclaimed, "the sweep was told its borrowed pods were reclaimed"
        still_home = {p.metadata.name for p in research.running("sweep")} & home
        finished_home = {
            p.metadata.name
            for p in stage.core.list_namespaced_pod(research.namespace).items
            if p.status.phase == "Succeeded"
        }
        assert home <= still_home | finished_home, "a pod running in its own pool was evicted"

        vision.wait_finished("train")
        research.wait_finished("sweep", timeout=240)


def test_a_pool_that_does_not_borrow_waits_at_home(stage: Stage) -> None:
    """A pool with borrowing disabled keeps its jobs home even when every other pool is idle, and
    says why the job waits."""
    nodes = stage.add_nodes("homebody", 1, cpu="4")
    stage.create_pool("homebody-pool", "homebody", disableBorrowing=True)
    stage.wait_pool_nodes("homebody-pool", nodes)
    with stage.team("research") as research:
        research.submit("local", vcjob(4, runs_for="20s"), pool="homebody-pool")
        research.wait_running("local", 4)
        research.submit("overflow", vcjob(2, runs_for="5s"), pool="homebody-pool")
        reason = research.wait_waiting("overflow", "BorrowingDisabled")
        assert "disables borrowing" in reason, reason
        stays(stage, "overflow stays home", lambda: not research.running("overflow"), 5)
        research.wait_finished("overflow", timeout=120)


def test_a_job_preempts_lower_priority_work_at_home_before_borrowing(stage: Stage) -> None:
    """H100 jobs: with an idle H100 pool next door, a high-priority job still takes its own
    pool's room from a low-priority job rather than borrowing. The preempted job then borrows
    the idle pool. A third job, for which neither preemption (equal priority) nor borrowing
    (nothing idle) helps, waits and says so, until the first high-priority job finishes."""
    h100 = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    stage.add_nodes("home", 1, cpu="40", gpus=8, product=h100["nvidia.com/gpu.product"])
    spare = stage.add_nodes("spare", 1, cpu="40", gpus=8, product=h100["nvidia.com/gpu.product"])
    stage.create_pool("home-pool", "home")
    stage.create_pool("spare-pool", "spare")
    stage.wait_pool_nodes("spare-pool", spare)
    with stage.team("research") as research:
        research.submit(
            "sweep",
            vcjob(1, gpus=8, runs_for="600s", on=h100),
            pool="home-pool",
            priority=stage.low,
        )
        research.wait_running("sweep", 1)

        research.submit(
            "train",
            vcjob(1, gpus=8, runs_for="20s", on=h100),
            pool="home-pool",
            priority=stage.high,
        )
        (train,) = research.wait_running("train", 1)
        assert stage.pool_of(train.spec.node_name) == "home-pool"
        assert research.events("sweep", "Preempted")
        (sweep,) = research.wait_running("sweep", 1)
        assert stage.pool_of(sweep.spec.node_name) == "spare-pool", "re-queued, it borrows"

        research.submit(
            "eval", vcjob(1, gpus=8, runs_for="5s", on=h100), pool="home-pool", priority=stage.high
        )
        reason = research.wait_waiting("eval")
        assert "preemption" in reason, reason
        research.wait_running("eval", 1, timeout=60)  # once train has finished
