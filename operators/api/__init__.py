"""Typed models of every Sluice kind; the CRDs in crds/ are generated from them.

Import the kinds from here (`from operators.api import Pool, Queue, parse_object`), labels from
`operators.api.labels` and the quantity parser from `operators.api.quantity`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from operators.api.batch import HybridJob, VCJob
from operators.api.events import EventSink
from operators.api.resource import Resource
from operators.api.scheduling import PodGroup, Pool, Queue, Topology

__all__ = [
    "KINDS",
    "EventSink",
    "HybridJob",
    "PodGroup",
    "Pool",
    "Queue",
    "Resource",
    "Topology",
    "UnknownKindError",
    "VCJob",
    "kind_for",
    "parse_object",
]

#: Every kind, in the order the CRDs and the docs list them.
KINDS: tuple[type[Resource], ...] = (Pool, Queue, PodGroup, Topology, VCJob, HybridJob, EventSink)

_BY_KEY: dict[tuple[str, str], type[Resource]] = {
    (k.api_version_str(), k.__name__): k for k in KINDS
}


class UnknownKindError(ValueError):
    """The object's apiVersion/kind is not a Sluice kind."""


def kind_for(api_version: str, kind: str) -> type[Resource]:
    """The model class for an apiVersion/kind pair."""
    try:
        return _BY_KEY[(api_version, kind)]
    except KeyError:
        raise UnknownKindError(f"not a Sluice kind: {api_version}/{kind}") from None


def parse_object(obj: Mapping[str, Any]) -> Resource:
    """Validate a wire-form object (e.g. a watch event body) into its model."""
    cls = kind_for(str(obj.get("apiVersion", "")), str(obj.get("kind", "")))
    return cls.model_validate(obj)
