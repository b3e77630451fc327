"""Delayed job-level preemption (OpenI Octopus): the victims get a grace period to checkpoint.

The queue `patient` sets `preemptionDelaySeconds: 30`. When a higher-priority job needs the room,
it turns Privileged and its victims WillEvict with a deadline, visible in the jobs' and PodGroups'
conditions, `status.preemption` and Events. Nobody else takes the victims meanwhile; if the
preemptor goes away or room frees up first, both revert; otherwise the victims are evicted whole at
the deadline. The marks live in the API, so an operator restart in the middle changes nothing.

Also here, as the other story of what a scheduler leaves behind: a gang half bound by a scheduler
that lost its lease, whose bound pods finished meanwhile, still completes. And the same story seen
by a platform: the PodGroup and Queue notices of a delayed preemption, delivered to an EventSink
by the stage's events operator.
"""

from __future__ import annotations

import datetime
import signal
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from operators.api import labels as L
from operators.api.quantity import to_milli
from operators.api.scheduling import PodGroup, Queue
from operators.devcluster.cluster import DevCluster

from .events_kit import MakeSink, Receiver
from .stage import Job, Stage, Team, staged, stays, vcjob

pytestmark = pytest.mark.e2e

GRACE = 30


@pytest.fixture(scope="module")
def stage(
    cluster: DevCluster, k8s: client.ApiClient, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stage]:
    with staged(cluster, k8s, tmp_path_factory.mktemp("delayed-preemption")) as s:
        s.create_queue("patient", preemptionDelaySeconds=GRACE)
        yield s


@pytest.fixture
def research(stage: Stage) -> Iterator[Team]:
    with stage.team("research") as team:
        yield team


def mark(team: Team, job: str) -> dict[str, Any]:
    """The delayed-preemption mark the scheduler wrote on the job's PodGroup."""
    found: dict[str, Any] = (team.podgroup(job).get("status") or {}).get("preemption") or {}
    return found


def seconds(stamp: str) -> float:
    return datetime.datetime.fromisoformat(stamp).timestamp()


def contest(
    stage: Stage, team: Team, pool: str, low: tuple[str, Job], high: tuple[str, Job]
) -> set[str]:
    """On a pool of one 8-GPU node of its own, the `low` job (name, job) runs at low priority;
    then the `high` one is submitted at high priority, both in `patient`. Returns the uids of
    the low job's running pods."""
    stage.own_pool(pool, 1)
    (victim, victim_job), (preemptor, preemptor_job) = low, high
    team.submit(victim, victim_job, queue="patient", pool=pool, priority=stage.low)
    pods = sum(task["replicas"] for task in victim_job.spec["tasks"])
    running = {p.metadata.uid for p in team.wait_running(victim, pods)}
    team.submit(preemptor, preemptor_job, queue="patient", pool=pool, priority=stage.high)
    return running


def test_victims_checkpoint_until_the_deadline_then_go_whole_even_across_a_restart(
    stage: Stage, research: Team
) -> None:
    """A low-priority job fills the pool; an urgent job arrives. The urgent job turns Privileged,
    the low one WillEvict with a deadline 30 s away (conditions, status, Events). A third,
    even more urgent job cannot take the victim meanwhile. The operators are killed and
    restarted in the middle; the deadline stays, the victim keeps running until then, and at the
    deadline it is evicted whole and the urgent job runs."""
    victims = contest(
        stage,
        research,
        "delay-pool",
        ("checkpointing", vcjob(2, gpus=4, runs_for="600s")),
        ("urgent", vcjob(1, gpus=8, runs_for="5s")),
    )
    will_evict = stage.wait(
        "checkpointing marked WillEvict",
        lambda: (m := mark(research, "checkpointing")).get("role") == "WillEvict" and m,
    )
    deadline = seconds(will_evict["deadline"])
    privileged = stage.wait(
        "urgent marked Privileged",
        lambda: (m := mark(research, "urgent")).get("role") == "Privileged" and m,
    )
    assert seconds(privileged["deadline"]) == deadline
    assert research.condition("checkpointing", "WillEvict").get("status") == "True"
    assert research.condition("urgent", "Privileged").get("status") == "True"
    stage.wait(
        "the jobs mirror both marks",
        lambda: (
            research.job_condition("checkpointing", "WillEvict").get("status") == "True"
            and research.job_condition("urgent", "Privileged").get("status") == "True"
        ),
    )
    # ... and record it as a job transition, which is what hooks deliver to a platform.
    transitions = (research.job("checkpointing").get("status") or {}).get("transitions") or ()
    assert any(t["to"] == "WillEvict" for t in transitions), transitions
    assert research.events("checkpointing", "WillEvict")
    assert research.events("urgent", "Privileged")
    assert research.waiting_reason("urgent").startswith("WaitingForVictims")

    # Even more urgent, but the victims are promised to `urgent`.
    research.submit(
        "third",
        vcjob(1, gpus=8, runs_for="5s"),
        queue="patient",
        pool="delay-pool",
        priority=stage.high,
    )
    stage.operators.kill(signal.SIGKILL)
    assert seconds(mark(research, "checkpointing")["deadline"]) == deadline, "kept in the API"
    stage.operators.start()
    stage.wait_operators_up()

    def before_deadline() -> bool:
        if time.time() >= deadline - 1:
            return True  # past the point to check
        assert research.uids("checkpointing") == victims, "a victim went before its deadline"
        assert not research.running("third"), "a third job took the promised room"
        return False

    stage.wait("the deadline", before_deadline, GRACE + 60)
    research.wait_running("urgent", 1)
    assert not research.running("checkpointing"), "the victim went whole"
    assert not research.running("third")
    (due,) = research.events("checkpointing", "DelayedPreemptionDue")
    evicted_at = (due.last_timestamp or due.event_time or due.first_timestamp).timestamp()
    assert evicted_at >= deadline - 1, "evicted at the deadline, not before (restart or not)"


def test_cancelling_the_preemptor_or_room_freeing_up_reverts_both(
    stage: Stage, research: Team
) -> None:
    """Two delayed preemptions that never happen: the preemptor is cancelled before the
    deadline; and room frees up (a job finishes) before the deadline. Both marks are cleared and
    nobody is evicted."""
    steady = contest(
        stage,
        research,
        "calm-pool",
        ("steady", vcjob(1, gpus=8, runs_for="600s")),
        ("impatient", vcjob(1, gpus=8, runs_for="5s")),
    )
    stage.wait(
        "steady marked WillEvict", lambda: mark(research, "steady").get("role") == "WillEvict"
    )
    research.cancel("impatient")
    stage.wait("steady's mark cleared", lambda: not mark(research, "steady"))
    assert research.condition("steady", "WillEvict").get("status") == "False"

    contest(
        stage,
        research,
        "ebb-pool",
        ("ending", vcjob(1, gpus=8, runs_for="12s")),
        ("waiter", vcjob(1, gpus=8, runs_for="5s")),
    )
    stage.wait(
        "waiter marked Privileged", lambda: mark(research, "waiter").get("role") == "Privileged"
    )
    research.wait_running("waiter", 1, timeout=GRACE)  # `ending` finished first: room, no eviction
    assert not research.events("ending", "DelayedPreemptionDue")
    stage.wait("waiter's mark cleared", lambda: not mark(research, "waiter"))
    stays(stage, "steady is never evicted", lambda: research.uids("steady") == steady, 2)


def test_a_half_bound_gang_whose_bound_pods_finished_still_completes(
    stage: Stage, namespace: str
) -> None:
    """What a scheduler that lost its lease between the Binding POSTs of a 4-pod gang leaves
    behind: two members bound (here bound at creation), which run and succeed while the other
    two wait, pinned to the same node of `default` and only fitting once the first two are gone.
    The podgroup operator counts the two (`status.succeeded`) and the scheduler places the other
    two as the rest of the gang; without that count, two pods of a minMember-4 gang would wait
    forever (tests/unit/runtime/test_half_bound.py has the control)."""
    core, custom = stage.core, stage.custom
    busy = {p.spec.node_name for p in core.list_pod_for_all_namespaces().items}
    node = next(
        n
        for n in core.list_node().items
        if (n.metadata.labels or {}).get(L.POOL, L.DEFAULT_POOL) == L.DEFAULT_POOL
        and n.metadata.name not in busy
    )
    half = to_milli(node.status.allocatable["cpu"]) * 45 // 100  # two fit, three do not
    group = {
        "apiVersion": PodGroup.api_version_str(),
        "kind": "PodGroup",
        "metadata": {"name": "hb"},
    }
    custom.create_namespaced_custom_object(
        PodGroup.group,
        PodGroup.version,
        namespace,
        PodGroup.plural,
        {**group, "spec": {"minMember": 4}},
    )

    def member(i: int, placement: dict[str, Any]) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"hb-{i}",
                "annotations": {L.POD_GROUP: "hb", "sluice.dev/complete-after": "1s"},
            },
            "spec": {
                **placement,
                "schedulerName": L.SCHEDULER_NAME,
                "restartPolicy": "Never",
                "terminationGracePeriodSeconds": 0,
                "containers": [
                    {"name": "c", "image": "fake", "resources": {"requests": {"cpu": f"{half}m"}}}
                ],
            },
        }

    for i in (0, 1):  # bound by the scheduler that lost its lease
        core.create_namespaced_pod(namespace, member(i, {"nodeName": node.metadata.name}))
    pinned = {"nodeSelector": {"kubernetes.io/hostname": node.metadata.name}}
    for i in (2, 3):
        core.create_namespaced_pod(namespace, member(i, pinned))

    def group_status() -> dict[str, Any]:
        obj = custom.get_namespaced_custom_object(
            PodGroup.group, PodGroup.version, namespace, PodGroup.plural, "hb"
        )
        return dict(obj.get("status") or {})

    stage.wait(
        "the whole gang to succeed",
        lambda: (
            [p.status.phase for p in core.list_namespaced_pod(namespace).items] == ["Succeeded"] * 4
        ),
    )
    stage.wait("the group Completed", lambda: group_status().get("phase") == "Completed")
    assert group_status()["succeeded"] == 4


def test_podgroup_and_queue_notices_of_a_delayed_preemption(
    stage: Stage, receiver: Receiver, sinks: MakeSink
) -> None:
    """The same story as hooks (#22, the stage's events operator): a sink subscribed to one
    team's PodGroups sees a job's group run, get WillEvict with the deadline of a delayed
    preemption, be evicted at it and go back to Pending (never a second WillEvict), and its
    preemptor turn Privileged with the same deadline; a sink subscribed to Queues sees the queue
    close. Each object's events arrive in `seq` order, without gaps."""
    grace = 4
    with stage.team("notices") as team:
        queue = f"noticed-{stage.tag}"
        stage.create_queue(queue, preemptionDelaySeconds=grace)
        sinks(receiver.url, {"filter": {"kinds": ["PodGroup"], "namespaces": [team.namespace]}})
        sinks(receiver.url, {"filter": {"kinds": ["Queue"]}})
        stage.own_pool(f"notice-pool-{stage.tag}", 1)
        pool = f"notice-pool-{stage.tag}"
        job = vcjob(2, gpus=4, runs_for="600s")
        team.submit("victim", job, queue=queue, pool=pool, priority=stage.low)
        team.wait_running("victim", 2)
        job = vcjob(1, gpus=8, runs_for="600s")
        team.submit("urgent", job, queue=queue, pool=pool, priority=stage.high)
        team.wait_running("urgent", 1)
        victim, urgent = (team.podgroup(n)["metadata"]["uid"] for n in ("victim", "urgent"))

        def of(uid: str) -> list[dict[str, Any]]:
            with receiver.lock:
                events = list(receiver.events)
            return list({e["id"]: e for e in events if e["data"].get("uid") == uid}.values())

        def types(uid: str) -> list[str]:
            return [e["type"].rpartition(".")[2] for e in of(uid)]

        stage.wait("the victim's notices", lambda: "evicted" in types(victim)[:-1])
        got = of(victim)
        assert [e["data"]["seq"] for e in got] == list(range(1, len(got) + 1)), got
        at = types(victim).index("willevict")
        assert types(victim)[at : at + 3] == ["willevict", "evicted", "pending"], got
        will_evict, evicted, _ = got[at : at + 3]
        assert "running" in types(victim)[:at]
        assert evicted["data"]["reason"] == "DelayedPreemptionDue"
        assert evicted["data"]["peers"] == [f"{team.namespace}/urgent"]
        assert will_evict["data"]["peers"] == [f"{team.namespace}/urgent"]
        assert evicted["time"] >= will_evict["data"]["deadline"] >= will_evict["time"]
        stage.wait("the preemptor's notice", lambda: "privileged" in types(urgent))
        privileged = of(urgent)[types(urgent).index("privileged")]
        assert privileged["data"]["deadline"] == will_evict["data"]["deadline"]
        assert all(
            e["data"].get("namespace") == team.namespace
            for e in receiver.events
            if e["data"]["kind"] == "PodGroup"
        )

        stage.custom.patch_cluster_custom_object(
            "scheduling.sluice.dev", "v1alpha1", Queue.plural, queue, {"spec": {"state": "Closed"}}
        )
        queue_uid = stage.custom.get_cluster_custom_object(
            "scheduling.sluice.dev", "v1alpha1", Queue.plural, queue
        )["metadata"]["uid"]
        stage.wait("the queue's notice", lambda: "closing" in types(queue_uid))
        assert types(queue_uid)[0] == "open"
