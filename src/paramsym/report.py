"""Writing what a run produced: metrics, series, figures, report.md, and the HTML index.

Layout of one run directory::

    RUN_DIR/config.json     what was run (experiment, preset, config, seeds, versions, machine)
    RUN_DIR/members/        one JSON per finished (grid point, seed), for resuming
    RUN_DIR/metrics.json    metrics and "claims": [{claim, source, expected, measured, holds}]
                            (holds: true, false, or null where the claim was not evaluated)
    RUN_DIR/<table>.csv     the series behind each figure
    RUN_DIR/<figure>.png    the figures, drawn with the seed's axes
    RUN_DIR/report.md       all of the above for a reader

``write_index(runs_root)`` writes ``runs_root/index.html`` (:mod:`paramsym.report_html`): the
claims of the latest run of every experiment, grouped by paper and chapter, beside its figures,
a static page that opens from disk without a server or network. Every file is written
atomically (a temporary file in the same directory, then a rename: :mod:`paramsym.run_files`).
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import matplotlib

matplotlib.use("Agg")  # figures are files; never open a window
import matplotlib.pyplot as plt

from paramsym.errors import ExperimentError
from paramsym.experiments.registry import ClaimTally, config_to_dict
from paramsym.report_html import write_index_page
from paramsym.run_files import atomic_write_bytes, atomic_write_text, format_value

if TYPE_CHECKING:
    from paramsym.experiments.registry import ClaimOutcome, Experiment, Result


def save_figure(figure: Any, path: Path) -> None:
    """Save a matplotlib figure as PNG atomically and close it."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=120, bbox_inches="tight")
    plt.close(figure)
    atomic_write_bytes(path, buffer.getvalue())


def _csv_text(table: Mapping[str, Sequence[Any]]) -> str:
    columns = list(table)
    lengths = {len(table[c]) for c in columns}
    if len(lengths) > 1:
        raise ExperimentError(
            f"series columns have different lengths: { {c: len(table[c]) for c in columns} }"
        )
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(columns)
    writer.writerows(zip(*(table[c] for c in columns), strict=True))
    return buffer.getvalue()


def write_run_outputs(
    directory: Path,
    experiment: Experiment,
    config: Any,
    preset: str,
    result: Result,
    outcomes: Sequence[ClaimOutcome],
    seeds: Sequence[int],
) -> None:
    """Write metrics.json, the CSV series, figures and report.md of one run (or grid point)."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, table in result.series.items():
        atomic_write_text(directory / f"{name}.csv", _csv_text(table))
    figures: list[str] = []
    if experiment.plot is not None:
        for filename, figure in experiment.plot(result).items():
            save_figure(figure, directory / filename)
            figures.append(filename)
    metrics = {
        "experiment": experiment.name,
        "seed_ref": experiment.seed_ref,
        "preset": preset,
        "seeds": list(seeds),
        "metrics": result.metrics,
        "claims": [o.to_dict() for o in outcomes],
        "figures": figures,
        "series": sorted(result.series),
        "notes": result.notes,
    }
    # metrics.json is written last: its presence marks a complete run.
    atomic_write_text(
        directory / "report.md",
        _report_markdown(experiment, config, preset, result, outcomes, seeds, figures),
    )
    atomic_write_text(directory / "metrics.json", json.dumps(metrics, indent=2, default=str))


MARKDOWN_VERDICTS = {True: "yes", False: "**no**", None: "*not evaluated*"}
"""How report.md shows ``ClaimOutcome.holds`` (None: the run could not evaluate the claim)."""


def _report_markdown(
    experiment: Experiment,
    config: Any,
    preset: str,
    result: Result,
    outcomes: Sequence[ClaimOutcome],
    seeds: Sequence[int],
    figures: Sequence[str],
) -> str:
    lines = [
        f"# {experiment.name}",
        "",
        f"{experiment.description}",
        "",
        f"Reproduces **{experiment.seed_ref}**; preset `{preset}`; seeds {list(seeds)}.",
        "",
        "## Claims",
        "",
        "| claim | source | expected | measured | holds |",
        "|---|---|---|---|---|",
    ]
    for o in outcomes:
        lines.append(
            f"| {o.claim} | {o.source} | {o.expected} | {format_value(o.measured)} "
            f"| {MARKDOWN_VERDICTS[o.holds]} |"
        )
    if not outcomes:
        lines.append("| (no claims) | | | | |")
    lines += ["", "## Figures", ""]
    lines += [f"![{name}]({name})" for name in figures] or ["(none)"]
    lines += ["", "## Metrics", "", "| metric | value |", "|---|---|"]
    lines += [f"| {k} | {format_value(v)} |" for k, v in result.metrics.items()]
    lines += [
        "",
        "## Configuration",
        "",
        "```json",
        json.dumps(config_to_dict(config), indent=2),
        "```",
    ]
    if result.notes:
        lines += ["", "## Notes", ""] + [f"- {n}" for n in result.notes]
    return "\n".join(lines) + "\n"


def write_sweep_summary(
    directory: Path, experiment: Experiment, point_directories: Sequence[Path]
) -> None:
    """``report.md`` of a grid sweep: one row per grid point with its claims."""
    lines = [
        f"# {experiment.name}: grid sweep",
        "",
        "| grid point | claims holding | report |",
        "|---|---|---|",
    ]
    for point in point_directories:
        metrics = json.loads((point / "metrics.json").read_text())
        tally = ClaimTally.of(c["holds"] for c in metrics["claims"])
        lines.append(f"| {point.name} | {tally} | [report]({point.name}/report.md) |")
    atomic_write_text(directory / "report.md", "\n".join(lines) + "\n")


def write_index(runs_root: Path, skipped: Mapping[str, str] | None = None) -> Path:
    """Write ``runs_root/index.html`` from the latest complete run of each experiment: claims
    grouped by paper and chapter beside the figures, with a filter for the failing claims (the
    page itself is built by :mod:`paramsym.report_html`).

    ``skipped`` maps experiment names to why they did not run (e.g. missing data files).
    """
    return write_index_page(runs_root, skipped)
