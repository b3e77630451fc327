"""Settings and kopf defaults of the kopf operator runner (running it is e2e/test_kopf_runner.py)."""

from __future__ import annotations

import logging
import subprocess
import sys

import kopf
import pytest

from operators.controllers.kopf_runner import (
    KopfOperator,
    KopfSettings,
    OperatorContext,
    connection_info,
    kopf_settings,
    parse,
)
from operators.runtime.kubeconfig import Connection


def _nothing(registry: kopf.OperatorRegistry, ctx: OperatorContext) -> None:
    return None


OP = KopfOperator("jobs", _nothing, health_port=8081)


def _printed_by_a_fresh_interpreter(code: str) -> list[str]:
    """What a new process prints: which modules an import pulls in is only visible before any
    other test of this session has imported them."""
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=240
    ).stdout.splitlines()


def test_flags_are_prefixed_except_shared_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLUICE_JOBS_NAMESPACES", "team-a")
    monkeypatch.setenv("SLUICE_LOG_LEVEL", "DEBUG")
    s = parse(OP, ["--kubeconfig=/k", "--jobs-request-timeout-seconds=5", "--metrics-port=1"])
    assert s.kubeconfig == "/k"
    assert s.request_timeout_seconds == 5.0
    assert s.namespaces == "team-a"
    assert s.log_level == "DEBUG"
    assert s.health_port == 8081  # the operator's default
    assert parse(OP, ["--jobs-health-port=0"]).health_port == 0


def test_kopf_defaults_standalone_own_prefix_no_sigkill() -> None:
    ks = kopf_settings(OP, KopfSettings(event_level="ERROR", request_timeout_seconds=7))
    assert ks.peering.standalone is True
    assert ks.process.ultimate_exiting_timeout is None
    assert ks.persistence.finalizer == "jobs.sluice.dev/finalizer"
    assert ks.posting.level == logging.ERROR
    assert ks.networking.request_timeout == 7
    assert ks.watching.chunk_size is None  # a paged kopf listing dies on 410 Gone


def test_operator_configure_runs_last() -> None:
    def quiet(ks: kopf.OperatorSettings) -> None:
        ks.posting.enabled = False

    ks = kopf_settings(KopfOperator("x", _nothing, configure=quiet), KopfSettings())
    assert ks.posting.enabled is False


async def test_connection_info_from_runtime_connection() -> None:
    info = await connection_info(
        Connection(server="https://h:6443", ca_file="/ca", token="t", default_namespace="ns")
    )
    assert (info.server, info.ca_path, info.token, info.scheme) == (
        "https://h:6443",
        "/ca",
        "t",
        "Bearer",
    )
    assert info.default_namespace == "ns"


def test_an_operator_process_imports_kopf_without_the_kubernetes_api_clients() -> None:
    """kopf would import both clients (~110 MB of RSS) only to recognise their models; an
    operator module loads without them, and they stay importable for who needs them."""
    code = (
        "import sys; import operators.controllers.jobs, operators.runtime.kubeconfig; "
        "print(sorted(m for m in sys.modules if m.startswith(('kubernetes', 'kubernetes_asyncio'))));"
        "import kubernetes_asyncio.config.kube_config, kubernetes.client; print('later ok')"
    )
    out = _printed_by_a_fresh_interpreter(code)
    assert out == ["[]", "later ok"]


def test_the_scheduler_process_does_not_import_kopf() -> None:
    """The scheduler is no kopf operator: kopf was a third of its start-up on a loaded machine.
    A kopf operator imported after it in the same process (`all`) still gets kopf, hidden
    clients and all."""
    code = (
        "import sys; import operators.controllers.scheduler; print('kopf' in sys.modules); "
        "import operators.controllers.jobs; print('kopf' in sys.modules, "
        "sorted(m for m in sys.modules if m.startswith(('kubernetes', 'kubernetes_asyncio'))))"
    )
    out = _printed_by_a_fresh_interpreter(code)
    assert out == ["False", "True []"]


def test_the_operators_that_only_read_snapshot_types_do_not_load_the_engine_or_numpy() -> None:
    """The scheduler package loads its engine (and numpy, ~14 MB of RSS) on first use: the jobs,
    pool, queue and podgroup operators read only its input types; the engine stays importable."""
    code = (
        "import sys; import operators.controllers.jobs, operators.controllers.pool, "
        "operators.controllers.queue, operators.controllers.podgroup; "
        "print(sorted(m for m in sys.modules if m == 'numpy' or m.endswith('.engine')));"
        "from operators.scheduler import run_session; print(run_session.__module__)"
    )
    out = _printed_by_a_fresh_interpreter(code)
    assert out == ["[]", "operators.scheduler.engine"]
