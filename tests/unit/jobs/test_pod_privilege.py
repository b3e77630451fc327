"""Pods Sluice creates carry no more privilege than their template asked for (issue 25, security).

For any template (privileged or not, host namespaces, service account, capabilities), the pod the
job core builds and the plugins decorate keeps every privilege-bearing field exactly as the
template had it; what plugins add is read-only mounts of the job's own ConfigMaps and Secret (in
the job's namespace, named after the job), so nothing reaches another namespace's Secrets.
"""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from operators.jobs import presets
from operators.jobs.pods import pod_body

from .sim import vcjob

POD_FIELDS = (
    "hostNetwork",
    "hostPID",
    "hostIPC",
    "hostUsers",
    "serviceAccountName",
    "automountServiceAccountToken",
    "securityContext",
    "priorityClassName",
    "nodeName",
    "runtimeClassName",
    "shareProcessNamespace",
    "tolerations",
)
CONTAINER_FIELDS = ("securityContext", "image", "command", "args", "resources")

maybe_bool = st.none() | st.booleans()
security_context = st.fixed_dictionaries(
    {},
    optional={
        "privileged": st.booleans(),
        "runAsUser": st.integers(0, 65535),
        "allowPrivilegeEscalation": st.booleans(),
        "capabilities": st.fixed_dictionaries(
            {}, optional={"add": st.lists(st.sampled_from(["NET_ADMIN", "SYS_ADMIN"]), max_size=2)}
        ),
    },
)
container: st.SearchStrategy[dict[str, Any]] = st.fixed_dictionaries(
    {"name": st.sampled_from(["c", "d"]), "image": st.just("x")},
    optional={"securityContext": security_context},
)
pod_spec: st.SearchStrategy[dict[str, Any]] = st.fixed_dictionaries(
    {"containers": st.lists(container, min_size=1, max_size=2, unique_by=lambda c: str(c["name"]))},
    optional={
        "hostNetwork": st.booleans(),
        "hostPID": st.booleans(),
        "hostIPC": st.booleans(),
        "serviceAccountName": st.sampled_from(["default", "builder"]),
        "automountServiceAccountToken": st.booleans(),
        "securityContext": st.fixed_dictionaries({}, optional={"runAsNonRoot": st.booleans()}),
        "volumes": st.just([{"name": "data", "emptyDir": {}}]),
    },
)
plugins: st.SearchStrategy[dict[str, Any]] = st.fixed_dictionaries(
    {}, optional={"ssh": st.just([]), "svc": st.just([]), "env": st.just([])}
)


def _without_plugin_additions(spec: dict[str, Any]) -> None:
    for c in spec.get("containers", []):
        c.pop("env", None)
        c.pop("volumeMounts", None)


@settings(max_examples=150, deadline=None)
@given(spec=pod_spec, chosen=plugins, framework=st.sampled_from(["", "mpi"]))
def test_pods_keep_exactly_the_privileges_of_their_template(
    spec: dict[str, Any], chosen: dict[str, Any], framework: str
) -> None:
    annotations = {"batch.sluice.dev/framework": framework} if framework else {}
    template = {"metadata": {"annotations": annotations}, "spec": spec}
    job = vcjob(plugins=chosen, tasks=[{"name": "w", "replicas": 2, "template": template}])
    task = job.tasks[0]
    pod = pod_body(job, task, 1, version=1)
    presets.decorate(job, presets.enabled(job, annotations), task, 1, pod)
    got = pod["spec"]

    for key in POD_FIELDS:
        assert got.get(key) == spec.get(key), key
    for before, after in zip(spec["containers"], got["containers"], strict=True):
        for key in CONTAINER_FIELDS:
            assert after.get(key) == before.get(key), key
        for mount in after.get("volumeMounts") or ():
            assert mount["readOnly"] is True  # nothing the plugins add is writable
    assert pod["metadata"]["namespace"] == job.namespace
    own = {presets.config_name(job, w) for w in ("svc", "ssh", "hostfile")}
    for volume in got.get("volumes") or ():
        if volume in (spec.get("volumes") or ()):
            continue
        source = volume.get("configMap", {}).get("name") or volume.get("secret", {}).get(
            "secretName"
        )
        assert source in own, volume  # only the job's own objects, never a hostPath or PVC
        assert set(volume) <= {"name", "configMap", "secret"}
    unchanged = copy.deepcopy(spec)
    _without_plugin_additions(unchanged)
    decorated = copy.deepcopy(got)
    _without_plugin_additions(decorated)
    for key in set(unchanged) - {"volumes", "hostname", "subdomain"}:
        assert decorated[key] == unchanged[key], key
