"""Settings of the scheduler runtime: one typed dataclass, filled from flags and `SLUICE_*` env.

Every field has a docstring; `docs/operations.md` lists them with their flags and variables.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import socket
import uuid
from argparse import ArgumentParser as ArgParser
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar


def default_identity() -> str:
    return os.environ.get("POD_NAME") or f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"


@dataclasses.dataclass(frozen=True)
class SchedulerSettings:
    kubeconfig: str | None = None
    """Path of a kubeconfig; unset means in-cluster config, then `$KUBECONFIG`, then ~/.kube/config."""

    context: str | None = None
    """kubeconfig context to use; unset means the file's current-context."""

    scheduler_name: str = "sluice"
    """Pods whose `spec.schedulerName` equals this are scheduled by this process."""

    bind_concurrency: int = 64
    """Binding POSTs (and evictions) in flight at once; the API server's ceiling decides the best value."""

    status_concurrency: int = 16
    """PodGroup status writes in flight at once."""

    status_count_interval_seconds: float = 10.0
    """A PodGroup status change of the member counts (`running`, `pending`) and condition reasons
    alone is written this long after it is first seen, with what came meanwhile; phase changes
    and condition status flips go out at once (and carry the rest). 0: every change at once."""

    status_cluster_interval_seconds: float = 1.0
    """Queue and Pool status: at most one write per object this often (the newest value; a
    session changes their counts). 0: every change at once."""

    coalesce_seconds: float = 0.1
    """After a relevant change, wait this long for more before running a cycle (bursts -> one cycle);
    counted from the first change not served yet, so changes that came during a longer cycle
    start the next one as soon as it ends."""

    safety_tick_seconds: float = 30.0
    """Run a cycle at least this often while pending work exists, even without watch events."""

    half_bound_grace_seconds: float = 15.0
    """A gang found with fewer than minMember pods bound (e.g. after a crash mid-bind) that the next
    cycles cannot complete within this time is evicted whole rather than left half-running."""

    assume_ttl_seconds: float = 60.0
    """An assumed binding not confirmed by the watch within this time is forgotten (safety net)."""

    stale_gang_grace_seconds: float = 60.0
    """A running gang below its minimum this long is evicted whole (stale gang) unless its
    PodGroup sets `staleGangGraceSeconds`; negative: never."""

    usage_half_life_seconds: float = 86_400.0
    """Time-based fair share: a queue's past GPU usage counts half after this long (0: no decay)."""

    usage_window_seconds: float = 7 * 86_400.0
    """Time-based fair share: usage older than this is dropped (a sliding window of 7 buckets)."""

    usage_write_seconds: float = 60.0
    """Each Queue's `status.usage` is written at most this often, and only when it changed; 0
    turns usage accounting off (parents' `timeBasedFairShare` then has nothing to correct by)."""

    leader_election: bool = True
    """Take a coordination.k8s.io Lease before scheduling; only the holder binds."""

    lease_name: str = "sluice-scheduler"
    """Name of the Lease object."""

    lease_namespace: str = "kube-system"
    """Namespace of the Lease object."""

    lease_duration_seconds: float = 15.0
    """A standby takes over this long after the leader's last renewal."""

    renew_deadline_seconds: float = 10.0
    """The leader steps down (the process exits) when it could not renew for this long."""

    retry_period_seconds: float = 2.0
    """How often the leader renews and a standby retries."""

    identity: str = dataclasses.field(default_factory=default_identity)
    """Holder identity in the Lease: `$POD_NAME` in a cluster (stable across container restarts,
    so a restarted scheduler re-takes its own lease at once), else `<hostname>_<random>` so two
    processes on one machine can never both believe they hold it."""

    metrics_host: str = "0.0.0.0"
    """Address of the /metrics, /healthz and /readyz server."""

    metrics_port: int = 8080
    """Port of the /metrics, /healthz and /readyz server; 0 disables it."""

    watch_timeout_seconds: int = 300
    """Server-side timeout of each watch request; the watch resumes from the last resourceVersion."""

    request_timeout_seconds: float = 30.0
    """Timeout of ordinary (non-watch) API requests."""

    log_format: str = "text"
    """`text` or `json` (one JSON object per line)."""

    log_level: str = "INFO"
    """Python logging level name."""


SHARED_FIELDS = frozenset({"kubeconfig", "context", "log_format", "log_level"})
"""Fields every operator of one process shares (same flag, same variable); the others are prefixed
with the operator's name when it asks for a prefix, so `all` can tell `--jobs-health-port` from
the scheduler's `--metrics-port`."""

T = TypeVar("T")


def _kind(field: dataclasses.Field[Any]) -> str:
    return field.type if isinstance(field.type, str) else getattr(field.type, "__name__", "")


def _coerce(field: dataclasses.Field[Any], raw: str) -> Any:
    kind = _kind(field)
    if kind.startswith("bool"):
        return raw.strip().lower() in {"1", "true", "yes", "on"}
    if kind.startswith("int"):
        return int(raw)
    if kind.startswith("float"):
        return float(raw)
    return raw


def _prefixed(field_name: str, prefix: str) -> str:
    if not prefix or field_name in SHARED_FIELDS:
        return field_name
    return f"{prefix}_{field_name}"


def env_name(field_name: str, prefix: str = "") -> str:
    return "SLUICE_" + _prefixed(field_name, prefix).upper()


def flag_name(field_name: str, prefix: str = "") -> str:
    return "--" + _prefixed(field_name, prefix).replace("_", "-")


def load_settings(
    cls: type[T],
    overrides: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
    prefix: str = "",
    defaults: Mapping[str, Any] | None = None,
) -> T:
    """The dataclass's defaults (or the caller's `defaults`), then `SLUICE_[<PREFIX>_]<FIELD>`
    environment variables, then explicit overrides (flags; None means unset)."""
    env = os.environ if environ is None else environ
    values: dict[str, Any] = dict(defaults or {})
    for field in dataclasses.fields(cls):  # type: ignore[arg-type]
        raw = env.get(env_name(field.name, prefix))
        if raw is not None and raw != "":
            values[field.name] = _coerce(field, raw)
    values.update({k: v for k, v in (overrides or {}).items() if v is not None})
    return cls(**values)


def settings_parser(cls: type[Any], prog: str, description: str, prefix: str = "") -> ArgParser:
    """One flag per field of the settings dataclass `cls` (booleans as --x/--no-x)."""
    parser = ArgParser(prog=prog, description=description)
    for field in dataclasses.fields(cls):
        kind = _kind(field)
        help_text = f"(env {env_name(field.name, prefix)})"
        flag = flag_name(field.name, prefix)
        if kind.startswith("bool"):
            parser.add_argument(
                flag,
                dest=field.name,
                action=argparse.BooleanOptionalAction,
                default=None,
                help=help_text,
            )
        else:
            conv: Any = (
                int if kind.startswith("int") else float if kind.startswith("float") else str
            )
            parser.add_argument(flag, dest=field.name, type=conv, default=None, help=help_text)
    return parser


def parse_settings(
    cls: type[T],
    argv: Sequence[str],
    prog: str,
    description: str,
    prefix: str = "",
    defaults: Mapping[str, Any] | None = None,
) -> T:
    """Settings from flags (unknown flags belong to other operators under `all`), env, defaults."""
    args, _unknown = settings_parser(cls, prog, description, prefix).parse_known_args(list(argv))
    return load_settings(cls, vars(args), prefix=prefix, defaults=defaults)


def settings_from(
    overrides: Mapping[str, Any] | None = None, environ: Mapping[str, str] | None = None
) -> SchedulerSettings:
    """The scheduler's settings: defaults, then `SLUICE_<FIELD>` variables, then overrides."""
    return load_settings(SchedulerSettings, overrides, environ)
