"""One level-based step of a job: (shape, memory, observations, now) -> Plan.

The operator calls `reconcile` whenever something about the job may have changed (the job, one of
its pods, its PodGroup, a timer) and applies the plan: delete pods, create pods, write the status,
post Events. Every decision is recomputed from what is observed, so a step may be repeated (after
a crash, a conflict, a slow watch) without doing anything twice: pods are named per index, deleted
pods are not deleted again, and the memory (what the last step wrote to the status) tells a new
failure from one already handled.

Order inside a step:
1. pods of an older job version are stale: deleted, and nothing they report counts;
2. lifecycle events are detected (pod failed / evicted / pending too long, task completed /
   failed, PodGroup Unknown) and resolved to actions (`policies`); suspend and resume are actions
   too; the most severe action is looked up in `tables.ACTIONS` (a restart beyond maxRetry
   becomes `EXHAUSTED`);
3. the `tables.SYNC` rules move the job on (admitted, running, finished, pods stopped...);
4. in Inqueue/Running, missing pods of tasks whose dependencies are ready are created; in the
   killing phases, live pods are deleted;
5. counts, task and replica phases, conditions and transitions are derived for the status.
"""

from __future__ import annotations

import datetime
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, Final

from operators.api.batch import (
    MAX_DELAYED,
    MAX_REPLICA_ROWS,
    bound_replica_rows,
    find_dependency_cycle,
)
from operators.api.batch import JobPhase as J
from operators.api.batch import PolicyAction as A
from operators.api.batch import PolicyEvent as E
from operators.api.batch import ReplicaPhase as R
from operators.api.batch import TaskPhase as T
from operators.api.batch import TransitionLevel as Lv
from operators.jobs import tables
from operators.jobs.observed import GroupObs, PodObs
from operators.jobs.pods import group_name, pod_name
from operators.jobs.policies import SEVERITY, JobEvent, pending_timeout, resolve_with_timeout
from operators.jobs.shape import JobShape, TaskShape
from operators.jobs.tables import Facts, Kill, TaskFacts
from operators.jobs.translog import Log, TransitionRec

ADMITTED_GROUP_PHASES: Final = frozenset({"Inqueue", "Running", "Unknown"})
WAITING_GROUP_PHASES: Final = frozenset({"Pending", "Inqueue"})
FINISHED_GROUP_PHASES: Final = frozenset({"Completed", "Failed"})
"""Group phases in which enqueue admits, or has reserved quota for, pods yet to come."""
SMALL_JOB: Final = MAX_REPLICA_ROWS
"""Up to this many pods, every replica transition is also posted as an Event (and every pod gets
a status row); beyond, only the ones that need attention (failed, evicted, restarting)."""
_LOUD_REPLICA: Final = frozenset({R.FAILED, R.EVICTED, R.RESTARTING})
_WARNING_TARGETS: Final = frozenset(
    {J.FAILED, J.ABORTED, J.ABORTING, J.RESTARTING, T.FAILED, R.FAILED, R.EVICTED}
)
SUSPENDED: Final = "Suspended"
_PREEMPTION: Final = frozenset({"Privileged", "WillEvict"})
_EMPTY: Mapping[str, Any] = MappingProxyType({})


def iso(now: float) -> str:
    return datetime.datetime.fromtimestamp(now, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _seconds(stamp: str) -> float | None:
    try:
        return datetime.datetime.fromisoformat(stamp).timestamp()
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class Delayed:
    """A policy action waiting for its `timeout` (Volcano's delayed action). Kept in the job's
    status (`delayedActions`), so an operator restart neither loses nor restarts the clock."""

    event: E
    task: str = ""
    pod: str = ""
    due: float = 0.0

    @property
    def key(self) -> tuple[E, str, str]:
        return self.event, self.task, self.pod

    def wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {"event": self.event.value, "due": iso(self.due)}
        if self.task:
            out["task"] = self.task
        if self.pod:
            out["pod"] = self.pod
        return out

    @classmethod
    def parse(cls, raw: Mapping[str, Any]) -> Delayed | None:
        try:
            event = E(str(raw.get("event")))
        except ValueError:
            return None
        due = _seconds(str(raw.get("due") or ""))
        if due is None:
            return None
        return cls(event, str(raw.get("task") or ""), str(raw.get("pod") or ""), due)


@dataclass(frozen=True, slots=True)
class Memory:
    """What the previous step decided (the operator keeps it and seeds it from the status)."""

    phase: J | None = None
    reason: str = ""
    message: str = ""
    since: str = ""
    version: int = 0
    retry_count: int = 0
    tasks: Mapping[str, T] = field(default_factory=lambda: _EMPTY)
    replicas: Mapping[str, R] = field(default_factory=lambda: _EMPTY)
    log: Log = field(default_factory=Log)
    group_phase: str = ""
    conditions: Mapping[str, tuple[str, str, str, str]] = field(default_factory=lambda: _EMPTY)
    delayed: tuple[Delayed, ...] = ()
    """type -> (status, reason, message, lastTransitionTime)."""

    @classmethod
    def from_status(cls, status: Mapping[str, Any] | None) -> Memory:
        if not status or not status.get("phase"):
            return cls()
        try:
            phase = J(str(status["phase"]))
        except ValueError:
            phase = J.PENDING
        tasks: dict[str, T] = {}
        for t in status.get("tasks") or ():
            try:
                tasks[str(t.get("name"))] = T(str(t.get("phase") or "Pending"))
            except ValueError:
                continue
        replicas: dict[str, R] = {}
        for r in status.get("replicas") or ():
            try:
                replicas[str(r.get("name"))] = R(str(r.get("phase") or "Pending"))
            except ValueError:
                continue
        conditions = {
            str(c.get("type")): (
                str(c.get("status") or ""),
                str(c.get("reason") or ""),
                str(c.get("message") or ""),
                str(c.get("lastTransitionTime") or ""),
            )
            for c in status.get("conditions") or ()
        }
        entries = tuple(TransitionRec.parse(t) for t in status.get("transitions") or ())
        seq = int(status.get("transitionSeq") or (entries[-1].seq if entries else 0))
        return cls(
            phase=phase,
            reason=str(status.get("reason") or ""),
            message=str(status.get("message") or ""),
            since=str(status.get("lastTransitionTime") or ""),
            version=int(status.get("version") or 0),
            retry_count=int(status.get("retryCount") or 0),
            tasks=MappingProxyType(tasks),
            replicas=MappingProxyType(replicas),
            log=Log(
                entries,
                seq,
                int(status.get("transitionsDelivered") or 0),
                int(status.get("transitionsDropped") or 0),
            ),
            group_phase=str(status.get("podGroupPhase") or ""),
            conditions=MappingProxyType(conditions),
            delayed=tuple(
                d for raw in status.get("delayedActions") or () if (d := Delayed.parse(raw))
            ),
        )


@dataclass(frozen=True, slots=True)
class Observed:
    pods: Sequence[PodObs] = ()
    gone: Sequence[PodObs] = ()
    """Pods that disappeared since the last step without the operator deleting them (their last
    known state): evictions, preemptions, manual deletes."""
    group: GroupObs | None = None
    deleting: frozenset[str] = frozenset()
    creating: frozenset[str] = frozenset()
    """Names of pods the operator created whose creation the watch has not shown yet (its
    expectations): not created again while the watch lags."""
    """uids of pods the operator deleted whose deletion the watch has not shown yet."""
    problems: Mapping[str, tuple[str, str]] = field(default_factory=lambda: _EMPTY)
    """Bad input the operator found (reason -> (condition type, message)): missing queue,
    pool, PriorityClass or sink, a template the API server rejected."""
    hooks: bool = False


@dataclass(frozen=True, slots=True)
class Event:
    type: str  # Normal / Warning
    reason: str
    message: str
    transition: bool = False
    """An entry of the transition log (the operator coalesces them per job: coalesced_events)."""


@dataclass
class Plan:
    memory: Memory
    status: dict[str, Any]
    create: list[tuple[TaskShape, int]] = field(default_factory=list)
    delete: list[PodObs] = field(default_factory=list)
    transitions: list[TransitionRec] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    requeue_after: float | None = None
    delete_job: bool = False
    release_group: bool = False
    """The job is final with nothing alive while its PodGroup is not finished and never will
    be: it waits for or holds an admission (Pending, Inqueue: enqueue reserves quota for pods
    that will not come), or no pod of the job is left for the podgroup operator to finish it
    from (a job suspended or aborted while Running would count as running work in its queue
    for ever, and keep a Closing queue from closing). The operator deletes the group, as
    Volcano's does for a killed job; a resumed job gets a new one."""


COUNTED_AS: Final[Mapping[R, str]] = MappingProxyType(
    {
        R.PENDING: "pending",
        R.SCHEDULED: "pending",
        R.RESTARTING: "pending",
        R.RUNNING: "running",
        R.SUCCEEDED: "succeeded",
        R.FAILED: "failed",
        R.UNKNOWN: "unknown",
        R.TERMINATING: "terminating",
        R.EVICTED: "terminating",
    }
)
"""The job's pod count (`status.<count>`) each replica phase adds to."""
COUNTS: Final = ("pending", "running", "succeeded", "failed", "terminating", "unknown")


def _count(pods: Iterable[PodObs]) -> Counter[str]:
    """Pods by status count, through the replica phase table (one reading of a pod)."""
    return Counter(COUNTED_AS[tables.replica_phase(p)] for p in pods)


class _Step:
    """The working state of one reconcile call."""

    def __init__(self, job: JobShape, memory: Memory, obs: Observed, now: float) -> None:
        self.job, self.memory, self.obs, self.now = job, memory, obs, now
        self.time = iso(now)
        self.phase = memory.phase or J.PENDING
        self.reason, self.message, self.since = memory.reason, memory.message, memory.since
        self.version, self.retries = memory.version, memory.retry_count
        self.changes: list[tuple[Lv, str, str | None, str, str, str]] = []
        self.events: list[Event] = []
        self.kill: dict[str, PodObs] = {}
        self.restarting_tasks: set[str] = set()
        self.replica_notes: dict[str, tuple[R, str]] = {}
        self.delayed: dict[tuple[E, str, str], Delayed] = {d.key: d for d in memory.delayed}
        self.readmitting = False
        """The job restarted in this step: the operator sends its group back for admission
        after the step, so the group phase observed before it admits nothing yet."""
        if memory.phase is None:
            self.changes.append((Lv.JOB, job.name, None, J.PENDING.value, "Created", ""))
            self.since = self.time

    # -- helpers ------------------------------------------------------------------------------

    @property
    def current(self) -> list[PodObs]:
        return [p for p in self.obs.pods if p.version >= self.version]

    def present(self, task: str | None = None) -> list[PodObs]:
        """Pods of the current version that stay: not deleting, not being deleted now."""
        return [
            p
            for p in self.current
            if not p.deleting
            and p.name not in self.kill
            and p.uid not in self.obs.deleting
            and (task is None or p.task == task)
        ]

    def move(self, to: J, reason: str, message: str = "") -> None:
        if to == self.phase:
            return
        self.changes.append((Lv.JOB, self.job.name, self.phase.value, to.value, reason, message))
        self.phase, self.reason, self.message, self.since = to, reason, message, self.time
        self.readmitting = self.readmitting or to == J.RESTARTING

    def kill_pods(self, pods: Iterable[PodObs]) -> None:
        for p in pods:
            if not p.deleting and p.uid not in self.obs.deleting:
                self.kill.setdefault(p.name, p)

    def task_facts(self, task: TaskShape) -> TaskFacts:
        c = _count(self.present(task.name))
        return TaskFacts(
            job_phase=self.phase,
            restarting=task.name in self.restarting_tasks,
            replicas=task.replicas,
            min_available=task.min_available,
            elastic=self.job.elastic,
            pending=c["pending"],
            running=c["running"],
            succeeded=c["succeeded"],
            failed=c["failed"],
        )

    def task_phases(self) -> dict[str, T]:
        return {t.name: tables.task_phase(self.task_facts(t)) for t in self.job.tasks}

    # -- 2. events and actions ----------------------------------------------------------------

    def detect(self, task_phases: Mapping[str, T]) -> tuple[list[JobEvent], float | None]:
        job, memory = self.job, self.memory
        found: list[JobEvent] = []
        wake: float | None = None
        for p in self.present():
            if p.phase == "Failed" and memory.replicas.get(p.name) != R.FAILED:
                found.append(JobEvent(E.POD_FAILED, p.task, p, p.exit_code))
            elif p.phase == "Pending" and not p.node:
                timeout = pending_timeout(job, p.task)
                if timeout is not None and p.created:
                    due = p.created + timeout
                    if self.now >= due:
                        found.append(JobEvent(E.POD_PENDING, p.task, p))
                    else:
                        wake = min(wake or due - self.now, due - self.now)
        for p in self.current:
            if p.deleting and p.evicted and p.uid not in self.obs.deleting:
                # Seen on its way out (the Running -> Evicted transition is told now): its
                # reason is told with it, not when it is gone (then nothing changes).
                self.replica_notes[p.name] = (R.EVICTED, self._eviction_reason(p))
        for g in self.obs.gone:
            if g.version < self.version:
                continue
            reason = self._eviction_reason(g)
            self.replica_notes[g.name] = (R.EVICTED, reason)
            if reason == "Evicted":
                found.append(JobEvent(E.POD_EVICTED, g.task, g))
        for name, phase in task_phases.items():
            before = memory.tasks.get(name)
            if phase == T.COMPLETED and before != T.COMPLETED:
                found.append(JobEvent(E.TASK_COMPLETED, name))
            elif phase == T.FAILED and before != T.FAILED:
                found.append(JobEvent(E.TASK_FAILED, name))
        group = self.obs.group
        if group is not None and group.phase == "Unknown" and memory.group_phase != "Unknown":
            found.append(JobEvent(E.UNKNOWN))
        return found, wake

    def _eviction_reason(self, pod: PodObs) -> str:
        """Why a replica someone else removed went: `Shrunk` when the scheduler gave back an
        elastic job's replica above its task's minimum while the task keeps its minimum placed
        (a shrink, not a failure); else `Evicted` (a `PodEvicted`). The index alone does not
        tell: a whole elastic job evicted (preempted whole, a stale gang, a move) loses its
        replicas above the minimum too, and so does a job whose minimum waits unplaced."""
        shape = self.job.task(pod.task)
        if not (self.job.elastic and shape is not None and pod.index >= shape.min_available):
            return "Evicted"
        kept = sum(1 for p in self.present(pod.task) if p.node)
        return "Shrunk" if kept >= shape.min_available else "Evicted"

    def _still_holds(self, d: Delayed, task_phases: Mapping[str, T]) -> PodObs | bool:
        """Whether the situation a delayed action waits on still holds (the pod, if it has one)."""
        pods = {p.name: p for p in self.present()}
        pod = pods.get(d.pod)
        if d.event == E.POD_FAILED:
            return pod if pod is not None and pod.phase == "Failed" else False
        if d.event == E.POD_EVICTED:  # Volcano: cancelled once the replica runs again
            return pod is None or pod.phase != "Running"
        if d.event in (E.TASK_COMPLETED, E.TASK_FAILED):
            want = T.COMPLETED if d.event == E.TASK_COMPLETED else T.FAILED
            return task_phases.get(d.task) == want
        if d.event == E.UNKNOWN:
            return self.obs.group is not None and self.obs.group.phase == "Unknown"
        return False

    def _due(self, task_phases: Mapping[str, T]) -> tuple[list[JobEvent], float | None]:
        """Delayed actions whose deadline has passed and whose situation still holds (as events
        to act on); those that no longer hold are dropped. Also when the next one is due."""
        due: list[JobEvent] = []
        wake: float | None = None
        for key, d in list(self.delayed.items()):
            holds = self._still_holds(d, task_phases)
            if holds is False:
                del self.delayed[key]
            elif self.now >= d.due:
                del self.delayed[key]
                pod = holds if isinstance(holds, PodObs) else None
                due.append(JobEvent(d.event, d.task, pod, pod.exit_code if pod else None))
            else:
                wake = min(wake or d.due - self.now, d.due - self.now)
        return due, wake

    def act(self, found: Sequence[JobEvent], task_phases: Mapping[str, T]) -> float | None:
        """Take the action the events call for (delaying those whose policy has a timeout).
        Returns seconds until the next delayed action is due, if any."""
        job = self.job
        wanted: list[tuple[A, JobEvent | None]] = []
        for ev in found:
            action, timeout = resolve_with_timeout(job, ev)
            if action is None:
                continue
            if timeout is not None and ev.event != E.POD_PENDING:
                d = Delayed(ev.event, ev.task, ev.pod.name if ev.pod else "", self.now + timeout)
                self.delayed.setdefault(d.key, d)
                continue
            wanted.append((action, ev))
        due, wake = self._due(task_phases)
        wanted += [(a, ev) for ev in due if (a := resolve_with_timeout(job, ev)[0]) is not None]
        if job.suspend and self.phase not in (J.ABORTING, J.ABORTED, *tables.TERMINAL):
            wanted.append((A.ABORT_JOB, None))
        if (
            not job.suspend
            and self.phase in (J.ABORTING, J.ABORTED)
            and self.memory.conditions.get(SUSPENDED, ("",))[0] == "True"
        ):
            wanted.append((A.RESUME_JOB, None))
        if not wanted:
            return wake
        action = min((a for a, _ in wanted), key=SEVERITY.index)
        causes = [ev for a, ev in wanted if a == action]
        step = tables.ACTIONS.get((self.phase, action))
        if step is None:
            return wake
        self.delayed.clear()  # as in Volcano, an action taken cancels the delayed ones
        why = ", ".join(ev.describe() for ev in causes if ev is not None) or (
            "spec.suspend is true" if action == A.ABORT_JOB else "spec.suspend is false"
        )
        reason = action.value
        if action in (A.ABORT_JOB, A.RESUME_JOB) and all(ev is None for ev in causes):
            reason = SUSPENDED if action == A.ABORT_JOB else "Resumed"
        if action in tables.RESTARTS and self.retries >= job.max_retry:
            step, reason = tables.EXHAUSTED, "MaxRetryExceeded"
            why = f"{why}; retried {self.retries} of maxRetry {job.max_retry}"
        if step.retry:
            self.retries += 1
            why = f"{why} (retry {self.retries} of {job.max_retry})"
        self.events.append(Event("Warning" if action in tables.RESTARTS else "Normal", reason, why))
        if step.new_version:
            self.version += 1
        if step.kill == Kill.ALL:
            self.kill_pods(self.obs.pods)
            self.restarting_tasks = {t.name for t in job.tasks}
        elif step.kill == Kill.ALIVE:
            self.kill_pods(p for p in self.obs.pods if p.alive)
        elif step.kill == Kill.TASK:
            targets = {ev.task for ev in causes if ev is not None and ev.task}
            self.kill_pods(p for p in self.obs.pods if p.task in targets)
            self.restarting_tasks = targets
        elif step.kill == Kill.POD:
            pods = [ev.pod for ev in causes if ev is not None and ev.pod is not None]
            live = {p.name: p for p in self.obs.pods}
            self.kill_pods(live[p.name] for p in pods if p.name in live)
            for p in pods:
                self.replica_notes[p.name] = (R.RESTARTING, reason)
        if step.to is not None:
            self.move(step.to, reason, why)
        return None

    # -- 3. sync rules ------------------------------------------------------------------------

    def facts(self) -> Facts:
        job = self.job
        c = _count(self.present())
        task_facts = [self.task_facts(t) for t in job.tasks]
        all_finished = all(t.done for t in task_facts)
        finished_ok = (
            c["succeeded"] >= job.min_available
            and all(t.succeeded >= t.min_available for t in task_facts)
            and (job.min_success is None or c["succeeded"] >= job.min_success)
        )
        group = self.obs.group
        outstanding = bool(self.kill) or any(
            p.deleting or p.uid in self.obs.deleting or p.version < self.version
            for p in self.obs.pods
        )
        return Facts(
            admitted=group is not None
            and group.phase in ADMITTED_GROUP_PHASES
            and not self.readmitting,
            min_reached=c["running"] + c["succeeded"] >= max(job.min_available, 1),
            min_success_reached=job.min_success is not None and c["succeeded"] >= job.min_success,
            all_finished=all_finished,
            finished_ok=finished_ok,
            nothing_alive=not any(p.alive for p in self.obs.pods) and not outstanding,
            restart_done=not outstanding,
        )

    def sync(self) -> None:
        for _ in range(len(tables.SYNC) + 1):
            facts = self.facts()
            for reason, guard, to in tables.SYNC.get(self.phase, ()):
                if guard(facts):
                    self.move(to, reason)
                    break
            else:
                return

    # -- 4. pods ------------------------------------------------------------------------------

    def deps_ready(self, task: TaskShape, phases: Mapping[str, T]) -> bool:
        if not task.depends_on:
            return True
        ready = [phases.get(d) in (T.RUNNING, T.COMPLETED) for d in task.depends_on]
        return any(ready) if task.depends_on_any else all(ready)

    def pods(self) -> list[tuple[TaskShape, int]]:
        if self.phase in tables.KILLING or self.phase in tables.TERMINAL:
            if self.phase != J.RESTARTING:
                self.kill_pods(p for p in self.obs.pods if p.alive)
            return []
        # Pods of an older version are stale whatever the phase.
        self.kill_pods(p for p in self.obs.pods if p.version < self.version)
        if self.phase not in tables.CREATING:
            return []
        phases = self.task_phases()
        taken = {p.name for p in self.obs.pods} | self.obs.creating
        create: list[tuple[TaskShape, int]] = []
        for task in self.job.tasks:
            for p in self.present(task.name):
                if p.index >= task.replicas and p.alive:
                    self.kill_pods([p])  # scaled down: highest indexes go
            if not self.deps_ready(task, phases) or phases.get(task.name) == T.COMPLETED:
                continue
            create.extend(
                (task, index)
                for index in range(task.replicas)
                if pod_name(self.job.name, task.name, index) not in taken
            )
        return create


def reconcile(job: JobShape, memory: Memory, obs: Observed, now: float) -> Plan:
    step = _Step(job, memory, obs, now)
    cycle = find_dependency_cycle(job.dependency_graph())
    problems = dict(obs.problems)
    if cycle:
        problems["DependencyCycle"] = ("Valid", "spec.tasks[].dependsOn: " + " -> ".join(cycle))

    wake: float | None = None
    if not cycle:
        phases = step.task_phases()
        found, wake = step.detect(phases)
        delayed_wake = step.act(found, phases)
        if delayed_wake is not None:
            wake = min(wake or delayed_wake, delayed_wake)
        step.sync()
    create = step.pods() if not cycle else []
    if not cycle:
        step.sync()  # kills just issued may finish a killing phase only on the next step
    return _plan(step, create, problems, wake)


def _replica_rows(step: _Step) -> tuple[list[dict[str, Any]], dict[str, R]]:
    rows: list[dict[str, Any]] = []
    phases: dict[str, R] = {}
    seen: set[str] = set()
    for p in sorted(step.obs.pods, key=lambda p: (p.task, p.index)):
        if p.version < step.version and p.finished:
            continue
        phase = tables.replica_phase(p)
        note = step.replica_notes.get(p.name)
        if p.name in step.kill:
            phase = note[0] if note else R.TERMINATING
        seen.add(p.name)
        phases[p.name] = phase
        row: dict[str, Any] = {"name": p.name, "task": p.task, "index": p.index, "phase": phase}
        if p.node:
            row["node"] = p.node
        if p.restarts:
            row["restarts"] = p.restarts
        if p.exit_code is not None:
            row["exitCode"] = p.exit_code
        if note and p.name in step.kill:
            row["reason"] = note[1]
        rows.append(row)
    for name, (phase, reason) in step.replica_notes.items():
        if name not in seen:
            gone = next((g for g in step.obs.gone if g.name == name), None)
            phases[name] = phase
            if gone is not None:
                rows.append(
                    {
                        "name": name,
                        "task": gone.task,
                        "index": gone.index,
                        "phase": phase,
                        "reason": reason,
                    }
                )
    return rows, phases


def _conditions(
    step: _Step, problems: Mapping[str, tuple[str, str]]
) -> list[tuple[str, str, str, str]]:
    """(type, status, reason, message) of every condition the job should show."""
    out: list[tuple[str, str, str, str]] = []
    by_type: dict[str, list[tuple[str, str]]] = {}
    for reason, (ctype, message) in sorted(problems.items()):
        by_type.setdefault(ctype, []).append((reason, message))
    if "Valid" not in by_type:
        out.append(("Valid", "True", "Valid", ""))
    for ctype, items in by_type.items():
        out.append((ctype, "False", items[0][0], "; ".join(m for _, m in items)))
    suspended = step.job.suspend and step.phase in (J.ABORTING, J.ABORTED)
    out.append(
        ("Suspended", "True" if suspended else "False", SUSPENDED if suspended else "Active", "")
    )
    group = step.obs.group
    role = group.preemption_role if group is not None else ""
    for ctype in ("Privileged", "WillEvict"):
        if role == ctype and group is not None:
            peers = ", ".join(group.preemption_peers)
            message = f"deadline {group.preemption_deadline}" + (f"; {peers}" if peers else "")
            out.append((ctype, "True", "DelayedPreemption", message))
        elif ctype in step.memory.conditions:
            out.append((ctype, "False", "PreemptionOver", ""))
    return out


def _plan(
    step: _Step,
    create: list[tuple[TaskShape, int]],
    problems: Mapping[str, Any],
    wake: float | None,
) -> Plan:
    job, memory, now = step.job, step.memory, step.now
    big = job.max_replicas > SMALL_JOB
    # Task phases after this step's decisions (restart targets, kills) for the status.
    task_phases = step.task_phases()
    tasks_wire: list[dict[str, Any]] = []
    for task in job.tasks:
        facts = step.task_facts(task)
        phase = task_phases[task.name]
        before = memory.tasks.get(task.name)
        if phase != before:
            step.changes.append(
                (Lv.TASK, task.name, before.value if before else None, phase.value, "", "")
            )
        tasks_wire.append(
            {
                "name": task.name,
                "phase": phase.value,
                "replicas": task.replicas,
                "minAvailable": task.min_available,
                "pending": facts.pending,
                "running": facts.running,
                "succeeded": facts.succeeded,
                "failed": facts.failed,
            }
        )
    rows, replica_phases = _replica_rows(step)
    for name, rphase in replica_phases.items():
        rbefore = memory.replicas.get(name)
        if rphase != rbefore and (not big or rphase in _LOUD_REPLICA):
            note = step.replica_notes.get(name, (rphase, ""))[1]
            step.changes.append(
                (Lv.REPLICA, name, rbefore.value if rbefore else None, rphase.value, note, "")
            )

    conditions = _conditions(step, problems)
    cond_wire: list[dict[str, Any]] = []
    cond_memory: dict[str, tuple[str, str, str, str]] = {}
    for ctype, cstatus, reason, message in conditions:
        old = memory.conditions.get(ctype)
        changed = old is None or old[0] != cstatus
        stamp = step.time if changed or not old else old[3]
        cond_memory[ctype] = (cstatus, reason, message, stamp)
        cond_wire.append(
            {
                "type": ctype,
                "status": cstatus,
                "reason": reason,
                "message": message,
                "lastTransitionTime": stamp,
                "observedGeneration": job.generation,
            }
        )
        if ctype in _PREEMPTION and changed and (cstatus == "True" or old is not None):
            # Delayed preemption is a transition hooks subscribe to (a platform checkpoints).
            ends = (step.phase.value, ctype) if cstatus == "True" else (ctype, step.phase.value)
            step.changes.append((Lv.JOB, job.name, ends[0], ends[1], reason, message))
        elif (
            cstatus == "False"
            and ctype == "Valid"
            and (old is None or old[1:3] != (reason, message))
        ):
            step.events.append(Event("Warning", reason, message))

    log, added = memory.log.append(step.changes, step.time, hooks=step.obs.hooks)
    for rec in added:
        kind = "Warning" if rec.to in _WARNING_TARGETS else "Normal"
        subject = {Lv.JOB.value: "job", Lv.TASK.value: "task", Lv.REPLICA.value: "pod"}[
            rec.level.value
        ]
        text = f"#{rec.seq} {subject} {rec.name}: {rec.from_ or '-'} -> {rec.to}"
        if rec.reason:
            text += f" ({rec.reason})"
        if rec.message:
            text += f": {rec.message}"
        step.events.append(Event(kind, f"{rec.level.value}{rec.to}", text, transition=True))

    counts = _count(p for p in step.obs.pods if p.version >= step.version)
    shown, omitted = bound_replica_rows(rows)
    requeue = wake
    delete_job = False
    finished_at = _seconds(step.since) if step.phase in tables.TERMINAL else None
    if (
        finished_at is not None
        and step.phase != J.ABORTED
        and job.ttl_seconds_after_finished is not None
    ):
        due = finished_at + job.ttl_seconds_after_finished
        if now >= due:
            delete_job = True
        else:
            requeue = min(requeue or due - now, due - now)

    group = step.obs.group
    release_group = (
        step.phase in tables.TERMINAL
        and group is not None
        and (
            group.phase in WAITING_GROUP_PHASES
            or (group.phase not in FINISHED_GROUP_PHASES and not step.obs.pods)
        )
        and not any(p.alive for p in step.obs.pods)
        and not step.kill
    )
    status: dict[str, Any] = {
        "phase": step.phase.value,
        "reason": step.reason,
        "message": step.message,
        "lastTransitionTime": step.since or step.time,
        "minAvailable": job.min_available,
        "maxReplicas": job.max_replicas,
        **{name: counts[name] for name in COUNTS},
        "retryCount": step.retries,
        "version": step.version,
        "podGroup": group_name(job),
        "tasks": tasks_wire,
        "replicas": shown,
        "replicasOmitted": omitted,
        "transitions": [t.wire() for t in log.entries],
        "transitionSeq": log.seq,
        "transitionsDropped": log.dropped,
        "conditions": cond_wire,
        "delayedActions": [d.wire() for d in sorted(step.delayed.values(), key=lambda d: d.due)][
            :MAX_DELAYED
        ],
        "observedGeneration": job.generation,
    }
    next_memory = replace(
        memory,
        phase=step.phase,
        reason=step.reason,
        message=step.message,
        since=status["lastTransitionTime"],
        version=step.version,
        retry_count=step.retries,
        tasks=MappingProxyType(task_phases),
        replicas=MappingProxyType(replica_phases),
        log=log,
        group_phase=group.phase if group is not None else memory.group_phase,
        conditions=MappingProxyType(cond_memory),
        delayed=tuple(step.delayed.values()),
    )
    return Plan(
        memory=next_memory,
        status=status,
        create=create,
        delete=list(step.kill.values()),
        transitions=added,
        events=step.events,
        requeue_after=requeue,
        delete_job=delete_job,
        release_group=release_group,
    )
