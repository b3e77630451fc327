"""The jobs operator's API calls over a job's life (operators/controllers/jobs.py), against an
in-memory stand-in for the few API calls it makes: suspend while Inqueue gives the admission
back, resume goes through a new one, a job deleted while its pods are created gets no more, a
queue deleted under a running job is shown on it, a lagging pod watch causes no second create."""

from __future__ import annotations

import asyncio
import copy
import itertools
import time
from types import SimpleNamespace
from typing import Any, cast

import kopf

from operators.api.scheduling import PodGroup, Queue
from operators.controllers import jobs as jobs_operator
from operators.controllers.jobs import STATUS_INTERVAL, JobsController, job_pod
from operators.controllers.jobs_apply import Applier, job_path
from operators.controllers.kopf_discovery import served_selectors
from operators.controllers.kopf_runner import KopfSettings, kopf_settings
from operators.jobs.coalesced_events import SEPARATOR
from operators.jobs.reconcile import Event
from operators.runtime.client import ApiError, KubeClient
from operators.runtime.operator_metrics import OperatorMetrics

KEY = ("VCJob", "ns", "j")
GROUP = PodGroup.api_path("ns", "j")
PODS = "/api/v1/namespaces/ns/pods"


class Api:
    """Objects by path; the calls the operator made (Events left out: they are in `events`)."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.events: list[dict[str, Any]] = []
        self.calls: list[tuple[str, str]] = []
        self.patched: dict[str, dict[str, Any]] = {}  # path -> the last merge patch (or status)
        self.gate: asyncio.Event | None = None  # when set up, pod creates wait for it
        self.waiting = 0
        self.two_waiting = asyncio.Event()
        self.revision = 0  # etcd's: every write stamps the object's resourceVersion

    def _stamp(self, obj: dict[str, Any]) -> None:
        self.revision += 1
        obj.setdefault("metadata", {})["resourceVersion"] = str(self.revision)

    async def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        if path.endswith("/events"):
            self.events.append(body)
            return body
        if path == PODS and self.gate is not None:
            self.waiting += 1
            if self.waiting >= 2:
                self.two_waiting.set()
            await self.gate.wait()
        self.calls.append(("POST", path))
        name = f"{path}/{body['metadata']['name']}"
        if name in self.objects:
            raise ApiError(409, {"reason": "AlreadyExists"}, "POST", path)
        self.objects[name] = copy.deepcopy(body)
        self._stamp(self.objects[name])
        return copy.deepcopy(self.objects[name])

    async def merge_patch(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.calls.append(("PATCH", path))
        target = self.objects.get(path.removesuffix("/status"))
        if target is None:
            raise ApiError(404, {"reason": "NotFound"}, "PATCH", path)
        self.patched[path] = body
        if path.endswith("/status"):  # merged into the status, as the API server does
            target["status"] = {**(target.get("status") or {}), **body["status"]}
        self._stamp(target)
        return {**body, "metadata": dict(target["metadata"])}

    async def json_patch(self, path: str, ops: list[dict[str, Any]]) -> dict[str, Any]:
        """The ops the jobs operator sends (`test`, `add`), as the API server applies them: all
        or nothing, 422 when a test fails or a parent is missing. `patched` gets the status."""
        self.calls.append(("PATCH", path))
        target = self.objects.get(path.removesuffix("/status"))
        if target is None:
            raise ApiError(404, {"reason": "NotFound"}, "PATCH", path)
        changed = copy.deepcopy(target)
        for op in ops:
            tokens = op["path"].lstrip("/").split("/")
            *parents, last = (t.replace("~1", "/").replace("~0", "~") for t in tokens)
            into: Any = changed
            for part in parents:
                if not isinstance(into, dict) or part not in into:
                    raise ApiError(422, {"reason": "Invalid"}, "PATCH", path)
                into = into[part]
            if op["op"] == "test" and into.get(last) != op["value"]:
                raise ApiError(422, {"reason": "Invalid"}, "PATCH", path)
            if op["op"] == "add":
                into[last] = copy.deepcopy(op["value"])
        target["status"] = changed.get("status")
        self.patched[path] = {"status": copy.deepcopy(target["status"])}
        self._stamp(target)
        return copy.deepcopy(target)

    async def delete(self, path: str, body: Any = None) -> dict[str, Any]:
        self.calls.append(("DELETE", path))
        gone = self.objects.pop(path, None)
        if gone is None:
            raise ApiError(404, {"reason": "NotFound"}, "DELETE", path)
        self._stamp(gone)  # the object as deleted, at the delete's revision
        return gone

    async def get(self, path: str) -> dict[str, Any]:
        if path not in self.objects:
            raise ApiError(404, {"reason": "NotFound"}, "GET", path)
        return self.objects[path]

    def pods(self) -> list[dict[str, Any]]:
        return [o for p, o in self.objects.items() if p.startswith(PODS + "/")]

    def take_calls(self) -> list[tuple[str, str]]:
        calls, self.calls = self.calls, []
        return calls


def vcjob(generation: int, replicas: int = 3, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "batch.sluice.dev/v1alpha1",
        "kind": "VCJob",
        "metadata": {"name": "j", "namespace": "ns", "uid": "u1", "generation": generation},
        "spec": {
            "tasks": [
                {"name": "w", "replicas": replicas, "template": {"spec": {"containers": []}}}
            ],
            **spec,
        },
    }


class Operator:
    """The controller with its watches fed from the stand-in API by hand."""

    def __init__(self, api: Api) -> None:
        self.api = api
        ctx: Any = SimpleNamespace(client=api)
        self.c = JobsController(ctx)
        # The steps' decisions are read from each status write; the hold of status writes is
        # tested on its own (test_jobs_status_hold.py).
        self.c.status_hold = 0.0

    def job(self, body: dict[str, Any]) -> None:
        self.api.objects[job_path("VCJob", "ns", "j")] = body
        self.c.on_job("MODIFIED", body)

    def group(self, phase: str) -> None:
        body = {**copy.deepcopy(self.api.objects[GROUP]), "status": {"phase": phase}}
        self.c.on_group("MODIFIED", body)

    def group_deleted(self, body: dict[str, Any]) -> None:
        self.c.on_group("DELETED", body)

    def pods_seen(self) -> None:
        """The informer's view catches up with the API: new pods Pending, deleted ones gone."""
        known = {pod.name: pod for pod in self.c._pods_of(KEY)}
        for body in self.api.pods():
            name = body["metadata"]["name"]
            if name not in known:
                body = {
                    **body,
                    "metadata": {**body["metadata"], "uid": f"uid-{name}"},
                    "status": {"phase": "Pending"},
                }
                self.c.on_pod("ADDED", ("ns", name), job_pod(body), None)
        present = {b["metadata"]["name"] for b in self.api.pods()}
        for name, pod in known.items():
            if name not in present:
                self.c.on_pod("DELETED", ("ns", name), None, (KEY, pod))

    def pods_move(self, phase: str) -> None:
        """Every pod of the job bound and in `phase` (kwok's doing)."""
        for body in self.api.pods():
            name = body["metadata"]["name"]
            moved = {
                **body,
                "metadata": {**body["metadata"], "uid": f"uid-{name}"},
                "spec": {**body["spec"], "nodeName": "n1"},
                "status": {"phase": phase},
            }
            old = self.c.pods[KEY][("ns", name)]
            self.c.on_pod("MODIFIED", ("ns", name), job_pod(moved), (KEY, old))

    async def step(self) -> None:
        self.c.dirty.discard(KEY)
        await self.c.reconcile(KEY)

    def phase(self) -> str:
        return str(self.c.jobs[KEY].memory.phase)


async def test_suspended_while_inqueue_the_group_goes_and_resume_waits_for_a_new_admission() -> (
    None
):
    api = Api()
    op = Operator(api)
    op.job(vcjob(1))
    await op.step()
    assert ("POST", PodGroup.api_path("ns")) in api.take_calls()
    op.group("Inqueue")  # admitted: quota reserved for the gang
    await op.step()
    assert len(api.pods()) == 3
    op.pods_seen()
    api.take_calls()

    op.job(vcjob(2, suspend=True))
    await op.step()  # Aborting: the pods are deleted
    assert sum(1 for verb, _ in api.take_calls() if verb == "DELETE") == 3
    op.pods_seen()
    group = api.objects[GROUP]
    await op.step()  # Aborted, nothing alive: the Inqueue group would hold its quota
    assert op.phase() == "Aborted"
    assert ("DELETE", GROUP) in api.take_calls()
    op.group_deleted(group)
    assert KEY in op.c.dirty
    await op.step()
    assert GROUP not in api.objects  # a suspended job gets no new group
    assert api.take_calls() == []

    op.job(vcjob(3, suspend=False))
    await op.step()  # Restarting -> Pending; its group is asked for again
    assert op.phase() == "Pending"
    assert api.pods() == []
    assert KEY in op.c.dirty
    await op.step()
    assert GROUP in api.objects
    assert api.pods() == []  # not before the new group is admitted
    op.group("Pending")
    await op.step()
    assert api.pods() == []
    op.group("Inqueue")
    await op.step()
    assert op.phase() == "Inqueue"
    assert len(api.pods()) == 3


async def test_a_job_deleted_while_its_pods_are_created_gets_no_more_of_them() -> None:
    api = Api()
    op = Operator(api)
    op.c.apply = Applier(cast(KubeClient, api), 2)  # two creates in flight at a time
    op.job(vcjob(1, replicas=10))
    await op.step()
    op.group("Inqueue")
    api.gate = asyncio.Event()
    step = asyncio.create_task(op.step())
    await asyncio.wait_for(api.two_waiting.wait(), 5)
    assert api.waiting == 2  # bounded: the other creates wait for a slot
    op.c.on_job("DELETED", api.objects.pop(job_path("VCJob", "ns", "j")))
    api.gate.set()
    await step
    assert len(api.pods()) == 2  # the two already sent; owner references remove those


async def test_a_queue_deleted_under_a_running_job_is_a_condition_on_that_job() -> None:
    api = Api()
    queue = Queue.api_path(name="team")
    api.objects[queue] = {"metadata": {"name": "team"}}
    op = Operator(api)
    op.job(vcjob(1, queue="team"))
    await op.step()
    op.group("Running")
    await op.step()
    status = job_path("VCJob", "ns", "j") + "/status"

    def valid() -> dict[str, Any]:
        conditions = api.patched[status]["status"]["conditions"]
        return next(c for c in conditions if c["type"] == "Valid")

    assert valid()["status"] == "True"
    del api.objects[queue]
    op.c.on_queue("DELETED", ("", "other"), None, "other")
    assert KEY not in op.c.dirty
    op.c.on_queue("DELETED", ("", "team"), None, "team")
    assert KEY in op.c.dirty
    await op.step()
    assert (valid()["status"], valid()["reason"]) == ("False", "QueueNotFound")
    api.objects[queue] = {"metadata": {"name": "team"}}  # back: found at the next look
    op.c.jobs[KEY].checked = (1, 0.0)
    await op.step()
    assert valid()["status"] == "True"


async def test_a_pod_watch_that_lags_behind_the_creates_causes_no_second_create() -> None:
    api = Api()
    op = Operator(api)
    op.job(vcjob(1))
    await op.step()
    op.group("Inqueue")
    await op.step()
    assert sum(1 for verb, path in api.take_calls() if (verb, path) == ("POST", PODS)) == 3
    await op.step()  # the watch has shown none of them yet
    assert ("POST", PODS) not in api.take_calls()
    op.pods_seen()
    assert op.c.jobs[KEY].creating == {}
    api.objects.pop(PODS + "/j-w-1")  # deleted by someone else, seen by the watch
    op.pods_seen()
    await op.step()
    assert ("POST", PODS) in api.take_calls()
    assert PODS + "/j-w-1" in api.objects


async def test_plugin_objects_are_created_once_and_kept_across_a_restart() -> None:
    api = Api()
    op = Operator(api)
    op.job(vcjob(1, plugins={"svc": [], "ssh": []}))
    await op.step()
    op.group("Inqueue")
    await op.step()
    made = {p: o for p, o in api.objects.items() if "/services/" in p or "/secrets/" in p}
    assert sorted(made) == [
        "/api/v1/namespaces/ns/secrets/j-ssh",
        "/api/v1/namespaces/ns/services/j",
    ]
    assert "/api/v1/namespaces/ns/configmaps/j-svc" in api.objects
    key = copy.deepcopy(api.objects["/api/v1/namespaces/ns/secrets/j-ssh"])
    restarted = Operator(api)  # a new process: no memory of what it made
    restarted.job(vcjob(1, plugins={"svc": [], "ssh": []}))
    restarted.group("Inqueue")
    api.objects.pop(PODS + "/j-w-2")
    restarted.pods_seen()
    await restarted.step()  # re-creates the pod; the plugins' objects exist already
    assert PODS + "/j-w-2" in api.objects
    assert api.objects["/api/v1/namespaces/ns/secrets/j-ssh"] == key  # the same key pair


def test_the_operator_gives_kopf_nothing_to_write_on_pods_nodes_or_jobs() -> None:
    """kopf writes progress/diff-base annotations and finalizers only for change handlers
    (create/update/delete/resume) and daemons; pods are read by the informer, not kopf."""
    registry = kopf.OperatorRegistry()
    ctx: Any = SimpleNamespace(
        client=None, settings=KopfSettings(), name="jobs", stop=asyncio.Event()
    )
    jobs_operator.register(registry, ctx)
    assert registry._changing.get_all_handlers() == []
    assert registry._spawning.get_all_handlers() == []
    watched = {s.plural or s.any_name for s in served_selectors(registry)}
    assert watched == {"vcjobs", "hybridjobs", PodGroup.plural}
    # So kopf's diff base (a deep copy of each event's object) has no reader: none is built.
    settings = kopf_settings(jobs_operator.OPERATOR, KopfSettings())
    body = kopf.Body(cast(kopf.RawBody, vcjob(1) | {"status": {"transitions": [{"seq": 1}] * 64}}))
    assert settings.persistence.diffbase_storage.build(body=body) == {}
    assert settings.persistence.diffbase_storage.fetch(body=body) is None


async def test_a_job_changing_all_the_time_is_reconciled_at_most_once_per_interval() -> None:
    """Status writes coalesce: however often a job's pods change, its passes (each writes the
    status at most once) are STATUS_INTERVAL apart."""
    passes: list[float] = []
    three = asyncio.Event()

    class Counting(JobsController):
        async def reconcile(self, key: tuple[str, str, str]) -> None:
            passes.append(time.monotonic())
            if len(passes) >= 3:
                three.set()

    stop = asyncio.Event()
    ctx: Any = SimpleNamespace(client=None, stop=stop, metrics=OperatorMetrics(""))
    c = Counting(ctx)
    c.on_job("ADDED", vcjob(1))
    worker = asyncio.create_task(c.run())

    async def churn() -> None:
        while not three.is_set():
            c.mark(KEY)  # a pod event
            await asyncio.sleep(0.01)

    await asyncio.wait_for(asyncio.gather(three.wait(), churn()), 60)
    stop.set()
    c.wake.set()
    await asyncio.wait_for(worker, 5)
    assert min(b - a for a, b in itertools.pairwise(passes)) >= STATUS_INTERVAL


async def test_the_host_lists_follow_a_task_scaled_up_and_down_while_running() -> None:
    api = Api()
    op = Operator(api)
    op.job(vcjob(1, replicas=2, plugins={"svc": []}))
    await op.step()
    op.group("Running")
    await op.step()
    op.pods_seen()
    hosts = "/api/v1/namespaces/ns/configmaps/j-svc"
    assert api.objects[hosts]["data"]["w.host"] == "j-w-0.j\nj-w-1.j\n"
    op.job(vcjob(2, replicas=3, plugins={"svc": []}))
    await op.step()
    assert PODS + "/j-w-2" in api.objects
    assert api.patched[hosts] == {"data": {"w.host": "j-w-0.j\nj-w-1.j\nj-w-2.j\n"}}
    op.pods_seen()
    # A scale-down deletes and creates nothing: the lists must still follow (an outside
    # review found them stale, listing hosts that were gone).
    op.job(vcjob(3, replicas=1, plugins={"svc": []}))
    await op.step()
    op.pods_seen()
    await op.step()
    assert PODS + "/j-w-2" not in api.objects
    assert api.patched[hosts] == {"data": {"w.host": "j-w-0.j\n"}}


async def test_a_jobs_transitions_are_told_in_one_event_none_lost() -> None:
    """A one-pod job has 11 transitions; each was a POST of its own (at 40 jobs a second, more
    Event writes than the API server took), then 3 (the first at once, the rest of each 5 s
    together). Now they are held EVENT_INTERVAL from the first and all told at once when the
    job ends: one Event for a job that ends within it, each `#seq` line kept, in order."""
    api = Api()
    op = Operator(api)
    op.c.event_interval = 3600.0  # held until the job ends
    op.job(vcjob(1, replicas=1))
    await op.step()
    op.group("Inqueue")
    await op.step()
    op.pods_seen()
    await op.step()
    op.pods_move("Pending")
    await op.step()
    op.pods_move("Running")
    op.group("Running")
    await op.step()
    await op.c.events.drain(5)
    assert api.events == []
    assert KEY in op.c.flush_due
    op.pods_move("Succeeded")
    await op.step()
    assert op.phase() == "Completed"
    await op.c.events.drain(5)
    assert KEY not in op.c.flush_due
    told = [m for e in api.events for m in e["message"].split(SEPARATOR)]
    seqs = [int(m.split(" ", 1)[0].lstrip("#")) for m in told]
    status = api.patched[job_path("VCJob", "ns", "j") + "/status"]["status"]
    assert seqs == list(range(1, status["transitionSeq"] + 1))
    assert len(seqs) == 11
    assert [e["reason"] for e in api.events] == ["JobCompleted"]


async def test_held_transitions_are_told_when_their_interval_is_over() -> None:
    """A job that does not end soon still tells its story every EVENT_INTERVAL: the worker
    flushes what is due (here: due at once)."""
    api = Api()
    op = Operator(api)
    op.c.event_interval = 0.0
    op.c.ctx.stop = asyncio.Event()
    op.c.ctx.metrics = OperatorMetrics("")
    op.job(vcjob(1, replicas=1))
    await op.step()
    assert KEY in op.c.flush_due
    worker = asyncio.create_task(op.c.run())
    for _ in range(100):
        if api.events:
            break
        await asyncio.sleep(0.02)
    op.c.ctx.stop.set()
    op.c.wake.set()
    await asyncio.wait_for(worker, 5)
    await op.c.events.drain(5)
    assert [e["reason"] for e in api.events] == ["JobPending"]


async def test_a_job_replaced_by_one_of_its_name_still_tells_its_held_transitions() -> None:
    api = Api()
    op = Operator(api)
    op.c.event_interval = 3600.0
    op.job(vcjob(1, replicas=1))
    await op.step()
    op.group("Inqueue")
    await op.step()  # JobInqueue: held
    successor = vcjob(1, replicas=1)
    successor["metadata"]["uid"] = "u2"
    op.job(successor)
    await op.c.events.drain(5)
    told = [e["message"] for e in api.events if e["involvedObject"]["uid"] == "u1"]
    assert any("-> Inqueue" in m for m in told)


async def test_an_action_is_told_after_the_transitions_that_led_to_it() -> None:
    """Transitions are held EVENT_INTERVAL; the RestartTask Event was written at once, so
    `kubectl describe` listed the restart before the job's and its pod's way to Running (and
    before the step's own `-> Restarting` lines), up to 10 s later. The held transitions, this
    step's among them, now go out just before the action, in one Event."""
    api = Api()
    op = Operator(api)
    op.c.event_interval = 3600.0
    op.job(vcjob(1, replicas=1, policies=[{"event": "PodFailed", "action": "RestartTask"}]))
    await op.step()
    op.group("Inqueue")
    await op.step()
    op.pods_seen()
    op.pods_move("Running")
    op.group("Running")
    await op.step()
    op.pods_move("Failed")
    await op.step()
    assert op.phase() == "Restarting"
    await op.c.events.drain(5)
    assert [e["reason"] for e in api.events] == ["JobRestarting", "RestartTask"]
    told = api.events[0]["message"].split(SEPARATOR)
    status = api.patched[job_path("VCJob", "ns", "j") + "/status"]["status"]
    assert [int(m.split(" ", 1)[0].lstrip("#")) for m in told] == list(
        range(1, status["transitionSeq"] + 1)
    )
    assert any("pod j-w-0: - -> Running" in m for m in told)
    assert any("job j: Running -> Restarting (RestartTask)" in m for m in told)
    assert KEY not in op.c.flush_due  # nothing is held behind the action


async def test_a_late_step_of_a_replaced_job_leaves_its_successors_held_transitions_due() -> None:
    """A step of the old job that ends after a job of its name came writes its lines at once
    (`_tell_transitions`, replaced). That flush dropped the name's flush timer, which by then was
    the successor's: its held transitions waited for its next transition (or its end)."""
    api = Api()
    op = Operator(api)
    op.c.event_interval = 3600.0
    op.job(vcjob(1, replicas=1))
    await op.step()
    old = op.c.jobs[KEY]
    successor = vcjob(1, replicas=1)
    successor["metadata"]["uid"] = "u2"
    op.job(successor)
    await op.step()  # the successor's JobPending: held
    due = op.c.flush_due[KEY]
    late = Event("Normal", "JobInqueue", "#3 job j: Pending -> Inqueue", True)
    op.c._tell_transitions(KEY, old, [late])  # the old job's step, ending now
    assert op.c.flush_due.get(KEY) == due
    assert op.c.jobs[KEY].transitions  # still held, and due with its timer
    await op.c.events.drain(5)
    assert [e["involvedObject"]["uid"] for e in api.events] == ["u1", "u1"]
