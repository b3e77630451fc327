"""A job's transition Events coalesced into few Events (operators/jobs/coalesced_events.py):
no transition is lost, the message cap splits rather than cuts."""

from __future__ import annotations

import re

from operators.jobs.coalesced_events import MESSAGE_LIMIT, SEPARATOR, combine
from operators.jobs.reconcile import Event


def told(n: int, level: str = "Replica", to: str = "Running", kind: str = "Normal") -> Event:
    subject = {"Job": "job", "Task": "task", "Replica": "pod"}[level]
    return Event(kind, f"{level}{to}", f"#{n} {subject} j-w-{n}: - -> {to}", transition=True)


def seqs(events: list[Event]) -> list[int]:
    return [int(s) for e in events for s in re.findall(r"(?m)^#(\d+) ", e.message)]


def test_a_steps_transitions_are_one_event_named_after_where_the_job_stands() -> None:
    events = [told(6, "Job", "Running"), told(7, "Task", "Running"), told(8)]
    (one,) = combine(events)
    assert (one.type, one.reason) == ("Normal", "JobRunning")
    assert one.message == "\n".join(e.message for e in events)
    assert one.transition


def test_a_warning_among_them_makes_the_event_a_warning() -> None:
    (one,) = combine([told(1), told(2, to="Failed", kind="Warning"), told(3)])
    assert (one.type, one.reason) == ("Warning", "ReplicaFailed")
    (alone,) = combine([told(4)])
    assert alone == told(4)


def test_more_than_one_message_holds_is_split_and_nothing_is_lost() -> None:
    events = [told(n) for n in range(1, 201)]
    out = combine(events)
    assert len(out) > 1
    assert all(len(e.message) <= MESSAGE_LIMIT for e in out)
    assert seqs(out) == list(range(1, 201))


def test_one_overlong_transition_is_cut_to_the_cap_not_dropped() -> None:
    long = Event("Warning", "ReplicaFailed", "#1 pod p: Running -> Failed: " + "x" * 5000, True)
    out = combine([long, told(2)])
    assert [len(e.message) <= MESSAGE_LIMIT for e in out] == [True, True]
    assert seqs(out) == [1, 2]


def test_each_transition_is_one_line_whatever_its_message_holds() -> None:
    """A reader splits on the separator and gets each transition whole: messages may hold
    "; " (a waiting gang's explanation) or line breaks (a container's termination message)."""
    explained = Event(
        "Normal",
        "JobPending",
        "#1 job j: - -> Pending (Unschedulable): no ToR fits; may spread over domains in 30 s",
        True,
    )
    crashed = Event(
        "Warning", "ReplicaFailed", "#2 pod j-w-0: Running -> Failed: oom\nkilled", True
    )
    (one,) = combine([explained, crashed, told(3)])
    lines = one.message.split(SEPARATOR)
    assert [line.split(" ", 1)[0] for line in lines] == ["#1", "#2", "#3"]
    assert lines[0] == explained.message
    assert lines[1] == "#2 pod j-w-0: Running -> Failed: oom killed"
