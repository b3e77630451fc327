"""The `queue` operator: checks the queue tree and writes Queue state (docs/admin.md "Queues").

Queues are read through a kopf index; every event pokes one coalesced reconcile that validates
the whole tree (a queue's verdict depends on its parent and siblings) and writes the operator's
status fields where they differ, with a Warning Event when a queue becomes invalid. The built-in
`root` and `default` queues are created if missing.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence
from typing import Any

import kopf

from operators.api import labels as L
from operators.api.scheduling import API_VERSION, Queue, QueueConditionType
from operators.controllers import kopf_runner
from operators.controllers.coalesce import Coalescer, LastSeen, run_in_background
from operators.controllers.queue_tree import (
    QueueObject,
    Verdict,
    observed_state,
    queue_object,
    queue_status_patch,
    validate,
)
from operators.controllers.writes import bounded, ensure_exists, failures, now_text, single
from operators.runtime.client import ApiError, KubeClient
from operators.runtime.events import EventRecorder
from operators.runtime.operator_metrics import OperatorMetrics
from operators.scheduler import snapshot as S

log = logging.getLogger(__name__)

QUEUES = Queue.api_path()
QUEUE_RESOURCE = (Queue.group, Queue.version, Queue.plural)


def built_in_queue(name: str) -> dict[str, Any]:
    spec: dict[str, Any] = {} if name == S.ROOT_QUEUE else {"parent": S.ROOT_QUEUE}
    return {
        "apiVersion": API_VERSION,
        "kind": "Queue",
        "metadata": {"name": name, "labels": {L.MANAGED_BY: "queue"}},
        "spec": spec,
    }


def _valid_reason(queue: QueueObject) -> tuple[str, str] | None:
    for c in queue.status.get("conditions") or ():
        if c.get("type") == QueueConditionType.VALID:
            return str(c.get("status")), str(c.get("reason"))
    return None


@dataclasses.dataclass
class QueueOperator:
    client: KubeClient
    events: EventRecorder
    queues: Mapping[str, Any] = dataclasses.field(default_factory=dict)  # kopf index
    seen: LastSeen[str, QueueObject] = dataclasses.field(default_factory=LastSeen)
    writes: int = 0
    metrics: OperatorMetrics = dataclasses.field(default_factory=lambda: OperatorMetrics("queue"))

    async def ensure_built_ins(self) -> None:
        for name in (S.ROOT_QUEUE, S.DEFAULT_QUEUE):
            await ensure_exists(self.client, QUEUES, built_in_queue(name))

    async def reconcile(self) -> float | None:
        queues: dict[str, QueueObject] = single(self.queues)
        if S.ROOT_QUEUE not in queues or S.DEFAULT_QUEUE not in queues:
            await self.ensure_built_ins()
        verdicts = validate(queues)
        now = now_text()
        writes = []
        for name, queue in sorted(queues.items()):
            patch = queue_status_patch(queue, verdicts[name], now)
            if patch is None:
                continue
            writes.append(self.client.merge_patch(f"{QUEUES}/{name}/status", {"status": patch}))
            self._announce(queue, verdicts[name])
        results = await bounded(writes)
        self.writes += len(results)
        failed = failures(results, "queue", self.metrics)
        states: dict[str, int] = {}
        for name, queue in queues.items():
            state = observed_state(queue).value if verdicts[name].valid else "Invalid"
            states[state] = states.get(state, 0) + 1
        self.metrics.count_objects("queue", states)
        return 5.0 if failed else None

    def _announce(self, queue: QueueObject, verdict: Verdict) -> None:
        """A Warning when a queue becomes invalid (or why changes), a Normal when it recovers."""
        before = _valid_reason(queue)
        now = ("True" if verdict.valid else "False", verdict.reason.value)
        if before == now or (before is None and verdict.valid):
            return
        involved = {"apiVersion": API_VERSION, "kind": "Queue", "name": queue.name}
        if queue.uid:
            involved["uid"] = queue.uid
        if verdict.valid:
            self.events.post(involved, "Normal", "QueueValid", verdict.message)
        else:
            self.events.post(involved, "Warning", verdict.reason.value, verdict.message)


def register(registry: kopf.OperatorRegistry, ctx: kopf_runner.OperatorContext) -> None:
    op = QueueOperator(ctx.client, EventRecorder(ctx.client, "sluice-queue"), metrics=ctx.metrics)
    coalescer = Coalescer("queue", op.reconcile, metrics=ctx.metrics)
    run_in_background(registry, coalescer, ctx.stop)

    @kopf.on.startup(registry=registry)
    async def built_ins(**_: Any) -> None:
        # Also when no Queue exists at all (then no event would ever start a reconcile).
        try:
            await op.ensure_built_ins()
        except (ApiError, OSError) as err:
            raise kopf.TemporaryError(f"cannot create the built-in queues: {err}", delay=5) from err

    @kopf.index(*QUEUE_RESOURCE, id="queue_objects", registry=registry)
    async def queue_objects(name: str, body: kopf.Body, **_: Any) -> dict[str, QueueObject]:
        return {name: queue_object(body)}

    @kopf.on.event(*QUEUE_RESOURCE, registry=registry)
    async def changed(type: str | None, name: str, body: kopf.Body, **kwargs: Any) -> None:
        if op.seen.changed(name, None if type == "DELETED" else queue_object(body)):
            op.queues = kwargs["queue_objects"]  # kopf passes each index by its function's name
            coalescer.poke()


OPERATOR = kopf_runner.KopfOperator(
    "queue",
    register,
    description="Queue operator: tree validation (Valid condition + Events), Open/Closing/"
    "Closed state, built-in root and default queues.",
)


async def main(argv: Sequence[str]) -> int:
    return await kopf_runner.main(OPERATOR, argv)
