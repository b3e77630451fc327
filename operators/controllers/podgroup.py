"""The `podgroup` operator: finished phases from the pods, and pods naming missing groups
(docs/admin.md "PodGroups").

Pods of the `sluice` scheduler that name a group, and PodGroups, are read through kopf indexes;
their events mark the group dirty and poke one coalesced reconcile, which writes
Completed/Failed (or Pending again) and the succeeded/failed counts where they differ
(`podgroup_phase` decides). A pod whose PodGroup does not exist after a grace period gets one
Warning Event `PodGroupNotFound`.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import kopf

from operators.api import labels as L
from operators.controllers import kopf_runner, podgroup_phase
from operators.controllers.coalesce import Coalescer, run_in_background
from operators.controllers.writes import bounded, failures
from operators.runtime.events import EventRecorder

log = logging.getLogger(__name__)

PODGROUP_RESOURCE = ("scheduling.sluice.dev", "v1alpha1", "podgroups")
API = "/apis/scheduling.sluice.dev/v1alpha1"
MISSING_GROUP_GRACE_SECONDS = 10.0
"""A job controller creates the PodGroup and its pods together; warn only when it stays missing."""

GroupKey = tuple[str, str]


@dataclasses.dataclass(frozen=True)
class MemberPod:
    name: str
    uid: str
    phase: str


@dataclasses.dataclass(frozen=True)
class GroupView:
    min_member: int
    status: Mapping[str, Any]


def group_key(body: Mapping[str, Any], scheduler_name: str = L.SCHEDULER_NAME) -> GroupKey | None:
    """(namespace, PodGroup name) a pod names, if it is one of ours and names one."""
    spec = body.get("spec") or {}
    if spec.get("schedulerName") != scheduler_name:
        return None
    meta = body.get("metadata") or {}
    named = {**(meta.get("labels") or {}), **(meta.get("annotations") or {})}
    group = L.first_of(named, L.POD_GROUP_KEYS)
    return (str(meta.get("namespace") or ""), group) if group else None


@dataclasses.dataclass
class PodGroupOperator:
    client: Any
    events: EventRecorder
    clock: Callable[[], float] = time.monotonic
    grace: float = MISSING_GROUP_GRACE_SECONDS
    pods: Mapping[GroupKey, Any] = dataclasses.field(default_factory=dict)  # kopf index
    groups: Mapping[GroupKey, Any] = dataclasses.field(default_factory=dict)  # kopf index
    dirty: set[GroupKey] = dataclasses.field(default_factory=set)
    missing_since: dict[str, float] = dataclasses.field(default_factory=dict)  # pod uid ->
    warned: set[str] = dataclasses.field(default_factory=set)  # pod uids
    writes: int = 0

    async def reconcile(self) -> float | None:
        keys, self.dirty = self.dirty, set()
        writes = []
        retry: float | None = None
        for key in sorted(keys):
            members: list[MemberPod] = list(self.pods.get(key, ()))
            views = list(self.groups.get(key, ()))
            if views:
                for pod in members:
                    self.missing_since.pop(pod.uid, None)
                    self.warned.discard(pod.uid)
                view: GroupView = views[0]
                counts = podgroup_phase.count(p.phase for p in members)
                patch = podgroup_phase.status_patch(view.status, view.min_member, counts)
                if patch is not None:
                    path = f"{API}/namespaces/{key[0]}/podgroups/{key[1]}/status"
                    writes.append(self.client.merge_patch(path, {"status": patch}))
            elif members:
                wait = self._warn_missing(key, members)
                if wait is not None:
                    self.dirty.add(key)
                    retry = wait if retry is None else min(retry, wait)
        results = await bounded(writes)
        self.writes += len(results)
        if failures(results, "podgroup status"):
            self.dirty |= keys
            return 5.0
        self._forget_gone_pods()
        return retry

    def _warn_missing(self, key: GroupKey, members: list[MemberPod]) -> float | None:
        """Post the Event for pods missing their group long enough; seconds until the next is
        due, if any."""
        now = self.clock()
        due: float | None = None
        for pod in members:
            if pod.uid in self.warned:
                continue
            since = self.missing_since.setdefault(pod.uid, now)
            left = since + self.grace - now
            if left > 0:
                due = left if due is None else min(due, left)
                continue
            self.warned.add(pod.uid)
            involved = {
                "apiVersion": "v1",
                "kind": "Pod",
                "namespace": key[0],
                "name": pod.name,
                "uid": pod.uid,
            }
            message = (
                f"PodGroup {key[1]!r} does not exist in namespace {key[0]!r}; the pod waits "
                "until it is created (or remove the pod-group annotation to schedule it alone)"
            )
            self.events.post(involved, "Warning", "PodGroupNotFound", message)
        return due

    def _forget_gone_pods(self) -> None:
        if not self.missing_since and not self.warned:
            return
        live = {pod.uid for store in self.pods.values() for pod in store}
        for uid in [u for u in self.missing_since if u not in live]:
            del self.missing_since[uid]
        self.warned &= live


def register(registry: kopf.OperatorRegistry, ctx: kopf_runner.OperatorContext) -> None:
    op = PodGroupOperator(ctx.client, EventRecorder(ctx.client, "sluice-podgroup"))
    coalescer = Coalescer("podgroup", op.reconcile)
    run_in_background(registry, coalescer, ctx.stop)

    @kopf.index("pods", registry=registry)
    def group_pods(
        body: kopf.Body, name: str, uid: str, status: kopf.Status, **_: Any
    ) -> dict[GroupKey, MemberPod] | None:
        key = group_key(body)
        if key is None:
            return None
        return {key: MemberPod(name, uid, str(status.get("phase") or "Pending"))}

    @kopf.index(*PODGROUP_RESOURCE, registry=registry)
    def group_views(
        namespace: str | None, name: str, spec: kopf.Spec, status: kopf.Status, **_: Any
    ) -> dict[GroupKey, GroupView]:
        min_member = spec.get("minMember", 1)
        return {
            (namespace or "", name): GroupView(
                min_member=min_member if isinstance(min_member, int) else 1,
                status=dict(status),
            )
        }

    @kopf.on.event("pods", registry=registry)
    def pod_changed(body: kopf.Body, **kwargs: Any) -> None:
        key = group_key(body)
        if key is not None:
            op.pods, op.groups = kwargs["group_pods"], kwargs["group_views"]
            op.dirty.add(key)
            coalescer.poke()

    @kopf.on.event(*PODGROUP_RESOURCE, registry=registry)
    def group_changed(namespace: str | None, name: str, **kwargs: Any) -> None:
        op.pods, op.groups = kwargs["group_pods"], kwargs["group_views"]
        op.dirty.add((namespace or "", name))
        coalescer.poke()


OPERATOR = kopf_runner.KopfOperator(
    "podgroup",
    register,
    description="PodGroup operator: Completed/Failed phases from the pods, Events for pods "
    "naming a missing PodGroup.",
)


async def main(argv: Sequence[str]) -> int:
    return await kopf_runner.main(OPERATOR, argv)
