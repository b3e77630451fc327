from __future__ import annotations

import pathlib

import pytest

from operators.__main__ import OPERATORS
from operators.__main__ import main as dispatch
from operators.controllers.scheduler import parse_settings
from operators.runtime import kubeconfig
from operators.runtime.settings import settings_from


def test_flags_beat_environment_beat_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLUICE_BIND_CONCURRENCY", "8")
    monkeypatch.setenv("SLUICE_LEADER_ELECTION", "false")
    monkeypatch.setenv("SLUICE_COALESCE_SECONDS", "0.5")
    s = parse_settings(["--bind-concurrency=32", "--unknown-flag-for-another-operator"])
    assert s.bind_concurrency == 32
    assert s.leader_election is False
    assert s.coalesce_seconds == 0.5
    assert s.scheduler_name == "sluice"
    assert parse_settings(["--leader-election"]).leader_election is True


def test_settings_from_ignores_unset_overrides() -> None:
    s = settings_from({"lease_name": None, "metrics_port": 0}, environ={})
    assert s.lease_name == "sluice-scheduler"
    assert s.metrics_port == 0


def test_dispatcher_table_lists_scheduler(capsys: pytest.CaptureFixture[str]) -> None:
    assert "scheduler" in OPERATORS
    assert OPERATORS["scheduler"].load().__name__ == "main"
    assert dispatch(["--help"]) == 0
    assert "scheduler" in capsys.readouterr().out


def test_kubeconfig_relative_paths_and_inline_data(tmp_path: pathlib.Path) -> None:
    (tmp_path / "ca.crt").write_text("x")
    cfg = tmp_path / "config"
    cfg.write_text(
        """
apiVersion: v1
kind: Config
current-context: dev
contexts:
- name: dev
  context: {cluster: c, user: u, namespace: team}
clusters:
- name: c
  cluster: {server: "https://127.0.0.1:6443/", certificate-authority: ca.crt}
users:
- name: u
  user: {token: abc, client-key-data: aGVsbG8=}
"""
    )
    conn = kubeconfig.load(str(cfg))
    assert conn.server == "https://127.0.0.1:6443"
    assert conn.ca_file == str(tmp_path / "ca.crt")
    assert conn.bearer_token() == "abc"
    assert conn.default_namespace == "team"
    assert conn.key_file is not None
    assert pathlib.Path(conn.key_file).read_bytes() == b"hello"
