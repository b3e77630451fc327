"""The FGD paper's published results (analysis_*_discrete.csv), summarised per trace/policy."""

from __future__ import annotations

import csv
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from pathlib import Path

# Column names of the published files -> display names (paper order).
POLICIES = {
    "01-Random": "Random",
    "02-DotProd": "DotProd",
    "03-GpuClustering": "Clustering",
    "04-GpuPacking": "Packing",
    "05-BestFit": "BestFit",
    "06-FGD": "FGD",
}


@dataclass(frozen=True, slots=True)
class Series:
    """Per seed, the value at each arrived % (0..130)."""

    runs: tuple[tuple[float, ...], ...]

    def at(self, arrived: int) -> tuple[float, float]:
        values = np.asarray([run[arrived] for run in self.runs])
        return float(values.mean()), float(values.std())

    def mean_curve(self) -> list[float]:
        return [float(v) for v in np.asarray(self.runs).mean(axis=0)]


def load(path: Path) -> dict[tuple[str, str], Series]:
    """(trace, policy display name) -> series, e.g. ("default", "FGD")."""
    rows: dict[tuple[str, str], list[tuple[float, ...]]] = {}
    with path.open(newline="") as f:
        for row in csv.DictReader(f):
            trace = row["workload"].removeprefix("openb_pod_list_")
            policy = POLICIES.get(row["sc_policy"], row["sc_policy"])
            values = tuple(float(row[str(i)]) for i in range(131))
            rows.setdefault((trace, policy), []).append(values)
    return {key: Series(tuple(runs)) for key, runs in rows.items()}
