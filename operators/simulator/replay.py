"""Jobs replayed in simulated time through the scheduler core: arrivals, gangs, completions.

A job is one PodGroup whose pods hold whole nodes' worth of GPUs (8 per pod for jobs larger
than a node, the remainder in one smaller pod) and whose gang minimum is all of its pods. At
every event time - arrivals and completions, coalesced per timestamp - the replay builds a
snapshot of the jobs still present, runs one session, and carries the decisions forward the
way the runtime and kubelets would: a bind starts the pod at once; a job runs from the moment
its whole gang is bound, for its trace duration, and then leaves. Evicted pods go back to
pending (the job restarts from the beginning when its gang is bound again), and the next
session runs at once.
"""

from __future__ import annotations

import csv
import dataclasses
import heapq
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from operators.scheduler import run_session
from operators.scheduler.decisions import Bind, Evict, EvictReason, Nominate, SetGroupPhase
from operators.scheduler.resources import gpus_held
from operators.scheduler.snapshot import (
    CPU,
    GPU,
    HOSTNAME_LABEL,
    MEMORY,
    GroupPhase,
    NetworkTopology,
    Node,
    PodGroup,
    Snapshot,
    Task,
    TaskStatus,
    Topology,
    TopologyLevel,
    TopologyMode,
)

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

    from operators.scheduler.session import SessionConfig
    from operators.scheduler.snapshot import Queue
    from operators.scheduler.usage import UsageLedger

GPUS_PER_NODE = 8
# Evicted pods leave at once here; the live scheduler's next cycle follows their deletion at
# once too, so a session that evicted is followed by another at the same time (at most this
# many in a row), in which the preemptor takes the freed room.
FOLLOW_UP_SESSIONS = 4
CORE_LABEL = "topology.sluice.dev/core"
AGG_LABEL = "topology.sluice.dev/spine"
TOR_LABEL = "topology.sluice.dev/tor"
# Node size of the replayed hosts besides their GPUs (generous: GPUs are what is scarce).
NODE_CPU_MILLI = 128_000
NODE_MEMORY = 2**40
POD_CPU_MILLI_PER_GPU = 8_000
POD_MEMORY_PER_GPU = 64 * 2**30

CLOS = Topology(
    name="clos",
    levels=(
        TopologyLevel("agg", AGG_LABEL),
        TopologyLevel("tor", TOR_LABEL),
        TopologyLevel("hostname", HOSTNAME_LABEL),
    ),
)


@dataclass(frozen=True, slots=True)
class TraceJob:
    uid: str
    arrival: float  # seconds
    gpus: int
    duration: float  # seconds of running once the whole gang is bound
    queue: str = "default"


@dataclass(slots=True)
class JobRecord:
    job: TraceJob
    start: float | None = None
    end: float | None = None
    nodes: tuple[str, ...] = ()
    restarts: int = 0  # evictions of the running job (each restarts it from the beginning)
    lost: float = 0.0  # GPU-seconds of work thrown away by those evictions

    @property
    def wait(self) -> float:
        return (self.start if self.start is not None else float("nan")) - self.job.arrival

    @property
    def jct(self) -> float:
        return (self.end if self.end is not None else float("nan")) - self.job.arrival


def gpu_node(name: str, labels: dict[str, str], gpus: int = GPUS_PER_NODE) -> Node:
    return Node(
        name=name,
        allocatable={CPU: NODE_CPU_MILLI, MEMORY: NODE_MEMORY, GPU: gpus},
        labels={**labels, HOSTNAME_LABEL: name},
    )


def clos_nodes(aggs: int, tors: int, per_tor: int) -> tuple[Node, ...]:
    """``aggs`` aggregation switches x ``tors`` ToRs each x ``per_tor`` 8-GPU nodes."""
    return tuple(
        gpu_node(f"a{a}-t{t}-n{n}", {AGG_LABEL: f"a{a}", TOR_LABEL: f"a{a}-t{t}"})
        for a in range(aggs)
        for t in range(tors)
        for n in range(per_tor)
    )


def load_lingjun_hosts(path: Path) -> tuple[Node, ...]:
    """The hosts of Lingjun's topo.csv, 8 GPUs each, labelled by core, aggregation and ToR
    switch (ToR names repeat under different aggregation switches, so they are qualified)."""
    out = []
    with path.open(newline="") as f:
        for i, row in enumerate(csv.DictReader(f)):
            core, agg, tor = row["DSW"], row["PSW"], row["ASW"]
            labels = {
                CORE_LABEL: core.lower(),
                AGG_LABEL: f"{core}-{agg}".lower(),
                TOR_LABEL: f"{core}-{agg}-{tor}".lower(),
            }
            out.append(gpu_node(f"lj-{i:04d}", labels))
    return tuple(out)


def load_jobs(path: Path, limit: int | None = None, compress: float = 1.0) -> list[TraceJob]:
    """The RFold job format: ``#job id,arrival time (sec),topology,shape,size,duration (sec)``
    and an optional 7th column, the queue. ``compress`` divides arrival times (a busier
    cluster from the same jobs); durations are kept."""
    out: list[TraceJob] = []
    with path.open(newline="") as f:
        rows = csv.reader(f)
        next(rows, None)
        for row in rows:
            if limit is not None and len(out) >= limit:
                break
            queue = row[6] if len(row) > 6 and row[6] else "default"
            out.append(
                TraceJob(
                    f"j{int(row[0]):06d}",
                    float(row[1]) / compress,
                    int(row[4]),
                    float(row[5]),
                    queue,
                )
            )
    return out


def pod_sizes(gpus: int, per_node: int = GPUS_PER_NODE) -> list[int]:
    """GPUs per pod: one pod up to a node, else whole nodes plus one pod for the rest."""
    if gpus <= per_node:
        return [gpus]
    return [per_node] * (gpus // per_node) + ([gpus % per_node] if gpus % per_node else [])


GroupShaper = Callable[[PodGroup], PodGroup]


def soft_topology(pg: PodGroup) -> PodGroup:
    """Ask for the finest network domain that holds the gang, falling back to anywhere."""
    return dataclasses.replace(pg, network_topology=NetworkTopology(TopologyMode.SOFT, ""))


def tor_first(pg: PodGroup, tor_nodes: int = GPUS_PER_NODE) -> PodGroup:
    """Gangs of at most ``tor_nodes`` pods (what the largest ToR holds) insist on one ToR and
    wait for one; larger gangs ask softly for the finest domain that holds them."""
    if 1 < pg.min_member <= tor_nodes:
        return dataclasses.replace(pg, network_topology=NetworkTopology(TopologyMode.HARD, "tor"))
    return soft_topology(pg)


def tor_for(seconds: float, tor_nodes: int = GPUS_PER_NODE) -> GroupShaper:
    """Like :func:`tor_first`, but a gang waits for one ToR at most ``seconds`` after its
    arrival (``softAfterSeconds``), then takes the finest domain that holds it, else anywhere."""
    hard = NetworkTopology(TopologyMode.HARD, "tor", soft_after=seconds)

    def shape(pg: PodGroup) -> PodGroup:
        if 1 < pg.min_member <= tor_nodes:
            return dataclasses.replace(pg, network_topology=hard)
        return soft_topology(pg)

    return shape


def hard_topology(pg: PodGroup) -> PodGroup:
    """Insist on one aggregation switch (the coarsest tier): wait rather than spread wider."""
    return dataclasses.replace(pg, network_topology=NetworkTopology(TopologyMode.HARD, ""))


def as_is(pg: PodGroup) -> PodGroup:
    return pg


@dataclass(frozen=True, slots=True)
class QueueSample:
    time: float
    held: dict[str, int]  # queue -> GPUs held by its bound pods
    smallest_waiting: dict[str, int]  # queue -> GPUs of its smallest job not started


@dataclass(slots=True)
class Replay:
    nodes: tuple[Node, ...]
    jobs: Sequence[TraceJob]
    config: SessionConfig
    shape: GroupShaper = as_is
    topology: Topology | None = CLOS
    queues: tuple[Queue, ...] = ()
    # Time-based fair share: each queue's usage accrued between sessions, as the live scheduler
    # does (its decayed total goes into every snapshot); None: no usage (plain weights).
    usage: UsageLedger | None = None
    groups: dict[str, PodGroup] = field(default_factory=dict)
    tasks: dict[str, dict[str, Task]] = field(default_factory=dict)
    records: dict[str, JobRecord] = field(default_factory=dict)
    sessions: int = 0
    evictions: int = 0
    # (time, GPUs held by pods, jobs waiting) after each session: the utilisation plot.
    timeline: list[tuple[float, int, int]] = field(default_factory=list)
    # With queues: after each session, per queue the GPUs its pods hold and its smallest
    # waiting job's GPUs (quota metrics: guarantee owed, borrowed share).
    queue_timeline: list[QueueSample] = field(default_factory=list)
    # Jobs still waiting when no event is left (nothing will change any more): why, from the
    # last session's explanation, and how many of their pods were bound.
    unstarted: dict[str, str] = field(default_factory=dict)
    _explanations: dict[str, str] = field(default_factory=dict)
    _wakes: list[tuple[float, str]] = field(default_factory=list)  # (soft_at, group uid)

    def run(self) -> list[JobRecord]:
        arrivals = sorted(self.jobs, key=lambda j: (j.arrival, j.uid))
        ends: list[tuple[float, str]] = []
        index = 0
        while index < len(arrivals) or ends or self.groups:
            upcoming = [arrivals[index].arrival] if index < len(arrivals) else []
            if ends:
                upcoming.append(ends[0][0])
            # A waiting hard gang whose soft_after runs out needs a session then, as the live
            # scheduler's loop wakes for it; one that started meanwhile does not.
            while self._wakes and self.records[self._wakes[0][1]].start is not None:
                heapq.heappop(self._wakes)
            if self._wakes:
                upcoming.append(self._wakes[0][0])
            if not upcoming:
                self._note_unstarted()
                break  # jobs left that the last session did not start
            now = min(upcoming)
            while ends and ends[0][0] <= now:
                end, uid = heapq.heappop(ends)
                self._finish(uid, end)
            while index < len(arrivals) and arrivals[index].arrival <= now:
                self._arrive(arrivals[index])
                index += 1
            while self._wakes and self._wakes[0][0] <= now:
                heapq.heappop(self._wakes)
            for _ in range(FOLLOW_UP_SESSIONS + 1):
                evicted = self.evictions
                for uid, end in self._session(now):
                    heapq.heappush(ends, (end, uid))
                if self.evictions == evicted:
                    break
        return [self.records[j.uid] for j in self.jobs]

    def _arrive(self, job: TraceJob) -> None:
        pg = self.shape(
            PodGroup(
                uid=job.uid,
                namespace="trace",
                name=job.uid,
                queue=job.queue,
                min_member=len(pod_sizes(job.gpus)),
                created=job.arrival,
            )
        )
        self.groups[job.uid] = pg
        soft_at = pg.network_topology.soft_at(pg.created) if pg.network_topology else None
        if soft_at is not None:
            heapq.heappush(self._wakes, (soft_at, job.uid))
        self.tasks[job.uid] = {
            f"{job.uid}-{i}": Task(
                uid=f"{job.uid}-{i}",
                group=job.uid,
                namespace="trace",
                name=f"{job.uid}-{i}",
                index=i,
                requests={
                    CPU: POD_CPU_MILLI_PER_GPU * size,
                    MEMORY: POD_MEMORY_PER_GPU * size,
                    GPU: size,
                },
            )
            for i, size in enumerate(pod_sizes(job.gpus))
        }
        self.records[job.uid] = JobRecord(job)

    def _finish(self, uid: str, end: float) -> None:
        record = self.records[uid]
        if record.end != end or uid not in self.groups:
            # The end of a run that was evicted (and perhaps restarted since), or a second end
            # event of one run: a job moved (evicted and bound again) at the instant it started
            # gets the same end pushed twice.
            return
        del self.groups[uid]
        del self.tasks[uid]

    def _session(self, now: float) -> list[tuple[str, float]]:
        queues = self.queues
        if self.usage is not None:
            usage = self.usage.advance(now, {q.name: () for q in queues})
            queues = tuple(dataclasses.replace(q, usage=usage.get(q.name, 0.0)) for q in queues)
        snap = Snapshot(
            now=now,
            nodes=self.nodes,
            queues=queues,
            groups=tuple(self.groups.values()),
            tasks=tuple(t for tasks in self.tasks.values() for t in tasks.values()),
            topology=self.topology,
        )
        result = run_session(snap, self.config)
        self.sessions += 1
        if self.usage is not None:
            self.usage.hold({name: gpus_held(q.allocated) for name, q in result.queues.items()})
        self._explanations = {uid: e.message for uid, e in result.explanations.items()}
        touched: set[str] = set()
        moved_now = {d.group for d in result.decisions if isinstance(d, Evict)}
        for d in result.decisions:
            if isinstance(d, Evict):
                self._evict(d, now)
                if d.reason is EvictReason.CONSOLIDATED:  # the live `Consolidated` condition
                    self.groups[d.group] = dataclasses.replace(
                        self.groups[d.group], consolidated_at=now, consolidated_to=d.moved_to
                    )
            elif isinstance(d, Bind):
                tasks = self.tasks[d.group]
                tasks[d.task] = dataclasses.replace(
                    tasks[d.task],
                    status=TaskStatus.BOUND,
                    node=d.node,
                    gpu_ids=d.gpu_ids,
                    nominated_node=None,
                )
                touched.add(d.group)
                if d.group not in moved_now and self.groups[d.group].consolidated_to:
                    # Placed again: the live status writer ends its move (records.placed_again).
                    self.groups[d.group] = dataclasses.replace(
                        self.groups[d.group], consolidated_to=()
                    )
            elif isinstance(d, Nominate):
                tasks = self.tasks[d.group]
                tasks[d.task] = dataclasses.replace(tasks[d.task], nominated_node=d.node)
            elif isinstance(d, SetGroupPhase):
                self.groups[d.group] = dataclasses.replace(self.groups[d.group], phase=d.phase)
        started = []
        for uid in touched:
            tasks = self.tasks[uid]
            record = self.records[uid]
            if record.start is None and all(t.status == TaskStatus.BOUND for t in tasks.values()):
                record.start = now
                record.end = now + record.job.duration
                record.nodes = tuple(sorted({t.node for t in tasks.values() if t.node}))
                self.groups[uid] = dataclasses.replace(self.groups[uid], phase=GroupPhase.RUNNING)
                started.append((uid, record.end))
        held = sum(
            int(t.requests.get(GPU, 0))
            for tasks in self.tasks.values()
            for t in tasks.values()
            if t.status == TaskStatus.BOUND
        )
        waiting = sum(1 for uid in self.groups if self.records[uid].start is None)
        self.timeline.append((now, held, waiting))
        if self.queues:
            self.queue_timeline.append(self._queue_sample(now))
        return started

    def _queue_sample(self, now: float) -> QueueSample:
        held: dict[str, int] = {}
        smallest: dict[str, int] = {}
        for uid, tasks in self.tasks.items():
            job = self.records[uid].job
            gpus = sum(
                int(t.requests.get(GPU, 0)) for t in tasks.values() if t.status == TaskStatus.BOUND
            )
            held[job.queue] = held.get(job.queue, 0) + gpus
            if self.records[uid].start is None:
                smallest[job.queue] = min(smallest.get(job.queue, job.gpus), job.gpus)
        return QueueSample(now, held, smallest)

    def _note_unstarted(self) -> None:
        for uid in self.groups:
            if self.records[uid].start is None:
                tasks = self.tasks[uid].values()
                bound = sum(1 for t in tasks if t.status == TaskStatus.BOUND)
                why = self._explanations.get(uid, "no explanation")
                self.unstarted[uid] = f"{bound}/{len(tasks)} pods bound; {why}"

    def _evict(self, d: Evict, now: float) -> None:
        tasks = self.tasks[d.group]
        for uid in d.tasks:
            tasks[uid] = dataclasses.replace(
                tasks[uid], status=TaskStatus.PENDING, node=None, gpu_ids=()
            )
        record = self.records[d.group]
        if record.start is not None:
            record.restarts += 1
            record.lost += record.job.gpus * (now - record.start)
            record.start = record.end = None
            record.nodes = ()
        self.evictions += 1


@dataclass(frozen=True, slots=True)
class ReplayStats:
    """What an operator reads off a replay (times in seconds)."""

    jobs: int
    finished: int
    avg_jct: float
    p95_jct: float
    avg_wait: float
    p95_wait: float
    utilisation: float  # allocated GPU-time / (capacity x makespan), %
    multi_node: int  # jobs spanning more than one node
    tor_fit: int  # of those, jobs small enough for the largest ToR
    in_one_tor: float  # % of tor_fit jobs placed inside one ToR
    in_one_agg: float  # % of multi-node jobs inside one aggregation switch
    tors_mean: float  # ToRs per multi-node job
    tors_p95: float
    restarts: int


def summarise(records: Sequence[JobRecord], nodes: Sequence[Node]) -> ReplayStats:
    import numpy as np

    tor = {n.name: n.labels.get(TOR_LABEL, n.name) for n in nodes}
    agg = {n.name: n.labels.get(AGG_LABEL, n.name) for n in nodes}
    per_tor: dict[str, int] = {}
    for n in nodes:
        per_tor[tor[n.name]] = per_tor.get(tor[n.name], 0) + n.gpu_count
    largest_tor = max(per_tor.values(), default=0)
    done = [r for r in records if r.end is not None]
    jct = np.asarray([r.jct for r in done])
    wait = np.asarray([r.wait for r in done])
    multi = [r for r in done if len(r.nodes) > 1]
    fit = [r for r in multi if r.job.gpus <= largest_tor]
    tors = np.asarray([len({tor[n] for n in r.nodes}) for r in multi])
    capacity = sum(n.gpu_count for n in nodes)
    start = min((r.job.arrival for r in records), default=0.0)
    end = max((r.end for r in done if r.end is not None), default=start)
    busy = sum(r.job.gpus * r.job.duration for r in done)
    span = max(end - start, 1e-9)

    def pct(part: int, whole: int) -> float:
        return 100.0 * part / whole if whole else float("nan")

    return ReplayStats(
        jobs=len(records),
        finished=len(done),
        avg_jct=float(jct.mean()) if len(jct) else float("nan"),
        p95_jct=float(np.percentile(jct, 95)) if len(jct) else float("nan"),
        avg_wait=float(wait.mean()) if len(wait) else float("nan"),
        p95_wait=float(np.percentile(wait, 95)) if len(wait) else float("nan"),
        utilisation=100.0 * busy / (capacity * span) if capacity else float("nan"),
        multi_node=len(multi),
        tor_fit=len(fit),
        in_one_tor=pct(sum(1 for r in fit if len({tor[n] for n in r.nodes}) == 1), len(fit)),
        in_one_agg=pct(sum(1 for r in multi if len({agg[n] for n in r.nodes}) == 1), len(multi)),
        tors_mean=float(tors.mean()) if len(tors) else float("nan"),
        tors_p95=float(np.percentile(tors, 95)) if len(tors) else float("nan"),
        restarts=sum(r.restarts for r in records),
    )
