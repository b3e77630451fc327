"""Pod bodies, the PodGroup spec (gang minimum, minResources order) and the plugin presets."""

from __future__ import annotations

import json
import re

from operators.api import labels as L
from operators.api.base import DNS_LABEL_PATTERN
from operators.jobs import presets
from operators.jobs.pods import gang_order, pod_body, podgroup_spec
from operators.jobs.shape import JobShape

from .sim import hybridjob, named_vcjob, template, vcjob


def tf_job() -> JobShape:
    return hybridjob(
        replicaSpecs={
            "PS": {"minReplicas": 1, "maxReplicas": 2, "priority": 10, "template": template()},
            "Worker": {"minReplicas": 2, "maxReplicas": 8, "template": template()},
        }
    )


def test_pod_body_names_labels_owner_and_group() -> None:
    job = hybridjob(replicaSpecs={"PS": {"minReplicas": 1, "template": template(a="b")}})
    pod = pod_body(job, job.tasks[0], 0, version=2)
    meta = pod["metadata"]
    assert meta["name"] == "h-ps-0"
    assert meta["labels"][L.TASK] == "ps"
    assert meta["labels"][L.REPLICA_INDEX] == "0"
    assert meta["labels"][L.JOB_KIND] == "HybridJob"
    assert meta["annotations"] == {"a": "b", L.POD_GROUP: "h", L.JOB_VERSION: "2"}
    assert meta["ownerReferences"][0]["uid"] == "u2"
    assert pod["spec"]["schedulerName"] == "sluice"


def test_elastic_group_spec_and_gang_order() -> None:
    job = tf_job()
    spec = podgroup_spec(job, {"queue": "q", "pool": None})
    assert spec["minMember"] == 3
    assert spec["minTaskMember"] == {"ps": 1, "worker": 2}
    assert spec["replicaSpecs"] == [
        {"name": "ps", "minReplicas": 1, "maxReplicas": 2, "priority": 10},
        {"name": "worker", "minReplicas": 2, "maxReplicas": 8, "priority": 0},
    ]
    assert spec["queue"] == "q"
    assert "pool" not in spec
    assert [(t.name, n) for t, n in gang_order(job)] == [("ps", 1), ("worker", 2)]


def test_tasks_waiting_for_dependencies_are_not_in_the_gang() -> None:
    job = vcjob(
        minAvailable=3,
        tasks=[
            {"name": "ps", "replicas": 2, "template": template()},
            {"name": "main", "replicas": 1, "dependsOn": {"name": ["ps"]}, "template": template()},
        ],
    )
    spec = podgroup_spec(job, {})
    assert spec["minMember"] == 2
    assert spec["minTaskMember"] == {"ps": 2}


def test_tensorflow_preset_is_guessed_and_builds_tf_config() -> None:
    job = tf_job()
    on = presets.enabled(job, {})
    assert on.framework == "tensorflow"
    assert on.svc
    pod = pod_body(job, job.tasks[1], 3, 0)
    presets.decorate(job, on, job.tasks[1], 3, pod)
    env = {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"]}
    tf = json.loads(env["TF_CONFIG"])
    assert tf["task"] == {"type": "worker", "index": 3}
    assert tf["cluster"]["ps"] == ["h-ps-0.h:2222", "h-ps-1.h:2222"]
    assert len(tf["cluster"]["worker"]) == 8
    assert pod["spec"]["subdomain"] == "h"
    assert pod["spec"]["hostname"] == "h-worker-3"


def test_pytorch_ranks_and_mpi_hostfile() -> None:
    torch = hybridjob(
        replicaSpecs={
            "Master": {"minReplicas": 1, "template": template()},
            "Worker": {"minReplicas": 3, "template": template()},
        }
    )
    on = presets.enabled(torch, {})
    env = presets.env(torch, on, torch.tasks[1], 2)
    assert env["MASTER_ADDR"] == "h-master-0.h"
    assert (env["WORLD_SIZE"], env["RANK"]) == ("4", "3")
    mpi = hybridjob(
        replicaSpecs={
            "Launcher": {"minReplicas": 1, "template": template()},
            "Worker": {"minReplicas": 2, "template": template()},
        }
    )
    on = presets.enabled(mpi, {})
    assert on.ssh
    assert presets.mpi_hostfile(mpi) == "h-worker-0.h slots=1\nh-worker-1.h slots=1\n"


def test_env_plugin_and_user_values_win() -> None:
    t = template()
    t["spec"]["containers"][0]["env"] = [{"name": "VC_TASK_INDEX", "value": "mine"}]
    job = vcjob(plugins={"env": []}, tasks=[{"name": "w", "replicas": 2, "template": t}])
    on = presets.enabled(job, {})
    pod = pod_body(job, job.tasks[0], 1, 0)
    presets.decorate(job, on, job.tasks[0], 1, pod)
    env = {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"]}
    assert env == {"VC_TASK_INDEX": "mine", "VK_TASK_INDEX": "1"}
    assert "volumes" not in pod["spec"]


def test_names_at_the_length_limits_give_distinct_valid_hostnames() -> None:
    # 63-character job and task names (each a valid DNS label): the pod name is 129 characters,
    # a hostname that long is refused by the API server, and the job waited for pods forever.
    long = "l" + "o" * 61 + "g"
    t = template()
    job = named_vcjob(
        long, plugins={"svc": []}, tasks=[{"name": long, "replicas": 12, "template": t}]
    )
    on = presets.enabled(job, {})
    names = []
    for index in range(12):
        pod = pod_body(job, job.tasks[0], index, 0)
        presets.decorate(job, on, job.tasks[0], index, pod)
        hostname = pod["spec"]["hostname"]
        assert len(hostname) <= 63, hostname
        assert re.fullmatch(DNS_LABEL_PATTERN, hostname), hostname
        assert pod["spec"]["subdomain"] == long
        names.append(hostname)
    assert len(set(names)) == 12
    # Peers find each pod by the name it really has.
    assert presets.hosts(job, job.tasks[0]) == [f"{n}.{long}" for n in names]
    # Names that fit are unchanged.
    short = vcjob(plugins={"svc": []}, tasks=[{"name": "w", "replicas": 1, "template": t}])
    pod = pod_body(short, short.tasks[0], 0, 0)
    presets.decorate(short, presets.enabled(short, {}), short.tasks[0], 0, pod)
    assert pod["spec"]["hostname"] == "j-w-0"
