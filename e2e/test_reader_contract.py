"""What the scheduler reads of a PodGroup survives the real API server (pruning, CEL); what the
jobs operator writes to a job's status lands on that job only.

The unit contract test (tests/unit/runtime/test_reader_contract.py) prunes with the CRD schema in
Python; this one lets the API server do it, so a difference between the two cannot hide a field.
The unit tests of the status write (tests/unit/controllers/test_jobs_status_successor.py) stand
in for the API server's JSON patch; here the real one refuses a write made for another uid.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from operators.api.scheduling import PodGroup
from operators.controllers.jobs_apply import Applier, job_path
from operators.devcluster.cluster import DevCluster
from operators.runtime import kubeconfig
from operators.runtime import records as R
from operators.runtime.client import KubeClient
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


async def test_a_job_status_write_lands_only_on_the_job_it_was_made_for(
    cluster: DevCluster, namespace: str
) -> None:
    job = {
        "apiVersion": "batch.sluice.dev/v1alpha1",
        "kind": "VCJob",
        "metadata": {"name": "probe", "namespace": namespace},
        "spec": {"tasks": [{"name": "w", "replicas": 1, "template": {"spec": {"containers": []}}}]},
    }
    path = job_path("VCJob", namespace, "probe")
    async with KubeClient(kubeconfig.load(str(cluster.kubeconfig))) as api:
        write = Applier(api, 1).write_status

        old = (await api.post(path.rsplit("/", 1)[0], job))["metadata"]["uid"]
        # A new job has no status: the fields have no parent until it is written whole.
        assert await write("VCJob", namespace, "probe", old, {"phase": "Pending"}, whole=True)
        await api.merge_patch(path + "/status", {"status": {"transitionsDelivered": 2}})
        assert await write("VCJob", namespace, "probe", old, {"phase": "Running"})
        status = (await api.get(path))["status"]
        assert status == {"phase": "Running", "transitionsDelivered": 2}  # another writer's stays
        # Written whole while it has a status after all (an earlier try landed unanswered, or
        # another writer came first): `add /status` would replace it; field by field instead.
        assert await write("VCJob", namespace, "probe", old, {"phase": "Failed"}, whole=True)
        status = (await api.get(path))["status"]
        assert status == {"phase": "Failed", "transitionsDelivered": 2}

        await api.delete(path)
        new = (await api.post(path.rsplit("/", 1)[0], job))["metadata"]["uid"]
        # The old job's late write: refused by the uid test (422), not merged into the new one.
        assert not await write("VCJob", namespace, "probe", old, {"phase": "Failed"})
        assert "status" not in await api.get(path)
        # Its own first write, field by field (the operator believed it had a status): one
        # refusal, one read, then whole.
        assert await write("VCJob", namespace, "probe", new, {"phase": "Pending"})
        assert (await api.get(path))["status"] == {"phase": "Pending"}
        await api.delete(path)
        assert not await write("VCJob", namespace, "probe", new, {"phase": "Running"})
