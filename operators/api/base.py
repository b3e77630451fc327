"""Shared building blocks of the Sluice API models.

Every model is camelCase on the wire and snake_case in Python. Spec models forbid unknown fields
(typos in a manifest fail loudly in Python exactly as the API server's strict field validation
does); status models allow them (see `StatusModel`). Rules that the API server enforces through CEL
are attached to the model classes (`cel_rules`) so the CRD generator can emit them, and mirrored by
pydantic validators so Python callers get the same errors without a round-trip to the cluster.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal, Self

from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    WithJsonSchema,
)
from pydantic.alias_generators import to_camel

from operators.api.quantity import (
    InvalidQuantityError,
    parse_quantity,
)

if TYPE_CHECKING:
    from pydantic import GetJsonSchemaHandler
    from pydantic.json_schema import JsonSchemaValue
    from pydantic_core import CoreSchema

__all__ = [
    "Condition",
    "ConditionStatus",
    "Conditions",
    "DnsLabel",
    "DnsSubdomain",
    "LabelKey",
    "ObjectMeta",
    "PodTemplate",
    "Quantity",
    "ResourceList",
    "Rule",
    "SluiceModel",
    "StatusModel",
    "quantities",
]

# Caps on collection sizes. They exist so the API server can bound the cost of every CEL rule
# (an unbounded list makes the estimated cost of `all()`/`exists()` exceed the budget and the CRD
# is refused); they are far above anything a real object needs.
MAX_NAME = 253
MAX_LABEL = 63
MAX_RESOURCES = 32
MAX_TASKS = 64
MAX_POLICIES = 32
MAX_LIST = 256
MAX_QUANTITY = 64


@dataclass(frozen=True, slots=True)
class Rule:
    """One CEL `x-kubernetes-validations` entry.

    `message` must name the field it is about: the API server returns it verbatim to the user.
    `field_path` (a JSON path relative to the object the rule sits on, e.g. ".parent") makes the
    server report the error at that field instead of at the object.
    """

    rule: str
    message: str
    field_path: str | None = None
    reason: Literal["FieldValueInvalid", "FieldValueForbidden", "FieldValueRequired"] | None = None

    def as_schema(self) -> dict[str, str]:
        out = {"rule": self.rule, "message": self.message}
        if self.field_path is not None:
            out["fieldPath"] = self.field_path
        if self.reason is not None:
            out["reason"] = self.reason
        return out


class SluiceModel(BaseModel):
    """Base of every spec-side model: camelCase aliases, strict about unknown fields."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        validate_assignment=True,
        extra="forbid",
    )

    #: CEL rules of this class (not inherited: each class lists its own).
    cel_rules: ClassVar[tuple[Rule, ...]] = ()

    @classmethod
    def __get_pydantic_json_schema__(
        cls, core_schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        schema = handler(core_schema)
        target = handler.resolve_ref_schema(schema)
        rules = cls.__dict__.get("cel_rules", ())
        if rules:
            target["x-kubernetes-validations"] = [r.as_schema() for r in rules]
        return schema

    def to_dict(self) -> dict[str, Any]:
        """The wire form: camelCase keys, enums as strings, unset optional fields left out."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)

    @classmethod
    def from_dict(cls, data: Any) -> Self:
        """Parse the wire form (or anything `model_validate` accepts)."""
        return cls.model_validate(data)


class StatusModel(SluiceModel):
    """Base of status models: unknown fields are kept.

    Status is written by several operators; keeping unknown fields (here and, matching it,
    `x-kubernetes-preserve-unknown-fields` on `status` in the CRD) means an operator that is newer
    than these models does not lose what it wrote.
    """

    model_config = ConfigDict(extra="allow")


def _check_name(max_len: int, pattern: str) -> Any:
    return Field(min_length=1, max_length=max_len, pattern=pattern)


DNS_LABEL_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
DNS_SUBDOMAIN_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
# Qualified name as used for label keys: optional DNS-subdomain prefix, then a name segment.
LABEL_KEY_PATTERN = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)
# Resource names: `cpu`, `memory`, `nvidia.com/gpu`, `hugepages-2Mi`, `nodes`, `pods`.
RESOURCE_NAME_PATTERN = LABEL_KEY_PATTERN

DnsLabel = Annotated[str, _check_name(MAX_LABEL, DNS_LABEL_PATTERN)]
"""A DNS-1123 label: task names, queue names, tier names."""
DnsSubdomain = Annotated[str, _check_name(MAX_NAME, DNS_SUBDOMAIN_PATTERN)]
"""A DNS-1123 subdomain: object names such as priority classes and pools."""
LabelKey = Annotated[str, _check_name(316, LABEL_KEY_PATTERN)]
"""A label key such as `kubernetes.io/hostname`."""


def _refuse_numbers(value: Any) -> Any:
    # Same rule as the CRD (see _QUANTITY_SCHEMA), with a hint instead of "not a string".
    if isinstance(value, int | float | Decimal) and not isinstance(value, bool):
        # ValueError, not TypeError: pydantic turns only ValueError into a ValidationError.
        raise ValueError(f"quantities are strings: write '{value}', not {value}")  # noqa: TRY004
    return value


def _check_non_negative(value: str) -> str:
    if len(value) > MAX_QUANTITY:
        raise ValueError(f"quantity longer than {MAX_QUANTITY} characters")
    try:
        parsed = parse_quantity(value)
    except InvalidQuantityError as exc:
        raise ValueError(str(exc)) from None
    if parsed < 0:
        raise ValueError(f"quantity must not be negative, got {value!r}")
    return value


# On the wire a quantity is a string ("8", "500m", "16Gi"), not core/v1's int-or-string: the API
# server cannot bound the cost of CEL rules over int-or-string values (their size is unknown to
# its estimator), and the guarantee <= capability rule must run at admission. Python callers get
# the same rule.
#
# The format is checked by CEL rather than by `pattern` so the error says what is wrong in words
# ("must be a non-negative quantity") instead of quoting a regular expression.
_QUANTITY_SCHEMA: dict[str, Any] = {
    "type": "string",
    "maxLength": MAX_QUANTITY,
    "x-kubernetes-validations": [
        Rule(
            "isQuantity(self) && !self.startsWith('-')",
            "must be a non-negative quantity such as 500m, 8 or 16Gi",
        ).as_schema()
    ],
}
Quantity = Annotated[
    str,
    BeforeValidator(_refuse_numbers),
    AfterValidator(_check_non_negative),
    WithJsonSchema(_QUANTITY_SCHEMA),
]
"""A non-negative Kubernetes quantity as a string ("500m", "8", "16Gi")."""


def _check_resource_names(value: dict[str, str]) -> dict[str, str]:
    for key in value:
        if len(key) > MAX_NAME or not re.match(RESOURCE_NAME_PATTERN, key):
            raise ValueError(f"invalid resource name {key!r}")
    return value


ResourceList = Annotated[
    dict[str, Quantity],
    Field(max_length=MAX_RESOURCES),
    AfterValidator(_check_resource_names),
]
"""Resource name → quantity, e.g. `{"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "4"}`."""


def quantities(resources: dict[str, str] | None) -> dict[str, Decimal]:
    """A ResourceList as exact numbers (`{}` for None)."""
    return {k: parse_quantity(v) for k, v in (resources or {}).items()}


# A pod template is embedded as an opaque object: modelling all of PodSpec here would duplicate
# core/v1 and bloat the CRD; the API server validates the pods when they are created.
PodTemplate = Annotated[
    dict[str, Any],
    WithJsonSchema({"type": "object", "x-kubernetes-preserve-unknown-fields": True}),
]


class ObjectMeta(BaseModel):
    """The parts of metav1.ObjectMeta Sluice code reads; everything else is kept as-is."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="allow")

    name: str | None = None
    generate_name: str | None = None
    namespace: str | None = None
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    uid: str | None = None
    resource_version: str | None = None
    generation: int | None = None
    creation_timestamp: AwareDatetime | None = None
    deletion_timestamp: AwareDatetime | None = None
    owner_references: list[dict[str, Any]] | None = None
    finalizers: list[str] | None = None


class ConditionStatus(StrEnum):
    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


class Condition(SluiceModel):
    """A metav1.Condition: the standard way an operator says what it observed, and why."""

    type: str = Field(min_length=1, max_length=316)
    status: ConditionStatus
    reason: str = Field(default="", max_length=1024)
    message: str = Field(default="", max_length=32768)
    last_transition_time: AwareDatetime | None = None
    observed_generation: int | None = Field(default=None, ge=0)


Conditions = Annotated[
    list[Condition],
    # One entry per type, like every built-in kind, so server-side apply merges them by type.
    Field(
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]}
    ),
]
