"""Moving Volcano manifests to Sluice: the only edits a Volcano Job, Queue or PodGroup needs.

Sluice reads Volcano's shapes (unquoted quantities, the same field names), so a manifest moves by
changing its apiVersion (Volcano's `Job` is Sluice's `VCJob`, the kind name DESIGN.md fixes) and
its schedulerName. Volcano fields Sluice does not support are refused at admission with a message
that says what to write instead (see `refused_fields` on the models and docs/api.md).
"""

from __future__ import annotations

import copy
from typing import Any, Final

from operators.api import labels
from operators.api.batch import VCJob
from operators.api.resource import Resource
from operators.api.scheduling import PodGroup, Queue

__all__ = ["VOLCANO_KINDS", "VOLCANO_SCHEDULER_NAME", "from_volcano"]

VOLCANO_SCHEDULER_NAME: Final = "volcano"
#: Volcano's (apiVersion, kind) -> the Sluice kind that takes the same manifest.
VOLCANO_KINDS: Final[dict[tuple[str, str], type[Resource]]] = {
    ("scheduling.volcano.sh/v1beta1", "Queue"): Queue,
    ("scheduling.volcano.sh/v1beta1", "PodGroup"): PodGroup,
    ("batch.volcano.sh/v1alpha1", "Job"): VCJob,
}


def _sluice_scheduler(spec: dict[str, Any]) -> None:
    if spec.get("schedulerName") == VOLCANO_SCHEDULER_NAME:
        spec["schedulerName"] = labels.SCHEDULER_NAME


def from_volcano(obj: dict[str, Any]) -> dict[str, Any]:
    """A copy of a Volcano Job/Queue/PodGroup with Sluice's apiVersion, kind and schedulerName.

    Objects of other kinds come back unchanged (copied).
    """
    out = copy.deepcopy(obj)
    kind = VOLCANO_KINDS.get((str(obj.get("apiVersion")), str(obj.get("kind"))))
    if kind is None:
        return out
    out["apiVersion"] = kind.api_version_str()
    out["kind"] = kind.__name__
    spec = out.get("spec")
    if kind is VCJob and isinstance(spec, dict):
        _sluice_scheduler(spec)
        for task in spec.get("tasks") or ():
            pod_spec = (task.get("template") or {}).get("spec") if isinstance(task, dict) else None
            if isinstance(pod_spec, dict):
                _sluice_scheduler(pod_spec)
    return out
