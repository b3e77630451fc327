"""manifests/argocd/argocd-cm.yaml: the Lua health checks of manifests/argocd/health/ as the
`resource.customizations.health.<group>_<Kind>` keys of Argo CD's ConfigMap."""

from __future__ import annotations

from pathlib import Path

import yaml

from operators.install.kustomize import MANIFESTS

FOLDER = MANIFESTS / "argocd"
HEALTH = FOLDER / "health"
CONFIGMAP = FOLDER / "argocd-cm.yaml"

# Argo CD resource key -> Lua file; both job kinds share one state machine, so one script.
CHECKS = {
    "scheduling.sluice.dev_Pool": "scheduling.sluice.dev_Pool.lua",
    "scheduling.sluice.dev_Queue": "scheduling.sluice.dev_Queue.lua",
    "scheduling.sluice.dev_PodGroup": "scheduling.sluice.dev_PodGroup.lua",
    "batch.sluice.dev_HybridJob": "batch.sluice.dev_job.lua",
    "batch.sluice.dev_VCJob": "batch.sluice.dev_job.lua",
}


def health_script(resource_key: str, health: Path = HEALTH) -> str:
    return (health / CHECKS[resource_key]).read_text()


def configmap() -> str:
    data = {f"resource.customizations.health.{key}": health_script(key) for key in sorted(CHECKS)}
    body = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "argocd-cm",
            "namespace": "argocd",
            "labels": {"app.kubernetes.io/part-of": "argocd"},
        },
        "data": data,
    }

    class Literal(yaml.SafeDumper):
        pass

    def block(dumper: yaml.SafeDumper, text: str) -> yaml.Node:
        style = "|" if "\n" in text else None
        return dumper.represent_scalar("tag:yaml.org,2002:str", text, style=style)

    Literal.add_representer(str, block)
    return (
        "# Generated from manifests/argocd/health/*.lua by `make crds` (python -m operators.install\n"
        "# generate). Merge into Argo CD's argocd-cm, e.g. kubectl -n argocd patch configmap\n"
        "# argocd-cm --patch-file manifests/argocd/argocd-cm.yaml. Do not edit.\n"
        + yaml.dump(body, Dumper=Literal, sort_keys=False, width=200)
    )
