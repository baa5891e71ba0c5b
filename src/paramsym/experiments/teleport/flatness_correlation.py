"""``sharpness-curvature-correlation`` (seed 001, dissertation §5.2, Table 5.1, Figs 5.3, 5.4).

Many 3-layer LeakyReLU(0.1) MLPs without biases are trained with SGD (mini-batch 20); for
each, the sharpness φ (Eq. 5.1, :func:`paramsym.sharpness`) and the mean orbit curvature ψ
(Eq. 5.2, :func:`paramsym.mean_orbit_curvature`) are measured at the final weights, and their
Pearson r with the validation loss is reported with its p-value and a 95% confidence interval
(Fisher z). Beside them: r(training loss, validation loss) and r(φ − L, validation loss), since
φ as defined is mostly the training loss itself (notes 001b §3).

Settings follow the authors' public code ``correlation.py`` where the text is silent (notes
001b §3, §9.10-11): the models differ only by their initialisation, the mini-batch order is
the data set's order, the "validation" loss is the official test set's, φ and ψ are averaged
over probe batches of 200 training samples, directions and algebra elements have U[0, 1)
entries normalised ("orthant"), ψ uses the inverse-activation GL action (Eq. 4.13) on both
layer pairs at once, MNIST uses the text's radii and Fashion-MNIST / CIFAR-10 the code's
{0.0001, 0.0011, …, 0.0191}. The quick preset varies the learning rate and the number of
epochs as well as the initialisation, so that 30 digits models span a range of fits.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import scipy.stats
import torch
from torch import nn

import paramsym as ps
import paramsym.data
from paramsym.core.tables import append_row, empty_table, table_rows
from paramsym.errors import InvalidArgumentError
from paramsym.experiments.registry import Claim, Progress, Result, experiment
from paramsym.experiments.teleport.training import Split, layer_pair_actions
from paramsym.experiments.threads import torch_threads
from paramsym.teleportation.flatness import TEXT_RADII

CODE_RADII: tuple[float, ...] = tuple(round(0.0001 + 0.001 * i, 4) for i in range(20))
"""T of the authors' code for Fashion-MNIST and CIFAR-10: {0.0001, 0.0011, …, 0.0191}."""

PAPER_R: dict[str, tuple[float, float]] = {
    "mnist": (0.704, -0.050),
    "fashion_mnist": (0.790, -0.232),
    "cifar10": (0.899, -0.167),
}
"""Table 5.1: (r(φ, val), r(ψ, val)) per data set."""

DATASETS = ("digits", "mnist1d", "mnist", "fashion_mnist", "cifar10")
QUANTITIES = ("sharpness", "curvature", "train_loss", "excess_sharpness")
COLUMNS = "dataset run lr epochs train_loss val_loss probe_loss sharpness curvature"


@dataclass(frozen=True)
class CorrelationConfig:
    """Settings of ``sharpness-curvature-correlation``.

    Attributes:
        seed: base seed; model r is initialised with ``seed·100003 + r``.
        datasets: any of ``digits``, ``mnist1d`` (always available), ``mnist``,
            ``fashion_mnist``, ``cifar10`` (files in ``data_dir``).
        data_dir: directory with the data files (from --data-dir / PARAMSYM_DATA).
        runs: models per data set (paper: 100).
        hidden, cifar_hidden: hidden widths (paper: 16, 10; CIFAR-10 128, 32).
        slope: LeakyReLU slope (paper: 0.1).
        learning_rates, cifar_learning_rates: SGD lrs, model r uses entry ``r mod len``
            (paper: 0.01; CIFAR-10 0.02).
        epochs: epochs per model, model r uses entry ``(r // len(learning_rates)) mod len``
            (paper: 40).
        batch_size: SGD mini-batch (paper: 20).
        shuffle: reshuffle the training set every epoch (the authors' code: no).
        train_samples: training examples used (MNIST and Fashion-MNIST: a random 50 000 of the
            60 000, as the authors' code; 0: all).
        probe_batches, probe_batch_size: φ and ψ are averaged over this many random training
            batches of this size (the authors' code: 200 of 200).
        directions: directions per probe batch for φ (|D| = probe_batches · directions).
        curves: algebra elements per probe batch for ψ (k = probe_batches · curves).
        radii: the displacements T; empty: the text's for MNIST-like data (digits, MNIST-1D,
            MNIST), the code's for Fashion-MNIST and CIFAR-10.
        threads: torch intra-op threads during the run (0: unchanged).
    """

    seed: int = 0
    datasets: tuple[str, ...] = ("digits",)
    data_dir: str | None = None
    runs: int = 30
    hidden: tuple[int, ...] = (16, 10)
    cifar_hidden: tuple[int, ...] = (128, 32)
    slope: float = 0.1
    learning_rates: tuple[float, ...] = (0.01, 0.03, 0.1)
    cifar_learning_rates: tuple[float, ...] = (0.02,)
    epochs: tuple[int, ...] = (2, 5, 10)
    batch_size: int = 20
    shuffle: bool = True
    train_samples: int = 0
    probe_batches: int = 4
    probe_batch_size: int = 200
    directions: int = 10
    curves: int = 2
    radii: tuple[float, ...] = ()
    threads: int = 1


def correlation_split(name: str, config: CorrelationConfig) -> Split:
    """Flattened float32 inputs and labels; the "validation" part is the test set."""
    if name not in DATASETS:
        raise InvalidArgumentError(
            f"sharpness-curvature-correlation: datasets must be among {DATASETS}, got {name!r}"
        )
    if name == "digits":
        data = paramsym.data.digits(seed=config.seed)
    elif name == "mnist1d":
        data = paramsym.data.mnist1d(seed=config.seed)
    else:
        data = paramsym.data.load(name, data_dir=config.data_dir)
    x, y = data.train
    x = x.reshape(x.shape[0], -1).float()
    x_val = data.x_test.reshape(data.x_test.shape[0], -1).float()
    keep = config.train_samples or (50_000 if name in ("mnist", "fashion_mnist") else 0)
    if keep and keep < x.shape[0]:
        order = torch.randperm(x.shape[0], generator=torch.Generator().manual_seed(config.seed))
        x, y = x[order[:keep]], y[order[:keep]]
    return Split(name, x, y, x_val, data.y_test)


def radii_for(name: str, config: CorrelationConfig) -> tuple[float, ...]:
    """The displacements T used on data set ``name``."""
    if config.radii:
        return tuple(config.radii)
    return CODE_RADII if name in ("fashion_mnist", "cifar10") else TEXT_RADII


def train_model(
    split: Split, hidden: tuple[int, ...], lr: float, epochs: int, config: CorrelationConfig,
    seed: int,
) -> nn.Sequential:  # fmt: skip
    """SGD on the cross-entropy from PyTorch's default initialisation (seeded)."""
    classes = int(max(split.y_train.max(), split.y_val.max())) + 1
    model = ps.mlp(
        [split.inputs, *hidden, classes], nn.LeakyReLU(config.slope), bias=False, seed=seed
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    loss_fn = nn.CrossEntropyLoss()
    generator = torch.Generator().manual_seed(seed)
    n = split.x_train.shape[0]
    for _ in range(epochs):
        order = torch.randperm(n, generator=generator) if config.shuffle else torch.arange(n)
        for start in range(0, n, config.batch_size):
            batch = order[start : start + config.batch_size]
            optimizer.zero_grad()
            loss_fn(model(split.x_train[batch]), split.y_train[batch]).backward()
            optimizer.step()
    return model


def measure(
    model: nn.Sequential, split: Split, radii: tuple[float, ...], config: CorrelationConfig,
    seed: int,
) -> tuple[float, float, float]:  # fmt: skip
    """(loss at θ, φ, ψ), each averaged over the probe batches (ψ in float64)."""
    loss_fn = nn.CrossEntropyLoss()
    symmetries = layer_pair_actions(model, "inverse_GL")
    generator = torch.Generator().manual_seed(seed)
    params64 = {k: v.detach().double() for k, v in model.named_parameters()}
    losses, phis, psis = [], [], []
    for _ in range(config.probe_batches):
        pick = torch.randperm(split.x_train.shape[0], generator=generator)
        pick = pick[: config.probe_batch_size]
        batch = (split.x_train[pick], split.y_train[pick])
        with torch.no_grad():
            losses.append(float(loss_fn(model(batch[0]), batch[1])))
            phi = ps.sharpness(
                model, loss_fn, batch, radii, config.directions, generator, distribution="orthant"
            )
        psi = ps.mean_orbit_curvature(
            model, symmetries, config.curves, generator, params64, batch[0].double()
        )
        phis.append(float(phi))
        psis.append(float(psi))
    return float(np.mean(losses)), float(np.mean(phis)), float(np.mean(psis))


def pearson(x: np.ndarray, y: np.ndarray) -> dict[str, Any]:
    """Pearson r, two-sided p-value and 95% confidence interval (Fisher z); NaN when
    undefined (fewer than 4 finite pairs or a constant column)."""
    keep = np.isfinite(x) & np.isfinite(y)
    x, y = x[keep], y[keep]
    if x.size < 4 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return {"r": math.nan, "p": math.nan, "ci": [math.nan, math.nan], "n": int(x.size)}
    result = scipy.stats.pearsonr(x, y)
    low, high = result.confidence_interval(0.95)
    return {
        "r": float(result.statistic),
        "p": float(result.pvalue),
        "ci": [float(low), float(high)],
        "n": int(x.size),
    }


def quantities(table: dict[str, list[Any]], name: str) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Data set ``name``'s validation losses and the four quantities correlated with them."""
    rows = table_rows(table, dataset=name)
    sharp = np.array(rows["sharpness"])
    return np.array(rows["val_loss"]), {
        "sharpness": sharp,
        "curvature": np.array(rows["curvature"]),
        "train_loss": np.array(rows["train_loss"]),
        "excess_sharpness": sharp - np.array(rows["probe_loss"]),
    }


def run_correlation(config: CorrelationConfig, progress: Progress) -> Result:
    """Train ``runs`` models per data set, measure φ, ψ and the losses, correlate."""
    if config.runs < 4:
        raise InvalidArgumentError(
            f"sharpness-curvature-correlation: runs must be ≥ 4 for a correlation, got "
            f"{config.runs}"
        )
    table = empty_table(COLUMNS)
    metrics: dict[str, Any] = {"datasets": list(config.datasets), "runs": config.runs}
    loss_fn = nn.CrossEntropyLoss()
    with torch_threads(config.threads):
        splits = [correlation_split(name, config) for name in config.datasets]
        for split in splits:
            cifar = split.name == "cifar10"
            hidden = tuple(config.cifar_hidden if cifar else config.hidden)
            lrs = config.cifar_learning_rates if cifar else config.learning_rates
            radii = radii_for(split.name, config)
            for run in progress.track(range(config.runs), description=split.name):
                seed = config.seed * 100003 + run
                lr = lrs[run % len(lrs)]
                epochs = config.epochs[(run // len(lrs)) % len(config.epochs)]
                model = train_model(split, hidden, lr, epochs, config, seed)
                with torch.no_grad():
                    train = float(loss_fn(model(split.x_train), split.y_train))
                    val = float(loss_fn(model(split.x_val), split.y_val))
                probe, phi, psi = measure(model, split, radii, config, seed)
                append_row(table, split.name, run, lr, epochs, train, val, probe, phi, psi)
            val_losses, columns = quantities(table, split.name)
            for quantity, values in columns.items():
                for key, value in pearson(values, val_losses).items():
                    metrics[f"{split.name}_{quantity}_{key}"] = value
            metrics[f"{split.name}_radii"] = list(radii)
            metrics[f"{split.name}_val_loss_range"] = [
                float(val_losses.min()),
                float(val_losses.max()),
            ]
    notes = [
        "φ: mean over the probe batches of ps.sharpness (orthant directions, the authors' "
        "code); excess_sharpness is φ minus the loss at θ on the same probe batches",
        "ψ: ps.mean_orbit_curvature on the inverse-activation GL actions (Eq. 4.13) of both "
        "layer pairs composed, in float64, one probe batch as the action's data",
    ]
    return Result(metrics, {"models": table}, notes)


def _fmt(m: dict[str, Any], name: str, quantity: str) -> str:
    low, high = m[f"{name}_{quantity}_ci"]
    return (
        f"{name}: r = {m[f'{name}_{quantity}_r']:+.3f} (95% CI [{low:+.2f}, {high:+.2f}], "
        f"p = {m[f'{name}_{quantity}_p']:.1e}, n = {m[f'{name}_{quantity}_n']})"
    )


def _paper(name: str, index: int) -> str:
    return f" [paper {PAPER_R[name][index]:+.3f}]" if name in PAPER_R else ""


def sharpness_claim(result: Result) -> tuple[str, bool]:
    """φ correlates strongly and significantly positively with the validation loss."""
    m = result.metrics
    parts = [_fmt(m, n, "sharpness") + _paper(n, 0) for n in m["datasets"]]
    holds = all(m[f"{n}_sharpness_r"] > 0.5 and m[f"{n}_sharpness_p"] < 0.01 for n in m["datasets"])
    return "; ".join(parts), holds


def curvature_claim(result: Result) -> tuple[str, bool]:
    """ψ correlates negatively and more weakly than φ with the validation loss."""
    m = result.metrics
    parts = [_fmt(m, n, "curvature") + _paper(n, 1) for n in m["datasets"]]
    holds = all(
        m[f"{n}_curvature_r"] < 0 and abs(m[f"{n}_curvature_r"]) < m[f"{n}_sharpness_r"]
        for n in m["datasets"]
    )
    return "; ".join(parts), holds


def training_loss_claim(result: Result) -> tuple[str, bool]:
    """The training loss alone correlates with the validation loss about as well as φ."""
    m = result.metrics
    parts = [_fmt(m, n, "train_loss") for n in m["datasets"]]
    holds = all(m[f"{n}_train_loss_r"] >= m[f"{n}_sharpness_r"] - 0.1 for n in m["datasets"])
    return "; ".join(parts), holds


def excess_claim(result: Result) -> tuple[str, bool]:
    """φ − L (the sharpness beyond the loss at θ) still correlates positively."""
    m = result.metrics
    parts = [_fmt(m, n, "excess_sharpness") for n in m["datasets"]]
    holds = all(
        m[f"{n}_excess_sharpness_r"] > 0 and m[f"{n}_excess_sharpness_p"] < 0.05
        for n in m["datasets"]
    )
    return "; ".join(parts), holds


LABELS = {
    "sharpness": "sharpness φ",
    "curvature": "curvature ψ",
    "train_loss": "training loss L",
    "excess_sharpness": "φ − L (probe batches)",
}


def plot_correlation(result: Result) -> dict[str, Any]:
    """Figs 5.3 (φ), 5.4 (ψ) and the two controls: one point per model, y = validation loss;
    one row per data set."""
    table = result.series["models"]
    names = result.metrics["datasets"]
    figure, axes = plt.subplots(
        len(names), len(QUANTITIES), figsize=(4 * len(QUANTITIES), 3.4 * len(names)),
        squeeze=False,
    )  # fmt: skip
    for row, name in enumerate(names):
        val, values = quantities(table, name)
        for col, quantity in enumerate(QUANTITIES):
            ax = axes[row, col]
            ax.scatter(values[quantity], val, s=12, alpha=0.7)
            ax.set_xlabel(LABELS[quantity])
            ax.set_ylabel("validation loss")
            ax.ticklabel_format(axis="x", style="sci", scilimits=(-2, 3))  # φ − L is ~1e-3
            ax.set_title(f"{name}: r = {result.metrics[f'{name}_{quantity}_r']:+.3f}")
    figure.tight_layout()
    return {"sharpness_curvature_correlation.png": figure}


experiment(
    "sharpness-curvature-correlation",
    seed_ref="seed 001, Table 5.1, Figs 5.3, 5.4",
    description=(
        "Pearson r of the sharpness φ (Eq. 5.1) and of the orbit curvature ψ (Eq. 5.2) with "
        "the validation loss over many 3-layer LeakyReLU(0.1) MLPs without biases trained "
        "with SGD (batch 20), with p-values and Fisher-z 95% intervals, beside r(training "
        "loss, val) and r(φ − L, val). As the authors' code: models differ by initialisation "
        "only, no shuffling, validation = test set, φ and ψ averaged over 200 probe batches "
        "of 200 (orthant directions / algebra elements, ψ on the Eq. 4.13 actions of both "
        "layer pairs). Quick: 30 digits models varying lr (0.01-0.1) and epochs (2-10)"
    ),
    data="digits (quick); MNIST, Fashion-MNIST IDX and CIFAR-10 python files in --data-dir "
    "(paper); mnist1d also accepted",
    quick=CorrelationConfig(),
    paper=CorrelationConfig(
        datasets=("mnist", "fashion_mnist", "cifar10"),
        runs=100,
        learning_rates=(0.01,),
        cifar_learning_rates=(0.02,),
        epochs=(40,),
        shuffle=False,
        probe_batches=200,
        directions=1,
        curves=1,
        threads=0,
    ),
    claims=[
        Claim(
            "sharpness correlates strongly positively with the validation loss",
            "seed 001, Table 5.1, Fig 5.3",
            "r(φ, val) > 0.5 with p < 0.01 on every data set (paper 0.704 / 0.790 / 0.899)",
            sharpness_claim,
        ),
        Claim(
            "curvature correlates weakly negatively with the validation loss",
            "seed 001, Table 5.1, Fig 5.4",
            "r(ψ, val) < 0 and |r(ψ, val)| < r(φ, val) on every data set (paper −0.050 / "
            "−0.232 / −0.167)",
            curvature_claim,
        ),
        Claim(
            "the training loss predicts the validation loss about as well as φ",
            "notes 001b §3 (φ is dominated by the training loss)",
            "r(L_train, val) ≥ r(φ, val) − 0.1 on every data set",
            training_loss_claim,
        ),
        Claim(
            "sharpness beyond the training loss still predicts the validation loss",
            "notes 001b §3 (digits check: r(φ − L, val) = −0.175, p = 0.46)",
            "r(φ − L, val) > 0 with p < 0.05 on every data set",
            excess_claim,
        ),
    ],
    plot=plot_correlation,
)(run_correlation)
