"""Faults during a mixed job workload, on the real local control plane (docs/reliability.md).

Every operator runs as a subprocess, the scheduler twice on one Lease. While jobs run, the
fault driver (operators/devcluster/chaos.py) SIGKILLs operators and the scheduler leader,
restarts the API server and expires every watch (etcd compacted, API server restarted); then
operators/devcluster/invariants.py checks the API: final phases, replica slots, gangs, quota
accounting, hook delivery, bindings by lease term, hostile input reported, orphans, and no
operator crashes. The short run is in CI; the long one (more jobs, random faults, a frozen
leader) in `make soak`, with more rounds of 100 jobs in `python -m bench.soak`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from operators.devcluster import chaos
from operators.devcluster.cluster import DevCluster

pytestmark = [pytest.mark.e2e, pytest.mark.devcluster]

# Each operator and the scheduler leader once, the standby too (it must come back as the
# standby), and the control-plane faults every operator must ride out without a restart.
EACH_PROCESS = tuple(f"kill:{name}" for name in (*chaos.OPERATORS, "leader", "standby"))


def check(report: chaos.Report, jobs: int) -> dict[str, Any]:
    summary = report.summary()
    assert report.violations == {}, json.dumps(summary) + "\n" + json.dumps(report.violations)
    assert summary["jobs"] == jobs + 1  # and the job with the longest names
    assert report.pods_bound > jobs
    return summary


# In CI (its runs are in docs/reliability.md).
@pytest.mark.timeout(1200)  # a hang guard: about 4 minutes on an idle 2-core machine
def test_each_operator_killed_and_watches_expired_break_no_invariant(
    cluster: DevCluster, tmp_path: Path
) -> None:
    plan = chaos.Plan(
        jobs=8,
        seed=7,
        process_faults=0,
        kills=EACH_PROCESS,
        leader_pauses=0,
        control_plane_faults=("restart:apiserver", "expire:watches"),
        submit_seconds=12.0,
        # A bound, not a wait: the check starts as soon as every job has finished. Killing the
        # leader and then the standby leaves no scheduler until one has restarted (seconds on
        # an idle machine, minutes on a loaded one).
        finish_timeout=480.0,
    )
    summary = check(chaos.run(cluster, plan, tmp_path), plan.jobs)
    kinds = summary["fault_kinds"]
    # The leader/standby aims find no target while no scheduler holds the Lease: at most those
    # two may be missing.
    assert {"restart:apiserver", "expire:watches"} <= set(kinds)
    assert {f"kill:{name}" for name in chaos.OPERATORS} <= set(kinds)


@pytest.mark.soak
@pytest.mark.timeout(900)  # a hang guard: about 4 minutes on an idle 2-core machine
def test_faults_during_a_mixed_workload_break_no_invariant(
    cluster: DevCluster, tmp_path: Path
) -> None:
    plan = chaos.Plan(jobs=24, seed=25, process_faults=7, leader_pauses=1)
    report = chaos.run(cluster, plan, tmp_path)
    summary = check(report, plan.jobs)
    assert summary["faults"] >= 8  # a leader aim may find no leader at that instant
    assert "expire:watches" in summary["fault_kinds"]
    assert report.lease_terms >= 2  # the standby took over at least once
