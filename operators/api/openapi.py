"""Turn pydantic's JSON Schema into a Kubernetes *structural* OpenAPI v3 schema.

The API server accepts only a subset of JSON Schema in a CRD: no `$ref`, no `title`, no
`additionalProperties: false`, no `anyOf` except the int-or-string idiom, no `null` type, every
node typed. This module rewrites pydantic's output into that subset; `STRUCTURAL_KEYWORDS` lists
what may remain, and the unit tests walk every generated schema against it.
"""

from __future__ import annotations

import copy
from typing import Any

from pydantic import BaseModel

__all__ = ["STRUCTURAL_KEYWORDS", "model_schema", "to_structural"]

JsonObj = dict[str, Any]

STRUCTURAL_KEYWORDS = frozenset(
    {
        "type",
        "default",
        "description",
        "properties",
        "required",
        "items",
        "additionalProperties",
        "enum",
        "format",
        "pattern",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "minLength",
        "maxLength",
        "minItems",
        "maxItems",
        "minProperties",
        "maxProperties",
        "multipleOf",
        "uniqueItems",
        "nullable",
        "anyOf",
        "x-kubernetes-int-or-string",
        "x-kubernetes-preserve-unknown-fields",
        "x-kubernetes-validations",
        "x-kubernetes-list-type",
        "x-kubernetes-list-map-keys",
        "x-kubernetes-map-type",
        "x-kubernetes-embedded-resource",
    }
)

# Dropped: `title` is noise in `kubectl explain`; `default` would make the API server rewrite
# stored objects (Python models carry the defaults instead); `examples`/`const` are not allowed.
_DROP = frozenset({"title", "default", "examples", "$defs", "definitions"})
SERVER_DEFAULT = "x-sluice-server-default"
"""json_schema_extra key: the one kind of default the API server does write, where the server
needs it (a list-map key: server-side apply cannot key an element without it)."""


def model_schema(model: type[BaseModel]) -> JsonObj:
    """The structural schema of a pydantic model, camelCase property names."""
    raw = model.model_json_schema(by_alias=True, mode="validation")
    return to_structural(raw, raw.get("$defs", {}))


def to_structural(node: JsonObj, defs: dict[str, JsonObj]) -> JsonObj:
    """Rewrite one JSON Schema node (recursively) into the structural subset."""
    node = _inline_ref(node, defs)
    node = _collapse_optional(node, defs)
    out: JsonObj = {}
    for key, value in node.items():
        if key in _DROP:
            continue
        if key == SERVER_DEFAULT:
            out["default"] = copy.deepcopy(value)
        elif key == "const":
            out["enum"] = [value]
        elif key == "properties":
            out[key] = {name: to_structural(sub, defs) for name, sub in value.items()}
        elif key == "items":
            out[key] = to_structural(value, defs)
        elif key == "additionalProperties":
            if value is True:
                # extra="allow": keep what we do not know instead of pruning it.
                out["x-kubernetes-preserve-unknown-fields"] = True
            elif isinstance(value, dict):
                out[key] = to_structural(value, defs)
            # False (extra="forbid") is the structural default: the server prunes unknowns and
            # kubectl's strict field validation reports them.
        elif key == "anyOf":
            out[key] = [to_structural(sub, defs) for sub in value]
        else:
            out[key] = copy.deepcopy(value)
    if "enum" in out and "type" not in out:
        out["type"] = "string"
    return out


def _inline_ref(node: JsonObj, defs: dict[str, JsonObj]) -> JsonObj:
    ref = node.get("$ref")
    if ref is None:
        return node
    target = defs[ref.rsplit("/", 1)[-1]]
    merged = {**_inline_ref(target, defs)}
    for key, value in node.items():
        if key == "$ref":
            continue
        if key == "x-kubernetes-validations":
            merged[key] = [*merged.get(key, []), *value]
        else:
            merged[key] = value  # the field's own description wins over the class docstring
    return merged


def _collapse_optional(node: JsonObj, defs: dict[str, JsonObj]) -> JsonObj:
    """`anyOf: [X, {type: null}]` (pydantic's `X | None`) becomes X: absence means None."""
    options = node.get("anyOf")
    if options is None:
        return node
    real = [o for o in options if o.get("type") != "null"]
    if len(real) == len(options) or len(real) != 1:
        return node
    inner = _collapse_optional(_inline_ref(real[0], defs), defs)
    merged = {k: v for k, v in node.items() if k != "anyOf"}
    for key, value in inner.items():
        if key == "x-kubernetes-validations":
            merged[key] = [*value, *merged.get(key, [])]
        elif key == "description" and "description" in merged:
            continue
        else:
            merged.setdefault(key, value)
    return merged
