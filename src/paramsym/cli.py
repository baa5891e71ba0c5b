"""The ``paramsym`` command line: list, run, reproduce and report experiments.

Built on click, with rich for progress bars and tables. Bad input (an unknown experiment, a
malformed ``--set``, an unwritable ``--out``, missing data files) ends in a one-line error and
exit status 1, not a traceback.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib
import math
import os
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from paramsym import cli_display
from paramsym.cli_display import RichProgress, find_experiment, progress_for
from paramsym.errors import MissingDataError, ParamsymError
from paramsym.experiments import registry
from paramsym.report import write_index
from paramsym.sweep import (
    Backend,
    RunOutcome,
    local_pool,
    new_run_directory,
    rebuild_reports,
    run_experiment,
)

console = Console(stderr=True)
"""Messages and progress: on stderr, so that stdout holds only results (and ``--json``)."""

__all__ = ["RichProgress", "console", "main"]


@contextlib.contextmanager
def _one_line_errors() -> Iterator[None]:
    try:
        yield
    except ParamsymError as error:
        raise click.ClickException(
            str(error).splitlines()[0] if str(error) else type(error).__name__
        ) from None
    except PermissionError as error:
        raise click.ClickException(f"permission denied: {error.filename}") from None


VERDICTS = {True: "[green]yes[/]", False: "[red]no[/]", None: "[dim]not evaluated[/]"}
"""How the claims table shows ``ClaimOutcome.holds`` (None: the run could not evaluate it)."""


def _claims_table(outcome: RunOutcome) -> Table:
    table = Table(title=f"{outcome.experiment}: claims", show_lines=False)
    for column in ("claim", "source", "expected", "measured", "holds"):
        table.add_column(column, overflow="fold")
    for o in outcome.outcomes:
        measured = f"{o.measured:.4g}" if isinstance(o.measured, float) else str(o.measured)
        table.add_row(o.claim, o.source, o.expected, measured, VERDICTS[o.holds])
    return table


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="paramsym")
def main() -> None:
    """Parameter-space symmetries of neural networks: rerun the seeds' figures, check claims."""


_json_option = click.option(
    "--json", "as_json", is_flag=True, help="print machine-readable JSON on stdout"
)


@main.command("list")
@_json_option
def list_command(as_json: bool) -> None:
    """List the experiments by seed paper: figure, data, claims, quick-preset time."""
    experiments = registry.all_experiments()
    if as_json:
        times = cli_display.load_quick_times()
        click.echo(cli_display.dumps([cli_display.list_record(e, times) for e in experiments]))
        return
    cli_display.print_list(experiments, Console(highlight=False))


@main.command("show")
@click.argument("name")
@_json_option
def show_command(name: str, as_json: bool) -> None:
    """Show experiment NAME: description, presets with every setting, claims, data files."""
    with _one_line_errors():
        experiment = find_experiment(name)
    if as_json:
        times = cli_display.load_quick_times()
        click.echo(cli_display.dumps(cli_display.show_record(experiment, times)))
        return
    cli_display.print_show(experiment, Console(highlight=False))


def _prepare_out(out: Path | None, runs_dir: Path, name: str, resume: bool) -> Path:
    if out is not None:
        return out
    if resume:
        previous = sorted(p for p in (runs_dir / name).glob("*") if (p / "config.json").exists())
        unfinished = [p for p in previous if not (p / "metrics.json").exists()]
        if unfinished:
            return unfinished[-1]
    return new_run_directory(runs_dir, name)


@dataclasses.dataclass(frozen=True)
class RunOptions:
    """The options ``run`` and ``reproduce`` share (see :data:`_shared_options`)."""

    preset: str
    seeds: int
    backend: Backend
    address: str | None
    workers: int | None
    data_dir: Path | None
    runs_dir: Path


def _run_one(
    name: str,
    options: RunOptions,
    assignments: Sequence[str] = (),
    grid_items: Sequence[str] = (),
    out: Path | None = None,
    resume: bool = False,
    quiet: bool = False,
) -> RunOutcome:
    """Run experiment ``name`` as ``paramsym run`` does, with progress bars on the console
    (none when ``quiet``: a worker process of ``reproduce``)."""
    preset, seeds, data_dir = options.preset, options.seeds, options.data_dir
    experiment = find_experiment(name)
    overrides = registry.parse_assignments(assignments)
    if data_dir is not None and "data_dir" in {
        f.name for f in dataclasses.fields(experiment.config_type)
    }:
        overrides.setdefault("data_dir", str(data_dir))
    config = experiment.config(preset, overrides)
    grid = {
        k: [v for v in values.split(",") if v]
        for k, values in registry.parse_assignments(grid_items).items()
    }
    directory = _prepare_out(out, options.runs_dir, name, resume)
    display = (
        contextlib.nullcontext((registry.SilentProgress(), None))
        if quiet
        else progress_for(name, preset, seeds * _grid_size(grid), console)
    )
    with display as (progress, finished):
        return run_experiment(
            experiment,
            config,
            directory,
            preset=preset,
            seeds=seeds,
            grid=grid,
            backend=options.backend,
            workers=options.workers,
            address=options.address,
            progress=progress,
            on_finished=finished,
        )


def _grid_size(grid: dict[str, list[str]]) -> int:
    size = 1
    for values in grid.values():
        size *= len(values)
    return size


_shared_options = [
    click.option("--preset", default="quick", show_default=True, help="quick or paper"),
    click.option(
        "--seeds",
        default=1,
        show_default=True,
        type=click.IntRange(min=1),
        help="seeds seed … seed+N−1",
    ),
    click.option(
        "--backend", type=click.Choice(["local", "ray"]), default="local", show_default=True
    ),
    click.option(
        "--address", default=None, help="Ray cluster address (default: a local Ray instance)"
    ),
    click.option(
        "--workers",
        default=None,
        type=click.IntRange(min=1),
        help="local worker processes (default: CPUs)",
    ),
    click.option(
        "--data-dir",
        type=click.Path(path_type=Path),
        default=None,
        envvar="PARAMSYM_DATA",
        help="directory with data files (MNIST, CIFAR-10, UCI Energy); or PARAMSYM_DATA",
    ),
    click.option(
        "--runs-dir", type=click.Path(path_type=Path), default=Path("runs"), show_default=True
    ),
]


def _with_shared_options(command: Any) -> Any:
    """Add the shared options to ``command``, which receives them as one ``options`` argument."""

    @functools.wraps(command)
    def with_options(**kwargs: Any) -> Any:
        fields = [f.name for f in dataclasses.fields(RunOptions)]
        options = RunOptions(**{name: kwargs.pop(name) for name in fields})
        return command(options=options, **kwargs)

    for option in reversed(_shared_options):
        with_options = option(with_options)
    return with_options


@main.command("run")
@click.argument("name")
@click.option(
    "--set",
    "assignments",
    multiple=True,
    metavar="KEY=VALUE",
    help="override a config field (repeatable)",
)
@click.option(
    "--grid",
    "grid_items",
    multiple=True,
    metavar="KEY=V1,V2",
    help="sweep a config field over values (repeatable)",
)
@click.option(
    "--out", type=click.Path(path_type=Path), default=None, help="run directory (reused to resume)"
)
@click.option("--resume", is_flag=True, help="continue the latest unfinished run of NAME")
@_json_option
@_with_shared_options
def run_command(
    name: str,
    assignments: tuple[str, ...],
    grid_items: tuple[str, ...],
    out: Path | None,
    resume: bool,
    as_json: bool,
    options: RunOptions,
) -> None:
    """Run experiment NAME and write runs/NAME/TIMESTAMP/ (or --out)."""
    with _one_line_errors():
        outcome = _run_one(name, options, assignments, grid_items, out, resume)
    if as_json:
        click.echo(cli_display.dumps(cli_display.run_record(outcome, options.preset)))
    else:
        Console().print(_claims_table(outcome))
    console.print(
        f"wrote {outcome.directory} "
        f"({outcome.members_run} of {outcome.members_total} runs computed now)"
    )


@main.command("reproduce")
@click.option(
    "--only", "pattern", default=None, help="shell pattern of experiment names, e.g. 'q-*'"
)
@_with_shared_options
def reproduce_command(pattern: str | None, options: RunOptions) -> None:
    """Run every experiment (matching --only), then write runs/index.html.

    With the local backend the experiments run side by side on --workers processes (default:
    one per CPU; most experiments use one thread), the longest first (the measured quick
    times); one experiment, --workers 1 or --backend ray run them one after the other, with
    progress bars. An experiment whose data is missing is skipped; one that fails does not
    stop the others: the index lists what finished, then the command fails naming it."""
    with _one_line_errors():
        experiments = registry.all_experiments(pattern)
        if not experiments:
            raise click.ClickException(f"no experiment matches --only {pattern!r}")
        rows: dict[str, tuple[str, str, str]] = {}
        skipped: dict[str, str] = {}
        failed: dict[str, str] = {}

        def finished(name: str, outcome: tuple[str, float, str] | BaseException) -> None:
            if isinstance(outcome, MissingDataError):
                skipped[name] = str(outcome).splitlines()[0]
                rows[name] = ("[yellow]skipped: data missing[/]", "-", "-")
            elif isinstance(outcome, BaseException):
                failed[name] = _one_line(outcome)
                rows[name] = (f"[red]failed: {escape(failed[name])}[/]", "-", "-")
                if not isinstance(outcome, ParamsymError):  # a bug: its traceback, not one line
                    console.print("".join(traceback.format_exception(outcome)), markup=False)
            else:
                tally, seconds, directory = outcome
                rows[name] = (tally, f"{seconds:.1f}", directory)

        workers = options.workers or os.cpu_count() or 1
        if options.backend == "local" and workers > 1 and len(experiments) > 1:
            _reproduce_concurrently(experiments, options, workers, finished)
        else:
            for experiment in experiments:
                try:
                    outcome: tuple[str, float, str] | BaseException = _reproduce_one(
                        (experiment.name, experiment.module), options, quiet=False
                    )
                except ParamsymError as error:
                    outcome = error
                finished(experiment.name, outcome)
        index = write_index(options.runs_dir, skipped)
    summary = Table(title=f"paramsym reproduce ({options.preset})")
    for column in ("experiment", "claims holding", "seconds", "directory"):
        summary.add_column(column, overflow="fold")
    for experiment in experiments:
        summary.add_row(experiment.name, *rows[experiment.name])
    Console().print(summary)
    console.print(f"wrote {index} (open it in a browser)")
    if failed:
        name, message = next(iter(failed.items()))
        raise click.ClickException(
            f"{len(failed)} of {len(experiments)} experiments failed (first: {name}: {message}); "
            "the others' runs are saved and listed in the index"
        )


def _one_line(error: BaseException) -> str:
    """The first line of ``error``'s message; the exception's type before it unless it is a
    :class:`ParamsymError` (whose messages say what went wrong)."""
    lines = str(error).splitlines()
    if isinstance(error, ParamsymError) and lines:
        return lines[0]
    return f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__


def _reproduce_one(
    experiment: tuple[str, str], options: RunOptions, quiet: bool = True
) -> tuple[str, float, str]:
    """One experiment of ``reproduce`` (``(name, module)``; a worker process imports the
    module, which registers it): (claims tally, seconds, run directory)."""
    name, module = experiment
    importlib.import_module(module)
    start = time.perf_counter()
    outcome = _run_one(name, options, resume=True, quiet=quiet)
    tally = registry.ClaimTally.of(o.holds for o in outcome.outcomes)
    return str(tally), time.perf_counter() - start, str(outcome.directory)


def _reproduce_concurrently(
    experiments: Sequence[registry.Experiment],
    options: RunOptions,
    workers: int,
    finished: Callable[[str, Any], None],
) -> None:
    """``reproduce``'s experiments on ``workers`` processes, each experiment's seeds in its
    own process, the longest first so that the last to start are short; a line on the
    console as each ends."""
    times = cli_display.load_quick_times()
    order = sorted(experiments, key=lambda e: -times.get(e.name, math.inf))
    console.print(f"running {len(order)} experiments on {workers} worker processes")
    done = 0

    def report(experiment: tuple[str, str], outcome: Any) -> None:
        nonlocal done
        done += 1
        finished(experiment[0], outcome)
        state = outcome[0] if isinstance(outcome, tuple) else _one_line(outcome)
        console.print(f"[{done}/{len(order)}] {experiment[0]}: {state}", markup=False)

    local_pool(
        [(e.name, e.module) for e in order],
        functools.partial(_reproduce_one, options=dataclasses.replace(options, workers=1)),
        report,
        workers,
    )


@main.command("report")
@click.argument("run_dir", type=click.Path(path_type=Path, exists=True, file_okay=False))
def report_command(run_dir: Path) -> None:
    """Rewrite the report of RUN_DIR from its saved results (or index.html of a runs directory)."""
    with _one_line_errors():
        if (run_dir / "config.json").exists():
            outcome = rebuild_reports(run_dir)
            Console().print(_claims_table(outcome))
            console.print(f"wrote {run_dir / 'report.md'}")
        else:
            index = write_index(run_dir)
            console.print(f"wrote {index}")


if __name__ == "__main__":  # pragma: no cover
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
