"""Scheduling speed on the local cluster, side by side: ``python -m bench.live`` (``make bench``).

Every scenario runs on the same cluster, in the same run, with each contestant's order rotated
round by round so that the machine's moods fall on all of them alike:

* burst: N pre-created pending plain pods, then the contestant starts: the bare binding loop
  (lists the pods, POSTs Bindings round-robin: the API server's ceiling), kube-scheduler (client
  QPS/burst lifted to 5000, see operators/devcluster/cluster.py) and Sluice;
* gangs: the same N pods as PodGroups of the given shapes (Sluice only: neither yardstick gangs);
* steady: a full cluster (every node filled by running Sluice pods, a backlog pending that does
  not fit); one running pod is deleted and the session that follows is timed from Sluice's
  metrics, as is how many sessions run while nothing changes;
* arrival: Sluice running while pods arrive at a fixed rate in mixed gangs (1, 2, 4, 8 pods);
  creation -> bound latency per pod, p50 and p99; the pods run to the end of the run, or
  `--lifetime` seconds each (then the cluster levels off);
* peak RSS of the Sluice process (VmHWM) over its runs.

Times come from one watch on the bench namespace (when each pod is first seen bound), the same
observer for every contestant. Rate = 80% of the pods / time from 10% to 90% bound. Figures are
never asserted anywhere: the smoke test (e2e/test_bench_smoke.py) runs this code at tiny sizes
only so that it cannot rot.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import dataclasses
import datetime
import os
import pathlib
import re
import signal
import statistics
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, Self

import aiohttp

from bench.bind import (
    IDLE_SCHEDULER,
    NAMESPACE,
    bare_loop,
    delete_pods,
    ensure_namespace,
    free_port,
    gather_bounded,
    pod_body,
)
from bench.clusters import bench_cluster, bench_parser
from operators.api.scheduling import PodGroup
from operators.runtime import kubeconfig
from operators.runtime.client import ApiError, JsonDict, KubeClient
from operators.runtime.informer import Informer, WatchedKind
from operators.runtime.settings import SchedulerSettings

PODS = f"/api/v1/namespaces/{NAMESPACE}/pods"
GROUPS = PodGroup.api_path(NAMESPACE)
GROUP_ANNOTATION = "scheduling.sluice.dev/pod-group"
COMPLETE_AFTER = "sluice.dev/complete-after"  # kwok: the pod succeeds this long after it runs
GROUP_TTL = 5.0  # arrival --lifetime: a finished gang's PodGroup is deleted this much later


async def create_retrying(client: KubeClient, path: str, body: JsonDict) -> None:
    """POST, trying again on the answers an overloaded API server gives (429, 5xx such as
    "resource quota evaluation timed out", or none within the request timeout): a 10,000-pod
    run on a busy machine must not die on one of them. An object that did get created (or a
    Binding that did land) answers 409 on the retry: done."""
    for attempt in range(6):
        try:
            await client.post(path, body)
            return
        except ApiError as err:
            if err.status == 409 and attempt:
                return
            if (err.status != 429 and err.status < 500) or attempt == 5:
                raise
        except (TimeoutError, aiohttp.ClientError):
            if attempt == 5:
                raise
        await asyncio.sleep(0.5 * 2**attempt)


# ------------------------------------------------------------------------------------------------
# observing
# ------------------------------------------------------------------------------------------------


class BoundTimes:
    """When each bench pod was first seen bound, from a list+watch of the bench namespace."""

    def __init__(self, client: KubeClient) -> None:
        self.at: dict[str, float] = {}
        self.informer: Informer[tuple[str, bool]] = Informer(
            client,
            WatchedKind("bench-pods", PODS, {"labelSelector": "app=bench-bind"}),
            lambda obj: (str(obj["metadata"]["name"]), bool(obj["spec"].get("nodeName"))),
            self._seen,
        )
        self._task: asyncio.Task[None] | None = None

    def _seen(self, kind: str, key: Any, new: tuple[str, bool] | None, old: Any) -> None:
        if new is not None and new[1] and new[0] not in self.at:
            self.at[new[0]] = time.monotonic()

    async def __aenter__(self) -> Self:
        self._task = asyncio.create_task(self.informer.run())
        await self.informer.synced.wait()
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def wait_for(self, names: set[str], within: float) -> None:
        deadline = time.monotonic() + within
        while not names <= self.at.keys():
            if time.monotonic() > deadline:
                missing = len(names - self.at.keys())
                raise RuntimeError(f"{missing} of {len(names)} pods not bound in {within:.0f}s")
            await asyncio.sleep(0.05)

    async def wait_count(self, n: int, within: float) -> None:
        """For pods named by a controller: until `n` bench pods have been seen bound."""
        deadline = time.monotonic() + within
        while len(self.at) < n:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{n - len(self.at)} of {n} pods not bound in {within:.0f}s")
            await asyncio.sleep(0.05)


@dataclasses.dataclass(frozen=True)
class Run:
    """One contestant on one set of pods; times in seconds from the contestant's start."""

    contestant: str
    pods: int
    first: float  # first pod bound
    done: float  # last pod bound
    rate: float  # pods/s between 10% and 90% bound
    ready: float | None = None  # Sluice: caches synced (/readyz) after start
    sessions: float | None = None  # Sluice: sessions run until every pod was bound (+ 1 s)
    status_writes: float | None = None  # Sluice: PodGroup status patches meanwhile


def summarize(
    contestant: str,
    started: float,
    times: list[float],
    ready: float | None,
    sessions: float | None = None,
    status_writes: float | None = None,
) -> Run:
    times = sorted(t - started for t in times)
    n = len(times)
    lo, hi = times[int(0.1 * (n - 1))], times[int(0.9 * (n - 1))]
    rate = 0.8 * n / (hi - lo) if hi > lo else float("inf")
    return Run(contestant, n, times[0], times[-1], rate, ready, sessions, status_writes)


# ------------------------------------------------------------------------------------------------
# contestants
# ------------------------------------------------------------------------------------------------


def metrics_text(port: int) -> str:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as resp:
            return str(resp.read().decode())
    except OSError:
        return ""


def metric(text: str, name: str, labels: str = "") -> float:
    match = re.search(rf"^{re.escape(name + labels)} (\S+)$", text, re.MULTILINE)
    return float(match.group(1)) if match else 0.0


def ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False


def peak_rss_mib(pid: int) -> float:
    with contextlib.suppress(OSError):
        for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return 0.0


@dataclasses.dataclass
class Sluice:
    """`python -m operators scheduler` as a child process, with its metrics port."""

    kubeconfig: str
    log: pathlib.Path
    concurrency: int
    source: str | None = None  # run from this source tree (a baseline); None: this one
    py_spy: str | None = None  # py-spy binary: sample the process (raw stacks into the log dir)
    port: int = 0
    proc: asyncio.subprocess.Process | None = None
    spy: asyncio.subprocess.Process | None = None
    started: float = 0.0
    peak_rss: float = 0.0

    async def __aenter__(self) -> Self:
        self.port = free_port()
        flags = {
            "kubeconfig": self.kubeconfig,
            "bind-concurrency": self.concurrency,
            "metrics-port": self.port,
            "metrics-host": "127.0.0.1",
        }
        cmd = [sys.executable, "-m", "operators", "scheduler", "--no-leader-election"]
        cmd += [f"--{k}={v}" for k, v in flags.items()]
        out = self.log.open("a")
        # `-m` puts the working directory first on sys.path: a baseline runs from its own tree.
        env = {**os.environ, "PYTHONPATH": self.source} if self.source else None
        self.started = time.monotonic()
        self.proc = await asyncio.create_subprocess_exec(
            *cmd, stdout=out, stderr=asyncio.subprocess.STDOUT, env=env, cwd=self.source
        )
        out.close()
        if self.py_spy:
            # Samples of every thread, idle ones too, to the end of the process: where a burst's
            # wall time went (per thread and function), not only its CPU time.
            stacks = self.log.with_name(f"py-spy-{self.proc.pid}.txt")
            self.spy = await asyncio.create_subprocess_exec(
                *[self.py_spy, "record", "--nonblocking", "--threads", "--idle", "-r", "50"],
                *["-f", "raw", "-o", str(stacks), "-p", str(self.proc.pid)],
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.DEVNULL,
            )
        return self

    async def ready_after(self, within: float = 300) -> float:
        while not ready(self.port):
            if self.proc is not None and self.proc.returncode is not None:
                raise RuntimeError(f"scheduler exited with {self.proc.returncode}; see {self.log}")
            if time.monotonic() - self.started > within:
                raise RuntimeError(f"scheduler not ready in {within}s; see {self.log}")
            await asyncio.sleep(0.05)
        return time.monotonic() - self.started

    def metrics(self) -> str:
        return metrics_text(self.port)

    async def __aexit__(self, *exc: object) -> None:
        proc = self.proc
        if proc is None or proc.returncode is not None:
            return
        self.peak_rss = peak_rss_mib(proc.pid)
        proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), 30)
        except TimeoutError:
            proc.kill()
            await proc.wait()
        if self.spy is not None:  # it writes its file once the process has gone
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.spy.wait(), 60)


# ------------------------------------------------------------------------------------------------
# scenarios
# ------------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Bench:
    client: KubeClient
    kubeconfig: str
    logs: pathlib.Path
    concurrency: int
    start_kube_scheduler: Callable[[], Any] | None  # None: kube-scheduler is left out
    stop_kube_scheduler: Callable[[], Any] | None
    patience: float = 900.0
    baseline: str | None = None  # source tree of contestant "sluice-baseline"
    py_spy: str | None = None  # sample every Sluice process with this py-spy binary
    settle: float = 1.0  # after a Sluice run's last binding, before its write count is read
    peak_rss: float = 0.0
    # Fresh pod names every time: the pod garbage collector acts on names from its (possibly
    # lagging) cache and would delete a new pod that reuses a force-deleted pod's name.
    tag: str = dataclasses.field(default_factory=lambda: uuid.uuid4().hex[:5])
    seq: int = 0
    created_at: dict[str, float] = dataclasses.field(default_factory=dict)  # POST answered

    async def create(
        self,
        prefix: str,
        sizes: list[int],
        scheduler: str,
        cpu: str = "100m",
        gangs: bool = False,
        complete_after: float = 0.0,
    ) -> list[str]:
        """Pods in groups of `sizes` (PodGroups when `gangs`); returns the pod names. With
        `complete_after`, kwok lets each pod succeed that many seconds after it runs."""
        self.seq += 1
        prefix = f"{prefix}-{self.tag}{self.seq}"
        names: list[str] = []
        bodies: list[JsonDict] = []
        if gangs:
            await gather_bounded(
                64,
                (
                    create_retrying(self.client, GROUPS, podgroup_body(f"{prefix}-g{g:05d}", size))
                    for g, size in enumerate(sizes)
                ),
            )
        for g, size in enumerate(sizes):
            group = f"{prefix}-g{g:05d}"
            for i in range(size):
                name = f"{group}-{i:05d}"
                names.append(name)
                annotations = {GROUP_ANNOTATION: group} if gangs else {}
                if complete_after:
                    annotations[COMPLETE_AFTER] = f"{complete_after:g}s"
                bodies.append(pod_body(name, scheduler, cpu=cpu, annotations=annotations))

        async def post(body: JsonDict) -> None:
            await create_retrying(self.client, PODS, body)
            self.created_at[body["metadata"]["name"]] = time.monotonic()

        await gather_bounded(64, (post(b) for b in bodies))
        return names

    async def clean(self) -> None:
        await delete_pods(self.client)
        with contextlib.suppress(Exception):
            await self.client.request("DELETE", GROUPS)

    async def one(self, contestant: str, sizes: list[int], gangs: bool = False) -> Run:
        scheduler = {"bare": IDLE_SCHEDULER, "kube-scheduler": "default-scheduler"}.get(
            contestant, "sluice"
        )
        names = await self.create(contestant[:4], sizes, scheduler, gangs=gangs)
        try:
            async with BoundTimes(self.client) as seen:
                started = time.monotonic()
                ready_at: float | None = None
                if contestant == "bare":
                    await bare_loop(self.client, self.concurrency)
                    await seen.wait_for(set(names), self.patience)
                elif contestant == "kube-scheduler":
                    assert self.start_kube_scheduler
                    assert self.stop_kube_scheduler
                    await asyncio.to_thread(self.start_kube_scheduler)
                    try:
                        await seen.wait_for(set(names), self.patience)
                    finally:
                        await asyncio.to_thread(self.stop_kube_scheduler)
                else:
                    source = self.baseline if contestant == "sluice-baseline" else None
                    async with self.sluice(source) as s:
                        started = s.started
                        ready_at = await s.ready_after()
                        await seen.wait_for(set(names), self.patience)
                        # Let its last writes land: the counts it holds back come when their
                        # interval runs out (the times above are taken already).
                        await asyncio.sleep(self.settle)
                        text = s.metrics()
                    self.peak_rss = max(self.peak_rss, s.peak_rss)
                    times = [seen.at[n] for n in names]
                    writes = metric(text, "sluice_podgroup_status_writes_total")
                    return summarize(contestant, started, times, ready_at, count(text), writes)
                return summarize(contestant, started, [seen.at[n] for n in names], ready_at)
        finally:
            await self.clean()

    def log(self) -> pathlib.Path:
        return self.logs / "sluice.log"

    def sluice(self, source: str | None = None) -> Sluice:
        return Sluice(self.kubeconfig, self.log(), self.concurrency, source, self.py_spy)

    async def steady(self, nodes: list[str], per_node: int, pending: int, quiet: float) -> Steady:
        """A full cluster: `per_node` running Sluice pods on each node, `pending` more that do
        not fit. Times Sluice's first session, counts sessions while nothing changes, then
        deletes one running pod and times the session that places one pending pod."""
        cpu_per_node = await node_cpu_milli(self.client)
        cpu = f"{cpu_per_node // per_node}m"
        running = await self.create("run", [1] * (len(nodes) * per_node), "sluice", cpu=cpu)
        await bare_loop(self.client, self.concurrency)  # place them evenly, no scheduler
        await self.create("pend", [1] * pending, "sluice", cpu=cpu)
        try:
            async with self.sluice() as s:
                await s.ready_after()
                first = await sessions_after(s, 0, self.patience)
                before = s.metrics()
                await asyncio.sleep(quiet)
                idle_sessions = count(s.metrics()) - count(before)
                base = count(s.metrics())
                await self.client.request(
                    "DELETE", f"{PODS}/{running[0]}", params={"gracePeriodSeconds": "0"}
                )
                after = await sessions_after(s, base, self.patience)
            self.peak_rss = max(self.peak_rss, s.peak_rss)
            return Steady(len(nodes), len(running), pending, first, idle_sessions, quiet, after)
        finally:
            await self.clean()

    @contextlib.asynccontextmanager
    async def scheduling(self, contestant: str, seen: BoundTimes) -> AsyncIterator[None]:
        """Sluice (caches synced) or kube-scheduler (a probe pod bound) scheduling for the
        duration of the block."""
        if contestant == "sluice":
            async with self.sluice() as s:
                await s.ready_after()
                yield
            self.peak_rss = max(self.peak_rss, s.peak_rss)
            return
        assert self.start_kube_scheduler
        assert self.stop_kube_scheduler
        await asyncio.to_thread(self.start_kube_scheduler)
        try:
            probe = await self.create("probe", [1], "default-scheduler")
            await seen.wait_for(set(probe), self.patience)
            yield
        finally:
            await asyncio.to_thread(self.stop_kube_scheduler)

    async def arrival(
        self, rate: float, seconds: float, lifetime: float = 0.0, contestant: str = "sluice"
    ) -> Arrival:
        """Sluice running while mixed gangs (1, 2, 4, 8 pods) arrive at `rate` pods/s. With a
        `lifetime`, each pod succeeds that long after it runs (kwok) and its PodGroup is
        deleted once all of them have (a finished job cleaned up; no podgroup operator runs
        here), so the cluster levels off at about rate x lifetime pods; without, every pod runs
        on and the cluster fills up for the whole run. `contestant` "kube-scheduler": the same
        pods in the same batches, without PodGroups (it does not gang), to kube-scheduler."""
        gangs = contestant == "sluice"
        scheduler = "sluice" if gangs else "default-scheduler"
        shapes = (1, 2, 4, 8)
        created: dict[str, float] = {}
        batches: collections.deque[list[str]] = collections.deque()  # pods, oldest first
        cleaners: set[asyncio.Task[Any]] = set()
        creating: set[asyncio.Task[None]] = set()

        async def arrive(sizes: list[int]) -> None:
            names = await self.create("arr", sizes, scheduler, gangs=gangs, complete_after=lifetime)
            created.update((n, self.created_at[n]) for n in names)
            if lifetime and gangs:
                batches.append(names)

        async def delete_groups(pods: list[str]) -> None:
            for group in sorted({n.rsplit("-", 1)[0] for n in pods}):
                with contextlib.suppress(ApiError):
                    await self.client.request("DELETE", f"{GROUPS}/{group}")

        def finished(pods: list[str], now: float) -> bool:
            """Every pod bound and run its lifetime (a pod not bound yet keeps its group)."""
            bound = [seen.at.get(n) for n in pods]
            return all(t is not None and t + lifetime + GROUP_TTL <= now for t in bound)

        try:
            async with BoundTimes(self.client) as seen, self.scheduling(contestant, seen):
                start = time.monotonic()
                made, tick = 0, 0
                while time.monotonic() - start < seconds:
                    due = int((time.monotonic() - start) * rate)
                    sizes: list[int] = []
                    while made + sum(sizes) < due:
                        sizes.append(shapes[(tick + len(sizes)) % len(shapes)])
                    if sizes:
                        # Not awaited: a slow answer must not hold back the next arrivals.
                        # (Awaited, each late batch made the next one bigger, PodGroups of a
                        # batch before its pods: on a busy API server the arrival turned into
                        # a few bursts of thousands and the run into ten minutes.)
                        task = asyncio.create_task(arrive(sizes))
                        creating.add(task)
                        task.add_done_callback(creating.discard)
                        made += sum(sizes)
                        tick += 1
                    while batches and finished(batches[0], time.monotonic()):
                        task = asyncio.create_task(delete_groups(batches.popleft()))
                        cleaners.add(task)
                        task.add_done_callback(cleaners.discard)
                    await asyncio.sleep(0.05)
                await asyncio.gather(*creating)
                await seen.wait_for(set(created), self.patience)
            latency = sorted(seen.at[n] - t for n, t in created.items())
            return Arrival(
                rate,
                seconds,
                len(latency),
                percentile(latency, 50),
                percentile(latency, 99),
                lifetime,
                contestant,
                max(created.values(), default=start) - start,
            )
        finally:
            for task in (*cleaners, *creating):
                task.cancel()
            await self.clean()


def podgroup_body(name: str, size: int) -> JsonDict:
    return {
        "apiVersion": "scheduling.sluice.dev/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"minMember": size},
    }


async def node_cpu_milli(client: KubeClient) -> int:
    """The smallest CPU allocatable (milli) of the schedulable nodes."""
    items, _ = await client.list("/api/v1/nodes")
    values = []
    for n in items:
        if (n.get("spec") or {}).get("taints") or (n.get("spec") or {}).get("unschedulable"):
            continue
        raw = str((n.get("status") or {}).get("allocatable", {}).get("cpu", "0"))
        values.append(int(raw[:-1]) if raw.endswith("m") else int(float(raw) * 1000))
    return min(values)


def count(text: str) -> float:
    return metric(text, "sluice_cycle_duration_seconds_count", '{phase="session"}')


def total(text: str) -> float:
    return metric(text, "sluice_cycle_duration_seconds_sum", '{phase="session"}')


async def sessions_after(s: Sluice, base: float, within: float) -> float:
    """Wait for the next session after `base` sessions; its duration (s)."""
    deadline = time.monotonic() + within
    before = total(s.metrics())
    while count(text := s.metrics()) <= base:
        if time.monotonic() > deadline:
            raise RuntimeError("no session ran")
        await asyncio.sleep(0.1)
    return total(text) - before


def percentile(values: list[float], p: float) -> float:
    return values[min(len(values) - 1, round(p / 100 * (len(values) - 1)))]


@dataclasses.dataclass(frozen=True)
class Steady:
    nodes: int
    running: int
    pending: int
    first_session: float
    idle_sessions: float
    quiet: float
    session_after_change: float


@dataclasses.dataclass(frozen=True)
class Arrival:
    rate: float
    seconds: float
    pods: int
    p50: float
    p99: float
    lifetime: float = 0.0  # seconds each pod runs; 0: until the end of the run
    contestant: str = "sluice"  # or "kube-scheduler": the same pods, no PodGroups
    # From the start to the last creation answered: longer than `seconds` when the API server
    # answered the creations slower than they were asked for (the rate reached is lower).
    created_within: float = 0.0


# ------------------------------------------------------------------------------------------------
# the run
# ------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Settings:
    pods: int = 10_000
    rounds: int = 3
    concurrency: int = 64
    shapes: tuple[tuple[int, int], ...] = ((500, 20), (20, 500), (1, 10_000))
    # jobs x pods per job, as VCJobs (jobs operator + Sluice) and batch/v1 Jobs (job
    # controller + kube-scheduler): bench/live_jobs.py
    job_shapes: tuple[tuple[int, int], ...] = ((10_000, 1), (500, 20), (20, 500), (1, 10_000))
    per_node: int = 10  # 0 leaves the steady state out
    pending: int = 2_000
    quiet: float = 20.0
    rate: float = 200.0
    seconds: float = 300.0  # 0 leaves sustained arrival out
    lifetime: float = 0.0  # arrival: each pod runs this long, then succeeds; 0: runs on
    # arrival: kube-scheduler gets the same arrival too (plain pods; only on a cluster the run
    # started, which has its binary)
    arrival_kube_scheduler: bool = True
    kube_scheduler: bool = True
    # A source tree (e.g. `git worktree add /tmp/base main`) whose scheduler runs as a second
    # Sluice contestant in the burst and gang scenarios: before/after in one run.
    baseline: str = ""
    py_spy: str = ""  # a py-spy binary: raw stacks of every Sluice process into the log folder
    # Seconds after a Sluice run's last binding before its PodGroup status writes are counted:
    # the member counts it holds back are written when their interval runs out.
    settle: float = SchedulerSettings.status_count_interval_seconds + 1.0


async def run(bench: Bench, nodes: list[str], s: Settings) -> dict[str, Any]:
    await ensure_namespace(bench.client)
    await bench.clean()
    sluices = ["sluice", *(["sluice-baseline"] if s.baseline else [])]
    contestants = ["bare", *(["kube-scheduler"] if s.kube_scheduler else []), *sluices]
    plain: dict[str, list[Run]] = {c: [] for c in contestants}
    gangs: dict[str, list[Run]] = {f"{g}x{m}": [] for g, m in s.shapes}
    baseline_gangs: dict[str, list[Run]] = {f"{g}x{m}": [] for g, m in s.shapes}
    from bench import live_jobs  # it builds on this module's pieces

    job_sides = ["vcjob", *(["batch"] if s.kube_scheduler else [])]
    jobs = {f"{g}x{m}": {side: list[Run]() for side in job_sides} for g, m in s.job_shapes}
    loads: list[float] = [os.getloadavg()[0]]
    for r in range(s.rounds):
        order = contestants[r % len(contestants) :] + contestants[: r % len(contestants)]
        for c in order:
            run_ = await bench.one(c, [1] * s.pods)
            plain[c].append(run_)
            print(f"round {r + 1} plain {c}: {describe(run_)}", flush=True)
        for g, m in s.shapes:
            for c in sluices[r % len(sluices) :] + sluices[: r % len(sluices)]:
                run_ = await bench.one(c, [m] * g, gangs=True)
                (gangs if c == "sluice" else baseline_gangs)[f"{g}x{m}"].append(run_)
                print(f"round {r + 1} gangs {g}x{m} {c}: {describe(run_)}", flush=True)
        for g, m in s.job_shapes:
            sides = job_sides[r % len(job_sides) :] + job_sides[: r % len(job_sides)]
            for side in sides:
                run_ = await live_jobs.one(bench, side, g, m)
                jobs[f"{g}x{m}"][side].append(run_)
                print(f"round {r + 1} jobs {g}x{m} {side}: {describe(run_)}", flush=True)
        loads.append(os.getloadavg()[0])
    steady = await bench.steady(nodes, s.per_node, s.pending, s.quiet) if s.per_node else None
    print(f"steady: {steady}", flush=True)
    arrival = await bench.arrival(s.rate, s.seconds, s.lifetime) if s.seconds else None
    print(f"arrival: {arrival}", flush=True)
    yardstick = None
    if s.seconds and s.kube_scheduler and s.arrival_kube_scheduler:
        yardstick = await bench.arrival(s.rate, s.seconds, s.lifetime, "kube-scheduler")
        print(f"arrival: {yardstick}", flush=True)
    loads.append(os.getloadavg()[0])
    return {
        "plain": plain,
        "gangs": gangs,
        "baseline_gangs": baseline_gangs if s.baseline else {},
        "jobs": jobs,
        "steady": steady,
        "arrival": arrival,
        "arrival_kube_scheduler": yardstick,
        "loads": loads,
        "peak_rss": bench.peak_rss,
    }


def describe(r: Run) -> str:
    ready = f", caches synced at {r.ready:.2f}s" if r.ready is not None else ""
    writes = f", {r.status_writes:.0f} PodGroup status writes" if r.status_writes else ""
    return (
        f"{r.pods} pods: first bound {r.first:.2f}s, all {r.done:.2f}s, {r.rate:.0f} pods/s"
        f"{ready}{writes}"
    )


def med(runs: list[Run], field: str) -> float:
    return statistics.median(float(getattr(r, field) or 0.0) for r in runs)


def report(result: Mapping[str, Any], s: Settings, command: str, where: str) -> str:
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    loads = ", ".join(f"{x:.1f}" for x in result["loads"])
    plain: dict[str, list[Run]] = result["plain"]
    # --rounds 0 runs only the steady state and/or arrival parts: no burst table then.
    bare_done = med(plain["bare"], "done") if plain.get("bare") else 0.0
    lines = [
        f"### Run of {now}",
        "",
        (
            f"Command: `{command}`. {where}; {s.concurrency} Binding POSTs in flight for the bare "
            f"loop and Sluice; kube-scheduler with client QPS/burst 5000. Medians of {s.rounds} "
            f"round(s), contestants' order rotated each round. Load average (1 min) at start, after "
            f"each round and at the end: {loads} on {os.cpu_count()} CPUs shared with other work: "
            "compare within a row, not across runs."
        ),
        *(
            [
                "",
                (
                    f"`sluice-baseline` is the scheduler of the source tree `{s.baseline}`, run "
                    "in turn with this tree's `sluice` on the same pods (order rotated each round)."
                ),
            ]
            if s.baseline
            else []
        ),
        "",
        (
            "| pods | contestant | first bound s | all bound s | pods/s (10-90%) | all bound / bare "
            "loop | sessions |"
        ),
        "|---|---|---|---|---|---|---|",
    ]
    rows = [(f"{s.pods} x 1 (plain)", c, runs) for c, runs in plain.items()]
    rows += [(f"{k} (PodGroups)", "sluice", runs) for k, runs in result["gangs"].items()]
    rows += [
        (f"{k} (PodGroups)", "sluice-baseline", runs)
        for k, runs in result.get("baseline_gangs", {}).items()
    ]
    rows = [row for row in rows if row[2]]
    if not rows:
        del lines[-3:]  # the table's header
    for label, c, runs in rows:
        first, done = med(runs, "first"), med(runs, "done")
        first_text, done_text, ratio = f"{first:.2f}", f"{done:.2f}", f"{done / bare_done:.2f}x"
        if runs[0].ready is not None:
            # Sluice's process start and cache sync are not scheduling: also from /readyz.
            synced_first = statistics.median(r.first - (r.ready or 0.0) for r in runs)
            synced_done = statistics.median(r.done - (r.ready or 0.0) for r in runs)
            first_text += f" ({synced_first:.2f} after sync)"
            done_text += f" ({synced_done:.2f} after sync)"
            ratio += f" ({synced_done / bare_done:.2f}x after sync)"
        sessions = "-" if runs[0].sessions is None else f"{med(runs, 'sessions'):.0f}"
        lines.append(
            f"| {label} | {c} | {first_text} | {done_text} | {med(runs, 'rate'):.0f} "
            f"| {ratio} | {sessions} |"
        )
    if result.get("jobs"):
        from bench import live_jobs

        lines += ["", *live_jobs.describe_all(result["jobs"])]
    st: Steady | None = result["steady"]
    ar: Arrival | None = result["arrival"]
    lines.append("")
    if st is not None:
        lines.append(
            f"Steady state: {st.nodes} nodes full of {st.running} running pods, {st.pending} pending "
            f"that do not fit: first session {st.first_session:.2f} s; sessions while nothing "
            f"changed for {st.quiet:.0f} s: {st.idle_sessions:.0f}; session after one running pod "
            f"was deleted: {st.session_after_change:.2f} s."
        )
    if ar is not None:
        lines.append(
            f"Sustained arrival: {ar.pods} pods in mixed gangs (1/2/4/8) at {ar.rate:.0f} pods/s "
            f"for {ar.seconds:.0f} s, "
            + (
                f"each pod running {ar.lifetime:g} s (the cluster levels off at about "
                f"{ar.rate * ar.lifetime:.0f} pods)"
                if ar.lifetime
                else "every pod running to the end (the cluster fills up)"
            )
            + f"{created_rate(ar)}: creation -> bound p50 {ar.p50:.2f} s, p99 {ar.p99:.2f} s."
        )
    yard: Arrival | None = result.get("arrival_kube_scheduler")
    if yard is not None:
        lines.append(
            f"Same arrival to kube-scheduler, right after (plain pods: no PodGroups, it does not "
            f"gang; {yard.pods} pods{created_rate(yard)}): creation -> bound p50 "
            f"{yard.p50:.2f} s, p99 {yard.p99:.2f} s."
        )
    lines += [
        f"Peak RSS of the Sluice scheduler process over these runs: {result['peak_rss']:.0f} MiB.",
        "",
    ]
    return "\n".join(lines)


def created_rate(ar: Arrival) -> str:
    """The rate the creations reached, when the API server answered them slower than asked."""
    if ar.created_within <= ar.seconds + 1.0:
        return ""
    return (
        f" (created over {ar.created_within:.0f} s: {ar.pods / ar.created_within:.0f} pods/s "
        "reached)"
    )


def parse(argv: list[str] | None) -> tuple[argparse.Namespace, Settings]:
    p = bench_parser("python -m bench.live", __doc__)
    for f in dataclasses.fields(Settings):
        if f.name not in ("shapes", "job_shapes", "kube_scheduler", "arrival_kube_scheduler"):
            p.add_argument("--" + f.name.replace("_", "-"), type=type(f.default), default=f.default)
    p.add_argument(
        "--no-arrival-kube-scheduler",
        dest="arrival_kube_scheduler",
        action="store_false",
        help="leave kube-scheduler's run of the sustained arrival out",
    )
    p.add_argument("--shapes", default="500x20,20x500,1x10000", help="gangs x size, ...")
    p.add_argument(
        "--job-shapes",
        default="10000x1,500x20,20x500,1x10000",
        help="jobs x pods, ... as VCJobs and batch/v1 Jobs ('' leaves them out)",
    )
    p.add_argument("--write", help="append the dated report to this markdown file")
    p.set_defaults(kube_scheduler=True)
    args = p.parse_args(argv)
    given = {
        f.name: getattr(args, f.name)
        for f in dataclasses.fields(Settings)
        if f.name not in ("shapes", "job_shapes")
    }
    settings = Settings(
        **{
            **given,
            "shapes": shapes_of(args.shapes),
            "job_shapes": shapes_of(args.job_shapes),
            "kube_scheduler": args.kubeconfig is None,
        }
    )
    return args, settings


def shapes_of(text: str) -> tuple[tuple[int, int], ...]:
    """ "500x20,1x10000" -> ((500, 20), (1, 10000))."""
    return tuple((int(g), int(m)) for g, m in (p.split("x") for p in text.split(",") if p))


@contextlib.asynccontextmanager
async def connected(path: str, concurrency: int) -> AsyncIterator[KubeClient]:
    conn = kubeconfig.load(path)
    async with KubeClient(conn, limit=concurrency + 16, request_timeout=60) as client:
        yield client


async def run_on(path: str, logs: pathlib.Path, s: Settings, cluster: Any | None) -> dict[str, Any]:
    async with connected(path, s.concurrency) as client:
        bench = Bench(
            client,
            path,
            logs,
            s.concurrency,
            cluster.start_kube_scheduler if cluster is not None else None,
            (lambda: cluster.stop_process("kube-scheduler")) if cluster is not None else None,
            baseline=s.baseline or None,
            py_spy=s.py_spy or None,
            settle=s.settle,
        )
        nodes, _ = await client.list("/api/v1/nodes")
        names = [
            n["metadata"]["name"]
            for n in nodes
            if not (n.get("spec") or {}).get("taints")
            and not (n.get("spec") or {}).get("unschedulable")
        ]
        return await run(bench, names, s)


def main(argv: list[str] | None = None) -> int:
    args, settings = parse(argv)
    logs = pathlib.Path(tempfile.mkdtemp(prefix="sluice-bench-live-"))
    with bench_cluster(
        args.kubeconfig, args.profile, logs, nodes=args.nodes, cluster_dir=args.cluster_dir
    ) as (
        path,
        where,
        cluster,
    ):
        result = asyncio.run(run_on(path, logs, settings, cluster))
    if cluster is None:
        where += " (kube-scheduler left out)"
    command = "python -m bench.live " + " ".join(argv if argv is not None else sys.argv[1:])
    text = report(result, settings, command.strip(), where)
    print("\n" + text + f"\nlogs: {logs}")
    if args.write:
        with open(args.write, "a", encoding="utf-8") as out:
            out.write("\n" + text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
