"""`make bench`'s harness (bench/live.py) at tiny sizes on the session cluster, so that the
benchmark code cannot rot. Nothing here is timed: only that every scenario runs to the end,
every contestant binds every pod, and the report renders."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from bench import live


# A hang guard: six scheduler starts (plus a jobs operator and two kube-scheduler starts) take a
# few minutes on a loaded 2-core machine.
@pytest.mark.timeout(900)
def test_live_bench_runs_every_scenario_and_reports(cluster: Any, tmp_path: Path) -> None:
    settings = live.Settings(
        pods=12,
        rounds=1,
        concurrency=8,
        shapes=((3, 4), (1, 12)),
        job_shapes=((2, 3),),
        per_node=2,
        pending=3,
        quiet=1.0,
        rate=8.0,
        seconds=2.0,
        settle=1.0,  # no write counts are read here: no need to wait for held-back ones
        arrival_kube_scheduler=False,  # kept out of CI's time (tests/unit/bench: its report)
    )
    result = asyncio.run(live.run_on(str(cluster.kubeconfig), tmp_path, settings, cluster))

    plain = result["plain"]
    assert set(plain) == {"bare", "kube-scheduler", "sluice"}
    assert all(r.pods == 12 for runs in plain.values() for r in runs)
    assert [r.pods for runs in result["gangs"].values() for r in runs] == [12, 12]
    assert [r.pods for r in result["jobs"]["2x3"]["vcjob"]] == [6]
    assert [r.pods for r in result["jobs"]["2x3"]["batch"]] == [6]
    assert result["steady"].running > 0
    assert result["arrival"].pods >= 8
    assert result["peak_rss"] > 0
    text = live.report(result, settings, "python -m bench.live (smoke)", "the e2e cluster")
    assert "| 12 x 1 (plain) | kube-scheduler |" in text
    assert "| 3x4 (PodGroups) | sluice |" in text
    assert "| 2x3 | VCJobs: jobs operator + Sluice |" in text
