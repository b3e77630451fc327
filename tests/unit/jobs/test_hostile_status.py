"""Hostile status edits (issue 25): a job's status is the jobs operator's only memory, and anyone
allowed to patch `status` can write anything its CRD schema admits. Every such status is read
back (`Memory.from_status`, as after an operator restart) and reconciled without an exception,
with and without pods and a PodGroup, and the events operator reads its transition log and
delivery cursors from it (`job_view`), so one edited job crashes neither operator nor stalls the
other jobs they serve. Statuses are drawn from the generated CRD schema itself, so a new status
field is fuzzed as soon as it exists."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from operators.api.batch import HybridJob, JobPhase, VCJob
from operators.api.crdgen import crd_for
from operators.controllers.events import job_view
from operators.jobs.observed import GroupObs, PodObs
from operators.jobs.reconcile import Memory, Observed, reconcile

from .sim import T0, hybridjob, template, vcjob

TEXT = st.text(max_size=12) | st.sampled_from(["", "²", "-1", "Running", "x" * 300])
DATE = st.sampled_from(["2026-11-24T12:00:00Z", "1970-01-01T00:00:00Z", "9999-12-31T23:59:59Z"])


def from_schema(schema: dict[str, Any], depth: int = 0) -> st.SearchStrategy[Any]:
    """Values the API server stores for `schema` (types, enums, bounds; not CEL rules)."""
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    kind = schema.get("type")
    if kind == "string":
        return DATE if schema.get("format") == "date-time" else TEXT
    if kind == "integer":
        return st.integers(schema.get("minimum", -(2**63)), schema.get("maximum", 2**63 - 1))
    if kind == "number":
        return st.floats(allow_nan=False, allow_infinity=False)
    if kind == "boolean":
        return st.booleans()
    if kind == "array":
        return st.lists(from_schema(schema.get("items", {}), depth + 1), max_size=3)
    props = schema.get("properties")
    if props and depth < 4:
        return st.fixed_dictionaries(
            {}, optional={k: from_schema(v, depth + 1) for k, v in props.items()}
        )
    return st.dictionaries(st.text(max_size=6), TEXT, max_size=2)  # preserved unknown fields


def status_of(kind: type[VCJob | HybridJob]) -> st.SearchStrategy[dict[str, Any]]:
    schema = crd_for(kind)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return from_schema(schema["properties"]["status"])


JOBS = {
    VCJob: vcjob(tasks=[{"name": "w", "replicas": 2, "template": template()}]),
    HybridJob: hybridjob(
        replicaSpecs={"w": {"minReplicas": 1, "maxReplicas": 2, "template": template()}}
    ),
}

observations = st.sampled_from(
    [
        Observed(),
        Observed(group=GroupObs(phase="Inqueue")),
        Observed(
            pods=(PodObs("j-w-0", "u-0", "w", 0, 0, "Running", node="n", created=T0),),
            group=GroupObs(phase="Running"),
        ),
    ]
)

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize("kind", [VCJob, HybridJob], ids=lambda k: k.__name__)
@SETTINGS
@given(data=st.data(), observed=observations)
def test_any_job_status_the_schema_admits_is_read_and_reconciled(
    kind: type[VCJob | HybridJob], data: st.DataObject, observed: Observed
) -> None:
    status = data.draw(status_of(kind))
    memory = Memory.from_status(status)
    plan = reconcile(JOBS[kind], memory, observed, T0 + 10)
    assert isinstance(plan.memory.phase, JobPhase)
    view = job_view(kind.__name__, {"metadata": {"name": "j", "uid": "u1"}, "status": status})
    assert view.sendable()[1] == view.log_seq
