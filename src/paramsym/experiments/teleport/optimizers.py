"""``teleport-optimizers`` (seed 001, dissertation Figs 5.9-5.11).

(a) momentum on the ch. 4 regression with the three ways of treating the momentum buffer
(``state_policy`` "transform", "keep", "reset"), (b) AdaGrad on the same regression teleported
to maximise ‖∇L‖² or the AdaGrad-preconditioned ‖∇L‖²_A (Eq. 5.7), (c) AdaGrad, momentum,
RMSProp and Adam on an MLP classifier with and without one teleport at the first epoch, against
epochs and wall-clock time. Shared choices are listed in
:mod:`paramsym.experiments.teleport.training`.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import torch
from torch import Tensor, nn

import paramsym as ps
import paramsym.data
from paramsym.core.tables import append_row
from paramsym.errors import InvalidArgumentError
from paramsym.experiments.registry import Claim, Progress, Result, experiment
from paramsym.experiments.teleport.mnist import mnist_setup, summarise_pairs, teleport_cost_claim
from paramsym.experiments.teleport.plotting import log_bands, palette, plot_band
from paramsym.experiments.teleport.training import (
    COLOURS,
    LABELS,
    Arm,
    _pm,
    layer_pair_actions,
    load_split,
    log_area,
    make_optimizer,
    recorded_warnings,
    run_arm,
    squared_grad_norm,
    teleporter,
    warning_counts,
)
from paramsym.experiments.threads import torch_threads
from paramsym.teleportation import StatePolicy

# -- teleport-optimizers (Figs 5.9-5.11) ----------------------------------------------------------


def half_squared_error(output: Tensor, target: Tensor) -> Tensor:
    """0.5 ‖Y − f(X)‖²_F, the authors' regression loss (the text writes ‖·‖₂; notes §9 item 6)."""
    return 0.5 * (output - target).pow(2).sum()


def regression_problem(seed: int, widths: Sequence[int] = (5, 6, 7, 8), samples: int = 4) -> Any:
    """The ch. 4 regression (§4.6.1): f = W₃σ(W₂σ(W₁X)), LeakyReLU(0.1), no biases; W₁ 6×5,
    W₂ 7×6, W₃ 8×7, X 5×4, Y 8×4 (rows are samples here), every entry U[0, 1], float64."""
    generator = torch.Generator().manual_seed(seed)
    model = ps.mlp(list(widths), nn.LeakyReLU(0.1), bias=False, seed=seed, dtype=torch.float64)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.rand(p.shape, generator=generator, dtype=torch.float64))
    data = paramsym.data.uniform_regression(
        n_samples=samples,
        in_features=widths[0],
        out_features=widths[-1],
        seed=seed,
        dtype=torch.float64,
    )
    return model, data.train


@dataclass
class Trajectory:
    """Per optimizer step of a full-batch regression run: loss and ‖∇L‖² before the step."""

    loss: list[float] = field(default_factory=list)
    grad_norm_sq: list[float] = field(default_factory=list)
    teleport: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


def train_regression(model: nn.Module, tele: ps.Teleporter, batch: Any, steps: int) -> Trajectory:
    """Full-batch training with ``tele`` wrapping the optimizer (it teleports when due)."""
    x, y = batch
    out = Trajectory()
    for _ in range(steps):
        with recorded_warnings(out.warnings):
            tele.zero_grad()
        loss = tele.loss_fn(model(x), y)
        loss.backward()
        out.loss.append(float(loss.detach()))
        out.grad_norm_sq.append(squared_grad_norm(model))
        tele.step()
    if tele.history:
        result = tele.history[0].results[0]
        out.teleport = {
            "grad_norm_gain": result.grad_norm_after / result.grad_norm_before,
            "loss_drift": result.max_loss_drift,
            "steps": result.steps,
            "stopped": result.stopped,
        }
    return out


@dataclass(frozen=True)
class RegressionArm:
    """A regression run's optimizer and teleport (``teleport_steps = 0``: no ascent, only the
    state policy; ``teleport=False``: never)."""

    label: str
    optimizer: str
    lr: float
    teleport: bool = True
    state_policy: StatePolicy = "keep"
    objective: str = "grad_norm"
    teleport_lr: float = 1e-7
    teleport_steps: int = 8


@dataclass(frozen=True)
class OptimizersConfig:
    """Settings of ``teleport-optimizers`` (dissertation §5.4, Figs 5.9-5.11).

    Regression (Fig 5.9; the ch. 4 problem, 5 runs, 300 steps, one teleport at step 5 with
    the exact action of Eq. 4.13 on both layer pairs, as the authors' regression code):

    Attributes:
        regression_runs, regression_steps, teleport_step: 5, 300, 5.
        momentum_lr: momentum SGD (β = 0.9) lr, not stated; 1e-4 (the ch. 4 GD lr).
        momentum_teleport_lr, momentum_teleport_steps: not stated; the ch. 4 GD teleport
            (8 steps at 1e-7).
        adagrad_lr: 1e-1 (ch. 4). adagrad_teleport_steps: not stated; 2 (the ch. 4 AdaGrad
            teleport). grad_norm_teleport_lr, preconditioned_teleport_lr: 1.2e-5 and 7.5e-3
            (paper: the largest that do not diverge).

    Classifier (Figs 5.10, 5.11):

    Attributes:
        dataset, data_dir: ``"digits"`` or ``"mnist"`` (50 000 train, official 10 000 test).
        hidden: 16, 10 (paper). epochs: 40 in the authors' code; quick 10. batch_size: 20.
        optimizers, learning_rates: text: AdaGrad 1e-4, others 5e-2; the authors' code:
            AdaGrad 1e-2, momentum 1e-3, RMSProp 1e-4, Adam 1e-4 (used in the paper preset,
            notes §9 item 9); quick: ten times those (digits has 68 steps per epoch, not 2500),
            AdaGrad 1e-1.
        teleport_epoch: 0 ("at the first epoch"; the authors' code: epoch 0, AdaGrad epoch 2).
        teleport_batches, teleport_batch_size, teleport_steps, teleport_lr: 8 × 200, 10, 5e-2.
        max_objective: ‖∇L‖² cap of the ascent (the authors' code: 100).
        max_loss_drift: relative loss change allowed per ascent step on the teleport batch;
            200 samples > 16 hidden units makes the action approximate, and the authors' code
            has no guard: 1e-2 here.
        runs, threads, seed, slope: as in ``teleport-mnist``; the state policy is "reset" (the
            authors' code re-creates the optimizer after teleporting).
    """

    seed: int = 0
    regression_runs: int = 5
    regression_steps: int = 300
    teleport_step: int = 5
    momentum_lr: float = 1e-4
    momentum_teleport_lr: float = 1e-7
    momentum_teleport_steps: int = 8
    adagrad_lr: float = 1e-1
    adagrad_teleport_steps: int = 2
    grad_norm_teleport_lr: float = 1.2e-5
    preconditioned_teleport_lr: float = 7.5e-3
    dataset: str = "digits"
    data_dir: str | None = None
    hidden: tuple[int, ...] = (16, 10)
    slope: float = 0.1
    epochs: int = 10
    batch_size: int = 20
    optimizers: tuple[str, ...] = ("adagrad", "momentum", "rmsprop", "adam")
    learning_rates: tuple[float, ...] = (1e-1, 1e-2, 1e-3, 1e-3)
    teleport_epoch: int = 0
    teleport_batches: int = 8
    teleport_batch_size: int = 200
    teleport_steps: int = 10
    teleport_lr: float = 5e-2
    max_objective: float = 100.0
    max_loss_drift: float = 1e-2
    early_epochs: int = 3
    runs: int = 3
    threads: int = 1


def regression_arms(config: OptimizersConfig) -> dict[str, list[RegressionArm]]:
    """Fig 5.9 (a) momentum policies (and a reset-only control), (b) AdaGrad objectives."""
    momentum = RegressionArm(
        "no teleport",
        "momentum",
        config.momentum_lr,
        teleport=False,
        teleport_lr=config.momentum_teleport_lr,
        teleport_steps=config.momentum_teleport_steps,
    )
    adagrad = RegressionArm(
        "no teleport",
        "adagrad",
        config.adagrad_lr,
        teleport=False,
        teleport_steps=config.adagrad_teleport_steps,
    )
    return {
        "momentum": [
            momentum,
            *(
                replace(momentum, label=policy, teleport=True, state_policy=policy)
                for policy in ("transform", "keep", "reset")
            ),
            replace(
                momentum,
                label="reset only (control)",
                teleport=True,
                state_policy="reset",
                teleport_steps=0,
            ),
        ],
        "adagrad": [
            adagrad,
            replace(
                adagrad, label="‖∇L‖₂²", teleport=True, teleport_lr=config.grad_norm_teleport_lr
            ),
            replace(
                adagrad,
                label="‖∇L‖²_A",
                teleport=True,
                objective="preconditioned_grad_norm",
                teleport_lr=config.preconditioned_teleport_lr,
            ),
        ],
    }


def run_regression_arm(arm: RegressionArm, seed: int, steps: int, at: int) -> Trajectory:
    """One regression run of ``arm`` (the problem drawn from ``seed``): teleport before step
    ``at`` with the first-order group element I + T (§4.6.1) on the exact action (4.13)."""
    model, batch = regression_problem(seed)
    optimizer = make_optimizer(arm.optimizer, model, arm.lr)
    tele = teleporter(
        model,
        half_squared_error,
        optimizer,
        layer_pair_actions(model, "inverse_GL"),
        schedule=ps.Schedule.at([at]) if arm.teleport else ps.Schedule.never(),
        data=lambda: batch,
        state_policy=arm.state_policy,
        config=ps.TeleportConfig(
            objective=arm.objective,
            steps=arm.teleport_steps,
            lr=arm.teleport_lr,
            parameterization="first_order",
            max_step_norm=None,
            allow_approximate=True,
            keep_worse=True,  # Algorithm 1 applies every teleport
        ),
    )
    return train_regression(model, tele, batch, steps)


def classifier_arms(config: OptimizersConfig) -> list[Arm]:
    if len(config.optimizers) != len(config.learning_rates):
        raise InvalidArgumentError(
            "teleport-optimizers: optimizers and learning_rates must have the same length"
        )
    arms = []
    for name, lr in zip(config.optimizers, config.learning_rates, strict=True):
        arms.append(Arm(LABELS[name], name, lr))
        arms.append(
            Arm(
                f"{LABELS[name]} + teleport",
                name,
                lr,
                (config.teleport_epoch,),
                config.teleport_batches,
                "reset",
            )
        )
    return arms


def run_optimizers(config: OptimizersConfig, progress: Progress) -> Result:
    """Fig 5.9 (regression: momentum policies, AdaGrad objectives) and Figs 5.10-5.11."""
    with torch_threads(config.threads):
        split = load_split(config.dataset, config.data_dir, config.seed, holdout="test")
        panels = regression_arms(config)
        jobs = [
            (p, a, r)
            for p, arms in panels.items()
            for a in arms
            for r in range(config.regression_runs)
        ]
        trajectories = {
            (panel, arm.label, run): run_regression_arm(
                arm, config.seed * 1000 + run, config.regression_steps, config.teleport_step
            )
            for panel, arm, run in progress.track(jobs, total=len(jobs), description="regression")
        }
        setup = mnist_setup(config)
        arms = classifier_arms(config)
        runs = [(arm, run) for run in range(config.runs) for arm in arms]
        curves = [
            (arm.label, run, run_arm(split, setup, arm, config.seed, run))
            for arm, run in progress.track(runs, total=len(runs), description="optimizers")
        ]
    pairs = [(LABELS[name], name) for name in config.optimizers]
    result = summarise_pairs(curves, pairs, config, split, early_epochs=config.early_epochs)
    result.metrics.update(_regression_metrics(trajectories, panels, config.teleport_step))
    result.series["regression"] = _regression_table(trajectories)
    result.metrics["regression_teleport_step"] = config.teleport_step
    result.notes += [
        "regression: the momentum buffer is transported as a covector (J⁻ᵀm) through the "
        "data-dependent action (Eq. 4.13) for 'transform', exact on the regression's 4 samples; "
        "'reset only (control)' resets the momentum at the same step without teleporting",
        "regression log-area: mean over the steps after the teleport of log10(loss)",
        f"regression teleport warnings: "
        f"{warning_counts([w for t in trajectories.values() for w in t.warnings])}",
        f"classifier: one teleport at epoch {config.teleport_epoch} on "
        f"{config.teleport_batches} batches of {config.teleport_batch_size}, optimizer state "
        "reset afterwards (the authors' code re-creates the optimizer)",
    ]
    return result


def _regression_metrics(
    trajectories: Mapping[tuple[str, str, int], Trajectory],
    panels: Mapping[str, Sequence[RegressionArm]],
    at: int,
) -> dict[str, Any]:
    metrics: dict[str, Any] = {}
    for panel, arms in panels.items():
        for arm in arms:
            runs = [
                t for (p, label, _), t in trajectories.items() if p == panel and label == arm.label
            ]
            key = f"{panel}[{arm.label}]"
            areas = [log_area(t.loss, at + 1) for t in runs]
            metrics[f"{key}_log_area"] = statistics.fmean(areas)
            metrics[f"{key}_log_area_per_run"] = areas
            metrics[f"{key}_final_loss"] = statistics.fmean(t.loss[-1] for t in runs)
            if arm.teleport and arm.teleport_steps > 0:
                metrics[f"{key}_grad_norm_gain"] = statistics.fmean(
                    t.teleport["grad_norm_gain"] for t in runs
                )
    return metrics


def _regression_table(
    trajectories: Mapping[tuple[str, str, int], Trajectory],
) -> dict[str, list[Any]]:
    table: dict[str, list[Any]] = {
        k: [] for k in ("panel", "arm", "run", "step", "loss", "grad_norm_sq")
    }
    for (panel, label, run), t in trajectories.items():
        for step, (loss, grad) in enumerate(zip(t.loss, t.grad_norm_sq, strict=True)):
            append_row(table, panel, label, run, step, loss, grad)
    return table


def _momentum_claim(result: Result) -> tuple[str, bool]:
    m = result.metrics
    base = m["momentum[no teleport]_log_area"]
    policies = {p: m[f"momentum[{p}]_log_area"] for p in ("transform", "keep", "reset")}
    control = m["momentum[reset only (control)]_log_area"]
    return (
        f"log-area after the teleport: none {base:.3f}, "
        + ", ".join(f"{p} {v:.3f}" for p, v in policies.items())
        + f" (reset without teleport {control:.3f})",
        all(v < base for v in policies.values()),
    )


def _momentum_similar(result: Result) -> tuple[str, bool]:
    m = result.metrics
    base = m["momentum[no teleport]_log_area"]
    values = [m[f"momentum[{p}]_log_area"] for p in ("transform", "keep", "reset")]
    spread, gain = max(values) - min(values), base - statistics.fmean(values)
    return (
        f"spread between policies {spread:.3f} vs mean improvement {gain:.3f} (log10 units); "
        f"final losses "
        + ", ".join(
            f"{p} {m[f'momentum[{p}]_final_loss']:.3g}" for p in ("transform", "keep", "reset")
        ),
        gain > 0 and spread < 0.5 * gain,
    )


def _adagrad_objective_claim(result: Result) -> tuple[str, bool]:
    m = result.metrics
    plain, precond = m["adagrad[‖∇L‖₂²]_log_area_per_run"], m["adagrad[‖∇L‖²_A]_log_area_per_run"]
    wins = sum(a < b for a, b in zip(precond, plain, strict=True))
    return (
        f"log-area: none {m['adagrad[no teleport]_log_area']:.3f}, ‖∇L‖₂² {_pm(plain)}, "
        f"‖∇L‖²_A {_pm(precond)}; ‖∇L‖²_A lower in {wins}/{len(plain)} runs; final loss "
        f"{m['adagrad[‖∇L‖₂²]_final_loss']:.3g} vs {m['adagrad[‖∇L‖²_A]_final_loss']:.3g}",
        statistics.fmean(precond) < statistics.fmean(plain),
    )


def _helps_adagrad(result: Result) -> tuple[str, bool]:
    m = result.metrics
    return (
        f"AdaGrad mean log10(L_teleport / L) over all epochs after the teleport = "
        f"{_pm(m['adagrad_train_log_ratio_per_run'])}; final training loss "
        f"{m['adagrad_teleport_final_train']:.4f} vs {m['adagrad_base_final_train']:.4f}",
        m["adagrad_train_log_ratio"] < 0,
    )


def _helps_early(result: Result) -> tuple[str, bool]:
    m = result.metrics
    keys = [k for k in ("momentum", "rmsprop", "adam") if f"{k}_early_log_ratio" in m]
    parts = [f"{LABELS[k]} {_pm(m[f'{k}_early_log_ratio_per_run'])}" for k in keys]
    return (
        "mean log10(L_teleport / L) over the early epochs: " + ", ".join(parts),
        bool(keys) and all(m[f"{k}_early_log_ratio"] < 0 for k in keys),
    )


def plot_optimizers(result: Result) -> dict[str, Any]:
    """Fig 5.9 (regression), Fig 5.10 (loss vs epoch) and Fig 5.11 (loss vs wall-clock)."""
    figures = {"momentum_adagrad_regression.png": _plot_regression(result)}
    optimizers = [
        arm for arm in dict.fromkeys(result.series["curves"]["arm"]) if "teleport" not in arm
    ]
    for filename, x in (("optimizers_epochs.png", "epoch"), ("optimizers_time.png", "seconds")):
        figure, axes = plt.subplots(1, len(optimizers), figsize=(4.6 * len(optimizers), 4.2))
        for ax, name in zip(np.atleast_1d(axes), optimizers, strict=True):
            arms = [name, f"{name} + teleport"]
            colours = dict(zip(arms, (COLOURS["no teleport"], COLOURS["teleport"]), strict=True))
            _plot_optimizer_panel(ax, result.series["curves"], arms, colours, x)
            ax.set_title(name)
        figure.suptitle(
            f"one teleport at the first epoch ({result.metrics['dataset']}), "
            + ("Fig 5.10" if x == "epoch" else "Fig 5.11")
        )
        figure.tight_layout()
        figures[filename] = figure
    return figures


def _plot_optimizer_panel(
    ax: Any, table: Mapping[str, list[Any]], arms: Sequence[str], colours: Mapping[str, str], x: str
) -> None:
    """Test loss solid with a ±1 std band, training loss dashed (Fig 5.10's convention)."""
    val, train = log_bands(table, "val_loss", x), log_bands(table, "train_loss", x)
    for arm in arms:
        plot_band(ax, *val[arm], color=colours[arm], label=f"{arm} (test)")
        xs, centre, _, _ = train[arm]
        ax.plot(xs, centre, color=colours[arm], linestyle="--", label=f"{arm} (train)")
    ax.set_yscale("log")
    ax.set_xlabel("epoch" if x == "epoch" else "wall-clock time (s)")
    ax.set_ylabel("loss")
    ax.legend(fontsize=7)


def _plot_regression(result: Result) -> Any:
    table = result.series["regression"]
    figure, axes = plt.subplots(1, 2, figsize=(12, 4.6))
    for ax, panel, title in zip(
        axes,
        ("momentum", "adagrad"),
        ("(a) momentum: what happens to the buffer", "(b) AdaGrad: teleport objective"),
        strict=True,
    ):
        rows = [i for i, p in enumerate(table["panel"]) if p == panel]
        sub = {
            "arm": [table["arm"][i] for i in rows],
            "run": [table["run"][i] for i in rows],
            "step": [table["step"][i] for i in rows],
            "loss": [table["loss"][i] for i in rows],
        }
        groups = log_bands(sub, "loss", "step")
        colours = {"no teleport": "black", **palette(list(groups)[1:])}
        for arm, band in groups.items():
            style = ":" if "control" in arm else "-"
            plot_band(ax, *band, color=colours[arm], linestyle=style, label=arm)
        ax.set_yscale("log")
        ax.set_xlabel("step")
        ax.set_ylabel("loss")
        ax.set_title(title)
        ax.legend(fontsize=8)
    figure.suptitle(
        f"teleport once at step {result.metrics['regression_teleport_step']} on the ch. 4 "
        "regression (geometric mean ± std over runs), Fig 5.9"
    )
    figure.tight_layout()
    return figure


experiment(
    "teleport-optimizers",
    seed_ref="seed 001, §5.4, Figs 5.9-5.11",
    description=(
        "(a) momentum (β 0.9, lr 1e-4: not stated) on the ch. 4 regression (U[0,1], "
        "LeakyReLU 0.1, 0.5‖·‖²), one teleport at step 5 (Eq. 4.13 action, 8 steps at 1e-7: "
        "not stated), buffer transformed / kept / reset; (b) AdaGrad lr 1e-1 teleported with "
        "‖∇L‖² (lr 1.2e-5) or ‖∇L‖²_A (7.5e-3), 2 steps (not stated); (c) AdaGrad, momentum, "
        "RMSProp, Adam on a 16-10 MLP classifier with one teleport at the first epoch on 8 "
        "batches of 200 (10 steps at 5e-2, optimizer state reset), vs epochs and wall-clock. "
        "Optimizer lrs: the authors' code (paper preset), ten times larger on digits (quick)"
    ),
    data="regression generated; digits (quick) or MNIST IDX files in --data-dir (paper)",
    quick=OptimizersConfig(),
    paper=OptimizersConfig(
        dataset="mnist",
        epochs=40,
        learning_rates=(1e-2, 1e-3, 1e-4, 1e-4),
        early_epochs=10,
        runs=5,
        threads=0,
    ),
    claims=[
        Claim(
            "momentum: teleporting improves convergence whatever is done with the buffer",
            "seed 001, §5.4.1, Fig 5.9a",
            "log-area of transform, keep and reset all below no teleport (5 runs)",
            _momentum_claim,
        ),
        Claim(
            "momentum: the three buffer policies give similar curves",
            "seed 001, §5.4.1, Fig 5.9a",
            "spread between policies < half their mean improvement",
            _momentum_similar,
        ),
        Claim(
            "AdaGrad: maximising ‖∇L‖_A has a slight advantage over ‖∇L‖₂",
            "seed 001, §5.4.1, Fig 5.9b",
            "mean log-area with ‖∇L‖²_A below ‖∇L‖₂² (5 runs)",
            _adagrad_objective_claim,
        ),
        Claim(
            "teleportation improves AdaGrad on MNIST",
            "seed 001, §5.4.2, Fig 5.10",
            "training loss with teleport below AdaGrad alone (mean log ratio < 0)",
            _helps_adagrad,
        ),
        Claim(
            "momentum, RMSProp and Adam improve only in the early epochs",
            "seed 001, §5.4.2, Fig 5.10 (first 10 of 40 epochs)",
            "mean log ratio over the early epochs < 0 for all three",
            _helps_early,
        ),
        Claim(
            "loss vs wall-clock looks like loss vs epoch: a teleport costs less than an epoch",
            "seed 001, §5.4.2, Fig 5.11",
            "teleport wall-clock / epoch wall-clock < 1 (same run)",
            teleport_cost_claim,
        ),
    ],
    plot=plot_optimizers,
)(run_optimizers)
