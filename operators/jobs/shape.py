"""The kind-neutral shape of a job: what both HybridJob and VCJob become before reconciling.

A VCJob task and a HybridJob replica type are the same thing here (`TaskShape`): a named set of
identical pods with a minimum (part of the gang), a desired count and, for elastic replica types,
a maximum and a growth priority.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final

from operators.api.batch import (
    HybridJob,
    LifecyclePolicy,
    PolicyAction,
    PolicyEvent,
    RestartPolicy,
    VCJob,
)

DEFAULT_MAX_RETRY: Final = 3
_EMPTY: Mapping[str, Any] = MappingProxyType({})
_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ns|us|ms|s|m|h)")
_UNIT = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def duration_seconds(text: str) -> float:
    """A Go duration ("90s", "1h30m") in seconds (the API's pattern guarantees the syntax)."""
    return sum(float(n) * _UNIT[u] for n, u in _DURATION_PART.findall(text))


@dataclass(frozen=True, slots=True)
class Policy:
    """`events` (or a pod exit code) -> `action`, delayed by `timeout` seconds when set."""

    action: PolicyAction
    events: frozenset[PolicyEvent] = frozenset()
    exit_code: int | None = None
    timeout: float | None = None

    @classmethod
    def of(cls, p: LifecyclePolicy) -> Policy:
        return cls(
            action=p.action,
            events=frozenset(p.triggers()),
            exit_code=p.exit_code,
            timeout=duration_seconds(p.timeout) if p.timeout else None,
        )


def _policies(raw: list[LifecyclePolicy] | None) -> tuple[Policy, ...]:
    return tuple(Policy.of(p) for p in raw or ())


@dataclass(frozen=True, slots=True)
class TaskShape:
    name: str
    replicas: int
    """Desired pods now (VCJob: replicas; HybridJob: spec.replicas, else maxReplicas)."""
    min_available: int
    max_replicas: int
    priority: int = 0
    template: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)
    policies: tuple[Policy, ...] = ()
    max_retry: int | None = None
    depends_on: tuple[str, ...] = ()
    depends_on_any: bool = False
    restart_policy: RestartPolicy | None = None
    """HybridJob only: what a failed pod of this type gets without a matching policy."""


@dataclass(frozen=True, slots=True)
class JobShape:
    kind: str
    namespace: str
    name: str
    uid: str
    tasks: tuple[TaskShape, ...]
    min_available: int
    min_success: int | None = None
    policies: tuple[Policy, ...] = ()
    max_retry: int = DEFAULT_MAX_RETRY
    ttl_seconds_after_finished: int | None = None
    suspend: bool = False
    elastic: bool = False
    plugins: Mapping[str, tuple[str, ...]] = field(default_factory=lambda: _EMPTY)
    scheduler_name: str | None = None
    generation: int = 0

    def task(self, name: str) -> TaskShape | None:
        for t in self.tasks:
            if t.name == name:
                return t
        return None

    @property
    def max_replicas(self) -> int:
        return sum(t.max_replicas for t in self.tasks)

    def dependency_graph(self) -> dict[str, list[str]]:
        return {t.name: list(t.depends_on) for t in self.tasks}


def _meta(obj: HybridJob | VCJob) -> tuple[str, str, str, int]:
    m = obj.metadata
    return (m.namespace or "default", m.name or "", m.uid or "", m.generation or 0)


def from_vcjob(job: VCJob) -> JobShape:
    spec = job.spec
    namespace, name, uid, generation = _meta(job)
    tasks = tuple(
        TaskShape(
            name=t.name,
            replicas=t.replicas,
            min_available=t.effective_min_available,
            max_replicas=t.replicas,
            template=MappingProxyType(dict(t.template)),
            policies=_policies(t.policies),
            max_retry=t.max_retry,
            depends_on=tuple(t.depends_on.name) if t.depends_on else (),
            depends_on_any=bool(t.depends_on and t.depends_on.iteration.value == "any"),
        )
        for t in spec.tasks
    )
    plugins: dict[str, tuple[str, ...]] = {}
    if spec.plugins is not None:
        for key in ("svc", "env", "ssh"):
            args = getattr(spec.plugins, key)
            if args is not None:
                plugins[key] = tuple(args)
    return JobShape(
        kind="VCJob",
        namespace=namespace,
        name=name,
        uid=uid,
        generation=generation,
        tasks=tasks,
        min_available=spec.effective_min_available,
        min_success=spec.min_success,
        policies=_policies(spec.policies),
        max_retry=DEFAULT_MAX_RETRY if spec.max_retry is None else spec.max_retry,
        ttl_seconds_after_finished=spec.ttl_seconds_after_finished,
        suspend=bool(spec.suspend),
        plugins=MappingProxyType(plugins),
        scheduler_name=spec.scheduler_name,
    )


def from_hybridjob(job: HybridJob) -> JobShape:
    spec = job.spec
    namespace, name, uid, generation = _meta(job)
    tasks = tuple(
        TaskShape(
            # Pod names, the task label and the PodGroup's task keys are DNS labels.
            name=key.lower(),
            replicas=r.replicas if r.replicas is not None else r.effective_max_replicas,
            min_available=r.min_replicas,
            max_replicas=r.effective_max_replicas,
            priority=r.priority or 0,
            template=MappingProxyType(dict(r.template)),
            policies=_policies(r.policies),
            restart_policy=r.restart_policy,
        )
        for key, r in spec.replica_specs.items()
    )
    return JobShape(
        kind="HybridJob",
        namespace=namespace,
        name=name,
        uid=uid,
        generation=generation,
        tasks=tasks,
        min_available=spec.min_member,
        policies=_policies(spec.policies),
        max_retry=DEFAULT_MAX_RETRY if spec.max_retry is None else spec.max_retry,
        ttl_seconds_after_finished=spec.ttl_seconds_after_finished,
        suspend=bool(spec.suspend),
        elastic=any(t.max_replicas > t.min_available for t in tasks),
    )
