"""The quality runner's cache keys."""

from __future__ import annotations

from operators.simulator.quality import lingjun_key


def test_a_lingjun_replay_of_the_first_jobs_is_cached_apart_from_the_full_replay() -> None:
    # A `--limit N` run was once stored under the full replay's name, so the report showed
    # a partial replay as the full one and the full replay was skipped as cached.
    assert lingjun_key("Sluice", 1.0, None) == "Sluice"
    assert lingjun_key("Sluice", 10.0, None) == "Sluice, arrivals x10"
    assert lingjun_key("Sluice", 1.0, 200) == "Sluice, first 200 jobs"
    assert lingjun_key("Sluice", 10.0, 200) == "Sluice, arrivals x10, first 200 jobs"
