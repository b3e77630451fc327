"""The job core end to end without a cluster: phases, pods, policies, elastic replicas, the log."""

from __future__ import annotations

from dataclasses import replace

from operators.api.batch import JobPhase as J
from operators.jobs.observed import GroupObs
from operators.jobs.reconcile import Memory, Observed, Plan, reconcile
from operators.jobs.translog import WINDOW

from .sim import T0, Sim, hybridjob, template, vcjob


def two_tasks(**extra: object) -> Sim:
    return Sim(
        vcjob(
            tasks=[
                {"name": "ps", "replicas": 2, "template": template()},
                {"name": "worker", "replicas": 3, "minAvailable": 2, "template": template()},
            ],
            **extra,
        )
    )


def test_pods_only_after_admission_then_running_then_completed() -> None:
    sim = two_tasks()
    plan = sim.step()
    assert sim.phase == J.PENDING
    assert plan.create == []
    assert plan.status["podGroup"] == "j"
    plan = sim.admit()
    assert sim.phase == J.INQUEUE
    assert sorted(sim.pods) == ["j-ps-0", "j-ps-1", "j-worker-0", "j-worker-1", "j-worker-2"]
    sim.run_all()
    sim.step()
    assert sim.phase == J.RUNNING
    for name in sim.pods:
        sim.set(name, "Succeeded")
    plan = sim.step()
    assert sim.phase == J.COMPLETED
    assert sim.job_path() == ["Pending", "Inqueue", "Running", "Completed"]
    assert plan.status["succeeded"] == 5
    assert {t["name"]: t["phase"] for t in plan.status["tasks"]} == {
        "ps": "Completed",
        "worker": "Completed",
    }


def test_repeated_steps_never_duplicate_a_pod() -> None:
    sim = two_tasks()
    sim.admit()
    for _ in range(3):
        assert sim.step().create == []


def test_pods_created_but_not_yet_watched_are_not_created_again() -> None:
    sim = two_tasks()
    sim.group = GroupObs(phase="Inqueue")
    sim.step()
    job, memory = sim.job, sim.memory
    plan = reconcile(job, memory, Observed(group=sim.group, creating=frozenset({"j-ps-0"})), T0)
    assert ("ps", 0) not in [(t.name, i) for t, i in plan.create]
    assert len(plan.create) == 4


def test_min_success_completes_the_job_and_stops_the_rest() -> None:
    sim = Sim(vcjob(minSuccess=2, tasks=[{"name": "w", "replicas": 3, "template": template()}]))
    sim.admit()
    sim.run_all()
    sim.step()
    sim.set("j-w-0", "Succeeded")
    sim.step()
    assert sim.phase == J.RUNNING
    sim.set("j-w-1", "Succeeded")
    plan = sim.step()
    assert [p.name for p in plan.delete] == ["j-w-2"]
    sim.step()
    assert sim.job_path()[-2:] == ["Completing", "Completed"]


def test_a_pod_of_an_older_job_version_failing_is_ignored() -> None:
    sim = two_tasks(policies=[{"event": "PodFailed", "action": "RestartJob"}], maxRetry=5)
    sim.admit()
    sim.run_all()
    sim.step()
    old = sim.pods["j-ps-0"]
    sim.set("j-ps-0", "Failed", exit_code=1)
    sim.step()
    assert sim.memory.version == 1
    sim.step()
    sim.admit()
    assert sim.phase == J.INQUEUE
    # The old version's pod shows up late (a slow watch), failed: no second restart.
    sim.pods["j-ps-0-old"] = replace(old, name="j-ps-0-old", uid="old", phase="Failed")
    plan = sim.step()
    assert sim.memory.retry_count == 1
    assert sim.memory.version == 1
    assert not any(e.reason == "RestartJob" for e in plan.events)
    assert "j-ps-0-old" in {p.name for p in plan.delete}  # stale: removed


def test_main_task_completes_the_job_while_others_run() -> None:
    sim = Sim(
        vcjob(
            tasks=[
                {"name": "ps", "replicas": 2, "template": template()},
                {
                    "name": "main",
                    "replicas": 1,
                    "dependsOn": {"name": ["ps"]},
                    "policies": [{"event": "TaskCompleted", "action": "CompleteJob"}],
                    "template": template(),
                },
            ]
        )
    )
    sim.admit()
    assert sorted(sim.pods) == ["j-ps-0", "j-ps-1"]  # main waits for its dependency
    sim.run_all("ps")
    sim.step()
    assert "j-main-0" in sim.pods
    sim.set("j-main-0", "Running")
    sim.step()
    sim.set("j-main-0", "Succeeded")
    plan = sim.step()
    assert sim.phase in (J.COMPLETING, J.COMPLETED)
    assert {p.name for p in plan.delete} == {"j-ps-0", "j-ps-1"}
    assert "TaskCompleted (task main)" in plan.status["message"]
    sim.step()
    assert sim.phase == J.COMPLETED
    assert "j-main-0" in sim.pods  # finished pods stay for their logs


def test_restart_task_on_exit_code_then_failed_after_max_retry() -> None:
    sim = Sim(
        vcjob(
            maxRetry=2,
            tasks=[
                {
                    "name": "w",
                    "replicas": 2,
                    "policies": [{"exitCode": 3, "action": "RestartTask"}],
                    "template": template(),
                }
            ],
        )
    )
    sim.admit()
    for attempt in (1, 2):
        sim.run_all()
        sim.step()
        assert sim.phase == J.RUNNING
        sim.set("j-w-0", "Failed", exit_code=3)
        plan = sim.step()
        assert plan.memory.retry_count == attempt
        assert any(e.reason == "RestartTask" for e in plan.events)
        sim.step()  # the task's pods are gone: Restarting -> Pending, admitted anew
        assert sim.phase == J.PENDING
        assert not sim.pods
        sim.admit()
        assert sorted(sim.pods) == ["j-w-0", "j-w-1"]
    sim.run_all()
    sim.step()
    sim.set("j-w-1", "Failed", exit_code=3)
    plan = sim.step()
    assert sim.phase == J.FAILED
    assert plan.status["reason"] == "MaxRetryExceeded"
    path = sim.job_path()
    assert path[:4] == ["Pending", "Inqueue", "Running", "Restarting"]
    assert path[-1] == "Failed"
    seqs = [t.seq for p in sim.plans for t in p.transitions]
    assert seqs == list(range(1, len(seqs) + 1))


def test_other_exit_codes_do_not_match() -> None:
    sim = Sim(
        vcjob(
            tasks=[
                {
                    "name": "w",
                    "replicas": 1,
                    "policies": [{"exitCode": 3, "action": "RestartTask"}],
                    "template": template(),
                }
            ],
        )
    )
    sim.admit()
    sim.run_all()
    sim.step()
    sim.set("j-w-0", "Failed", exit_code=1)
    sim.step()
    assert sim.phase == J.FAILED
    assert sim.memory.retry_count == 0


def test_restart_job_bumps_version_and_recreates_every_pod() -> None:
    sim = two_tasks(policies=[{"event": "PodFailed", "action": "RestartJob"}])
    sim.admit()
    sim.run_all()
    sim.step()
    sim.set("j-ps-0", "Failed", exit_code=1)
    plan = sim.step()
    assert plan.memory.version == 1
    assert len(plan.delete) == 5
    sim.step()
    assert sim.phase == J.PENDING
    sim.admit()
    assert sim.phase == J.INQUEUE
    assert len(sim.pods) == 5
    assert all(p.version == 1 for p in sim.pods.values())


def test_elastic_hybridjob_group_spec_and_shrink_is_not_a_failure() -> None:
    sim = Sim(
        hybridjob(
            maxRetry=1,
            policies=[{"event": "PodEvicted", "action": "RestartJob"}],
            replicaSpecs={
                "PS": {"minReplicas": 1, "maxReplicas": 2, "priority": 10, "template": template()},
                "Worker": {"minReplicas": 2, "maxReplicas": 8, "template": template()},
            },
        )
    )
    assert sim.job.elastic
    assert sim.job.min_available == 3
    assert sim.job.max_replicas == 10
    sim.admit()
    assert len(sim.pods) == 10
    sim.run_all()
    sim.step()
    assert sim.phase == J.RUNNING
    sim.evict("h-worker-7")  # the scheduler shrinks the surplus
    plan = sim.step()
    assert sim.phase == J.RUNNING
    assert plan.memory.retry_count == 0
    assert "h-worker-7" in sim.pods  # back, pending, waiting to grow again
    replica_moves = [t for t in plan.transitions if t.name == "h-worker-7"]
    assert replica_moves
    assert replica_moves[0].reason == "Shrunk"
    workers = next(t for t in plan.status["tasks"] if t["name"] == "worker")
    assert workers["replicas"] == 8
    assert workers["running"] == 7
    sim.evict("h-worker-0")  # part of the gang minimum: a real eviction
    sim.step()
    assert sim.phase in (J.RESTARTING, J.PENDING, J.INQUEUE)
    assert sim.memory.retry_count == 1


def test_a_shrink_seen_terminating_is_told_as_shrunk() -> None:
    """A step may see the evicted replica on its way out (deleting, DisruptionTarget) before it
    is gone: the Running -> Evicted transition is told then, so its reason must go with it
    (before, it was told without one and `Shrunk` was never told; and an eviction inside the
    gang minimum was told without `Evicted`)."""
    sim = Sim(
        hybridjob(
            replicaSpecs={
                "Worker": {"minReplicas": 2, "maxReplicas": 4, "template": template()},
            },
        )
    )
    sim.admit()
    sim.run_all()
    sim.step()
    for name in ("h-worker-3", "h-worker-1"):
        sim.pods[name] = replace(sim.pods[name], deleting=True, evicted=True)
    plan = sim.step()
    moves = {t.name: (t.to, t.reason) for t in plan.transitions if t.level.value == "Replica"}
    assert moves["h-worker-3"] == ("Evicted", "Shrunk")
    assert moves["h-worker-1"] == ("Evicted", "Evicted")
    sim.evict("h-worker-3")
    plan = sim.step()
    assert sim.memory.retry_count == 0
    assert [t for t in plan.transitions if t.name == "h-worker-3" and t.to == "Evicted"] == []


def _running_elastic(**spec: object) -> Sim:
    sim = Sim(
        hybridjob(
            replicaSpecs={"Worker": {"minReplicas": 2, "maxReplicas": 4, "template": template()}},
            **spec,
        )
    )
    sim.admit()
    sim.run_all()
    sim.step()
    return sim


def _replica_moves(plan: Plan) -> dict[str, tuple[str, str]]:
    return {t.name: (t.to, t.reason) for t in plan.transitions if t.level.value == "Replica"}


def test_a_whole_elastic_job_evicted_is_not_told_as_a_shrink() -> None:
    """Preempted whole, a stale gang, a move: every replica leaves, so those above the minimum
    were not given back while the job runs on; the index alone called them `Shrunk` (review)."""
    terminating = _running_elastic()
    for name in list(terminating.pods):
        terminating.pods[name] = replace(terminating.pods[name], deleting=True, evicted=True)
    moves = _replica_moves(terminating.step())
    assert moves["h-worker-0"] == moves["h-worker-3"] == ("Evicted", "Evicted")
    gone = _running_elastic()
    for name in list(gone.pods):
        gone.evict(name)
    assert _replica_moves(gone.step())["h-worker-3"] == ("Evicted", "Evicted")


def test_evicting_the_only_placed_replicas_of_an_elastic_job_is_a_pod_evicted() -> None:
    """Workers 0 and 1 were re-created and wait unplaced; 2 and 3 are all that runs, so their
    eviction is not a shrink: the PodEvicted policy runs (the index alone swallowed it)."""
    sim = _running_elastic(policies=[{"event": "PodEvicted", "action": "RestartJob"}])
    for name in ("h-worker-0", "h-worker-1"):
        sim.pods[name] = replace(sim.pods[name], phase="Pending", node="")
    sim.step()
    sim.evict("h-worker-2")
    sim.evict("h-worker-3")
    sim.step()
    assert sim.memory.retry_count == 1


def test_dependency_cycle_is_a_condition_not_a_crash() -> None:
    sim = two_tasks()
    # Admission refuses cycles; an object that got past it (older CRD) still must not crash.
    tasks = tuple(
        t.__class__(**{**{f: getattr(t, f) for f in t.__slots__}, "depends_on": (other,)})
        for t, other in zip(sim.job.tasks, ("worker", "ps"), strict=True)
    )
    sim.job = sim.job.__class__(
        **{**{f: getattr(sim.job, f) for f in sim.job.__slots__}, "tasks": tasks}
    )
    plan = sim.admit()
    assert plan.create == []
    valid = next(c for c in plan.status["conditions"] if c["type"] == "Valid")
    assert valid["status"] == "False"
    assert valid["reason"] == "DependencyCycle"
    assert any(e.type == "Warning" and e.reason == "DependencyCycle" for e in plan.events)


def with_spec(sim: Sim, **changes: object) -> None:
    """The job as edited with kubectl (the fields the API lets change)."""
    sim.job = sim.job.__class__(
        **{**{f: getattr(sim.job, f) for f in sim.job.__slots__}, **changes}
    )


def test_suspend_and_resume() -> None:
    sim = two_tasks()
    sim.admit()
    sim.run_all()
    sim.group = GroupObs(phase="Running")
    sim.step()
    with_spec(sim, suspend=True)
    plan = sim.step()
    assert len(plan.delete) == 5
    plan = sim.step()
    assert sim.phase == J.ABORTED
    # No pod left to finish its Running group from: it would count as running work for ever.
    assert plan.release_group
    suspended = next(c for c in sim.plans[-1].status["conditions"] if c["type"] == "Suspended")
    assert suspended["status"] == "True"
    with_spec(sim, suspend=False)
    plan = sim.step()
    assert sim.phase == J.PENDING
    assert plan.create == []  # not before the group is admitted again
    sim.admit()
    assert sim.phase == J.INQUEUE
    assert len(sim.pods) == 5


def test_suspended_while_inqueue_gives_back_its_admission_and_resumes_through_a_new_one() -> None:
    sim = two_tasks()
    sim.admit()  # quota reserved, pods created, none bound yet
    with_spec(sim, suspend=True)
    plan = sim.step()
    assert len(plan.delete) == 5
    assert not plan.release_group  # pods still being deleted
    plan = sim.step()
    assert sim.phase == J.ABORTED
    assert plan.release_group  # an Inqueue group of a suspended job would hold its quota
    assert sim.group is None
    plan = sim.step()
    assert not plan.release_group
    assert plan.create == []
    with_spec(sim, suspend=False)
    plan = sim.step()
    assert sim.phase == J.PENDING
    assert plan.create == []
    sim.group = GroupObs(phase="Pending")  # the operator creates the group again
    sim.step()
    assert sim.phase == J.PENDING
    assert not sim.pods
    sim.admit()
    assert sim.phase == J.INQUEUE
    assert len(sim.pods) == 5
    assert sim.job_path() == [
        "Pending",
        "Inqueue",
        "Aborting",
        "Aborted",
        "Restarting",
        "Pending",
        "Inqueue",
    ]


def test_a_finished_job_keeps_a_group_its_pods_finish() -> None:
    sim = two_tasks()
    sim.admit()
    sim.run_all()
    sim.group = GroupObs(phase="Running")
    sim.step()
    for name in sim.pods:
        sim.set(name, "Succeeded")
    plan = sim.step()
    assert sim.phase == J.COMPLETED
    assert not plan.release_group  # the podgroup operator writes Completed from the pods
    sim.set("j-ps-0", "Failed")
    sim.pods.pop("j-ps-1")
    with_spec(sim, suspend=True)
    assert not sim.step().release_group


def test_suspended_before_admission_releases_its_waiting_group() -> None:
    sim = two_tasks()
    sim.group = GroupObs(phase="Pending")
    sim.step()
    with_spec(sim, suspend=True)
    plan = sim.step()
    assert sim.phase == J.ABORTED
    assert plan.release_group


def test_resume_creates_no_pod_from_the_admission_seen_before_the_restart() -> None:
    sim = two_tasks()
    with_spec(sim, suspend=True)
    sim.step()
    assert sim.phase == J.ABORTED
    sim.group = GroupObs(phase="Inqueue")  # an old group, or its deletion not seen yet
    with_spec(sim, suspend=False)
    plan = sim.step()
    assert plan.create == []
    assert sim.phase == J.PENDING


def tasks(ps: int, workers: int, worker_min: int) -> list[dict[str, object]]:
    return [
        {"name": "ps", "replicas": ps, "template": template()},
        {"name": "worker", "replicas": workers, "minAvailable": worker_min, "template": template()},
    ]


def test_replicas_and_min_available_edited_while_running() -> None:
    sim = Sim(vcjob(tasks=tasks(2, 3, 2)))
    sim.admit()
    sim.run_all()
    sim.step()
    assert sim.phase == J.RUNNING
    sim.job = vcjob(tasks=tasks(2, 1, 1), minAvailable=3)  # kubectl edit
    plan = sim.step()
    assert sorted(p.name for p in plan.delete) == ["j-worker-1", "j-worker-2"]  # highest first
    assert plan.status["minAvailable"] == 3
    assert sim.phase == J.RUNNING
    assert sim.memory.retry_count == 0  # a scale-down is no failure
    sim.job = vcjob(tasks=tasks(2, 4, 1), minAvailable=3)
    plan = sim.step()
    assert sorted(index for _, index in plan.create) == [1, 2, 3]
    assert sim.step().create == []


def test_a_task_scaled_to_zero_while_running_lets_the_job_complete() -> None:
    sim = Sim(vcjob(tasks=tasks(2, 3, 2)))
    sim.admit()
    sim.run_all()
    sim.step()
    sim.job = vcjob(tasks=tasks(2, 0, 0))
    sim.step()
    assert sorted(sim.pods) == ["j-ps-0", "j-ps-1"]
    for name in sim.pods:
        sim.set(name, "Succeeded")
    sim.step()
    assert sim.phase == J.COMPLETED


def test_an_elastic_maximum_lowered_while_running_drops_the_highest_indexes() -> None:
    def spec(max_workers: int) -> dict[str, object]:
        return {
            "PS": {"minReplicas": 1, "maxReplicas": 2, "template": template()},
            "Worker": {"minReplicas": 2, "maxReplicas": max_workers, "template": template()},
        }

    sim = Sim(hybridjob(replicaSpecs=spec(6)))
    sim.admit()
    sim.run_all()
    sim.step()
    sim.job = hybridjob(replicaSpecs=spec(3))
    plan = sim.step()
    assert sorted(p.name for p in plan.delete) == ["h-worker-3", "h-worker-4", "h-worker-5"]
    assert plan.status["maxReplicas"] == 5
    assert sim.phase == J.RUNNING
    assert sim.memory.retry_count == 0
    assert not [t for t in plan.transitions if t.to == "Failed"]


def test_ttl_deletes_the_job_after_it_finished() -> None:
    sim = two_tasks(ttlSecondsAfterFinished=30)
    sim.admit()
    for name in sim.pods:
        sim.set(name, "Succeeded")
    plan = sim.step()
    assert sim.phase == J.COMPLETED
    assert not plan.delete_job
    assert plan.requeue_after is not None
    assert 0 < plan.requeue_after <= 30
    assert sim.step(31).delete_job


def test_pod_pending_timeout_fires_at_its_deadline() -> None:
    sim = two_tasks(policies=[{"event": "PodPending", "timeout": "60s", "action": "AbortJob"}])
    plan = sim.admit()
    plan = sim.step(10)
    assert plan.requeue_after is not None
    assert 45 < plan.requeue_after <= 60
    sim.step(60)
    assert sim.phase in (J.ABORTING, J.ABORTED)


def test_privileged_and_will_evict_mirror_the_podgroup() -> None:
    sim = two_tasks()
    sim.admit()
    sim.group = GroupObs(phase="Running", preemption_role="WillEvict", preemption_deadline="t")
    plan = sim.step()
    cond = next(c for c in plan.status["conditions"] if c["type"] == "WillEvict")
    assert cond["status"] == "True"
    assert any(t.to == "WillEvict" for t in plan.transitions)
    sim.group = GroupObs(phase="Running")
    plan = sim.step()
    assert any(t.from_ == "WillEvict" for t in plan.transitions)


def test_transition_window_counts_undelivered_drops_only_with_hooks() -> None:
    for hooks, dropped in ((False, 0), (True, 1)):
        sim = Sim(
            vcjob(tasks=[{"name": "w", "replicas": WINDOW, "template": template()}]), hooks=hooks
        )
        sim.admit()
        sim.run_all()
        plan = sim.step()
        assert len(plan.status["transitions"]) == WINDOW
        assert plan.status["transitionSeq"] > WINDOW
        assert (plan.status["transitionsDropped"] > 0) == bool(dropped)


def test_a_timeout_delays_any_policy_action_and_survives_a_restart() -> None:
    """PodFailed with `timeout: 60s`: nothing at once, the deadline in status, the action at the
    deadline, also when the operator restarted in between (memory re-read from the status)."""
    sim = two_tasks(
        policies=[{"event": "PodFailed", "timeout": "60s", "action": "AbortJob"}],
    )
    sim.admit()
    sim.run_all()
    sim.step()
    sim.set("j-worker-0", "Failed", exit_code=1)
    plan = sim.step()
    assert sim.phase == J.RUNNING
    (delayed,) = plan.status["delayedActions"]
    assert (delayed["event"], delayed["task"], delayed["pod"]) == (
        "PodFailed",
        "worker",
        "j-worker-0",
    )
    assert plan.requeue_after is not None
    assert 55 < plan.requeue_after <= 60
    sim.memory = Memory.from_status(plan.status)  # an operator restart reads the status
    plan = sim.step(30)
    assert sim.phase == J.RUNNING
    assert len(plan.status["delayedActions"]) == 1
    plan = sim.step(31)
    assert sim.phase in (J.ABORTING, J.ABORTED)
    assert plan.status["delayedActions"] == []
    assert "PodFailed (j-worker-0, exit code 1)" in plan.status["message"]


def test_a_delayed_action_is_dropped_when_the_situation_ends() -> None:
    """Unknown with a timeout: the PodGroup is Running again before the deadline, so nothing
    happens; TaskCompleted with a timeout fires (control: the same clock, the task stays done)."""
    sim = two_tasks(policies=[{"event": "Unknown", "timeout": "30s", "action": "RestartJob"}])
    sim.admit()
    sim.run_all()
    sim.group = GroupObs(phase="Running")
    sim.step()
    sim.group = GroupObs(phase="Unknown")
    assert len(sim.step().status["delayedActions"]) == 1
    sim.group = GroupObs(phase="Running")
    plan = sim.step(10)
    assert plan.status["delayedActions"] == []
    sim.step(60)
    assert sim.phase == J.RUNNING
    assert plan.memory.retry_count == 0

    done = Sim(
        vcjob(
            tasks=[
                {
                    "name": "main",
                    "replicas": 1,
                    "policies": [
                        {"event": "TaskCompleted", "timeout": "20s", "action": "CompleteJob"}
                    ],
                    "template": template(),
                },
                {"name": "side", "replicas": 1, "template": template()},
            ]
        )
    )
    done.admit()
    done.run_all()
    done.step()
    done.set("j-main-0", "Succeeded")
    done.step()
    assert done.phase == J.RUNNING
    done.step(25)
    assert done.phase in (J.COMPLETING, J.COMPLETED)


def test_a_task_depending_on_a_task_scaled_to_zero_is_created() -> None:
    """A task scaled to 0 is done (found by an outside review: it stayed Pending, so a task
    depending on it was never created and the job sat in Inqueue)."""

    def tasks(ps: int) -> list[dict[str, object]]:
        return [
            {"name": "ps", "replicas": ps, "template": template()},
            {"name": "main", "replicas": 1, "dependsOn": {"name": ["ps"]}, "template": template()},
        ]

    sim = Sim(vcjob(tasks=tasks(2)))
    sim.admit()
    assert sorted(sim.pods) == ["j-ps-0", "j-ps-1"]
    sim.job = vcjob(tasks=tasks(0))
    for _ in range(5):
        sim.step()
    assert "j-main-0" in sim.pods, (sim.phase, sorted(sim.pods))
