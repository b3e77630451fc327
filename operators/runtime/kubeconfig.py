"""Where the API server is and how to authenticate: from a kubeconfig file or the in-cluster
service account. Supports what local control planes and real clusters use: client certificates,
bearer tokens (inline or a file that rotates, as projected service-account tokens do), exec
credential plugins (EKS/GKE/AKS helpers, `kubelogin`: run through kubernetes_asyncio's
ExecProvider, cached until they expire or the API server rejects them), CA bundles (inline or
file), `tls-server-name`, `insecure-skip-tls-verify`, per-cluster `proxy-url` and, without one,
the usual HTTPS_PROXY/NO_PROXY environment. `$KUBECONFIG` may list several files, merged the way
kubectl merges them (the first file naming an entry wins).
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import datetime as dt
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
    proxy: str | None = None
    """`proxy-url` of the cluster entry; None means the HTTPS_PROXY/NO_PROXY environment."""
    tls_server_name: str | None = None
    exec_plugin: ExecPlugin | None = dataclasses.field(default=None, compare=False)

    def ssl_context(self) -> ssl.SSLContext | bool:
        if not self.server.startswith("https"):
            return False
        ctx = ssl.create_default_context(cafile=self.ca_file)
        if self.insecure:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        cert, key = self.cert_file, self.key_file
        if self.exec_plugin is not None and self.exec_plugin.cert_file:
            cert, key = self.exec_plugin.cert_file, self.exec_plugin.key_file
        if cert:
            ctx.load_cert_chain(cert, key)
        return ctx

    @property
    def tls_generation(self) -> int:
        """Changes when an exec plugin hands out a new client certificate (new TLS context)."""
        return self.exec_plugin.cert_generation if self.exec_plugin is not None else 0

    async def authorization(self) -> str | None:
        """The Authorization header value: an exec plugin's token (run when needed), else the
        bearer token. Cheap when nothing expired: no subprocess, no file read."""
        if self.exec_plugin is not None:
            header = await self.exec_plugin.authorization()
            if header is not None or self.exec_plugin.cert_file:
                return header
        token = self.bearer_token()
        return f"Bearer {token}" if token else None

    def credentials_rejected(self) -> bool:
        """After a 401: forget cached credentials. True when a retry may get fresh ones."""
        if self.exec_plugin is not None:
            self.exec_plugin.invalidate()
            return True
        if self.token_file:
            self._token_cache.invalidate()
            return True
        return False

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

    def invalidate(self) -> None:
        self._stamp = None

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


class ExecPlugin:
    """A kubeconfig `user.exec` credential plugin, run by kubernetes_asyncio's ExecProvider.

    Its ExecCredential is kept until `expirationTimestamp` (minus a margin) or, without one, until
    the API server answers 401; concurrent requests share one run of the plugin.
    """

    margin = dt.timedelta(seconds=10)

    def __init__(self, doc: dict[str, Any], context: str, base: pathlib.Path) -> None:
        # Imported here: it brings kubernetes_asyncio's whole API client (~60 MB of RSS), which
        # only a kubeconfig with an exec plugin needs.
        from kubernetes_asyncio.config.kube_config import KubeConfigLoader

        self._loader = KubeConfigLoader(
            config_dict=doc, active_context=context, config_base_path=str(base)
        )
        self._header: str | None = None
        self._expiry: dt.datetime | None = None
        self._fresh = False
        self._lock = asyncio.Lock()
        self.cert_file: str | None = None
        self.key_file: str | None = None
        self.cert_generation = 0
        self.runs = 0

    def _valid(self) -> bool:
        if not self._fresh:
            return False
        return self._expiry is None or dt.datetime.now(dt.UTC) < self._expiry - self.margin

    def invalidate(self) -> None:
        self._fresh = False

    @property
    def expiry(self) -> dt.datetime | None:
        """When the current credential must be replaced (its expiry less the margin)."""
        return None if self._expiry is None else self._expiry - self.margin

    async def authorization(self) -> str | None:
        if self._valid():
            return self._header
        async with self._lock:
            if not self._valid():
                await self._run()
        return self._header

    async def _run(self) -> None:
        loader = self._loader
        # The loader skips the plugin while its own expiry lies ahead; this class decides when.
        loader.__dict__.pop("exec_plugin_expiry", None)
        loader.__dict__.pop("token", None)
        await loader.load_from_exec_plugin()
        self.runs += 1
        token = loader.__dict__.get("token")
        self._header = str(token) if token else None
        expiry = loader.__dict__.get("exec_plugin_expiry")
        self._expiry = expiry if isinstance(expiry, dt.datetime) else None
        cert = loader.__dict__.get("cert_file")
        if cert and cert != self.cert_file:
            self.cert_file, self.key_file = str(cert), str(loader.__dict__.get("key_file"))
            self.cert_generation += 1
        self._fresh = True


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


def _merged(files: list[pathlib.Path]) -> dict[str, Any]:
    """kubectl's merge of several kubeconfig files: the first file to name an entry (or to set
    current-context) wins. Relative paths are made absolute against the file that holds them."""
    merged: dict[str, Any] = {"clusters": [], "contexts": [], "users": []}
    for file in files:
        doc = yaml.safe_load(file.read_text()) or {}
        merged.setdefault("current-context", doc.get("current-context"))
        for section, fields in (
            ("clusters", ("certificate-authority",)),
            ("users", ("client-certificate", "client-key", "tokenFile")),
            ("contexts", ()),
        ):
            known = {entry.get("name") for entry in merged[section]}
            what = section[:-1]
            for entry in doc.get(section) or []:
                if entry.get("name") in known:
                    continue
                body = dict(entry.get(what) or {})
                for key in fields:
                    body[key] = _resolve(file.parent, body.get(key))
                merged[section].append({"name": entry.get("name"), what: body})
    return merged


def from_kubeconfig(
    path: str | os.PathLike[str] | list[pathlib.Path], context: str | None = None
) -> Connection:
    files = path if isinstance(path, list) else [pathlib.Path(path).expanduser()]
    file = files[0]
    doc = _merged(files)
    ctx_name = context or doc.get("current-context")
    if not ctx_name:
        raise ConfigError(f"{file}: no context given and no current-context")
    ctx = _named(doc.get("contexts") or [], ctx_name, "context")
    cluster = _named(doc.get("clusters") or [], ctx["cluster"], "cluster")
    user = _named(doc.get("users") or [], ctx["user"], "user") if ctx.get("user") else {}
    base = file.parent
    plugin = ExecPlugin(doc, ctx_name, base) if user.get("exec") else None

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
        proxy=cluster.get("proxy-url") or None,
        tls_server_name=cluster.get("tls-server-name") or None,
        exec_plugin=plugin,
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
    env_paths = [
        pathlib.Path(p).expanduser()
        for p in os.environ.get("KUBECONFIG", "").split(os.pathsep)
        if p
    ]
    existing = [p for p in env_paths if p.exists()]
    if existing:
        return from_kubeconfig(existing, context)
    if env_paths:
        raise ConfigError(f"$KUBECONFIG names no existing file: {os.environ['KUBECONFIG']}")
    default = pathlib.Path("~/.kube/config").expanduser()
    if default.exists():
        return from_kubeconfig(default, context)
    raise ConfigError("no kubeconfig given, not in a cluster, and no ~/.kube/config")
