"""The bind-time re-check (SchedulerCache.room_conflict) reads per-node sums kept as pods and
assumptions come and go; here against the plain walk over the node's pods it replaced, through
random sequences: pods of ours and of other schedulers bound, finished, deleted, assumed,
forgotten, with whole and shared GPU cards."""

from __future__ import annotations

from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from operators.api import labels as L
from operators.runtime import records as R
from operators.runtime.cache import SchedulerCache
from operators.scheduler import snapshot as S

from .factories import node, pod
from .test_cache import Harness

NODES = ("n1", "n2")
# pod, action, node, cpu, GPU cards, shared (half a card), finished
Step = tuple[int, str, str, str, tuple[int, ...], bool, bool]

steps = st.lists(
    st.tuples(
        st.integers(0, 3),
        st.sampled_from(("ours", "foreign", "assume", "forget", "delete")),
        st.sampled_from(NODES),
        st.sampled_from(("3", "5")),  # on 8 cores: any two fit, three do not
        st.sampled_from(((), (0,), (1,), (0, 1))),
        st.booleans(),
        st.booleans(),
    ),
    max_size=25,
)


def walked(cache: SchedulerCache, pod_uid: str) -> str | None:
    """room_conflict as it was: every pod on the node, summed at each ask."""
    mine, rec = cache.assumed.get(pod_uid), cache.pods.get(pod_uid)
    if rec is None or rec.node_name:
        return None
    if mine is None:
        return "its assumed room was given up while the binding waited"
    where = cache.nodes[mine.node]
    used: dict[str, int] = dict(rec.requests)
    cards: dict[int, int] = {}
    others: list[tuple[R.PodRecord, tuple[int, ...]]] = []
    for other in cache.pods.values():
        if other.uid == pod_uid:
            continue
        if other.holds_resources and other.node_name == mine.node:
            others.append((other, other.gpu_ids))
        held = cache.assumed.get(other.uid)
        if held is not None and held.node == mine.node and not other.node_name:
            others.append((other, held.gpu_ids))
    for other, ids in others:
        for res, amount in other.requests.items():
            used[res] = used.get(res, 0) + amount
        for card in ids:
            cards[card] = cards.get(card, 0) + (other.gpu_milli or S.GPU_MILLI_PER_CARD)
    for res, amount in sorted(used.items()):
        if amount > where.allocatable.get(res, 0) and rec.requests.get(res, 0) > 0:
            return f"{res} on {mine.node}: {amount} requested of {where.allocatable.get(res, 0)}"
    for card in mine.gpu_ids:
        if cards.get(card, 0) + (rec.gpu_milli or S.GPU_MILLI_PER_CARD) > S.GPU_MILLI_PER_CARD:
            return f"GPU {card} on {mine.node} is held by another pod"
    return None


def raw_pod(
    i: int, ours: bool, where: str, cpu: str, cards: tuple[int, ...], shared: bool, finished: bool
) -> dict[str, Any]:
    """A pod asking for `cards` whole GPUs, or (shared) half of the first of them."""
    annotations: dict[str, str] = {}
    if cards and where:
        annotations[L.GPU_IDS] = ",".join(map(str, cards))
    if shared:
        annotations[L.GPU_MILLI] = "500"
    return pod(
        f"p{i}",
        uid=f"p{i}",
        scheduler="sluice" if ours else "default-scheduler",
        cpu=cpu,
        gpu=0 if shared else len(cards),
        node=where,
        phase="Succeeded" if finished else "Running" if where else "Pending",
        annotations=annotations,
    )


@settings(max_examples=150, deadline=None)
@given(steps)
# Found by hand: a deleted pod and a forgotten assumption must give their room back.
@example(
    [
        (0, "ours", "n1", "5", (), False, False),
        (0, "assume", "n1", "5", (), False, False),
        (1, "foreign", "n1", "5", (), False, False),
        (1, "delete", "n1", "5", (), False, False),
    ]
)
@example(
    [
        (0, "ours", "n1", "5", (0,), False, False),
        (0, "assume", "n1", "5", (0,), False, False),
        (2, "ours", "n1", "5", (0,), False, False),
        (2, "assume", "n1", "5", (0,), False, False),
        (2, "forget", "n1", "5", (), False, False),
    ]
)
def test_the_kept_sums_decide_as_the_walk_after_every_event(sequence: list[Step]) -> None:
    h = Harness()
    for name in NODES:
        h.node(node(name, cpu="8", gpus=2))
    for i, action, where, cpu, cards, shared, finished in sequence:
        uid = f"p{i}"
        if action == "delete":
            if ("ns", uid) in h.pods:
                h.delete_pod(uid)
        elif action == "assume":
            h.cache.assume(uid, where, cards, now=0.0)
        elif action == "forget":
            h.cache.forget(uid)
        else:
            bound = where if finished or i % 2 else ""
            h.pod(raw_pod(i, action == "ours", bound, cpu, cards, shared, finished))
        for j in range(4):
            assert h.cache.room_conflict(f"p{j}") == walked(h.cache, f"p{j}"), (j, sequence)
