"""Jobs operator cases an outside review built against the expectations record, the restart's
re-admission (each failed before its fix; the host lists' case is in test_jobs_lifecycle)."""

from __future__ import annotations

import copy
import time
from typing import Any

from operators.controllers.jobs import job_pod

from .test_jobs_lifecycle import GROUP, KEY, PODS, Api, Operator, vcjob


class FastWatchApi(Api):
    """The pod watch shows a pod before its create call returns (a real watch often does; in a
    1,000-pod gather it always does for the first pods)."""

    op: Operator

    async def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        out = await super().post(path, body)
        if path == PODS:
            name = body["metadata"]["name"]
            seen = {**copy.deepcopy(body), "status": {"phase": "Pending"}}
            seen["metadata"]["uid"] = f"uid-{name}"
            self.op.c.on_pod("ADDED", ("ns", name), job_pod(seen), None)
        return out


async def admitted_with_a_fast_watch() -> tuple[FastWatchApi, Operator]:
    api = FastWatchApi()
    op = Operator(api)
    api.op = op
    op.job(vcjob(1))
    await op.step()
    op.group("Inqueue")
    await op.step()
    assert len(api.pods()) == 3
    return api, op


async def test_a_pod_seen_during_its_create_then_deleted_is_created_again_at_once() -> None:
    api, op = await admitted_with_a_fast_watch()
    api.objects.pop(PODS + "/j-w-1")  # evicted or deleted by someone, and seen
    op.pods_seen()
    await op.step()
    assert PODS + "/j-w-1" in api.objects  # not 60 s later, when the expectation lapsed


async def test_a_create_held_back_by_an_expectation_wakes_the_job_when_it_lapses() -> None:
    api, op = await admitted_with_a_fast_watch()
    # Created just now and never shown by the watch (as across a relist).
    op.c.jobs[KEY].creating["j-w-1"] = time.monotonic()
    api.objects.pop(PODS + "/j-w-1")
    op.pods_seen()
    op.c.timers.pop(KEY, None)
    await op.step()
    assert PODS + "/j-w-1" not in api.objects  # held back while the expectation stands
    assert KEY in op.c.timers  # and looked at again when it lapses, not at a random event


def pod_phase(op: Operator, name: str, phase: str) -> None:
    pod = next(p for p in op.c._pods_of(KEY) if p.name == name)
    body = copy.deepcopy(op.api.objects[PODS + "/" + name])
    body["metadata"]["uid"] = pod.uid
    body["status"] = {"phase": phase}
    op.c.on_pod("MODIFIED", ("ns", name), job_pod(body), (KEY, pod))


async def test_a_group_event_older_than_the_readmit_does_not_admit_the_restarted_job() -> None:
    api = Api()
    op = Operator(api)
    op.job(vcjob(1, policies=[{"event": "PodFailed", "action": "RestartJob"}], maxRetry=5))
    await op.step()
    op.group("Inqueue")
    await op.step()
    op.pods_seen()
    for name in ("j-w-0", "j-w-1", "j-w-2"):
        pod_phase(op, name, "Running")
    op.group("Running")
    stale = {**copy.deepcopy(api.objects[GROUP]), "status": {"phase": "Running"}}
    await op.step()
    pod_phase(op, "j-w-1", "Failed")
    await op.step()  # Restarting: pods deleted, the group patched back to Pending
    assert op.phase() == "Restarting"
    op.c.on_group("MODIFIED", stale)  # the scheduler's Running from before, delivered late
    op.pods_seen()
    api.take_calls()
    for _ in range(3):
        await op.step()
    assert api.pods() == [], op.phase()
    op.group("Inqueue")  # the scheduler's re-admission
    await op.step()
    assert len(api.pods()) == 3
