"""Carrying out a job core Plan against the API: the PodGroup, pod deletes and creates, the
status, Events, and the checks for bad input the core cannot make (missing queue, pool,
PriorityClass or sink; a template the API server rejects).

Every write is idempotent: the PodGroup and the pods have fixed names (AlreadyExists means done),
deletes carry the pod's uid as a precondition (never a same-named successor), and the status is
only written when it differs from what this process last wrote, with the job's uid as a
precondition too (`Applier.write_status`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final

import aiohttp

from operators.api import labels as L
from operators.api.scheduling import PodGroup
from operators.controllers.scheduler_status import format_resources
from operators.jobs import pods as P
from operators.jobs.observed import PodObs
from operators.jobs.shape import JobShape
from operators.runtime import records, status_patch
from operators.runtime.client import ApiError, KubeClient

log = logging.getLogger(__name__)

BATCH: Final = "/apis/batch.sluice.dev/v1alpha1"
PLURALS: Final = {"HybridJob": "hybridjobs", "VCJob": "vcjobs"}
NETWORK_ERRORS: Final = (ApiError, TimeoutError, aiohttp.ClientError, OSError)
FROM_JOB_SPEC: Final = (
    "queue",
    "pool",
    "priorityClassName",
    "networkTopology",
    "preemptible",
    "preemptionDelaySeconds",
    "staleGangGraceSeconds",
)
"""PodGroup spec fields copied from the job's spec under the same name."""
COPIED: Final = (*FROM_JOB_SPEC, "user", "minResources")
"""PodGroup spec fields the job decides and may drop (the rest follow from its tasks)."""


def job_path(kind: str, namespace: str, name: str) -> str:
    return f"{BATCH}/namespaces/{namespace}/{PLURALS[kind]}/{name}"


def min_resources(job: JobShape) -> dict[str, str]:
    """Requests of the first minAvailable pods (tasks by priority, each task's minimum first)."""
    total: dict[str, int] = {}
    for task, count in P.gang_order(job):
        spec = task.template.get("spec") or {}
        for name, amount in records.pod_requests(spec).items():
            total[name] = total.get(name, 0) + amount * count
    return format_resources(total)


def podgroup_body(
    job: JobShape, spec: Mapping[str, Any], meta: Mapping[str, Any]
) -> dict[str, Any]:
    """The job's PodGroup: gang minimum and elastic types from the shape, the rest from the spec
    and the job's metadata (overcommit label or annotation, user annotation)."""
    annotations = meta.get("annotations") or {}
    overcommit = annotations.get(L.OVERCOMMIT) or (meta.get("labels") or {}).get(L.OVERCOMMIT)
    extra = {k: spec.get(k) for k in FROM_JOB_SPEC}
    extra["user"] = annotations.get(L.USER) or None
    extra["minResources"] = min_resources(job) or None
    return {
        "apiVersion": PodGroup.api_version_str(),
        "kind": "PodGroup",
        "metadata": {
            "name": P.group_name(job),
            "namespace": job.namespace,
            "labels": P.job_labels(job),
            "annotations": {L.OVERCOMMIT: overcommit} if overcommit else {},
            "ownerReferences": [P.owner_reference(job)],
        },
        "spec": P.podgroup_spec(job, extra),
    }


class Applier:
    """API writes for the jobs operator, with bounded concurrency for pod creates/deletes."""

    def __init__(self, client: KubeClient, pod_concurrency: int) -> None:
        self.client = client
        self._pods = asyncio.Semaphore(pod_concurrency)

    # -- PodGroup -----------------------------------------------------------------------------

    async def ensure_podgroup(
        self,
        body: dict[str, Any],
        known: Mapping[str, Any] | None,
        sent: Mapping[str, Any] | None = None,
    ) -> tuple[str, Mapping[str, Any] | None]:
        """Create the group, or patch its spec when the job changed (`spec_patch`; `sent` is the
        spec this process last got into it). Returns an error text (bad input, shown on the job)
        or "", and what to remember as sent: only a spec the server took. A create that found
        the group (a restart) took nothing, so its watched spec decides the next patch; a refused
        patch leaves `sent` as it was, so the next step tries (and reports) it again."""
        meta = body["metadata"]
        path = PodGroup.api_path(meta["namespace"])
        try:
            if known is None:
                try:
                    await self.client.post(path, body)
                    return "", body["spec"]
                except ApiError as err:
                    if err.status != 409:
                        raise
                return "", None
            patch = spec_patch(known, body["spec"], sent)
            if patch:
                await self.client.merge_patch(f"{path}/{meta['name']}", {"spec": patch})
        except ApiError as err:
            if err.status in (400, 403, 404, 422):
                return f"PodGroup {meta['name']}: {err}", sent
            raise
        return "", body["spec"]

    async def readmit_podgroup(self, namespace: str, name: str) -> int | None:
        """Set a restarted job's group back to Pending, so the scheduler admits it again (quota
        reserved anew) before the job creates pods. Returns the group's resourceVersion after
        the write (0 if unreadable), or None when the group is gone."""
        try:
            written = await self.client.merge_patch(
                f"{PodGroup.api_path(namespace, name)}/status", {"status": {"phase": "Pending"}}
            )
        except ApiError as err:
            if err.not_found:
                return None
            raise
        return resource_version(written)

    async def delete_podgroup(self, namespace: str, name: str) -> int:
        """Returns the resourceVersion of the delete (0 if unreadable or already gone): the
        group's events older than it are from before the delete."""
        try:
            deleted = await self.client.delete(PodGroup.api_path(namespace, name))
        except ApiError as err:
            if not err.not_found:
                raise
            return 0
        return resource_version(deleted)

    # -- pods ---------------------------------------------------------------------------------

    async def delete_pods(self, namespace: str, pods: Sequence[PodObs]) -> None:
        await asyncio.gather(*(self._delete(namespace, p) for p in pods))

    async def _delete(self, namespace: str, pod: PodObs) -> None:
        body = {"preconditions": {"uid": pod.uid}} if pod.uid else None
        async with self._pods:
            try:
                await self.client.delete(f"/api/v1/namespaces/{namespace}/pods/{pod.name}", body)
            except ApiError as err:
                if not (err.not_found or err.conflict):
                    raise

    async def create_pods(
        self, bodies: Iterable[dict[str, Any]], wanted: Callable[[], bool] = lambda: True
    ) -> tuple[list[str], list[str]]:
        """Create pods; AlreadyExists is success. Returns the names of the pods that exist now
        and the API server's refusals (bad input). `wanted` is asked before each create: a job
        deleted while its pods wait for a slot (a 1,000-pod job takes a while) gets no more."""
        results = await asyncio.gather(*(self._create(b, wanted) for b in bodies))
        created = [name for name, refused in results if name and not refused]
        return created, [refused for _, refused in results if refused]

    async def _create(self, body: dict[str, Any], wanted: Callable[[], bool]) -> tuple[str, str]:
        """(name if the pod exists now, refusal text)."""
        meta = body["metadata"]
        async with self._pods:
            if not wanted():
                return "", ""
            try:
                await self.client.post(f"/api/v1/namespaces/{meta['namespace']}/pods", body)
            except ApiError as err:
                if err.status == 409:
                    return meta["name"], ""
                if err.status in (400, 403, 404, 422):
                    return "", f"pod {meta['name']}: {_message(err)}"
                raise
        return meta["name"], ""

    # -- job ----------------------------------------------------------------------------------

    async def write_status(
        self, kind: str, ns: str, name: str, uid: str, status: dict[str, Any], whole: bool = False
    ) -> bool:
        """Write the job's status fields if the job of this name is still the one with this
        uid (`status_patch.write_status`): False when it is gone, so a late write of a deleted
        job never lands on its successor. The events operator's fields (`delivery`,
        `transitionsDelivered`) stay; `whole` is for a job that has no status yet."""
        return await status_patch.write_status(
            self.client, job_path(kind, ns, name), uid, status, whole=whole
        )

    async def delete_job(self, kind: str, ns: str, name: str, uid: str) -> None:
        body = {"propagationPolicy": "Background", "preconditions": {"uid": uid}}
        try:
            await self.client.delete(job_path(kind, ns, name), body)
        except ApiError as err:
            if not (err.not_found or err.conflict):
                raise

    async def exists(self, path: str) -> bool | None:
        """Whether an object exists; None when the API could not tell (no permission, down)."""
        try:
            await self.client.get(path)
        except ApiError as err:
            return False if err.not_found else None
        except (TimeoutError, aiohttp.ClientError, OSError):
            return None
        return True


def _message(err: ApiError) -> str:
    body = err.body
    if isinstance(body, dict) and body.get("message"):
        return str(body["message"])[:512]
    return str(err)[:512]


def spec_patch(
    known: Mapping[str, Any], spec: Mapping[str, Any], sent: Mapping[str, Any] | None
) -> dict[str, Any]:
    """The merge patch that brings the group's spec (`known`, as watched) to the job's (`spec`):
    changed fields, fields the job set since the group was created (a grace added to a running
    job), and copied fields the job dropped (null removes them). A field the group lacks is sent
    only if it differs from what this process last sent (`sent`): a field the server prunes (an
    older CRD) costs one patch, not one per step."""
    sent = sent or {}
    patch = {
        k: v
        for k, v in spec.items()
        if (known[k] != v if k in known else sent.get(k, _UNSENT) != v)
    }
    patch.update({k: None for k in COPIED if k in known and k not in spec})
    return patch


_UNSENT: Final = object()


def resource_version(body: Mapping[str, Any] | None) -> int:
    """An object's resourceVersion as a number (etcd's revision; 0 if absent or not a number):
    compared only to order events of one object against a write of ours."""
    raw = str(((body or {}).get("metadata") or {}).get("resourceVersion") or "")
    return int(raw) if raw.isdigit() else 0
