"""Job-level preemption with real HybridJobs/VCJobs: tenants of one queue, gangs that take exactly
what they need (shrinking elastic jobs first), ToR-aware victims, a one-ToR wait that ends
(softAfterSeconds), PodDisruptionBudgets, and no preemption loops. Every story has a pool of its
own, so the stories cannot disturb each other.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import client

from operators.api import labels as L
from operators.devcluster import profiles
from operators.devcluster.cluster import DevCluster

from .stage import Stage, hybridjob, staged, stays, vcjob

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def stage(
    cluster: DevCluster, k8s: client.ApiClient, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stage]:
    with staged(cluster, k8s, tmp_path_factory.mktemp("preemption")) as s:
        yield s


@pytest.fixture(scope="module")
def tors(stage: Stage) -> Stage:
    """The stage with the cluster's Topology (ToR, host), for the stories about one ToR."""
    stage.create_topology({"tor": profiles.TOR_LABEL, "host": profiles.HOSTNAME_LABEL})
    return stage


def test_a_tenant_that_may_preempt_does_and_one_that_may_not_waits(stage: Stage) -> None:
    """In one queue, the prod tenant (priority 100, canPreempt) preempts the dev tenant's job;
    the staff tenant outranks prod (priority 200) but may not preempt, so it waits for prod's job
    to finish, and then goes before dev's re-queued job."""
    stage.own_pool("tenant-pool", 1)
    with stage.team("dev") as dev, stage.team("prod") as prod, stage.team("staff") as staff:
        stage.create_queue(
            "vision",
            tenants=[
                {"namespace": dev.namespace, "priority": 0, "canPreempt": False},
                {"namespace": prod.namespace, "priority": 100, "canPreempt": True},
                {"namespace": staff.namespace, "priority": 200, "canPreempt": False},
            ],
        )
        whole_node = vcjob(1, gpus=8, runs_for="600s")
        dev.submit("experiment", whole_node, queue="vision", pool="tenant-pool")
        dev.wait_running("experiment", 1)

        prod.submit("train", vcjob(1, gpus=8, runs_for="15s"), queue="vision", pool="tenant-pool")
        prod.wait_running("train", 1)
        assert dev.events("experiment", "Preempted"), "dev's job was told it was preempted"
        # Stamped before its pods went (a uid-tested JSON patch), for the hooks' Evicted notice.
        last = (dev.podgroup("experiment").get("status") or {}).get("lastEviction") or {}
        assert last.get("reason") == "Preempted"
        train = prod.uids("train")

        staff.submit("eval", vcjob(1, gpus=8, runs_for="5s"), queue="vision", pool="tenant-pool")
        staff.wait_waiting("eval")
        stays(stage, "prod's job keeps running", lambda: prod.uids("train") == train, 3)
        staff.wait_running("eval", 1, timeout=60)
        assert not dev.running("experiment"), "staff's job went before dev's re-queued one"
        assert not prod.events("train", "Preempted")


def test_a_big_gang_takes_what_it_needs_shrinking_elastic_jobs_first(stage: Stage) -> None:
    """24 GPUs: an elastic job grown to 6 x 2 GPUs and two 4-GPU jobs, all low priority, leave 4
    idle. A high-priority gang of 8 x 2 GPUs needs 12 more: the elastic job shrinks to its
    minimum (8 GPUs back), one 4-GPU job is preempted, and nothing more."""
    stage.own_pool("train-pool", 3)
    with stage.team("research") as research:
        for name in ("small-a", "small-b"):
            research.submit(
                name, vcjob(1, gpus=4, runs_for="600s"), pool="train-pool", priority=stage.low
            )
            research.wait_running(name, 1)
        research.submit(
            "elastic",
            hybridjob({"worker": (2, 6)}, gpus=2, runs_for="600s"),
            pool="train-pool",
            priority=stage.low,
        )
        research.wait_running("elastic", 6)

        research.submit(
            "big", vcjob(8, gpus=2, runs_for="10s"), pool="train-pool", priority=stage.high
        )
        research.wait_running("big", 8)
        assert len(research.running("elastic")) == 2, "the elastic job shrank to its minimum"
        # ...and kept running (its status is written up to 5 s after a change: docs/jobs.md).
        research.wait_phase("elastic", "Running", timeout=30)
        survivors = [n for n in ("small-a", "small-b") if research.running(n)]
        assert len(survivors) == 1, "exactly one whole job was preempted, not both"
        research.wait_finished("big")


def test_preempting_for_a_one_tor_job_frees_one_tor(tors: Stage) -> None:
    """Two ToRs of two nodes, every node busy with low-priority work. A job of 2 x 8 GPUs that
    must stay under one ToR preempts the work of both nodes of one ToR, even though the cheapest
    victims (the one-pod jobs) sit in different ToRs; the other ToR is left alone."""
    stage = tors
    left = stage.own_pool("fabric-pool", 2, tor="tor-1")
    right = stage.add_nodes("fabric-pool", 2, cpu="40", gpus=8, tor="tor-2")
    stage.wait_pool_nodes("fabric-pool", right)
    with stage.team("research") as research:
        for name, node, pods in (
            ("one-left", left[0], 1),
            ("two-left", left[1], 2),
            ("one-right", right[0], 1),
            ("two-right", right[1], 2),
        ):
            research.submit(
                name,
                vcjob(pods, gpus=8 // pods, runs_for="600s", on={profiles.HOSTNAME_LABEL: node}),
                pool="fabric-pool",
                priority=stage.low,
            )
        for name, pods in (("one-left", 1), ("two-left", 2), ("one-right", 1), ("two-right", 2)):
            research.wait_running(name, pods)

        research.submit(
            "allreduce",
            vcjob(2, gpus=8, runs_for="10s"),
            pool="fabric-pool",
            priority=stage.high,
            networkTopology={"mode": "hard", "highestTier": "tor"},
        )
        placed = research.wait_running("allreduce", 2)
        nodes = {p.spec.node_name for p in placed}
        assert nodes in (set(left), set(right)), f"one ToR: {nodes}"
        kept = ("one-right", "two-right") if nodes == set(left) else ("one-left", "two-left")
        assert all(research.running(n) for n in kept), "the other ToR was not touched"


def test_a_one_tor_job_waits_its_soft_after_then_spreads(tors: Stage) -> None:
    """Two ToRs of two nodes, one node of each busy with higher-priority work (neither preempted
    nor moved for a lower-priority job). A 2 x 8 GPU job asks hard for one ToR but only for
    15 s (softAfterSeconds): it does not start at first, although two nodes are free, one per
    ToR; after its 15 s it starts there, spread, with nothing else changing in the cluster."""
    stage = tors
    left = stage.own_pool("spread-pool", 2, tor="tor-3")
    right = stage.add_nodes("spread-pool", 2, cpu="40", gpus=8, tor="tor-4")
    stage.wait_pool_nodes("spread-pool", right)
    with stage.team("research") as research:
        for name, node in (("busy-left", left[0]), ("busy-right", right[0])):
            research.submit(
                name,
                vcjob(1, gpus=8, runs_for="600s", on={profiles.HOSTNAME_LABEL: node}),
                pool="spread-pool",
                priority=stage.high,
            )
        for name in ("busy-left", "busy-right"):
            research.wait_running(name, 1)

        research.submit(
            "allreduce",
            vcjob(2, gpus=8, runs_for="600s"),
            pool="spread-pool",
            priority=stage.low,
            networkTopology={"mode": "hard", "highestTier": "tor", "softAfterSeconds": 15},
        )
        # The group is created after this line, so for 8 s it is still within its 15 s.
        stays(stage, "the one-ToR job waits", lambda: not research.running("allreduce"), 8)
        placed = research.wait_running("allreduce", 2)
        assert {p.spec.node_name for p in placed} == {left[1], right[1]}


def test_disruption_budgets_hold_and_preemption_never_trades_places_back(stage: Stage) -> None:
    """A low-priority job guarded by a PodDisruptionBudget is not preempted: the urgent job waits
    until it finishes. And once a job has preempted another, the victim does not preempt it back
    when re-queued: over time each is evicted at most once, the winner never. A job of the
    winner's own priority does not take its place either: it waits for the winner to finish,
    then goes before the re-queued victim."""
    stage.own_pool("guarded-pool", 1)
    stage.own_pool("duel-pool", 1)
    with stage.team("research") as research:
        research.submit(
            "guarded", vcjob(2, gpus=4, runs_for="30s"), pool="guarded-pool", priority=stage.low
        )
        client.PolicyV1Api(stage.k8s).create_namespaced_pod_disruption_budget(
            research.namespace,
            client.V1PodDisruptionBudget(
                metadata=client.V1ObjectMeta(name="guarded"),
                spec=client.V1PodDisruptionBudgetSpec(
                    min_available=2,
                    selector=client.V1LabelSelector(match_labels={L.JOB_NAME: "guarded"}),
                ),
            ),
        )
        research.submit(
            "holder", vcjob(1, gpus=8, runs_for="600s"), pool="duel-pool", priority=stage.low
        )
        guarded = {p.metadata.uid for p in research.wait_running("guarded", 2)}
        research.wait_running("holder", 1)

        research.submit(
            "urgent", vcjob(1, gpus=8, runs_for="5s"), pool="guarded-pool", priority=stage.high
        )
        research.submit(
            "winner", vcjob(1, gpus=8, runs_for="15s"), pool="duel-pool", priority=stage.high
        )
        research.wait_running("winner", 1)
        winner = research.uids("winner")
        research.submit(
            "peer", vcjob(1, gpus=8, runs_for="2s"), pool="duel-pool", priority=stage.high
        )
        stays(
            stage,
            "the guarded job keeps its pods and the winner its place",
            lambda: (
                research.uids("guarded") | research.uids("winner") == guarded | winner
                and not research.running("urgent")
                and not research.running("peer")
            ),
            8,
        )
        assert research.times("holder", "Preempted") == 1
        assert not research.events("winner", "Preempted")
        assert not research.events("guarded", "Preempted")
        research.wait_running("urgent", 1, timeout=60)  # once the guarded job has finished
        research.wait_finished("winner")
        research.wait_finished("peer")  # equal priority: after the winner, not instead
        research.wait_running("holder", 1)  # re-queued, it runs again when room returns
        assert not research.events("peer", "Preempted")
        assert research.times("holder", "Preempted") == 1, "the peer went before the holder ran"
