"""Which lease the fault runs' scheduler fleet uses (chaos.Fleet): the short one for fault runs,
the scheduler's own defaults for the load of `bench.soak`."""

from __future__ import annotations

from pathlib import Path

from operators.devcluster import chaos

TIMINGS = ("--lease-duration-seconds", "--renew-deadline-seconds", "--retry-period-seconds")


def scheduler_flags(fleet: chaos.Fleet) -> list[list[str]]:
    return [fleet.procs[name].flags for name in chaos.SCHEDULERS]


def test_fault_runs_use_the_short_lease(tmp_path: Path) -> None:
    fleet = chaos.Fleet(tmp_path / "kubeconfig", tmp_path, "chaos-x")
    for flags in scheduler_flags(fleet):
        assert f"--lease-duration-seconds={chaos.LEASE['duration']}" in flags
        assert f"--renew-deadline-seconds={chaos.LEASE['renew']}" in flags
        assert "--lease-name=chaos-x" in flags


def test_the_load_keeps_the_scheduler_defaults(tmp_path: Path) -> None:
    fleet = chaos.Fleet(tmp_path / "kubeconfig", tmp_path, "load-x", short_lease=False)
    for flags in scheduler_flags(fleet):
        assert not [f for f in flags if f.startswith(TIMINGS)]
        assert "--lease-name=load-x" in flags  # both replicas still share one Lease
