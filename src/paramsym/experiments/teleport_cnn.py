"""Teleportation on a convolutional network (issue 12; dissertation §4.6.1, Fig 4.6 on a CNN).

``teleport-cnn`` (Fig 4.6 panels (a) and (c) on a CNN): SGD on the zoo's
:class:`~paramsym.nn.zoo.SimpleCNN` with and without one teleport right after the first epoch
(‖∇L‖² objective, on the symmetries ``ps.teleport`` finds on the traced graph: per-channel
rescalings of the ReLU layers and the softmax translation of the last layer), several runs.

The data, seeds, curves and plots are those of the MLP experiments in
:mod:`paramsym.experiments.teleport.training`; choices the dissertation does not make are in the
experiment's description and notes.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import torch
from torch import Tensor, nn

import paramsym as ps
from paramsym.errors import InvalidArgumentError
from paramsym.experiments.connectivity.common import spread
from paramsym.experiments.registry import Claim, Progress, Result, experiment
from paramsym.experiments.teleport.plotting import log_bands, plot_band, plot_losses
from paramsym.experiments.teleport.training import (
    COLOURS,
    Curve,
    Split,
    curve_table,
    image_split,
    log_ratio,
    mean_loss,
    recorded_warnings,
    run_seeds,
    squared_grad_norm,
    warning_counts,
)
from paramsym.experiments.threads import torch_threads
from paramsym.nn.zoo import SimpleCNN


@dataclass(frozen=True)
class TeleportCnnConfig:
    """Settings of ``teleport-cnn`` (dissertation §4.6.1, Fig 4.6, on a CNN).

    Attributes:
        seed: base seed; run r uses ``seed·1000 + r`` for the initialisation (shared by both
            arms), the mini-batch order (shared) and the teleport batches.
        dataset, data_dir: ``"digits"`` (8×8 images, Conv2d), ``"mnist1d"`` (40 samples,
            Conv1d) or ``"mnist"`` (28×28 IDX files in ``data_dir``; 48 000 / 12 000 split).
        channels: the two convolutions' widths of :class:`~paramsym.nn.zoo.SimpleCNN` (3×3,
            ReLU, no BatchNorm, a linear classifier on the flattened features).
        epochs, batch_size, lr: plain SGD (the paper: batch 20, lr 2e-3 on MNIST).
        teleport_epoch: teleport at the start of this epoch (1: right after the first epoch).
        teleport_batches, teleport_batch_size, teleport_steps: one teleport on 4 random
            mini-batches of 20, one after another, 10 ascent steps each (the paper).
        teleport_lr: ascent step on the algebra coordinates. The paper's 1e-3 (for its GL
            action) barely moves the rescaling orbits here (‖∇L‖² ×1.003 on digits).
        max_step_norm: bound on each ascent step ‖ξ‖ (``ps.teleport``'s default 1).
        max_objective: the ascent on a batch stops once ‖∇L‖² exceeds it (the authors' code:
            100). Rescaling orbits are not compact: without a cap the ascent can reach
            gradients that make the next SGD steps diverge (§4.6.2).
        early_epochs: epochs after the teleport over which "early convergence" is measured.
        runs: runs per arm.
        threads: torch intra-op threads (0: unchanged).
    """

    seed: int = 0
    dataset: str = "digits"
    data_dir: str | None = None
    channels: tuple[int, ...] = (8, 8)
    epochs: int = 15
    batch_size: int = 20
    lr: float = 1e-2
    teleport_epoch: int = 1
    teleport_batches: int = 4
    teleport_batch_size: int = 20
    teleport_steps: int = 10
    teleport_lr: float = 0.1
    max_step_norm: float = 1.0
    max_objective: float = 100.0
    early_epochs: int = 2
    runs: int = 5
    threads: int = 1


def small_cnn(dims: int, size: int, channels: Sequence[int], seed: int) -> SimpleCNN:
    """The zoo's :class:`~paramsym.nn.zoo.SimpleCNN` for one input channel and 10 classes,
    initialised (PyTorch's defaults) from ``seed`` without touching the global generator."""
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return SimpleCNN(
            dims=dims, in_channels=1, channels=tuple(channels), num_classes=10, input_size=size
        )


def full_gradient_norm_sq(model: nn.Module, loss_fn: nn.Module, x: Tensor, y: Tensor) -> float:
    """‖∇L‖² of the mean loss over the whole of ``(x, y)`` (accumulated over chunks)."""
    chunk = 4096
    model.zero_grad()
    for i in range(0, x.shape[0], chunk):
        part = slice(i, i + chunk)
        (loss_fn(model(x[part]), y[part]) * (len(y[part]) / x.shape[0])).backward()
    total = squared_grad_norm(model)
    model.zero_grad()
    return total


@dataclass
class TeleportMoment:
    """The whole-training-set ‖∇L‖² and loss right before and after the teleport (or, for the
    arm without teleport, at the same step), and what the teleport did."""

    grad_before: float
    grad_after: float
    loss_before: float
    loss_after: float
    batch_gains: list[float]
    stopped: list[str]
    symmetries: list[str]
    seconds: float


def train_cnn(
    split: Split,
    dims: int,
    size: int,
    config: TeleportCnnConfig,
    run: int,
    teleport: bool,
) -> tuple[Curve, TeleportMoment]:
    """One SGD run; with ``teleport`` one teleport at the start of ``config.teleport_epoch``."""
    base, order, batches = run_seeds(config.seed, run)
    model = small_cnn(dims, size, config.channels, base)
    optimizer = torch.optim.SGD(model.parameters(), lr=config.lr)
    loss_fn = nn.CrossEntropyLoss()
    x, y = split.x_train, split.y_train
    curve = Curve(
        [mean_loss(model, loss_fn, x, y)], [mean_loss(model, loss_fn, split.x_val, split.y_val)]
    )
    curve.seconds.append(0.0)
    moment = TeleportMoment(math.nan, math.nan, math.nan, math.nan, [], [], [], 0.0)
    clock = 0.0
    for epoch in range(1, config.epochs + 1):
        if epoch - 1 == config.teleport_epoch:
            moment.grad_before = full_gradient_norm_sq(model, loss_fn, x, y)
            moment.loss_before = mean_loss(model, loss_fn, x, y)
            if teleport:
                start = time.perf_counter()
                with recorded_warnings(curve.warnings):
                    for _ in range(config.teleport_batches):
                        index = torch.randperm(x.shape[0], generator=batches)
                        index = index[: config.teleport_batch_size]
                        result = ps.teleport(
                            model,
                            loss_fn,
                            (x[index], y[index]),
                            steps=config.teleport_steps,
                            lr=config.teleport_lr,
                            max_step_norm=config.max_step_norm,
                            max_objective=config.max_objective,
                        )
                        moment.batch_gains.append(
                            (result.grad_norm_after / result.grad_norm_before) ** 2
                        )
                        moment.stopped.append(result.stopped)
                        moment.symmetries = list(result.symmetries)
                moment.seconds = time.perf_counter() - start
                clock += moment.seconds
            moment.grad_after = full_gradient_norm_sq(model, loss_fn, x, y)
            moment.loss_after = mean_loss(model, loss_fn, x, y)
        permutation = torch.randperm(x.shape[0], generator=order)
        squared, steps, tick = 0.0, 0, time.perf_counter()
        for begin in range(0, x.shape[0], config.batch_size):
            index = permutation[begin : begin + config.batch_size]
            optimizer.zero_grad()
            loss_fn(model(x[index]), y[index]).backward()
            squared += squared_grad_norm(model)
            optimizer.step()
            steps += 1
        clock += time.perf_counter() - tick
        curve.grad_norm_sq.append(squared / steps)
        curve.seconds.append(clock)
        curve.train_loss.append(mean_loss(model, loss_fn, x, y))
        curve.val_loss.append(mean_loss(model, loss_fn, split.x_val, split.y_val))
    return curve, moment


ARMS = ("SGD", "SGD + teleport")


def run_teleport_cnn(config: TeleportCnnConfig, progress: Progress) -> Result:
    if not 0 <= config.teleport_epoch < config.epochs:
        raise InvalidArgumentError(
            f"teleport-cnn: teleport_epoch must be in [0, epochs), got {config.teleport_epoch}"
        )
    with torch_threads(config.threads):
        split, dims, size = image_split(
            config.dataset, config.data_dir, config.seed, holdout="validation"
        )
        jobs = [(run, arm) for run in range(config.runs) for arm in ARMS]
        done = {
            (run, arm): train_cnn(split, dims, size, config, run, arm != "SGD")
            for run, arm in progress.track(jobs, total=len(jobs), description="teleport-cnn")
        }
    curves = [(arm, run, done[(run, arm)][0]) for run, arm in jobs]
    base = [done[(r, "SGD")] for r in range(config.runs)]
    tele = [done[(r, "SGD + teleport")] for r in range(config.runs)]
    first, last = config.teleport_epoch + 1, config.epochs
    early_last = min(config.teleport_epoch + config.early_epochs, last)
    after = config.teleport_epoch + 1  # epoch whose mean ‖∇L‖² follows the teleport
    metrics: dict[str, Any] = {
        "dataset": split.name,
        "train_size": int(split.x_train.shape[0]),
        "val_size": int(split.x_val.shape[0]),
        "steps_per_epoch": math.ceil(split.x_train.shape[0] / config.batch_size),
        "parameters": sum(
            p.numel() for p in small_cnn(dims, size, config.channels, 0).parameters()
        ),
        "grad_gain_per_run": [
            t[1].grad_after / b[1].grad_before for t, b in zip(tele, base, strict=True)
        ],
        "same_point_before_teleport": max(
            abs(t[1].grad_before - b[1].grad_before) / b[1].grad_before
            for t, b in zip(tele, base, strict=True)
        ),
        "loss_change_at_teleport": max(
            abs(t[1].loss_after - t[1].loss_before) / t[1].loss_before for t in tele
        ),
        "batch_grad_gain": statistics.fmean(g for t in tele for g in t[1].batch_gains),
        "epoch_grad_ratio_per_run": [
            t[0].grad_norm_sq[after - 1] / b[0].grad_norm_sq[after - 1]
            for t, b in zip(tele, base, strict=True)
        ],
        "early_log_ratio_per_run": [
            log_ratio(t[0].train_loss, b[0].train_loss, first, early_last)
            for t, b in zip(tele, base, strict=True)
        ],
        "log_ratio_per_run": [
            log_ratio(t[0].train_loss, b[0].train_loss, first, last)
            for t, b in zip(tele, base, strict=True)
        ],
        "early_loss_base": statistics.fmean(b[0].train_loss[early_last] for b in base),
        "early_loss_teleport": statistics.fmean(t[0].train_loss[early_last] for t in tele),
        "final_train_base": statistics.fmean(b[0].train_loss[-1] for b in base),
        "final_train_teleport": statistics.fmean(t[0].train_loss[-1] for t in tele),
        "best_val_base": statistics.fmean(float(np.nanmin(b[0].val_loss)) for b in base),
        "best_val_teleport": statistics.fmean(float(np.nanmin(t[0].val_loss)) for t in tele),
        "teleport_seconds": statistics.fmean(t[1].seconds for t in tele),
        "epoch_seconds": statistics.fmean(
            c.seconds[-1] / config.epochs for c in (b[0] for b in base)
        ),
        "teleport_symmetries": tele[0][1].symmetries,
        "teleport_epoch": config.teleport_epoch,
        "early_epochs": early_last - config.teleport_epoch,
    }
    metrics["early_log_ratio"] = statistics.fmean(metrics["early_log_ratio_per_run"])
    metrics["log_ratio"] = statistics.fmean(metrics["log_ratio_per_run"])
    stops: dict[str, int] = {}
    for reason in (s for t in tele for s in t[1].stopped):
        stops[reason] = stops.get(reason, 0) + 1
    counts = warning_counts([w for c in (t[0] for t in tele) for w in c.warnings])
    notes = [
        f"{split.name}: SimpleCNN {dims}-D, channels {tuple(config.channels)}, 3×3 kernels, "
        f"ReLU, no BatchNorm ({metrics['parameters']} parameters), plain SGD lr {config.lr:g}, "
        f"batch {config.batch_size}, {config.epochs} epochs, {config.runs} runs; both arms of a "
        "run share the initialisation and the mini-batch order",
        f"teleport at the start of epoch {config.teleport_epoch} on {config.teleport_batches} "
        f"random mini-batches of {config.teleport_batch_size}, {config.teleport_steps} ascent "
        f"steps each at lr {config.teleport_lr:g} (‖ξ‖ ≤ {config.max_step_norm:g} per step, "
        f"stop once ‖∇L‖² > {config.max_objective:g}), along {metrics['teleport_symmetries']} "
        "(found by ps.teleport on the traced graph); the loss guard keeps the teleport batch's "
        "loss within 1e-4 (relative)",
        f"teleport ascents per stopping reason: {stops}"
        + (f"; warnings: {counts}" if counts else ""),
        "curves: loss on the whole training (solid) and validation (dashed) sets after each "
        "epoch; gradient norm: the mean over an epoch's steps of the squared mini-batch ‖∇L‖²; "
        "grad_gain: whole-training-set ‖∇L‖² right after the teleport / the run without "
        "teleport at the same step (the same parameters before the teleport)",
        "chosen (the dissertation's Fig 4.6 is an MLP with the GL pseudo-inverse action): the "
        "CNN, the SGD lr for digits, and the teleport lr (1e-3 in the paper) — see the config",
    ]
    return Result(metrics, curve_table(curves), notes)


def plot_teleport_cnn(result: Result) -> dict[str, Any]:
    """Fig 4.6 (a) and (c) on a CNN: training (solid) and validation (dashed) loss, and the
    mean squared mini-batch gradient norm per epoch, with and without one teleport
    (geometric mean ± std over runs; the dotted line marks the teleport)."""
    figure, (left, right) = plt.subplots(1, 2, figsize=(11, 4.3))
    table, gradients = result.series["curves"], result.series["gradients"]
    colours = {"SGD": COLOURS["no teleport"], "SGD + teleport": COLOURS["teleport"]}
    plot_losses(left, table, list(ARMS), colours)
    left.set_title("(a) SGD on a CNN: loss")
    grads = log_bands(gradients, "grad_norm_sq")
    for arm in ARMS:
        plot_band(right, *grads[arm], color=colours[arm], label=arm)
    right.set_yscale("log")
    right.set_xlabel("epoch")
    right.set_ylabel("mean ‖∇L‖² of the epoch's mini-batches")
    right.set_title("(c) SGD on a CNN: gradient norm")
    at = result.metrics.get("teleport_epoch")
    for axes in (left, right):
        if isinstance(at, (int, float)):
            axes.axvline(at, color="gray", linestyle=":", linewidth=1, label="teleport")
        axes.legend(fontsize=8)
    figure.suptitle(f"teleport after epoch {at} ({result.metrics.get('dataset')}), Fig 4.6")
    figure.tight_layout()
    return {"teleport_cnn.png": figure}


def _gradient_claim(result: Result) -> tuple[str, bool]:
    m = result.metrics
    gains = m["grad_gain_per_run"]
    epoch = m["epoch_grad_ratio_per_run"]
    return (
        f"whole-training-set ‖∇L‖² ×{spread(gains, 3)} right after the teleport vs without "
        f"(min ×{min(gains):.3g}, {len(gains)} runs; per teleport batch ×"
        f"{m['batch_grad_gain']:.3g}); next epoch's mean mini-batch ‖∇L‖² ×{spread(epoch, 3)}",
        all(g > 1 for g in gains),
    )


def _loss_ratio_claim(
    ratio: str, span: str, loss: str, loss_label: str
) -> Callable[[Result], tuple[str, bool]]:
    """The check that the training loss is lower with teleportation: metric ``ratio`` (the mean
    log ratio, per run in ``<ratio>_per_run``) over ``span`` (formatted with the metrics), and
    the training losses ``<loss>_teleport`` / ``<loss>_base`` shown as ``loss_label``."""

    def check(result: Result) -> tuple[str, bool]:
        m = result.metrics
        per_run = m[f"{ratio}_per_run"]
        return (
            f"mean log10(L_teleport / L) over {span.format(**m)} after the teleport = "
            f"{spread(per_run, 3)} ({sum(v < 0 for v in per_run)}/{len(per_run)} runs < 0); "
            f"{loss_label} {m[f'{loss}_teleport']:.4f} with vs {m[f'{loss}_base']:.4f} without",
            m[ratio] < 0,
        )

    check.__name__ = f"{ratio}_claim"
    return check


_early_claim = _loss_ratio_claim(
    "early_log_ratio", "the {early_epochs} epochs", "early_loss", "training loss then"
)
_whole_run_claim = _loss_ratio_claim(
    "log_ratio", "every epoch", "final_train", "final training loss"
)


def _validation_claim(result: Result) -> tuple[str, bool]:
    m = result.metrics
    ratio = m["best_val_teleport"] / m["best_val_base"]
    return (
        f"best validation loss {m['best_val_teleport']:.4f} with vs {m['best_val_base']:.4f} "
        f"without (ratio {ratio:.3f})",
        ratio > 0.95,
    )


experiment(
    "teleport-cnn",
    seed_ref="seed 001, §4.6.1, Fig 4.6 (on a CNN)",
    description=(
        "SGD on a small CNN (the zoo's SimpleCNN: two 3×3 convolutions, ReLU, linear "
        "classifier) with and without one teleport right after the first epoch on 4 "
        "mini-batches of 20, 10 ascent steps each, maximising ‖∇L‖² along the symmetries "
        "ps.teleport finds on the traced graph (per-channel rescalings, softmax translation). "
        "Chosen (the paper's Fig 4.6 is an MLP on MNIST): channels (8, 8), SGD lr 1e-2, batch "
        "20, 15 epochs, teleport lr 0.1 with ‖ξ‖ ≤ 1 per step and the authors' cap ‖∇L‖² ≤ "
        "100, 5 runs on digits (quick)"
    ),
    data="digits (quick); mnist1d (Conv1d); MNIST IDX files in --data-dir (paper)",
    quick=TeleportCnnConfig(),
    paper=TeleportCnnConfig(
        dataset="mnist", channels=(16, 32), epochs=20, lr=2e-3, runs=3, threads=0
    ),
    claims=[
        Claim(
            "teleportation increases the gradient norm",
            "seed 001, Fig 4.6c (§4.6.1)",
            "‖∇L‖² right after the teleport > without teleport at the same step, every run",
            _gradient_claim,
        ),
        Claim(
            "SGD: the training loss decreases faster with teleportation (early epochs)",
            "seed 001, Fig 4.6a (§4.6.1: teleportation speeds up early convergence)",
            "training loss with teleport below SGD alone over the epochs right after it "
            "(mean log ratio < 0)",
            _early_claim,
        ),
        Claim(
            "SGD: the training loss stays lower with teleportation for the rest of training",
            "seed 001, Fig 4.6a",
            "mean log ratio over every epoch after the teleport < 0",
            _whole_run_claim,
        ),
        Claim(
            "the effect of teleportation on the validation loss is limited",
            "seed 001, Fig 4.6a (dashed) / §4.6.1",
            "best validation loss with teleport not > 5% lower than without",
            _validation_claim,
        ),
    ],
    plot=plot_teleport_cnn,
)(run_teleport_cnn)
