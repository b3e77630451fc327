"""The kopf operators, one per concern, each runnable alone with `python -m operators <name>`.

kopf is first imported here, before any operator module, with the `kubernetes` and
`kubernetes_asyncio` packages hidden for the duration of that import: kopf imports their API
clients when they are installed, only to recognise their model objects in what handlers return,
which Sluice's handlers never do (they speak plain dicts through `operators.runtime.client`). Both
are installed (the devcluster tools use one, exec credential plugins the other), and the two
imports cost about 110 MB of RSS in every operator process (docs/benchmarks.md, "Jobs
operator"). Hidden only while kopf is imported: both stay importable for whoever needs them.
"""

from __future__ import annotations

import sys

_NOT_FOR_KOPF = ("kubernetes", "kubernetes_asyncio")


def _import_kopf() -> None:
    hidden = [name for name in _NOT_FOR_KOPF if name not in sys.modules]
    for name in hidden:
        sys.modules[name] = None  # type: ignore[assignment]  # import raises ImportError
    try:
        import kopf  # noqa: F401
    finally:
        for name in hidden:
            if sys.modules.get(name, ...) is None:
                del sys.modules[name]


_import_kopf()
