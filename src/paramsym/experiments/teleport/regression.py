"""``teleport-regression`` (seed 001, dissertation Fig 4.5).

A 3-layer LeakyReLU(0.1) regression trained by GD and AdaGrad, teleported once at epoch 5 along
the data-dependent GL actions of every layer pair (the training loop is in
:mod:`~paramsym.experiments.teleport.regression_training`).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import matplotlib.pyplot as plt
import numpy as np

from paramsym.core.tables import table_rows
from paramsym.experiments.registry import Claim, Progress, Result, experiment
from paramsym.experiments.teleport.convergence import (
    COLOURS,
    LABELS,
    OPTIMIZERS,
    _mean_std,
    compare_at_equal_loss,
)
from paramsym.experiments.teleport.regression_training import (
    RegressionSetup,
    RegressionTeleport,
    TrainingRun,
    _setup_notes,
    warm_up,
)


@dataclass(frozen=True)
class RegressionConfig(RegressionSetup):
    """Settings of ``teleport-regression`` (Fig 4.5): :class:`RegressionSetup` and

    Attributes:
        steps: optimizer steps (300).
        gd_teleport_steps, gd_teleport_lr: GD's ascent (8 steps, lr 1e-7).
        adagrad_teleport_steps, adagrad_teleport_lr: AdaGrad's ascent (2 steps, lr 1e-5).
    """

    steps: int = 300
    gd_teleport_steps: int = 8
    gd_teleport_lr: float = 1e-7
    adagrad_teleport_steps: int = 2
    adagrad_teleport_lr: float = 1e-5

    def plan(self, optimizer: str) -> RegressionTeleport:
        if optimizer == "gd":
            return self.teleport(self.gd_teleport_steps, self.gd_teleport_lr)
        return self.teleport(self.adagrad_teleport_steps, self.adagrad_teleport_lr)


def loss_at_time(run: TrainingRun, when: float) -> float:
    """The loss of the last step finished by ``when`` seconds (the first loss before that)."""
    index = int(np.searchsorted(np.asarray(run.seconds), when, side="right")) - 1
    return run.losses[max(index, 0)]


def _curve_table(runs: dict[tuple[str, bool], list[TrainingRun]]) -> dict[str, list[Any]]:
    table: dict[str, list[Any]] = {
        k: [] for k in ("optimizer", "teleport", "run", "step", "loss", "dL_dt", "seconds")
    }
    for (optimizer, teleported), trainings in runs.items():
        for r, training in enumerate(trainings):
            n = len(training.losses)
            table["optimizer"] += [optimizer] * n
            table["teleport"] += [teleported] * n
            table["run"] += [r] * n
            table["step"] += list(range(n))
            table["loss"] += training.losses
            table["dL_dt"] += training.rates
            table["seconds"] += training.seconds
    return table


def _mean_curve(trainings: Sequence[TrainingRun], key: str = "losses") -> np.ndarray:
    """Mean over runs of a per-step list (runs that stopped early are padded with NaN)."""
    length = max(len(getattr(t, key)) for t in trainings)
    rows = [getattr(t, key) + [math.nan] * (length - len(getattr(t, key))) for t in trainings]
    return np.nanmean(np.asarray(rows, dtype=float), axis=0)


def _compare_in_time(
    baseline: Sequence[TrainingRun], teleported: Sequence[TrainingRun], at: int, points: int = 50
) -> dict[str, Any]:
    """Mean loss over runs at equal wall-clock times (Fig 4.5b), from the end of the teleport
    step to the end of the shorter training."""
    end = min(
        statistics.median(t.seconds[-1] for t in baseline),
        statistics.median(t.seconds[-1] for t in teleported),
    )
    start = statistics.median(t.seconds[min(at, len(t.seconds) - 1)] for t in teleported)

    def mean_loss(trainings: Sequence[TrainingRun], when: float) -> float:
        return statistics.fmean(loss_at_time(t, when) for t in trainings)

    grid = np.linspace(start, end, points).tolist() if start < end else []
    lower = [mean_loss(teleported, g) < mean_loss(baseline, g) for g in grid]
    return {
        "time_compared_until": end,
        "time_teleport_done": start,
        "loss_at_end_time": mean_loss(baseline, end),
        "loss_at_end_time_teleport": mean_loss(teleported, end),
        "time_fraction_lower": sum(lower) / len(lower) if lower else math.nan,
    }


def _regression_metrics(
    optimizer: str, baseline: list[TrainingRun], teleported: list[TrainingRun], at: int
) -> dict[str, Any]:
    base_curve, tele_curve = _mean_curve(baseline), _mean_curve(teleported)
    after = range(at, min(len(base_curve), len(tele_curve)))
    final = [
        _mean_std([t.losses[-1] if not t.diverged else math.nan for t in runs])
        for runs in (baseline, teleported)
    ]
    gains = [
        (t.teleport["grad_norm_after"] / t.teleport["grad_norm_before"]) ** 2
        for t in teleported
        if t.teleport
    ]
    step_seconds = statistics.median(t.step_seconds for t in baseline)
    teleport_seconds = statistics.median(t.teleport_seconds for t in teleported)
    first = teleported[0]
    equal = compare_at_equal_loss(
        (baseline[0].losses, baseline[0].rates),
        (first.losses, first.rates),
        below=first.losses[min(at, len(first.losses) - 1)],
    )
    timing = _compare_in_time(baseline, teleported, at)
    metrics = {
        "final_loss": final[0][0],
        "final_loss_std": final[0][1],
        "final_loss_teleport": final[1][0],
        "final_loss_teleport_std": final[1][1],
        "epoch_fraction_lower": sum(tele_curve[t] < base_curve[t] for t in after) / len(after),
        "diverged_teleport": sum(t.diverged for t in teleported),
        "converged_steps": [t.converged_step for t in baseline],
        "converged_steps_teleport": [t.converged_step for t in teleported],
        "gain_mean": statistics.fmean(gains) if gains else math.nan,
        "step_seconds": step_seconds,
        "teleport_seconds": teleport_seconds,
        "teleport_cost_in_steps": teleport_seconds / step_seconds,
        "equal_loss_fraction_larger": equal.fraction_larger,
        **timing,
    }
    return {f"{optimizer}_{k}": v for k, v in metrics.items()}


def run_regression(config: RegressionConfig, progress: Progress) -> Result:
    """Fig 4.5: GD and AdaGrad with and without one teleport at epoch 5, ``runs`` runs."""
    warm_up(config.problem(0))
    runs: dict[tuple[str, bool], list[TrainingRun]] = {
        (o, t): [] for o in OPTIMIZERS for t in (False, True)
    }
    for r in progress.track(range(config.runs), description="runs"):
        for optimizer in OPTIMIZERS:
            runs[(optimizer, False)].append(config.train(r, optimizer, config.steps, None))
            runs[(optimizer, True)].append(
                config.train(r, optimizer, config.steps, config.plan(optimizer))
            )
    metrics: dict[str, Any] = {"runs": config.runs, "steps": config.steps}
    for optimizer in OPTIMIZERS:
        metrics.update(
            _regression_metrics(
                optimizer, runs[(optimizer, False)], runs[(optimizer, True)], config.teleport_at
            )
        )
    notes = [
        *_setup_notes(config),
        f"GD: {config.gd_teleport_steps} ascent steps at lr {config.gd_teleport_lr:g}; AdaGrad: "
        f"{config.adagrad_teleport_steps} at lr {config.adagrad_teleport_lr:g} (the paper's)",
    ]
    return Result(metrics, {"curves": _curve_table(runs)}, notes)


def _trainings_from(
    table: dict[str, list[Any]], optimizer: str, teleported: bool
) -> list[TrainingRun]:
    rows = table_rows(table, optimizer=optimizer, teleport=teleported)
    out = []
    for r in sorted(set(rows["run"])):
        one = table_rows(rows, run=r)
        out.append(TrainingRun(optimizer, one["loss"], one["dL_dt"], one["seconds"]))
    return out


def _band(axis: Any, x: np.ndarray, rows: np.ndarray, colour: str, label: str) -> None:
    mean, std = np.nanmean(rows, axis=0), np.nanstd(rows, axis=0)
    axis.plot(x, mean, color=colour, linewidth=2, label=label)
    axis.fill_between(x, np.clip(mean - std, 1e-12, None), mean + std, color=colour, alpha=0.3)


def plot_regression(result: Result) -> dict[str, Any]:
    """Fig 4.5: (a) loss vs epoch and (b) vs wall-clock time (mean ± 1 std over runs), (c)
    ‖∇L‖² vs epoch and (d) dL/dt vs loss (run 0)."""
    table = result.series["curves"]
    figure, grid = plt.subplots(1, 4, figsize=(19, 4.4))
    for optimizer in OPTIMIZERS:
        for teleported in (False, True):
            key = f"{optimizer}+teleport" if teleported else optimizer
            trainings = _trainings_from(table, optimizer, teleported)
            length = min(len(t.losses) for t in trainings)
            losses = np.array([t.losses[:length] for t in trainings])
            seconds = np.array([t.seconds[:length] for t in trainings]).mean(axis=0)
            _band(grid[0], np.arange(length), losses, COLOURS[key], LABELS[key])
            _band(grid[1], seconds, losses, COLOURS[key], LABELS[key])
            first = trainings[0]
            grid[2].plot(first.rates, color=COLOURS[key], label=LABELS[key])
            grid[3].plot(first.losses, first.rates, color=COLOURS[key], label=LABELS[key])
    titles = (
        "(a) loss vs epoch",
        "(b) loss vs wall-clock time",
        "(c) ‖∇L‖² vs epoch (run 0)",
        "(d) dL/dt vs loss (run 0)",
    )
    xlabels = ("epoch", "time (s)", "epoch", "loss")
    ylabels = ("loss", "loss", "dL/dt = ‖∇L‖²", "dL/dt = ‖∇L‖²")
    for axis, title, xlabel, ylabel in zip(grid, titles, xlabels, ylabels, strict=True):
        axis.set_yscale("log")
        axis.set_title(title)
        axis.set_xlabel(xlabel)
        axis.set_ylabel(ylabel)
        axis.legend(fontsize=8)
    grid[3].set_xscale("log")
    figure.suptitle("3-layer LeakyReLU regression, one teleport at epoch 5 (dissertation Fig 4.5)")
    figure.tight_layout()
    return {"regression.png": figure}


def _check_epochs(optimizer: str) -> Callable[[Result], tuple[str, bool]]:
    def check(result: Result) -> tuple[str, bool]:
        m = {
            k[len(optimizer) + 1 :]: v
            for k, v in result.metrics.items()
            if k.startswith(optimizer + "_")
        }
        measured = (
            f"loss at epoch {result.metrics['steps']}: {m['final_loss_teleport']:.3g} ± "
            f"{m['final_loss_teleport_std']:.2g} with teleport vs {m['final_loss']:.3g} ± "
            f"{m['final_loss_std']:.2g}; mean lower at {m['epoch_fraction_lower']:.0%} of the "
            f"epochs after the teleport; diverged {m['diverged_teleport']}/"
            f"{result.metrics['runs']}"
        )
        holds = m["final_loss_teleport"] < m["final_loss"] and m["epoch_fraction_lower"] > 0.5
        return measured, holds

    return check


def _check_time(optimizer: str) -> Callable[[Result], tuple[str, bool]]:
    def check(result: Result) -> tuple[str, bool]:
        m = {
            k[len(optimizer) + 1 :]: v
            for k, v in result.metrics.items()
            if k.startswith(optimizer + "_")
        }
        fraction = m["time_fraction_lower"]
        measured = (
            f"at t = {m['time_compared_until']:.3f} s (end of the shorter run): loss "
            f"{m['loss_at_end_time_teleport']:.3g} with teleport vs {m['loss_at_end_time']:.3g}; "
            + (
                f"lower at {fraction:.0%} of times after the teleport; "
                if math.isfinite(fraction)
                else "the teleport alone outlasted the run without it; "
            )
            + f"one teleport = {m['teleport_seconds'] * 1e3:.1f} ms = "
            f"{m['teleport_cost_in_steps']:.0f} optimizer steps"
        )
        holds = (
            math.isfinite(fraction)
            and fraction > 0.5
            and m["loss_at_end_time_teleport"] < m["loss_at_end_time"]
        )
        return measured, holds

    return check


experiment(
    "teleport-regression",
    seed_ref="seed 001, dissertation Fig 4.5 (§4.6.1)",
    description=(
        "3-layer LeakyReLU(0.1) regression (W₃ 8×7, W₂ 7×6, W₁ 6×5, 4 samples, all U[0,1]) "
        "with GD (lr 1e-4) and AdaGrad (lr 1e-1) for 300 steps, one teleport at epoch 5 along "
        "Eq. 4.13 on both layer pairs (GD 8 ascent steps lr 1e-7, AdaGrad 2 steps lr 1e-5). "
        "Chosen here: loss 0.5‖·‖²_F, g = I + T with exact inverse, ascent steps bounded to "
        "‖T‖ ≤ 0.1, float64, one torch thread"
    ),
    quick=RegressionConfig(runs=3),
    paper=RegressionConfig(),
    claims=[
        Claim(
            "GD: teleportation lowers the loss at equal epochs",
            "seed 001, Fig 4.5a",
            "GD + teleport below GD after the teleport (mean of 5 runs)",
            _check_epochs("gd"),
        ),
        Claim(
            "GD: teleportation lowers the loss at equal wall-clock time",
            "seed 001, Fig 4.5b",
            "GD + teleport below GD in loss vs time (mean of 5 runs)",
            _check_time("gd"),
        ),
        Claim(
            "AdaGrad: teleportation lowers the loss at equal epochs",
            "seed 001, Fig 4.5a",
            "AdaGrad + teleport below AdaGrad after the teleport (mean of 5 runs)",
            _check_epochs("adagrad"),
        ),
        Claim(
            "AdaGrad: teleportation lowers the loss at equal wall-clock time",
            "seed 001, Fig 4.5b",
            "AdaGrad + teleport below AdaGrad in loss vs time (mean of 5 runs)",
            _check_time("adagrad"),
        ),
    ],
    plot=plot_regression,
)(run_regression)
