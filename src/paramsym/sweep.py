"""Running experiments: seeds and grids as sweeps, in parallel, resumable.

A run of an experiment is a sweep over *members*, one per (grid point, seed). Each finished
member is written at once, atomically, to ``RUN_DIR/members/<key>.json``, so a killed sweep
loses no finished result and running it again (same ``--out``, or ``--resume``) skips every
member already there. Members run in-process (one member, or ``workers=1``), on local worker
processes (``backend="local"``, the default), or on Ray (``backend="ray"``: a local Ray
instance, or a cluster at ``address``). Results of a grid point are aggregated over its seeds
(:attr:`Experiment.aggregate`), the paper's claims are checked, and the outputs written by
:mod:`paramsym.report`.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import datetime
import importlib
import itertools
import json
import multiprocessing
import os
import platform
import re
import shutil
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch

from paramsym.errors import ExperimentError, MissingDataError
from paramsym.experiments import registry
from paramsym.experiments.registry import Experiment, Progress, Result, SilentProgress
from paramsym.report import atomic_write_text, write_run_outputs, write_sweep_summary

Backend = Literal["local", "ray"]


@dataclass(frozen=True)
class Member:
    """One unit of work: an experiment at one config (a grid point and a seed)."""

    key: str
    experiment: str
    module: str
    config: dict[str, Any]


def run_member(member: Member, progress: Progress | None = None) -> dict[str, Any]:
    """Run one member (in this process, a worker process, or a Ray task)."""
    importlib.import_module(member.module)  # registers the experiment in a fresh process
    experiment = registry.get(member.experiment)
    config = registry.config_from_dict(experiment, member.config)
    start = time.perf_counter()
    result = experiment.run(config, progress or SilentProgress())
    return {"result": result.to_dict(), "seconds": time.perf_counter() - start}


class ResultStore:
    """Finished members of one run: ``members/<key>.json``, written atomically."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def _path(self, key: str, suffix: str = ".json") -> Path:
        return self.directory / (re.sub(r"[^A-Za-z0-9_.=,-]", "_", key) + suffix)

    def has(self, key: str) -> bool:
        return self._path(key).exists()

    def load(self, key: str) -> Result:
        return Result.from_dict(json.loads(self._path(key).read_text())["result"])

    def save(self, key: str, record: Mapping[str, Any]) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        atomic_write_text(self._path(key), json.dumps(record, indent=1))
        self._path(key, ".error.txt").unlink(missing_ok=True)

    def save_error(self, key: str, message: str) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        atomic_write_text(self._path(key, ".error.txt"), message)


def _set_worker_threads(threads: int) -> None:
    torch.set_num_threads(threads)


def execute(
    members: Sequence[Member],
    store: ResultStore,
    *,
    backend: Backend = "local",
    workers: int | None = None,
    address: str | None = None,
    progress: Progress | None = None,
    on_finished: Callable[[Member], None] | None = None,
) -> list[str]:
    """Run the members ``store`` does not hold yet; return the keys run now.

    Every finished member is saved before the next is awaited. Members that raise are recorded
    (``<key>.error.txt``) and reported together in one :class:`ExperimentError` at the end,
    after the others finished.
    """
    progress = progress or SilentProgress()
    pending = [m for m in members if not store.has(m.key)]
    failures: dict[str, str] = {}

    def finish(member: Member, outcome: dict[str, Any] | BaseException) -> None:
        if isinstance(outcome, MissingDataError):
            raise outcome  # not a failed run: nothing can run until the files are there
        if isinstance(outcome, BaseException):
            text = "".join(traceback.format_exception(outcome)).strip()
            failures[member.key] = text.splitlines()[-1]
            store.save_error(member.key, text)
        else:
            store.save(member.key, {"member": dataclasses.asdict(member), **outcome})
        if on_finished is not None:
            on_finished(member)

    if backend == "ray":
        _execute_ray(pending, finish, address)
    elif backend != "local":
        raise ExperimentError(f"--backend must be 'local' or 'ray', got {backend!r}")
    elif len(pending) <= 1 or workers == 1:
        for member in pending:
            try:
                outcome: dict[str, Any] | Exception = run_member(member, progress)
            except Exception as error:
                outcome = error
            finish(member, outcome)
    else:
        local_pool(pending, run_member, finish, workers)
    if failures:
        first = next(iter(failures.items()))
        raise ExperimentError(
            f"{len(failures)} of {len(pending)} runs failed (first: {first[0]}: {first[1]}); "
            "finished runs are saved, rerun the same command to retry only the failed ones"
        )
    return [m.key for m in pending]


def local_pool(
    items: Sequence[Any],
    function: Callable[[Any], Any],
    finish: Callable[[Any, Any], None],
    workers: int | None,
) -> None:
    """``function(item)`` for every item on ``workers`` spawned processes (default: one per
    CPU; torch threads split between them), in the order given; ``finish(item, outcome)`` in
    this process as each ends, ``outcome`` its result or the exception it raised."""
    cpus = os.cpu_count() or 1
    count = max(1, min(len(items), workers or cpus))
    context = multiprocessing.get_context("spawn")  # torch is not fork-safe
    with concurrent.futures.ProcessPoolExecutor(
        count,
        mp_context=context,
        initializer=_set_worker_threads,
        initargs=(max(1, cpus // count),),
    ) as pool:
        futures = {pool.submit(function, item): item for item in items}
        for future in concurrent.futures.as_completed(futures):
            item = futures[future]
            error = future.exception()
            finish(item, error if error is not None else future.result())


def _execute_ray(
    pending: Sequence[Member], finish: Callable[[Member, Any], None], address: str | None
) -> None:
    try:
        import ray
    except ImportError:
        raise ExperimentError(
            "--backend ray needs Ray: pip install 'paramsym[ray]' (or 'ray')"
        ) from None
    started = not ray.is_initialized()
    if started:
        try:
            ray.init(address=address, include_dashboard=False, log_to_driver=False)
        except Exception as error:  # e.g. no cluster at the address
            raise ExperimentError(f"--backend ray: could not start or reach Ray: {error}") from None
    try:
        task = ray.remote(run_member)
        refs = {task.remote(m): m for m in pending}
        while refs:
            done, _ = ray.wait(list(refs), num_returns=1)
            for ref in done:
                member = refs.pop(ref)
                try:
                    outcome: dict[str, Any] | Exception = ray.get(ref)
                except Exception as error:
                    outcome = getattr(error, "cause", None) or error  # the task's own exception
                finish(member, outcome)
    finally:
        if started:
            ray.shutdown()


# -- a whole run --------------------------------------------------------------------------------


@dataclass
class RunOutcome:
    """Where a run was written and what its claims gave."""

    directory: Path
    experiment: str
    outcomes: list[registry.ClaimOutcome] = field(default_factory=list)
    grid_points: list[str] = field(default_factory=list)
    members_run: int = 0
    members_total: int = 0


def _grid_points(grid: Mapping[str, Sequence[str]]) -> list[dict[str, str]]:
    keys = sorted(grid)
    return [
        dict(zip(keys, values, strict=True))
        for values in itertools.product(*(grid[k] for k in keys))
    ]


def _point_key(point: Mapping[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(point.items()))


def _remove_if_empty(directory: Path) -> None:
    """Remove a run directory that holds nothing but its config (no member finished)."""
    members = directory / "members"
    if members.exists() and any(members.iterdir()):
        return
    if {p.name for p in directory.iterdir()} <= {"config.json", "members"}:
        shutil.rmtree(directory)


def _member_key(point_key: str, seed: int) -> str:
    return f"{point_key},seed={seed}" if point_key else f"seed={seed}"


def new_run_directory(runs_root: Path, name: str) -> Path:
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    directory = runs_root / name / stamp
    suffix = 1
    while directory.exists():
        suffix += 1
        directory = runs_root / name / f"{stamp}-{suffix}"
    return directory


def _run_metadata(
    experiment: Experiment,
    preset: str,
    config: Any,
    seeds: Sequence[int],
    grid: Mapping[str, Sequence[str]],
) -> dict[str, Any]:
    import paramsym

    return {
        "experiment": experiment.name,
        "seed_ref": experiment.seed_ref,
        "preset": preset,
        "config": registry.config_to_dict(config),
        "grid": {k: list(v) for k, v in sorted(grid.items())},
        "seeds": list(seeds),
        "paramsym": paramsym.__version__,
        "torch": torch.__version__,
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.system()}",
    }


def _check_resumable(directory: Path, metadata: Mapping[str, Any]) -> None:
    previous = json.loads((directory / "config.json").read_text())
    for key in ("experiment", "config", "grid"):
        if previous.get(key) != metadata[key]:
            raise ExperimentError(
                f"--out {directory}: it holds a run of a different {key} "
                f"({previous.get(key)!r}); choose a new --out to start a fresh run"
            )


def run_experiment(
    experiment: Experiment,
    config: Any,
    directory: Path,
    *,
    preset: str = "quick",
    seeds: int = 1,
    grid: Mapping[str, Sequence[str]] | None = None,
    backend: Backend = "local",
    workers: int | None = None,
    address: str | None = None,
    progress: Progress | None = None,
    on_finished: Callable[[Member], None] | None = None,
) -> RunOutcome:
    """Run ``experiment`` at ``config`` into ``directory`` (resuming if it holds the same run).

    ``seeds`` runs seeds ``config.seed … config.seed + seeds − 1``; ``grid`` maps config fields
    to lists of values (strings, parsed like ``--set``) whose product is swept, each grid point
    written to its own subdirectory with its own report.
    """
    if seeds < 1:
        raise ExperimentError(f"--seeds must be >= 1, got {seeds}")
    grid = dict(grid or {})
    seed_values = [int(config.seed) + i for i in range(seeds)]
    metadata = _run_metadata(experiment, preset, config, seed_values, grid)
    directory = Path(directory)
    try:
        if (directory / "config.json").exists():
            _check_resumable(directory, metadata)
        directory.mkdir(parents=True, exist_ok=True)
        atomic_write_text(directory / "config.json", json.dumps(metadata, indent=2))
    except OSError as error:
        raise ExperimentError(
            f"cannot write the run to {directory}: {error.strerror or error}"
        ) from None

    points = _grid_points(grid) if grid else [{}]
    configs = {_point_key(p): registry.apply_overrides(config, p, experiment.name) for p in points}
    by_point = {
        point_key: [
            Member(
                key=_member_key(point_key, seed),
                experiment=experiment.name,
                module=experiment.module,
                config=registry.config_to_dict(dataclasses.replace(point_config, seed=seed)),
            )
            for seed in seed_values
        ]
        for point_key, point_config in configs.items()
    }
    members = [m for point_members in by_point.values() for m in point_members]
    store = ResultStore(directory / "members")
    try:
        ran = execute(
            members,
            store,
            backend=backend,
            workers=workers,
            address=address,
            progress=progress,
            on_finished=on_finished,
        )
    except MissingDataError:
        _remove_if_empty(directory)
        raise
    outcome = RunOutcome(
        directory, experiment.name, members_run=len(ran), members_total=len(members)
    )
    for point_key, point_config in configs.items():
        results = [store.load(m.key) for m in by_point[point_key]]
        result = experiment.aggregate(results)
        outcomes = experiment.evaluate(result)
        target = directory / point_key if point_key else directory
        write_run_outputs(target, experiment, point_config, preset, result, outcomes, seed_values)
        if not point_key:
            outcome.outcomes = outcomes
        outcome.grid_points.append(point_key)
    if grid:
        write_sweep_summary(directory, experiment, [directory / k for k in configs])
    return outcome


def rebuild_reports(directory: Path) -> RunOutcome:
    """Rewrite the outputs of a run from its stored members (``paramsym report RUN_DIR``)."""
    directory = Path(directory)
    config_path = directory / "config.json"
    if not config_path.exists():
        raise ExperimentError(f"{directory} is not a run directory (no config.json)")
    metadata = json.loads(config_path.read_text())
    experiment = registry.get(metadata["experiment"])
    config = registry.config_from_dict(experiment, metadata["config"])
    store = ResultStore(directory / "members")
    points = _grid_points(metadata["grid"]) if metadata["grid"] else [{}]
    outcome = RunOutcome(directory, experiment.name)
    for point in points:
        point_key = _point_key(point)
        point_config = registry.apply_overrides(config, point, experiment.name)
        keys = [_member_key(point_key, s) for s in metadata["seeds"]]
        missing = [k for k in keys if not store.has(k)]
        if missing:
            raise ExperimentError(
                f"{directory}: runs {missing} have not finished; "
                f"rerun with --out {directory} to complete them"
            )
        result = experiment.aggregate([store.load(k) for k in keys])
        outcomes = experiment.evaluate(result)
        target = directory / point_key if point_key else directory
        write_run_outputs(
            target,
            experiment,
            point_config,
            metadata["preset"],
            result,
            outcomes,
            metadata["seeds"],
        )
        if not point_key:
            outcome.outcomes = outcomes
        outcome.grid_points.append(point_key)
    if metadata["grid"]:
        write_sweep_summary(directory, experiment, [directory / _point_key(p) for p in points])
    return outcome
