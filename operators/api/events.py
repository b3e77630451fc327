"""events.sluice.dev/v1alpha1: EventSink, an admin-defined target for job lifecycle hooks.

Jobs may only name sinks (never URLs), so a user cannot make the operator call an arbitrary
address (no SSRF); which sinks exist is an admin decision, hence cluster scope.
"""

from __future__ import annotations

import base64
import binascii
from enum import StrEnum
from typing import Annotated, ClassVar, Final, Literal
from urllib.parse import urlsplit

from pydantic import AwareDatetime, Field, field_validator, model_validator

from operators.api import labels
from operators.api.base import (
    MAX_LABEL,
    MAX_LIST,
    Conditions,
    DnsLabel,
    DnsSubdomain,
    Rule,
    SluiceModel,
    StatusModel,
)
from operators.api.batch import TransitionLevel, TransitionTarget
from operators.api.resource import AGE, PrinterColumn, Resource

__all__ = [
    "CLOUDEVENT_TYPE_PREFIX",
    "EventFilter",
    "EventSink",
    "EventSinkSpec",
    "EventSinkStatus",
    "RetryPolicy",
    "SecretKeyRef",
    "SinkKind",
]

GROUP = labels.EVENTS_GROUP
API_VERSION: Final = "events.sluice.dev/v1alpha1"
#: CloudEvents `type` of a delivered transition is `<prefix>.<level>.<to-phase>` in lower case,
#: e.g. `dev.sluice.job.running`.
CLOUDEVENT_TYPE_PREFIX = "dev.sluice"
MAX_URL = 2048
MAX_BATCH = 1000


class SinkKind(StrEnum):
    HYBRID_JOB = "HybridJob"
    VC_JOB = "VCJob"
    POD_GROUP = "PodGroup"
    QUEUE = "Queue"


class SecretKeyRef(SluiceModel):
    """A key of a Secret holding a bearer token sent as `Authorization: Bearer <token>`."""

    name: DnsSubdomain
    namespace: DnsLabel
    key: Annotated[str, Field(min_length=1, max_length=MAX_LABEL)] = "token"


class EventFilter(SluiceModel):
    """Which transitions go to the sink. Every unset list matches everything, except that
    PodGroup and Queue transitions go only to sinks that list their kind in `kinds` (each one
    costs writes to the object: docs/events.md)."""

    namespaces: list[DnsLabel] | None = Field(
        default=None,
        max_length=MAX_LIST,
        description="Namespaces of jobs and PodGroups; a sink with this set gets no Queue events.",
    )
    kinds: list[SinkKind] | None = Field(
        default=None,
        max_length=4,
        description="Unset: both job kinds. PodGroup and Queue only when listed.",
    )
    levels: list[TransitionLevel] | None = Field(
        default=None, max_length=3, description="Levels of job transitions (Job, Task, Replica)."
    )
    transitions: list[TransitionTarget] | None = Field(
        default=None,
        max_length=64,
        description="Target phases (e.g. Running, Failed, WillEvict).",
    )


class RetryPolicy(SluiceModel):
    """Exponential backoff between delivery attempts: backoff, 2x backoff, ... up to max."""

    max_attempts: int = Field(default=10, ge=1, le=1000)
    backoff_seconds: int = Field(default=1, ge=1, le=3600)
    max_backoff_seconds: int = Field(default=300, ge=1, le=86400)

    cel_rules: ClassVar = (
        Rule(
            "!has(self.backoffSeconds) || !has(self.maxBackoffSeconds) || "
            "self.backoffSeconds <= self.maxBackoffSeconds",
            "spec.retry.backoffSeconds must not exceed spec.retry.maxBackoffSeconds",
            field_path=".backoffSeconds",
        ),
    )

    @model_validator(mode="after")
    def _order(self) -> RetryPolicy:
        if self.backoff_seconds > self.max_backoff_seconds:
            raise ValueError(self.cel_rules[0].message)
        return self


class EventSinkSpec(SluiceModel):
    """Where and how to deliver CloudEvents 1.0 (structured JSON mode over HTTP, at least once)."""

    url: str = Field(min_length=1, max_length=MAX_URL, description="http:// or https:// URL.")
    ca_bundle: str | None = Field(
        default=None,
        max_length=1 << 20,
        json_schema_extra={"format": "byte"},
        description="PEM CA bundle (base64) to verify an https sink.",
    )
    auth_secret_ref: SecretKeyRef | None = None
    filter: EventFilter | None = None
    retry: RetryPolicy | None = None
    timeout_seconds: int | None = Field(
        default=None, ge=1, le=300, description="Per-attempt timeout; unset means 10."
    )
    suspend: bool = Field(default=False, description="Keep events in the outbox, send nothing.")
    batch_size: int | None = Field(
        default=None,
        ge=1,
        le=MAX_BATCH,
        description="Unset or 1: one event per POST (structured mode). Above 1: CloudEvents "
        "batched mode (a JSON array, Content-Type application/cloudevents-batch+json) of up to "
        "this many consecutive events of one object, acknowledged (or refused) as a whole.",
    )

    cel_rules: ClassVar = (
        Rule(
            "isURL(self.url) && url(self.url).getScheme() in ['http', 'https'] "
            "&& url(self.url).getHostname() != ''",
            "spec.url must be an absolute http:// or https:// URL",
            field_path=".url",
        ),
        # A bearer token over plain HTTP is readable on the wire; a CA means nothing without TLS.
        Rule(
            "(!has(self.authSecretRef) && !has(self.caBundle)) || "
            "(isURL(self.url) && url(self.url).getScheme() == 'https')",
            "spec.authSecretRef and spec.caBundle need an https:// url",
            field_path=".url",
        ),
    )

    @model_validator(mode="after")
    def _secrets_need_tls(self) -> EventSinkSpec:
        if (self.auth_secret_ref or self.ca_bundle) and urlsplit(self.url).scheme != "https":
            raise ValueError(self.cel_rules[1].message)
        return self

    @field_validator("ca_bundle")
    @classmethod
    def _base64(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                base64.b64decode(value, validate=True)
            except (binascii.Error, ValueError):
                raise ValueError("spec.caBundle must be base64-encoded PEM") from None
        return value

    @field_validator("url")
    @classmethod
    def _http_only(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"{cls.cel_rules[0].message}, got {value!r}")
        return value


class EventSinkStatus(StatusModel):
    delivered: int | None = Field(default=None, ge=0)
    failed: int | None = Field(default=None, ge=0, description="Events given up on.")
    pending: int | None = Field(default=None, ge=0, description="Events in the outbox.")
    last_delivery_time: AwareDatetime | None = None
    last_error: str | None = None
    observed_generation: int | None = None
    conditions: Conditions | None = None


class EventSink(Resource):
    """An HTTP endpoint that receives job lifecycle events as CloudEvents."""

    group: ClassVar = GROUP
    plural: ClassVar = "eventsinks"
    scope: ClassVar = "Cluster"
    short_names: ClassVar = ("esink",)
    # Status columns are the ones the events operator writes (operators/controllers/events.py).
    printer_columns: ClassVar = (
        PrinterColumn("URL", ".spec.url"),
        PrinterColumn("Suspend", ".spec.suspend", "boolean"),
        PrinterColumn("Delivered", ".status.delivered", "integer"),
        PrinterColumn("Failed", ".status.failed", "integer"),
        PrinterColumn("Pending", ".status.pending", "integer"),
        PrinterColumn("Last-Delivery", ".status.lastDeliveryTime", "date", priority=1),
        AGE,
    )

    api_version: Literal["events.sluice.dev/v1alpha1"] = API_VERSION
    kind: Literal["EventSink"] = "EventSink"
    spec: EventSinkSpec
    status: EventSinkStatus | None = None
