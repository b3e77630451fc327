"""A 32-GPU gang is not starved by a steady stream of 1-GPU pods (docs/scheduling.md).

All but four GPU nodes are taken by 8-GPU blockers; on the last four, 1-GPU pods (each done
after STREAM_RUN seconds, kwok completes them) arrive faster than they leave, so every GPU that
frees up has a taker. A gang of four 8-GPU pods of the same priority then arrives.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest
from kubernetes import client

from .scheduler_kit import (
    NODE_GPUS,
    Scheduler,
    assert_no_gpu_shared,
    bound,
    create_group,
    fill_cluster,
    pod,
    wait_for,
)

pytestmark = pytest.mark.e2e

GANG_NODES = 4
STREAM_RUN = "8s"  # how long a 1-GPU pod runs
STREAM_EVERY = 0.2  # seconds between arrivals: 5/s in, at most 32 GPUs / 8 s = 4/s out


class Stream:
    """Creates a 1-GPU pod every STREAM_EVERY seconds until stopped."""

    def __init__(self, core: client.CoreV1Api, ns: str) -> None:
        self.created = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(core, ns), daemon=True)
        self._thread.start()

    def _run(self, core: client.CoreV1Api, ns: str) -> None:
        while not self._stop.wait(STREAM_EVERY):
            body = pod(
                f"small-{self.created}", 1, annotations={"sluice.dev/complete-after": STREAM_RUN}
            )
            core.create_namespaced_pod(ns, body)
            self.created += 1

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)


def test_a_big_gang_starts_under_a_stream_of_small_pods(
    core: client.CoreV1Api,
    custom: client.CustomObjectsApi,
    namespace: str,
    start_scheduler: Callable[..., Scheduler],
    free_nodes: int,
) -> None:
    """Fails on main before the gang could be admitted to reserve: enqueue admits a gang only
    into idle room (or its queue's share), the stream takes every GPU that frees, so the gang
    stays Pending (`NotEnoughResources`) for ever and allocate never reserves nodes for it."""
    sched = start_scheduler()
    sched.wait_ready()
    fill_cluster(core, namespace, free_nodes - GANG_NODES, sched)
    stream = Stream(core, namespace)
    try:
        # The four nodes fill up with 1-GPU pods; then the gang arrives behind them.
        wait_for(
            lambda: len(bound(core, namespace, "small-")) >= GANG_NODES * NODE_GPUS,
            60,
            "the stream fills the free nodes",
            sched,
        )
        create_group(core, custom, namespace, "big", GANG_NODES, NODE_GPUS)
        # Bound (docs/scheduling.md): one cycle to admit and reserve, then the reserved nodes
        # drain within one STREAM_RUN. The timeout is a hang detector several times that.
        wait_for(
            lambda: len(bound(core, namespace, "big-")) == GANG_NODES,
            90,
            "the 32-GPU gang bound while the stream goes on",
            sched,
        )
        assert stream.created > GANG_NODES * NODE_GPUS  # the stream really did go on
    finally:
        stream.stop()
    assert_no_gpu_shared(core)
