"""Queues lend unused quota and reclaim it (Volcano's proportion/reclaim, one model of guarantee,
deserved share and capability), with real VCJobs through the jobs operator and the scheduler.

The lab's quota tree, three levels under `root`, on a 16-GPU pool of its own:

    lab (guarantee = capability = 16 GPUs)
    ├── team-a   guarantee 4, capability 8, overcommit allowed
    ├── team-c   guarantee 3
    └── team-b   guarantee 8
        └── b-vision   guarantee 8 (the leaf team B submits to)
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import client

from operators.api import labels as L
from operators.devcluster.cluster import DevCluster

from .stage import GPU, Stage, staged, stays, vcjob

pytestmark = pytest.mark.e2e


def gpus(n: int) -> dict[str, str]:
    return {GPU: str(n)}


@pytest.fixture(scope="module")
def stage(
    cluster: DevCluster, k8s: client.ApiClient, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stage]:
    with staged(cluster, k8s, tmp_path_factory.mktemp("queue-reclaim")) as s:
        nodes = s.add_nodes("lab", 2, cpu="40", gpus=8)
        s.create_pool("lab-pool", "lab", disableBorrowing=True)
        s.wait_pool_nodes("lab-pool", nodes)
        s.create_queue("lab", guarantee=gpus(16), capability=gpus(16))
        s.create_queue(
            "team-a", parent="lab", guarantee=gpus(4), capability=gpus(8), overcommit=True
        )
        s.create_queue("team-c", parent="lab", guarantee=gpus(3))
        s.create_queue("team-b", parent="lab", guarantee=gpus(8))
        s.create_queue("b-vision", parent="team-b", guarantee=gpus(8))
        yield s


def test_team_b_reclaims_its_guarantee_from_the_teams_that_borrowed_it(stage: Stage) -> None:
    """Team A borrows far beyond its guarantee (even an overcommitted job beyond its capability),
    team C a little; team B's guarantee lies idle. When B submits, A's overcommitted job goes first,
    then A's other borrowed jobs (A is the most over its share), until B runs; C keeps its jobs,
    A keeps its share, and usage rolls up the tree."""
    teams = stage.team("team-a"), stage.team("team-b"), stage.team("team-c")
    with teams[0] as team_a, teams[1] as team_b, teams[2] as team_c:
        for i in range(4):
            team_a.submit(
                f"a-{i}", vcjob(1, gpus=2, runs_for="600s"), queue="team-a", pool="lab-pool"
            )
        for i in range(2):
            team_c.submit(
                f"c-{i}", vcjob(1, gpus=2, runs_for="600s"), queue="team-c", pool="lab-pool"
            )
        for i in range(4):
            team_a.wait_running(f"a-{i}", 1)
        # Team A is at its capability: only a job marked overcommit is admitted beyond it.
        team_a.submit(
            "a-extra",
            vcjob(1, gpus=2, runs_for="600s"),
            queue="team-a",
            pool="lab-pool",
            labels={L.OVERCOMMIT: "true"},
        )
        team_a.wait_running("a-extra", 1)
        for i in range(2):
            team_c.wait_running(f"c-{i}", 1)
        stage.wait(
            "lab's usage is the sum of its teams' (14 GPUs)",
            lambda: stage.queue_status("lab").get("allocated", {}).get(GPU) == "14",
        )

        team_b.submit(
            "b-train", vcjob(4, gpus=2, runs_for="20s"), queue="b-vision", pool="lab-pool"
        )
        team_b.wait_running("b-train", 4)

        assert team_a.events("a-extra", "Reclaimed"), "the overcommitted job went first"
        a_left = [f"a-{i}" for i in range(4) if team_a.running(f"a-{i}")]
        assert len(a_left) == 2, f"A keeps exactly its guarantee (4 GPUs): {a_left}"
        assert all(team_c.running(f"c-{i}") for i in range(2)), "C was not over its share"
        stage.wait(
            "usage rolls up: team-b holds b-vision's 8 GPUs, lab all 16",
            lambda: (
                stage.queue_status("team-b").get("allocated", {}).get(GPU) == "8"
                and stage.queue_status("lab").get("allocated", {}).get(GPU) == "16"
            ),
        )

        # B asks beyond its guarantee: only C is (a little) over its share, and taking a job from C
        # would leave C below its guarantee, so nothing more is reclaimed.
        team_b.submit("b-more", vcjob(1, gpus=2, runs_for="5s"), queue="b-vision", pool="lab-pool")
        reason = team_b.wait_waiting("b-more")
        stays(
            stage,
            "A keeps its guarantee and C its jobs while B waits beyond its own",
            lambda: (
                all(team_a.running(n) for n in a_left)
                and all(team_c.running(f"c-{i}") for i in range(2))
            ),
            5,
        )
        assert reason, "b-more says why it waits"
        team_b.wait_finished("b-train")
        team_b.wait_finished("b-more")
