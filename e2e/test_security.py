"""A user who may create jobs in one namespace, acting through `kubectl --as` (impersonation) on
the real API server with the install's admission policy (manifests/base/admission/tenants.yaml):
queue tenants hold at admission, `spec.user` cannot be borrowed, EventSinks (the only URLs Sluice
calls) are admin-only, and another namespace's Secrets stay out of reach."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from operators.api.batch import VCJob
from operators.api.events import EventSink
from operators.api.scheduling import PodGroup, Queue

pytestmark = pytest.mark.e2e

POLICY = Path(__file__).resolve().parents[1] / "manifests" / "base" / "admission" / "tenants.yaml"
USER = "alice"


def resource(model: Any) -> str:
    return f"{model.plural}.{model.group}"


@pytest.fixture
def other(k8s: client.ApiClient) -> Iterator[str]:
    name = f"e2e-{uuid.uuid4().hex[:8]}"
    core = client.CoreV1Api(k8s)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    core.create_namespaced_secret(
        name, client.V1Secret(metadata=client.V1ObjectMeta(name="db"), string_data={"pw": "x"})
    )
    try:
        yield name
    finally:
        core.delete_namespace(name)


@pytest.fixture
def setup(kubectl: Any, namespace: str, other: str) -> Iterator[dict[str, str]]:
    """alice may create jobs, PodGroups and pods in `namespace`; queue `<x>-closed` lists only
    `other` as tenant, `<x>-open` lists none."""
    kubectl("apply", "--server-side", "-f", str(POLICY))
    tag = namespace.removeprefix("e2e-")
    queues = {"closed": f"closed-{tag}", "open": f"open-{tag}"}
    docs = [
        {
            "apiVersion": f"{Queue.group}/{Queue.version}",
            "kind": "Queue",
            "metadata": {"name": queues["closed"]},
            "spec": {"tenants": [{"namespace": other, "priority": 5}]},
        },
        {
            "apiVersion": f"{Queue.group}/{Queue.version}",
            "kind": "Queue",
            "metadata": {"name": queues["open"]},
            "spec": {},
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": "submitter", "namespace": namespace},
            "rules": [
                {
                    "apiGroups": [VCJob.group, PodGroup.group],
                    "resources": [VCJob.plural, PodGroup.plural],
                    "verbs": ["create", "get", "list"],
                },
                {"apiGroups": [""], "resources": ["pods"], "verbs": ["create", "get"]},
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "submitter", "namespace": namespace},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": "submitter",
            },
            "subjects": [{"kind": "User", "name": USER, "apiGroup": "rbac.authorization.k8s.io"}],
        },
    ]
    kubectl("apply", "-f", "-", input="\n---\n".join(json.dumps(d) for d in docs))
    try:
        yield queues
    finally:
        kubectl("delete", resource(Queue), *queues.values(), "--ignore-not-found", check=False)
        # Later tests in the session submit to sample queues that list tenants.
        kubectl("delete", "--ignore-not-found", "-f", str(POLICY), check=False)


def as_user(kubectl: Any, ns: str, body: dict[str, Any]) -> tuple[bool, str]:
    done = kubectl("--as", USER, "-n", ns, "create", "-f", "-", input=json.dumps(body), check=False)
    return done.returncode == 0, done.stderr


def vcjob(name: str, queue: str, **extra: Any) -> dict[str, Any]:
    task = {
        "name": "w",
        "replicas": 1,
        "template": {"spec": {"containers": [{"name": "c", "image": "x"}]}},
    }
    return {
        "apiVersion": f"{VCJob.group}/{VCJob.version}",
        "kind": "VCJob",
        "metadata": {"name": name},
        "spec": {"queue": queue, "tasks": [task], **extra},
    }


def podgroup(name: str, queue: str, **extra: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{PodGroup.group}/{PodGroup.version}",
        "kind": "PodGroup",
        "metadata": {"name": name},
        "spec": {"queue": queue, "minMember": 1, **extra},
    }


def refused_once_active(kubectl: Any, ns: str, body: dict[str, Any]) -> str:
    """The API server loads a new policy within seconds: retry until it answers."""
    deadline = time.monotonic() + 60
    while True:
        body = json.loads(json.dumps(body))
        body["metadata"]["name"] = f"probe-{uuid.uuid4().hex[:6]}"
        ok, err = as_user(kubectl, ns, body)
        if not ok:
            return err
        assert time.monotonic() < deadline, "the admission policy never took effect"
        time.sleep(1)


def test_a_queue_takes_work_only_from_its_tenants(
    kubectl: Any, namespace: str, setup: dict[str, str]
) -> None:
    closed, open_ = setup["closed"], setup["open"]
    err = refused_once_active(kubectl, namespace, vcjob("x", closed))
    assert f"queue {closed} does not list namespace {namespace}" in err
    assert as_user(kubectl, namespace, vcjob("fine", open_))[0]
    ok, err = as_user(kubectl, namespace, podgroup("pg", closed))
    assert not ok
    assert "spec.tenants" in err
    assert as_user(kubectl, namespace, podgroup("pg", open_))[0]
    # A bare pod handed to Sluice gets an implicit group in the queue its label names.
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "bare", "labels": {"scheduling.sluice.dev/queue": closed}},
        "spec": {"schedulerName": "sluice", "containers": [{"name": "c", "image": "x"}]},
    }
    ok, err = as_user(kubectl, namespace, pod)
    assert not ok
    assert "spec.tenants" in err


def test_spec_user_cannot_name_someone_else(
    kubectl: Any, namespace: str, setup: dict[str, str]
) -> None:
    open_ = setup["open"]
    err = refused_once_active(kubectl, namespace, podgroup("x", open_, user="bob"))
    assert "spec.user may only name yourself (alice)" in err
    assert as_user(kubectl, namespace, podgroup("mine", open_, user=USER))[0]


def test_no_user_supplied_urls_and_no_other_namespaces_secrets(
    kubectl: Any, namespace: str, other: str, setup: dict[str, str]
) -> None:
    sink = {
        "apiVersion": f"{EventSink.group}/{EventSink.version}",
        "kind": "EventSink",
        "metadata": {"name": f"evil-{namespace}"},
        "spec": {"url": "http://169.254.169.254/latest/meta-data"},
    }
    ok, err = as_user(kubectl, namespace, sink)
    assert not ok
    assert "forbidden" in err.lower()
    # A hook names a sink; a URL in it is not part of the API (strict field validation).
    job = vcjob("hooked", setup["open"], hooks=[{"sink": "x", "url": "http://10.0.0.1/"}])
    ok, err = as_user(kubectl, namespace, job)
    assert not ok
    assert 'unknown field "spec.hooks[0].url"' in err
    secret = kubectl("--as", USER, "-n", other, "get", "secret", "db", check=False)
    assert secret.returncode != 0
    assert "forbidden" in secret.stderr.lower()
