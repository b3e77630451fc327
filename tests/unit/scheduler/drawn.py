"""Random snapshots for property tests that draw them step by step (`st.data()`)."""

from __future__ import annotations

from hypothesis import strategies as st

from operators.scheduler.snapshot import PodGroup, Snapshot, Task

from .test_properties import clusters, opening, queue_trees, workloads


def drawn_snapshot(data: st.DataObject) -> tuple[Snapshot, tuple[list[PodGroup], list[Task]]]:
    """A random cluster, queue tree and first workload, plus a second workload to add later."""
    first, second = data.draw(workloads("a")), data.draw(workloads("b"))
    return opening(data.draw(clusters()), data.draw(queue_trees()), first), second
