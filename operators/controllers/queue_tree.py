"""The queue operator's rules over the whole tree (pure): validity, state, effective guarantee.

Rules that span several Queue objects, which admission (CEL) cannot check:
- the parent exists (unset means `root`; `root` and `default` are built in);
- following parents never loops;
- children's guarantees fit within their parent's, per resource. The bound is the parent's
  guarantee for that resource, else its capability, else nothing (root is bounded only by the
  cluster). Children are admitted oldest first; a child whose guarantee would overflow the bound
  is the one flagged, so adding a greedy queue never invalidates queues that were fine.

A broken queue gets `Valid=False` (the scheduler then treats it as closed) and nothing else
changes: its siblings, parent and children keep their own verdicts.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from operators.api.eventlog import without_event_log
from operators.api.scheduling import QueueConditionType, QueueReason, QueueSpecState, QueueState
from operators.controllers.scheduler_status import format_resources
from operators.runtime import records as R
from operators.scheduler import snapshot as S


@dataclasses.dataclass(frozen=True)
class QueueObject:
    """What the operator knows of one Queue object (resource maps in snapshot units)."""

    name: str
    parent: str | None  # None only for root
    guarantee: Mapping[str, int]
    capability: Mapping[str, int]
    spec_state: QueueSpecState
    created: float
    generation: int
    status: Mapping[str, Any]
    uid: str = ""

    @property
    def admitted_work(self) -> int:
        """PodGroups holding quota, as the scheduler counts them in status (Inqueue + Running)."""
        return _count(self.status.get("inqueue")) + _count(self.status.get("running"))


def queue_object(body: Mapping[str, Any]) -> QueueObject:
    """A Queue as the operator sees it, read with the scheduler's own translation."""
    meta, spec = body.get("metadata") or {}, body.get("spec") or {}
    q = R.queue(dict(body))
    try:
        spec_state = QueueSpecState(str(spec.get("state") or "Open"))
    except ValueError:
        spec_state = QueueSpecState.OPEN
    return QueueObject(
        name=q.name,
        parent=q.parent,
        # The spec's guarantee, not the scheduler's effective one (nothing while invalid):
        # validity is decided from what the admin asked for.
        guarantee=R.resources(spec.get("guarantee")),
        capability=q.capability,
        spec_state=spec_state,
        created=R.timestamp(meta.get("creationTimestamp")),
        generation=int(meta.get("generation") or 0),
        status=without_event_log(body.get("status") or {}),
        uid=str(meta.get("uid") or ""),
    )


def _count(raw: object) -> int:
    return raw if isinstance(raw, int) and not isinstance(raw, bool) else 0


@dataclasses.dataclass(frozen=True)
class Verdict:
    valid: bool
    reason: QueueReason
    message: str


STATE_TABLE: Mapping[tuple[QueueSpecState, bool], QueueState] = {
    # (what the admin asks, admitted work still present) -> observed state
    (QueueSpecState.OPEN, False): QueueState.OPEN,
    (QueueSpecState.OPEN, True): QueueState.OPEN,
    (QueueSpecState.CLOSED, True): QueueState.CLOSING,
    (QueueSpecState.CLOSED, False): QueueState.CLOSED,
}


def observed_state(queue: QueueObject) -> QueueState:
    return STATE_TABLE[(queue.spec_state, queue.admitted_work > 0)]


def _built_in(name: str) -> QueueObject:
    return QueueObject(
        name=name,
        parent=None if name == S.ROOT_QUEUE else S.ROOT_QUEUE,
        guarantee={},
        capability={},
        spec_state=QueueSpecState.OPEN,
        created=0.0,
        generation=0,
        status={},
    )


def validate(queues: Mapping[str, QueueObject]) -> dict[str, Verdict]:
    """A verdict for every queue object in `queues`."""
    tree = dict(queues)
    for name in (S.ROOT_QUEUE, S.DEFAULT_QUEUE):
        tree.setdefault(name, _built_in(name))
    verdicts: dict[str, Verdict] = {}
    for name, q in tree.items():
        if q.parent is not None and q.parent not in tree:
            verdicts[name] = Verdict(
                False,
                QueueReason.PARENT_NOT_FOUND,
                f"parent queue {q.parent!r} does not exist; this queue admits no new work",
            )
    for cycle in _cycles(tree):
        loop = " -> ".join([*cycle, cycle[0]])
        for name in cycle:
            verdicts[name] = Verdict(
                False,
                QueueReason.PARENT_CYCLE,
                f"parents form a cycle ({loop}); this queue admits no new work",
            )
    children: dict[str, list[QueueObject]] = {}
    for q in tree.values():
        if q.parent is not None and q.name not in verdicts:
            children.setdefault(q.parent, []).append(q)
    for parent_name, kids in children.items():
        parent = tree.get(parent_name)
        if parent is None:
            continue
        verdicts.update(_fit_guarantees(parent, kids))
    ok = Verdict(True, QueueReason.VALID, "parent exists and guarantees fit")
    return {name: verdicts.get(name, ok) for name in queues}


def _cycles(tree: Mapping[str, QueueObject]) -> list[list[str]]:
    found: list[list[str]] = []
    done: set[str] = set()
    for start in sorted(tree):
        path: list[str] = []
        on_path: set[str] = set()
        name: str | None = start
        while name is not None and name in tree and name not in done:
            if name in on_path:
                found.append(path[path.index(name) :])
                break
            path.append(name)
            on_path.add(name)
            name = tree[name].parent
        done.update(path)
    return found


def _text(resource: str, amount: int) -> str:
    return format_resources({resource: amount}).get(resource, str(amount))


def _bound(parent: QueueObject, resource: str) -> int | None:
    if resource in parent.guarantee:
        return parent.guarantee[resource]
    return parent.capability.get(resource)


def _fit_guarantees(parent: QueueObject, kids: Iterable[QueueObject]) -> dict[str, Verdict]:
    out: dict[str, Verdict] = {}
    summed: dict[str, int] = {}
    for kid in sorted(kids, key=lambda q: (q.created, q.name)):
        over = [
            r
            for r, amount in kid.guarantee.items()
            if (bound := _bound(parent, r)) is not None and summed.get(r, 0) + amount > bound
        ]
        if over:
            what = ", ".join(
                f"{r}: {_text(r, summed.get(r, 0))} already guaranteed to siblings + "
                f"{_text(r, kid.guarantee[r])} > {_text(r, _bound(parent, r) or 0)}"
                for r in sorted(over)
            )
            out[kid.name] = Verdict(
                False,
                QueueReason.GUARANTEE_OVERCOMMITTED,
                f"guarantee does not fit in parent {parent.name!r} ({what}); "
                "this queue admits no new work",
            )
            continue
        for r, amount in kid.guarantee.items():
            summed[r] = summed.get(r, 0) + amount
    return out


def queue_status_patch(queue: QueueObject, verdict: Verdict, now: str) -> dict[str, Any] | None:
    """The operator's status fields for one queue as a merge patch, or None when the API already
    has them."""
    old = next(
        (
            c
            for c in queue.status.get("conditions") or ()
            if c.get("type") == QueueConditionType.VALID
        ),
        None,
    )
    status = "True" if verdict.valid else "False"
    same = old is not None and old.get("status") == status
    condition = {
        "type": QueueConditionType.VALID.value,
        "status": status,
        "reason": verdict.reason.value,
        "message": verdict.message,
        "lastTransitionTime": old.get("lastTransitionTime") if same and old else now,
    }
    desired: dict[str, Any] = {
        "state": observed_state(queue).value,
        "observedGeneration": queue.generation,
        "conditions": [condition],
    }
    if all(queue.status.get(k) == v for k, v in desired.items()):
        return None
    return desired
