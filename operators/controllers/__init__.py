"""The kopf operators, one per concern, each runnable alone with `python -m operators <name>`.

kopf is imported with the `kubernetes` and `kubernetes_asyncio` packages hidden for the duration
of that import: kopf imports their API clients when they are installed, only to recognise their
model objects in what handlers return, which Sluice's handlers never do (they speak plain dicts
through `operators.runtime.client`). Both are installed (the devcluster tools use one, exec
credential plugins the other), and the two imports cost about 110 MB of RSS in every operator
process (docs/benchmarks.md, "Jobs operator"). Hidden only while kopf is imported: both stay
importable for whoever needs them.

The hiding is armed here but happens only when something imports kopf (a finder on
`sys.meta_path` wraps kopf's own loader), so the scheduler, which is no kopf operator, never
imports kopf at all: on a loaded machine kopf was a third of its start-up before it could list
the cluster and bind anything (docs/benchmarks.md, issue 20).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from collections.abc import Sequence
from types import ModuleType

_NOT_FOR_KOPF = ("kubernetes", "kubernetes_asyncio")


class _KopfLoader(importlib.abc.Loader):
    """kopf's own loader, run with the client packages hidden."""

    def __init__(self, real: importlib.abc.Loader) -> None:
        self.real = real

    def __getattr__(self, name: str) -> object:
        return getattr(self.real, name)  # resource readers and the like: kopf's own

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.real.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        hidden = [name for name in _NOT_FOR_KOPF if name not in sys.modules]
        for name in hidden:
            sys.modules[name] = None  # type: ignore[assignment]  # import raises ImportError
        try:
            self.real.exec_module(module)
        finally:
            for name in hidden:
                if sys.modules.get(name, ...) is None:
                    del sys.modules[name]


class _KopfFinder(importlib.abc.MetaPathFinder):
    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != "kopf":
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is not None and spec.loader is not None:
            spec.loader = _KopfLoader(spec.loader)
        return spec


if "kopf" not in sys.modules and not any(isinstance(f, _KopfFinder) for f in sys.meta_path):
    sys.meta_path.insert(0, _KopfFinder())
