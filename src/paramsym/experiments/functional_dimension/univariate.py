"""``fd-univariate`` (seed 004, Figs 1, 2, 5, 7).

Targets f1, f2, f3 on 100 noisy points in [0, 1].

The common setup is described in :mod:`paramsym.experiments.functional_dimension`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import matplotlib.pyplot as plt
import torch
from torch import Tensor

import paramsym.data
from paramsym.core.tables import table_rows
from paramsym.experiments.functional_dimension import summaries
from paramsym.experiments.functional_dimension.training import Task, Trajectory, train_and_track
from paramsym.experiments.registry import Claim, Progress, Result, experiment

# -- fd-univariate (Figs 1, 2, 5, 7) --------------------------------------------------------------


@dataclass(frozen=True)
class UnivariateConfig:
    """Settings of ``fd-univariate`` (seed 004 §5, Figs 1, 2, 5, 7).

    Attributes:
        seed: the data noise and, with the run index, every run's generator (seed·1000 + run).
        runs: initialisations per target (the paper: 15).
        epochs: training epochs (not stated in the paper).
        every: FD is measured every this many epochs (the paper: 50).
        targets: among f1, f2, f3.
        points, noise: equally spaced points on [0, 1], Gaussian noise on x and y (100, 0.01).
        learning_rate, weight_decay, batch_size: Adam (0.01, coupled L2 1e-4), minibatches (16).
        success_r2: a run is successful when r² on the training data exceeds this (0.9).
        probe_points: grid on [0, 1] where the learned functions are drawn (Figs 1, 7).
    """

    seed: int = 0
    runs: int = 10
    epochs: int = 3000
    every: int = 100
    targets: tuple[str, ...] = ("f1", "f2", "f3")
    points: int = 100
    noise: float = 0.01
    learning_rate: float = 0.01
    weight_decay: float = 1e-4
    batch_size: int = 16
    success_r2: float = 0.9
    probe_points: int = 200


def _function_tables(
    records: Sequence[Trajectory],
    config: UnivariateConfig,
    tasks: Sequence[Task],
    probe: Tensor,
    shown: int = 6,
) -> dict[str, dict[str, list[Any]]]:
    """The data sets and, for the shown run of each target, the learned function at up to
    ``shown`` checkpoints (seed 004 Figs 1, 7)."""
    data: dict[str, list[Any]] = {"target": [], "x": [], "y": []}
    functions: dict[str, list[Any]] = {"target": [], "run": [], "epoch": [], "x": [], "f": []}
    for task in tasks:
        data["target"] += [task.label] * task.x.shape[0]
        data["x"] += task.x.flatten().tolist()
        data["y"] += task.y.flatten().tolist()
        run = summaries.shown_run(records, task.label, config.success_r2)
        count = len(run.epochs)
        picks = sorted({round(i * (count - 1) / (shown - 1)) for i in range(shown)})
        for i in picks:
            functions["target"] += [task.label] * probe.shape[0]
            functions["run"] += [run.run] * probe.shape[0]
            functions["epoch"] += [run.epochs[i]] * probe.shape[0]
            functions["x"] += probe.flatten().tolist()
            functions["f"] += run.predictions[i].tolist()
    return {"data": data, "functions": functions}


def run_univariate(config: UnivariateConfig, progress: Progress) -> Result:
    """Seed 004 §5 / Fig 2: FD of (1, 10, 10, 10, 10 | 1) ReLU nets trained on f1, f2, f3."""
    tasks = []
    for target in config.targets:
        data = paramsym.data.sinusoid_1d(
            target, n=config.points, noise=config.noise, seed=config.seed, dtype=torch.float32
        )
        tasks.append(Task(target, *data.train, config.weight_decay))
    probe = torch.linspace(0.0, 1.0, config.probe_points).unsqueeze(1)
    records = train_and_track(
        tasks, summaries.schedule(config), progress, probe, "fd-univariate epochs"
    )
    result = summaries.summarise(records, config.targets, config.success_r2, 1, config.points)
    result.series.update(_function_tables(records, config, tasks, probe))
    result.notes += summaries.common_notes(config)
    return result


def _plot_functions(result: Result) -> Any:
    """Data (dots) and the learned function of one run per target at several epochs (light to
    dark; the last one solid) — seed 004 Figs 1 and 7."""
    labels = result.metrics["groups"]
    figure, grid = plt.subplots(1, len(labels), figsize=(4.2 * len(labels), 3.6), squeeze=False)
    for axis, label in zip(grid[0], labels, strict=True):
        data = table_rows(result.series["data"], target=label)
        axis.scatter(data["x"], data["y"], s=8, color="black", label="data")
        rows = table_rows(result.series["functions"], target=label)
        epochs = list(dict.fromkeys(rows["epoch"]))
        for k, epoch in enumerate(epochs):
            one = table_rows(rows, epoch=epoch)
            last = k == len(epochs) - 1
            axis.plot(
                one["x"],
                one["f"],
                color=summaries.label_colour(label, labels),
                alpha=1.0 if last else 0.2 + 0.5 * k / max(1, len(epochs) - 1),
                linewidth=2 if last else 1,
                label=f"epoch {epoch}" if last or k == 0 else None,
            )
        axis.set_title(f"{label}, run {rows['run'][0] if rows['run'] else '-'}")
        axis.set_xlabel("x")
        axis.legend(fontsize=8)
    grid[0][0].set_ylabel("y")
    figure.suptitle("data and learned functions during training (seed 004 Figs 1, 7)")
    figure.tight_layout()
    return figure


def plot_univariate(result: Result) -> dict[str, Any]:
    return {
        "fd_trajectories.png": summaries.plot_trajectories(
            result, "functional dimension during training, f1 < f2 < f3 (seed 004 Fig 2)"
        ),
        "fd_vs_regions.png": summaries.plot_regions(
            result, "FD and linear regions sampled, one run each (seed 004 Fig 5)", 2
        ),
        "functions.png": _plot_functions(result),
    }


experiment(
    "fd-univariate",
    seed_ref="seed 004, Figs 1, 2, 5, 7; §5, Prop 4.6",
    description=(
        "functional dimension (rank of the NTK Jacobian) of (1,10,10,10,10|1) ReLU nets trained "
        "on f1, f2, f3 (100 noisy points): low at init, rises, final FD tracks complexity; "
        "3000 epochs (not stated in the paper), final means over successful runs (r² > 0.9)"
    ),
    quick=UnivariateConfig(),
    paper=UnivariateConfig(runs=15, every=50),
    claims=[
        Claim(
            "the empirical NTK is rank-deficient at initialisation: mean FD below 20 of at "
            "most 100",
            "seed 004, §5 (Fig 2)",
            "mean FD at init < 20 (float32)",
            lambda r: (round(r.metrics["fd_init_mean"], 2), r.metrics["fd_init_mean"] < 20),
        ),
        Claim(
            "final FD tracks task complexity (mean over successful runs)",
            "seed 004, Fig 2 (right)",
            "f1 < f2 < f3",
            lambda r: summaries.final_order(r, ("f1", "f2", "f3"), increasing=True),
        ),
        Claim(
            "FD ≤ 2·#linear regions sampled, at every checkpoint of every run",
            "seed 004, Prop 4.6 / C.3, Fig 5",
            "0 violations",
            lambda r: (
                f"{r.metrics['region_bound_violations']:g} violations in "
                f"{r.metrics['checkpoints']:g} checkpoints (max FD/bound "
                f"{r.metrics['max_fd_over_region_bound']:.2f})",
                r.metrics["region_bound_violations"] == 0,
            ),
        ),
        Claim(
            "FD rises in early training",
            "seed 004, §5 (Fig 2)",
            "mean FD at the first checkpoint after init > mean FD at init",
            lambda r: (
                f"init {r.metrics['fd_init_mean']:.1f} → epoch "
                f"{r.metrics['checkpoint_epochs'][1]}: {r.metrics['fd_first_checkpoint_mean']:.1f}",
                r.metrics["fd_first_checkpoint_mean"] > r.metrics["fd_init_mean"],
            ),
        ),
    ],
    plot=plot_univariate,
)(run_univariate)
