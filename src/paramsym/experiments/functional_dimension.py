"""Experiments of seed 004 ("Empirical NTK tracks task complexity"): the batch functional
dimension (FD, the rank of the parameter Jacobian on the whole training set, equal to the rank
of the empirical NTK Gram matrix) of (n0, 10, 10, 10, 10 | 1) ReLU networks during training.

* ``fd-univariate`` (Figs 1, 2, 5, 7): targets f1, f2, f3 on 100 noisy points in [0, 1].
* ``fd-bivariate`` (Figs 8, 9): targets g1, g2, g3 on the 20 × 20 grid of [0, 1]².
* ``fd-weight-decay`` (Fig 4): f2 with weight decay 0, 1e-4 and 1e-3.
* ``fd-energy`` (Figs 3, 6): UCI Energy Efficiency, heating vs cooling load.

Common setup (seed 004 §5; notes 004 §3): the "He variant" initialisation draws *all* weights
and biases of a layer from N(0, 2/fan_in); Adam (lr 0.01, coupled L2 weight decay 1e-4 as in
``torch.optim.Adam``), MSE loss, shuffled minibatches of 16, float32 training. FD is measured
at epoch 0, every ``every`` epochs and at the last epoch, in float32 with
``torch.linalg.matrix_rank``'s default tolerance (the paper's rule) and in float64 (recorded,
not used by the claims), together with the number of linear regions (distinct activation
patterns) the data set samples. A run is *successful* when r² > 0.9 on the training data after
training; averages of final FDs are over successful runs (Figs 2, 4). The paper does not state
the number of epochs: each config sets it (see the presets).

Speed: the independent runs of one experiment are trained together as one batch of networks
(stacked weights, ``torch.baddbmm``). Adam and coupled weight decay act elementwise and the
loss is a sum of the runs' own mean-squared errors, so every run follows the updates it would
get alone (up to float rounding; tested); its initialisation and minibatch order come from its
own generator, seeded ``seed·1000 + run``.
"""

from __future__ import annotations

import copy
import itertools
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import matplotlib.pyplot as plt
import torch
from torch import Tensor, nn

import paramsym as ps
import paramsym.data
from paramsym.experiments.registry import Claim, Progress, Result, experiment

HIDDEN = (10, 10, 10, 10)
"""Hidden widths of the paper's architecture (n0, 10, 10, 10, 10 | 1)."""

COLOURS = {
    "f1": "tab:blue",
    "f2": "tab:red",
    "f3": "tab:green",
    "g1": "tab:blue",
    "g2": "tab:red",
    "g3": "tab:green",
    "heating": "tab:red",
    "cooling": "tab:blue",
}

# -- training and tracking (shared) ---------------------------------------------------------------


@dataclass(frozen=True)
class Task:
    """One training set: a label (target name or weight decay) and float32 tensors."""

    label: str
    x: Tensor
    y: Tensor
    weight_decay: float


@dataclass(frozen=True)
class Schedule:
    """The optimisation and measurement settings shared by the four experiments (seed 004 §5)."""

    seed: int
    runs: int
    epochs: int
    every: int
    learning_rate: float
    batch_size: int


@dataclass
class Trajectory:
    """What one run (one initialisation on one task) recorded.

    Attributes:
        label, run, weight_decay: the task, the index of the initialisation, its weight decay.
        epochs, fd32, fd64, regions, loss: one entry per checkpoint (0, every, 2·every, …, last).
        r2: r² on the training data after training.
        predictions: model outputs on a probe grid at every checkpoint (1-D tasks only).
    """

    label: str
    run: int
    weight_decay: float
    epochs: list[int] = field(default_factory=list)
    fd32: list[int] = field(default_factory=list)
    fd64: list[int] = field(default_factory=list)
    regions: list[int] = field(default_factory=list)
    loss: list[float] = field(default_factory=list)
    r2: float = math.nan
    predictions: list[Tensor] = field(default_factory=list)


def init_seed(seed: int, run: int) -> int:
    """The seed of run ``run``'s generator (initialisation, then minibatch order)."""
    return seed * 1000 + run


def he_variant_init(model: nn.Module, generator: torch.Generator) -> nn.Module:
    """Draw every weight and bias of every ``nn.Linear`` from N(0, 2/fan_in) (seed 004 §5)."""
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.Linear):
                std = math.sqrt(2.0 / module.in_features)
                for p in (module.weight, module.bias):
                    if p is not None:
                        p.copy_(std * torch.randn(p.shape, generator=generator, dtype=p.dtype))
    return model


def _linears(model: nn.Module) -> list[nn.Linear]:
    return [m for m in model.modules() if isinstance(m, nn.Linear)]


class _Cohort:
    """All runs of several tasks as one batch of B networks with stacked parameters."""

    def __init__(self, tasks: Sequence[Task], schedule: Schedule) -> None:
        self.members = [(t, r) for t in tasks for r in range(schedule.runs)]
        widths = [tasks[0].x.shape[1], *HIDDEN, 1]
        self.template = ps.mlp(widths, activation="relu", seed=0)  # seed: global RNG untouched
        self.generators = [
            torch.Generator().manual_seed(init_seed(schedule.seed, r)) for _, r in self.members
        ]
        layers = [
            _linears(he_variant_init(copy.deepcopy(self.template), g)) for g in self.generators
        ]
        self.weights = [
            torch.stack([ls[i].weight.detach() for ls in layers]).requires_grad_()
            for i in range(len(layers[0]))
        ]
        self.biases = [
            torch.stack([ls[i].bias.detach() for ls in layers]).requires_grad_()
            for i in range(len(layers[0]))
        ]
        self.decay = torch.tensor([t.weight_decay for t, _ in self.members])
        self.x = torch.stack([t.x for t, _ in self.members])  # (B, m, n0)
        self.y = torch.stack([t.y for t, _ in self.members])  # (B, m, 1)

    @property
    def parameters(self) -> list[Tensor]:
        return [*self.weights, *self.biases]

    def forward(self, x: Tensor) -> Tensor:
        """Outputs of all B networks on their own inputs ``x`` of shape (B, k, n0)."""
        h = x
        for i, (w, b) in enumerate(zip(self.weights, self.biases, strict=True)):
            h = torch.baddbmm(b.unsqueeze(1), h, w.transpose(1, 2))
            if i < len(self.weights) - 1:
                h = torch.relu(h)
        return h

    def epoch(self, optimizer: torch.optim.Optimizer, batch_size: int) -> None:
        """One pass over every run's data in its own shuffled minibatches of ``batch_size``.

        The loss is the sum of the runs' own MSELoss, so each run gets its own gradient; its
        weight decay λ is then added as ``grad ← grad + λ·θ`` before the Adam step, which is
        exactly what ``torch.optim.Adam(weight_decay=λ)`` does (coupled L2), run by run.
        """
        m = self.x.shape[1]
        order = torch.stack([torch.randperm(m, generator=g) for g in self.generators])
        rows = torch.arange(len(self.members)).unsqueeze(1)
        for start in range(0, m, batch_size):
            index = order[:, start : start + batch_size]
            optimizer.zero_grad()
            error = self.forward(self.x[rows, index]) - self.y[rows, index]
            error.pow(2).mean(dim=(1, 2)).sum().backward()
            with torch.no_grad():
                for p in self.parameters:
                    assert p.grad is not None
                    p.grad.add_(self.decay.view(-1, *[1] * (p.dim() - 1)) * p)
            optimizer.step()

    def model(self, b: int) -> nn.Module:
        """Network ``b`` as a ``ps.mlp`` (the template, overwritten)."""
        with torch.no_grad():
            for layer, w, bias in zip(
                _linears(self.template), self.weights, self.biases, strict=True
            ):
                layer.weight.copy_(w[b])
                layer.bias.copy_(bias[b])
        return self.template


def _measure(cohort: _Cohort, records: list[Trajectory], epoch: int, probe: Tensor | None) -> None:
    """Record FD (float32 and float64), linear regions and the training loss of every run."""
    with torch.no_grad():
        losses = (cohort.forward(cohort.x) - cohort.y).pow(2).mean(dim=(1, 2))
    for b, ((task, _), record) in enumerate(zip(cohort.members, records, strict=True)):
        model = cohort.model(b)
        record.epochs.append(epoch)
        record.fd32.append(ps.functional_dimension(model, task.x, dtype=torch.float32).rank)
        record.fd64.append(ps.functional_dimension(model, task.x, dtype=torch.float64).rank)
        record.regions.append(ps.linear_regions(model, task.x).count)
        record.loss.append(float(losses[b]))
        if probe is not None:
            with torch.no_grad():
                record.predictions.append(model(probe).flatten())


def adam(parameters: list[Tensor], learning_rate: float) -> torch.optim.Adam:
    """``torch.optim.Adam`` without its own weight decay (it is added run by run, see
    ``_Cohort.epoch``); the fused kernel where this torch has it (the same update, faster)."""
    try:
        return torch.optim.Adam(parameters, lr=learning_rate, fused=True)
    except RuntimeError:  # torch < 2.4 has no fused Adam on the CPU
        return torch.optim.Adam(parameters, lr=learning_rate)


def r2_score(prediction: Tensor, target: Tensor) -> float:
    """Coefficient of determination 1 − SS_res / SS_tot."""
    residual = float((prediction - target).pow(2).sum())
    total = float((target - target.mean()).pow(2).sum())
    return 1.0 - residual / total if total > 0 else math.nan


def train_and_track(
    tasks: Sequence[Task],
    schedule: Schedule,
    progress: Progress,
    probe: Tensor | None = None,
    description: str = "epochs",
) -> list[Trajectory]:
    """Train ``schedule.runs`` He-variant initialisations on each task with Adam (coupled L2
    weight decay of the task) and MSE in float32, and track FD (float32 and float64), linear
    regions and the loss at epoch 0, every ``schedule.every`` epochs and at the last epoch
    (seed 004 §5, Figs 2-6, 9). Tasks must have the same number of points and input width.

    Run ``r`` starts from the same initialisation, and sees the same minibatch order, on
    every task (seed 004 Fig 3 shares the seed between heating and cooling).
    """
    cohort = _Cohort(tasks, schedule)
    optimizer = adam(cohort.parameters, schedule.learning_rate)
    records = [Trajectory(t.label, r, t.weight_decay) for t, r in cohort.members]
    for epoch in progress.track(range(schedule.epochs + 1), description=description):
        if epoch % schedule.every == 0 or epoch == schedule.epochs:
            _measure(cohort, records, epoch, probe)
        if epoch < schedule.epochs:
            cohort.epoch(optimizer, schedule.batch_size)
    with torch.no_grad():
        outputs = cohort.forward(cohort.x)
    for b, record in enumerate(records):
        record.r2 = r2_score(outputs[b], cohort.y[b])
    return records


# -- summaries (shared) ---------------------------------------------------------------------------


def _mean(values: Sequence[float]) -> float:
    return statistics.fmean(values) if values else math.nan


def summarise(
    records: Sequence[Trajectory],
    labels: Sequence[str],
    success_r2: float,
    inputs: int,
    points: int,
) -> Result:
    """Metrics and series common to the four experiments.

    Per label: mean FD at initialisation (all runs), mean final FD over successful runs
    (r² > ``success_r2``; seed 004 Figs 2, 4) in float32 and float64, the mean trajectory over
    successful runs, and r². Over all runs: the linear-regions bound FD ≤ (n0 + 1)·#regions
    (Prop 4.6) at every checkpoint, and FD ≤ min(m, D).
    """
    metrics: dict[str, Any] = {
        "groups": list(labels),
        "checkpoint_epochs": records[0].epochs,
        "success_r2": success_r2,
    }
    for label in labels:
        runs = [r for r in records if r.label == label]
        good = [r for r in runs if r.r2 > success_r2]
        metrics[f"fd_init_{label}"] = _mean([r.fd32[0] for r in runs])
        metrics[f"fd_final_{label}"] = _mean([r.fd32[-1] for r in good])
        metrics[f"fd_final_float64_{label}"] = _mean([r.fd64[-1] for r in good])
        metrics[f"regions_final_{label}"] = _mean([r.regions[-1] for r in good])
        metrics[f"successful_{label}"] = len(good)
        metrics[f"runs_{label}"] = len(runs)
        metrics[f"r2_mean_{label}"] = _mean([r.r2 for r in runs])
        metrics[f"mean_fd_{label}"] = [
            _mean([r.fd32[i] for r in good]) for i in range(len(records[0].epochs))
        ]
        metrics[f"mean_regions_{label}"] = [
            _mean([r.regions[i] for r in good]) for i in range(len(records[0].epochs))
        ]
    checkpoints = [
        (f, g, n) for r in records for f, g, n in zip(r.fd32, r.fd64, r.regions, strict=True)
    ]
    parameters = sum(a * (b + 1) for b, a in zip([inputs, *HIDDEN], [*HIDDEN, 1], strict=True))
    metrics.update(
        {
            "parameters": parameters,
            "points": points,
            "fd_init_mean": _mean([r.fd32[0] for r in records]),
            "fd_first_checkpoint_mean": _mean([r.fd32[1] for r in records if len(r.fd32) > 1]),
            "checkpoints": len(checkpoints),
            "region_bound_violations": sum(f > (inputs + 1) * n for f, _, n in checkpoints),
            "region_bound_violations_float64": sum(g > (inputs + 1) * n for _, g, n in checkpoints),
            "max_fd_over_region_bound": max(f / ((inputs + 1) * n) for f, _, n in checkpoints),
            "regions_exceed_fd_fraction": sum(n > f for f, _, n in checkpoints) / len(checkpoints),
            "max_fd": max(max(f, g) for f, g, _ in checkpoints),
            "fd_cap": min(points, parameters),
            "float64_minus_float32_mean": _mean([g - f for f, g, _ in checkpoints]),
        }
    )
    return Result(metrics, {"trajectories": trajectory_table(records), "runs": run_table(records)})


def trajectory_table(records: Sequence[Trajectory]) -> dict[str, list[Any]]:
    """One row per run and checkpoint: the CSV behind the trajectory figures."""
    table: dict[str, list[Any]] = {
        k: []
        for k in (
            "run",
            "target",
            "weight_decay",
            "epoch",
            "fd_float32",
            "fd_float64",
            "regions",
            "loss",
        )
    }
    for r in records:
        for row in zip(r.epochs, r.fd32, r.fd64, r.regions, r.loss, strict=True):
            for key, value in zip(table, (r.run, r.label, r.weight_decay, *row), strict=True):
                table[key].append(value)
    return table


def run_table(records: Sequence[Trajectory]) -> dict[str, list[Any]]:
    """One row per run: r², success and the final FD."""
    return {
        "run": [r.run for r in records],
        "target": [r.label for r in records],
        "weight_decay": [r.weight_decay for r in records],
        "r2": [r.r2 for r in records],
        "fd_init": [r.fd32[0] for r in records],
        "fd_final": [r.fd32[-1] for r in records],
        "fd_final_float64": [r.fd64[-1] for r in records],
        "regions_final": [r.regions[-1] for r in records],
    }


def shown_run(records: Sequence[Trajectory], label: str, success_r2: float) -> Trajectory:
    """The run drawn alone for ``label`` (Figs 5-7): the first successful one, else run 0."""
    runs = [r for r in records if r.label == label]
    return next((r for r in runs if r.r2 > success_r2), runs[0])


def _schedule(config: Any) -> Schedule:
    return Schedule(
        config.seed,
        config.runs,
        config.epochs,
        config.every,
        config.learning_rate,
        config.batch_size,
    )


def _common_notes(config: Any) -> list[str]:
    return [
        f"{config.epochs} epochs (the paper does not state the number; chosen by us), FD every "
        f"{config.every} epochs, {config.runs} initialisations per data set",
        "FD in float32 with torch.linalg.matrix_rank's default tolerance (the paper's rule) is "
        "what the claims use; float64 FD is recorded alongside (fd_float64 columns)",
        f"final FDs are averaged over successful runs (r² > {config.success_r2} on the training "
        "data); FD at initialisation over all runs",
        "the runs are trained together as a batch of networks (stacked weights); each follows "
        "its own Adam updates (up to float rounding), initialisation and minibatch order, "
        f"run r seeded {config.seed}·1000 + r and shared by every data set",
    ]


def _standard_error(result: Result, label: str) -> float:
    """Standard error of the mean final FD over ``label``'s successful runs."""
    runs = _rows(result.series["runs"], target=label)
    finals = [
        f
        for f, r2 in zip(runs["fd_final"], runs["r2"], strict=True)
        if r2 > result.metrics["success_r2"]
    ]
    return statistics.stdev(finals) / math.sqrt(len(finals)) if len(finals) > 1 else math.nan


def _final_order(result: Result, labels: Sequence[str], increasing: bool) -> tuple[str, bool]:
    """Whether the mean final FDs are ordered as the paper states; the measurement shows each
    mean ± its standard error, so an ordering within the run-to-run noise reads as such."""
    values = [result.metrics[f"fd_final_{label}"] for label in labels]
    measured = ", ".join(
        f"{label} {v:.1f} ± {_standard_error(result, label):.1f}"
        for label, v in zip(labels, values, strict=True)
    )
    pairs = itertools.pairwise(values)
    holds = all((a < b) if increasing else (a > b) for a, b in pairs)
    return measured, holds


# -- plots (shared) -------------------------------------------------------------------------------


def _colour(label: str, labels: Sequence[str]) -> str:
    palette = ["tab:blue", "tab:orange", "tab:green", "tab:purple", "tab:brown"]
    return COLOURS.get(label, palette[list(labels).index(label) % len(palette)])


def _rows(table: dict[str, list[Any]], **where: Any) -> dict[str, list[Any]]:
    keep = [
        i
        for i in range(len(next(iter(table.values()))))
        if all(table[k][i] == v for k, v in where.items())
    ]
    return {k: [column[i] for i in keep] for k, column in table.items()}


def _successful_runs(result: Result, label: str) -> set[int]:
    runs = _rows(result.series["runs"], target=label)
    threshold = result.metrics["success_r2"]
    return {r for r, r2 in zip(runs["run"], runs["r2"], strict=True) if r2 > threshold}


def _shown_run_index(result: Result, label: str) -> int:
    good = _successful_runs(result, label)
    return min(good) if good else 0


def plot_trajectories(result: Result, title: str, legend_title: str = "") -> Any:
    """FD vs epoch: every run as a thin line coloured by data set (left) and the mean over
    successful runs (right) — the layout of seed 004 Figs 2, 3, 4, 9."""
    labels = result.metrics["groups"]
    table = result.series["trajectories"]
    figure, (left, right) = plt.subplots(1, 2, figsize=(12, 4.4), sharey=True)
    for label in labels:
        colour = _colour(label, labels)
        rows = _rows(table, target=label)
        for run in dict.fromkeys(rows["run"]):
            one = _rows(rows, run=run)
            left.plot(one["epoch"], one["fd_float32"], color=colour, linewidth=0.7, alpha=0.45)
        left.plot([], [], color=colour, label=label)
        good = len(_successful_runs(result, label))
        total = result.metrics[f"runs_{label}"]
        right.plot(
            result.metrics["checkpoint_epochs"],
            result.metrics[f"mean_fd_{label}"],
            color=colour,
            linewidth=2,
            label=f"{label} ({good}/{total} successful)",
        )
    left.set_title("all runs")
    right.set_title(f"mean over successful runs (r² > {result.metrics['success_r2']:g})")
    for axis in (left, right):
        axis.set_xlabel("epoch")
        axis.legend(title=legend_title or None, fontsize=8)
        axis.set_ylim(bottom=0)
    left.set_ylabel("functional dimension (rank of J, float32)")
    figure.suptitle(title)
    figure.tight_layout()
    return figure


def plot_regions(result: Result, title: str, bound_factor: int | None = None) -> Any:
    """One run per data set: FD (solid) and the number of linear regions sampled (dashed
    black) vs epoch — seed 004 Figs 5, 6; with ``bound_factor``, also the bound of Prop 4.6."""
    labels = result.metrics["groups"]
    table = result.series["trajectories"]
    figure, grid = plt.subplots(
        1, len(labels), figsize=(4.2 * len(labels), 3.8), sharey=True, squeeze=False
    )
    axes = list(grid[0])
    for axis, label in zip(axes, labels, strict=True):
        run = _shown_run_index(result, label)
        rows = _rows(table, target=label, run=run)
        axis.plot(rows["epoch"], rows["fd_float32"], color=_colour(label, labels), label="FD")
        axis.plot(rows["epoch"], rows["regions"], "k--", label="# linear regions")
        if bound_factor is not None:
            bound = [bound_factor * n for n in rows["regions"]]
            axis.plot(rows["epoch"], bound, ":", color="gray", label=f"{bound_factor}·# regions")
        axis.set_title(f"{label}, run {run}")
        axis.set_xlabel("epoch")
        axis.legend(fontsize=8)
        axis.set_ylim(bottom=0)
    axes[0].set_ylabel("FD (float32) / # regions")
    figure.suptitle(title)
    figure.tight_layout()
    return figure


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
        run = shown_run(records, task.label, config.success_r2)
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
    records = train_and_track(tasks, _schedule(config), progress, probe, "fd-univariate epochs")
    result = summarise(records, config.targets, config.success_r2, 1, config.points)
    result.series.update(_function_tables(records, config, tasks, probe))
    result.notes += _common_notes(config)
    return result


def _plot_functions(result: Result) -> Any:
    """Data (dots) and the learned function of one run per target at several epochs (light to
    dark; the last one solid) — seed 004 Figs 1 and 7."""
    labels = result.metrics["groups"]
    figure, grid = plt.subplots(1, len(labels), figsize=(4.2 * len(labels), 3.6), squeeze=False)
    for axis, label in zip(grid[0], labels, strict=True):
        data = _rows(result.series["data"], target=label)
        axis.scatter(data["x"], data["y"], s=8, color="black", label="data")
        rows = _rows(result.series["functions"], target=label)
        epochs = list(dict.fromkeys(rows["epoch"]))
        for k, epoch in enumerate(epochs):
            one = _rows(rows, epoch=epoch)
            last = k == len(epochs) - 1
            axis.plot(
                one["x"],
                one["f"],
                color=_colour(label, labels),
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
        "fd_trajectories.png": plot_trajectories(
            result, "functional dimension during training, f1 < f2 < f3 (seed 004 Fig 2)"
        ),
        "fd_vs_regions.png": plot_regions(
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
    presets={
        "quick": UnivariateConfig(),
        "paper": UnivariateConfig(runs=15, every=50),
    },
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
            lambda r: _final_order(r, ("f1", "f2", "f3"), increasing=True),
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


# -- fd-bivariate (Figs 8, 9) ---------------------------------------------------------------------


@dataclass(frozen=True)
class BivariateConfig:
    """Settings of ``fd-bivariate`` (seed 004 App. B.1, Figs 8, 9).

    Attributes:
        seed: data noise (if any) and, with the run index, every run's generator.
        runs: initialisations per target (the paper: 20).
        epochs: training epochs (not stated in the paper).
        every: FD is measured every this many epochs (the paper: 25).
        targets: among g1, g2, g3.
        grid, noise: the grid × grid grid of [0, 1]² (20; the paper states no noise: 0).
        learning_rate, weight_decay, batch_size, success_r2: as in ``fd-univariate``.
    """

    seed: int = 0
    runs: int = 20
    epochs: int = 1000
    every: int = 100
    targets: tuple[str, ...] = ("g1", "g2", "g3")
    grid: int = 20
    noise: float = 0.0
    learning_rate: float = 0.01
    weight_decay: float = 1e-4
    batch_size: int = 16
    success_r2: float = 0.9


def run_bivariate(config: BivariateConfig, progress: Progress) -> Result:
    """Seed 004 App. B.1 / Fig 9: FD of (2, 10, 10, 10, 10 | 1) ReLU nets on g1, g2, g3."""
    tasks = []
    for target in config.targets:
        data = paramsym.data.sinusoid_2d(
            target, grid=config.grid, noise=config.noise, seed=config.seed, dtype=torch.float32
        )
        tasks.append(Task(target, *data.train, config.weight_decay))
    records = train_and_track(tasks, _schedule(config), progress, None, "fd-bivariate epochs")
    result = summarise(records, config.targets, config.success_r2, 2, config.grid**2)
    result.notes += [
        *_common_notes(config),
        f"{config.grid}×{config.grid} grid with input/output noise {config.noise:g} (the paper "
        "says grid in the text and 'uniformly distributed' in the Fig 8 caption, no noise level)",
    ]
    return result


def plot_bivariate(result: Result) -> dict[str, Any]:
    return {
        "fd_trajectories.png": plot_trajectories(
            result, "functional dimension during training, g1 < g2 < g3 (seed 004 Fig 9)"
        ),
        "fd_vs_regions.png": plot_regions(
            result, "FD and linear regions sampled, one run each (cf. seed 004 Fig 5)"
        ),
    }


experiment(
    "fd-bivariate",
    seed_ref="seed 004, App. B.1, Figs 8, 9",
    description=(
        "functional dimension of (2,10,10,10,10|1) ReLU nets trained on g1, g2, g3 (20×20 "
        "grid): below 60 at init, final FD tracks complexity; 2000 epochs in the paper preset, "
        "1000 in quick (not stated in the paper), final means over successful runs (r² > 0.9)"
    ),
    presets={
        "quick": BivariateConfig(),
        "paper": BivariateConfig(runs=20, epochs=2000, every=25),
    },
    claims=[
        Claim(
            "the empirical NTK is rank-deficient at initialisation: mean FD below 60 of at "
            "most 371",
            "seed 004, App. B.1 (Fig 9)",
            "mean FD at init < 60 (float32)",
            lambda r: (round(r.metrics["fd_init_mean"], 2), r.metrics["fd_init_mean"] < 60),
        ),
        Claim(
            "final FD tracks task complexity (mean over successful runs)",
            "seed 004, Fig 9 (right)",
            "g1 < g2 < g3",
            lambda r: _final_order(r, ("g1", "g2", "g3"), increasing=True),
        ),
    ],
    plot=plot_bivariate,
)(run_bivariate)


# -- fd-weight-decay (Fig 4) ----------------------------------------------------------------------


@dataclass(frozen=True)
class WeightDecayConfig:
    """Settings of ``fd-weight-decay`` (seed 004 Fig 4): f2 with several weight decays.

    Attributes:
        seed: data noise and, with the run index, every run's generator (the same
            initialisations for every weight decay).
        runs: initialisations per weight decay (the paper: 10).
        epochs, every: training epochs (not stated) and the measurement interval (50).
        weight_decays: coupled L2 coefficients of Adam (the paper: 0, 1e-4, 1e-3).
        target, points, noise: the data set (f2, 100 points, noise 0.01).
        learning_rate, batch_size, success_r2: as in ``fd-univariate``.
    """

    seed: int = 0
    runs: int = 8
    epochs: int = 3000
    every: int = 100
    weight_decays: tuple[float, ...] = (0.0, 1e-4, 1e-3)
    target: str = "f2"
    points: int = 100
    noise: float = 0.01
    learning_rate: float = 0.01
    batch_size: int = 16
    success_r2: float = 0.9


def _decay_label(decay: float) -> str:
    return f"wd={decay:g}"


def run_weight_decay(config: WeightDecayConfig, progress: Progress) -> Result:
    """Seed 004 Fig 4: FD on f2 for each weight decay."""
    data = paramsym.data.sinusoid_1d(
        config.target, n=config.points, noise=config.noise, seed=config.seed, dtype=torch.float32
    )
    tasks = [Task(_decay_label(d), *data.train, d) for d in config.weight_decays]
    labels = [t.label for t in tasks]
    records = train_and_track(tasks, _schedule(config), progress, None, "fd-weight-decay epochs")
    result = summarise(records, labels, config.success_r2, 1, config.points)
    result.notes += _common_notes(config)
    return result


def plot_weight_decay(result: Result) -> dict[str, Any]:
    return {
        "fd_trajectories.png": plot_trajectories(
            result,
            "functional dimension on f2: more weight decay, lower FD (seed 004 Fig 4)",
            "Adam weight decay",
        )
    }


def _decreasing_in_decay(result: Result) -> tuple[str, bool]:
    return _final_order(result, result.metrics["groups"], increasing=False)


experiment(
    "fd-weight-decay",
    seed_ref="seed 004, Fig 4",
    description=(
        "functional dimension of (1,10,10,10,10|1) ReLU nets on f2 with Adam weight decay 0, "
        "1e-4, 1e-3: larger weight decay, lower final FD; 3000 epochs (not stated in the "
        "paper), final means over successful runs (r² > 0.9)"
    ),
    presets={
        "quick": WeightDecayConfig(),
        "paper": WeightDecayConfig(runs=10, every=50),
    },
    claims=[
        Claim(
            "larger weight decay gives lower trained FD (mean over successful runs)",
            "seed 004, Fig 4 (right)",
            "final FD strictly decreasing over weight decay 0, 1e-4, 1e-3",
            _decreasing_in_decay,
        )
    ],
    plot=plot_weight_decay,
)(run_weight_decay)


# -- fd-energy (Figs 3, 6) ------------------------------------------------------------------------


@dataclass(frozen=True)
class EnergyConfig:
    """Settings of ``fd-energy`` (seed 004 Figs 3, 6): UCI Energy Efficiency, 768 × 8.

    Attributes:
        seed: with the run index, every run's generator (shared by heating and cooling, as in
            the paper).
        runs: initialisations per target (the paper: 10).
        epochs, every: training epochs (not stated) and the measurement interval (25).
        targets: ``"heating"`` (Y1) and ``"cooling"`` (Y2).
        standardise: z-score every feature and the target over the 768 rows (the paper does not
            say how it preprocessed the data).
        data_dir: directory holding ENB2012_data.xlsx/.csv (``--data-dir`` / ``PARAMSYM_DATA``).
        learning_rate, weight_decay, batch_size, success_r2: as in ``fd-univariate``.
    """

    seed: int = 0
    runs: int = 4
    epochs: int = 300
    every: int = 25
    targets: tuple[str, ...] = ("heating", "cooling")
    standardise: bool = True
    data_dir: str | None = None
    learning_rate: float = 0.01
    weight_decay: float = 1e-4
    batch_size: int = 16
    success_r2: float = 0.9


def _zscore(t: Tensor) -> Tensor:
    std = t.std(dim=0, keepdim=True)
    return (t - t.mean(dim=0, keepdim=True)) / torch.where(std > 0, std, torch.ones_like(std))


def _energy_task(config: EnergyConfig, target: str) -> Task:
    x, y = paramsym.data.uci_energy(data_dir=config.data_dir, target=target).train
    x, y = x.to(torch.float64), y.to(torch.float64)
    if config.standardise:
        x, y = _zscore(x), _zscore(y)
    return Task(target, x.float(), y.float(), config.weight_decay)


def run_energy(config: EnergyConfig, progress: Progress) -> Result:
    """Seed 004 Fig 3: FD of (8, 10, 10, 10, 10 | 1) ReLU nets on heating and cooling load."""
    tasks = [_energy_task(config, target) for target in config.targets]
    records = train_and_track(tasks, _schedule(config), progress, None, "fd-energy epochs")
    result = summarise(records, config.targets, config.success_r2, 8, tasks[0].x.shape[0])
    result.notes += [
        *_common_notes(config),
        "features and targets z-scored over all rows (no split; the paper states neither)"
        if config.standardise
        else "features and targets used as they are in the file",
    ]
    return result


def plot_energy(result: Result) -> dict[str, Any]:
    return {
        "fd_trajectories.png": plot_trajectories(
            result, "functional dimension on UCI Energy: heating < cooling (seed 004 Fig 3)"
        ),
        "fd_vs_regions.png": plot_regions(
            result, "FD and linear regions sampled, one run each (seed 004 Fig 6)"
        ),
    }


experiment(
    "fd-energy",
    seed_ref="seed 004, Figs 3, 6",
    description=(
        "functional dimension of (8,10,10,10,10|1) ReLU nets on UCI Energy Efficiency (768 "
        "rows, features and targets z-scored: not stated in the paper): heating load ends "
        "lower than cooling load; 1000 epochs in the paper preset, 300 in quick (not stated in "
        "the paper), final means over successful runs (r² > 0.9)"
    ),
    data="UCI Energy Efficiency (ENB2012_data.xlsx or .csv in --data-dir; not bundled)",
    presets={
        "quick": EnergyConfig(),
        "paper": EnergyConfig(runs=10, epochs=1000),
    },
    claims=[
        Claim(
            "final FD tracks task complexity: heating load (easier) below cooling load",
            "seed 004, Fig 3 (right)",
            "heating < cooling",
            lambda r: _final_order(r, ("heating", "cooling"), increasing=True),
        )
    ],
    plot=plot_energy,
)(run_energy)
