"""Pinned versions of the control-plane binaries and where their builds are cached."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

KUBERNETES_VERSION = "v1.33.13"
ETCD_VERSION = "v3.5.21"
KWOK_VERSION = "v0.7.0"
# Not part of the cluster: renders and lints charts/sluice in tests (tests/unit/install/test_helm.py).
HELM_VERSION = "v3.18.6"


@dataclass(frozen=True)
class Component:
    """One Go build: the wrapper module that pins it and the binaries it yields."""

    name: str
    version: str
    module_dir: str  # folder under operators/devcluster/toolchain/ holding go.mod and go.sum
    packages: tuple[tuple[str, str], ...]  # (binary name, Go package path)
    stamp_kubernetes_version: bool = False
    version_variable: str | None = None  # a Go string variable `-X` sets to `version`
    cluster: bool = True  # the dev cluster cannot start without it


COMPONENTS: tuple[Component, ...] = (
    Component(
        name="etcd",
        version=ETCD_VERSION,
        module_dir="etcd",
        packages=(("etcd", "go.etcd.io/etcd/server/v3"),),
    ),
    Component(
        name="kwok",
        version=KWOK_VERSION,
        module_dir="kwok",
        packages=(("kwok", "sigs.k8s.io/kwok/cmd/kwok"),),
    ),
    Component(
        name="kubernetes",
        version=KUBERNETES_VERSION,
        module_dir="kubernetes",
        packages=(
            ("kube-apiserver", "k8s.io/kubernetes/cmd/kube-apiserver"),
            ("kube-controller-manager", "k8s.io/kubernetes/cmd/kube-controller-manager"),
            ("kube-scheduler", "k8s.io/kubernetes/cmd/kube-scheduler"),
            ("kubectl", "k8s.io/kubernetes/cmd/kubectl"),
        ),
        stamp_kubernetes_version=True,
    ),
    Component(
        name="helm",
        version=HELM_VERSION,
        module_dir="helm",
        packages=(("helm", "helm.sh/helm/v3/cmd/helm"),),
        version_variable="helm.sh/helm/v3/internal/version.version",
        cluster=False,
    ),
)


def cache_root() -> Path:
    """Built binaries live outside the repo so a fresh clone reuses them (SLUICE_CACHE overrides)."""
    env = os.environ.get("SLUICE_CACHE")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return base / "sluice"


def bin_dir(component: Component) -> Path:
    return cache_root() / "bin" / f"{component.name}-{component.version}"


def binary_path(binary: str) -> Path:
    for component in COMPONENTS:
        for name, _ in component.packages:
            if name == binary:
                return bin_dir(component) / name
    raise KeyError(binary)
