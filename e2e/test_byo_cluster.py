"""Bring your own cluster (BYO=1): `make deploy`, `make run` and the e2e suite against a cluster
named by $KUBECONFIG, here the session's local control plane, started separately from them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from operators.devcluster.cluster import DevCluster

pytestmark = pytest.mark.devcluster  # runs against the session's own cluster, not a BYO one

REPO = Path(__file__).resolve().parents[1]


def run(cluster: DevCluster, state: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "SLUICE_BYO_CLUSTER": "1",
        "KUBECONFIG": str(cluster.kubeconfig),
        "SLUICE_STATE_DIR": str(state / "dev"),
    }
    return subprocess.run(
        [sys.executable, *args],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
    )


# Three steps of up to 280 s each (deploy, a nested e2e module, undeploy); pytest's default
# 300 s guard for the whole test was below their sum: one full e2e run at load ~15 took 229 s.
@pytest.mark.timeout(900)
def test_deploy_and_an_e2e_module_run_against_an_existing_cluster(
    cluster: DevCluster, tmp_path: Path
) -> None:
    deployed = run(cluster, tmp_path, "-m", "operators.install", "deploy")
    try:
        assert deployed.returncode == 0, deployed.stdout + deployed.stderr
        assert "running as sluice-system:sluice-scheduler" in deployed.stdout
        # An e2e module, in BYO mode: it must use this cluster instead of starting one.
        basetemp = tmp_path / "pytest"
        suite = run(
            cluster, tmp_path, "-m", "pytest", "-q", "-p", "no:cacheprovider",
            f"--basetemp={basetemp}", "e2e/test_api_validation.py",
        )  # fmt: skip
        assert suite.returncode == 0, suite.stdout[-3000:] + suite.stderr[-3000:]
        assert " passed" in suite.stdout
        # The session fixture took the existing cluster and started no control plane.
        assert (basetemp / "byo0").is_dir()
        assert not list(basetemp.glob("devcluster*"))
    finally:
        stopped = run(cluster, tmp_path, "-m", "operators.install", "undeploy")
        assert stopped.returncode == 0, stopped.stderr
