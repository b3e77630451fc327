"""How a kopf operator runs: alone (`python -m operators <name>`) or beside the scheduler and the
other operators in one process and one event loop (`python -m operators all`).

An operator is a `KopfOperator`: a name and a `register(registry, context)` function that adds its
handlers to a fresh `kopf.OperatorRegistry` (one registry per operator, never kopf's global one,
so operators in one process do not see each other's handlers). `main(operator, argv)` is what the
table in `operators/__main__.py` points at.

Why not `kopf.operator()`: it assumes it owns the event loop. When it stops, it cancels every task
of the loop it did not see at start-up (the scheduler's and the other operators' too); its
SIGINT/SIGTERM handlers replace everyone else's; and when it is cancelled without its stop flag it
schedules a SIGKILL of the thread (`settings.process.ultimate_exiting_timeout`). The runner
therefore spawns kopf's root tasks itself (`kopf.spawn_tasks`, kopf's documented way to embed),
stops only those, routes stop signals through `operators.runtime.signals`, and turns the SIGKILL
timer off.

Defaults every Sluice kopf operator gets (see `kopf_settings`):
- standalone (no peering objects, no peering CRD): one replica per operator; it is level-based and
  idempotent, so a second replica during a rollout does no harm;
- kopf's own bookkeeping under `<name>.sluice.dev/...` annotations, only ever written on objects
  that have change handlers (never on Pods or Nodes: operators watch those with `on.event` and
  `index`, which persist nothing);
- log records become Kubernetes Events only from WARNING up (operators post their own Events);
- listings are not paged: a page read after etcd compacted the list's revision (a slow consumer
  of a paged re-list) gets 410 Gone, which kopf treats as fatal, and the operator stopped. kopf
  lists only the operators' own kinds and nodes (at most thousands); pods, the kind that grows
  to tens of thousands, are read by `pod_watch`'s informers, which page and re-list safely;
- kopf starts only once API discovery lists every resource it serves (`kopf_discovery`), so an
  operator started while the API server warms up does not give up on them;
- the API connection from the same kubeconfig resolution as the scheduler
  (`operators.runtime.kubeconfig.load`), and a `KubeClient` on it for the operator's own writes.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Any, cast

import kopf
from kopf._cogs.structs import dicts
from kopf._cogs.structs.references import Insights

from operators.controllers import kopf_discovery
from operators.runtime import kubeconfig, logs, signals
from operators.runtime.client import KubeClient, watch_read_timeout
from operators.runtime.httpserver import ProbeServer
from operators.runtime.operator_metrics import OperatorMetrics
from operators.runtime.settings import parse_settings

log = logging.getLogger(__name__)

STOP_GRACE_SECONDS = 10.0


@dataclasses.dataclass(frozen=True)
class KopfSettings:
    """Settings of one kopf operator. Flags are `--<operator>-<field>` and variables
    `SLUICE_<OPERATOR>_<FIELD>`, except the shared `kubeconfig`, `context`, `log_format` and
    `log_level`, which are the same flags and variables for every operator of the process."""

    kubeconfig: str | None = None
    """Path of a kubeconfig; unset means in-cluster config, then `$KUBECONFIG`, then ~/.kube/config."""

    context: str | None = None
    """kubeconfig context to use; unset means the file's current-context."""

    namespaces: str = ""
    """Comma-separated namespaces (globs allowed) to serve; empty means the whole cluster."""

    health_host: str = "0.0.0.0"
    """Address of the liveness endpoint."""

    health_port: int = 0
    """Port of the liveness endpoint (`/healthz`, with `/readyz` and the operator's Prometheus
    `/metrics`); 0 disables it."""

    request_timeout_seconds: float = 30.0
    """Timeout of ordinary (non-watch) API requests, kopf's and the operator's own."""

    watch_timeout_seconds: int = 300
    """Server-side timeout of each watch request; the watch resumes from the last resourceVersion."""

    client_concurrency: int = 64
    """Open connections of the operator's own API client (bounds its writes in flight)."""

    event_level: str = "WARNING"
    """Log records of handlers at or above this level are also posted as Kubernetes Events."""

    log_format: str = "text"
    """`text` or `json` (one JSON object per line)."""

    log_level: str = "INFO"
    """Python logging level name."""


@dataclasses.dataclass
class OperatorContext:
    """What `register` gets: its settings, the API connection and a client for its own writes."""

    name: str
    settings: KopfSettings
    connection: kubeconfig.Connection
    client: KubeClient
    stop: asyncio.Event
    """Set when the operator is asked to stop; background work of the operator watches it."""
    metrics: OperatorMetrics = dataclasses.field(default_factory=lambda: OperatorMetrics(""))
    """Served at `/metrics` on the health port."""


Register = Callable[[kopf.OperatorRegistry, OperatorContext], None]
Configure = Callable[[kopf.OperatorSettings], None]


def _no_changes(_: kopf.OperatorSettings) -> None:
    return None


class NoDiffBase(kopf.AnnotationsDiffBaseStorage):
    """A diff base that is always empty, for operators with `on.event` handlers only. kopf
    builds every event's diff base (a deep copy of the whole object, status included: 10 % of
    the jobs operator's CPU under load) though only change handlers and daemons read it."""

    def build(
        self, *, body: kopf.Body, extra_fields: Iterable[dicts.FieldSpec] | None = None
    ) -> kopf.BodyEssence:
        return cast(kopf.BodyEssence, {})

    def fetch(self, *, body: kopf.Body) -> kopf.BodyEssence | None:
        return None


def events_only(ks: kopf.OperatorSettings) -> None:
    """`configure` for an operator whose registry has only `on.event` handlers (no
    create/update/delete/resume, no daemons): no diff base is built for its events."""
    ks.persistence.diffbase_storage = NoDiffBase()


@dataclasses.dataclass(frozen=True)
class KopfOperator:
    name: str
    """Operator name: the `python -m operators <name>` argument and the flag/variable prefix."""

    register: Register
    """Adds the operator's handlers to the registry it is given."""

    description: str = ""
    configure: Configure = _no_changes
    """Operator-specific changes to kopf's settings, applied after the runner's defaults."""

    health_port: int = 0
    """Default liveness port of this operator (distinct per operator, so `all` can serve each)."""

    settings_class: type[KopfSettings] = KopfSettings
    """The operator's settings: `KopfSettings` or a subclass with its own fields (flags and
    variables prefixed like the rest); `register` reads them from `OperatorContext.settings`."""

    @property
    def prefix(self) -> str:
        return self.name.replace("-", "_")


def kopf_settings(operator: KopfOperator, settings: KopfSettings) -> kopf.OperatorSettings:
    ks = kopf.OperatorSettings()
    ks.peering.standalone = True
    ks.peering.mandatory = False
    ks.process.ultimate_exiting_timeout = None
    prefix = f"{operator.name}.sluice.dev"
    ks.persistence.finalizer = f"{prefix}/finalizer"
    ks.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=prefix)
    ks.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=prefix, key="last-handled-configuration"
    )
    ks.posting.level = logging.getLevelNamesMapping().get(settings.event_level.upper(), 30)
    ks.networking.request_timeout = settings.request_timeout_seconds
    ks.watching.server_timeout = settings.watch_timeout_seconds
    # One request per listing (module text: kopf cannot resume a paged one after 410 Gone).
    ks.watching.chunk_size = None
    ks.watching.client_timeout = watch_read_timeout(settings.watch_timeout_seconds)
    operator.configure(ks)
    return ks


async def connection_info(
    conn: kubeconfig.Connection, *, rejected: bool = False
) -> kopf.ConnectionInfo:
    """kopf's credentials for the same cluster and identity the rest of Sluice uses: bearer token,
    token file, client certificate, or an exec credential plugin's output (with its expiry, after
    which kopf logs in again). `rejected`: kopf logs in again only after a 401 or that expiry, so
    cached credentials (a token file's, an exec plugin's) are dropped first."""
    if rejected:
        conn.credentials_rejected()
    scheme, _, token = (await conn.authorization() or "").partition(" ")
    plugin = conn.exec_plugin
    cert, key = conn.cert_file, conn.key_file
    if plugin is not None and plugin.cert_file:
        cert, key = plugin.cert_file, plugin.key_file
    return kopf.ConnectionInfo(
        server=conn.server,
        ca_path=conn.ca_file,
        insecure=conn.insecure or None,
        token=token or None,
        scheme=scheme or None,
        certificate_path=cert,
        private_key_path=key,
        default_namespace=conn.default_namespace,
        expiration=plugin.expiry if plugin is not None else None,
    )


def namespaces(settings: KopfSettings) -> list[str]:
    return [ns.strip() for ns in settings.namespaces.split(",") if ns.strip()]


async def run(
    operator: KopfOperator,
    settings: KopfSettings,
    *,
    stop: asyncio.Event | None = None,
    ready: asyncio.Event | None = None,
) -> int:
    """Run until `stop` is set, a stop signal arrives, or kopf's root tasks end; 0 on a clean stop.

    Cancelling the calling task stops the operator too (and re-raises the cancellation)."""
    stop = stop if stop is not None else asyncio.Event()
    conn = kubeconfig.load(settings.kubeconfig, settings.context)
    client = KubeClient(
        conn, limit=settings.client_concurrency, request_timeout=settings.request_timeout_seconds
    )
    registry = kopf.OperatorRegistry()

    logins = 0

    @kopf.on.login(registry=registry)
    async def _login(**_: Any) -> kopf.ConnectionInfo:
        nonlocal logins
        logins += 1
        return await connection_info(conn, rejected=logins > 1)

    metrics = OperatorMetrics(operator.name)
    context = OperatorContext(operator.name, settings, conn, client, stop, metrics)
    operator.register(registry, context)
    served = namespaces(settings)
    # Our own probe server instead of kopf's liveness endpoint: the same `/healthz` (alive while
    # the loop answers), plus `/metrics`, on the one port the install already probes.
    serving = False
    probe = ProbeServer(metrics.registry, alive=lambda: not stop.is_set(), ready=lambda: serving)
    if settings.health_port:
        await probe.start(settings.health_host, settings.health_port)
    # kopf resolves its resources from discovery once: started while the API server warms up
    # (CRD groups missing or 503), it would never serve them (see kopf_discovery).
    selectors = kopf_discovery.served_selectors(registry)
    unsubscribe = signals.on_stop_signal(stop.set)
    try:
        discovered = await kopf_discovery.wait_until_discovered(
            client, selectors, stop, operator=operator.name
        )
    except asyncio.CancelledError:
        await client.close()
        await probe.stop()
        raise
    finally:
        unsubscribe()
    if not discovered:
        await client.close()
        await probe.stop()
        log.info("operator %s stopped before it started", operator.name)
        return 0
    serving = True
    insights = Insights()
    tasks = await kopf.spawn_tasks(
        insights=insights,
        registry=registry,
        settings=kopf_settings(operator, settings),
        standalone=True,
        clusterwide=not served,
        namespaces=served,
        stop_flag=stop,
        ready_flag=ready,
    )
    # Should kopf still resolve without some resource, end (code 1) so the process is restarted,
    # rather than run for ever without serving it.
    check = kopf_discovery.unserved(insights, selectors, stop, operator=operator.name)
    tasks = [*tasks, asyncio.create_task(check, name="served resources check")]
    # After spawn_tasks: it has just replaced the loop's signal handlers with its own.
    unsubscribe = signals.on_stop_signal(stop.set)
    log.info("operator %s started (%s)", operator.name, ", ".join(served) or "cluster-wide")
    try:
        done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        stop.set()
        await _stop_tasks(tasks)
        raise
    finally:
        unsubscribe()
        await client.close()
        await probe.stop()
    await _stop_tasks(pending)
    failed = [t for t in done if not t.cancelled() and t.exception() is not None]
    for task in failed:
        log.error(
            "operator %s: %s failed", operator.name, task.get_name(), exc_info=task.exception()
        )
    log.info("operator %s stopped", operator.name)
    return 1 if failed or not stop.is_set() else 0


async def _stop_tasks(tasks: Collection[asyncio.Task[Any]]) -> None:
    """Give kopf's root tasks a moment to finish on the stop flag, then cancel what remains.
    Each root task stops its own sub-tasks (watchers, workers) when cancelled."""
    pending = {t for t in tasks if not t.done()}
    if pending:
        _, pending = await asyncio.wait(pending, timeout=STOP_GRACE_SECONDS)
    for task in pending:
        task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.gather(*pending, return_exceptions=True)


def parse(operator: KopfOperator, argv: Sequence[str]) -> KopfSettings:
    return parse_settings(
        operator.settings_class,
        argv,
        prog=f"python -m operators {operator.name}",
        description=operator.description,
        prefix=operator.prefix,
        defaults={"health_port": operator.health_port},
    )


async def main(operator: KopfOperator, argv: Sequence[str]) -> int:
    """Entry point for `operators/__main__.py`: parse flags/env, configure logs, run."""
    settings = parse(operator, argv)
    logs.configure(settings.log_format, settings.log_level)
    # kopf reports every handler call at INFO: one line per watch event of every object.
    logging.getLogger("kopf.objects").setLevel(logging.WARNING)
    try:
        return await run(operator, settings)
    except (kubeconfig.ConfigError, OSError) as err:
        log.error("operator %s cannot start: %s", operator.name, err)
        return 2
