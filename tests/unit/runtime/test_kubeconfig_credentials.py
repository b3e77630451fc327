"""kubeconfig credentials beyond static tokens: exec plugins (run as real processes), merged
$KUBECONFIG files, proxy and TLS server name."""

from __future__ import annotations

import json
import os
import pathlib
import sys

import pytest
import yaml

from operators.runtime import kubeconfig


def plugin_script(tmp_path: pathlib.Path, expires_in: float | None) -> pathlib.Path:
    """An exec plugin that hands out token-1, token-2, ... (one per run), counted in a file."""
    script = tmp_path / "plugin.py"
    expiry = (
        "None"
        if expires_in is None
        else f"(dt.datetime.now(dt.UTC) + dt.timedelta(seconds={expires_in}))"
        '.strftime("%Y-%m-%dT%H:%M:%SZ")'
    )
    script.write_text(
        "import datetime as dt, json, os, pathlib\n"
        f"count = pathlib.Path({str(tmp_path / 'runs')!r})\n"
        "n = int(count.read_text()) + 1 if count.exists() else 1\n"
        "count.write_text(str(n))\n"
        "assert json.loads(os.environ['KUBERNETES_EXEC_INFO'])['kind'] == 'ExecCredential'\n"
        f"expiry = {expiry}\n"
        "status = {'token': f'token-{n}'}\n"
        "if expiry: status['expirationTimestamp'] = expiry\n"
        "print(json.dumps({'apiVersion': 'client.authentication.k8s.io/v1',\n"
        "                  'kind': 'ExecCredential', 'status': status}))\n"
    )
    return script


def write_config(
    tmp_path: pathlib.Path, user: dict[str, object], **cluster: object
) -> pathlib.Path:
    cfg = tmp_path / "config"
    cfg.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "c",
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
                "clusters": [
                    {"name": "c", "cluster": {"server": "https://127.0.0.1:6443", **cluster}}
                ],
                "users": [{"name": "u", "user": user}],
            }
        )
    )
    return cfg


def exec_user(script: pathlib.Path) -> dict[str, object]:
    return {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1",
            "command": sys.executable,
            "args": [str(script)],
            "interactiveMode": "Never",
        }
    }


async def test_exec_plugin_token_is_kept_until_rejected(tmp_path: pathlib.Path) -> None:
    cfg = write_config(tmp_path, exec_user(plugin_script(tmp_path, expires_in=None)))
    conn = kubeconfig.load(str(cfg))
    assert await conn.authorization() == "Bearer token-1"
    assert await conn.authorization() == "Bearer token-1"  # no expiry: cached
    assert conn.exec_plugin is not None
    assert conn.exec_plugin.runs == 1
    assert conn.credentials_rejected()  # a 401
    assert await conn.authorization() == "Bearer token-2"


async def test_exec_plugin_runs_again_when_its_credential_expires(tmp_path: pathlib.Path) -> None:
    # Expiring within the refresh margin: every request needs a fresh credential.
    cfg = write_config(tmp_path, exec_user(plugin_script(tmp_path, expires_in=5)))
    conn = kubeconfig.load(str(cfg))
    assert await conn.authorization() == "Bearer token-1"
    assert await conn.authorization() == "Bearer token-2"


async def test_exec_plugin_with_a_long_lived_credential_runs_once(tmp_path: pathlib.Path) -> None:
    cfg = write_config(tmp_path, exec_user(plugin_script(tmp_path, expires_in=3600)))
    conn = kubeconfig.load(str(cfg))
    for _ in range(3):
        assert await conn.authorization() == "Bearer token-1"


async def test_a_failing_exec_plugin_says_why(tmp_path: pathlib.Path) -> None:
    script = tmp_path / "broken.py"
    script.write_text("import sys; sys.exit('no credentials for you')\n")
    conn = kubeconfig.load(str(write_config(tmp_path, exec_user(script))))
    with pytest.raises(Exception, match="no credentials for you"):
        await conn.authorization()


def test_token_file_is_re_read_after_a_401(tmp_path: pathlib.Path) -> None:
    token = tmp_path / "token"
    token.write_text("old")
    conn = kubeconfig.load(str(write_config(tmp_path, {"tokenFile": str(token)})))
    assert conn.bearer_token() == "old"
    stamp = token.stat().st_mtime_ns
    token.write_text("new")  # same size and (put back) mtime: only a 401 forces the re-read
    os.utime(token, ns=(stamp, stamp))
    assert conn.bearer_token() == "old"
    assert conn.credentials_rejected()
    assert conn.bearer_token() == "new"


def test_static_token_cannot_be_refreshed(tmp_path: pathlib.Path) -> None:
    conn = kubeconfig.load(str(write_config(tmp_path, {"token": "t"})))
    assert not conn.credentials_rejected()


def test_proxy_url_and_tls_server_name_are_read(tmp_path: pathlib.Path) -> None:
    cfg = write_config(
        tmp_path,
        {"token": "t"},
        **{"proxy-url": "http://proxy:3128", "tls-server-name": "api.internal"},
    )
    conn = kubeconfig.load(str(cfg))
    assert conn.proxy == "http://proxy:3128"
    assert conn.tls_server_name == "api.internal"


def test_kubeconfig_list_merges_like_kubectl(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir()
    second.mkdir()
    (first / "config").write_text(
        json.dumps({"current-context": "c", "users": [{"name": "u", "user": {"token": "one"}}]})
    )
    (second / "ca.crt").write_text("x")
    (second / "config").write_text(
        json.dumps(
            {
                "current-context": "ignored",
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
                "clusters": [
                    {
                        "name": "c",
                        "cluster": {"server": "https://h", "certificate-authority": "ca.crt"},
                    }
                ],
                "users": [{"name": "u", "user": {"token": "two"}}],
            }
        )
    )
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv(
        "KUBECONFIG", f"{first / 'config'}:{tmp_path / 'missing'}:{second / 'config'}"
    )
    conn = kubeconfig.load()
    assert conn.bearer_token() == "one"  # the first file naming the user wins
    assert conn.ca_file == str(second / "ca.crt")  # relative to the file that holds it
    assert conn.server == "https://h"


async def test_kopf_logs_in_with_the_exec_plugins_token_and_expiry(tmp_path: pathlib.Path) -> None:
    from operators.controllers.kopf_runner import connection_info

    cfg = write_config(tmp_path, exec_user(plugin_script(tmp_path, expires_in=3600)))
    conn = kubeconfig.load(str(cfg))
    first = await connection_info(conn)
    assert (first.scheme, first.token) == ("Bearer", "token-1")
    assert first.expiration is not None
    # kopf logs in again after a 401 (or the expiry): a fresh credential, not the cached one.
    again = await connection_info(conn, rejected=True)
    assert again.token == "token-2"
