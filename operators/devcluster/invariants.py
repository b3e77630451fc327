"""What must hold after any fault, checked against the API: used by the e2e fault tests and by
`make soak` (docs/reliability.md).

Each check returns the violations it found as sentences (empty: it holds). Status written by the
operators is coalesced and eventually consistent, so `settle` re-runs a check until it holds or a
timeout passes; only what is still wrong then counts.

`PodWatch` follows one namespace's pods while a run goes on, in the order the API server recorded
the changes (a watch delivers them by resourceVersion): two live pods for one replica slot at any
moment, and bindings by an older scheduler lease term after one by a newer term (two schedulers
binding at once), are caught as they happen, not only in the final state.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import urllib3
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from operators.api import labels as L
from operators.api.batch import HybridJob, VCJob
from operators.api.quantity import parse_quantity
from operators.api.scheduling import PodGroup, Pool, Queue

JOB_KINDS = (VCJob, HybridJob)
COMPARED = ("cpu", "memory", "nvidia.com/gpu")  # what quota accounting is checked on
FINISHED = ("Succeeded", "Failed")
Check = Callable[[], list[str]]


def settle(check: Check, timeout: float, interval: float = 1.0) -> list[str]:
    """Run `check` until it finds nothing or `timeout` passes; the last findings."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            found = check()
        except (ApiException, OSError, urllib3.exceptions.HTTPError) as err:  # API restarting
            found = [f"could not check: {err}"]
        if not found or time.monotonic() >= deadline:
            return found
        time.sleep(interval)


def _list(custom: client.CustomObjectsApi, kind: Any, ns: str | None) -> list[dict[str, Any]]:
    group, version = kind.group, kind.version
    if ns is None:
        got = custom.list_cluster_custom_object(group, version, kind.plural)
    else:
        got = custom.list_namespaced_custom_object(group, version, ns, kind.plural)
    items: list[dict[str, Any]] = got["items"]
    return items


def _jobs(custom: client.CustomObjectsApi, ns: str) -> list[dict[str, Any]]:
    return [job for kind in JOB_KINDS for job in _list(custom, kind, ns)]


def live(pod: client.V1Pod) -> bool:
    return pod.status.phase not in FINISHED and pod.metadata.deletion_timestamp is None


def slot_of(pod: client.V1Pod) -> tuple[str, str, str] | None:
    labels = pod.metadata.labels or {}
    if L.JOB_NAME not in labels or L.REPLICA_INDEX not in labels:
        return None
    return labels[L.JOB_NAME], labels.get(L.TASK, ""), labels[L.REPLICA_INDEX]


def requests_of(pod: client.V1Pod) -> dict[str, Decimal]:
    """What the pod holds on its node, as kube-scheduler counts it (containers summed, init
    containers by their maximum; a limit without a request counts for extended resources)."""

    def of(container: client.V1Container) -> dict[str, Decimal]:
        res = container.resources
        wanted = dict((res.limits or {}) if res else {})
        wanted.update((res.requests or {}) if res else {})
        return {k: parse_quantity(v) for k, v in wanted.items() if k in COMPARED}

    total: dict[str, Decimal] = defaultdict(Decimal)
    for container in pod.spec.containers:
        for k, v in of(container).items():
            total[k] += v
    for init in pod.spec.init_containers or ():
        for k, v in of(init).items():
            total[k] = max(total[k], v)
    return dict(total)


def _resources(raw: Mapping[str, Any] | None) -> dict[str, Decimal]:
    return {k: parse_quantity(v) for k, v in (raw or {}).items() if k in COMPARED}


def _differs(a: Mapping[str, Decimal], b: Mapping[str, Decimal]) -> bool:
    return any(a.get(k, Decimal(0)) != b.get(k, Decimal(0)) for k in COMPARED)


def _show(r: Mapping[str, Decimal]) -> str:
    return ", ".join(f"{k}={r[k]}" for k in COMPARED if r.get(k)) or "nothing"


# --------------------------------------------------------------------------------------------
# Final-state checks
# --------------------------------------------------------------------------------------------


def job_phases(api: client.ApiClient, ns: str, expected: Mapping[str, str]) -> list[str]:
    """Every job is in the phase the workload meant it to end in (missing jobs count)."""
    got = {
        j["metadata"]["name"]: (j.get("status") or {}).get("phase", "")
        for j in _jobs(client.CustomObjectsApi(api), ns)
    }
    return [
        f"job {ns}/{name} is {got.get(name, 'missing')!s}, expected {want}"
        for name, want in sorted(expected.items())
        if got.get(name) != want
    ]


def replica_slots(api: client.ApiClient, ns: str) -> list[str]:
    """No replica slot (job, task, index) has two live pods."""
    seen: dict[tuple[str, str, str], list[str]] = defaultdict(list)
    for pod in client.CoreV1Api(api).list_namespaced_pod(ns).items:
        slot = slot_of(pod)
        if slot is not None and live(pod):
            seen[slot].append(pod.metadata.name)
    return [f"replica {'/'.join(s)} has live pods {p}" for s, p in seen.items() if len(p) > 1]


def partial_gangs(api: client.ApiClient, ns: str) -> list[str]:
    """No gang holds some but not all of its minimum on nodes (a half-bound gang is completed
    or undone within the scheduler's grace period, so `settle` this past that period)."""
    bound: dict[str, int] = defaultdict(int)
    for pod in client.CoreV1Api(api).list_namespaced_pod(ns).items:
        group = L.first_of(pod.metadata.annotations, L.POD_GROUP_KEYS)
        if group and pod.spec.node_name and live(pod):
            bound[group] += 1
    out = []
    for pg in _list(client.CustomObjectsApi(api), PodGroup, ns):
        name, need = pg["metadata"]["name"], int(pg["spec"].get("minMember") or 1)
        if 0 < bound[name] < need:
            out.append(f"PodGroup {ns}/{name} has {bound[name]} of {need} pods bound")
    return out


def orphans(api: client.ApiClient, ns: str) -> list[str]:
    """Nothing Sluice made for a job outlives it: every pod, Service, Secret, ConfigMap and
    PodGroup labelled with a job, or owned by a job or PodGroup, has a live owner."""
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    owners = {j["metadata"]["uid"] for j in _jobs(custom, ns)}
    groups = _list(custom, PodGroup, ns)
    owners |= {g["metadata"]["uid"] for g in groups}
    objects: list[tuple[str, str, Mapping[str, str], list[Any]]] = []
    for kind, items in (
        ("Pod", core.list_namespaced_pod(ns).items),
        ("Service", core.list_namespaced_service(ns).items),
        ("Secret", core.list_namespaced_secret(ns).items),
        ("ConfigMap", core.list_namespaced_config_map(ns).items),
    ):
        for obj in items:
            meta = obj.metadata
            refs = [(r.kind, r.uid) for r in meta.owner_references or ()]
            objects.append((kind, meta.name, meta.labels or {}, refs))
    for g in groups:
        meta = g["metadata"]
        refs = [(r["kind"], r["uid"]) for r in meta.get("ownerReferences") or ()]
        objects.append(("PodGroup", meta["name"], meta.get("labels") or {}, refs))
    out = []
    ours = {k.__name__ for k in (*JOB_KINDS, PodGroup)}
    for kind, name, labels, refs in objects:
        mine = [uid for k, uid in refs if k in ours]
        if mine and not any(uid in owners for uid in mine):
            out.append(f"{kind} {ns}/{name} is owned by a job or PodGroup that is gone")
        elif not mine and (L.JOB_NAME in labels or L.MANAGED_BY in labels):
            out.append(f"{kind} {ns}/{name} is labelled as Sluice's but has no owner")
    return out


def _charged(api: client.ApiClient) -> tuple[dict[str, dict[str, Decimal]], dict[str, Decimal]]:
    """What actually runs: live bound pods' requests per queue (through their PodGroup's queue)
    and in total, of pods handed to Sluice (a Pool's `used` counts no other scheduler's pods:
    docs/admin.md; other tests' pods may share the cluster)."""
    queue_of: dict[tuple[str, str], str] = {}
    for pg in _list(client.CustomObjectsApi(api), PodGroup, None):
        key = (pg["metadata"]["namespace"], pg["metadata"]["name"])
        queue_of[key] = pg["spec"].get("queue") or L.DEFAULT_QUEUE
    per_queue: dict[str, dict[str, Decimal]] = defaultdict(lambda: defaultdict(Decimal))
    total: dict[str, Decimal] = defaultdict(Decimal)
    for pod in client.CoreV1Api(api).list_pod_for_all_namespaces().items:
        if (
            not pod.spec.node_name
            or pod.status.phase in FINISHED
            or pod.spec.scheduler_name != L.SCHEDULER_NAME
        ):
            continue
        held = requests_of(pod)
        for k, v in held.items():
            total[k] += v
        group = L.first_of(pod.metadata.annotations, L.POD_GROUP_KEYS)
        queue = queue_of.get((pod.metadata.namespace, group or ""))
        if queue:
            for k, v in held.items():
                per_queue[queue][k] += v
    return per_queue, total


def quota_accounting(api: client.ApiClient, queues: Iterable[str]) -> list[str]:
    """Each named leaf Queue's status.allocated, and the Pools' status.used summed over every
    Pool (each node is in exactly one), equal what is bound and not finished."""
    custom = client.CustomObjectsApi(api)
    per_queue, total = _charged(api)
    by_name = {q["metadata"]["name"]: q for q in _list(custom, Queue, None)}
    out = []
    for name in queues:
        status = (by_name.get(name) or {}).get("status") or {}
        allocated = _resources(status.get("allocated"))
        if _differs(allocated, per_queue.get(name, {})):
            out.append(
                f"Queue {name} status.allocated is {_show(allocated)}; running pods hold "
                f"{_show(per_queue.get(name, {}))}"
            )
    used: dict[str, Decimal] = defaultdict(Decimal)
    for pool in _list(custom, Pool, None):
        for k, v in _resources((pool.get("status") or {}).get("used")).items():
            used[k] += v
    if _differs(used, total):
        out.append(f"Pools' status.used sum to {_show(used)}; pods on nodes hold {_show(total)}")
    return out


def hooks_delivered(api: client.ApiClient, ns: str, received: set[str]) -> list[str]:
    """Every transition of every job reached the receiver (ids `<job uid>-<seq>`, seq 1..
    status.transitionSeq: the sink subscribes to the whole namespace)."""
    out = []
    for job in _jobs(client.CustomObjectsApi(api), ns):
        uid, upto = job["metadata"]["uid"], int((job.get("status") or {}).get("transitionSeq") or 0)
        missing = [seq for seq in range(1, upto + 1) if f"{uid}-{seq}" not in received]
        if missing:
            out.append(f"job {ns}/{job['metadata']['name']}: events {missing} not delivered")
    return out


def reported(api: client.ApiClient, ns: str, names: Iterable[str]) -> list[str]:
    """Each named object (hostile input) says what is wrong with it: a condition that is not
    plainly fine (`False`, or `Unschedulable=True`), or a Warning Event about it."""
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    warned = {
        e.involved_object.name
        for e in core.list_namespaced_event(ns).items
        if e.type == "Warning" and e.involved_object is not None
    }
    conditions: dict[str, list[dict[str, Any]]] = {}
    for kind in (*JOB_KINDS, PodGroup):
        for obj in _list(custom, kind, ns):
            got = (obj.get("status") or {}).get("conditions") or []
            conditions.setdefault(obj["metadata"]["name"], []).extend(got)
    for pod in core.list_namespaced_pod(ns).items:
        got = [
            {"type": c.type, "status": c.status, "reason": c.reason}
            for c in pod.status.conditions or ()
        ]
        conditions.setdefault(pod.metadata.name, []).extend(got)
    out = []
    for name in names:
        told = any(
            c.get("status") == "False"
            or (c.get("type") == "Unschedulable" and c.get("status") == "True")
            for c in conditions.get(name, [])
            if c.get("type")
            not in ("Ready", "ContainersReady", "Initialized", "PodReadyToStartContainers")
        )
        if not told and name not in warned:
            out.append(f"{ns}/{name}: no condition or Warning Event says what is wrong")
    return out


# --------------------------------------------------------------------------------------------
# Checks while the run goes on
# --------------------------------------------------------------------------------------------


@dataclass
class Binding:
    pod: str
    holder: str  # scheduler identity
    term: int | None
    ordered: bool  # seen as a watch event (in API order), not in a re-list


@dataclass
class PodWatch:
    """Follows a namespace's pods through API restarts and 410 Gone (re-list, then watch on)."""

    api: client.ApiClient
    namespace: str
    doubles: list[str] = field(default_factory=list)
    bindings: list[Binding] = field(default_factory=list)
    relists: int = 0
    gone: int = 0  # 410 answers: the watch had expired
    _live: dict[tuple[str, str, str], set[str]] = field(default_factory=dict)
    _bound: set[str] = field(default_factory=set)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _stream: watch.Watch | None = None

    def start(self) -> PodWatch:
        self._thread = threading.Thread(target=self._run, daemon=True, name="pod-watch")
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._stream is not None:
            self._stream.stop()
        if self._thread is not None:
            self._thread.join(30)

    def _run(self) -> None:
        core = client.CoreV1Api(self.api)
        rv = ""
        while not self._stop.is_set():
            try:
                if not rv:
                    listed = core.list_namespaced_pod(self.namespace)
                    self.relists += 1
                    self._live = {}
                    for pod in listed.items:
                        self._see(pod, ordered=False)
                    rv = listed.metadata.resource_version
                self._stream = watch.Watch()
                for ev in self._stream.stream(
                    core.list_namespaced_pod,
                    self.namespace,
                    resource_version=rv,
                    timeout_seconds=60,
                    allow_watch_bookmarks=True,
                ):
                    pod = ev["object"]
                    rv = pod.metadata.resource_version
                    if ev["type"] == "DELETED":
                        self._forget(pod)
                    elif ev["type"] != "BOOKMARK":
                        self._see(pod, ordered=True)
            except ApiException as err:
                if err.status == 410:
                    self.gone += 1
                rv = ""
                time.sleep(0.5)
            except Exception:  # noqa: BLE001 - connection lost while the API server restarts
                rv = ""
                time.sleep(0.5)

    def _forget(self, pod: client.V1Pod) -> None:
        slot = slot_of(pod)
        if slot is not None:
            self._live.get(slot, set()).discard(pod.metadata.uid)

    def _see(self, pod: client.V1Pod, *, ordered: bool) -> None:
        meta = pod.metadata
        if pod.spec.node_name and meta.uid not in self._bound:
            self._bound.add(meta.uid)
            stamp = (meta.annotations or {}).get(L.BOUND_BY, "")
            holder, _, term = stamp.partition("/")
            self.bindings.append(
                Binding(meta.name, holder, int(term) if term.isdigit() else None, ordered)
            )
        slot = slot_of(pod)
        if slot is None:
            return
        if not live(pod):
            self._forget(pod)
            return
        uids = self._live.setdefault(slot, set())
        uids.add(meta.uid)
        if len(uids) > 1:
            self.doubles.append(f"replica {'/'.join(slot)} had live pods {sorted(uids)}")

    def overlapping_binds(self, terms: Mapping[int, str] | None = None) -> list[str]:
        """Bindings in API order never go back to an older lease term (the older leader bound
        after the newer one had started), every binding names a term, and each term's holder is
        the one the Lease recorded for it (`terms`, when known)."""
        out: list[str] = []
        newest = -1
        for b in self.bindings:
            if b.term is None:
                out.append(f"pod {b.pod} bound without a lease term ({b.holder or 'no stamp'})")
                continue
            if terms is not None and b.term in terms and terms[b.term] != b.holder:
                out.append(
                    f"pod {b.pod} bound by {b.holder} in term {b.term}, held by {terms[b.term]}"
                )
            if b.ordered and b.term < newest:
                out.append(f"pod {b.pod} bound by {b.holder}/{b.term} after term {newest} began")
            newest = max(newest, b.term) if b.ordered else newest
        return out


@dataclass
class LeaseWatch:
    """Every holder of a Lease and the term (leaseTransitions) it held it in."""

    api: client.ApiClient
    namespace: str
    name: str
    terms: dict[int, str] = field(default_factory=dict)
    changes: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> LeaseWatch:
        self._thread = threading.Thread(target=self._run, daemon=True, name="lease-watch")
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)

    def _run(self) -> None:
        coord = client.CoordinationV1Api(self.api)
        while not self._stop.is_set():
            try:
                stream = watch.Watch()
                for ev in stream.stream(
                    coord.list_namespaced_lease,
                    self.namespace,
                    field_selector=f"metadata.name={self.name}",
                    timeout_seconds=5,
                ):
                    spec = ev["object"].spec
                    if spec.holder_identity:
                        term = int(spec.lease_transitions or 0)
                        if self.terms.get(term) != spec.holder_identity:
                            self.changes += 1
                        self.terms.setdefault(term, spec.holder_identity)
            except Exception:  # noqa: BLE001 - the API server may be restarting
                time.sleep(0.5)

    def holder(self) -> str:
        try:
            lease = client.CoordinationV1Api(self.api).read_namespaced_lease(
                self.name, self.namespace
            )
        except (ApiException, OSError):
            return ""
        return str(lease.spec.holder_identity or "")
