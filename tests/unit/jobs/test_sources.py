"""PodGroup and Queue transitions derived from watched state (operators.jobs.sources)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from operators.api.eventlog import EVENT_LOG_WINDOW
from operators.api.events import EventFilter, SinkKind
from operators.jobs import delivery as D
from operators.jobs.sources import ObjectLog, Observed, derive

DOCS = Path(__file__).resolve().parents[3] / "docs"
PG, Q = SinkKind.POD_GROUP, SinkKind.QUEUE
DEADLINE = "2026-01-01T00:00:30Z"
WILL_EVICT = {"role": "WillEvict", "deadline": DEADLINE, "peers": ["ns/urgent"], "reason": "r"}


def tos(changes: list[Any]) -> list[tuple[str | None, str, str]]:
    return [(c[2], c[3], c[4]) for c in changes]


def test_first_sight_is_the_current_phase_and_history_is_not_replayed() -> None:
    status = {"phase": "Running", "lastEviction": {"reason": "Preempted", "time": "t0"}}
    seen, changes = derive(PG, "g", None, status)
    assert tos(changes) == [(None, "Running", "")]
    assert seen == Observed("Running", None, "t0")
    # An object without a phase yet: nothing, and nothing remembered.
    assert derive(PG, "g", None, {}) == (None, [])


def test_a_delayed_preemption_gives_will_evict_with_deadline_then_evicted_then_the_phase() -> None:
    seen, _ = derive(PG, "g", None, {"phase": "Running"})
    marked = {"phase": "Running", "preemption": WILL_EVICT}
    seen, changes = derive(PG, "g", seen, marked)
    ((_, _, from_, to, _, _, deadline, peers),) = changes
    assert (from_, to, deadline, peers) == ("Running", "WillEvict", DEADLINE, ("ns/urgent",))
    # Unchanged on the next look (a status write of someone else's fields): nothing.
    assert derive(PG, "g", seen, marked) == (seen, [])

    evicted = {
        "phase": "Pending",
        "lastEviction": {"reason": "DelayedPreemptionDue", "time": "t1", "preemptor": "ns/urgent"},
    }
    seen, changes = derive(PG, "g", seen, evicted)
    assert tos(changes) == [
        ("Running", "Evicted", "DelayedPreemptionDue"),
        ("Running", "Pending", ""),
    ]
    assert changes[0][7] == ("ns/urgent",)
    assert seen == Observed("Pending", None, "t1")


def test_a_reverted_will_evict_is_a_cancellation_and_a_cleared_privileged_is_silent() -> None:
    seen, _ = derive(PG, "g", None, {"phase": "Running", "preemption": WILL_EVICT})
    _, changes = derive(PG, "g", seen, {"phase": "Running"})
    assert tos(changes) == [("WillEvict", "Running", "PreemptionCancelled")]

    privileged = {**WILL_EVICT, "role": "Privileged"}
    seen, _ = derive(PG, "p", None, {"phase": "Inqueue", "preemption": privileged})
    _, changes = derive(PG, "p", seen, {"phase": "Running"})
    assert tos(changes) == [("Inqueue", "Running", "")]


def test_a_moved_deadline_is_a_new_notice() -> None:
    seen, _ = derive(PG, "g", None, {"phase": "Running", "preemption": WILL_EVICT})
    later = {**WILL_EVICT, "deadline": "2026-01-01T00:01:00Z"}
    _, changes = derive(PG, "g", seen, {"phase": "Running", "preemption": later})
    assert [(c[3], c[6]) for c in changes] == [("WillEvict", "2026-01-01T00:01:00Z")]


def test_a_will_evict_mark_that_outlived_its_eviction_is_never_announced() -> None:
    """The scheduler may write the victim's old mark back after the eviction (a pass that read
    the status before its own eviction write came back): the receiver gets willevict, evicted,
    pending - never a second WillEvict nor a cancellation of the one that was carried out."""
    seen, _ = derive(PG, "g", None, {"phase": "Running"})
    seen, _ = derive(PG, "g", seen, {"phase": "Running", "preemption": WILL_EVICT})
    due = {"reason": "DelayedPreemptionDue", "time": "2026-01-01T00:00:31Z"}
    # In the look that shows the eviction, the mark came back with another deadline that is
    # also not after the eviction (and, the look after, with its own deadline).
    earlier = {**WILL_EVICT, "deadline": "2026-01-01T00:00:29Z"}
    seen, changes = derive(
        PG, "g", seen, {"phase": "Running", "preemption": earlier, "lastEviction": due}
    )
    assert tos(changes) == [("Running", "Evicted", "DelayedPreemptionDue")]
    seen, changes = derive(
        PG, "g", seen, {"phase": "Running", "preemption": WILL_EVICT, "lastEviction": due}
    )
    assert changes == []
    seen, changes = derive(PG, "g", seen, {"phase": "Pending", "lastEviction": due})
    assert tos(changes) == [("Running", "Pending", "")]

    # The group runs again and is really marked again: a deadline after the eviction.
    seen, _ = derive(PG, "g", seen, {"phase": "Running", "lastEviction": due})
    again = {**WILL_EVICT, "deadline": "2026-01-01T00:05:00Z"}
    _, changes = derive(
        PG, "g", seen, {"phase": "Running", "preemption": again, "lastEviction": due}
    )
    assert [(c[3], c[6]) for c in changes] == [("WillEvict", "2026-01-01T00:05:00Z")]


def test_queue_state_changes() -> None:
    seen, changes = derive(Q, "research", None, {"state": "Open", "deserved": {"cpu": "1"}})
    assert tos(changes) == [(None, "Open", "")]
    seen, changes = derive(Q, "research", seen, {"state": "Open", "deserved": {"cpu": "2"}})
    assert changes == []
    _, changes = derive(Q, "research", seen, {"state": "Closing"})
    assert tos(changes) == [("Open", "Closing", "")]


def test_the_log_numbers_without_gaps_round_trips_and_counts_what_it_drops() -> None:
    log = ObjectLog()
    seen = None
    for i in range(EVENT_LOG_WINDOW + 3):
        seen, changes = derive(Q, "q", seen, {"state": "Open" if i % 2 else "Closed"})
        log = log.append(seen, changes, "t", delivered=EVENT_LOG_WINDOW)
    assert log.seq == EVENT_LOG_WINDOW + 3
    assert [e.seq for e in log.entries] == list(range(4, EVENT_LOG_WINDOW + 4))
    assert log.dropped == 0  # the entries that left were delivered
    log = log.append(seen, [(Q, "q", "Open", "Closed", "", "", "", ())] * 2, "t", delivered=0)
    assert log.dropped == 2
    assert ObjectLog.parse(log.wire()) == log
    # A cleared field is written as null (a merge patch keeps keys it leaves out).
    marked, _ = derive(PG, "g", None, {"phase": "Running", "preemption": WILL_EVICT})
    cleared, _ = derive(PG, "g", marked, {"phase": "Running"})
    assert ObjectLog(observed=cleared).wire()["observed"]["preemption"] is None


def test_object_kinds_are_opt_in_and_a_namespace_filter_gets_no_queues() -> None:
    group = D.JobRef("PodGroup", "team-a", "g", "uid-g")
    queue = D.JobRef("Queue", "", "research", "uid-q")
    assert D.sinks_of(group, {"all": EventFilter()}) == []
    assert D.sinks_of(queue, {"all": EventFilter()}) == []
    listed = EventFilter(kinds=[PG, Q])
    assert D.sinks_of(group, {"s": listed}) == ["s"]
    assert D.sinks_of(queue, {"s": listed}) == ["s"]
    narrow = EventFilter(kinds=[PG, Q], namespaces=["team-a"])
    assert D.sinks_of(group, {"s": narrow}) == ["s"]
    assert D.sinks_of(queue, {"s": narrow}) == []
    assert D.sinks_of(D.JobRef("PodGroup", "team-b", "g", "u"), {"s": narrow}) == []


def test_a_podgroup_notice_as_a_cloudevent() -> None:
    group = D.JobRef("PodGroup", "team-a", "g", "uid-g")
    seen, _ = derive(PG, "g", None, {"phase": "Running"})
    _, changes = derive(PG, "g", seen, {"phase": "Running", "preemption": WILL_EVICT})
    (rec,) = ObjectLog(seq=1).append(None, changes, "2026-01-01T00:00:00Z", 0).entries
    event = D.cloudevent(group, rec)
    assert event["id"] == "uid-g-2"
    assert event["type"] == "dev.sluice.podgroup.willevict"
    assert (
        event["source"]
        == "/apis/scheduling.sluice.dev/v1alpha1/namespaces/team-a/sluicepodgroups/g"
    )
    assert event["data"]["deadline"] == DEADLINE
    assert event["data"]["peers"] == ["ns/urgent"]
    assert "job" not in event["data"]
    # The `levels` filter is about job levels; `transitions` applies to PodGroups too.
    assert D.wants("s", EventFilter(kinds=[PG], levels=["Job"]), group, rec)
    assert not D.wants("s", EventFilter(kinds=[PG], transitions=["Running"]), group, rec)
    queue = D.JobRef("Queue", "", "research", "uid-q")
    assert (
        D.cloudevent(queue, rec)["source"]
        == "/apis/scheduling.sluice.dev/v1alpha1/sluicequeues/research"
    )


def test_podgroup_and_queue_events_match_their_documented_schema() -> None:
    """docs/schemas/object-transition-event.json: required keys, no others, id/source/type."""
    schema = json.loads((DOCS / "schemas" / "object-transition-event.json").read_text())
    data_schema = schema["properties"]["data"]
    seen, _ = derive(PG, "g", None, {"phase": "Running"})
    evicted = {
        "phase": "Pending",
        "lastEviction": {"reason": "Reclaimed", "time": "t", "preemptor": "b/u"},
    }
    _, changes = derive(PG, "g", seen, evicted)
    recs = ObjectLog().append(None, changes, "2026-01-01T00:00:00Z", 0).entries
    group = D.JobRef("PodGroup", "team-a", "g", "0f3c-9a")
    queue = D.JobRef("Queue", "", "research", "0f3c-9b")
    for ref, rec in [(group, recs[0]), (group, recs[1]), (queue, recs[1])]:
        event = D.cloudevent(ref, rec)
        assert set(schema["required"]) <= set(event) <= set(schema["properties"])
        assert set(data_schema["required"]) <= set(event["data"]) <= set(data_schema["properties"])
        assert event["data"]["to"] in data_schema["properties"]["to"]["enum"]
        for key in ("id", "source", "type"):
            assert re.fullmatch(schema["properties"][key]["pattern"], event[key]), event[key]
