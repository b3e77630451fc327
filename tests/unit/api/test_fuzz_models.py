"""Hostile objects against the API models (issue 25): every sample in manifests/samples with a few
fields replaced by garbage of any JSON type. Validation either refuses the object with a
`ValidationError` (a clear message, never another exception) or accepts one that round-trips to
the wire and back unchanged; and every job it accepts is one the job core can shape (an operator
never gets an object past its model that then crashes it)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from operators.api import parse_object
from operators.api.batch import HybridJob, VCJob
from operators.jobs.shape import from_hybridjob, from_vcjob

SAMPLES = sorted((Path(__file__).resolve().parents[3] / "manifests" / "samples").glob("*.yaml"))
OBJECTS = [
    doc
    for path in SAMPLES
    for doc in yaml.safe_load_all(path.read_text())
    if isinstance(doc, dict) and str(doc.get("apiVersion", "")).endswith("sluice.dev/v1alpha1")
]

garbage: st.SearchStrategy[Any] = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**64), 2**64)
    | st.floats(allow_nan=False, allow_infinity=False)  # JSON has neither
    | st.text(max_size=20)
    | st.sampled_from(["", "-1", "1e999999", "²", "root", "default", "Running", "x" * 300]),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)


def paths(obj: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path to a value inside `obj`, except apiVersion/kind (they pick the model) and
    metadata (ObjectMeta: typed and checked by the API server itself)."""
    out: list[tuple[Any, ...]] = []
    children = (
        obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, list) else ()
    )
    for key, value in children:
        if prefix == () and key in ("apiVersion", "kind", "metadata"):
            continue
        out.append((*prefix, key))
        out.extend(paths(value, (*prefix, key)))
    return out


def put(obj: Any, path: tuple[Any, ...], value: Any) -> None:
    for step in path[:-1]:
        obj = obj[step]
    if isinstance(obj, dict) and not isinstance(path[-1], str):
        # A list index into an object an earlier change put there: no JSON document has
        # non-string keys, so such an input cannot reach an operator.
        raise KeyError(path[-1])
    obj[path[-1]] = value


@pytest.mark.parametrize("sample", OBJECTS, ids=lambda o: f"{o['kind']}-{o['metadata']['name']}")
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_models_refuse_garbage_clearly_or_accept_it_whole(
    sample: dict[str, Any], data: st.DataObject
) -> None:
    obj = copy.deepcopy(sample)
    where = paths(obj)
    for path in data.draw(st.lists(st.sampled_from(where), min_size=1, max_size=3, unique=True)):
        try:
            put(obj, path, data.draw(garbage))
        except (KeyError, IndexError, TypeError):
            continue  # an earlier change removed the parent
    try:
        model = parse_object(obj)
    except ValidationError:
        return  # refused with pydantic's message naming the field: the clear error wanted
    assert parse_object(model.to_dict()) == model
    if isinstance(model, VCJob):
        from_vcjob(model)
    elif isinstance(model, HybridJob):
        from_hybridjob(model)


def test_there_are_samples_of_every_kind_users_write() -> None:
    kinds = {o["kind"] for o in OBJECTS}
    assert {"VCJob", "HybridJob", "PodGroup", "Queue", "Pool", "EventSink"} <= kinds
