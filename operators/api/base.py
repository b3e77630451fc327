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
    model_validator,
)
from pydantic.alias_generators import to_camel

from operators.api.quantity import (
    NON_NEGATIVE_QUANTITY_PATTERN,
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
MAX_POLICIES = 16
MAX_LIST = 256
MAX_TENANTS = 64
MAX_QUANTITY = 64
MAX_REASON = 128
MAX_MESSAGE = 1024


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
    #: Fields (Python names) that cannot change once the object exists, each with the message the
    #: API server returns. They become CEL transition rules (`oldSelf`) and `update_errors`.
    immutable_fields: ClassVar[dict[str, str]] = {}
    #: Fields declared only to be refused with a message that says what to write instead
    #: (Volcano shapes Sluice does not support): Python name -> message. Declare each field as
    #: `Refused` so any value passes the schema and the CEL rule gets to say why.
    refused_fields: ClassVar[dict[str, str]] = {}

    @classmethod
    def all_cel_rules(cls) -> tuple[Rule, ...]:
        """This class's rules plus the transition rules of its immutable fields."""
        rules = list(cls.__dict__.get("cel_rules", ()))
        for name, message in cls.__dict__.get("immutable_fields", {}).items():
            wire = cls.model_fields[name].alias or name
            rules.append(Rule(cel_unchanged(wire), message, field_path=f".{wire}"))
        for name, message in cls.__dict__.get("refused_fields", {}).items():
            wire = cls.model_fields[name].alias or name
            rules.append(Rule(f"!has(self.{wire})", message, field_path=f".{wire}"))
        return tuple(rules)

    @model_validator(mode="after")
    def _refuse_fields(self) -> Self:
        for name, message in type(self).__dict__.get("refused_fields", {}).items():
            if getattr(self, name) is not None:
                raise ValueError(message)
        return self

    @classmethod
    def __get_pydantic_json_schema__(
        cls, core_schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        schema = handler(core_schema)
        target = handler.resolve_ref_schema(schema)
        rules = cls.all_cel_rules()
        if rules:
            target["x-kubernetes-validations"] = [r.as_schema() for r in rules]
        return schema

    def update_errors(self, old: Self) -> list[str]:
        """Why replacing `old` by `self` is refused (the transition rules), [] when it is fine.

        Nested models are compared like the API server correlates them: model fields directly,
        map values by key, and list items by their `name` (lists of models are list-maps).
        """
        errors = [
            message
            for name, message in type(self).__dict__.get("immutable_fields", {}).items()
            if getattr(self, name) != getattr(old, name)
        ]
        for name in type(self).model_fields:
            new_value, old_value = getattr(self, name), getattr(old, name)
            for new_item, old_item in _correlate(new_value, old_value):
                errors.extend(new_item.update_errors(old_item))
        return errors

    def to_dict(self) -> dict[str, Any]:
        """The wire form: camelCase keys, enums as strings, unset optional fields left out."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)

    @classmethod
    def from_dict(cls, data: Any) -> Self:
        """Parse the wire form (or anything `model_validate` accepts)."""
        return cls.model_validate(data)


def _correlate(new: Any, old: Any) -> list[tuple[SluiceModel, SluiceModel]]:
    pairs: list[tuple[Any, Any]] = []
    if isinstance(new, SluiceModel):
        pairs = [(new, old)]
    elif isinstance(new, dict) and isinstance(old, dict):
        pairs = [(v, old.get(k)) for k, v in new.items()]
    elif isinstance(new, list) and isinstance(old, list):
        by_name = {getattr(o, "name", None): o for o in old}
        pairs = [(v, by_name.get(getattr(v, "name", None))) for v in new]
    return [(n, o) for n, o in pairs if isinstance(n, SluiceModel) and type(o) is type(n)]


def cel_unchanged(field: str) -> str:
    """CEL transition rule: optional `field` is not set, unset or changed by an update."""
    return (
        f"has(self.{field}) == has(oldSelf.{field}) && "
        f"(!has(self.{field}) || self.{field} == oldSelf.{field})"
    )


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
# Resource names a quota or a status may hold: the standard ones, `nodes` (Pool status), huge
# pages by size, and lower-case extended resources (`nvidia.com/gpu`). Kubernetes itself accepts
# upper case in the name part, but device plugins never advertise it, so `nvidia.com/GPU` is a typo
# that would cap nothing: refusing it is the point of this list.
STANDARD_RESOURCE_NAMES: tuple[str, ...] = (
    "cpu",
    "memory",
    "ephemeral-storage",
    "storage",
    "pods",
    "nodes",
)
_EXTENDED_RESOURCE = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)+/[a-z0-9]([-a-z0-9_.]*[a-z0-9])?"
RESOURCE_NAME_PATTERN = (
    "^(" + "|".join(STANDARD_RESOURCE_NAMES) + r"|hugepages-[0-9]+([KMGTPE]i|[kMGTPE])?"
    "|" + _EXTENDED_RESOURCE + ")$"
)
RESOURCE_NAME_MESSAGE = (
    "resource names must be cpu, memory, ephemeral-storage, storage, pods, nodes, "
    "hugepages-<size> or a lower-case extended resource such as nvidia.com/gpu"
)


# Keys of a map are not capped by the schema; the rule checks the length first so a huge key
# fails fast, and the map's maxProperties bounds the cost the API server estimates.
def cel_string(text: str) -> str:
    """`text` as a single-quoted CEL string literal (regexes carry backslashes)."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


_RESOURCE_NAMES_RULE = (
    f"self.all(k, size(k) <= {MAX_NAME} && k.matches({cel_string(RESOURCE_NAME_PATTERN)}))"
)

DnsLabel = Annotated[str, _check_name(MAX_LABEL, DNS_LABEL_PATTERN)]
"""A DNS-1123 label: task names, queue names, tier names."""
DnsSubdomain = Annotated[str, _check_name(MAX_NAME, DNS_SUBDOMAIN_PATTERN)]
"""A DNS-1123 subdomain: object names such as priority classes and pools."""
LabelKey = Annotated[str, _check_name(316, LABEL_KEY_PATTERN)]
"""A label key such as `kubernetes.io/hostname`."""


def _integer_as_string(value: Any) -> Any:
    # YAML `cpu: 2` (how Volcano's and core/v1's examples write it) arrives as an int: take it,
    # like the CRD's int-or-string. Fractions must be strings there, so they are here too.
    if isinstance(value, bool):
        raise ValueError(f"not a quantity: {value!r}")  # noqa: TRY004 (pydantic wants ValueError)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float | Decimal):
        raise ValueError(f"write fractional quantities as strings: '{value}', not {value}")  # noqa: TRY004
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


# On the wire a quantity is core/v1's int-or-string ("500m", "16Gi", or a bare integer such as
# `cpu: 2`, as Volcano's examples write it); the Python models keep it as a string. The format is
# an OpenAPI `pattern`, not CEL: the API server sizes every int-or-string value at its request
# limit (3 MB), so a CEL rule over each value exceeds the cost budget 3x (measured on v1.33).
_QUANTITY_SCHEMA: dict[str, Any] = {
    "x-kubernetes-int-or-string": True,
    "pattern": NON_NEGATIVE_QUANTITY_PATTERN,
    "maxLength": MAX_QUANTITY,
    "minimum": 0,
}
Quantity = Annotated[
    str,
    BeforeValidator(_integer_as_string),
    AfterValidator(_check_non_negative),
    WithJsonSchema(_QUANTITY_SCHEMA),
]
"""A non-negative Kubernetes quantity as a string ("500m", "8", "16Gi")."""


_LIKELY_MEANT = {"gpu": "nvidia.com/gpu", "gpus": "nvidia.com/gpu", "mem": "memory"}


def resource_name_hint(key: str) -> str:
    """What the user probably meant by a resource name that is not canonical ('' if no guess)."""
    lower = key.lower()
    guess = _LIKELY_MEANT.get(lower, lower)
    if guess != key and re.match(RESOURCE_NAME_PATTERN, guess):
        return guess
    return ""


def _check_resource_names(value: dict[str, str]) -> dict[str, str]:
    for key in value:
        if len(key) > MAX_NAME or not re.match(RESOURCE_NAME_PATTERN, key):
            hint = resource_name_hint(key)
            meant = f" (did you mean {hint!r}?)" if hint else ""
            raise ValueError(f"invalid resource name {key!r}{meant}: {RESOURCE_NAME_MESSAGE}")
    return value


ResourceList = Annotated[
    dict[str, Quantity],
    Field(
        max_length=MAX_RESOURCES,
        json_schema_extra={
            "x-kubernetes-validations": [
                Rule(_RESOURCE_NAMES_RULE, RESOURCE_NAME_MESSAGE).as_schema()
            ]
        },
    ),
    AfterValidator(_check_resource_names),
]
"""Resource name → quantity, e.g. `{"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "4"}`."""


def quantities(resources: dict[str, str] | None) -> dict[str, Decimal]:
    """A ResourceList as exact numbers (`{}` for None)."""
    return {k: parse_quantity(v) for k, v in (resources or {}).items()}


_REFUSED = "Volcano's field, refused with a message that says what to write instead."
# Typed (CEL cannot see an untyped field), loosely enough that any value of Volcano's shape passes
# the schema and the CEL rule gets to say what to write instead. Declare each `= None`.
RefusedInt = Annotated[Any, WithJsonSchema({"type": "integer", "description": _REFUSED})]
RefusedString = Annotated[
    Any, WithJsonSchema({"type": "string", "maxLength": MAX_NAME, "description": _REFUSED})
]
RefusedObject = Annotated[
    Any,
    WithJsonSchema(
        {"type": "object", "x-kubernetes-preserve-unknown-fields": True, "description": _REFUSED}
    ),
]
RefusedList = Annotated[
    Any,
    WithJsonSchema(
        {
            "type": "array",
            "maxItems": MAX_LIST,
            "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
            "description": _REFUSED,
        }
    ),
]

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
