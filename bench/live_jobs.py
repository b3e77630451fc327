"""Gang shapes as jobs, for `python -m bench.live`: VCJobs through the jobs operator and Sluice
against batch/v1 Jobs through the job controller and kube-scheduler.

Both sides start from job objects, not pods: a controller (our jobs operator, or
kube-controller-manager's job controller) creates the pods and a scheduler binds them, so the
time covers what a user waits for after `kubectl create`. Each side's processes are started and
ready before the clock starts; the clock starts with the first job POST and stops when the
bench's watch has seen every pod bound. A VCJob is one task of `size` replicas (a gang: its
PodGroup's minMember is the whole job); a batch/v1 Job has parallelism = completions = `size`
(kube-scheduler places its pods one by one: no gang).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

from bench.bind import IDLE_SCHEDULER, NAMESPACE, delete_pods, gather_bounded, pod_body
from bench.jobs import start, stop
from bench.live import Bench, BoundTimes, Run, Sluice, create_retrying, med, summarize
from operators.api.batch import VCJob
from operators.api.scheduling import PodGroup
from operators.runtime.client import ApiError, JsonDict

BATCH_JOBS = f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs"
VCJOBS = VCJob.api_path(NAMESPACE)
CONTESTANTS = ("vcjob", "batch")


def template(scheduler: str) -> JsonDict:
    """The pod template of both kinds: the bench's pod (label, requests), run to no end."""
    pod = pod_body("unused", scheduler)
    return {
        "metadata": {"labels": pod["metadata"]["labels"]},
        "spec": {**pod["spec"], "restartPolicy": "Never", "terminationGracePeriodSeconds": 0},
    }


def vcjob_body(name: str, size: int) -> JsonDict:
    return {
        "apiVersion": VCJob.api_version_str(),
        "kind": "VCJob",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"tasks": [{"name": "w", "replicas": size, "template": template("sluice")}]},
    }


def batch_job_body(name: str, size: int) -> JsonDict:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "parallelism": size,
            "completions": size,
            "backoffLimit": 0,
            "template": template("default-scheduler"),
        },
    }


@contextlib.asynccontextmanager
async def jobs_operator(bench: Bench) -> AsyncIterator[asyncio.subprocess.Process]:
    """`python -m operators jobs` watching the bench namespace, as a child process."""
    proc = await start(
        "jobs",
        bench.kubeconfig,
        bench.logs,
        f"--jobs-namespaces={NAMESPACE}",
        "--jobs-health-port=0",
    )
    try:
        yield proc
    finally:
        if proc.returncode is None:
            await stop(proc)


async def wait_listed(bench: Bench, proc: asyncio.subprocess.Process, within: float) -> None:
    """The jobs operator is up once it has made a job's PodGroup: a probe VCJob of no pods
    would be refused, so one of a pod that nobody schedules is created and removed again."""
    probe = vcjob_body("probe", 1)
    probe["spec"]["tasks"][0]["template"]["spec"]["schedulerName"] = IDLE_SCHEDULER
    await bench.client.post(VCJOBS, probe)
    deadline = time.monotonic() + within
    try:
        while True:
            if proc.returncode is not None:
                raise RuntimeError(f"jobs operator exited with {proc.returncode}")
            groups, _ = await bench.client.list(PodGroup.api_path(NAMESPACE))
            if groups:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"jobs operator made no PodGroup in {within:.0f}s")
            await asyncio.sleep(0.2)
    finally:
        await clean(bench)


async def clean(bench: Bench) -> None:
    """Jobs first (orphaning their pods, so that no controller makes new ones), then pods."""
    for path in (BATCH_JOBS, VCJOBS):
        with contextlib.suppress(ApiError):
            await bench.client.request(
                "DELETE", path, params={"propagationPolicy": "Orphan"}, deadline=120
            )
    await delete_pods(bench.client)
    await bench.clean()


async def one(bench: Bench, contestant: str, jobs: int, size: int) -> Run:
    """`jobs` jobs of `size` pods each, created and bound by `contestant` (see CONTESTANTS)."""
    bench.seq += 1
    prefix = f"{contestant[:2]}-{bench.tag}{bench.seq}"
    body = vcjob_body if contestant == "vcjob" else batch_job_body
    path = VCJOBS if contestant == "vcjob" else BATCH_JOBS
    expected = jobs * size
    try:
        async with contextlib.AsyncExitStack() as stack:
            seen = await stack.enter_async_context(BoundTimes(bench.client))
            if contestant == "vcjob":
                sluice = await stack.enter_async_context(
                    Sluice(bench.kubeconfig, bench.log(), bench.concurrency)
                )
                proc = await stack.enter_async_context(jobs_operator(bench))
                await sluice.ready_after()
                await wait_listed(bench, proc, bench.patience)
            else:
                assert bench.start_kube_scheduler is not None
                assert bench.stop_kube_scheduler is not None
                await asyncio.to_thread(bench.start_kube_scheduler)
                stack.push_async_callback(asyncio.to_thread, bench.stop_kube_scheduler)
            started = time.monotonic()
            await gather_bounded(
                64,
                (
                    create_retrying(bench.client, path, body(f"{prefix}-{j:05d}", size))
                    for j in range(jobs)
                ),
            )
            await seen.wait_count(expected, bench.patience)
            times = sorted(seen.at.values())[:expected]
        run = summarize(contestant, started, times, None)
        if contestant == "vcjob":
            bench.peak_rss = max(bench.peak_rss, sluice.peak_rss)
        return run
    finally:
        await clean(bench)


def describe_all(runs: dict[str, dict[str, list[Run]]]) -> list[str]:
    """Report rows: one per shape and contestant, medians of the rounds."""
    lines = [
        (
            "| jobs x pods | contestant | first bound s | all bound s | pods/s (10-90%) | "
            "all bound / batch+kube-scheduler |"
        ),
        "|---|---|---|---|---|---|",
    ]
    for shape, by in runs.items():
        yard = med(by["batch"], "done") if by.get("batch") else None
        for contestant, rs in by.items():
            if not rs:
                continue
            done = med(rs, "done")
            ratio = f"{done / yard:.2f}x" if yard else "-"
            who = (
                "VCJobs: jobs operator + Sluice"
                if contestant == "vcjob"
                else ("batch/v1 Jobs: job controller + kube-scheduler")
            )
            lines.append(
                f"| {shape} | {who} | {med(rs, 'first'):.2f} | {done:.2f} | "
                f"{med(rs, 'rate'):.0f} | {ratio} |"
            )
    return lines
