"""Every sample parses into its model, round-trips, and the set covers every kind and scenario."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from operators.api import KINDS, HybridJob, Pool, Queue, Topology, VCJob, parse_object
from operators.api.batch import PolicyAction, PolicyEvent

SAMPLES_DIR = Path(__file__).resolve().parents[3] / "manifests" / "samples"


def load_samples() -> list[tuple[str, dict[str, Any]]]:
    """(file:kind/name, object) for every document of every sample file."""
    return [
        (f"{path.name}:{doc['kind']}/{doc['metadata']['name']}", doc)
        for path in sorted(SAMPLES_DIR.glob("*.yaml"))
        for doc in yaml.safe_load_all(path.read_text())
        if doc
    ]


SAMPLES = load_samples()


@pytest.mark.parametrize(("label", "obj"), SAMPLES, ids=[s[0] for s in SAMPLES])
def test_sample_parses_and_round_trips(label: str, obj: dict[str, Any]) -> None:
    model = parse_object(obj)
    again = parse_object(model.to_dict())
    assert again == model
    assert model.to_dict() == again.to_dict()


def _by_kind() -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    for _, obj in SAMPLES:
        out.setdefault(obj["kind"], []).append(parse_object(obj))
    return out


def test_every_kind_has_a_sample() -> None:
    assert {k.__name__ for k in KINDS} <= set(_by_kind())


def test_seed_scenarios_present() -> None:
    kinds = _by_kind()
    pools = {p.name: p for p in kinds["Pool"] if isinstance(p, Pool)}
    assert {"cpu-pool", "gpu-pool", "masters"} <= set(pools)
    masters = pools["masters"].spec
    assert masters.disable_sharing
    assert masters.disable_borrowing
    assert masters.disable_preemption

    queues = {q.name: q for q in kinds["Queue"] if isinstance(q, Queue)}
    # org -> team -> project
    parents = {q.spec.parent for q in queues.values()}
    leaf = next(q for q in queues.values() if q.spec.parent in queues and q.name not in parents)
    team = queues[leaf.spec.parent or ""]
    org = queues[team.spec.parent or ""]
    assert org.spec.parent is None
    for q in (org, team, leaf):
        assert q.spec.guarantee
        assert q.spec.capability

    tf = next(j for j in kinds["HybridJob"] if isinstance(j, HybridJob))
    ps, worker = tf.spec.replica_specs["PS"], tf.spec.replica_specs["Worker"]
    assert (ps.min_replicas, ps.max_replicas) == (1, 2)
    assert (worker.min_replicas, worker.max_replicas) == (2, 8)

    completes = [
        (t.name, p)
        for vc in kinds["VCJob"]
        if isinstance(vc, VCJob)
        for t in vc.spec.tasks
        for p in t.policies or []
        if PolicyEvent.TASK_COMPLETED in p.triggers() and p.action is PolicyAction.COMPLETE_JOB
    ]
    assert completes, "a task policy TaskCompleted -> CompleteJob"

    topo = next(t for t in kinds["Topology"] if isinstance(t, Topology))
    assert [lv.node_label for lv in topo.spec.levels][-1] == "kubernetes.io/hostname"


def test_pod_templates_use_sluice_scheduler() -> None:
    for _, obj in SAMPLES:
        model = parse_object(obj)
        templates: list[dict[str, Any]] = []
        if isinstance(model, VCJob):
            templates = [t.template for t in model.spec.tasks]
        elif isinstance(model, HybridJob):
            templates = [r.template for r in model.spec.replica_specs.values()]
        for template in templates:
            assert template["spec"]["schedulerName"] == "sluice"


def test_the_manifests_in_the_docs_parse() -> None:
    """The whole objects (with metadata) among the YAML examples of docs/*.md are objects the
    API accepts (their models validate); excerpts showing one field are left out."""
    docs = SAMPLES_DIR.parents[1] / "docs"
    found = 0
    for path in sorted(docs.glob("*.md")):
        for block in path.read_text().split("```yaml\n")[1:]:
            for doc in yaml.safe_load_all(block.split("```")[0]):
                if doc and doc.get("metadata") and doc.get("kind") in {k.__name__ for k in KINDS}:
                    parse_object(doc)
                    found += 1
    assert found >= 2
