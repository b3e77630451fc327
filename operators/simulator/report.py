"""Tables and plots for docs/quality.md (matplotlib, headless).

Each generated section of docs/quality.md sits between ``<!-- NAME:begin -->`` and
``<!-- NAME:end -->`` markers and is replaced whole; text outside the markers is kept.
"""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING

import matplotlib

matplotlib.use("Agg")  # no display: files only
import matplotlib.pyplot as plt
import numpy as np

from operators.simulator import openb, published
from operators.simulator.quality import PAPERS_MEASURE

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence
    from pathlib import Path

    from matplotlib.figure import Figure

REFERENCE_ORDER = ("Random", "DotProd", "Packing", "BestFit", "FGD")
PUBLISHED_ORDER = ("Random", "DotProd", "Clustering", "Packing", "BestFit", "FGD")
OURS = "Sluice"
# The default before session 9 (the FGD paper's fragment measure), shown beside the default
# so the change stays visible.
BEFORE = PAPERS_MEASURE
TOLERANCE = 0.5  # pp: a reproduced baseline within this of the published mean counts as matched


def replace_section(doc: Path, name: str, body: str) -> None:
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    text = doc.read_text() if doc.is_file() else "# Placement quality\n"
    block = f"{begin}\n{body.rstrip()}\n{end}"
    if begin in text and end in text:
        text = re.sub(
            re.escape(begin) + r".*?" + re.escape(end), lambda _: block, text, flags=re.DOTALL
        )
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    doc.write_text(text)


def mean_std(values: Sequence[float], digits: int = 2) -> str:
    if not values:
        return "-"
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"  # one seed: no spread to show
    return f"{np.mean(values):.{digits}f} ± {np.std(values):.{digits}f}"


Row = dict[str, object]


def _values(rows: Iterable[Row], arrived: int) -> list[float]:
    return [100.0 - float(row["allocation"][arrived]) for row in rows]  # type: ignore[index]


def _frag(rows: Iterable[Row], key: str, arrived: int) -> list[float]:
    return [float(row[key][str(arrived)]) for row in rows]  # type: ignore[index]


def write_openb(results: Mapping[tuple[str, str, int], Row], traces: Path, docs: Path) -> None:
    pub_allo = published.load(traces / "openb" / "published" / "analysis_allo_discrete.csv")
    pub_frag = published.load(traces / "openb" / "published" / "analysis_frag_ratio_discrete.csv")
    runs: dict[tuple[str, str], list[Row]] = {}
    for (trace, policy, _), row in sorted(results.items()):
        runs.setdefault((trace, policy), []).append(row)
    lines = [
        (
            "Unallocated GPU % at arrived workload = 100% of GPU capacity (lower is better), mean ± "
            "std over seeds (a single value: one seed); *n* = seeds run. Published columns: the "
            "paper's cached results, 10 seeds "
            "(`../shared/traces/openb/published/analysis_allo_discrete.csv`). Command: `make "
            "quality` (all of it), or a slice, e.g. `python -m operators.simulator.quality run "
            "--traces gpushare100 --policies Sluice FGD --seeds 42 43` then `python -m "
            "operators.simulator.quality report`. "
            f"*{BEFORE}*: the default before session 9 (no CPU reach, no scarcity, "
            "1/100 levels)."
        ),
        "",
        "| trace | "
        + " | ".join(f"published {p}" for p in PUBLISHED_ORDER)
        + f" | **{OURS}** | n | {BEFORE} | n |",
        "|---|" + "---|" * (len(PUBLISHED_ORDER) + 4),
    ]
    for trace in openb.TRACES:
        cells = []
        for policy in PUBLISHED_ORDER:
            series = pub_allo.get((trace, policy))
            cells.append(_pub_cell(series, 100, invert=True))
        ours = runs.get((trace, OURS), [])
        before = runs.get((trace, BEFORE), [])
        cells += [f"**{mean_std(_values(ours, 100))}**", str(len(ours))]
        cells += [mean_std(_values(before, 100)), str(len(before))]
        lines.append(f"| {trace} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "Reproduction of the paper's baselines with this simulator (same protocol, our code):",
        "",
        (
            "| trace | policy | published | reproduced | difference (pp) | within "
            f"{TOLERANCE} pp | n |"
        ),
        "|---|---|---|---|---|---|---|",
    ]
    for trace in openb.TRACES:
        for policy in REFERENCE_ORDER:
            rows = runs.get((trace, policy), [])
            series = pub_allo.get((trace, policy))
            if series is None:
                continue
            pub_mean = 100.0 - series.at(100)[0]
            ours_values = _values(rows, 100)
            if ours_values:
                diff = float(np.mean(ours_values)) - pub_mean
                verdict = "yes" if abs(diff) <= TOLERANCE else "**no**"
                diff_text = f"{diff:+.2f}"
            else:
                diff_text, verdict = "-", "not run"
            lines.append(
                f"| {trace} | {policy} | {_pub_cell(series, 100, invert=True)} | "
                f"{mean_std(ours_values)} | {diff_text} | {verdict} | {len(rows)} |"
            )
    lines += [
        "",
        (
            "Fragmentation rate (fragment / idle GPU, %) at 70 / 80 / 90% arrived, mean over seeds "
            "(lower is better):"
        ),
        "",
        "| trace | policy | published 70 / 80 / 90 | this simulator 70 / 80 / 90 |",
        "|---|---|---|---|",
    ]
    for trace in openb.TRACES:
        for policy in (*REFERENCE_ORDER, OURS):
            rows = runs.get((trace, policy), [])
            series = pub_frag.get((trace, policy))
            pub_text = (
                " / ".join(f"{series.at(a)[0]:.1f}" for a in openb.FRAG_POINTS) if series else "-"
            )
            ours_text = (
                " / ".join(f"{np.mean(_frag(rows, 'frag_rate', a)):.1f}" for a in openb.FRAG_POINTS)
                if rows
                else "-"
            )
            lines.append(f"| {trace} | {policy} | {pub_text} | {ours_text} |")
    lines += ["", "![GPU allocation vs arrived workload](quality-openb.svg)", ""]
    _plot_openb(runs, pub_allo, docs / "quality-openb")
    replace_section(docs / "quality.md", "openb", "\n".join(lines))


def _pub_cell(series: published.Series | None, arrived: int, invert: bool) -> str:
    if series is None:
        return "-"
    mean, std = series.at(arrived)
    return f"{(100.0 - mean) if invert else mean:.2f} ± {std:.2f}"


def _plot_openb(
    runs: Mapping[tuple[str, str], list[Row]],
    pub: Mapping[tuple[str, str], published.Series],
    stem: Path,
) -> None:
    traces = openb.TRACES
    cols = 2
    fig, axes = plt.subplots(math.ceil(len(traces) / cols), cols, figsize=(11, 8), sharex=True)
    x = np.arange(openb.ARRIVED_MAX + 1)
    colours = {
        "Random": "tab:gray",
        "DotProd": "tab:olive",
        "Packing": "tab:purple",
        "BestFit": "tab:blue",
        "FGD": "tab:orange",
        OURS: "tab:red",
    }
    for ax, trace in zip(np.ravel(axes), traces, strict=False):
        for policy in ("BestFit", "FGD"):
            series = pub.get((trace, policy))
            if series is not None:
                ax.plot(
                    x,
                    series.mean_curve(),
                    linestyle="--",
                    linewidth=1,
                    color=colours[policy],
                    label=f"{policy} (published)",
                )
        for policy in (*REFERENCE_ORDER, OURS):
            rows = runs.get((trace, policy), [])
            if rows:
                curve = np.mean([list(row["allocation"]) for row in rows], axis=0)  # type: ignore[call-overload]
                ax.plot(
                    x,
                    curve,
                    linewidth=2.2 if policy == OURS else 1.2,
                    color=colours[policy],
                    label=policy,
                )
        ax.plot(x, np.minimum(x, 100), color="black", linewidth=0.6, linestyle=":")
        ax.set_title(trace)
        ax.set_xlim(40, 130)
        ax.set_ylim(40, 100)
        ax.set_ylabel("GPU allocation %")
        ax.grid(alpha=0.3)
    for ax in np.ravel(axes)[-cols:]:
        ax.set_xlabel("arrived workload (% of GPU capacity)")
    np.ravel(axes)[0].legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    _save(fig, stem)
    plt.close(fig)


def _save(fig: Figure, stem: Path) -> None:
    """SVG and PNG with no date and fixed element ids, so unchanged data leaves the files'
    bytes (and the repository) unchanged."""
    with matplotlib.rc_context({"svg.hashsalt": "sluice-quality"}):
        fig.savefig(stem.with_suffix(".svg"), dpi=110, metadata={"Date": None})
    fig.savefig(stem.with_suffix(".png"), dpi=110)


LINGJUN_ROWS = (
    ("jobs finished", "finished", "{:.0f}"),
    ("average JCT (h)", "avg_jct", "h"),
    ("p95 JCT (h)", "p95_jct", "h"),
    ("average queueing delay (s)", "avg_wait", "{:.1f}"),
    ("p95 queueing delay (s)", "p95_wait", "{:.0f}"),
    ("GPU utilisation (% of capacity over the makespan)", "utilisation", "{:.1f}"),
    ("multi-node jobs", "multi_node", "{:.0f}"),
    ("... of which fit in one ToR (<= largest ToR)", "tor_fit", "{:.0f}"),
    ("% of those placed inside one ToR", "in_one_tor", "{:.1f}"),
    ("% of multi-node jobs inside one aggregation switch", "in_one_agg", "{:.1f}"),
    ("ToRs per multi-node job: mean", "tors_mean", "{:.2f}"),
    ("ToRs per multi-node job: p95", "tors_p95", "{:.0f}"),
    ("scheduler sessions run", "sessions", "{:.0f}"),
)


def _fmt(value: object, how: str) -> str:
    number = float(value)  # type: ignore[arg-type]
    if math.isnan(number):
        return "-"
    if how == "h":
        return f"{number / 3600:.2f}"
    if how == "min":
        return f"{number / 60:.1f}"
    return how.format(number)


def write_lingjun(results: Mapping[str, Mapping[str, object]], docs: Path) -> None:
    policies = list(results)
    lines = [
        "| metric | " + " | ".join(policies) + " |",
        "|---|" + "---|" * len(policies),
    ]
    for label, key, how in LINGJUN_ROWS:
        cells = [_fmt(results[p].get(key, float("nan")), how) for p in policies]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    replace_section(docs / "quality.md", "lingjun", "\n".join(lines))


PHILLY_COLUMNS = (
    "queue",
    "guaranteed GPUs",
    "jobs (finished)",
    "avg / p95 queueing delay (min)",
    "GPU-hours used",
    "borrowed share (% of its GPU-hours above guarantee)",
    "guarantee owed (h, % of span)",
    "preemptions (GPU-hours lost)",
)


def write_philly(results: Mapping[str, Mapping[str, object]], docs: Path) -> None:
    """One table per variant (the core's defaults, then with time-based fair share)."""
    parts = []
    for variant, entry in results.items():
        days = entry["window_days"]
        parts.append(
            f"**{variant}**: {entry['jobs']} jobs (days {days[0]:g}-{days[1]:g} of the trace, "  # type: ignore[index]
            f"split seed {entry['seed']}) on {entry['gpus']} GPUs; {entry['evictions']} "
            f"evictions; {entry['sessions']} sessions."
        )
        parts.append("")
        parts.append("| " + " | ".join(PHILLY_COLUMNS) + " |")
        parts.append("|" + "---|" * len(PHILLY_COLUMNS))
        for q in entry["queues"]:  # type: ignore[attr-defined]
            cells = [
                str(q["queue"]),
                f"{q['guarantee']}",
                f"{q['jobs']} ({q['finished']})",
                f"{_fmt(q['avg_wait'], 'min')} / {_fmt(q['p95_wait'], 'min')}",
                f"{float(q['gpu_hours']):.0f}",
                f"{float(q['borrowed_share']):.1f}",
                f"{float(q['owed_hours']):.1f} ({float(q['owed_share']):.1f}%)",
                f"{q['preemptions']} ({float(q['lost_gpu_hours']):.0f})",
            ]
            parts.append("| " + " | ".join(cells) + " |")
        parts.append("")
    replace_section(docs / "quality.md", "philly", "\n".join(parts))
