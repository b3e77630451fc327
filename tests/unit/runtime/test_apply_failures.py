"""One decision that raises while being applied is skipped, counted and logged; the rest of the
cycle still applies and no assumption is left behind."""

from __future__ import annotations

from typing import Any

from operators.scheduler import decisions as D
from operators.scheduler.session import SessionResult

from .factories import pod
from .test_apply import applier, bind, gang
from .test_cache import Harness
from .test_leadership_fencing import NullApi


def failure_count(app: Any, kind: str) -> float:
    value = app.metrics.registry.get_sample_value("sluice_apply_failures_total", {"decision": kind})
    return float(value or 0.0)


async def test_a_decision_that_raises_is_skipped_and_the_rest_still_apply(caplog: Any) -> None:
    h = Harness()
    gang(h, 2)
    h.pod(pod("v-0", node="n9", phase="Running"))
    h.pod(pod("p-1"))
    app, binder = applier(h)

    def broken_peer_ref(group_uid: str) -> str:
        raise RuntimeError("unexpected object shape")

    app.cache.peer_ref = broken_peer_ref  # type: ignore[method-assign]
    result = SessionResult(
        decisions=(
            D.MarkWillEvict(victim="pod:uid-v-0", preemptor="pg-g", deadline=2e9),
            D.Nominate(task="uid-p-1", group="pod:uid-p-1", namespace="ns", name="p-1", node="n1"),
            bind("g-0", "n0"),
            bind("g-1", "n1"),
        ),
        explanations={},
    )
    app.client = NullApi()  # type: ignore[assignment]
    counts = app.apply(result, now=1.0)
    assert counts["bind"] == 2
    assert counts["nominate"] == 1
    await app.drain()
    assert binder.gangs == [["g-0", "g-1"]]
    assert failure_count(app, "markwillevict") == 1
    assert "applying markwillevict for Pod ns/v-0" in caplog.text


async def test_a_gang_that_raises_while_being_issued_leaves_no_assumption() -> None:
    h = Harness()
    gang(h, 2)
    h.pod(pod("solo"))
    app, binder = applier(h)
    real_assume = h.cache.assume

    def assume(pod_uid: str, node: str, gpu_ids: tuple[int, ...], now: float) -> bool:
        if pod_uid == "uid-g-1":
            raise ValueError("bad gpu ids")
        return real_assume(pod_uid, node, gpu_ids, now)

    h.cache.assume = assume  # type: ignore[method-assign]
    solo = D.Bind(task="uid-solo", group="pod:uid-solo", namespace="ns", name="solo", node="n5")
    result = SessionResult(decisions=(bind("g-0", "n0"), bind("g-1", "n1"), solo), explanations={})
    assert app.apply(result, now=1.0)["bind"] == 1
    await app.drain()
    assert binder.gangs == [["solo"]]
    assert "uid-g-0" not in h.cache.assumed
    assert "pg-g" not in app.binding_groups
    assert failure_count(app, "bind") == 1


async def test_a_binder_that_raises_is_logged_and_counted() -> None:
    h = Harness()
    gang(h, 2)
    app, binder = applier(h)

    async def exploding_bind_gang(requests: Any) -> Any:
        raise RuntimeError("boom")

    binder.bind_gang = exploding_bind_gang  # type: ignore[method-assign]
    app.apply(
        SessionResult(decisions=(bind("g-0", "n0"), bind("g-1", "n1")), explanations={}), now=1.0
    )
    await app.drain()
    assert failure_count(app, "bind") == 1
    assert app.binding_groups == set()
