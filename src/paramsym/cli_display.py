"""What the ``paramsym`` command shows: the experiment listing, one experiment in full, JSON
records for ``--json``, and progress (rich bars on a terminal, plain log lines otherwise).

Kept apart from :mod:`paramsym.cli`, which holds the commands and their options.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import re
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import click
from rich.console import Console
from rich.padding import Padding
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from paramsym.data import DATASETS
from paramsym.errors import ExperimentError
from paramsym.experiments import registry
from paramsym.experiments.registry import Experiment
from paramsym.sweep import Member, RunOutcome

T = TypeVar("T")

LIST_MAX_WIDTH = 100
"""``paramsym list`` never prints lines longer than this, however wide the terminal."""

QUICK_TIMES_PATH = Path(__file__).parent / "experiments" / "quick_times.json"
"""Measured quick-preset times shipped with the package (see :func:`write_quick_times`)."""


# -- looking experiments up ---------------------------------------------------------------------


def find_experiment(name: str) -> Experiment:
    """The experiment ``name``; an unknown name raises a one-line :class:`ExperimentError` that
    names the close matches (or points to ``paramsym list``)."""
    try:
        return registry.get(name)
    except ExperimentError:
        close = registry.close_matches(name)
        hint = f"did you mean {', '.join(close)}?" if close else "`paramsym list` shows them all"
        raise ExperimentError(f"unknown experiment '{name}'; {hint}") from None


# -- quick-preset times -------------------------------------------------------------------------


def measure_quick_times(runs_dirs: Iterable[Path]) -> dict[str, float]:
    """Seconds one seed of each experiment's quick preset took, read from finished runs.

    Looks at ``RUNS/NAME/STAMP/`` and ``RUNS/NAME/`` run directories whose ``config.json`` says
    preset ``quick`` and no grid, and averages the ``seconds`` of their ``members/*.json``;
    the latest run (by directory name) of each experiment wins. Nothing is run.
    """
    found: dict[str, tuple[str, float]] = {}
    for runs in runs_dirs:
        for config_path in [*Path(runs).glob("*/*/config.json"), *Path(runs).glob("*/config.json")]:
            try:
                config = json.loads(config_path.read_text())
                seconds = [
                    float(json.loads(m.read_text())["seconds"])
                    for m in (config_path.parent / "members").glob("*.json")
                ]
            except (OSError, ValueError, KeyError, TypeError):
                continue
            if config.get("preset") != "quick" or config.get("grid") or not seconds:
                continue
            name, stamp = str(config.get("experiment")), config_path.parent.name
            if name not in found or stamp > found[name][0]:
                found[name] = (stamp, sum(seconds) / len(seconds))
    return {name: round(seconds, 1) for name, (_, seconds) in sorted(found.items())}


def write_quick_times(
    runs_dirs: Iterable[Path], path: Path = QUICK_TIMES_PATH, machine: str | None = None
) -> dict[str, float]:
    """Merge :func:`measure_quick_times` of ``runs_dirs`` into the JSON at ``path`` (entries
    not measured again are kept), noting ``machine`` if given; return the merged
    ``{experiment: seconds}``. Nothing is run: run ``paramsym reproduce`` first."""
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        record = {}
    times = {**load_quick_times(path), **measure_quick_times(runs_dirs)}
    record = {
        "about": "seconds one seed of the quick preset took (mean of members/*.json of the "
        "latest quick run); rewrite with paramsym.cli_display.write_quick_times(['runs'])",
        "machine": machine or record.get("machine"),
        "seconds": dict(sorted(times.items())),
    }
    path.write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n")
    return times


def load_quick_times(path: Path = QUICK_TIMES_PATH) -> dict[str, float]:
    """The shipped ``{experiment: seconds}`` (empty when the file is missing or unreadable)."""
    try:
        return {str(k): float(v) for k, v in json.loads(path.read_text())["seconds"].items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}


def format_seconds(seconds: float | None) -> str:
    """``4.1 s``, ``46 s``, ``2.5 min``, or ``-`` when not measured."""
    if seconds is None:
        return "-"
    if seconds < 10:
        return f"{seconds:.1f} s"
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.1f} min"


# -- paramsym list ------------------------------------------------------------------------------


def short_data(data: str) -> str:
    """``Experiment.data`` without parentheses and ``--data-dir`` details, e.g. ``"digits
    (quick); MNIST IDX files in --data-dir (paper)"`` → ``"digits, MNIST"``."""
    text = re.sub(r"\s*\([^)]*\)", "", data)
    parts = [
        re.sub(r"\s+(IDX files|python batches|files)?\s*in --data-dir.*$", "", part.strip())
        for part in text.split(";")
    ]
    return ", ".join(part for part in parts if part) or data


def _fit(text: str, width: int) -> str:
    """``text`` padded or cut (with an ellipsis) to exactly ``width`` characters."""
    if width <= 0:
        return ""
    return text.ljust(width) if len(text) <= width else text[: width - 1] + "…"


def paper_heading(paper: str) -> str:
    """``"seed 001 — Zhao, Symmetry in Neural Networks (dissertation)"``, or ``"other"``."""
    title = registry.SEED_TITLES.get(paper)
    return f"{paper} — {title}" if title else paper


def list_lines(
    experiments: Sequence[Experiment], width: int, times: Mapping[str, float]
) -> list[tuple[str, str]]:
    """The lines of ``paramsym list`` as ``(style, text)``, none longer than ``width`` (at
    most :data:`LIST_MAX_WIDTH`): a summary, a header, then one line per experiment under a
    heading per seed paper."""
    width = max(40, min(width, LIST_MAX_WIDTH))
    groups = registry.by_paper(experiments)
    name_w = min(max((len(e.name) for e in experiments), default=4), width * 2 // 5)
    claims_w, time_w = 6, 6
    rest = width - 2 - name_w - claims_w - time_w - 4
    data_w = max(6, min(22, rest * 2 // 5))
    ref_w = rest - data_w

    def row(name: str, ref: str, data: str, claims: str, quick: str) -> str:
        cells = [_fit(name, name_w), _fit(ref, ref_w), _fit(data, data_w)]
        line = "  " + " ".join(cells) + " " + claims.rjust(claims_w) + " " + quick.rjust(time_w)
        return _fit(line.rstrip(), width).rstrip()

    summary = (
        f"{len(experiments)} experiments · quick: time of one seed, quick preset · "
        "paramsym show NAME"
    )
    lines = [("bold", _fit(summary, width).rstrip())]
    lines.append(("dim", row("name", "figure / table", "data", "claims", "quick")))
    for paper, members in groups.items():  # no blank lines: the headings separate the groups
        lines.append(("bold cyan", _fit(paper_heading(paper), width).rstrip()))
        for e in members:
            quick = format_seconds(times.get(e.name))
            line = row(
                e.name, registry.reference_of(e), short_data(e.data), str(len(e.claims)), quick
            )
            lines.append(("", line))
    return lines


def print_list(experiments: Sequence[Experiment], out: Console) -> None:
    """Print ``paramsym list`` on ``out``, at most ``out.width`` (and 100) columns."""
    for style, line in list_lines(experiments, out.width, load_quick_times()):
        out.print(Text(line, style=style), soft_wrap=True)


# -- JSON records -------------------------------------------------------------------------------


def plain_json(value: Any) -> Any:
    """``value`` as strict JSON data: non-finite floats become ``None``, tuples lists, and
    anything else not JSON its ``str``."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, Mapping):
        return {str(k): plain_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain_json(v) for v in value]
    return str(value)


def dumps(value: Any) -> str:
    """Indented strict JSON (no NaN), for ``--json``."""
    return json.dumps(plain_json(value), indent=2, ensure_ascii=False, allow_nan=False)


def list_record(experiment: Experiment, times: Mapping[str, float]) -> dict[str, Any]:
    """One entry of ``paramsym list --json``."""
    paper = registry.paper_of(experiment)
    return {
        "name": experiment.name,
        "paper": paper,
        "paper_title": registry.SEED_TITLES.get(paper),
        "seed_ref": experiment.seed_ref,
        "reference": registry.reference_of(experiment),
        "data": experiment.data,
        "claims": len(experiment.claims),
        "presets": sorted(experiment.presets),
        "quick_seconds": times.get(experiment.name),
    }


def data_files(experiment: Experiment) -> list[dict[str, Any]]:
    """The data sets with files that ``experiment`` reads: ``{"dataset", "presets", "files"}``
    from the presets' ``dataset`` fields (and UCI Energy, named only in ``Experiment.data``)."""
    presets: dict[str, list[str]] = {}
    for preset, config in experiment.presets.items():
        dataset = getattr(config, "dataset", None)
        if isinstance(dataset, str):
            presets.setdefault(dataset, []).append(preset)
    if "UCI Energy" in experiment.data:
        presets.setdefault("uci_energy", sorted(experiment.presets))
    return [
        {"dataset": name, "presets": names, "files": DATASETS[name].files}
        for name, names in presets.items()
        if name in DATASETS and DATASETS[name].files
    ]


def show_record(experiment: Experiment, times: Mapping[str, float]) -> dict[str, Any]:
    """``paramsym show NAME --json``: the list entry with the description, every preset's
    config, the claims and the data files."""
    return {
        **list_record(experiment, times),
        "description": experiment.description,
        "presets": {
            name: registry.config_to_dict(config) for name, config in experiment.presets.items()
        },
        "claims": [
            {"text": c.text, "source": c.source, "expected": c.expected} for c in experiment.claims
        ],
        "data_files": data_files(experiment),
    }


def run_record(outcome: RunOutcome, preset: str) -> dict[str, Any]:
    """``paramsym run --json``: the run directory, the claim outcomes and their tally, and the
    run's scalar metrics (lists of at most 10 numbers kept, longer series left out)."""
    metrics: dict[str, Any] = {}
    try:
        saved = json.loads((outcome.directory / "metrics.json").read_text()).get("metrics", {})
    except (OSError, ValueError):
        saved = {}
    for key, value in saved.items():
        if not isinstance(value, (list, dict)) or (
            isinstance(value, list)
            and len(value) <= 10
            and not any(isinstance(v, (list, dict)) for v in value)
        ):
            metrics[key] = value
    tally = registry.ClaimTally.of(o.holds for o in outcome.outcomes)
    return {
        "experiment": outcome.experiment,
        "preset": preset,
        "directory": str(outcome.directory),
        "members_run": outcome.members_run,
        "members_total": outcome.members_total,
        "grid_points": [p for p in outcome.grid_points if p],
        "claims": [o.to_dict() for o in outcome.outcomes],
        "claims_summary": {**dataclasses.asdict(tally), "total": tally.total},
        "metrics": metrics,
    }


# -- paramsym show ------------------------------------------------------------------------------


def _value(value: Any) -> str:
    """A config value as one types it after ``--set key=``."""
    if isinstance(value, str):
        return value if value else '""'
    return str(value)


def print_show(experiment: Experiment, out: Console) -> None:
    """Print ``paramsym show NAME``: header, description, presets, claims and data files."""
    paper = registry.paper_of(experiment)
    quick = load_quick_times().get(experiment.name)
    out.print(Text(experiment.name, style="bold"))
    out.print(Text(f"reproduces: {experiment.seed_ref}"))
    out.print(Text(f"paper: {paper_heading(paper)}"))
    out.print(Text(f"data: {experiment.data}"))
    if quick is not None:
        out.print(Text(f"quick preset: about {format_seconds(quick)} per seed (measured)"))
    out.print()
    out.print(Text(experiment.description))
    out.print()
    out.print(Text("presets (paramsym run NAME --preset P --set FIELD=VALUE)", style="bold"))
    table = Table()
    table.add_column("field", no_wrap=True)
    for preset in experiment.presets:
        table.add_column(preset, overflow="fold")
    for field in dataclasses.fields(experiment.config_type):
        values = [getattr(c, field.name) for c in experiment.presets.values()]
        cells = [Text(_value(v)) for v in values]
        table.add_row(
            Text(field.name, style="bold" if len(set(map(repr, values))) > 1 else ""), *cells
        )
    out.print(table)
    out.print()
    out.print(Text(f"claims ({len(experiment.claims)})", style="bold"))
    for number, claim in enumerate(experiment.claims, start=1):
        out.print(Text(f"{number}. {claim.text}"))
        detail = Text(f"source: {claim.source}; expected: {claim.expected}", style="dim")
        out.print(Padding(detail, (0, 0, 0, 3), expand=False))
    out.print()
    files = data_files(experiment)
    out.print(Text("data files" if files else "data files: none needed", style="bold"))
    for entry in files:
        presets = ", ".join(entry["presets"])
        out.print(
            Padding(
                Text(f"{entry['dataset']} ({presets}): {entry['files']}"),
                (0, 0, 0, 3),
                expand=False,
            )
        )


# -- progress -----------------------------------------------------------------------------------


class RichProgress:
    """:class:`~paramsym.experiments.registry.Progress` shown as rich progress bars."""

    def __init__(self, progress: Progress) -> None:
        self.progress = progress

    def track(
        self, items: Iterable[T], total: int | None = None, description: str = ""
    ) -> Iterator[T]:
        """Iterate over ``items``, advancing a bar that disappears when they are done."""
        if total is None and hasattr(items, "__len__"):
            total = len(items)  # type: ignore[arg-type]
        task = self.progress.add_task(description or "working", total=total)
        try:
            for item in items:
                yield item
                self.progress.advance(task)
        finally:
            self.progress.remove_task(task)

    def log(self, message: str) -> None:
        """Print ``message`` above the bars."""
        self.progress.console.print(message)


class PlainProgress:
    """:class:`~paramsym.experiments.registry.Progress` as plain one-line log records
    ``experiment: step [elapsed]``, for pipes, files and CI logs: no redraws, no blank lines.

    A loop is reported at most every ``interval`` seconds; :meth:`log` messages always are.
    """

    def __init__(
        self,
        experiment: str,
        write: Callable[[str], None],
        interval: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.experiment = experiment
        self.write = write
        self.interval = interval
        self.clock = clock
        self.start = clock()
        self.last = self.start

    def record(self, step: str) -> None:
        """Write one record: ``experiment: step [12.3 s]``, the step on one line."""
        step = " ".join(step.split())
        if step:
            self.write(f"{self.experiment}: {step} [{self.clock() - self.start:.1f} s]")
            self.last = self.clock()

    def track(
        self, items: Iterable[T], total: int | None = None, description: str = ""
    ) -> Iterator[T]:
        """Iterate over ``items``, recording ``description i/total`` now and then."""
        if total is None and hasattr(items, "__len__"):
            total = len(items)  # type: ignore[arg-type]
        for count, item in enumerate(items, start=1):
            yield item
            if self.clock() - self.last >= self.interval:
                self.record(f"{description or 'working'} {count}/{total if total else '?'}")

    def log(self, message: str) -> None:
        """Record ``message`` (joined onto one line)."""
        self.record(message)


@contextlib.contextmanager
def progress_for(
    name: str, preset: str, total: int, console: Console
) -> Iterator[tuple[registry.Progress, Callable[[Member], None]]]:
    """A :class:`Progress` for running ``total`` members of ``name``, and the callback to call
    when one finishes: rich bars when ``console`` is a terminal, :class:`PlainProgress` log
    records (on stderr) otherwise."""
    if console.is_terminal:
        with Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
            transient=True,
        ) as bars:
            members = bars.add_task(f"{name} ({preset})", total=total)
            yield RichProgress(bars), lambda member: bars.advance(members)
        return
    plain = PlainProgress(name, lambda line: click.echo(line, err=True))
    done = 0

    def finished(member: Member) -> None:
        nonlocal done
        done += 1
        plain.record(f"{preset} run {done}/{total} finished, {member.key}")

    yield plain, finished
