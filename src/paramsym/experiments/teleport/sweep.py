"""``teleport-sweep`` (seed 001, dissertation Fig 4.7).

Wall-clock (and step) speedup to |L_t − L_{t+1}| < 1e-3 of the ``teleport-regression`` teleport
over a grid of teleport learning rates and ascent steps.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import matplotlib.pyplot as plt

from paramsym.core.tables import append_row, empty_table, table_rows
from paramsym.errors import InvalidArgumentError
from paramsym.experiments.registry import Claim, Progress, Result, experiment
from paramsym.experiments.teleport.convergence import (
    LABELS,
    OPTIMIZERS,
    OptimizerName,
    _mean_std,
)
from paramsym.experiments.teleport.regression_training import (
    RegressionSetup,
    TrainingRun,
    _setup_notes,
    speedup,
    warm_up,
)

# == teleport-sweep (Fig 4.7) ======================================================================


@dataclass(frozen=True)
class SweepConfig(RegressionSetup):
    """Settings of ``teleport-sweep`` (Fig 4.7): :class:`RegressionSetup` and

    Attributes:
        teleport_lrs, teleport_steps: the grid (1e-9 … 1e-5 × 1, 2, 4, …, 32).
        optimizers: ``"gd"`` and/or ``"adagrad"``.
        max_steps: a training that has not converged by then counts as not converged (2000).
    """

    teleport_lrs: tuple[float, ...] = (1e-9, 1e-8, 1e-7, 1e-6, 1e-5)
    teleport_steps: tuple[int, ...] = (1, 2, 4, 8, 16, 32)
    optimizers: tuple[str, ...] = OPTIMIZERS
    max_steps: int = 2000


def _status(baseline: TrainingRun, teleported: TrainingRun) -> str:
    if baseline.diverged or baseline.converged_step is None:
        return "baseline_failed"
    if teleported.diverged:
        return "diverged"
    return "no_convergence" if teleported.converged_step is None else "converged"


def _sweep_rows(config: SweepConfig, progress: Progress) -> dict[str, list[Any]]:
    """One row per (optimizer, teleport lr, ascent steps, run): the two trainings to
    convergence, measured back to back."""
    rows = empty_table(
        "optimizer teleport_lr teleport_steps run status steps_to_convergence "
        "steps_to_convergence_teleport seconds_to_convergence seconds_to_convergence_teleport "
        "teleport_seconds speedup_wall speedup_steps"
    )
    grid = [
        (o, lr, n, r)
        for o in config.optimizers
        for lr in config.teleport_lrs
        for n in config.teleport_steps
        for r in range(config.runs)
    ]
    for optimizer, lr, n, r in progress.track(grid, total=len(grid), description="grid"):
        name: OptimizerName = "gd" if optimizer == "gd" else "adagrad"
        base = config.train(r, name, config.max_steps, None, stop_at_convergence=True)
        tele = config.train(
            r, name, config.max_steps, config.teleport(n, lr), stop_at_convergence=True
        )
        wall, steps = speedup(base, tele)
        values = (
            optimizer,
            lr,
            n,
            r,
            _status(base, tele),
            base.converged_step,
            tele.converged_step,
            base.time_to_convergence,
            tele.time_to_convergence,
            tele.teleport_seconds,
            wall,
            steps,
        )
        append_row(rows, *values)
    return rows


def _grid_points(rows: dict[str, list[Any]], config: SweepConfig) -> dict[str, list[Any]]:
    """Per grid point: mean speedups over runs; omitted (NaN) unless every run converged."""
    points = empty_table(
        "optimizer teleport_lr teleport_steps converged_runs speedup_wall speedup_wall_std "
        "speedup_steps"
    )
    for optimizer in config.optimizers:
        for lr in config.teleport_lrs:
            for n in config.teleport_steps:
                one = table_rows(rows, optimizer=optimizer, teleport_lr=lr, teleport_steps=n)
                converged = sum(s == "converged" for s in one["status"])
                complete = converged == len(one["status"])
                wall = _mean_std(one["speedup_wall"]) if complete else (math.nan, math.nan)
                steps = _mean_std(one["speedup_steps"])[0] if complete else math.nan
                append_row(points, optimizer, lr, n, converged, wall[0], wall[1], steps)
    return points


def _sweep_metrics(points: dict[str, list[Any]], optimizer: str) -> dict[str, Any]:
    one = table_rows(points, optimizer=optimizer)
    wall = [v for v in one["speedup_wall"] if math.isfinite(v)]
    steps = [v for v in one["speedup_steps"] if math.isfinite(v)]
    best = max(
        (i for i in range(len(one["speedup_wall"])) if math.isfinite(one["speedup_wall"][i])),
        key=lambda i: one["speedup_wall"][i],
        default=None,
    )
    return {
        f"{optimizer}_points": len(one["speedup_wall"]),
        f"{optimizer}_points_converged": len(wall),
        f"{optimizer}_points_faster_wall": sum(v > 1 for v in wall),
        f"{optimizer}_points_faster_steps": sum(v > 1 for v in steps),
        f"{optimizer}_median_speedup_wall": statistics.median(wall) if wall else math.nan,
        f"{optimizer}_median_speedup_steps": statistics.median(steps) if steps else math.nan,
        f"{optimizer}_best_speedup_wall": one["speedup_wall"][best] if best is not None else None,
        f"{optimizer}_best_point": (
            [one["teleport_lr"][best], one["teleport_steps"][best]] if best is not None else None
        ),
    }


def run_sweep(config: SweepConfig, progress: Progress) -> Result:
    """Fig 4.7: speedup to convergence of one teleport at epoch 5 over the (lr, steps) grid."""
    unknown = set(config.optimizers) - set(OPTIMIZERS)
    if unknown:
        raise InvalidArgumentError(
            f"teleport-sweep: optimizers must be among {OPTIMIZERS}, got {sorted(unknown)}"
        )
    warm_up(config.problem(0))
    rows = _sweep_rows(config, progress)
    points = _grid_points(rows, config)
    metrics: dict[str, Any] = {"runs": config.runs, "max_steps": config.max_steps}
    for optimizer in config.optimizers:
        metrics.update(_sweep_metrics(points, optimizer))
    notes = [
        *_setup_notes(config),
        "speedup = t_opt / t_opt+teleport to the first |L_{t−1} − L_t| < "
        f"{config.tol:g}, wall-clock (the paper) and in optimizer steps; a grid point is "
        f"omitted unless all {config.runs} runs converged within {config.max_steps} steps "
        "without diverging",
    ]
    return Result(metrics, {"runs": rows, "points": points}, notes)


def _speedup_panels(result: Result, key: str, what: str) -> Any:
    """Fig 4.7 layout: for each optimizer, speedup vs teleport lr (one line per number of
    ascent steps) and vs ascent steps (one line per lr), dashed at speedup = 1."""
    points = result.series["points"]
    optimizers = list(dict.fromkeys(points["optimizer"]))
    figure, grid = plt.subplots(
        1, 2 * len(optimizers), figsize=(5.2 * 2 * len(optimizers), 4.2), squeeze=False
    )
    letters = "abcd"
    for i, optimizer in enumerate(optimizers):
        one = table_rows(points, optimizer=optimizer)
        by_lr, by_steps = grid[0][2 * i], grid[0][2 * i + 1]
        for n in sorted(set(one["teleport_steps"])):
            line = table_rows(one, teleport_steps=n)
            by_lr.plot(line["teleport_lr"], line[key], "-o", markersize=4, label=f"steps = {n}")
        for lr in sorted(set(one["teleport_lr"])):
            line = table_rows(one, teleport_lr=lr)
            by_steps.plot(
                line["teleport_steps"], line[key], "-o", markersize=4, label=f"lr = {lr:g}"
            )
        by_lr.set_xscale("log")
        by_steps.set_xscale("log", base=2)
        by_lr.set_xlabel("teleport learning rate")
        by_steps.set_xlabel("teleport steps")
        for j, axis in enumerate((by_lr, by_steps)):
            axis.axhline(1.0, color="k", linestyle="--", linewidth=1)
            axis.set_ylabel(f"speedup ({what})")
            axis.set_title(f"({letters[2 * i + j]}) {LABELS[optimizer]}")
            axis.legend(fontsize=7)
    figure.suptitle(
        f"speedup to |ΔL| < 1e-3 from one teleport at epoch 5, {what} (dissertation Fig 4.7); "
        "missing points: not converged or diverged"
    )
    figure.tight_layout()
    return figure


def plot_sweep(result: Result) -> dict[str, Any]:
    return {
        "speedup_wall.png": _speedup_panels(result, "speedup_wall", "wall-clock"),
        "speedup_steps.png": _speedup_panels(result, "speedup_steps", "steps"),
    }


def _check_sweep(key: str) -> Callable[[Result], tuple[str, bool]]:
    def check(result: Result) -> tuple[str, bool]:
        m = result.metrics
        parts, holds = [], True
        for optimizer in OPTIMIZERS:
            if f"{optimizer}_points" not in m:
                continue
            faster, converged = (
                m[f"{optimizer}_points_faster_{key}"],
                m[f"{optimizer}_points_converged"],
            )
            parts.append(
                f"{LABELS[optimizer]}: {faster}/{converged} converged points > 1 (of "
                f"{m[f'{optimizer}_points']}; median {m[f'{optimizer}_median_speedup_{key}']:.2f})"
            )
            holds = holds and converged > 0 and faster > converged / 2
        return "; ".join(parts), holds

    return check


experiment(
    "teleport-sweep",
    seed_ref="seed 001, dissertation Fig 4.7 (§4.6.3)",
    description=(
        "speedup t_opt / t_opt+teleport to convergence (|L_t − L_{t+1}| < 1e-3, at most 2000 "
        "steps) of one teleport at epoch 5 on the Fig 4.5 regression, over teleport lr "
        "1e-9 … 1e-5 × 1 … 32 ascent steps, for GD (lr 1e-4) and AdaGrad (lr 1e-1); "
        "wall-clock (the paper) and in steps. Chosen here: as teleport-regression, with and "
        "without teleport timed back to back on one torch thread"
    ),
    quick=SweepConfig(runs=2, teleport_lrs=(1e-8, 1e-7, 1e-6), teleport_steps=(1, 4, 16)),
    paper=SweepConfig(),
    claims=[
        Claim(
            "most teleport hyperparameters speed up convergence in wall-clock time",
            "seed 001, Fig 4.7, §4.6.3",
            "speedup > 1 at most converged grid points, GD and AdaGrad",
            _check_sweep("wall"),
        ),
        Claim(
            "the same, counted in optimizer steps to convergence (derived; less noisy)",
            "seed 001, Fig 4.7 (restated in steps)",
            "speedup > 1 at most converged grid points, GD and AdaGrad",
            _check_sweep("steps"),
        ),
    ],
    plot=plot_sweep,
)(run_sweep)
