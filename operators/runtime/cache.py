"""The scheduler's cache: watch-fed records of the cluster, assumed bindings, and an incremental
snapshot builder for the core.

kube-scheduler's assume/forget contract: when the core decides to bind a pod, the cache records
the pod as bound at once (so the next cycle does not place it, or something else, in the same
room); the watch later confirms it; a failed binding forgets it and the pod is pending again.

The snapshot is assembled from per-object pieces that are rebuilt only when their object changed
(nodes' foreign usage, tasks, groups), so a cycle costs O(changed) translation plus O(n) tuple
assembly, not a deep copy of the cluster.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Literal

from operators.runtime import records as R
from operators.runtime.informer import EventType, Key
from operators.scheduler import snapshot as S

if TYPE_CHECKING:
    from operators.runtime.binder import Rejection

log = logging.getLogger(__name__)

ChangeKind = Literal["schedule", "status"]
"""`schedule`: a session may decide differently now; `status`: only group statuses may change."""
OWN_WRITES_REMEMBERED = 4
"""Status writes per PodGroup whose echo is awaited (a write whose echo never came, e.g. one that
changed nothing, is forgotten once this many newer ones were made)."""
SELF_WRITE = "own-write"
"""Cause counted (in `SchedulerCache.triggers`) for a watch event that only echoes our own write."""
FINISHED_PHASES = (S.GroupPhase.COMPLETED, S.GroupPhase.FAILED)
_WAITING = (S.GroupPhase.PENDING, S.GroupPhase.INQUEUE)


@dataclasses.dataclass
class Assumption:
    node: str
    gpu_ids: tuple[int, ...]
    since: float
    bound: bool = False  # the Binding POST succeeded; waiting for the watch to show it


@dataclasses.dataclass(frozen=True)
class _Held:
    """What one pod holds on a node: its requests and GPU cards (a share of each)."""

    node: str
    requests: Mapping[str, int]
    gpu_ids: tuple[int, ...]
    gpu_milli: int

    @property
    def card_share(self) -> int:
        return self.gpu_milli or S.GPU_MILLI_PER_CARD


@dataclasses.dataclass
class _Room:
    """Sums over the pods holding room on one node (requests per resource, milli per card)."""

    used: dict[str, int] = dataclasses.field(default_factory=dict)
    cards: dict[int, int] = dataclasses.field(default_factory=dict)
    pods: int = 0

    def add(self, held: _Held, sign: int) -> None:
        self.pods += sign
        for res, amount in held.requests.items():
            self.used[res] = self.used.get(res, 0) + sign * amount
        for card in held.gpu_ids:
            self.cards[card] = self.cards.get(card, 0) + sign * held.card_share

    def empty(self) -> bool:
        return self.pods == 0


def _same_room(mine: Assumption, node: str | None, gpu_ids: tuple[int, ...] | None) -> bool:
    """Is the assumption the one made for a Binding to ``node`` with ``gpu_ids`` (None: any)?"""
    return (node is None or node == mine.node) and (gpu_ids is None or gpu_ids == mine.gpu_ids)


class SchedulerCache:
    unconfirmed_grace_seconds: float = 120.0
    """How long a binding POST may stay unanswered (request timeout x retries) before its
    assumption starts its TTL anyway."""

    def __init__(self, scheduler_name: str, on_change: Callable[[ChangeKind], None]) -> None:
        self.scheduler_name = scheduler_name
        self._notify = on_change

        self.nodes: dict[str, S.Node] = {}
        self.pods: dict[str, R.PodRecord] = {}  # by uid
        self.groups: dict[Key, R.GroupRecord] = {}  # by (namespace, name)
        self.queues: dict[str, S.Queue] = {}
        self.pools: dict[str, S.Pool] = {}
        self.topologies: dict[str, S.Topology] = {}
        self.priority_classes: dict[str, int] = {}
        self.budgets: dict[Key, R.BudgetRecord] = {}
        self.assumed: dict[str, Assumption] = {}
        # Pods whose eviction we decided, until the watch shows them leaving (or the eviction
        # failed): a session in between would see them bound and choose their group as a victim
        # again (a second WillEvict right after its Evicted) or evict it a second time.
        self._evicted: set[str] = set()
        self._assumed_on_node: defaultdict[str, set[str]] = defaultdict(set)  # node -> pod uids
        # What every pod holding room holds (bound and not finished, or assumed and not bound
        # yet), and the sums per node, kept as pods and assumptions come and go: the bind-time
        # re-check (room_conflict) asks before every Binding POST, and walking the node's pods
        # each time cost 8 % of the event loop at 200 pods/s (py-spy, bench.live arrival).
        self._holding: dict[str, _Held] = {}  # pod uid -> its share
        self._room: dict[str, _Room] = {}  # node -> sums of its pods' shares

        self._pod_uid_by_key: dict[Key, str] = {}
        self._pods_on_node: defaultdict[str, set[str]] = defaultdict(set)
        self._pods_by_group: defaultdict[Key, set[str]] = defaultdict(set)
        # Per group key, its members' (bound, running, pending) as member_counts() tells them,
        # kept with _pods_by_group: the status pass asks for them on every wake while a gang's
        # bindings come back, and walking a 10,000-pod gang's members each time cost ~6 % of
        # the loop in a burst (py-spy, bench.live 1x10000).
        self._counts_by_group: dict[Key, list[int]] = {}
        # Group keys pods name that have no PodGroup: orphans() is asked on every wake of the
        # loop, and walking every group with pods (16,000 after minutes of arrivals) for them
        # cost 2 % of the event loop.
        self._orphaned: set[Key] = set()
        self._group_key_by_uid: dict[str, Key] = {}
        # Group uid -> order of first sight (S.PodGroup.arrival).
        self._arrival: dict[str, int] = {}
        self._arrivals = itertools.count(1)

        # incremental pieces of the snapshot
        self._built_nodes: dict[str, S.Node] = {}
        self._dirty_nodes: set[str] = set()
        self._tasks: dict[str, S.Task] = {}  # managed pods, by uid
        self._implicit: dict[str, S.PodGroup] = {}  # implicit groups, by pod uid
        self._explicit: dict[str, S.PodGroup] = {}  # PodGroup objects, by uid
        # PodGroups whose members or object changed since the last status pass.
        self.dirty_groups: set[Key] = set()

        # What the scheduler itself last wrote, so that the watch's echo of that write is not
        # taken for news: a session already decided it, and re-running one on its own output
        # decides nothing new (while holding the GIL the binder needs).
        # Per group, the (phase, mark) of our status writes whose echo has not come back yet,
        # oldest first: a write made while an earlier one is in flight must not make that
        # earlier echo look like someone else's change.
        self._own_group_status: dict[str, list[tuple[S.GroupPhase, S.PreemptionMark | None]]] = {}
        self._own_nomination: dict[str, str] = {}  # pod uid -> nominatedNodeName we wrote
        # Why sessions were asked for, by cause (and SELF_WRITE: echoes that asked for none).
        self.triggers: Counter[str] = Counter()

    def status_owed(self, key: Key) -> None:
        """A group's status pass was skipped (its previous write was in flight): ask for another
        pass over it, as its own change would."""
        self.dirty_groups.add(key)
        self._notify("status")

    def _schedule(self, cause: str) -> None:
        self.triggers[cause] += 1
        self._notify("schedule")

    # ----------------------------------------------------------------------------------------
    # classification
    # ----------------------------------------------------------------------------------------

    def _managed(self, rec: R.PodRecord) -> bool:
        """Ours to schedule: our schedulerName and, if it names a group, the group exists and has
        not finished. A finished group's pods that still hold a node (a Failed job's pods being
        killed, a Completed job's side tasks) count like foreign pods until they are gone."""
        if rec.scheduler_name != self.scheduler_name:
            return False
        if not rec.group_name:
            return True
        grp = self.groups.get((rec.namespace, rec.group_name))
        return grp is not None and grp.group.phase not in FINISHED_PHASES

    def group_uid_of(self, rec: R.PodRecord) -> str:
        if rec.group_name:
            grp = self.groups.get((rec.namespace, rec.group_name))
            return grp.uid if grp else ""
        return R.implicit_group_uid(rec.uid)

    # ----------------------------------------------------------------------------------------
    # watch handlers
    # ----------------------------------------------------------------------------------------

    def on_node(self, kind: EventType, key: Key, new: S.Node | None, old: S.Node | None) -> None:
        name = key[1]
        if new is None:
            self.nodes.pop(name, None)
            self._built_nodes.pop(name, None)
            self._dirty_nodes.discard(name)
        else:
            self.nodes[name] = new
            self._dirty_nodes.add(name)
        # Heartbeats change nothing the translated record holds: equal records are not a change.
        if new != old:
            self._schedule("node")

    def on_pod(
        self, kind: EventType, key: Key, new: R.PodRecord | None, old: R.PodRecord | None
    ) -> None:
        for rec in (old, new):
            if rec is not None and rec.group_name:
                self.dirty_groups.add((rec.namespace, rec.group_name))
        if old is not None:
            self._unindex_pod(old)
        if new is None:
            if old is not None:
                self._arrival.pop(R.implicit_group_uid(old.uid), None)
                self._drop_assumption(old.uid)
                self._evicted.discard(old.uid)
                self._own_nomination.pop(old.uid, None)
                if old.holds_resources or self._managed(old):
                    self._schedule("pod-gone")
                else:
                    self._notify("status")
            return
        self._index_pod(new)
        assumption = self.assumed.get(new.uid)
        if assumption is not None and new.node_name:
            self._drop_assumption(new.uid)  # confirmed by the watch
            self._rebuild_pod(new)
            self._notify("status")
            return
        self._rebuild_pod(new)
        if old is None:
            if self._managed(new) and not new.node_name:
                self._schedule("pod-new")
            else:
                self._notify("status")
            return
        if (
            old.node_name != new.node_name
            or old.deleting != new.deleting
            or old.requests != new.requests
            or old.group_name != new.group_name
        ):
            self._schedule("pod-changed")
        elif not new.node_name and self._managed(new) and old != new:
            if self._own_nomination_only(old, new):
                self.triggers[SELF_WRITE] += 1
                self._notify("status")
            else:
                self._schedule("pod-changed")
        else:
            self._notify("status")

    def _own_nomination_only(self, old: R.PodRecord, new: R.PodRecord) -> bool:
        """The pod differs from before only by the nominatedNodeName we wrote ourselves."""
        return (
            self._own_nomination.get(new.uid) == new.nominated_node
            and dataclasses.replace(old, nominated_node=new.nominated_node) == new
        )

    def on_podgroup(
        self, kind: EventType, key: Key, new: R.GroupRecord | None, old: R.GroupRecord | None
    ) -> None:
        self.dirty_groups.add(key)
        if old is not None:
            self._group_key_by_uid.pop(old.uid, None)
            self._explicit.pop(old.uid, None)
        if new is None:
            self.groups.pop(key, None)
            if old is not None:
                self._arrival.pop(old.uid, None)
            if key in self._pods_by_group:
                self._orphaned.add(key)
        else:
            self.groups[key] = new
            self._orphaned.discard(key)
            self._group_key_by_uid[new.uid] = key
            self._explicit[new.uid] = self._resolve_group(new)
        if (new is None) != (old is None) or _finished(new) != _finished(old):
            # Members of a group that appeared, vanished or finished change between ours to
            # schedule and foreign usage of their nodes.
            for uid in list(self._pods_by_group.get(key, ())):
                rec = self.pods.get(uid)
                if rec is not None:
                    self._rebuild_pod(rec)
        if new is None:
            if old is not None:
                self._own_group_status.pop(old.uid, None)
            self._schedule("podgroup")
        elif old is None:
            self._schedule("podgroup")
        elif old.group != new.group:
            if self._own_status_only(old, new):
                # A deadline it carries already set the loop's timer when we wrote it
                # (preemption_deadlines).
                self.triggers[SELF_WRITE] += 1
            else:
                self._schedule("podgroup")

    def _own_status_only(self, old: R.GroupRecord, new: R.GroupRecord) -> bool:
        """Only the status fields the core reads (phase, delayed-preemption mark) changed, and
        to exactly what this scheduler wrote: the echo of one of our own status writes."""
        grp = new.group
        pending = self._own_group_status.get(new.uid, [])
        if (grp.phase, grp.preemption) not in pending:
            return False
        unchanged = dataclasses.replace(grp, phase=old.group.phase, preemption=old.group.preemption)
        if unchanged != old.group or new.priority_class != old.priority_class:
            return False
        # Echoes come back in write order: this one and every earlier write are accounted for.
        del pending[: pending.index((grp.phase, grp.preemption)) + 1]
        if not pending:
            del self._own_group_status[new.uid]
        return True

    def expect_group_status(self, group_uid: str, status: Mapping[str, object]) -> None:
        """Called just before the scheduler patches a PodGroup's status with `status`."""
        try:
            phase = S.GroupPhase(str(status.get("phase") or "Pending"))
        except ValueError:
            return
        pending = self._own_group_status.setdefault(group_uid, [])
        pending.append((phase, R.preemption_mark(status)))
        del pending[:-OWN_WRITES_REMEMBERED]

    def preemption_deadlines(self) -> list[float]:
        """Deadlines of delayed-preemption marks, from the watch and from our own writes.

        The loop sleeps until the earliest one; a mark we just wrote has not come back through
        the watch yet (and its echo wakes nobody), so it must count from the moment we wrote it.
        """
        marks = [r.group.preemption for r in self.groups.values()]
        marks += [pending[-1][1] for pending in self._own_group_status.values()]
        return [m.deadline for m in marks if m is not None]

    def timed_changes(self, move_window: float) -> list[float]:
        """When the core's answer changes with time alone, in one pass over the groups: a
        waiting group's hard network-topology request turns soft (``softAfterSeconds``), and a
        moved group not placed again yet reaches the end of its window (``consolidated_to``;
        the nodes held for it open to others). The loop needs a session then even if nothing
        else changed."""
        out = []
        for r in self.groups.values():
            g = r.group
            if g.network_topology is not None and g.phase in _WAITING:
                at = g.network_topology.soft_at(g.created)
                if at is not None:
                    out.append(at)
            if g.consolidated_to and g.consolidated_at is not None:
                out.append(g.consolidated_at + move_window)
        return out

    def expect_nomination(self, pod_uid: str, node: str) -> None:
        """Called just before the scheduler patches a pod's status.nominatedNodeName."""
        self._own_nomination[pod_uid] = node

    def on_queue(self, kind: EventType, key: Key, new: S.Queue | None, old: S.Queue | None) -> None:
        self._simple("queue", self.queues, key[1], new, old)

    def on_pool(self, kind: EventType, key: Key, new: S.Pool | None, old: S.Pool | None) -> None:
        self._simple("pool", self.pools, key[1], new, old)

    def on_topology(
        self, kind: EventType, key: Key, new: S.Topology | None, old: S.Topology | None
    ) -> None:
        self._simple("topology", self.topologies, key[1], new, old)

    def on_priority_class(
        self, kind: EventType, key: Key, new: int | None, old: int | None
    ) -> None:
        if new is None:
            self.priority_classes.pop(key[1], None)
        else:
            self.priority_classes[key[1]] = new
        if new != old:
            for uid, grp_key in self._group_key_by_uid.items():
                self._explicit[uid] = self._resolve_group(self.groups[grp_key])
            self._schedule("priorityclass")

    def on_budget(
        self,
        kind: EventType,
        key: Key,
        new: R.BudgetRecord | None,
        old: R.BudgetRecord | None,
    ) -> None:
        if new is None:
            self.budgets.pop(key, None)
        else:
            self.budgets[key] = new
        if new != old:
            self._schedule("budget")

    def _simple(
        self,
        cause: str,
        store: dict[str, S.Queue] | dict[str, S.Pool] | dict[str, S.Topology],
        name: str,
        new: object,
        old: object,
    ) -> None:
        if new is None:
            store.pop(name, None)
        else:
            store[name] = new  # type: ignore[assignment]
        # Queue/Pool records hold no status the scheduler writes, so our status writes compare
        # equal here and start nothing.
        if new != old:
            self._schedule(cause)

    # ----------------------------------------------------------------------------------------
    # indexes and per-object pieces
    # ----------------------------------------------------------------------------------------

    def _index_pod(self, rec: R.PodRecord) -> None:
        self.pods[rec.uid] = rec
        self._hold_room(rec.uid)
        self._pod_uid_by_key[(rec.namespace, rec.name)] = rec.uid
        if rec.node_name:
            self._pods_on_node[rec.node_name].add(rec.uid)
            self._dirty_nodes.add(rec.node_name)
        if rec.group_name:
            key = (rec.namespace, rec.group_name)
            self._pods_by_group[key].add(rec.uid)
            if key not in self.groups:
                self._orphaned.add(key)
            _add_member(self._counts_by_group.setdefault(key, [0, 0, 0]), rec, 1)

    def _unindex_pod(self, rec: R.PodRecord) -> None:
        self.pods.pop(rec.uid, None)
        self._hold_room(rec.uid)
        if self._pod_uid_by_key.get((rec.namespace, rec.name)) == rec.uid:
            del self._pod_uid_by_key[(rec.namespace, rec.name)]
        if rec.node_name:
            on_node = self._pods_on_node.get(rec.node_name)
            if on_node is not None:
                on_node.discard(rec.uid)
                if not on_node:
                    del self._pods_on_node[rec.node_name]
            self._dirty_nodes.add(rec.node_name)
        if rec.group_name:
            key = (rec.namespace, rec.group_name)
            members = self._pods_by_group.get(key)
            if members is not None and rec.uid in members:
                members.discard(rec.uid)
                _add_member(self._counts_by_group[key], rec, -1)
                if not members:
                    del self._pods_by_group[key]
                    del self._counts_by_group[key]
                    self._orphaned.discard(key)
        self._tasks.pop(rec.uid, None)
        self._implicit.pop(rec.uid, None)

    def _rebuild_pod(self, rec: R.PodRecord) -> None:
        """Recompute the pod's Task (and implicit group), applying an assumed binding if any."""
        if rec.node_name:
            # Whether it counts as foreign depends on _managed, which may just have changed.
            self._dirty_nodes.add(rec.node_name)
        if not self._managed(rec):
            self._tasks.pop(rec.uid, None)
            self._implicit.pop(rec.uid, None)
            return
        task = R.task(rec, self.group_uid_of(rec))
        if rec.group_name:
            grp = self.groups.get((rec.namespace, rec.group_name))
            if grp is not None and grp.units is not None:
                size, roles = grp.units
                if not roles or rec.role in roles:
                    # Units of `size` consecutive replicas of one type must share a domain.
                    task = dataclasses.replace(task, unit=f"{rec.role}/{rec.index // size}")
        assumption = self.assumed.get(rec.uid)
        if assumption is not None and not rec.node_name:
            task = dataclasses.replace(
                task, status=S.TaskStatus.BOUND, node=assumption.node, gpu_ids=assumption.gpu_ids
            )
        if rec.uid in self._evicted:
            if rec.deleting or not rec.node_name:
                self._evicted.discard(rec.uid)  # the watch shows it: the record is the truth
            elif task.status is S.TaskStatus.BOUND:
                task = dataclasses.replace(task, status=S.TaskStatus.RELEASING)
        self._tasks[rec.uid] = task
        if not rec.group_name:
            bound = task.node is not None
            arrival = self._arrival_of(R.implicit_group_uid(rec.uid))
            self._implicit[rec.uid] = R.implicit_group(rec, bound, arrival)

    def _arrival_of(self, group_uid: str) -> int:
        arrival = self._arrival.get(group_uid)
        if arrival is None:
            arrival = self._arrival[group_uid] = next(self._arrivals)
        return arrival

    def _resolve_group(self, rec: R.GroupRecord) -> S.PodGroup:
        arrival = self._arrival_of(rec.uid)
        if rec.priority_class and rec.priority_class in self.priority_classes:
            return dataclasses.replace(
                rec.group, priority=self.priority_classes[rec.priority_class], arrival=arrival
            )
        return dataclasses.replace(rec.group, arrival=arrival)

    def peer_uid(self, ref: str) -> str:
        """`namespace/name` of a PodGroup (or of a pod, for implicit groups) -> group uid."""
        namespace, _, name = ref.partition("/")
        grp = self.groups.get((namespace, name))
        if grp is not None:
            return grp.uid
        pod_uid = self._pod_uid_by_key.get((namespace, name))
        return R.implicit_group_uid(pod_uid) if pod_uid else ref

    def peer_ref(self, group_uid: str) -> str:
        """The inverse of peer_uid: what status.preemption.peers shows."""
        if group_uid.startswith("pod:"):
            rec = self.pods.get(group_uid[4:])
            return f"{rec.namespace}/{rec.name}" if rec else group_uid
        key = self._group_key_by_uid.get(group_uid)
        return f"{key[0]}/{key[1]}" if key else group_uid

    def _with_peers(self, group: S.PodGroup) -> S.PodGroup:
        mark = group.preemption
        if mark is None:
            return group
        peers = tuple(self.peer_uid(p) for p in mark.peers)
        return dataclasses.replace(group, preemption=dataclasses.replace(mark, peers=peers))

    def _foreign(self, name: str) -> S.Node:
        base = self.nodes[name]
        used: dict[str, int] = {}
        pods = 0
        gpu_milli: list[int] = [0] * base.gpu_count
        for uid in self._pods_on_node.get(name, ()):
            rec = self.pods.get(uid)
            if rec is None or not rec.holds_resources or self._managed(rec):
                continue
            pods += 1
            for res, amount in rec.requests.items():
                used[res] = used.get(res, 0) + amount
            for gpu in rec.gpu_ids:
                if 0 <= gpu < len(gpu_milli):
                    gpu_milli[gpu] = S.GPU_MILLI_PER_CARD
        if not pods:
            return base
        return dataclasses.replace(
            base,
            foreign_used=MappingProxyType(used),
            foreign_pods=pods,
            gpu_foreign_milli=tuple(gpu_milli) if any(gpu_milli) else (),
        )

    # ----------------------------------------------------------------------------------------
    # assume / confirm / forget
    # ----------------------------------------------------------------------------------------

    def expect_eviction(self, pod_uids: Iterable[str]) -> None:
        """Called just before the scheduler evicts these pods: until the watch shows them
        leaving, they are Releasing to the core (they hold their room, and are no victims)."""
        for uid in pod_uids:
            rec = self.pods.get(uid)
            if rec is not None and rec.node_name and not rec.deleting:
                self._evicted.add(uid)
                self._rebuild_pod(rec)

    def eviction_failed(self, pod_uids: Iterable[str]) -> None:
        """These pods' eviction did not happen (refused, blocked, failed): bound again. A
        change for the safety tick, not a session of its own: a PodDisruptionBudget that
        blocks an eviction would otherwise have it retried in a tight loop."""
        restored = False
        for uid in pod_uids:
            if uid in self._evicted:
                self._evicted.discard(uid)
                rec = self.pods.get(uid)
                if rec is not None:
                    self._rebuild_pod(rec)
                    restored = True
        if restored:
            self._notify("status")

    def assume(self, pod_uid: str, node: str, gpu_ids: tuple[int, ...], now: float) -> bool:
        rec = self.pods.get(pod_uid)
        if rec is None or rec.node_name:
            return False
        self._drop_assumption(pod_uid)
        self.assumed[pod_uid] = Assumption(node=node, gpu_ids=gpu_ids, since=now)
        self._assumed_on_node[node].add(pod_uid)
        self._hold_room(pod_uid)
        self._rebuild_pod(rec)
        return True

    def _drop_assumption(self, pod_uid: str) -> Assumption | None:
        assumption = self.assumed.pop(pod_uid, None)
        if assumption is not None:
            self._hold_room(pod_uid)
            on_node = self._assumed_on_node.get(assumption.node)
            if on_node is not None:
                on_node.discard(pod_uid)
                if not on_node:
                    del self._assumed_on_node[assumption.node]
        return assumption

    def room_conflict(
        self, pod_uid: str, node: str | None = None, gpu_ids: tuple[int, ...] | None = None
    ) -> str | None:
        """Does the pod's assumed binding still fit its node, as the cache sees it now?

        Asked just before its Binding is posted: the session chose the room from a snapshot,
        and pods another scheduler bound meanwhile (they appear through the pod watch) may have
        taken it. Counts every pod holding room on the node (ours bound or assumed, foreign,
        terminating) plus this one against allocatable, and the cards it is given against the
        cards others hold (fractional shares add up per card). None when it still fits, else
        why not.

        ``node``/``gpu_ids``: what the Binding about to be posted says. A POST that waited for
        a connection slot may outlive its assumption (expired, or forgotten and replaced by a
        later session's): its room is then no longer held for it, so it is not sent. A pod the
        watch already shows bound is left to the POST (a 409 tells whether it is ours).
        """
        mine = self.assumed.get(pod_uid)
        rec = self.pods.get(pod_uid)
        if rec is None or rec.node_name:
            return None
        if mine is None:
            return "its assumed room was given up while the binding waited"
        if not _same_room(mine, node, gpu_ids):
            return f"a later session placed it on {mine.node} {list(mine.gpu_ids)}"
        where = self.nodes.get(mine.node)
        if where is None:
            return f"node {mine.node} is gone"
        # The node's sums hold this pod's share too (assumed there, not bound yet).
        room = self._room.get(mine.node) or _Room()
        for res, amount in sorted(room.used.items()):
            if amount > where.allocatable.get(res, 0) and rec.requests.get(res, 0) > 0:
                return (
                    f"{res} on {mine.node}: {amount} requested of {where.allocatable.get(res, 0)}"
                )
        for card in mine.gpu_ids:
            if room.cards.get(card, 0) > S.GPU_MILLI_PER_CARD:
                return f"GPU {card} on {mine.node} is held by another pod"
        return None

    def _hold_room(self, pod_uid: str) -> None:
        """Bring the pod's share of its node's room (room_conflict) up to date with the pod's
        record and assumption as they are now."""
        rec = self.pods.get(pod_uid)
        held: _Held | None = None
        if rec is not None:
            if rec.holds_resources:
                held = _Held(rec.node_name, rec.requests, rec.gpu_ids, rec.gpu_milli)
            elif not rec.node_name and (mine := self.assumed.get(pod_uid)) is not None:
                held = _Held(mine.node, rec.requests, mine.gpu_ids, rec.gpu_milli)
        before = self._holding.get(pod_uid)
        if held == before:
            return
        if before is not None:
            self._room[before.node].add(before, -1)
            if self._room[before.node].empty():
                del self._room[before.node]
            del self._holding[pod_uid]
        if held is not None:
            self._room.setdefault(held.node, _Room()).add(held, 1)
            self._holding[pod_uid] = held

    def finish_binding(self, pod_uid: str, now: float) -> None:
        assumption = self.assumed.get(pod_uid)
        if assumption is not None:
            assumption.bound = True
            assumption.since = now

    def forget(
        self, pod_uid: str, node: str | None = None, gpu_ids: tuple[int, ...] | None = None
    ) -> None:
        """Drop the pod's assumption; with ``node``/``gpu_ids`` (a failed Binding's), only if
        it is still the one that Binding was made for, not a later session's."""
        mine = self.assumed.get(pod_uid)
        if mine is None or not _same_room(mine, node, gpu_ids):
            return
        self._drop_assumption(pod_uid)
        rec = self.pods.get(pod_uid)
        if rec is not None:
            self._rebuild_pod(rec)
        self._schedule("binding-forgotten")

    def expire_assumptions(
        self, now: float, ttl: float, in_flight_grace: float | None = None
    ) -> list[str]:
        """Forget assumptions the watch never confirmed (a lost event, a pod gone meanwhile).

        A bound assumption waits `ttl` after its POST succeeded. One whose POST never settled
        (a lost callback, a timed-out request that may or may not have bound) waits
        `in_flight_grace` (default: `unconfirmed_grace_seconds`, enough for a request's retries)
        plus `ttl` from when it was assumed, so nothing stays "assumed bound" forever.
        """
        grace = self.unconfirmed_grace_seconds if in_flight_grace is None else in_flight_grace
        stale = [
            uid
            for uid, a in self.assumed.items()
            if now - a.since > (ttl if a.bound else ttl + grace)
        ]
        for uid in stale:
            log.warning("assumed binding of pod %s never confirmed; forgetting it", uid)
            self.forget(uid)
        return stale

    # ----------------------------------------------------------------------------------------
    # queries
    # ----------------------------------------------------------------------------------------

    def pod_by_uid(self, uid: str) -> R.PodRecord | None:
        return self.pods.get(uid)

    def group_record(self, uid: str) -> R.GroupRecord | None:
        key = self._group_key_by_uid.get(uid)
        return self.groups.get(key) if key else None

    def members(self, group_uid: str) -> list[R.PodRecord]:
        """Pods of a group (explicit or implicit)."""
        if group_uid.startswith("pod:"):
            rec = self.pods.get(group_uid[4:])
            return [rec] if rec else []
        key = self._group_key_by_uid.get(group_uid)
        if key is None:
            return []
        return [self.pods[u] for u in self._pods_by_group.get(key, ()) if u in self.pods]

    def member_counts(self, group_uid: str) -> tuple[int, int, int]:
        """(bound, running, pending) of the group's members that are not being deleted: bound
        = the watch shows a node (a Binding still in flight does not count), running = bound
        and phase Running, pending = the rest. Kept as pods come and go, so asking is O(1)
        for a PodGroup (an implicit group is its one pod)."""
        counts = [0, 0, 0]
        if group_uid.startswith("pod:"):
            rec = self.pods.get(group_uid[4:])
            if rec is not None:
                _add_member(counts, rec, 1)
        elif (key := self._group_key_by_uid.get(group_uid)) is not None:
            counts = self._counts_by_group.get(key, counts)
        return counts[0], counts[1], counts[2]

    def bound_since(self, key: Key, at: float) -> bool:
        """Whether a pod of the group created at or after ``at`` has been bound (the watch shows
        its node; finished ones count): a moved job placed again. Its pods from before the
        move were all created earlier."""
        for uid in self._pods_by_group.get(key, ()):
            rec = self.pods.get(uid)
            if rec is not None and rec.node_name and rec.created >= at:
                return True
        return False

    def task(self, uid: str) -> S.Task | None:
        return self._tasks.get(uid)

    def tasks(self) -> Iterable[S.Task]:
        return self._tasks.values()

    def orphans(self) -> list[R.PodRecord]:
        """Our unbound pods naming a PodGroup that does not exist: not scheduled until it does,
        so they need telling why."""
        out: list[R.PodRecord] = []
        for key in self._orphaned:
            for uid in self._pods_by_group.get(key, ()):
                rec = self.pods.get(uid)
                if (
                    rec is not None
                    and rec.scheduler_name == self.scheduler_name
                    and not rec.node_name
                    and not rec.deleting
                ):
                    out.append(rec)
        return out

    def has_pending_work(self) -> bool:
        return any(t.status is S.TaskStatus.PENDING for t in self._tasks.values())

    def pending_by_queue(self) -> dict[str, int]:
        counts: dict[str, int] = defaultdict(int)
        for t in self._tasks.values():
            if t.status is S.TaskStatus.PENDING:
                grp = self._explicit.get(t.group) or self._implicit.get(t.uid)
                counts[grp.queue if grp else S.DEFAULT_QUEUE] += 1
        return counts

    def _max_unavailable(self, group_uid: str) -> int | None:
        if not self.budgets:
            return None
        floor: int | None = None
        for rec in self.members(group_uid):
            for budget in self.budgets.values():
                if budget.namespace == rec.namespace and budget.selector.matches(rec.labels):
                    allowed = budget.disruptions_allowed
                    floor = allowed if floor is None else min(floor, allowed)
        return floor

    # ----------------------------------------------------------------------------------------
    # the snapshot
    # ----------------------------------------------------------------------------------------

    def has_group(self, uid: str) -> bool:
        return uid in self._explicit or uid.removeprefix("pod:") in self._implicit

    def snapshot(
        self,
        now: float,
        implicit_marks: Mapping[str, S.PreemptionMark] | None = None,
        rejections: Mapping[str, Rejection] | None = None,
        below_minimum: Mapping[str, float] | None = None,
        queue_usage: Mapping[str, float] | None = None,
    ) -> S.Snapshot:
        """``rejections``: groups whose Binding the API rejected (BindBackoff), with the time
        they may be placed again, on the core's clock (``now``). ``below_minimum``: running
        groups seen below their minimum, since when (stale gangs). ``queue_usage``: each
        queue's decayed GPU-seconds at ``now`` (time-based fair share, UsageBook)."""
        for name in self._dirty_nodes:
            if name in self.nodes:
                self._built_nodes[name] = self._foreign(name)
        self._dirty_nodes.clear()

        groups: list[S.PodGroup] = [
            self._with_peers(g) for g in self._explicit.values() if g.phase not in FINISHED_PHASES
        ]
        if self.budgets:
            groups = [
                dataclasses.replace(g, max_unavailable=_tighter(g.max_unavailable, m))
                if (m := self._max_unavailable(g.uid)) is not None
                else g
                for g in groups
            ]
        if implicit_marks:
            groups.extend(
                dataclasses.replace(g, preemption=implicit_marks[g.uid])
                if g.uid in implicit_marks
                else g
                for g in self._implicit.values()
            )
        else:
            groups.extend(self._implicit.values())
        if rejections:
            groups = [
                dataclasses.replace(g, retry_binding_at=r.retry_at, binding_error=r.message)
                if (r := rejections.get(g.uid)) is not None
                else g
                for g in groups
            ]
        if below_minimum:
            groups = [
                dataclasses.replace(g, below_minimum_since=below_minimum[g.uid])
                if g.uid in below_minimum
                else g
                for g in groups
            ]
        live = {g.uid for g in groups}
        tasks = tuple(t for t in self._tasks.values() if t.group in live)
        topology = None
        if self.topologies:
            # One Topology describes the network; if several exist, the first by name wins.
            topology = self.topologies[min(self.topologies)]
        return S.Snapshot(
            now=now,
            nodes=tuple(self._built_nodes.values()),
            queues=tuple(
                dataclasses.replace(q, usage=queue_usage[q.name]) if q.name in queue_usage else q
                for q in self.queues.values()
            )
            if queue_usage
            else tuple(self.queues.values()),
            pools=tuple(self.pools.values()),
            groups=tuple(groups),
            tasks=tasks,
            topology=topology,
        )


def _add_member(counts: list[int], rec: R.PodRecord, sign: int) -> None:
    """Count a member in (sign 1) or out (sign -1) of its group's (bound, running, pending).
    Leaving pods are no members: a restarted job's group must not read as Running from the
    pods it is killing."""
    if rec.deleting:
        return
    if rec.node_name:
        counts[0] += sign
        counts[1] += sign * (rec.phase == "Running")
    else:
        counts[2] += sign


def _finished(rec: R.GroupRecord | None) -> bool:
    return rec is not None and rec.group.phase in FINISHED_PHASES


def _tighter(own: int | None, budget: int) -> int:
    """A non-preemptible group (own = 0) stays so whatever its PodDisruptionBudgets allow."""
    return budget if own is None else min(own, budget)
