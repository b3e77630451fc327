"""One odd object (unreadable annotations, quantities, delays, times) degrades to defaults and
never stops the scheduler."""

from __future__ import annotations

import asyncio
import math
from typing import Any

from operators.runtime import records as R
from operators.runtime.informer import Informer, WatchedKind
from operators.scheduler import snapshot as S

from .factories import node, pod, podgroup
from .test_informer import ScriptedApi, obj

# ---- one odd object must not stop the scheduler --------------------------------------


def test_gpu_ids_that_are_digits_only_to_unicode_are_ignored() -> None:
    assert "²".isdigit()  # the trap: int("²") raises
    assert R.parse_gpu_ids("0,²,1,٣, 2 ,9" + "9" * 5000) == (0, 1, 2)
    rec = R.pod(pod("p", annotations={"scheduling.sluice.dev/gpu-ids": "²"}))
    assert rec.gpu_ids == ()


def test_unreadable_annotations_and_quantities_degrade_to_defaults() -> None:
    raw = node("n1")
    raw["metadata"]["annotations"]["scheduling.sluice.dev/gpu-topology"] = "[" * 100_000
    assert R.node(raw).gpu_topology == S.GpuTopology()  # RecursionError inside json, not raised
    odd = pod("p", cpu="1e999999999", annotations={"scheduling.sluice.dev/gpu-milli": "²"})
    rec = R.pod(odd)
    assert rec.requests == {}
    assert rec.gpu_milli == 0


async def test_informer_skips_an_object_its_transform_cannot_read() -> None:
    def transform(raw: dict[str, Any]) -> int:
        return int(str(raw["v"]))  # "²" raises, like parse_gpu_ids did

    api = ScriptedApi(
        [[obj("a", "1", 1), {**obj("bad", "2"), "v": "²"}, obj("c", "3", 3)]],
        [
            [
                {"type": "MODIFIED", "object": {**obj("a", "11"), "v": "²"}},
                {"type": "ADDED", "object": obj("d", "12", 4)},
            ]
        ],
    )
    seen: list[tuple[str, str]] = []
    fake_client: Any = api
    informer: Informer[int] = Informer(
        fake_client,
        WatchedKind("things", "/x"),
        transform,
        lambda kind, key, new, old: seen.append((kind, key[1])),
    )
    task = asyncio.create_task(informer.run())
    await asyncio.wait_for(api.done.wait(), 5)
    task.cancel()
    assert api.list_calls == 1  # no re-list loop
    assert informer.store == {("ns", "c"): 3, ("ns", "d"): 4}
    assert ("DELETED", "a") in seen  # its unreadable new version drops the old one
    assert informer.skipped == 2


# ---- preemption delays must be finite and bounded ------------------------------------

DELAY = "scheduling.sluice.dev/preemption-delay-seconds"


def test_preemption_delays_are_finite_and_clamped_to_thirty_days() -> None:
    month = R.MAX_PREEMPTION_DELAY
    assert month == 30 * 24 * 3600
    for raw, want in [("inf", None), ("nan", None), ("-inf", None), ("x", None), ("1e12", month)]:
        assert R.pod(pod("p", annotations={DELAY: raw})).preemption_delay == want, raw
    assert R.pod(pod("p", annotations={DELAY: "-5"})).preemption_delay == 0.0
    assert R.pod(pod("p", annotations={DELAY: "90"})).preemption_delay == 90.0
    group = podgroup("g")
    group["spec"]["preemptionDelaySeconds"] = "Infinity"
    assert R.podgroup(group).group.preemption_grace is None
    group["spec"]["preemptionDelaySeconds"] = 1e300
    assert R.podgroup(group).group.preemption_grace == month
    queue = {"metadata": {"name": "q"}, "spec": {"preemptionDelaySeconds": "nan", "weight": "inf"}}
    assert R.queue(queue).preemption_delay == 0.0
    assert R.queue(queue).weight == 1.0
    queue["spec"]["preemptionDelaySeconds"] = "1e12"
    assert R.queue(queue).preemption_delay == month


def test_rfc3339_clamps_instead_of_raising() -> None:
    assert R.rfc3339(math.inf) == "9999-12-31T23:59:59Z"
    assert R.rfc3339(1e20) == "9999-12-31T23:59:59Z"
    assert R.rfc3339(-math.inf) == "1970-01-01T00:00:00Z"
    assert R.rfc3339(math.nan) == "1970-01-01T00:00:00Z"
    assert R.rfc3339(0.0) == "1970-01-01T00:00:00Z"


def test_a_node_claiming_a_billion_gpus_is_read_with_a_bounded_count() -> None:
    # Found by tests/unit/runtime/test_fuzz_scheduler_input.py: the session's card rows are as
    # wide as the widest node, so `nvidia.com/gpu: 999999999` took 19 GB and was OOM-killed.
    raw = node("n1", gpus=999_999_999)
    assert R.node(raw).gpu_count == R.MAX_GPUS_PER_NODE
    assert R.node(node("n2", gpus=8)).gpu_count == 8
