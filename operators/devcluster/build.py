"""Build the control-plane binaries with the ordinary `go` client and cache them by version.

Each component has a wrapper Go module under toolchain/ whose go.mod/go.sum pin every dependency,
so a clean machine builds exactly what was verified. Builds go to a temporary folder and are moved
into the cache only when complete, so an interrupted build never leaves a half-written cache.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import TextIO

from operators.devcluster.errors import DevClusterError
from operators.devcluster.versions import COMPONENTS, Component, bin_dir, cache_root

MIN_GO = (1, 24)


def _go_version() -> tuple[int, int]:
    go = shutil.which("go")
    if go is None:
        raise DevClusterError(
            "the Go toolchain (`go`) is not on PATH; it is needed once to build etcd, "
            "kube-apiserver, kube-controller-manager, kube-scheduler and kwok",
            f"install Go >= {MIN_GO[0]}.{MIN_GO[1]} (e.g. /usr/local/go/bin) and put it on PATH, "
            "then run `make setup` again",
        )
    out = subprocess.run([go, "version"], capture_output=True, text=True, check=False).stdout
    match = re.search(r"go(\d+)\.(\d+)", out)
    if not match:
        raise DevClusterError(f"cannot read the Go version from {out!r}", "check `go version`")
    version = (int(match.group(1)), int(match.group(2)))
    if version < MIN_GO:
        raise DevClusterError(
            f"Go {version[0]}.{version[1]} is too old to build Kubernetes 1.33",
            f"install Go >= {MIN_GO[0]}.{MIN_GO[1]}",
        )
    return version


def is_cached(component: Component) -> bool:
    target = bin_dir(component)
    return all(os.access(target / name, os.X_OK) for name, _ in component.packages)


def _ldflags(component: Component) -> str:
    flags = ["-s", "-w"]
    if component.version_variable:
        flags.append(f"-X {component.version_variable}={component.version}")
    if component.stamp_kubernetes_version:
        # Unstamped binaries report v0.0.0-master, which confuses version-skew checks.
        major, minor = component.version.lstrip("v").split(".")[:2]
        for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
            flags += [
                f"-X {pkg}.gitVersion={component.version}",
                f"-X {pkg}.gitMajor={major}",
                f"-X {pkg}.gitMinor={minor}",
                f"-X {pkg}.gitTreeState=clean",
            ]
    return " ".join(flags)


def build_component(component: Component, log: Path, toolchain: Traversable | None = None) -> None:
    root = toolchain or resources.files("operators.devcluster") / "toolchain"
    module_src = root / component.module_dir
    env = {
        **os.environ,
        "GOTOOLCHAIN": "local",
        "CGO_ENABLED": "0",
        # Some k8s.io staging versions are missing from the checksum database; go.sum pins them.
        "GONOSUMDB": "k8s.io",
        "GOFLAGS": "-mod=mod",
    }
    target = bin_dir(component)
    with tempfile.TemporaryDirectory(prefix=f"sluice-build-{component.name}-") as tmp:
        work = Path(tmp)
        for name in ("go.mod", "go.sum"):
            (work / name).write_bytes((module_src / name).read_bytes())
        out_dir = work / "out"
        out_dir.mkdir()
        for binary, package in component.packages:
            cmd = [
                "go", "build", "-trimpath", "-tags=selinux,notest",
                f"-ldflags={_ldflags(component)}", "-o", str(out_dir / binary), package,
            ]  # fmt: skip
            with log.open("a") as fh:
                fh.write(f"$ {' '.join(cmd)}\n")
                fh.flush()
                result = subprocess.run(cmd, cwd=work, env=env, stdout=fh, stderr=fh, check=False)
            if result.returncode != 0:
                tail = "\n".join(log.read_text().splitlines()[-25:])
                raise DevClusterError(
                    f"building {binary} {component.version} failed (exit {result.returncode}); "
                    f"last lines of {log}:\n{tail}",
                    "check that the Go module proxy is reachable (`go env GOPROXY`) and that "
                    "the disk has ~6 GB free for the module and build caches; then re-run "
                    "`make setup`",
                )
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = target.with_name(target.name + ".partial")
        shutil.rmtree(staging, ignore_errors=True)
        shutil.copytree(out_dir, staging)
        shutil.rmtree(target, ignore_errors=True)
        staging.rename(target)


def build_all(force: bool = False, out: TextIO = sys.stdout) -> None:
    """Build every component that is not cached yet; print one line per component."""
    pending = [c for c in COMPONENTS if force or not is_cached(c)]
    for component in COMPONENTS:
        if component not in pending:
            print(f"{component.name} {component.version}: cached in {bin_dir(component)}", file=out)
    if not pending:
        return
    _go_version()
    log = cache_root() / "build.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("")
    for component in pending:
        print(
            f"{component.name} {component.version}: building (first time only; all components "
            f"take about 9 minutes on 2 cores; log {log})",
            file=out,
        )
        started = time.monotonic()
        build_component(component, log)
        print(
            f"{component.name} {component.version}: built in {time.monotonic() - started:.0f} s "
            f"-> {bin_dir(component)}",
            file=out,
        )
