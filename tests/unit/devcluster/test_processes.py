"""Processes a test or benchmark starts die with it, even when it is SIGKILLed; the CLI's
outlive it (tests/unit: a real fork and exec of `sleep`, no cluster)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from operators.devcluster import processes

STARTER = """
import sys, time
from pathlib import Path
from operators.devcluster import processes
proc = processes.spawn("sleep", ["sleep", "120"], Path(sys.argv[1]), die_with_parent=sys.argv[2] == "1")
print(proc.pid, flush=True)
time.sleep(120)
"""


def grandchild_after_parent_killed(tmp_path: Path, die_with_parent: bool) -> processes.Proc:
    """Start a Python process that spawns `sleep`, SIGKILL that Python process, return the
    `sleep` it had started."""
    tied = "1" if die_with_parent else "0"
    with subprocess.Popen(
        [sys.executable, "-c", STARTER, str(tmp_path / "sleep.log"), tied],
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])},
    ) as starter:
        assert starter.stdout is not None
        pid = int(starter.stdout.readline())
        sleeper = processes.Proc("sleep", pid, "sleep", tmp_path / "sleep.log")
        assert processes.alive(sleeper)
        starter.send_signal(signal.SIGKILL)
        starter.wait(10)
    return sleeper


def gone_within(proc: processes.Proc, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not processes.alive(proc):
            return True
        time.sleep(0.05)
    return False


@pytest.mark.skipif(
    sys.platform != "linux",
    reason="dying with the parent uses prctl(PR_SET_PDEATHSIG), which only Linux has",
)
def test_a_tied_process_dies_when_its_starter_is_sigkilled(tmp_path: Path) -> None:
    sleeper = grandchild_after_parent_killed(tmp_path, die_with_parent=True)
    assert gone_within(sleeper, 10)


def test_an_untied_process_outlives_its_starter(tmp_path: Path) -> None:
    sleeper = grandchild_after_parent_killed(tmp_path, die_with_parent=False)
    try:
        assert not gone_within(sleeper, 1)
    finally:
        os.killpg(sleeper.pid, signal.SIGKILL)
