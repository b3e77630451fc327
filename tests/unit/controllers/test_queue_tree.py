"""The queue operator's tree rules (operators/controllers/queue_tree.py)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from operators.api.scheduling import QueueReason, QueueSpecState, QueueState
from operators.controllers.queue_tree import (
    QueueObject,
    observed_state,
    queue_object,
    queue_status_patch,
    validate,
)


def q(
    name: str,
    parent: str | None = "root",
    guarantee: Mapping[str, int] | None = None,
    capability: Mapping[str, int] | None = None,
    created: float = 0.0,
    state: QueueSpecState = QueueSpecState.OPEN,
    status: Mapping[str, Any] | None = None,
) -> QueueObject:
    return QueueObject(
        name=name,
        parent=parent,
        guarantee=guarantee or {},
        capability=capability or {},
        spec_state=state,
        created=created,
        generation=1,
        status=status or {},
    )


def tree(*queues: QueueObject) -> dict[str, QueueObject]:
    return {x.name: x for x in queues}


def test_three_levels_that_fit_are_valid() -> None:
    verdicts = validate(
        tree(
            q("org", guarantee={"gpu": 32}),
            q("team", "org", guarantee={"gpu": 16}),
            q("proj", "team", guarantee={"gpu": 8}),
        )
    )
    assert {n: v.valid for n, v in verdicts.items()} == {"org": True, "team": True, "proj": True}


def test_missing_parent_flags_only_that_queue() -> None:
    verdicts = validate(tree(q("org"), q("orphan", "nope"), q("kid", "orphan")))
    assert verdicts["orphan"].reason is QueueReason.PARENT_NOT_FOUND
    assert "nope" in verdicts["orphan"].message
    assert verdicts["org"].valid
    assert verdicts["kid"].valid


def test_cycle_flags_its_members() -> None:
    verdicts = validate(tree(q("a", "b"), q("b", "a"), q("c")))
    assert verdicts["a"].reason is QueueReason.PARENT_CYCLE
    assert verdicts["b"].reason is QueueReason.PARENT_CYCLE
    assert "a -> b -> a" in verdicts["a"].message or "b -> a -> b" in verdicts["a"].message
    assert verdicts["c"].valid


def test_the_newest_child_that_overflows_the_parent_guarantee_is_flagged() -> None:
    verdicts = validate(
        tree(
            q("org", guarantee={"gpu": 10}),
            q("old", "org", guarantee={"gpu": 6}, created=1),
            q("greedy", "org", guarantee={"gpu": 6}, created=3),
            q("small", "org", guarantee={"gpu": 4}, created=2),
            q("cpu-only", "org", guarantee={"cpu": 100_000}, created=4),
        )
    )
    assert verdicts["greedy"].reason is QueueReason.GUARANTEE_OVERCOMMITTED
    assert "gpu: 10 already guaranteed to siblings + 6 > 10" in verdicts["greedy"].message
    cpu = validate(tree(q("p", guarantee={"cpu": 1000}), q("c", "p", guarantee={"cpu": 1500})))
    assert "cpu: 0 already guaranteed to siblings + 1500m > 1" in cpu["c"].message
    assert [n for n, v in verdicts.items() if not v.valid] == ["greedy"]


def test_parent_capability_bounds_children_when_it_guarantees_nothing() -> None:
    verdicts = validate(
        tree(q("org", capability={"gpu": 4}), q("kid", "org", guarantee={"gpu": 5}))
    )
    assert not verdicts["kid"].valid
    # root bounds nothing: the cluster does.
    assert validate(tree(q("big", guarantee={"gpu": 10_000})))["big"].valid


def test_state_table_closing_waits_for_admitted_work() -> None:
    closed = QueueSpecState.CLOSED
    assert observed_state(q("a", state=closed, status={"running": 1})) is QueueState.CLOSING
    assert observed_state(q("a", state=closed, status={"inqueue": 2})) is QueueState.CLOSING
    assert observed_state(q("a", state=closed, status={"pending": 5})) is QueueState.CLOSED
    assert observed_state(q("a", status={"running": 1})) is QueueState.OPEN


def test_status_patch_only_when_changed() -> None:
    queue = q("a", guarantee={"cpu": 1000})
    (verdict,) = validate(tree(queue)).values()
    patch = queue_status_patch(queue, verdict, "t1")
    assert patch is not None
    assert patch["state"] == "Open"
    assert "guaranteed" not in patch  # the scheduler derives the effective guarantee itself
    assert patch["conditions"][0]["status"] == "True"
    written = dataclasses.replace(queue, status=patch)
    assert queue_status_patch(written, verdict, "t2") is None
    orphan = dataclasses.replace(written, parent="gone")
    patch2 = queue_status_patch(orphan, validate(tree(orphan))["a"], "t3")
    assert patch2 is not None
    assert patch2["conditions"][0]["reason"] == "ParentNotFound"
    assert patch2["conditions"][0]["lastTransitionTime"] == "t3"


def test_an_invalid_queue_is_judged_by_its_spec_guarantee() -> None:
    # The scheduler's reading of an invalid queue guarantees nothing; the operator must still see
    # the guarantee that broke the rule, or the verdict would flip back and forth.
    body = {
        "metadata": {"name": "greedy"},
        "spec": {"guarantee": {"cpu": "4"}},
        "status": {"conditions": [{"type": "Valid", "status": "False", "reason": "x"}]},
    }
    assert queue_object(body).guarantee == {"cpu": 4000}


def test_queue_object_reads_the_api_shape() -> None:
    body = {
        "metadata": {"name": "team", "uid": "u1", "generation": 2},
        "spec": {
            "parent": "org",
            "guarantee": {"cpu": "2", "nvidia.com/gpu": 4},
            "state": "Closed",
        },
        "status": {"running": 1},
    }
    obj = queue_object(body)
    assert (obj.parent, obj.spec_state, obj.generation, obj.uid) == (
        "org",
        QueueSpecState.CLOSED,
        2,
        "u1",
    )
    assert obj.guarantee == {"cpu": 2000, "nvidia.com/gpu": 4}
    assert observed_state(obj) is QueueState.CLOSING
    assert queue_object({"metadata": {"name": "x"}, "spec": {}}).parent == "root"
