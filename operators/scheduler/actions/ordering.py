"""Shared ordering: queues take turns by queue order, groups inside a queue by job order."""

from __future__ import annotations

import heapq
from collections import defaultdict
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterator

    from operators.scheduler.context import Session
    from operators.scheduler.state import GroupInfo


def round_robin(ssn: Session, groups: list[GroupInfo]) -> Iterator[GroupInfo]:
    """Yield groups: pop the best queue (re-evaluated after each group), then its best group.

    Queue keys change as groups are placed (the quota share grows), so a queue is pushed back
    with a fresh key after each of its groups is handled.
    """
    ext = ssn.ext
    per_queue: dict[int, list[GroupInfo]] = defaultdict(list)
    for g in groups:
        per_queue[g.queue].append(g)
    for members in per_queue.values():
        members.sort(key=ext.job_key, reverse=True)  # pop() from the end = best first
    heap = [(ext.queue_key(q), q) for q in per_queue]
    heapq.heapify(heap)
    while heap:
        _, q = heapq.heappop(heap)
        members = per_queue[q]
        if not heap:  # the last queue with groups left: no other key to compare with
            while members:
                yield members.pop()
            return
        yield members.pop()
        if members:
            heapq.heappush(heap, (ext.queue_key(q), q))
