"""A tiny in-memory stand-in for the cluster around the job core: it applies a Plan's creates and
deletes to a pod table, lets a test move pods through their phases, and feeds the next step."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from operators.api.batch import HybridJob, VCJob
from operators.jobs.observed import GroupObs, PodObs
from operators.jobs.pods import pod_name
from operators.jobs.reconcile import Memory, Observed, Plan, reconcile
from operators.jobs.shape import JobShape, from_hybridjob, from_vcjob

T0 = 1_800_000_000.0


def template(**annotations: str) -> dict[str, Any]:
    return {
        "metadata": {"annotations": annotations} if annotations else {},
        "spec": {"containers": [{"name": "c", "image": "x"}]},
    }


def _body(kind: str, name: str, uid: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "batch.sluice.dev/v1alpha1",
        "kind": kind,
        "metadata": {"name": name, "namespace": "ns", "uid": uid, "generation": 1},
        "spec": spec,
    }


def vcjob(**spec: Any) -> JobShape:
    return named_vcjob("j", **spec)


def named_vcjob(name: str, **spec: Any) -> JobShape:
    return from_vcjob(VCJob.model_validate(_body("VCJob", name, "u1", spec)))


def hybridjob(**spec: Any) -> JobShape:
    return from_hybridjob(HybridJob.model_validate(_body("HybridJob", "h", "u2", spec)))


class Sim:
    def __init__(self, job: JobShape, hooks: bool = False) -> None:
        self.job = job
        self.memory = Memory()
        self.pods: dict[str, PodObs] = {}
        self.gone: list[PodObs] = []
        self.group: GroupObs | None = None
        self.now = T0
        self.hooks = hooks
        self.plans: list[Plan] = []
        self.serial = 0

    def step(self, seconds: float = 1.0) -> Plan:
        self.now += seconds
        obs = Observed(
            pods=tuple(self.pods.values()),
            gone=tuple(self.gone),
            group=self.group,
            hooks=self.hooks,
        )
        self.gone = []
        plan = reconcile(self.job, self.memory, obs, self.now)
        self.memory = plan.memory
        for pod in plan.delete:
            self.pods.pop(pod.name, None)  # deletion completes at once, as in kwok
        for task, index in plan.create:
            self.serial += 1
            name = pod_name(self.job.name, task.name, index)
            assert name not in self.pods, f"duplicate pod {name}"
            self.pods[name] = PodObs(
                name=name,
                uid=f"uid-{self.serial}",
                task=task.name,
                index=index,
                version=plan.memory.version,
                phase="Pending",
                created=self.now,
            )
        # What the operator does with the group after a step (controllers/jobs.py): a restarted
        # job's group goes back for admission, a released one is deleted.
        if any(t.level.value == "Job" and t.to == "Restarting" for t in plan.transitions):
            self.group = replace(self.group, phase="Pending") if self.group else None
        if plan.release_group:
            self.group = None
        self.plans.append(plan)
        return plan

    def admit(self) -> Plan:
        self.group = GroupObs(phase="Inqueue")
        return self.step()

    def set(self, name: str, phase: str, **extra: Any) -> None:
        pod = self.pods[name]
        node = pod.node or ("node-1" if phase != "Pending" else "")
        self.pods[name] = replace(pod, phase=phase, node=node, **extra)

    def run_all(self, task: str | None = None) -> None:
        for name, pod in list(self.pods.items()):
            if (task is None or pod.task == task) and pod.alive:
                self.set(name, "Running")

    def evict(self, name: str) -> None:
        pod = self.pods.pop(name)
        self.gone.append(replace(pod, evicted=True, deleting=True))

    @property
    def phase(self) -> str:
        return str(self.memory.phase)

    def job_path(self) -> list[str]:
        return [
            t.to
            for p in self.plans
            for t in p.transitions
            if t.level.value == "Job" and t.name == self.job.name
        ]
