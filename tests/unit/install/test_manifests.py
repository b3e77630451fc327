"""The install manifests, rendered by kustomize: least privilege, hardened pods, overlays."""

from __future__ import annotations

from typing import Any

import pytest

from operators.__main__ import OPERATORS
from operators.controllers.events import EventsSettings
from operators.controllers.kopf_runner import KopfSettings
from operators.install.kustomize import MANIFESTS, REPO, build, deployments, operator_container
from operators.runtime.settings import SchedulerSettings, load_settings

BASE = MANIFESTS / "base"
OVERLAYS = {name: MANIFESTS / "overlays" / name for name in ("dev", "production")}


@pytest.fixture(scope="module")
def rendered() -> dict[str, list[dict[str, Any]]]:
    return {"base": build(BASE)} | {name: build(path) for name, path in OVERLAYS.items()}


def of_kind(objects: list[dict[str, Any]], *kinds: str) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] in kinds]


def test_no_role_grants_wildcards(rendered: dict[str, list[dict[str, Any]]]) -> None:
    roles = of_kind(rendered["base"], "ClusterRole", "Role")
    assert len(roles) >= 5
    for role in roles:
        for rule in role["rules"]:
            for key in ("verbs", "resources", "apiGroups"):
                assert "*" not in rule.get(key, []), (role["metadata"]["name"], rule)
            assert not rule.get("nonResourceURLs"), role["metadata"]["name"]
        # Nothing in the install may grant rights or escalate.
        granted = {
            (g, r) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]
        }
        assert not {g for g, _ in granted} & {"rbac.authorization.k8s.io", "certificates.k8s.io"}


def test_every_operator_deployment_runs_a_registered_operator_as_its_own_account(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    objects = rendered["base"]
    accounts = {o["metadata"]["name"] for o in of_kind(objects, "ServiceAccount")}
    bound: dict[str, set[str]] = {}
    for binding in of_kind(objects, "ClusterRoleBinding", "RoleBinding"):
        for subject in binding["subjects"]:
            bound.setdefault(subject["name"], set()).add(binding["roleRef"]["name"])
    seen: set[str] = set()
    for deployment in deployments(objects):
        operator = operator_container(deployment)["args"][0]
        assert operator in OPERATORS, f"{deployment['metadata']['name']} runs unknown {operator}"
        account = deployment["spec"]["template"]["spec"]["serviceAccountName"]
        assert account == f"sluice-{operator}"
        assert account in accounts
        assert f"sluice-{operator}" in bound[account]  # its own ClusterRole, named after it
        assert account not in seen, "operators never share an identity"
        seen.add(account)
    assert "sluice-scheduler" in seen


@pytest.mark.parametrize("overlay", ["base", "dev", "production"])
def test_operator_pods_are_hardened(
    rendered: dict[str, list[dict[str, Any]]], overlay: str
) -> None:
    for deployment in deployments(rendered[overlay]):
        pod = deployment["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["runAsUser"] != 0
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        for container in pod["containers"]:
            ctx = container["securityContext"]
            assert ctx["allowPrivilegeEscalation"] is False
            assert ctx["readOnlyRootFilesystem"] is True
            assert ctx["capabilities"] == {"drop": ["ALL"]}
            assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
            assert container["readinessProbe"]["httpGet"]["port"] == "metrics"


def test_dev_overlay_runs_one_replica_each_with_debug_logs(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    for deployment in deployments(rendered["dev"]):
        assert deployment["spec"]["replicas"] == 1
        env = {e["name"]: e.get("value") for e in operator_container(deployment)["env"]}
        assert env["SLUICE_LOG_LEVEL"] == "DEBUG"


def test_production_overlay_runs_two_schedulers_apart_with_resources(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    objects = rendered["production"]
    by_name = {d["metadata"]["name"]: d for d in deployments(objects)}
    scheduler = by_name["sluice-scheduler"]
    assert scheduler["spec"]["replicas"] == 2
    anti = scheduler["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
    terms = anti["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms[0]["topologyKey"] == "kubernetes.io/hostname"
    for deployment in by_name.values():
        resources = operator_container(deployment)["resources"]
        assert resources["requests"]["cpu"]
        assert resources["requests"]["memory"]
        assert resources["limits"]["memory"]
    budget = next(o for o in of_kind(objects, "PodDisruptionBudget"))
    assert budget["spec"]["maxUnavailable"] == 1


def test_argo_cd_sync_waves_put_crds_first_and_custom_resources_last(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    def wave(obj: dict[str, Any]) -> int:
        annotations = obj["metadata"].get("annotations") or {}
        return int(annotations.get("argocd.argoproj.io/sync-wave", "0"))

    objects = rendered["production"]
    crd_waves = {wave(o) for o in of_kind(objects, "CustomResourceDefinition")}
    custom = [o for o in objects if o["apiVersion"].split("/")[0].endswith("sluice.dev")]
    assert custom, "the built-in Queues"
    others = [o for o in objects if o not in custom and o["kind"] != "CustomResourceDefinition"]
    assert crd_waves == {-1}
    assert {wave(o) for o in custom} == {1}
    assert {wave(o) for o in others} == {0}
    assert len(of_kind(objects, "CustomResourceDefinition")) == len(
        list((REPO / "crds").glob("*.yaml"))
    )


# The operators that export Prometheus metrics: their settings and the field naming the port they
# serve it on (kopf operators serve /metrics beside /healthz on their health port).
METRICS_SETTINGS: dict[str, tuple[type[Any], str, str]] = {
    "scheduler": (SchedulerSettings, "", "metrics_port"),
    "events": (EventsSettings, "events", "metrics_port"),
    **{name: (KopfSettings, name, "health_port") for name in ("pool", "queue", "podgroup", "jobs")},
}


def test_every_operator_exporting_metrics_is_behind_the_metrics_service(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    objects = rendered["base"]
    (service,) = [
        o for o in of_kind(objects, "Service") if o["metadata"]["name"] == "sluice-metrics"
    ]
    selector = service["spec"]["selector"].items()
    (target,) = {p["targetPort"] for p in service["spec"]["ports"]}
    scraped = set()
    for deployment in deployments(objects):
        container = operator_container(deployment)
        operator = container["args"][0]
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        if operator not in METRICS_SETTINGS:
            assert not selector <= labels.items(), f"{operator} serves no /metrics"
            continue
        assert selector <= labels.items(), f"{operator}'s /metrics is not scraped"
        cls, prefix, port_field = METRICS_SETTINGS[operator]
        env = {e["name"]: e["value"] for e in container.get("env") or [] if "value" in e}
        settings = load_settings(cls, environ=env, prefix=prefix)
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        port = getattr(settings, port_field)
        assert port == ports[target], f"{operator} serves /metrics elsewhere"
        scraped.add(operator)
    assert scraped == set(METRICS_SETTINGS)
