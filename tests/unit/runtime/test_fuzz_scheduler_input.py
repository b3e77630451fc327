"""Hostile objects through the scheduler's whole input path (issue 25): raw pods, nodes,
PodGroups and Queues with garbage where schema validation does not reach (annotations, labels,
quantities, status, objects edited around the schema), read into records, fed to the cache, made
into a snapshot and scheduled. A record the reader cannot read is skipped by the informer (its
contract); everything it does read must never make the cache or a session raise, and the
decisions must name only pods and nodes that exist.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from operators.api import labels as L
from operators.runtime import records as R
from operators.scheduler import decisions as D
from operators.scheduler.engine import run_session

from .factories import node, pod, podgroup
from .test_cache import Harness

# The API server enforces JSON types (labels and annotations are strings, pod quantities parse,
# CRD fields have their schema's type), so the garbage has the right type and any value in it:
# what an object stored before a schema change, a status edit or a hand-written annotation holds.
text = st.text(max_size=12) | st.sampled_from(
    ["", "-1", "0", "1e999999", "0.5", "abc", "²", "1,2,x", "[" * 50, "9" * 40, "root", "default"]
)
number = st.integers(-(2**40), 2**40)
quantity = st.sampled_from(["0", "1m", "0.001", "1", "64", "1e3", "999999999", "1Ei", "100000"])
bad_quantity = quantity | text  # int-or-string CRD fields (no pattern once the schema is bypassed)
resources = st.dictionaries(st.sampled_from(["cpu", "memory", "nvidia.com/gpu", "x"]), bad_quantity)
conditions = st.lists(
    st.fixed_dictionaries({"type": text, "status": st.sampled_from(["True", "False", "x"])}),
    max_size=2,
)
named_ints = st.dictionaries(text, number, max_size=3)

POD_PATHS = {
    ("metadata", "annotations", L.GPU_IDS): text,
    ("metadata", "annotations", L.GPU_MILLI): text,
    ("metadata", "annotations", L.POD_GROUP): text,
    ("metadata", "annotations", L.PREEMPTION_DELAY): text,
    ("metadata", "labels", L.QUEUE): text,
    ("metadata", "labels", L.POOL): text,
    ("metadata", "labels", L.REPLICA_INDEX): text,
    ("metadata", "labels", L.TASK): text,
    ("metadata", "creationTimestamp"): text,
    ("metadata", "deletionTimestamp"): text,
    ("spec", "containers", 0, "resources", "requests", "cpu"): quantity,
    ("spec", "containers", 0, "resources", "limits", "nvidia.com/gpu"): quantity,
    ("spec", "nodeName"): text,
    ("spec", "priority"): number,
    ("spec", "nodeSelector"): st.dictionaries(text, text, max_size=2),
    ("status", "phase"): text | st.sampled_from(["Running", "Succeeded", "Failed"]),
}
GROUP_PATHS = {
    ("spec", "minMember"): number,
    ("spec", "minTaskMember"): named_ints,
    ("spec", "queue"): text,
    ("spec", "pool"): text,
    ("spec", "replicaSpecs"): st.lists(
        st.fixed_dictionaries(
            {"name": text, "minReplicas": number, "maxReplicas": number, "priority": number}
        ),
        max_size=2,
    ),
    ("spec", "minResources"): resources,
    ("spec", "priorityClassName"): text,
    ("spec", "preemptionDelaySeconds"): number,
    ("spec", "user"): text,
    ("status", "phase"): text | st.sampled_from(["Inqueue", "Running", "Completed"]),
    ("status", "conditions"): conditions,
    ("metadata", "annotations"): st.dictionaries(
        st.sampled_from([L.OVERCOMMIT, L.PREEMPTION_DELAY, "x"]), text, max_size=2
    ),
}
NODE_PATHS = {
    ("status", "allocatable", "cpu"): quantity,
    ("status", "allocatable", "nvidia.com/gpu"): quantity,
    ("status", "conditions"): conditions,
    ("spec", "taints"): st.lists(
        st.fixed_dictionaries(
            {"key": text, "effect": st.sampled_from(["NoSchedule", "NoExecute", "x"])}
        ),
        max_size=2,
    ),
    ("spec", "unschedulable"): st.booleans(),
    ("metadata", "labels", "topology.sluice.dev/tor"): text,
    ("metadata", "annotations", L.GPU_TOPOLOGY): text
    | st.sampled_from(['{"numa":[[0,1]],"nvlink":[[0,9,-1]]}', '{"numa":"x"}', "{}", "null"]),
}
QUEUE_PATHS = {
    ("spec", "capability"): resources,
    ("spec", "guarantee"): resources,
    ("spec", "weight"): number,
    ("spec", "parent"): text | st.sampled_from(["team-a", "child"]),  # cycles too
    ("spec", "tenants"): st.lists(
        st.fixed_dictionaries({"namespace": text, "priority": number}), max_size=2
    ),
    ("spec", "state"): text,
    ("spec", "preemptionDelaySeconds"): number,
    ("status", "conditions"): conditions,
}


def queue(name: str, parent: str = "root") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "uid": f"q-{name}", "resourceVersion": "1"},
        "spec": {"parent": parent, "capability": {"cpu": "64"}},
        "status": {},
    }


def put(obj: dict[str, Any], path: tuple[Any, ...], value: Any) -> None:
    here: Any = obj
    for step in path[:-1]:
        here = here[step] if isinstance(step, int) else here.setdefault(step, {})
    here[path[-1]] = value


@st.composite
def mutated(
    draw: st.DrawFn,
    make: Callable[[], dict[str, Any]],
    paths: dict[tuple[Any, ...], st.SearchStrategy[Any]],
) -> Any:
    obj = copy.deepcopy(make())
    for path in draw(st.lists(st.sampled_from(sorted(paths, key=str)), max_size=4, unique=True)):
        put(obj, path, draw(paths[path]))
    return obj


def readable(reader: Callable[[Any], Any], raw: Any) -> Any:
    """What the informer does: an object its reader raises on is skipped (and logged)."""
    try:
        return reader(raw)
    except Exception:  # noqa: BLE001 - the informer's contract
        return None


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_garbage_never_breaks_the_cache_or_a_session(data: st.DataObject) -> None:
    h = Harness()
    nodes = [
        data.draw(mutated(functools.partial(node, f"n{i}", cpu="8", gpus=2), NODE_PATHS))
        for i in range(2)
    ]
    queues = [
        data.draw(mutated(lambda: queue("team-a"), QUEUE_PATHS)),
        data.draw(mutated(lambda: queue("child", "team-a"), QUEUE_PATHS)),
    ]
    groups = [
        data.draw(mutated(functools.partial(podgroup, f"g{i}", min_member=2), GROUP_PATHS))
        for i in range(2)
    ]
    pods = [
        data.draw(
            mutated(
                functools.partial(
                    pod, f"p{i}", group=f"g{i % 2}", gpu=i % 2, node="n0" if i == 3 else ""
                ),
                POD_PATHS,
            )
        )
        for i in range(5)
    ]
    for raw in nodes:
        if (rec := readable(R.node, raw)) is not None:
            h.cache.on_node("ADDED", ("", rec.name), rec, None)
    for raw in queues:
        if (q := readable(R.queue, raw)) is not None:
            h.cache.on_queue("ADDED", ("", q.name), q, None)
    for raw in groups:
        if (g := readable(R.podgroup, raw)) is not None:
            h.cache.on_podgroup("ADDED", ("ns", raw["metadata"]["name"]), g, None)
    for raw in pods:
        if (p := readable(R.pod, raw)) is not None:
            h.cache.on_pod("ADDED", ("ns", raw["metadata"]["name"]), p, None)

    snap = h.cache.snapshot(now=1_800_000_000.0)
    result = run_session(snap)

    task_uids = {t.uid for t in snap.tasks}
    node_names = {n.name for n in snap.nodes}
    for decision in result.decisions:
        if isinstance(decision, D.Bind):
            assert decision.task in task_uids
            assert decision.node in node_names
