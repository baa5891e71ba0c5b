"""``permutation-alignment`` (seed 001, §3.3.1, the dissertation's [3], [41]).

The loss barrier between two independently trained MLPs before and after weight matching; the
classification data and training are exposed for ``benchmarks/bench_connectivity.py``.
"""

from __future__ import annotations

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
from paramsym import data as datasets
from paramsym.connectivity import (
    InterpolationResult,
    WeightMatchingConfig,
    linear_interpolation,
    weight_matching,
)
from paramsym.errors import InvalidArgumentError
from paramsym.experiments.connectivity.common import error_rate, generator, per_pair, spread
from paramsym.experiments.registry import Claim, Progress, Result, experiment

# == permutation-alignment (§3.3.1, Git Re-Basin) =================================================


@dataclass(frozen=True)
class AlignmentConfig:
    """Settings of ``permutation-alignment``.

    Attributes:
        seed: base seed; pair p trains networks with seeds ``seed·1000 + 2p`` and ``… + 2p + 1``
            (initialisation and minibatch order).
        dataset: ``"digits"``, ``"mnist1d"`` (always available) or ``"mnist"`` (IDX files in
            ``data_dir``).
        hidden: hidden widths of the ReLU MLP.
        pairs: independently trained pairs.
        epochs, batch_size, learning_rate: Adam training.
        alphas: chord points.
        matching_restarts: weight matching runs from this many random group orders (seeds
            0, 1, …); the permutation with the largest matching objective is kept.
        data_dir: directory with the MNIST files (from --data-dir / PARAMSYM_DATA).
    """

    seed: int = 0
    dataset: str = "digits"
    hidden: tuple[int, ...] = (128, 128)
    pairs: int = 3
    epochs: int = 20
    batch_size: int = 64
    learning_rate: float = 1e-3
    alphas: int = 21
    matching_restarts: int = 4
    data_dir: str | None = None


def classification_data(
    config: AlignmentConfig,
) -> tuple[tuple[Tensor, Tensor], tuple[Tensor, Tensor]]:
    """(train, test) float32 batches with flattened inputs."""
    if config.dataset == "digits":
        dataset = datasets.digits(seed=config.seed)
    elif config.dataset == "mnist1d":
        dataset = datasets.mnist1d(seed=42)
    elif config.dataset == "mnist":
        dataset = datasets.load("mnist", data_dir=config.data_dir)
    else:
        raise InvalidArgumentError(
            "permutation-alignment: dataset must be 'digits', 'mnist1d' or 'mnist', got "
            f"{config.dataset!r}"
        )

    def flat(x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
        return x.reshape(x.shape[0], -1).float(), y

    return flat(*dataset.train), flat(*dataset.test)


def train_classifier(
    widths: Sequence[int], train: tuple[Tensor, Tensor], config: AlignmentConfig, seed: int
) -> nn.Sequential:
    """A ReLU MLP trained with Adam and cross-entropy on shuffled minibatches."""
    model = ps.mlp(list(widths), "relu", seed=seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=config.learning_rate)
    loss_fn = nn.CrossEntropyLoss()
    order_generator = generator(seed)
    x, y = train
    for _ in range(config.epochs):
        order = torch.randperm(x.shape[0], generator=order_generator)
        for start in range(0, x.shape[0], config.batch_size):
            index = order[start : start + config.batch_size]
            optimizer.zero_grad()
            loss_fn(model(x[index]), y[index]).backward()
            optimizer.step()
    return model


@dataclass
class PairMeasurement:
    """Chords between network A and network B before and after weight matching."""

    objectives: list[float]
    naive_loss: InterpolationResult
    matched_loss: InterpolationResult
    naive_error: InterpolationResult
    matched_error: InterpolationResult
    matching_seconds: float
    distance_before: float
    distance_after: float
    function_change: float


def measure_pair(
    model_a: nn.Module,
    model_b: nn.Module,
    test: tuple[Tensor, Tensor],
    alphas: int,
    restarts: int,
) -> PairMeasurement:
    """Test loss and error along the chord A → B and A → π·B, π from weight matching
    with ``restarts`` random group orders (the best is kept)."""
    start = time.perf_counter()
    matched = weight_matching(model_a, model_b, config=WeightMatchingConfig(restarts=restarts))
    seconds = time.perf_counter() - start
    a, b = ps.params_of(model_a), ps.params_of(model_b)
    loss_fn = nn.CrossEntropyLoss()
    with torch.no_grad():
        x = test[0]
        change = float((ps.functional_call(model_a, matched.params, x) - model_b(x)).abs().max())
    return PairMeasurement(
        objectives=matched.restart_objectives,
        naive_loss=linear_interpolation(model_a, loss_fn, test, a, b, alphas),
        matched_loss=linear_interpolation(model_a, loss_fn, test, a, matched.params, alphas),
        naive_error=linear_interpolation(model_a, error_rate, test, a, b, alphas),
        matched_error=linear_interpolation(model_a, error_rate, test, a, matched.params, alphas),
        matching_seconds=seconds,
        distance_before=matched.distance_before,
        distance_after=matched.distance_after,
        function_change=change,
    )


def run_alignment(config: AlignmentConfig, progress: Progress) -> Result:
    train, test = classification_data(config)
    widths = [train[0].shape[1], *config.hidden, int(train[1].max()) + 1]
    pairs = []
    for p in progress.track(range(config.pairs), description="trained pairs"):
        seed = config.seed * 1000 + 2 * p
        model_a = train_classifier(widths, train, config, seed)
        model_b = train_classifier(widths, train, config, seed + 1)
        pairs.append(measure_pair(model_a, model_b, test, config.alphas, config.matching_restarts))
    curves: dict[str, list[Any]] = {
        "pair": [],
        "alpha": [],
        "loss_naive": [],
        "loss_matched": [],
        "error_naive": [],
        "error_matched": [],
    }
    for index, pair in enumerate(pairs):
        for column, values in (
            ("alpha", pair.naive_loss.alphas),
            ("loss_naive", pair.naive_loss.losses),
            ("loss_matched", pair.matched_loss.losses),
            ("error_naive", pair.naive_error.losses),
            ("error_matched", pair.matched_error.losses),
        ):
            curves[column].extend(values)
        curves["pair"].extend([index] * len(pair.naive_loss.alphas))

    def collect(get: Callable[[PairMeasurement], float]) -> list[float]:
        return per_pair([get(pair) for pair in pairs])

    metrics = {
        "widths": widths,
        "loss_barrier_naive": collect(lambda q: q.naive_loss.barrier),
        "loss_barrier_matched": collect(lambda q: q.matched_loss.barrier),
        "error_barrier_naive": collect(lambda q: q.naive_error.barrier),
        "error_barrier_matched": collect(lambda q: q.matched_error.barrier),
        "endpoint_test_error": collect(lambda q: q.naive_error.losses[0])
        + collect(lambda q: q.naive_error.losses[-1]),
        "distance_before": collect(lambda q: q.distance_before),
        "distance_after": collect(lambda q: q.distance_after),
        "matching_seconds": collect(lambda q: q.matching_seconds),
        "matching_objectives": [pair.objectives for pair in pairs],
        "restarts_at_best": [
            sum(j >= max(pair.objectives) * (1 - 1e-9) for j in pair.objectives) for pair in pairs
        ],
        "max_function_change": max(collect(lambda q: q.function_change)),
    }
    notes = [
        f"{config.dataset}: ReLU MLP {widths}, Adam lr {config.learning_rate:g}, batch "
        f"{config.batch_size}, {config.epochs} epochs, float32 (training hyperparameters chosen, "
        "not given in the dissertation)",
        "barrier = max over α of the test metric above the straight line between the ends "
        f"({config.alphas} α); weight matching: paramsym.weight_matching (coordinate descent) "
        f"from {config.matching_restarts} random group orders, the largest objective kept",
    ]
    return Result(metrics, {"chords": curves}, notes)


def plot_alignment(result: Result) -> dict[str, Any]:
    """Test loss and error along the chord between two trained MLPs, naive and after weight
    matching (Git Re-Basin's Fig. 2 axes), mean ± std over pairs."""
    chords = result.series["chords"]
    pair = np.array(chords["pair"])
    figure, axes = plt.subplots(1, 2, figsize=(11.0, 4.2))
    for ax, metric, label in (
        (axes[0], "loss", "test cross-entropy"),
        (axes[1], "error", "test error"),
    ):
        for kind, colour in (("naive", "tab:gray"), ("matched", "tab:green")):
            values = np.array(chords[f"{metric}_{kind}"])
            stacked = np.stack([values[pair == p] for p in sorted(set(pair.tolist()))])
            alpha = np.array(chords["alpha"])[pair == pair[0]]
            mean, std = stacked.mean(0), stacked.std(0)
            ax.plot(
                alpha, mean, color=colour, label="naive" if kind == "naive" else "weight matching"
            )
            ax.fill_between(alpha, mean - std, mean + std, color=colour, alpha=0.25)
        ax.set_xlabel("α (model A → model B)")
        ax.set_ylabel(label)
        ax.legend()
    axes[0].set_title("linear interpolation between two trained MLPs")
    figure.tight_layout()
    return {"permutation_alignment.png": figure}


def _barrier_reduction(r: Result) -> tuple[str, bool]:
    before, after = r.metrics["loss_barrier_naive"], r.metrics["loss_barrier_matched"]
    return (
        f"test-loss barrier {spread(before)} → {spread(after)} over {len(before)} pairs",
        all(a < 0.5 * b for a, b in zip(after, before, strict=True)),
    )


def _error_reduction(r: Result) -> tuple[str, bool]:
    before, after = r.metrics["error_barrier_naive"], r.metrics["error_barrier_matched"]
    return (
        f"test-error barrier {spread(before)} → {spread(after)}",
        statistics.fmean(after) < statistics.fmean(before),
    )


experiment(
    "permutation-alignment",
    seed_ref="seed 001, §3.3.1 (refs [3] Git Re-Basin, [41] Entezari et al.)",
    description=(
        "loss and error barriers on the test set along the chord between two independently "
        "trained ReLU MLPs, before and after permuting the second by weight matching (best of "
        "4 random group orders); chosen "
        "(the dissertation gives no training details): Adam lr 1e-3, cross-entropy, digits "
        "[64, 128, 128, 10] for 20 epochs (quick), MNIST [784, 512, 512, 512, 10] for 10 "
        "epochs at batch 128 (paper, Git Re-Basin's MLP)"
    ),
    data="digits (quick); mnist1d; MNIST IDX files in --data-dir (paper)",
    quick=AlignmentConfig(),
    paper=AlignmentConfig(
        dataset="mnist", hidden=(512, 512, 512), pairs=3, epochs=10, batch_size=128, alphas=25
    ),
    claims=[
        Claim(
            "permuting one network by weight matching removes most of the loss barrier between "
            "two SGD solutions (minima connected up to permutation)",
            "seed 001, §3.3.1; Git Re-Basin [3] / Entezari et al. [41]",
            "barrier after matching ≪ naive barrier (≈ 0 for wide MLPs on MNIST)",
            _barrier_reduction,
        ),
        Claim(
            "the error barrier shrinks too",
            "seed 001, §3.3.1; Git Re-Basin [3]",
            "error barrier after matching < naive",
            _error_reduction,
        ),
        Claim(
            "the permuted network computes the same function",
            "seed 001, §1 (permutation symmetry)",
            "max |f(π·θ_B) − f(θ_B)| ≈ 0 (float32)",
            lambda r: (
                f"{r.metrics['max_function_change']:.1e}",
                r.metrics["max_function_change"] < 1e-4,
            ),
        ),
    ],
    plot=plot_alignment,
)(run_alignment)
