"""A scheduler snapshot from recorded API objects, for the simulator's what-if questions.

Input: what ``kubectl get nodes,pods,priorityclasses,poddisruptionbudgets,sq,spool,topo,spg
-A -o yaml`` (or ``-o json``) prints - a ``List`` with ``items`` - or several YAML documents. The objects go through the same records and cache
the live scheduler fills from its watches (records.py, cache.py), so the snapshot is the one the
scheduler would have built from that cluster state. Objects of other kinds are ignored;
finished pods (Succeeded, Failed) are left out as the scheduler's pod watch leaves them out.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

import yaml

from operators.runtime import records as R
from operators.runtime.cache import SchedulerCache
from operators.runtime.informer import EventType, Key, object_key

if TYPE_CHECKING:
    from pathlib import Path

    from operators.scheduler.snapshot import Snapshot

SCHEDULING_GROUP = "scheduling.sluice.dev"
FINISHED_POD_PHASES = ("Succeeded", "Failed")

Feed = Callable[[SchedulerCache, EventType, Key, Mapping[str, Any]], None]


def _feed(
    transform: Callable[[Any], Any], handler: Callable[[SchedulerCache], Callable[..., None]]
) -> Feed:
    def feed(cache: SchedulerCache, kind: EventType, key: Key, obj: Mapping[str, Any]) -> None:
        handler(cache)(kind, key, transform(obj), None)

    return feed


# (API group, kind) -> how the scheduler's watch of that kind feeds the cache. Listed in the
# order the scheduler lists them: pods last, so their groups resolve.
FEEDS: dict[tuple[str, str], Feed] = {
    ("", "Node"): _feed(R.node, lambda c: c.on_node),
    ("scheduling.k8s.io", "PriorityClass"): _feed(R.priority_class, lambda c: c.on_priority_class),
    (SCHEDULING_GROUP, "Queue"): _feed(R.queue, lambda c: c.on_queue),
    (SCHEDULING_GROUP, "Pool"): _feed(R.pool, lambda c: c.on_pool),
    (SCHEDULING_GROUP, "Topology"): _feed(R.topology, lambda c: c.on_topology),
    (SCHEDULING_GROUP, "PodGroup"): _feed(R.podgroup, lambda c: c.on_podgroup),
    ("policy", "PodDisruptionBudget"): _feed(R.budget, lambda c: c.on_budget),
    ("", "Pod"): _feed(R.pod, lambda c: c.on_pod),
}
ORDER = {kind: i for i, kind in enumerate(FEEDS)}


class RecordedSnapshotError(ValueError):
    """The file holds no cluster objects the scheduler reads."""


def objects(documents: Iterable[object]) -> list[Mapping[str, Any]]:
    """API objects from parsed documents: ``List`` items are unpacked."""
    out: list[Mapping[str, Any]] = []
    for doc in documents:
        if not isinstance(doc, Mapping):
            continue
        if isinstance(doc.get("items"), list):
            out.extend(objects(doc["items"]))
        elif "kind" in doc:
            out.append(doc)
    return out


def _kind(obj: Mapping[str, Any]) -> tuple[str, str]:
    group = str(obj.get("apiVersion", "")).rpartition("/")[0]
    return group, str(obj.get("kind", ""))


def snapshot(items: Iterable[Mapping[str, Any]], scheduler_name: str = "sluice") -> Snapshot:
    """The core's snapshot of the recorded objects, as of the newest creation time among them
    (the file does not say when it was recorded)."""
    cache = SchedulerCache(scheduler_name, lambda _kind: None)
    known = sorted((obj for obj in items if _kind(obj) in FEEDS), key=lambda obj: ORDER[_kind(obj)])
    if not any(_kind(obj) == ("", "Node") for obj in known):
        raise RecordedSnapshotError("no Node objects: record nodes and pods at least")
    now = 0.0
    for obj in known:
        phase = (obj.get("status") or {}).get("phase")
        if _kind(obj) == ("", "Pod") and phase in FINISHED_POD_PHASES:
            continue
        created = (obj.get("metadata") or {}).get("creationTimestamp")
        if created:
            now = max(now, R.timestamp(created))
        FEEDS[_kind(obj)](cache, "ADDED", object_key(obj), obj)
    return cache.snapshot(now)


def load(path: Path, scheduler_name: str = "sluice") -> Snapshot:
    """A recorded file (YAML or JSON, which YAML reads too)."""
    try:
        documents = list(yaml.safe_load_all(path.read_text()))
    except yaml.YAMLError as exc:
        raise RecordedSnapshotError(f"{path}: not YAML or JSON: {exc}") from exc
    return snapshot(objects(documents), scheduler_name)
