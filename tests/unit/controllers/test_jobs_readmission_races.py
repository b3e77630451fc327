"""Races between the jobs operator's re-admission of a restarted or resumed job and the events
of its PodGroup (operators/controllers/jobs.py): a phase the scheduler derived from pods it had
not yet seen leave, and a late event of a group the operator has deleted. Each case failed
before its fix."""

from __future__ import annotations

import copy
from typing import Any

from operators.controllers.jobs import job_pod

from .test_jobs_lifecycle import GROUP, KEY, PODS, Api, Operator, vcjob


def pod_phase(op: Operator, name: str, phase: str, node: str = "n1") -> None:
    pod = next(p for p in op.c._pods_of(KEY) if p.name == name)
    body = copy.deepcopy(op.api.objects[PODS + "/" + name])
    body["metadata"]["uid"] = pod.uid
    body["spec"] = {**body.get("spec", {}), "nodeName": node}
    body["status"] = {"phase": phase}
    op.c.on_pod("MODIFIED", ("ns", name), job_pod(body), (KEY, pod))


def scheduler_writes(api: Api, phase: str) -> dict[str, Any]:
    """A status write of the scheduler: a newer resourceVersion than anything before it."""
    api.revision += 1
    group = api.objects[GROUP]
    group["metadata"]["resourceVersion"] = str(api.revision)
    return {**copy.deepcopy(group), "status": {"phase": phase}}


async def running_job(api: Api, op: Operator, **spec: Any) -> None:
    policies = [{"event": "PodFailed", "action": "RestartJob"}]
    op.job(vcjob(1, policies=policies, maxRetry=5, **spec))
    await op.step()
    op.group("Inqueue")
    await op.step()
    op.pods_seen()
    for pod in api.pods():
        pod_phase(op, pod["metadata"]["name"], "Running")
    op.group("Running")
    await op.step()
    assert op.phase() == "Running"


async def test_running_written_from_pods_the_scheduler_has_not_seen_leave_admits_nothing() -> None:
    api = Api()
    op = Operator(api)
    await running_job(api, op)
    pod_phase(op, "j-w-1", "Failed")
    await op.step()  # Restarting: pods deleted, the group patched back to Pending
    assert op.phase() == "Restarting"
    # The scheduler's pod watch has not shown the deletes yet: from its pods the gang still
    # holds its nodes, so it writes Running after (and over) the re-admission.
    op.c.on_group("MODIFIED", scheduler_writes(api, "Running"))
    op.pods_seen()
    for _ in range(3):
        await op.step()
    assert api.pods() == [], op.phase()
    # The group is sent back for admission again: left Running, the scheduler (which keeps
    # the phase of a group whose members left) would never admit it.
    assert api.patched[GROUP + "/status"] == {"status": {"phase": "Pending"}}
    op.c.on_group("MODIFIED", scheduler_writes(api, "Pending"))
    await op.step()
    assert api.pods() == []
    op.group("Inqueue")  # the scheduler's re-admission
    await op.step()
    assert len(api.pods()) == 3


async def test_running_after_a_task_restart_is_believed_while_the_other_tasks_hold_the_gang() -> (
    None
):
    api = Api()
    op = Operator(api)
    template: dict[str, Any] = {"spec": {"containers": []}}
    restart_task = [{"event": "PodFailed", "action": "RestartTask"}]
    tasks = [
        {"name": "ps", "replicas": 2, "template": template},
        {
            "name": "w",
            "replicas": 1,
            "minAvailable": 0,
            "template": template,
            "policies": restart_task,
        },
    ]
    await running_job(api, op, tasks=tasks)
    pod_phase(op, "j-w-0", "Failed")
    await op.step()  # Restarting the task w: its pod deleted, the group back to Pending
    assert op.phase() == "Restarting"
    op.pods_seen()
    api.take_calls()
    # The ps pods still run: the scheduler's Running is true, and the job goes on.
    op.c.on_group("MODIFIED", scheduler_writes(api, "Running"))
    await op.step()
    await op.step()
    assert ("PATCH", GROUP + "/status") not in api.calls
    assert PODS + "/j-w-0" in api.objects, op.phase()


async def test_a_late_event_of_a_released_group_admits_no_resumed_job() -> None:
    api = Api()
    op = Operator(api)
    await running_job(api, op)
    op.job(vcjob(2, suspend=True))
    await op.step()  # Aborting: the pods are deleted
    op.pods_seen()
    late = {**copy.deepcopy(api.objects[GROUP]), "status": {"phase": "Running"}}
    await op.step()  # Aborted: the group is deleted (its quota given back)
    assert GROUP not in api.objects
    op.job(vcjob(3, suspend=False))
    await op.step()  # Restarting -> Pending, its group to be created again
    op.c.on_group("MODIFIED", late)  # an event from before the delete, delivered after it
    for _ in range(3):
        await op.step()
    assert api.pods() == [], op.phase()
    assert GROUP in api.objects  # created again, to be admitted
    op.group("Inqueue")
    await op.step()
    assert len(api.pods()) == 3
