"""What the jobs operator keeps of a watched job between events (operators/controllers/jobs.py):
its spec and metadata, not the status it wrote itself (that is the job's Memory)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any, cast

from operators.api import labels as L
from operators.controllers.jobs import JobsController, digest, job_pod, kept, shape_of
from operators.controllers.jobs_apply import podgroup_body
from operators.jobs.pods import group_name
from operators.jobs.reconcile import Memory
from operators.runtime.client import KubeClient

from .test_jobs_apply import RecordingClient

KEY = ("VCJob", "ns", "j")


def job(generation: int = 1, delivered: int = 0, transitions: int = 40) -> dict[str, Any]:
    log = [
        {"seq": i + 1, "level": "Replica", "name": f"j-w-{i}", "to": "Running", "time": "t"}
        for i in range(transitions)
    ]
    return {
        "apiVersion": "batch.sluice.dev/v1alpha1",
        "kind": "VCJob",
        "metadata": {
            "name": "j",
            "namespace": "ns",
            "uid": "u1",
            "generation": generation,
            "managedFields": [{"manager": "sluice", "fieldsV1": {"f:status": {}}}],
        },
        "spec": {"tasks": [{"name": "w", "replicas": 40, "template": {"spec": {}}}]},
        "status": {
            "phase": "Running",
            "version": 2,
            "retryCount": 1,
            "transitionSeq": transitions,
            "transitions": log,
            "transitionsDelivered": delivered,
            "replicas": [{"name": f"j-w-{i}", "phase": "Running"} for i in range(40)],
        },
    }


def controller() -> JobsController:
    ctx: Any = SimpleNamespace(client=None)
    return JobsController(ctx)


def test_a_watched_job_keeps_what_it_asks_for_and_its_memory_not_its_status() -> None:
    c = controller()
    body = job()
    c.on_job("ADDED", body)
    state = c.jobs[KEY]
    assert state.body["spec"] == body["spec"]
    assert "managedFields" not in state.body["metadata"]
    assert state.body["metadata"]["uid"] == "u1"
    assert state.body["status"] == {"phase": "Running", "transitionsDelivered": 0}
    # What the status said was decided is the job's Memory, seeded at first sight.
    assert state.memory == Memory.from_status(body["status"])
    assert (state.memory.version, state.memory.retry_count, state.memory.log.seq) == (2, 1, 40)
    assert KEY in c.dirty


def test_the_echo_of_our_own_status_write_is_no_work_but_a_spec_change_is() -> None:
    c = controller()
    c.on_job("ADDED", job())
    c.dirty.clear()
    c.on_job("MODIFIED", job(transitions=41))  # our status write coming back
    assert c.dirty == set()
    assert c.jobs[KEY].memory.log.seq == 40  # the operator's own memory stays the truth
    c.on_job("MODIFIED", job(generation=2))
    assert c.dirty == {KEY}


def test_the_events_operators_cursor_reaches_the_memory() -> None:
    c = controller()
    c.on_job("ADDED", job())
    c.on_job("MODIFIED", job(delivered=30))
    assert c.jobs[KEY].memory.log.delivered == 30
    c.on_job("MODIFIED", job(delivered=10))  # an older echo never moves it back
    assert c.jobs[KEY].memory.log.delivered == 30


def test_a_new_job_of_the_same_name_starts_from_its_own_status() -> None:
    c = controller()
    c.on_job("ADDED", job())
    fresh = job(transitions=0)
    fresh["metadata"]["uid"] = "u2"
    del fresh["status"]
    c.on_job("ADDED", fresh)
    assert c.jobs[KEY].memory == Memory()
    c.on_job("DELETED", fresh)
    assert KEY not in c.jobs


def test_the_written_status_is_compared_by_digest() -> None:
    status = job()["status"]
    same = dict(reversed(list(status.items())))
    assert digest(status) == digest(same)
    assert len(digest(status)) == 16
    assert digest(status) != digest({**status, "running": 1})
    assert kept(job())["status"] == kept(job(transitions=3))["status"]


def group(phase: str = "Running", **status: Any) -> dict[str, Any]:
    owner = {"apiVersion": "batch.sluice.dev/v1alpha1", "kind": "VCJob", "name": "j"}
    return {
        "metadata": {"name": "j", "namespace": "ns", "ownerReferences": [owner]},
        "spec": {"minMember": 2, "queue": "q"},
        "status": {"phase": phase, **status},
    }


def test_a_group_event_that_moves_nothing_a_job_reads_is_no_work() -> None:
    """The events operator's eventLog writes and the scheduler's count updates come back as
    PodGroup events; the job's reconcile reads none of it."""
    c = controller()
    c.on_job("ADDED", job())
    c.on_group("ADDED", group())
    assert KEY in c.dirty
    c.dirty.clear()
    c.on_group("MODIFIED", group(eventLog={"seq": 1, "entries": []}, running=2))
    assert c.dirty == set()
    c.on_group("MODIFIED", group(preemption={"role": "WillEvict", "deadline": "t"}))
    assert c.dirty == {KEY}
    c.dirty.clear()
    c.on_group("DELETED", group())
    assert c.dirty == {KEY}


def pod(name: str, uid: str, phase: str, job_name: str = "j") -> dict[str, Any]:
    labels = {L.JOB_KIND: "VCJob", L.JOB_NAME: job_name, L.TASK: "w", L.REPLICA_INDEX: "0"}
    return {
        "metadata": {"name": name, "namespace": "ns", "uid": uid, "labels": labels},
        "status": {"phase": phase},
    }


def test_pods_are_kept_under_their_job_and_a_pod_gone_unasked_is_remembered() -> None:
    """The pod informer's changes: records under the job (what reconcile reads); a pod that
    disappears without our delete is kept as last seen for the job's next step; one we deleted
    is not (its delete is what we decided)."""
    c = controller()
    c.on_job("ADDED", job())
    c.dirty.clear()
    first, second = job_pod(pod("j-w-0", "p1", "Running")), job_pod(pod("j-w-1", "p2", "Running"))
    c.on_pod("ADDED", ("ns", "j-w-0"), first, None)
    c.on_pod("ADDED", ("ns", "j-w-1"), second, None)
    assert first[0] == KEY
    assert {p.uid for p in c._pods_of(KEY)} == {"p1", "p2"}
    assert c.dirty == {KEY}
    c.jobs[KEY].deleting["p1"] = 0.0
    c.on_pod("DELETED", ("ns", "j-w-0"), None, first)
    c.on_pod("DELETED", ("ns", "j-w-1"), None, second)
    assert c._pods_of(KEY) == []
    assert c.jobs[KEY].deleting == {}
    assert [p.uid for p in c.jobs[KEY].gone] == ["p2"]
    assert c.pods == {}


async def test_the_reconcile_worker_waits_until_the_pods_are_listed() -> None:
    """No job is judged from a view without its pods (it would look as if every pod was gone)."""
    stop = asyncio.Event()
    ctx: Any = SimpleNamespace(client=None, stop=stop)
    c = JobsController(ctx)
    c.on_job("ADDED", job())
    listed = asyncio.Event()
    worker = asyncio.create_task(c.run([listed]))
    await asyncio.sleep(0.05)
    assert c.dirty == {KEY}
    assert not c.running
    stop.set()
    listed.set()
    await asyncio.wait_for(worker, 5)


async def test_what_the_job_remembers_as_sent_to_its_group_is_what_the_group_took() -> None:
    """A restart's create finds the group (409) before its event arrives: the grace set on the
    job while the operator was down must still be patched once the group is seen."""
    body = job()
    body["spec"] |= {"queue": "q", "staleGangGraceSeconds": 30, "minAvailable": 2}
    c = controller()
    client = RecordingClient(exists=True)
    c.apply.client = cast(KubeClient, client)
    c.on_job("ADDED", body)
    state = c.jobs[KEY]
    shape = shape_of(state.body)
    gkey = (shape.namespace, group_name(shape))
    await c._ensure_group(state, shape, gkey, state.memory)  # POST -> 409: nothing taken
    old = podgroup_body(shape, {"queue": "q"}, body["metadata"])["spec"]
    c.on_group("ADDED", {"metadata": {"namespace": gkey[0], "name": gkey[1]}, "spec": old})
    await c._ensure_group(state, shape, gkey, state.memory)
    patches = [b["spec"] for m, _, b in client.calls if m == "PATCH"]
    assert patches == [{"staleGangGraceSeconds": 30}]
