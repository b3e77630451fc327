"""Time-based fair share: past usage corrects the over-quota split among siblings, never the
guarantees (docs/scheduling.md "Time-based fair share"; operators/scheduler/usage.py)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from operators.scheduler import run_session
from operators.scheduler.queues import QueueTree
from operators.scheduler.resources import ResourceSpace
from operators.scheduler.snapshot import GPU, ROOT_QUEUE, Queue, Snapshot
from operators.scheduler.usage import UsageParams, accrue, corrected_weights, decayed

from .builders import group, node, tasks

HOUR = 3600.0
DAY = 24 * HOUR


def _cluster(root_k: float, usage: dict[str, float], guarantee: int = 0) -> Snapshot:
    """Two 8-GPU nodes (16 GPUs); queues a and b (weight 1 each, ``guarantee`` GPUs each) both
    want all 16."""
    queues = (
        Queue(ROOT_QUEUE, parent=None, reclaimable=False, usage_k=root_k),
        *(Queue(q, guarantee={GPU: guarantee} if guarantee else {}, usage=usage[q]) for q in "ab"),
    )
    return Snapshot(
        now=0.0,
        nodes=(node("n0", cpu=64, gpus=8), node("n1", cpu=64, gpus=8)),
        queues=queues,
        groups=(group("ja", queue="a", min_member=1), group("jb", queue="b", min_member=1)),
        tasks=(*tasks("ja", 16, cpu=1, gpus=1), *tasks("jb", 16, cpu=1, gpus=1)),
    )


def test_hand_computed_split_of_the_over_quota_share() -> None:
    # a used 3 times what b used. w = (1/2, 1/2), u = (3/4, 1/4), k = 1:
    # a: 1/2 + (1/2 - 3/4) = 1/4, b: 1/2 + (1/2 - 1/4) = 3/4 of the 16 GPUs.
    result = run_session(_cluster(1.0, {"a": 3000.0, "b": 1000.0}))
    assert result.queues["a"].deserved[GPU] == 4
    assert result.queues["b"].deserved[GPU] == 12


def test_guarantees_come_first_and_only_the_rest_is_corrected() -> None:
    # Guarantees of 4 each; the 8 GPUs left split 1/4 : 3/4 -> a 4 + 2 = 6, b 4 + 6 = 10.
    result = run_session(_cluster(1.0, {"a": 3000.0, "b": 1000.0}, guarantee=4))
    assert result.queues["a"].deserved[GPU] == 6
    assert result.queues["b"].deserved[GPU] == 10


def test_off_by_default_and_without_usage() -> None:
    for k, usage in ((0.0, {"a": 3000.0, "b": 1000.0}), (1.0, {"a": 0.0, "b": 0.0})):
        result = run_session(_cluster(k, usage))
        assert result.queues["a"].deserved[GPU] == result.queues["b"].deserved[GPU] == 8


def test_a_queue_corrected_to_zero_still_gets_what_nobody_else_wants() -> None:
    # k = 2: a gets max(0, 1/2 + 2 (1/2 - 1)) = 0 of the split while b is hungry ...
    weights = corrected_weights(np.array([1.0, 1.0]), np.array([5.0, 0.0]), 2.0)
    assert weights[0] < 1e-6
    assert abs(weights.sum() - 2.0) < 1e-6
    # ... but what b does not ask for is still a's.
    snap = _cluster(2.0, {"a": 5000.0, "b": 0.0})
    snap = Snapshot(
        now=0.0,
        nodes=snap.nodes,
        queues=snap.queues,
        groups=snap.groups,
        tasks=(*tasks("ja", 16, cpu=1, gpus=1), *tasks("jb", 4, cpu=1, gpus=1)),
    )
    result = run_session(snap)
    assert result.queues["b"].deserved[GPU] == 4
    assert result.queues["a"].deserved[GPU] == 12


def test_usage_buckets_slide_and_decay() -> None:
    p = UsageParams(half_life=DAY, window=7 * DAY, buckets=7)
    b = accrue((), gpus=8, start=0.0, end=DAY, p=p)  # 8 GPUs for the first day
    assert b == ((0.0, 8 * DAY),)
    assert decayed(b, DAY, p) == 8 * DAY  # the bucket just ended: no decay yet
    assert decayed(b, 2 * DAY, p) == 4 * DAY  # one half-life later
    b = accrue(b, gpus=2, start=DAY - HOUR, end=DAY + HOUR, p=p)  # split at the boundary
    assert b == ((0.0, 8 * DAY + 2 * HOUR), (DAY, 2 * HOUR))
    assert accrue(b, 0, 8 * DAY, 8 * DAY + 1, p) == ((DAY, 2 * HOUR),)  # day 0 left the window
    no_decay = UsageParams(half_life=0.0, window=7 * DAY, buckets=7)
    assert decayed(b, 6 * DAY, no_decay) == 8 * DAY + 4 * HOUR


@settings(max_examples=200, deadline=None)
@given(
    guarantees=st.lists(st.integers(0, 8), min_size=2, max_size=5),
    requests=st.lists(st.integers(0, 40), min_size=5, max_size=5),
    usage=st.lists(st.floats(0, 1e7), min_size=5, max_size=5),
    weights=st.lists(st.integers(1, 10), min_size=5, max_size=5),
    k=st.floats(0, 10),
)
def test_guarantees_never_move_whatever_the_usage(
    guarantees: list[int], requests: list[int], usage: list[float], weights: list[int], k: float
) -> None:
    """Each queue deserves at least min(guarantee, request), with or without usage, and the
    siblings share the same total: usage only moves the over-quota part between them."""
    space = ResourceSpace((GPU,))
    n = len(guarantees)
    total = space.vector({GPU: 40})
    unit = float(space.vector({GPU: 1})[space.gpu])  # the core's GPU unit

    def deserved(k_value: float) -> np.ndarray:
        queues = (
            Queue(ROOT_QUEUE, parent=None, reclaimable=False, usage_k=k_value),
            *(
                Queue(f"q{i}", guarantee={GPU: guarantees[i]}, weight=weights[i], usage=usage[i])
                for i in range(n)
            ),
        )
        tree = QueueTree(queues, space)
        for i in range(n):
            tree.demand[tree.position[f"q{i}"]] = space.vector({GPU: requests[i]})
        tree.compute_deserved(total)
        return np.array([tree.deserved[tree.position[f"q{i}"], space.gpu] / unit for i in range(n)])

    plain, corrected = deserved(0.0), deserved(k)
    floor = np.minimum(guarantees, requests[:n])
    assert (corrected >= floor - 1e-6).all()
    assert abs(corrected.sum() - plain.sum()) < 1e-6
    assert (corrected <= np.array(requests[:n]) + 1e-6).all()


def test_usage_too_large_to_add_up_changes_nothing() -> None:
    # Queue status is written by anyone with status rights: huge finite buckets of one queue sum
    # to inf on the way in, which made every weight NaN and gave the siblings nothing of the
    # over-quota share.
    weight = np.array([1.0, 1.0])
    with np.errstate(over="ignore", invalid="ignore"):
        out = corrected_weights(weight, np.array([np.inf, 1e308]), 1.0)
    assert np.isfinite(out).all()
    assert out.tolist() == [1.0, 1.0]
