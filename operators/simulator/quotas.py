"""Quota behaviour on the Philly trace: queues with guarantees sharing one cluster.

The Philly job list (``../shared/traces/philly/philly_jobs.csv``) has no virtual-cluster or
user field, so the jobs are split among a few queues by a seeded draw with fixed shares, and
the queues get guarantees that do not match those shares: some queues want more than they are
guaranteed (they borrow), others less (they lend, and reclaim when their work arrives). A window
of the trace is replayed (``replay.Replay``) on a Clos cluster through the core's defaults
(enqueue, allocate, preempt, reclaim, backfill).

Per queue, from the replay:

* queueing delay (average, p95) of its jobs: arrival to the start of the run that completed;
* GPU-hours used, and the borrowed share: GPU-hours held above its guarantee / GPU-hours held;
* guarantee owed: simulated time during which one of its jobs waits although the queue's
  running work plus that job stays within its guarantee (room the quota promises but the queue
  does not get; gang granularity is accounted for: a job larger than the guarantee's headroom
  is not owed); its share of the replay's span;
* preemptions suffered: evictions of its running jobs, and the GPU-hours of work they lost.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from operators.scheduler.session import SessionConfig
from operators.scheduler.snapshot import GPU, ROOT_QUEUE, Queue
from operators.scheduler.usage import UsageLedger, UsageParams
from operators.simulator import replay

if TYPE_CHECKING:
    from collections.abc import Sequence

    from operators.scheduler.snapshot import Node


@dataclass(frozen=True, slots=True)
class QueuePlan:
    name: str
    share: float  # of the jobs (the split)
    guarantee: int  # GPUs


# Shares of the jobs vs guarantees (GPUs) on the default 256-GPU cluster: team-a brings 40% of
# the jobs on a 12.5% guarantee (a borrower), team-d 10% of the jobs on 37.5% (a lender).
DEFAULT_PLAN = (
    QueuePlan("team-a", 0.4, 32),
    QueuePlan("team-b", 0.3, 64),
    QueuePlan("team-c", 0.2, 64),
    QueuePlan("team-d", 0.1, 96),
)
DEFAULT_CLOS = (1, 4, 8)  # 1 aggregation switch x 4 ToRs x 8 nodes x 8 GPUs = 256 GPUs
DAY = 86_400.0
DEFAULT_WINDOW = (88 * DAY, 89 * DAY)  # one busy day of the trace (about 750 jobs)


@dataclass(frozen=True, slots=True)
class Variant:
    """How the queues are run: the session config and, with ``fair_share_k`` > 0, time-based
    fair share on the root (usage accrued between sessions with ``usage``)."""

    config: SessionConfig
    fair_share_k: float = 0.0
    usage: UsageParams = field(default_factory=UsageParams)


def queues(plan: Sequence[QueuePlan], fair_share_k: float = 0.0) -> tuple[Queue, ...]:
    teams = [Queue(name=q.name, guarantee={GPU: q.guarantee}) for q in plan]
    if fair_share_k <= 0:
        return tuple(teams)
    return (Queue(ROOT_QUEUE, parent=None, reclaimable=False, usage_k=fair_share_k), *teams)


def split(
    jobs: Sequence[replay.TraceJob],
    plan: Sequence[QueuePlan],
    seed: int = 42,
    window: tuple[float, float] | None = None,
) -> list[replay.TraceJob]:
    """The jobs arriving in ``window`` (shifted to start at 0), each given a queue drawn with
    the plan's shares."""
    start, end = window if window is not None else (float("-inf"), float("inf"))
    chosen = [j for j in jobs if start <= j.arrival < end]
    offset = start if window is not None else 0.0
    shares = np.asarray([q.share for q in plan], dtype=np.float64)
    draws = np.random.default_rng(seed).choice(len(plan), size=len(chosen), p=shares / shares.sum())
    return [
        replay.TraceJob(j.uid, j.arrival - offset, j.gpus, j.duration, plan[int(k)].name)
        for j, k in zip(chosen, draws, strict=True)
    ]


@dataclass(frozen=True, slots=True)
class QueueStats:
    queue: str
    guarantee: int
    jobs: int
    finished: int
    avg_wait: float  # seconds
    p95_wait: float
    gpu_hours: float
    borrowed_share: float  # % of its GPU-hours held above its guarantee
    owed_hours: float  # simulated hours with a job waiting that its guarantee has room for
    owed_share: float  # % of the replay's span
    preemptions: int
    lost_gpu_hours: float


def queue_stats(
    sim: replay.Replay, records: Sequence[replay.JobRecord], plan: Sequence[QueuePlan]
) -> list[QueueStats]:
    samples = sim.queue_timeline
    span = samples[-1].time - samples[0].time if len(samples) > 1 else 0.0
    out = []
    for q in plan:
        held_h = borrowed_h = owed = 0.0
        for here, after in itertools.pairwise(samples):
            dt = after.time - here.time
            held = here.held.get(q.name, 0)
            held_h += held * dt
            borrowed_h += max(held - q.guarantee, 0) * dt
            small = here.smallest_waiting.get(q.name)
            if small is not None and held + small <= q.guarantee:
                owed += dt
        mine = [r for r in records if r.job.queue == q.name]
        done = np.asarray([r.wait for r in mine if r.end is not None], dtype=np.float64)
        out.append(
            QueueStats(
                queue=q.name,
                guarantee=q.guarantee,
                jobs=len(mine),
                finished=len(done),
                avg_wait=float(done.mean()) if len(done) else float("nan"),
                p95_wait=float(np.percentile(done, 95)) if len(done) else float("nan"),
                gpu_hours=held_h / 3600,
                borrowed_share=100.0 * borrowed_h / held_h if held_h else 0.0,
                owed_hours=owed / 3600,
                owed_share=100.0 * owed / span if span else 0.0,
                preemptions=sum(r.restarts for r in mine),
                lost_gpu_hours=sum(r.lost for r in mine) / 3600,
            )
        )
    return out


def run(
    nodes: tuple[Node, ...],
    jobs: Sequence[replay.TraceJob],
    plan: Sequence[QueuePlan],
    variant: Variant,
) -> tuple[list[QueueStats], replay.Replay]:
    sim = replay.Replay(
        nodes,
        jobs,
        variant.config,
        queues=queues(plan, variant.fair_share_k),
        usage=UsageLedger(variant.usage) if variant.fair_share_k > 0 else None,
    )
    records = sim.run()
    return queue_stats(sim, records, plan), sim
