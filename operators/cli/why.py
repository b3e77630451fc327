"""`sluice why <job|podgroup|pod>`: in plain words, what a job waits for and what would unblock it.

Reads what the scheduler already wrote (PodGroup conditions, the pod's PodScheduled condition,
Events); it never asks the scheduler anything, so it works with the scheduler down too.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from typing import Any

from operators.api import labels as L
from operators.api.scheduling import PodGroup, Queue
from operators.cli import common
from operators.runtime.client import ApiError, KubeClient
from operators.scheduler.decisions import EvictReason

BATCH = "/apis/batch.sluice.dev/v1alpha1"
KINDS = {
    "pod": "pod",
    "pods": "pod",
    "po": "pod",
    "podgroup": "podgroup",
    "podgroups": "podgroup",
    PodGroup.singular_name(): "podgroup",
    PodGroup.plural: "podgroup",
    "pg": "podgroup",
    "spg": "podgroup",
    "job": "job",
    "hybridjob": "hybridjobs",
    "hybridjobs": "hybridjobs",
    "vcjob": "vcjobs",
    "vcjobs": "vcjobs",
}
MAX_EVENTS = 5
EVICTIONS = frozenset(EvictReason)
"""Event reasons the scheduler posts when it evicts a group's pods."""

UNBLOCK: Mapping[str, str] = {
    "NotEnoughResources": "it starts when its queue's share or the cluster has room for the "
    "whole minimum gang: when running jobs finish, borrowed capacity is reclaimed, or nodes "
    "are added",
    "QueueClosed": "its queue admits nothing new (Closed, Closing or invalid: "
    f"`kubectl describe {Queue.singular}`); open or fix the queue, or submit to another queue",
    "QueueMissing": "create the queue it names, or submit to an existing one",
    "QueueNotFound": "create the queue it names, or submit to an existing one",
    "QuotaExceeded": "its queue (or a parent) is at its capability; it starts when the "
    "queue's running jobs finish, or when an admin raises the capability",
    "QueueOverCapability": "its queue (or a parent) is at its capability; it starts when the "
    "queue's running jobs finish, or when an admin raises the capability",
    "NotEnoughTasks": "fewer pods exist than its minimum; the job controller has not created "
    "them all yet, or some were deleted",
    "NotEnoughPods": "fewer pods exist than its minimum; the job controller has not created "
    "them all yet, or some were deleted",
    "NotEnoughPodsOfTask": "a task has fewer pods than its minimum; the job controller has not "
    "created them all yet, or some were deleted",
    "Unschedulable": "no set of nodes fits all of its pods (see the message: node selectors, "
    "taints, GPUs per node); free or add matching nodes, or relax the pods' constraints",
    "TopologyUnsatisfied": "no network domain holds the whole gang; raise "
    "networkTopology.highestTier, use mode: soft, bound the wait with softAfterSeconds, or "
    "wait for room in one domain",
    "TopologyUnsatisfiable": "no network domain holds the whole gang; raise "
    "networkTopology.highestTier, use mode: soft, or wait for room in one domain",
    "BorrowingDisabled": "its pool is full and may not borrow from others; it starts when "
    "room frees up in its pool",
    "PoolNotFound": "the pool it names does not exist; create it or name an existing pool",
    "Preempting": "lower-priority work is being evicted for it; it starts when that is gone",
    "WaitingForVictims": "delayed preemption: the jobs it preempts have a grace period "
    "(deadline in the Privileged condition); it starts after they leave",
    "WaitingForPreemption": "delayed preemption: the jobs it preempts have a grace period "
    "(deadline in the Privileged condition); it starts after they leave",
    "Growing": "it runs at its minimum and grows toward its maximum when capacity is idle",
    "PodGroupNotFound": "create the PodGroup the pod names, or remove the annotation to "
    "schedule the pod alone",
    "NonPreemptibleOverQuota": "it is not preemptible (`preemptible: false`), so it runs only "
    "within its queue's (and every ancestor's) deserved share, in its own pool, never on "
    "borrowed room; it starts when its queue's own jobs leave that room, when an admin raises "
    "the queue's guarantee, or, resubmitted with `preemptible: true`, on idle room it may lose "
    "to reclaim",
    "BindingRejected": "the API server refused its Binding (see the FailedBinding Event: an "
    "admission policy or webhook); the scheduler retries after a backoff of up to 5 minutes; "
    "fix or exempt what refuses it. A message starting NoRoom means other schedulers kept "
    "taking the room it was given; it is retried within 30 s",
    "Consolidating": "running jobs are being moved to open a placement for it; it starts when "
    "they are gone",
    "Waiting": "no scheduling cycle has looked at it yet; if this lasts, check that the "
    "sluice-scheduler Deployment is running",
}


HELP = """\
Explain in plain words what a job, PodGroup or pod is waiting for, from the conditions and Events
the scheduler wrote. TARGET is KIND/NAME (kinds: job, hybridjob, vcjob, podgroup, pod) or a bare
NAME (tried as a PodGroup, then a pod, then a job).
"""


def arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("target", metavar="TARGET", help="e.g. job/train, podgroup/pg, pod/p-0")
    parser.add_argument("-n", "--namespace", help="namespace (default: the context's)")


async def run(args: argparse.Namespace, client: KubeClient) -> int:
    namespace = args.namespace or client.conn.default_namespace
    kind, _, name = args.target.rpartition("/")
    kinds = [KINDS.get(kind.lower(), "")] if kind else ["podgroup", "pod", "job"]
    if kinds == [""]:
        print(f"error: unknown kind {kind!r}; use one of job, hybridjob, vcjob, podgroup, pod")
        return 2
    for k in kinds:
        facts = await gather(client, namespace, k, name)
        if facts is not None:
            data = explain(facts)
            return common.emit(args, data, render(data))
    print(f"error: no {'/'.join(kinds)} named {name!r} in namespace {namespace!r}")
    return 1


COMMAND = common.Command(
    "why",
    "why a job, podgroup or pod waits, and what would unblock it",
    HELP,
    run=run,
    arguments=arguments,
)


async def _get(client: KubeClient, path: str) -> dict[str, Any] | None:
    try:
        return await client.get(path)
    except ApiError as err:
        if err.not_found:
            return None
        raise


async def _events(client: KubeClient, namespace: str, name: str) -> list[dict[str, Any]]:
    items, _ = await client.list(
        f"/api/v1/namespaces/{namespace}/events",
        {"fieldSelector": f"involvedObject.name={name}"},
    )
    return items


async def gather(client: KubeClient, namespace: str, kind: str, name: str) -> dict[str, Any] | None:
    """The objects an explanation needs: {kind, namespace, name, pod?, podgroup?, pods, events}."""
    ns_api = f"/api/v1/namespaces/{namespace}"
    groups = PodGroup.api_path(namespace)
    facts: dict[str, Any] = {"kind": kind, "namespace": namespace, "name": name}
    group_name: str | None = None
    if kind == "pod":
        pod = await _get(client, f"{ns_api}/pods/{name}")
        if pod is None:
            return None
        facts["pod"] = pod
        meta = pod.get("metadata") or {}
        group_name = L.first_of(
            {**(meta.get("labels") or {}), **(meta.get("annotations") or {})}, L.POD_GROUP_KEYS
        )
        facts["events"] = await _events(client, namespace, name)
    elif kind == "podgroup":
        group_name = name
    else:
        plurals = ["hybridjobs", "vcjobs"] if kind == "job" else [kind]
        job = None
        for plural in plurals:
            job = await _get(client, f"{BATCH}/namespaces/{namespace}/{plural}/{name}")
            if job is not None:
                facts["kind"] = str(job.get("kind") or plural)
                break
        if job is None:
            return None
        pods, _ = await client.list(f"{ns_api}/pods", {"labelSelector": f"{L.JOB_NAME}={name}"})
        named = [
            L.first_of(
                {**(p["metadata"].get("labels") or {}), **(p["metadata"].get("annotations") or {})},
                L.POD_GROUP_KEYS,
            )
            for p in pods
        ]
        group_name = next((g for g in named if g), name)
        facts["job"] = job
    if group_name:
        facts.setdefault("nodePools", {})
        facts["groupName"] = group_name
        group = await _get(client, f"{groups}/{group_name}")
        if group is None and kind == "podgroup":
            return None
        facts["podgroup"] = group
        if group is not None:
            facts.setdefault("events", [])
            facts["events"] = [*facts["events"], *await _events(client, namespace, group_name)]
        pods, _ = await client.list(f"{ns_api}/pods")
        facts["pods"] = [
            p
            for p in pods
            if L.first_of(
                {**(p["metadata"].get("labels") or {}), **(p["metadata"].get("annotations") or {})},
                L.POD_GROUP_KEYS,
            )
            == group_name
        ]
        if any((p.get("spec") or {}).get("nodeName") for p in facts["pods"]):
            nodes, _ = await client.list("/api/v1/nodes")
            facts["nodePools"] = {
                n["metadata"]["name"]: (n["metadata"].get("labels") or {}).get(L.POOL, "")
                for n in nodes
            }
    facts.setdefault("events", [])
    return facts


def _pod_counts(pods: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    out = {"pods": len(pods), "bound": 0, "running": 0, "succeeded": 0, "failed": 0}
    for p in pods:
        phase = (p.get("status") or {}).get("phase")
        out["bound"] += bool((p.get("spec") or {}).get("nodeName"))
        out["running"] += phase == "Running"
        out["succeeded"] += phase == "Succeeded"
        out["failed"] += phase == "Failed"
    return out


def _recent(events: Sequence[Mapping[str, Any]]) -> list[dict[str, str]]:
    def when(e: Mapping[str, Any]) -> str:
        return str(e.get("lastTimestamp") or e.get("eventTime") or "")

    latest = sorted(events, key=when)[-MAX_EVENTS:]
    return [
        {
            "time": when(e),
            "type": str(e.get("type") or ""),
            "reason": str(e.get("reason") or ""),
            "object": f"{(e.get('involvedObject') or {}).get('kind', '')}/"
            f"{(e.get('involvedObject') or {}).get('name', '')}",
            "message": str(e.get("message") or ""),
        }
        for e in latest
    ]


def explain(facts: Mapping[str, Any]) -> dict[str, Any]:
    """The report (what `-o json` prints): subject, state, waitingFor, unblock, events."""
    ns, name = facts["namespace"], facts["name"]
    out: dict[str, Any] = {
        "subject": f"{facts['kind']} {ns}/{name}",
        "events": _recent(facts.get("events") or []),
    }
    pod = facts.get("pod")
    if pod is not None and (pod.get("spec") or {}).get("schedulerName") != L.SCHEDULER_NAME:
        out.update(
            state="not Sluice's",
            waitingFor=None,
            unblock=f"the pod's schedulerName is not {L.SCHEDULER_NAME!r}; another scheduler "
            "places it",
        )
        return out
    if "groupName" in facts and facts.get("podgroup") is None:
        out.update(
            state="Pending",
            waitingFor=f"PodGroupNotFound: PodGroup {facts['groupName']!r} does not exist",
            unblock=UNBLOCK["PodGroupNotFound"],
        )
        return out
    group = facts.get("podgroup")
    if group is not None:
        _explain_group(out, group, facts.get("pods") or [])
        _contention(out, group, facts)
        return out
    return _explain_plain_pod(out, pod or {})


def _contention(out: dict[str, Any], group: Mapping[str, Any], facts: Mapping[str, Any]) -> None:
    """What sharing and preemption do to the group: pods running in a pool that only lends
    them, a delayed preemption that will take it, and its last eviction (why it was re-queued)."""
    own = out["pool"]
    node_pools: Mapping[str, str] = facts.get("nodePools") or {}
    borrowed: dict[str, int] = {}
    for p in facts.get("pods") or ():
        node = (p.get("spec") or {}).get("nodeName")
        lender = node_pools.get(node or "", "")
        if (
            node
            and lender
            and lender != own
            and (p.get("status") or {}).get("phase")
            in (
                "Pending",
                "Running",
            )
        ):
            borrowed[lender] = borrowed.get(lender, 0) + 1
    if borrowed:
        out["borrowing"] = (
            ", ".join(f"{n} pod(s) in pool {lender}" for lender, n in sorted(borrowed.items()))
            + f" (borrowed: evicted first when that pool's own jobs need the room; its pool is {own})"
        )
    mark = (group.get("status") or {}).get("preemption") or {}
    if mark.get("role") == "WillEvict":
        peers = ", ".join(mark.get("peers") or ()) or "a higher-priority job"
        out["preemption"] = (
            f"will be evicted whole at {mark.get('deadline')} to make room for {peers} "
            "(delayed preemption: checkpoint before then; it stays if that job goes away or "
            "room frees up first)"
        )
    evictions = [e for e in facts.get("events") or () if e.get("reason") in EVICTIONS]
    if evictions:
        last = max(evictions, key=lambda e: str(e.get("lastTimestamp") or e.get("eventTime") or ""))
        out["lastEviction"] = f"{last.get('reason')}: {last.get('message') or ''}"


def _explain_group(
    out: dict[str, Any], group: Mapping[str, Any], pods: Sequence[Mapping[str, Any]]
) -> None:
    spec, status = group.get("spec") or {}, group.get("status") or {}
    phase = str(status.get("phase") or "Pending")
    counts = _pod_counts(pods)
    out.update(
        podgroup=common.name_of(group),
        queue=spec.get("queue") or L.DEFAULT_QUEUE,
        pool=spec.get("pool") or "default",
        minMember=spec.get("minMember", 1),
        state=phase,
        pods=counts,
    )
    if phase in ("Completed", "Failed"):
        out.update(waitingFor=None, unblock=f"nothing: the group has finished ({phase})")
        return
    blocked = common.condition(group, "Unschedulable")
    enqueued = common.condition(group, "Enqueued")
    privileged = common.condition(group, "Privileged")
    if privileged is not None and privileged.get("status") == "True":
        reason, message = "WaitingForVictims", str(privileged.get("message") or "")
    elif blocked is not None and blocked.get("status") == "True":
        reason, message = str(blocked.get("reason")), str(blocked.get("message") or "")
    elif enqueued is not None and enqueued.get("status") == "False":
        reason, message = str(enqueued.get("reason")), str(enqueued.get("message") or "")
    elif phase == "Running":
        out.update(waitingFor=None, unblock="nothing: at least minMember pods are bound")
        return
    else:
        reason, message = "", "no scheduling cycle has explained it yet"
    out["waitingFor"] = f"{reason}: {message}" if reason else message
    out["unblock"] = UNBLOCK.get(
        reason, f"see the Events below and `kubectl describe {PodGroup.singular}`"
    )


def _explain_plain_pod(out: dict[str, Any], pod: Mapping[str, Any]) -> dict[str, Any]:
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    phase = str(status.get("phase") or "Pending")
    out["state"] = phase
    if spec.get("nodeName"):
        out.update(waitingFor=None, unblock=f"nothing: bound to node {spec['nodeName']}")
        return out
    scheduled = next(
        (c for c in status.get("conditions") or () if c.get("type") == "PodScheduled"), None
    )
    if scheduled is not None and scheduled.get("status") == "False":
        reason = str(scheduled.get("reason") or "")
        out["waitingFor"] = f"{reason}: {scheduled.get('message') or ''}"
        out["unblock"] = UNBLOCK.get(reason, "see the Events below")
    else:
        out.update(waitingFor="no scheduling cycle has explained it yet", unblock="wait a moment")
    return out


def render(data: Mapping[str, Any]) -> str:
    lines = [data["subject"]]
    if "podgroup" in data:
        lines.append(
            f"  PodGroup {data['podgroup']} (queue {data['queue']}, pool {data['pool']}, "
            f"minMember {data['minMember']})"
        )
    state = f"  State:       {data['state']}"
    counts = data.get("pods")
    if counts:
        state += (
            f" ({counts['pods']} pods: {counts['bound']} bound, {counts['running']} running, "
            f"{counts['succeeded']} succeeded, {counts['failed']} failed)"
        )
    lines.append(state)
    lines.append(f"  Waiting for: {data['waitingFor'] or 'nothing'}")
    lines.append(f"  To unblock:  {data['unblock']}")
    for key, title in (
        ("borrowing", "Borrowing"),
        ("preemption", "Preemption"),
        ("lastEviction", "Evicted"),
    ):
        if data.get(key):
            lines.append(f"  {title + ':':<13}{data[key]}")
    if data["events"]:
        lines.append("  Recent events:")
        lines.extend(
            f"    {e['time']}  {e['type']:<7}  {e['reason']}  {e['object']}: {e['message']}"
            for e in data["events"]
        )
    return "\n".join(lines) + "\n"
