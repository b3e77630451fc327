"""bench.live's command line and report when scenarios are left out (one lock hold per part of
a full-size run): nothing here is timed."""

from __future__ import annotations

from typing import Any

from bench import live


def test_zero_per_node_and_seconds_leave_steady_state_and_arrival_out_of_the_report() -> None:
    args = ["--kubeconfig", "kc", "--pods", "4", "--shapes", "2x2", "--job-shapes", ""]
    _, settings = live.parse(
        [*args, "--per-node", "0", "--seconds", "0", "--py-spy", "/bin/py-spy"]
    )
    assert (settings.per_node, settings.seconds, settings.job_shapes) == (0, 0.0, ())
    assert settings.py_spy == "/bin/py-spy"
    bare = live.Run("bare", 4, 0.1, 1.0, 4.0)
    sluice = live.Run("sluice", 4, 0.5, 1.5, 4.0, ready=0.4, sessions=1)
    result = {
        "plain": {"bare": [bare], "sluice": [sluice]},
        "gangs": {"2x2": [sluice]},
        "jobs": {},
        "steady": None,
        "arrival": None,
        "loads": [1.0, 1.0],
        "peak_rss": 100.0,
    }
    text = live.report(result, settings, "python -m bench.live", "a cluster")
    assert "| 4 x 1 (plain) | sluice | 0.50 (0.10 after sync) | 1.50 (1.10 after sync) |" in text
    assert "| 2x2 (PodGroups) | sluice |" in text
    assert "Steady state" not in text
    assert "Sustained arrival" not in text


def test_zero_rounds_report_the_arrival_alone() -> None:
    """`--rounds 0 --per-node 0` measures only the sustained arrival (one lock hold)."""
    _, settings = live.parse(["--kubeconfig", "kc", "--rounds", "0", "--per-node", "0"])
    result: dict[str, Any] = {
        "plain": {"bare": [], "sluice": []},
        "gangs": {"500x20": []},
        "jobs": {},
        "steady": None,
        "arrival": live.Arrival(200.0, 300.0, 59559, 34.76, 72.65),
        "loads": [2.2, 5.3],
        "peak_rss": 300.0,
    }
    text = live.report(result, settings, "python -m bench.live --rounds 0", "a cluster")
    assert "| pods | contestant |" not in text
    assert "59559 pods in mixed gangs (1/2/4/8) at 200 pods/s for 300 s" in text
    assert "p50 34.76 s, p99 72.65 s" in text
    assert "every pod running to the end (the cluster fills up)" in text


def test_an_arrival_with_a_lifetime_says_where_the_cluster_levels_off() -> None:
    _, settings = live.parse(["--kubeconfig", "kc", "--rounds", "0", "--lifetime", "60"])
    assert settings.lifetime == 60.0
    result: dict[str, Any] = {
        "plain": {},
        "gangs": {},
        "jobs": {},
        "steady": None,
        "arrival": live.Arrival(200.0, 300.0, 60000, 0.5, 1.5, lifetime=60.0),
        "loads": [2.0, 3.0],
        "peak_rss": 300.0,
    }
    text = live.report(result, settings, "python -m bench.live --lifetime 60", "a cluster")
    assert "each pod running 60 s (the cluster levels off at about 12000 pods)" in text


def test_kube_schedulers_run_of_the_same_arrival_is_reported_beside_sluices() -> None:
    _, settings = live.parse(["--rounds", "0", "--lifetime", "30"])
    assert settings.arrival_kube_scheduler  # on by default on a cluster the run starts
    assert not live.parse(["--no-arrival-kube-scheduler"])[1].arrival_kube_scheduler
    result: dict[str, Any] = {
        "plain": {},
        "gangs": {},
        "jobs": {},
        "steady": None,
        "arrival": live.Arrival(200.0, 120.0, 24000, 2.5, 7.9, lifetime=30.0),
        "arrival_kube_scheduler": live.Arrival(
            200.0, 120.0, 23990, 0.4, 1.2, lifetime=30.0, contestant="kube-scheduler"
        ),
        "loads": [2.0, 3.0],
        "peak_rss": 300.0,
    }
    text = live.report(result, settings, "python -m bench.live --lifetime 30", "a cluster")
    assert "p50 2.50 s, p99 7.90 s." in text
    assert "Same arrival to kube-scheduler" in text
    assert "23990 pods): creation -> bound p50 0.40 s, p99 1.20 s." in text


def test_an_arrival_created_slower_than_asked_says_the_rate_it_reached() -> None:
    """The bench no longer waits for one batch's creations before the next (a slow API server
    turned the arrival into a few bursts); what it could not create on time shows in the
    report instead of passing for the rate asked."""
    _, settings = live.parse(["--rounds", "0", "--lifetime", "30"])
    on_time = live.Arrival(200.0, 120.0, 24000, 2.5, 7.9, lifetime=30.0, created_within=120.4)
    late = live.Arrival(
        200.0, 120.0, 24000, 0.4, 1.2, 30.0, contestant="kube-scheduler", created_within=240.0
    )
    result: dict[str, Any] = {
        "plain": {},
        "gangs": {},
        "jobs": {},
        "steady": None,
        "arrival": on_time,
        "arrival_kube_scheduler": late,
        "loads": [2.0, 3.0],
        "peak_rss": 300.0,
    }
    text = live.report(result, settings, "python -m bench.live --lifetime 30", "a cluster")
    assert "about 6000 pods): creation -> bound p50 2.50 s" in text  # on time: nothing added
    assert "24000 pods (created over 240 s: 100 pods/s reached)): creation -> bound" in text
