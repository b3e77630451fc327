"""What the scheduler reads of a PodGroup survives the real API server (pruning, CEL).

The unit contract test (tests/unit/runtime/test_reader_contract.py) prunes with the CRD schema in
Python; this one lets the API server do it, so a difference between the two cannot hide a field.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from operators.api.scheduling import PodGroup
from operators.runtime import records as R
from operators.scheduler import snapshot as S

if TYPE_CHECKING:
    from collections.abc import Callable

SAMPLE = Path(__file__).resolve().parents[1] / "manifests" / "samples" / "podgroup-elastic.yaml"


def test_elastic_podgroup_reaches_the_reader_whole(
    kubectl: Callable[..., Any], namespace: str
) -> None:
    doc = yaml.safe_load(SAMPLE.read_text())
    doc["metadata"]["namespace"] = namespace
    kubectl("apply", "--server-side", "-f", "-", input=json.dumps(doc))
    ref = f"{PodGroup.crd_name()}/elastic-train"
    stored = json.loads(kubectl("get", ref, "-n", namespace, "-o", "json").stdout)

    group = R.podgroup(stored).group
    assert group.replica_specs == (
        S.ReplicaSpec(name="ps", min_replicas=1, max_replicas=1, priority=10),
        S.ReplicaSpec(name="worker", min_replicas=2, max_replicas=8, priority=5),
    )
    assert group.user == "alice"
    assert dict(group.min_task_member) == {"ps": 1, "worker": 2}
    assert group.unit_tier == "tor"
    assert group.network_topology == S.NetworkTopology(S.TopologyMode.SOFT, "spine")
    assert group.preemption_grace == 300.0
    assert (group.queue, group.pool, group.min_member) == ("research-vision", "gpu-pool", 3)

    # The user a queue's tenants match against cannot be swapped under a running job.
    result = kubectl(
        "patch",
        ref,
        "-n",
        namespace,
        "--type=merge",
        "-p",
        '{"spec":{"user":"mallory"}}',
        check=False,
    )
    assert result.returncode != 0
    assert "spec.user cannot change" in result.stderr
    # ...while the rest of the spec stays editable (the rule is not a blanket refusal).
    kubectl("patch", ref, "-n", namespace, "--type=merge", "-p", '{"spec":{"minMember":4}}')
