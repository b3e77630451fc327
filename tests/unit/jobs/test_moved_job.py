"""A job whose pods consolidation moved: its PodGroup goes Running -> Inqueue (admission kept)
-> Running; the job itself is neither restarted nor sent back for admission."""

from __future__ import annotations

from operators.api.batch import JobPhase as J
from operators.jobs.observed import GroupObs

from .sim import Sim, template, vcjob


def test_a_moved_job_stays_running_and_gets_its_pods_back() -> None:
    sim = Sim(
        vcjob(
            tasks=[
                {"name": "ps", "replicas": 1, "template": template()},
                {"name": "worker", "replicas": 2, "template": template()},
            ]
        )
    )
    sim.admit()
    sim.run_all()
    sim.group = GroupObs(phase="Running")
    sim.step()
    assert sim.phase == J.RUNNING
    before = sorted(sim.pods)
    for name in before:
        sim.evict(name)  # the move: every pod evicted (reason Consolidated)
    sim.group = GroupObs(phase="Inqueue")  # the scheduler keeps its admission
    plan = sim.step()
    assert sim.phase == J.RUNNING
    assert plan.memory.retry_count == 0
    assert sorted(sim.pods) == before  # re-created at once, under the same names
    assert all(p.phase == "Pending" for p in sim.pods.values())
    assert {t.reason for t in plan.transitions if t.level.value == "Replica"} == {"Evicted"}
    assert not [t for t in plan.transitions if t.level.value == "Job"]
    sim.run_all()  # placed again
    sim.group = GroupObs(phase="Running")
    sim.step()
    assert sim.phase == J.RUNNING
    assert sim.job_path() == ["Pending", "Inqueue", "Running"]
