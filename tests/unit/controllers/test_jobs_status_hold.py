"""A job's status writes held while it only makes progress (`STATUS_HOLD`, `Progress`): a
one-pod job writes its status twice (Pending..Running together, then its end), every transition
in the log; what a restart must read back is written at once; a stop writes what is held."""

from __future__ import annotations

import asyncio

from operators.api.batch import JobPhase
from operators.controllers.jobs import Progress
from operators.controllers.jobs_apply import job_path
from operators.runtime.operator_metrics import OperatorMetrics

from .test_jobs_lifecycle import KEY, Api, Operator, vcjob

STATUS = job_path("VCJob", "ns", "j") + "/status"


def status_writes(api: Api) -> int:
    return sum(1 for call in api.calls if call == ("PATCH", STATUS))


def held_operator(api: Api) -> Operator:
    op = Operator(api)
    op.c.status_hold = 3600.0  # held until the test says it is due
    op.c.event_interval = 3600.0
    return op


async def to_running(op: Operator) -> None:
    op.job(vcjob(1, replicas=1))
    await op.step()
    op.group("Inqueue")
    await op.step()
    op.pods_seen()
    await op.step()
    op.pods_move("Running")
    op.group("Running")
    await op.step()


async def test_a_one_pod_job_writes_its_status_twice_and_loses_no_transition() -> None:
    api = Api()
    op = held_operator(api)
    await to_running(op)
    assert op.phase() == "Running"
    assert status_writes(api) == 0  # Pending, Inqueue, Running: held
    assert KEY in op.c.timers  # its due pass is asked for
    state = op.c.jobs[KEY]
    assert state.held_since is not None
    state.held_since -= 3600.0  # the hold is over: the next pass writes what is newest
    await op.step()
    assert status_writes(api) == 1
    first = api.patched[STATUS]["status"]
    assert first["phase"] == "Running"
    seqs = [t["seq"] for t in first["transitions"]]
    assert seqs == list(range(1, first["transitionSeq"] + 1))
    assert [(t["level"], t["to"]) for t in first["transitions"] if t["level"] == "Job"] == [
        ("Job", "Pending"),
        ("Job", "Inqueue"),
        ("Job", "Running"),
    ]
    op.pods_move("Succeeded")
    await op.step()  # terminal: at once, whatever the hold
    assert status_writes(api) == 2
    final = api.patched[STATUS]["status"]
    assert final["phase"] == "Completed"
    assert [t["seq"] for t in final["transitions"]] == list(range(1, final["transitionSeq"] + 1))
    assert op.c.jobs[KEY].held_since is None


async def test_a_job_ending_within_the_hold_writes_its_status_once() -> None:
    api = Api()
    op = held_operator(api)
    await to_running(op)
    op.pods_move("Succeeded")
    await op.step()
    assert status_writes(api) == 1
    status = api.patched[STATUS]["status"]
    assert status["phase"] == "Completed"
    jobs = [t["to"] for t in status["transitions"] if t["level"] == "Job"]
    assert jobs == ["Pending", "Inqueue", "Running", "Completed"]
    assert [t["seq"] for t in status["transitions"]] == list(range(1, status["transitionSeq"] + 1))


def test_only_progress_that_a_restart_derives_again_is_held() -> None:
    """A restarted operator seeds a job's memory from its status: a new version, a retry, a
    delayed action's clock or a phase outside Pending/Inqueue/Running must be in the API."""
    pending = Progress(None, 0, 0, ())
    running = Progress(JobPhase.RUNNING, 0, 0, ())
    assert pending.may_hold(Progress(JobPhase.PENDING, 0, 0, ()))
    assert pending.may_hold(running)
    assert Progress(JobPhase.INQUEUE, 0, 0, ()).may_hold(running)
    assert not running.may_hold(Progress(JobPhase.COMPLETED, 0, 0, ()))
    assert not running.may_hold(Progress(JobPhase.RESTARTING, 1, 1, ()))
    assert not running.may_hold(Progress(JobPhase.RUNNING, 1, 1, ()))  # restarted and back
    assert not running.may_hold(Progress(JobPhase.RUNNING, 0, 0, ("a delayed action",)))
    # After a restart was written, progress is held again from there.
    restarting = Progress(JobPhase.RESTARTING, 1, 1, ())
    assert not restarting.may_hold(Progress(JobPhase.PENDING, 1, 1, ()))
    assert Progress(JobPhase.PENDING, 1, 1, ()).may_hold(Progress(JobPhase.INQUEUE, 1, 1, ()))


async def test_a_restart_is_written_at_once() -> None:
    api = Api()
    op = held_operator(api)
    op.job(vcjob(1, replicas=1, policies=[{"event": "PodFailed", "action": "RestartJob"}]))
    await op.step()
    op.group("Inqueue")
    await op.step()
    op.pods_seen()
    op.pods_move("Failed")
    await op.step()
    assert status_writes(api) == 1
    assert api.patched[STATUS]["status"]["phase"] == "Restarting"


async def test_stop_writes_the_held_statuses() -> None:
    api = Api()
    op = held_operator(api)
    op.c.ctx.stop = asyncio.Event()
    op.c.ctx.metrics = OperatorMetrics("")
    await to_running(op)
    assert status_writes(api) == 0
    await op.c.stop()
    assert status_writes(api) == 1
    assert api.patched[STATUS]["status"]["phase"] == "Running"
    assert op.c.jobs[KEY].held_since is None


async def test_a_status_held_when_the_spec_turns_invalid_is_written() -> None:
    """No step runs on a spec that does not validate (InvalidSpec), so the pass the hold's
    timer brings wrote nothing, again and again: the job showed its old status for as long as
    the spec stayed invalid (for ever at a stop). The held status is written as decided, and
    the transitions held go out before the InvalidSpec Event."""
    api = Api()
    op = held_operator(api)
    await to_running(op)
    assert status_writes(api) == 0
    op.job(vcjob(2, replicas=-1))
    await op.step()
    assert status_writes(api) == 1
    status = api.patched[STATUS]["status"]
    assert status["phase"] == "Running"
    assert status["observedGeneration"] == 1  # what the last valid spec decided
    assert op.c.jobs[KEY].unwritten is None
    await op.c.events.drain(5)
    assert [e["reason"] for e in api.events] == ["JobRunning", "InvalidSpec"]
    await op.step()  # the hold's timer: nothing more to write
    assert status_writes(api) == 1


async def test_stop_writes_the_held_status_and_creates_no_pod() -> None:
    """At a stop the held statuses were written by running each job's whole step, which acted
    on what had changed meanwhile (here: a task scaled up, so a pod created by an operator on
    its way out). Only the status held is written now, as its step decided it."""
    api = Api()
    op = held_operator(api)
    op.c.ctx.stop = asyncio.Event()
    op.c.ctx.metrics = OperatorMetrics("")
    await to_running(op)
    api.take_calls()
    op.job(vcjob(2, replicas=2))  # a step would create j-w-1
    await op.c.stop()
    assert api.take_calls() == [("PATCH", STATUS)]
    status = api.patched[STATUS]["status"]
    assert (status["phase"], status["observedGeneration"]) == ("Running", 1)
    assert op.c.jobs[KEY].unwritten is None
