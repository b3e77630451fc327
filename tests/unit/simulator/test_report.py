"""The quality report's plot files depend on the data only."""

from __future__ import annotations

from pathlib import Path

from operators.simulator import openb
from operators.simulator.report import OURS, Row, _plot_openb


def test_the_plot_files_are_the_same_bytes_for_the_same_data(tmp_path: Path) -> None:
    curve = [min(float(x), 90.0) for x in range(openb.ARRIVED_MAX + 1)]
    runs: dict[tuple[str, str], list[Row]] = {
        (trace, OURS): [{"allocation": curve}] for trace in openb.TRACES
    }
    for run in ("a", "b"):
        (tmp_path / run).mkdir()
        _plot_openb(runs, {}, tmp_path / run / "plot")
    for suffix in (".svg", ".png"):
        first = (tmp_path / "a" / "plot").with_suffix(suffix).read_bytes()
        assert first == (tmp_path / "b" / "plot").with_suffix(suffix).read_bytes(), suffix
