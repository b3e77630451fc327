"""The runtime's client with real credentials against the real API server: an exec credential
plugin (a script that prints a ServiceAccount token), a rotating token file, and an HTTP proxy.

Who the API server thinks we are comes from a SelfSubjectReview, so each test proves which
credential was actually used."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from operators.devcluster.cluster import DevCluster
from operators.install.identity import cluster_entry
from operators.runtime import kubeconfig
from operators.runtime.client import KubeClient

pytestmark = pytest.mark.e2e

ACCOUNTS = ("creds-a", "creds-b")


@pytest.fixture(scope="module")
def tokens(k8s: client.ApiClient) -> Iterator[dict[str, str]]:
    """Two ServiceAccounts (no rights needed: anyone may review themselves) and a token each."""
    core = client.CoreV1Api(k8s)
    minted = {}
    for name in ACCOUNTS:
        core.create_namespaced_service_account("default", {"metadata": {"name": name}})
        minted[name] = core.create_namespaced_service_account_token(
            name, "default", {"spec": {"expirationSeconds": 3600}}
        ).status.token
    yield minted
    for name in ACCOUNTS:
        core.delete_namespaced_service_account(name, "default")


def write_kubeconfig(
    cluster: DevCluster, path: Path, user: Mapping[str, object], **extra: object
) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {"name": "c", "cluster": {**cluster_entry(cluster.kubeconfig), **extra}}
                ],
                "users": [{"name": "u", "user": user}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "c",
            }
        )
    )
    return path


async def whoami(api: KubeClient) -> str:
    review = await api.post(
        "/apis/authentication.k8s.io/v1/selfsubjectreviews",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
    )
    return str(review["status"]["userInfo"]["username"])


async def test_exec_plugin_token_is_used_and_refreshed_after_a_401(
    cluster: DevCluster, tokens: dict[str, str], tmp_path: Path
) -> None:
    # First run: a token the API server rejects; every later run: creds-a's real token.
    runs = tmp_path / "runs"
    script = tmp_path / "credential-plugin.py"
    script.write_text(
        "import json, pathlib\n"
        f"runs = pathlib.Path({str(runs)!r})\n"
        "n = int(runs.read_text()) + 1 if runs.exists() else 1\n"
        "runs.write_text(str(n))\n"
        f"token = 'not-a-token' if n == 1 else {tokens['creds-a']!r}\n"
        "print(json.dumps({'apiVersion': 'client.authentication.k8s.io/v1beta1',\n"
        "                  'kind': 'ExecCredential', 'status': {'token': token}}))\n"
    )
    user = {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1beta1",
            "command": sys.executable,
            "args": [str(script)],
        }
    }
    config = write_kubeconfig(cluster, tmp_path / "exec.kubeconfig", user)
    async with KubeClient(kubeconfig.load(str(config))) as api:
        assert await whoami(api) == "system:serviceaccount:default:creds-a"
        assert await whoami(api) == "system:serviceaccount:default:creds-a"
    assert runs.read_text() == "2"  # rejected once, then cached


async def test_rotated_token_file_is_picked_up(
    cluster: DevCluster, tokens: dict[str, str], tmp_path: Path
) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(tokens["creds-a"])
    config = write_kubeconfig(cluster, tmp_path / "file.kubeconfig", {"tokenFile": str(token_file)})
    async with KubeClient(kubeconfig.load(str(config))) as api:
        assert await whoami(api) == "system:serviceaccount:default:creds-a"
        # What the kubelet does to a projected token: a new file moved into place.
        fresh = tmp_path / "token.new"
        fresh.write_text(tokens["creds-b"])
        fresh.replace(token_file)
        assert await whoami(api) == "system:serviceaccount:default:creds-b"


class ConnectProxy:
    """A minimal HTTP CONNECT proxy that counts the tunnels it opened."""

    def __init__(self) -> None:
        self.tunnels: list[str] = []
        self.server: asyncio.Server | None = None

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return int(self.server.sockets[0].getsockname()[1])

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        request = await reader.readuntil(b"\r\n\r\n")
        target = request.split(b" ")[1].decode()
        self.tunnels.append(target)
        host, port = target.rsplit(":", 1)
        up_reader, up_writer = await asyncio.open_connection(host, int(port))
        writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            finally:
                dst.close()

        await asyncio.gather(
            pipe(reader, up_writer), pipe(up_reader, writer), return_exceptions=True
        )

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()


async def test_requests_go_through_the_clusters_proxy_url(
    cluster: DevCluster, tokens: dict[str, str], tmp_path: Path
) -> None:
    proxy = ConnectProxy()
    port = await proxy.start()
    try:
        config = write_kubeconfig(
            cluster,
            tmp_path / "proxy.kubeconfig",
            {"token": tokens["creds-b"]},
            **{"proxy-url": f"http://127.0.0.1:{port}"},
        )
        async with KubeClient(kubeconfig.load(str(config))) as api:
            assert await whoami(api) == "system:serviceaccount:default:creds-b"
        assert proxy.tunnels == [cluster.server.removeprefix("https://")]
    finally:
        await proxy.stop()
