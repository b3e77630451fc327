"""Where the API server is and how to authenticate: from a kubeconfig file or the in-cluster
service account. Supports what local control planes and real clusters use: client certificates,
bearer tokens (inline or file), CA bundles (inline or file) and insecure-skip-tls-verify.
"""

from __future__ import annotations

import base64
import dataclasses
import os
import pathlib
import ssl
import tempfile
import time
from typing import Any

import yaml

SERVICE_ACCOUNT_DIR = pathlib.Path("/var/run/secrets/kubernetes.io/serviceaccount")


class ConfigError(RuntimeError):
    """No usable cluster configuration was found."""


@dataclasses.dataclass(frozen=True)
class Connection:
    server: str
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    token: str | None = None
    token_file: str | None = None
    insecure: bool = False
    default_namespace: str = "default"

    def ssl_context(self) -> ssl.SSLContext | bool:
        if not self.server.startswith("https"):
            return False
        ctx = ssl.create_default_context(cafile=self.ca_file)
        if self.insecure:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        if self.cert_file:
            ctx.load_cert_chain(self.cert_file, self.key_file)
        return ctx

    _token_cache: _TokenFile = dataclasses.field(
        default_factory=lambda: _TokenFile(), init=False, compare=False, repr=False
    )

    def bearer_token(self) -> str | None:
        # A projected service-account token rotates: re-read the file when it changes.
        if self.token_file:
            return self._token_cache.read(self.token_file)
        return self.token


class _TokenFile:
    """A token file's content, re-read only when its mtime (or size) changes or after `max_age`
    seconds, instead of a synchronous file read on every request."""

    max_age = 60.0

    def __init__(self) -> None:
        self._path = ""
        self._stamp: tuple[int, int] | None = None
        self._read_at = 0.0
        self._token: str | None = None

    def read(self, path: str) -> str:
        now = time.monotonic()
        try:
            st = os.stat(path)
        except OSError:
            if self._token is not None and path == self._path:
                return self._token  # briefly missing while the kubelet swaps it: keep the last
            raise
        stamp = (st.st_mtime_ns, st.st_size)
        if (
            self._token is None
            or path != self._path
            or stamp != self._stamp
            or now - self._read_at >= self.max_age
        ):
            self._token = pathlib.Path(path).read_text().strip()
            self._path, self._stamp, self._read_at = path, stamp, now
        return self._token


def _materialise(data_b64: str, suffix: str) -> str:
    # ssl wants file paths for certificates; inline *-data fields are written to private temp files.
    fd, path = tempfile.mkstemp(prefix="sluice-", suffix=suffix)
    with os.fdopen(fd, "wb") as handle:
        handle.write(base64.b64decode(data_b64))
    return path


def _resolve(base: pathlib.Path, path: str | None) -> str | None:
    if not path:
        return None
    candidate = pathlib.Path(path)
    return str(candidate if candidate.is_absolute() else base / candidate)


def _named(entries: list[dict[str, Any]], name: str, what: str) -> dict[str, Any]:
    for entry in entries:
        if entry.get("name") == name:
            return dict(entry.get(what) or {})
    raise ConfigError(f"kubeconfig has no {what} named {name!r}")


def from_kubeconfig(path: str | os.PathLike[str], context: str | None = None) -> Connection:
    file = pathlib.Path(path).expanduser()
    doc = yaml.safe_load(file.read_text()) or {}
    ctx_name = context or doc.get("current-context")
    if not ctx_name:
        raise ConfigError(f"{file}: no context given and no current-context")
    ctx = _named(doc.get("contexts") or [], ctx_name, "context")
    cluster = _named(doc.get("clusters") or [], ctx["cluster"], "cluster")
    user = _named(doc.get("users") or [], ctx["user"], "user") if ctx.get("user") else {}
    base = file.parent

    ca_file = _resolve(base, cluster.get("certificate-authority"))
    if cluster.get("certificate-authority-data"):
        ca_file = _materialise(cluster["certificate-authority-data"], ".crt")
    cert_file = _resolve(base, user.get("client-certificate"))
    if user.get("client-certificate-data"):
        cert_file = _materialise(user["client-certificate-data"], ".crt")
    key_file = _resolve(base, user.get("client-key"))
    if user.get("client-key-data"):
        key_file = _materialise(user["client-key-data"], ".key")
    return Connection(
        server=str(cluster["server"]).rstrip("/"),
        ca_file=ca_file,
        cert_file=cert_file,
        key_file=key_file,
        token=user.get("token"),
        token_file=_resolve(base, user.get("tokenFile")),
        insecure=bool(cluster.get("insecure-skip-tls-verify", False)),
        default_namespace=str(ctx.get("namespace") or "default"),
    )


def in_cluster() -> Connection:
    host, port = (
        os.environ.get("KUBERNETES_SERVICE_HOST"),
        os.environ.get("KUBERNETES_SERVICE_PORT"),
    )
    if not host or not port:
        raise ConfigError("not running inside a cluster (KUBERNETES_SERVICE_HOST unset)")
    if ":" in host:  # IPv6 literal
        host = f"[{host}]"
    namespace_file = SERVICE_ACCOUNT_DIR / "namespace"
    return Connection(
        server=f"https://{host}:{port}",
        ca_file=str(SERVICE_ACCOUNT_DIR / "ca.crt"),
        token_file=str(SERVICE_ACCOUNT_DIR / "token"),
        default_namespace=namespace_file.read_text().strip()
        if namespace_file.exists()
        else "default",
    )


def load(kubeconfig: str | None = None, context: str | None = None) -> Connection:
    """An explicit kubeconfig wins; then in-cluster; then $KUBECONFIG; then ~/.kube/config."""
    if kubeconfig:
        return from_kubeconfig(kubeconfig, context)
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        return in_cluster()
    env_path = os.environ.get("KUBECONFIG", "").split(os.pathsep)[0]
    if env_path:
        return from_kubeconfig(env_path, context)
    default = pathlib.Path("~/.kube/config").expanduser()
    if default.exists():
        return from_kubeconfig(default, context)
    raise ConfigError("no kubeconfig given, not in a cluster, and no ~/.kube/config")
