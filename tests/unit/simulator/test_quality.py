"""The quality runner's cache keys, and the check that a cached run is what its name runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from operators.scheduler.session import SessionConfig
from operators.simulator.quality import (
    FRAGMENTATION_KEY,
    OURS,
    PAPERS_MEASURE,
    fragmentation_knobs,
    lingjun_key,
    load_results,
    run_matrix,
)


def test_a_lingjun_replay_of_the_first_jobs_is_cached_apart_from_the_full_replay() -> None:
    # A `--limit N` run was once stored under the full replay's name, so the report showed
    # a partial replay as the full one and the full replay was skipped as cached.
    assert lingjun_key("Sluice", 1.0, None) == "Sluice"
    assert lingjun_key("Sluice", 10.0, None) == "Sluice, arrivals x10"
    assert lingjun_key("Sluice", 1.0, 200) == "Sluice, first 200 jobs"
    assert lingjun_key("Sluice", 10.0, 200) == "Sluice, arrivals x10, first 200 jobs"


def _write_trace(folder: Path) -> None:
    openb_dir = folder / "openb"
    openb_dir.mkdir(parents=True)
    (openb_dir / "openb_node_list_gpu_node.csv").write_text(
        "sn,cpu_milli,memory_mib,gpu,model\na,16000,65536,2,T4\nb,16000,65536,2,T4\n"
    )
    (openb_dir / "openb_pod_list_default.csv").write_text(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n"
        "half,1000,1024,1,500,\npair,2000,2048,2,1000,\n"
    )


def test_a_cached_sluice_run_records_the_knobs_its_name_ran_with(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _write_trace(tmp_path / "traces")
    monkeypatch.setenv("SLUICE_TRACES_DIR", str(tmp_path / "traces"))
    cache = tmp_path / "results.jsonl"
    run_matrix(["default"], ["BestFit", OURS, PAPERS_MEASURE], [42], cache)
    rows = load_results(cache)
    default = SessionConfig()
    assert rows[("default", OURS, 42)][FRAGMENTATION_KEY] == [
        default.fragmentation_cpu_reach,
        default.fragmentation_levels,
        default.fragmentation_scarcity,
    ]
    assert rows[("default", PAPERS_MEASURE, 42)][FRAGMENTATION_KEY] == [0.0, 100, 0.0]
    assert FRAGMENTATION_KEY not in rows[("default", "BestFit", 42)]


@pytest.mark.parametrize("knobs", [None, [0.0, 100, 0.0]])
def test_a_cached_sluice_run_of_other_knobs_than_its_name_means_now_is_refused(
    tmp_path: Path, knobs: list[float] | None
) -> None:
    # The cache is keyed by policy name and "Sluice" follows the core's defaults: a run of
    # the old default (or one that recorded no knobs) under that name must not be averaged
    # with runs of the new one.
    row: dict[str, object] = {"trace": "default", "policy": OURS, "seed": 42, "allocation": []}
    if knobs is not None:
        row[FRAGMENTATION_KEY] = knobs
    cache = tmp_path / "results.jsonl"
    cache.write_text(json.dumps(row) + "\n")
    with pytest.raises(ValueError, match="rename its rows"):
        load_results(cache)


def test_the_committed_openb_cache_matches_what_each_sluice_name_runs() -> None:
    rows = load_results(Path(__file__).parents[3] / "docs" / "quality" / "openb-results.jsonl")
    assert {policy for _, policy, _ in rows} >= {OURS, PAPERS_MEASURE}
    for (_, policy, _), row in rows.items():
        assert (FRAGMENTATION_KEY in row) == (fragmentation_knobs(policy) is not None)


def test_a_policy_name_the_runner_does_not_know_is_refused(tmp_path: Path) -> None:
    # "CPU reach 0.5 + scarcity" became the default; run under its old name it would have been
    # the default's run cached under a variant's name.
    with pytest.raises(ValueError, match="unknown policies"):
        run_matrix(["default"], ["Sluice, CPU reach 0.5 + scarcity"], [42], tmp_path / "r.jsonl")
    assert not (tmp_path / "r.jsonl").exists()
