"""``sluice simulate --snapshot FILE``: one scheduling session on a recorded cluster, as is and
with what-if changes (``--guarantee QUEUE=[+]GPUS``).

The file is what ``kubectl get`` prints for the kinds the scheduler watches
(operators/runtime/recorded.py). A recording has no durations, so this answers what the
scheduler would do *now*: which waiting jobs would start, which would be evicted, what every
queue would be entitled to - for the cluster as recorded and with the changes applied.
"""

from __future__ import annotations

import dataclasses
import sys
from typing import TYPE_CHECKING

from operators.runtime.recorded import RecordedSnapshotError, load
from operators.scheduler import SessionConfig, run_session
from operators.scheduler.decisions import Bind, Evict
from operators.scheduler.snapshot import GPU, GroupPhase

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

    from operators.scheduler.session import SessionResult
    from operators.scheduler.snapshot import Snapshot


def parse_guarantee(text: str) -> tuple[str, str, int]:
    """``team-a=128`` (set) or ``team-a=+64`` / ``team-a=-8`` (change): (queue, op, GPUs)."""
    queue, sep, value = text.partition("=")
    if not sep or not queue or not value.lstrip("+-").isdigit():
        raise ValueError(f"--guarantee wants QUEUE=GPUS or QUEUE=+GPUS, got {text!r}")
    op = value[0] if value[0] in "+-" else "="
    return queue, op, int(value.lstrip("+-"))


def with_guarantees(snap: Snapshot, changes: Sequence[tuple[str, str, int]]) -> Snapshot:
    queues = {q.name: q for q in snap.queues}
    for name, op, gpus in changes:
        if name not in queues:
            raise ValueError(f"no queue {name!r} in the snapshot (has: {', '.join(queues)})")
        q = queues[name]
        now = int(q.guarantee.get(GPU, 0))
        new = gpus if op == "=" else now + gpus if op == "+" else now - gpus
        queues[name] = dataclasses.replace(q, guarantee={**q.guarantee, GPU: max(new, 0)})
    return dataclasses.replace(snap, queues=tuple(queues.values()))


def describe(snap: Snapshot, result: SessionResult) -> list[str]:
    names = {g.uid: f"{g.namespace}/{g.name}" for g in snap.groups}
    started = sorted({names.get(d.group, d.group) for d in result.decisions if isinstance(d, Bind)})
    evicted = sorted(
        {names.get(d.group, d.group) for d in result.decisions if isinstance(d, Evict)}
    )
    waiting = [
        g
        for g in snap.groups
        if g.phase in (GroupPhase.PENDING, GroupPhase.INQUEUE) and names[g.uid] not in started
    ]
    lines = [
        f"  would start ({len(started)}): {', '.join(started) or '-'}",
        f"  would evict ({len(evicted)}): {', '.join(evicted) or '-'}",
        f"  still waiting ({len(waiting)}):",
    ]
    for g in waiting:
        why = result.explanations.get(g.uid)
        lines.append(f"    {names[g.uid]}: {why.message if why else '-'}")
    lines.append("  queues (GPUs deserved / allocated):")
    for name, status in sorted(result.queues.items()):
        deserved = status.deserved.get(GPU, 0)
        allocated = status.allocated.get(GPU, 0)
        lines.append(f"    {name}: {deserved} / {allocated}")
    return lines


def run(path: Path, guarantees: Sequence[str]) -> int:
    try:
        changes = [parse_guarantee(text) for text in guarantees]
        snap = load(path)
        changed = with_guarantees(snap, changes) if changes else None
    except (OSError, RecordedSnapshotError, ValueError) as exc:
        raise SystemExit(f"sluice simulate: {exc}") from exc
    gpus = sum(n.gpu_count for n in snap.nodes)
    head = (
        f"{path}: {len(snap.nodes)} nodes, {gpus} GPUs, {len(snap.groups)} job groups, "
        f"{len(snap.queues)} queues"
    )
    out = [
        head,
        "as recorded:",
        *describe(snap, run_session(snap, SessionConfig())),
    ]
    if changed is not None:
        out.append(f"with {', '.join(guarantees)} (guaranteed GPUs):")
        out.extend(describe(changed, run_session(changed, SessionConfig())))
    sys.stdout.write("\n".join(out) + "\n")
    return 0
