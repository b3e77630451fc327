"""Every file this package generates into the repository, written by `make crds` and checked by
`make lint`: generated files are never edited by hand."""

from __future__ import annotations

from pathlib import Path

from operators.install import argocd, crds, helmchart
from operators.install.kustomize import REPO

# Folders wholly generated: a file there that the generator no longer writes is removed.
OWNED = (helmchart.CHART,)


def expected() -> dict[Path, str]:
    return {
        REPO / "crds" / crds.NAME: crds.kustomization(REPO / "crds"),
        argocd.CONFIGMAP: argocd.configmap(),
        **helmchart.render(),
    }


def _strays(files: dict[Path, str]) -> list[Path]:
    return [
        path
        for folder in OWNED
        if folder.exists()
        for path in sorted(folder.rglob("*"))
        if path.is_file() and path not in files
    ]


def stale() -> list[Path]:
    files = expected()
    changed = [p for p, text in files.items() if not p.exists() or p.read_text() != text]
    return changed + _strays(files)


def write_all() -> list[Path]:
    touched = []
    # The chart renders the kustomize base, which includes crds/ through this file: write it first.
    first = REPO / "crds" / crds.NAME
    text = crds.kustomization(REPO / "crds")
    if not first.exists() or first.read_text() != text:
        first.write_text(text)
        touched.append(first)
    files = expected()
    for path in _strays(files):
        path.unlink()
        touched.append(path)
    for path, text in files.items():
        if not path.exists() or path.read_text() != text:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            touched.append(path)
    return touched
