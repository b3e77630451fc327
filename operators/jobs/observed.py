"""What the operator observed, reduced to what the job core needs (parsed from wire dicts here,
so the operator and the tests feed the core the same way)."""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from operators.api import labels as L


def _timestamp(raw: object) -> float:
    if not isinstance(raw, str) or not raw:
        return 0.0
    try:
        return datetime.datetime.fromisoformat(raw).timestamp()
    except ValueError:
        return 0.0


def _int(raw: object, default: int = 0) -> int:
    try:
        return int(str(raw))
    except ValueError:
        return default


@dataclass(frozen=True, slots=True)
class PodObs:
    name: str
    uid: str
    task: str
    index: int
    version: int
    phase: str  # the pod's phase: Pending, Running, Succeeded, Failed, Unknown
    node: str = ""
    deleting: bool = False
    evicted: bool = False  # a DisruptionTarget condition (eviction, preemption) or reason Evicted
    exit_code: int | None = None
    restarts: int = 0
    created: float = 0.0
    reason: str = ""

    @property
    def alive(self) -> bool:
        """Holds (or may soon hold) resources: not finished."""
        return self.phase not in ("Succeeded", "Failed")

    @property
    def finished(self) -> bool:
        return not self.alive


def _exit_code(status: Mapping[str, Any]) -> int | None:
    # The first container that terminated with a non-zero code decides, as in Volcano.
    for cs in status.get("containerStatuses") or ():
        term = (cs.get("state") or {}).get("terminated") or (cs.get("lastState") or {}).get(
            "terminated"
        )
        if term and term.get("exitCode") not in (None, 0):
            return _int(term.get("exitCode"), 1)
    for cs in status.get("containerStatuses") or ():
        term = (cs.get("state") or {}).get("terminated")
        if term:
            return _int(term.get("exitCode"), 0)
    return None


def pod_obs(obj: Mapping[str, Any]) -> PodObs:
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    conditions = status.get("conditions") or ()
    evicted = status.get("reason") == "Evicted" or any(
        c.get("type") == "DisruptionTarget" and c.get("status") == "True" for c in conditions
    )
    restarts = sum(_int(cs.get("restartCount")) for cs in status.get("containerStatuses") or ())
    return PodObs(
        name=str(meta.get("name", "")),
        uid=str(meta.get("uid", "")),
        task=str(labels.get(L.TASK, "")),
        index=_int(labels.get(L.REPLICA_INDEX)),
        version=_int(annotations.get(L.JOB_VERSION)),
        phase=str(status.get("phase") or "Pending"),
        node=str(spec.get("nodeName") or ""),
        deleting=bool(meta.get("deletionTimestamp")),
        evicted=evicted,
        exit_code=_exit_code(status),
        restarts=restarts,
        created=_timestamp(meta.get("creationTimestamp")),
        reason=str(status.get("reason") or ""),
    )


@dataclass(frozen=True, slots=True)
class GroupObs:
    """The job's PodGroup as the scheduler left it."""

    phase: str = "Pending"
    preemption_role: str = ""  # Privileged / WillEvict / ""
    preemption_deadline: str = ""
    preemption_peers: tuple[str, ...] = ()
    unschedulable: str = ""  # message of an Unschedulable=True condition, if any


def group_obs(obj: Mapping[str, Any]) -> GroupObs:
    status = obj.get("status") or {}
    pre = status.get("preemption") or {}
    message = ""
    for c in status.get("conditions") or ():
        if c.get("type") == "Unschedulable" and c.get("status") == "True":
            message = str(c.get("message") or c.get("reason") or "")
    return GroupObs(
        phase=str(status.get("phase") or "Pending"),
        preemption_role=str(pre.get("role") or ""),
        preemption_deadline=str(pre.get("deadline") or ""),
        preemption_peers=tuple(str(p) for p in pre.get("peers") or ()),
        unschedulable=message,
    )
