"""Routing, CloudEvent shape, cursors and backoff of hook delivery (operators.jobs.delivery)."""

from __future__ import annotations

from operators.api.batch import Hook, TransitionLevel, TransitionTarget
from operators.api.events import EventFilter, RetryPolicy, SinkKind
from operators.jobs import delivery as D
from operators.jobs.translog import TransitionRec

JOB = D.JobRef("VCJob", "team-a", "train", "uid-1")
Lv = TransitionLevel


def rec(seq: int, to: str = "Running", level: Lv = Lv.JOB, name: str = "train") -> TransitionRec:
    return TransitionRec(seq, level, name, "Pending", to, "R", "m", "2026-01-01T00:00:00Z")


def hooked(*hooks: Hook) -> D.JobRef:
    return D.JobRef(JOB.kind, JOB.namespace, JOB.name, JOB.uid, hooks)


def test_sink_without_filter_gets_only_what_hooks_send() -> None:
    assert not D.wants("s", None, JOB, rec(1))
    job = hooked(Hook(sink="s", transitions=[TransitionTarget.COMPLETED]))
    assert D.wants("s", None, job, rec(1, "Completed"))
    assert not D.wants("s", None, job, rec(2, "Running"))
    assert not D.wants("other", None, job, rec(1, "Completed"))


def test_empty_filter_subscribes_to_everything() -> None:
    assert D.wants("s", EventFilter(), JOB, rec(1, "Failed", Lv.REPLICA, "train-w-0"))


def test_filter_by_namespace_kind_level_and_transition() -> None:
    flt = EventFilter(
        namespaces=["team-a"],
        kinds=[SinkKind.VC_JOB],
        levels=[Lv.JOB],
        transitions=[TransitionTarget.RUNNING],
    )
    assert D.wants("s", flt, JOB, rec(1))
    assert not D.wants("s", flt, JOB, rec(1, "Failed"))
    assert not D.wants("s", flt, JOB, rec(1, level=Lv.TASK))
    other_ns = D.JobRef("VCJob", "team-b", "train", "uid-2")
    assert not D.wants("s", flt, other_ns, rec(1))
    hybrid = D.JobRef("HybridJob", "team-a", "train", "uid-3")
    assert not D.wants("s", flt, hybrid, rec(1))


def test_hook_levels_filter_what_it_asks_for() -> None:
    job = hooked(Hook(sink="s", levels=[Lv.TASK]))
    assert D.wants("s", None, job, rec(1, level=Lv.TASK, name="worker"))
    assert not D.wants("s", None, job, rec(1))


def test_sinks_of_lists_existing_named_sinks_and_matching_subscriptions() -> None:
    job = hooked(Hook(sink="billing"), Hook(sink="gone"))
    filters = {
        "billing": None,
        "all": EventFilter(),
        "team-b-only": EventFilter(namespaces=["team-b"]),
        "quiet": None,
    }
    assert D.sinks_of(job, filters) == ["billing", "all"]
    assert D.missing_sinks(job, filters) == ["gone"]


def test_pending_sends_wanted_in_order_and_skips_the_rest() -> None:
    job = hooked(Hook(sink="s", transitions=[TransitionTarget.RUNNING, TransitionTarget.COMPLETED]))
    entries = [rec(4, "Completed"), rec(2, "Running"), rec(3, "Completing"), rec(1, "Inqueue")]
    work = D.pending("s", None, job, entries, log_seq=4, cursor=1)
    assert [e.seq for e in work.send] == [2, 4]
    assert work.cursor_after(0) == 1
    assert work.cursor_after(1) == 3  # seq 3 is not wanted: done once 2 is acknowledged
    assert work.cursor_after(2) == 4


def test_pending_with_nothing_wanted_moves_the_cursor_to_the_log_head() -> None:
    work = D.pending("s", None, JOB, [rec(5), rec(6)], log_seq=6, cursor=4)
    assert work.send == ()
    assert work.cursor_after(0) == 6


def test_pending_never_moves_a_cursor_back() -> None:
    work = D.pending("s", EventFilter(), JOB, [rec(1), rec(2)], log_seq=2, cursor=9)
    assert work.send == ()
    assert work.skip_to == 9


def test_cloudevent_is_structured_with_a_stable_id() -> None:
    event = D.cloudevent(JOB, rec(7, "Running", Lv.REPLICA, "train-worker-0"))
    assert event == {
        "specversion": "1.0",
        "id": "uid-1-7",
        "source": "/apis/batch.sluice.dev/v1alpha1/namespaces/team-a/vcjobs/train",
        "type": "dev.sluice.replica.running",
        "subject": "train-worker-0",
        "time": "2026-01-01T00:00:00Z",
        "datacontenttype": "application/json",
        "data": {
            "kind": "VCJob",
            "namespace": "team-a",
            "job": "train",
            "uid": "uid-1",
            "seq": 7,
            "level": "Replica",
            "name": "train-worker-0",
            "from": "Pending",
            "to": "Running",
            "reason": "R",
            "message": "m",
        },
    }
    assert D.cloudevent(JOB, rec(7))["id"] == event["id"]


def test_job_level_event_type_and_subject() -> None:
    hybrid = D.JobRef("HybridJob", "ns", "elastic", "u")
    event = D.cloudevent(hybrid, rec(1, "WillEvict", name="elastic"))
    assert event["type"] == "dev.sluice.job.willevict"
    assert event["subject"] == "elastic"
    assert event["source"].endswith("/namespaces/ns/hybridjobs/elastic")


def test_backoff_doubles_up_to_the_cap() -> None:
    policy = RetryPolicy(max_attempts=5, backoff_seconds=2, max_backoff_seconds=10)
    assert [D.backoff_seconds(policy, n) for n in range(1, 6)] == [2, 4, 8, 10, 10]
    assert D.backoff_seconds(policy, 500) == 10
    assert not D.gives_up(policy, 4)
    assert D.gives_up(policy, 5)


def test_only_transient_statuses_are_retried() -> None:
    assert [s for s in (200, 400, 401, 404, 408, 429, 500, 503) if D.retryable(s)] == [
        408,
        429,
        500,
        503,
    ]


def test_job_cursor_is_the_slowest_sink() -> None:
    assert D.job_cursor({"a": 5, "b": 3}, ["a", "b"]) == 3
    assert D.job_cursor({"a": 5}, ["a", "new"]) == 0
    assert D.job_cursor({"a": 5}, []) is None
