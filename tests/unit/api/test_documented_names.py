"""What docs/api.md names exists in the code, and what the code writes is in docs/api.md.

PodGroup conditions: the types and reasons in the table between the `podgroup-conditions` markers
must be exactly what the scheduler writes (the core's ReasonCode plus the status writer's own),
and `operators.api.scheduling.PodGroupReason` / `PodGroupConditionType` must list the same.
"""

from __future__ import annotations

import re
from pathlib import Path

from operators.api.batch import (
    JobPhase,
    ReplicaPhase,
    TaskPhase,
    TransitionTarget,
)
from operators.api.scheduling import (
    PodGroupConditionType,
    PodGroupPhase,
    PodGroupReason,
    PreemptionRole,
    QueueState,
)
from operators.controllers import scheduler_status
from operators.scheduler.decisions import ReasonCode

API_DOC = Path(__file__).resolve().parents[3] / "docs" / "api.md"
# Reasons the status writer adds to the core's codes (scheduler_status.desired_conditions).
WRITER_REASONS = {
    "Admitted",
    "Waiting",
    "DelayedPreemption",
    "PoolNotFound",
    "PoolFound",
    "Consolidated",
}


def _section(marker: str) -> str:
    text = API_DOC.read_text()
    match = re.search(rf"<!-- {marker} -->(.*?)<!-- /{marker} -->", text, re.DOTALL)
    assert match, f"docs/api.md has no <!-- {marker} --> section"
    return match.group(1)


def _first_column(section: str) -> set[str]:
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    return {re.findall(r"`([^`]+)`", row.split("|")[1])[0] for row in rows}


def test_podgroup_reason_enum_is_what_the_scheduler_writes() -> None:
    emitted = {c.value for c in ReasonCode} | WRITER_REASONS
    missing = emitted - {r.value for r in PodGroupReason}
    assert not missing, f"add {sorted(missing)} to operators.api.scheduling.PodGroupReason"
    unused = {r.value for r in PodGroupReason} - emitted
    assert not unused, f"PodGroupReason lists reasons nothing writes: {sorted(unused)}"


def test_podgroup_condition_types_are_what_the_scheduler_writes() -> None:
    assert {t.value for t in PodGroupConditionType} == set(scheduler_status.OWNED_CONDITIONS)


def test_docs_list_exactly_the_podgroup_conditions_and_reasons() -> None:
    assert _first_column(_section("podgroup-conditions")) == {
        t.value for t in PodGroupConditionType
    }
    assert _first_column(_section("podgroup-reasons")) == {r.value for r in PodGroupReason}


def test_transition_targets_are_every_phase_of_every_level() -> None:
    levels = (JobPhase, TaskPhase, ReplicaPhase, PreemptionRole, PodGroupPhase, QueueState)
    union = {p.value for e in levels for p in e}
    assert {t.value for t in TransitionTarget} == union


# Backticked words in the user docs that are not codes: column names, replica-type examples, a
# typo shown on purpose, Python/Kubernetes type names, log levels.
NOT_CODES = {
    "CPU",
    "Chief",
    "DEBUG",
    "Decimal",
    "INFO",
    "POOL",
    "PS",
    "PodTemplateSpec",
    "RETRIES",
    "Runing",
    "Worker",
}
OPERATORS = Path(__file__).resolve().parents[3] / "operators"


def _code_strings() -> set[str]:
    """Every double-quoted CamelCase string literal in operators/ (enum values, Event reasons)."""
    found: set[str] = set()
    for path in OPERATORS.rglob("*.py"):
        found.update(re.findall(r'"([A-Z][A-Za-z]+)"', path.read_text()))
    return found


def test_every_code_the_docs_name_is_in_the_code() -> None:
    code = _code_strings()
    for doc in ("api.md", "operations.md"):
        text = (API_DOC.parent / doc).read_text()
        named = set(re.findall(r"`([A-Z][A-Za-z]+)`", text)) - NOT_CODES
        missing = sorted(named - code)
        assert not missing, f"docs/{doc} names codes no code writes: {missing}"
