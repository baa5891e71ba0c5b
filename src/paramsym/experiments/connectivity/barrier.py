"""``lmc-barrier`` (seed 001, Fig 3.2; Prop. 3.3.3, 3.3.4).

The chord between a minimum and its rescaled partner (same component) has the closed-form
barrier (B.5), unbounded in the scale m; the best permutation of the rescaled layer does not
remove it.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import torch
from torch import Tensor, nn

import paramsym as ps
from paramsym.connectivity import (
    InterpolationResult,
    apply_permutations,
    linear_interpolation,
    permutation_spec,
    rescaling_pair,
)
from paramsym.errors import InvalidArgumentError
from paramsym.experiments.connectivity.common import F64, generator, log_slope, sum_of_squares
from paramsym.experiments.registry import Claim, Progress, Result, experiment

# == lmc-barrier (Fig 3.2) ========================================================================


@dataclass(frozen=True)
class BarrierConfig:
    """Settings of ``lmc-barrier``.

    Attributes:
        seed: randomness of the deep network and its inputs.
        scales: rescaling factors m of W' = (…, m W_{l−1}, m^{−k} W_l).
        alphas: chord points (odd, so that α = ½ is one of them).
        widths, activation: the deep network (LeakyReLU, degree k = 1), with biases.
        samples: inputs X of the deep network; Y = f(X) makes W a zero-loss minimum.
    """

    seed: int = 0
    scales: tuple[float, ...] = (2.0, 10.0, 100.0, 1000.0)
    alphas: int = 41
    widths: tuple[int, ...] = (6, 12, 5, 3)
    activation: str = "leaky_relu"
    samples: int = 16


def _chord(
    model: nn.Module, batch: tuple[Tensor, Tensor], target_norm_sq: float, scale: float, alphas: int
) -> tuple[InterpolationResult, list[float]]:
    """The measured chord W → W' (Prop. 3.3.3) and the closed form (B.5) on the same α."""
    pair = rescaling_pair(model, scale)
    measured = linear_interpolation(
        model, sum_of_squares, batch, pair.params_a, pair.params_b, alphas
    )
    closed = [pair.barrier(a, target_norm_sq) for a in measured.alphas]
    return measured, closed


def _min_over_permutations(model: nn.Module, batch: tuple[Tensor, Tensor], scale: float) -> float:
    """min over permutations P of the last hidden layer of the loss at the midpoint of
    W and (…, P⁻¹ m W_{l−1}, W_l m^{−k} P), by brute force (Prop. 3.3.4)."""
    pair = rescaling_pair(model, scale)
    spec = permutation_spec(model)
    group = list(spec.slots)[-1]
    width = spec.resolve_widths(pair.params_b)[group]
    x, y = batch
    best = math.inf
    for order in itertools.permutations(range(width)):
        moved = apply_permutations(pair.params_b, spec, {group: torch.tensor(order)})
        middle = {k: 0.5 * (pair.params_a[k] + moved[k]) for k in moved}
        best = min(best, float(sum_of_squares(ps.functional_call(model, middle, x), y)))
    return best


def _deep_minimum(config: BarrierConfig) -> tuple[nn.Module, tuple[Tensor, Tensor], float]:
    """A random network W with Y := f_W(X), so that W is a zero-loss minimum; ‖Y − b_l‖²."""
    model = ps.mlp(list(config.widths), config.activation, dtype=F64, seed=config.seed)
    x = torch.randn(config.samples, config.widths[0], generator=generator(config.seed), dtype=F64)
    with torch.no_grad():
        y = model(x)
    output_bias = list(model.parameters())[-1].detach()
    return model, (x, y), float(((y - output_bias) ** 2).sum())


def run_barrier(config: BarrierConfig, progress: Progress) -> Result:
    if config.alphas % 2 == 0:
        raise InvalidArgumentError("lmc-barrier: alphas must be odd so that α = ½ is measured")
    scalar = ps.mlp([1, 1, 1], "identity", bias=False, dtype=F64)
    with torch.no_grad():
        for p in scalar.parameters():
            p.fill_(1.0)  # w2 w1 = 1: a minimum of (1 − w2 w1)²
    one = torch.ones(1, 1, dtype=F64)
    deep, batch, deep_norm = _deep_minimum(config)
    cases = {"scalar": (scalar, (one, one), 1.0), "deep": (deep, batch, deep_norm)}
    curves: dict[str, list[Any]] = {
        "network": [],
        "scale": [],
        "alpha": [],
        "loss": [],
        "closed_form": [],
    }
    summary: dict[str, list[Any]] = {
        "network": [],
        "scale": [],
        "barrier": [],
        "closed_form": [],
        "min_over_permutations": [],
    }
    deviation = 0.0
    for name, (model, data, norm) in cases.items():
        for scale in progress.track(config.scales, description=f"{name} scales"):
            measured, closed = _chord(model, data, norm, scale, config.alphas)
            for a, loss, c in zip(measured.alphas, measured.losses, closed, strict=True):
                curves["network"].append(name)
                curves["scale"].append(scale)
                curves["alpha"].append(a)
                curves["loss"].append(loss)
                curves["closed_form"].append(c)
                deviation = max(deviation, abs(loss - c) / max(1.0, abs(c)))
            summary["network"].append(name)
            summary["scale"].append(scale)
            summary["barrier"].append(measured.barrier)
            summary["closed_form"].append(closed[len(closed) // 2])  # α = ½
            summary["min_over_permutations"].append(
                _min_over_permutations(model, data, scale) if name == "deep" else math.nan
            )
    deep_rows = [i for i, n in enumerate(summary["network"]) if n == "deep"]
    scales = [summary["scale"][i] for i in deep_rows]
    barriers = [summary["barrier"][i] for i in deep_rows]
    permuted = [summary["min_over_permutations"][i] for i in deep_rows]
    scalar_barriers = [
        b for n, b in zip(summary["network"], summary["barrier"], strict=True) if n == "scalar"
    ]
    metrics = {
        "max_relative_deviation": deviation,
        "scales": list(config.scales),
        "scalar_barriers": scalar_barriers,
        "deep_barriers": barriers,
        "deep_target_norm_sq": deep_norm,
        "deep_log_slope": log_slope(scales, barriers),
        "min_over_permutations": permuted,
        "permutations_searched": math.factorial(config.widths[-2]),
    }
    notes = [
        "loss = ‖Y − f(X)‖² (sum of squares, Eq. 3.3); closed form (B.5) with ‖Y − b_l‖² for "
        "the deep net's output bias",
        "scalar case (Fig 3.2): w1 = w2 = 1, X = Y = 1; deep case: random LeakyReLU(0.01) net "
        f"{list(config.widths)} at the zero-loss minimum Y := f(X)",
        f"Prop 3.3.4: all {metrics['permutations_searched']} permutations of the last hidden "
        "layer searched at α = ½",
    ]
    return Result(metrics, {"chord": curves, "barrier": summary}, notes)


def plot_barrier(result: Result) -> dict[str, Any]:
    """Fig 3.2: loss along the chord between W and its rescaled partner (log y), and the
    barrier against m (log-log) with the closed form and the best permutation."""
    chord, summary = result.series["chord"], result.series["barrier"]
    figure, (left, right) = plt.subplots(1, 2, figsize=(11.0, 4.4))
    network = np.array(chord["network"])
    for scale in sorted(set(chord["scale"])):
        keep = (network == "scalar") & (np.array(chord["scale"]) == scale)
        alpha = np.array(chord["alpha"])[keep]
        loss = np.array(chord["loss"])[keep]
        closed = np.array(chord["closed_form"])[keep]
        inner = (alpha > 0) & (alpha < 1)
        (line,) = left.plot(alpha[inner], closed[inner], linewidth=1)
        left.plot(
            alpha[inner][::4],
            loss[inner][::4],
            "o",
            color=line.get_color(),
            ms=4,
            label=f"m = {scale:g}",
        )
    left.set_yscale("log")
    left.set_xlabel("α (chord (1 − α) W + α W')")
    left.set_ylabel("loss $(Y - w_2 w_1 X)^2$")
    left.set_title("scalar net, W' = (m w1, w2/m): dots measured, lines (B.5)")
    left.legend(loc="lower center", ncol=2)
    names = np.array(summary["network"])
    for name, marker in (("scalar", "o"), ("deep", "s")):
        keep = names == name
        scales = np.array(summary["scale"])[keep]
        right.plot(scales, np.array(summary["closed_form"])[keep], "-", color="gray", linewidth=1)
        right.plot(
            scales, np.array(summary["barrier"])[keep], marker, label=f"{name}: chord barrier"
        )
    keep = names == "deep"
    right.plot(
        np.array(summary["scale"])[keep],
        np.array(summary["min_over_permutations"])[keep],
        "x",
        ms=9,
        label="deep: min over permutations (α = ½)",
    )
    right.set_xscale("log")
    right.set_yscale("log")
    right.set_xlabel("rescaling m")
    right.set_ylabel("barrier")
    right.set_title("unbounded barrier (Prop 3.3.3-3.3.4); gray: closed form")
    right.legend()
    figure.tight_layout()
    return {"lmc_barrier.png": figure}


def _increasing(values: Sequence[float]) -> bool:
    return all(a < b for a, b in itertools.pairwise(values))


experiment(
    "lmc-barrier",
    seed_ref="seed 001, Fig 3.2; Prop 3.3.3, 3.3.4, Eq. B.5",
    description=(
        "linear mode connectivity fails inside one component: the chord between a minimum W and "
        "W' = (…, m W_{l−1}, m^{−k} W_l) has loss (1 − c(α))²‖Y‖² (Eq. B.5), unbounded in m; "
        "scalar net w2 w1 X (Fig 3.2) and a random LeakyReLU net at the zero-loss minimum "
        "Y := f(X); sum-of-squares loss; min over all permutations of the rescaled layer "
        "(Prop 3.3.4) by brute force"
    ),
    quick=BarrierConfig(),
    paper=BarrierConfig(
        scales=(2.0, 10.0, 100.0, 1000.0, 10000.0),
        alphas=101,
        widths=(16, 32, 7, 4),
        samples=64,
    ),
    claims=[
        Claim(
            "the loss along the chord equals the closed form (B.5)",
            "seed 001, Prop 3.3.3 / Eq. B.5 (notes: verified for LeakyReLU, m = 2, 10, 100)",
            "equal up to float64 rounding",
            lambda r: (
                f"max relative deviation {r.metrics['max_relative_deviation']:.1e}",
                r.metrics["max_relative_deviation"] < 1e-9,
            ),
        ),
        Claim(
            "the barrier between two minima of one component is unbounded",
            "seed 001, Fig 3.2 / Prop 3.3.3",
            "barrier grows without bound in m: ∝ m^{2k}, log-log slope 2(m+1)/(m−1) → 2k = 2 "
            "from above for LeakyReLU (at α = ½)",
            lambda r: (
                f"deep barriers {[f'{b:.3g}' for b in r.metrics['deep_barriers']]}, log-log "
                f"slope {r.metrics['deep_log_slope']:.3f}",
                _increasing(r.metrics["deep_barriers"])
                and _increasing(r.metrics["scalar_barriers"])
                and r.metrics["deep_log_slope"] > 1.9,
            ),
        ),
        Claim(
            "no permutation of the rescaled layer removes the barrier",
            "seed 001, Prop 3.3.4",
            "min over P of the midpoint loss → ∞ with m",
            lambda r: (
                [f"{v:.3g}" for v in r.metrics["min_over_permutations"]],
                _increasing(r.metrics["min_over_permutations"])
                and r.metrics["min_over_permutations"][-1]
                > 100 * r.metrics["min_over_permutations"][0],
            ),
        ),
    ],
    plot=plot_barrier,
)(run_barrier)
