"""The `podgroup` operator: finished phases from the pods (docs/admin.md "PodGroups").

PodGroups are read through a kopf index; pods of the `sluice` scheduler through an informer
(`pod_watch`: `spec.schedulerName=sluice` selected by the API server) that keeps of each pod only
its group and phase. Their changes mark the group dirty and poke one coalesced reconcile, which
writes Completed/Failed (or Pending again) and the succeeded/failed counts where they differ
(`podgroup_phase` decides). Pods naming a PodGroup that does not exist are the scheduler's to
explain (PodScheduled=False and a FailedScheduling Event), so this operator leaves them alone.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

import kopf

from operators.api import labels as L
from operators.api.eventlog import without_event_log
from operators.api.scheduling import PodGroup
from operators.controllers import kopf_runner, podgroup_phase
from operators.controllers.coalesce import Coalescer, LastSeen, run_in_background
from operators.controllers.pod_watch import watch_pods
from operators.controllers.scheduler_status import MOVE_WINDOW
from operators.controllers.writes import bounded, failures
from operators.runtime import records
from operators.runtime.informer import EventType
from operators.runtime.informer import Key as PodKey
from operators.runtime.operator_metrics import OperatorMetrics

log = logging.getLogger(__name__)

PODGROUP_RESOURCE = (PodGroup.group, PodGroup.version, PodGroup.plural)

GroupKey = tuple[str, str]
Membership = tuple[GroupKey, str] | None
"""All the operator keeps of a pod: the group it names and its phase (None: names no group)."""
OUR_PODS: Final = {"fieldSelector": f"spec.schedulerName={L.SCHEDULER_NAME}"}


@dataclasses.dataclass(frozen=True)
class GroupView:
    min_member: int
    status: Mapping[str, Any]
    job_owned: bool = False


def group_key(body: Mapping[str, Any], scheduler_name: str = L.SCHEDULER_NAME) -> GroupKey | None:
    """(namespace, PodGroup name) a pod names, if it is one of ours and names one."""
    spec = body.get("spec") or {}
    if spec.get("schedulerName") != scheduler_name:
        return None
    meta = body.get("metadata") or {}
    named = {**(meta.get("labels") or {}), **(meta.get("annotations") or {})}
    group = L.first_of(named, L.POD_GROUP_KEYS)
    return (str(meta.get("namespace") or ""), group) if group else None


def membership(body: Mapping[str, Any]) -> Membership:
    key = group_key(body)
    if key is None:
        return None
    return key, str((body.get("status") or {}).get("phase") or "Pending")


def group_view(
    spec: Mapping[str, Any], status: Mapping[str, Any], meta: Mapping[str, Any]
) -> GroupView:
    """All the operator keeps of a PodGroup (its index value)."""
    min_member = spec.get("minMember", 1)
    return GroupView(
        min_member=min_member if isinstance(min_member, int) else 1,
        status=without_event_log(status),
        job_owned=records.owned_by_job(meta.get("ownerReferences")),
    )


@dataclasses.dataclass
class PodGroupOperator:
    client: Any
    members: dict[GroupKey, dict[PodKey, str]] = dataclasses.field(default_factory=dict)
    """group -> its pods -> phase, kept from the pod informer's changes (`on_pod`)."""
    groups: Mapping[GroupKey, Any] = dataclasses.field(default_factory=dict)  # kopf index
    dirty: set[GroupKey] = dataclasses.field(default_factory=set)
    seen: LastSeen[GroupKey, GroupView] = dataclasses.field(default_factory=LastSeen)
    writes: int = 0
    metrics: OperatorMetrics = dataclasses.field(
        default_factory=lambda: OperatorMetrics("podgroup")
    )
    listed: Callable[[], bool] = lambda: True
    """Whether the pods are listed: before that a group would look memberless (counts of 0)."""
    clock: Callable[[], float] = time.time

    def on_pod(self, _: EventType, pod: PodKey, new: Membership, old: Membership) -> None:
        """A pod changed (the informer's handler): move it between groups, mark both dirty."""
        if old is not None:
            pods = self.members.get(old[0])
            if pods is not None:
                pods.pop(pod, None)
                if not pods:
                    del self.members[old[0]]
            self.dirty.add(old[0])
        if new is not None:
            self.members.setdefault(new[0], {})[pod] = new[1]
            self.dirty.add(new[0])

    async def reconcile(self) -> float | None:
        if not self.listed():
            return 1.0
        keys, self.dirty = self.dirty, set()
        writes = []
        now = self.clock()
        again: float | None = None  # seconds until a moved group's window ends
        for key in sorted(keys):
            views = list(self.groups.get(key, ()))
            if not views:
                continue  # no PodGroup: the scheduler tells the pods why they wait
            view: GroupView = views[0]
            counts = podgroup_phase.count(self.members.get(key, {}).values())
            until = records.moved_until(view.status, MOVE_WINDOW)
            moving = until is not None and now < until
            if (
                moving
                and until is not None
                and podgroup_phase.finished_phase(view.min_member, counts)
            ):
                # Its moved members are being re-created: look again when the window ends.
                self.dirty.add(key)
                again = min(again, until - now) if again is not None else until - now
            patch = podgroup_phase.status_patch(
                view.status, view.min_member, counts, job_owned=view.job_owned, moving=moving
            )
            if patch is not None:
                path = f"{PodGroup.api_path(key[0], key[1])}/status"
                writes.append(self.client.merge_patch(path, {"status": patch}))
        results = await bounded(writes)
        self.writes += len(results)
        phases: dict[str, int] = {}
        for views in self.groups.values():
            for view in views:
                phase = str(view.status.get("phase") or "Pending")
                phases[phase] = phases.get(phase, 0) + 1
        self.metrics.count_objects("podgroup", phases)
        if failures(results, "podgroup status", self.metrics):
            self.dirty |= keys
            return 5.0
        return again


def register(registry: kopf.OperatorRegistry, ctx: kopf_runner.OperatorContext) -> None:
    op = PodGroupOperator(ctx.client, metrics=ctx.metrics)
    coalescer = Coalescer("podgroup", op.reconcile, metrics=ctx.metrics)
    run_in_background(registry, coalescer, ctx.stop)

    def pod_changed(kind: EventType, pod: PodKey, new: Membership, old: Membership) -> None:
        if new != old:
            op.on_pod(kind, pod, new, old)
            coalescer.poke()

    pods = watch_pods(registry, ctx, membership, pod_changed, OUR_PODS)
    op.listed = lambda: all(informer.synced.is_set() for informer in pods)

    @kopf.index(*PODGROUP_RESOURCE, id="group_views", registry=registry)
    async def group_views(
        namespace: str | None,
        name: str,
        spec: kopf.Spec,
        status: kopf.Status,
        meta: kopf.Meta,
        **_: Any,
    ) -> dict[GroupKey, GroupView]:
        return {(namespace or "", name): group_view(spec, status, meta)}

    @kopf.on.event(*PODGROUP_RESOURCE, registry=registry)
    async def group_changed(
        type: str | None,
        namespace: str | None,
        name: str,
        spec: kopf.Spec,
        status: kopf.Status,
        meta: kopf.Meta,
        **kwargs: Any,
    ) -> None:
        key = (namespace or "", name)
        view = None if type == "DELETED" else group_view(spec, status, meta)
        if op.seen.changed(key, view):
            op.groups = kwargs["group_views"]
            op.dirty.add(key)
            coalescer.poke()


OPERATOR = kopf_runner.KopfOperator(
    "podgroup",
    register,
    description="PodGroup operator: Completed/Failed phases (and succeeded/failed counts) "
    "from the pods.",
)


async def main(argv: Sequence[str]) -> int:
    return await kopf_runner.main(OPERATOR, argv)
