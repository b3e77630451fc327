"""The top-level object shape shared by every kind, and the CRD facts each kind declares.

A kind is a `Resource` subclass with `api_version`, `kind`, `metadata`, `spec` and `status`
fields plus class-level CRD facts (group, plural, scope, printer columns, ...). The CRD generator
(`operators.api.crdgen`) reads only these, so adding a kind means writing one class.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from pydantic import Field, model_validator

from operators.api.base import DNS_LABEL_PATTERN, MAX_LABEL, ObjectMeta, SluiceModel

__all__ = ["PrinterColumn", "Resource", "Scope"]

Scope = Literal["Cluster", "Namespaced"]


@dataclass(frozen=True, slots=True)
class PrinterColumn:
    """One `additionalPrinterColumns` entry (`kubectl get` column)."""

    name: str
    json_path: str
    type: Literal["string", "integer", "number", "boolean", "date"] = "string"
    description: str = ""
    priority: int = 0  # 0: always shown; 1: only with `kubectl get -o wide`

    def as_crd(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "type": self.type, "jsonPath": self.json_path}
        if self.description:
            out["description"] = self.description
        if self.priority:
            out["priority"] = self.priority
        return out


AGE = PrinterColumn("Age", ".metadata.creationTimestamp", "date")


class Resource(SluiceModel):
    """Base of every top-level kind. Subclasses narrow `spec`/`status` and set the ClassVars."""

    group: ClassVar[str]
    version: ClassVar[str] = "v1alpha1"
    plural: ClassVar[str]
    # Empty: the kind in lower case. Kinds whose plain name another scheduler's CRD also uses
    # (Volcano's and KAI's queues and podgroups) take a prefixed singular and plural, so both
    # can be installed side by side and `kubectl get queue` stays unambiguous.
    singular: ClassVar[str] = ""
    scope: ClassVar[Scope]
    short_names: ClassVar[tuple[str, ...]] = ()
    printer_columns: ClassVar[tuple[PrinterColumn, ...]] = ()
    # Names of these objects end up in label values (pool, queue, job name), which are capped at
    # 63 characters and must be DNS labels; the CRD enforces it on metadata.name.
    name_is_dns_label: ClassVar[bool] = True

    api_version: str
    kind: str
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)

    @model_validator(mode="after")
    def _name_is_a_label(self) -> Resource:
        name = self.metadata.name
        if (
            self.name_is_dns_label
            and name
            and not (len(name) <= MAX_LABEL and re.match(DNS_LABEL_PATTERN, name))
        ):
            raise ValueError(
                f"metadata.name must be a DNS label (lower-case letters, digits and '-', at most "
                f"{MAX_LABEL} characters): {self.kind} names become label values; got {name!r}"
            )
        return self

    @classmethod
    def api_version_str(cls) -> str:
        return f"{cls.group}/{cls.version}"

    @classmethod
    def crd_name(cls) -> str:
        return f"{cls.plural}.{cls.group}"

    @classmethod
    def singular_name(cls) -> str:
        return cls.singular or cls.__name__.lower()

    @classmethod
    def api_path(cls, namespace: str | None = None, name: str = "") -> str:
        """The REST path of the collection (or of one object when `name` is given)."""
        base = f"/apis/{cls.group}/{cls.version}"
        if namespace is not None:
            base += f"/namespaces/{namespace}"
        base += f"/{cls.plural}"
        return f"{base}/{name}" if name else base

    @property
    def name(self) -> str:
        """metadata.name ('' for an object not yet named)."""
        return self.metadata.name or ""

    @property
    def namespace(self) -> str | None:
        return self.metadata.namespace
