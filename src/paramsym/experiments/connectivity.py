"""Experiments of seed 001, chapter 3 (Zhao et al., "Understanding Mode Connectivity via
Parameter Space Symmetry", ICML 2025): mode connectivity through parameter-space symmetry.

* ``minimum-components`` (Fig 3.1; Prop. 3.2.1, Cor. 3.2.2, Prop. 3.2.3, 3.3.2): the minimum of
  the 1-D three-layer network has 4 components, 3 with the residual connection; the minimum of
  a square full-rank linear network of depth l has 2^{l−1}, whatever the width; same-label
  minima are joined by zero-loss paths and odd permutations join all components.
* ``lmc-barrier`` (Fig 3.2; Prop. 3.3.3, 3.3.4): the chord between a minimum and its rescaled
  partner (same component) has the closed-form barrier (B.5), unbounded in the scale m; the
  best permutation of the rescaled layer does not remove it.
* ``symmetry-curves`` (Fig 3.3a-c; Eqs. 3.5-3.6, Prop. 3.4.1, Thm 3.4.2): the pseudo-inverse map
  changes a layer's output by at most its norm; the loss along the curve exp(t log g)·w stays
  below the loss along the chord; chord points lie within Thm 3.4.2's d_max of the level set
  (measured as the distance to the orbit of w, an upper bound).
* ``permutation-alignment`` (§3.3.1, the dissertation's [3], [41]): the loss barrier between two
  independently trained MLPs before and after weight matching.

Everything that checks an identity runs in float64; classification training in float32.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
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
    align_components,
    apply_permutations,
    chord_distance,
    component_label,
    curve_geometry,
    layer_output_change,
    linear_interpolation,
    linear_path,
    losses_along,
    minimum_path,
    permutation_spec,
    rescaling_pair,
    residual_minimum_components,
    square_linear_minimum,
    symmetry_path,
    weight_matching,
)
from paramsym.core.params import flatten
from paramsym.errors import InvalidArgumentError
from paramsym.experiments.registry import Claim, Progress, Result, experiment
from paramsym.symmetry.nonlinear import DataDependentGL

F64 = torch.float64
ZERO_LOSS = 1e-16
"""‖Y − f‖²/‖Y‖² below this counts as zero loss: a relative residual of 1e-8, float64 rounding
amplified by the conditioning of products of up to five random 8 × 8 matrices and inverses."""

# -- shared helpers -------------------------------------------------------------------------------


def generator(seed: int) -> torch.Generator:
    """A CPU generator seeded with ``seed``."""
    return torch.Generator().manual_seed(seed)


def sum_of_squares(output: Tensor, target: Tensor) -> Tensor:
    """‖Y − f(X)‖²_F, the loss of Eq. 3.3 (a sum, not a mean: the closed form (B.5) needs it)."""
    return ((output - target) ** 2).sum()


def error_rate(output: Tensor, target: Tensor) -> Tensor:
    """1 − accuracy, a lower-is-better metric for :func:`linear_interpolation`."""
    return (output.argmax(dim=-1) != target).double().mean()


def gradient_descent(
    model: nn.Module,
    batch: tuple[Tensor, Tensor],
    loss_fn: Callable[[Tensor, Tensor], Tensor],
    learning_rate: float,
    steps: int,
) -> float:
    """Full-batch gradient descent (SGD on the whole batch) in place; returns the final loss."""
    optimizer = torch.optim.SGD(model.parameters(), lr=learning_rate)
    x, y = batch
    for _ in range(steps):
        optimizer.zero_grad()
        loss_fn(model(x), y).backward()
        optimizer.step()
    with torch.no_grad():
        return float(loss_fn(model(x), y))


def log_slope(xs: Sequence[float], ys: Sequence[float]) -> float:
    """d log y / d log x between the last two points."""
    return math.log(ys[-1] / ys[-2]) / math.log(xs[-1] / xs[-2])


def spread(values: Sequence[float], digits: int = 4) -> str:
    """``mean ± std`` (or the single value), the mean to ``digits`` significant digits."""
    if len(values) == 1:
        return f"{values[0]:.{digits}g}"
    return f"{statistics.fmean(values):.{digits}g} ± {statistics.stdev(values):.2g}"


def _per_pair(values: Sequence[float]) -> list[float]:
    return [float(v) for v in values]


# == minimum-components (Fig 3.1) =================================================================


@dataclass(frozen=True)
class ComponentsConfig:
    """Settings of ``minimum-components``.

    Attributes:
        seed: randomness of the data X, Y and the sampled minima.
        epsilons: skip-connection strengths ε of the 1-D residual network (ε = 0: none).
        resolution, box, cap: the chart grid of :func:`residual_minimum_components`
            (``resolution``² points on [−box, box]², |w_3| ≤ cap kept).
        depths, widths: the square linear networks (l layers of h × h weights).
        samples_per_component: random minima drawn per expected component (2^{l−1}·this).
        path_points: points at which the zero-loss paths are checked.
    """

    seed: int = 0
    epsilons: tuple[float, ...] = (0.0, 1.0)
    resolution: int = 241
    box: float = 3.0
    cap: float = 10.0
    depths: tuple[int, ...] = (2, 3, 4)
    widths: tuple[int, ...] = (2, 3)
    samples_per_component: int = 12
    path_points: int = 11


@dataclass
class SquareChainSummary:
    """What one (depth, width) square linear network showed."""

    depth: int
    width: int
    samples: int
    labels: int
    max_fit_error: float
    max_path_loss: float
    aligned: int
    alignment_cases: int


def _square_chain(depth: int, width: int, config: ComponentsConfig) -> SquareChainSummary:
    """Sample minima f(g) (Eq. B.1), count their labels, join same-label pairs by
    :func:`minimum_path` and every label to the first by :func:`align_components` (Prop. 3.3.2),
    measuring the largest loss (relative to ‖Y‖²) along all paths."""
    model = ps.mlp([width] * (depth + 1), "identity", bias=False, dtype=F64)
    g = generator(config.seed * 7919 + 97 * depth + width)
    x = torch.randn(width, width, generator=g, dtype=F64)
    y = torch.randn(width, width, generator=g, dtype=F64)
    scale = float((y**2).sum())
    samples = config.samples_per_component * 2 ** (depth - 1)
    by_label: dict[tuple[int, ...], list[dict[str, Tensor]]] = {}
    fit_error = 0.0
    for _ in range(samples):
        elements = [torch.randn(width, width, generator=g, dtype=F64) for _ in range(depth - 1)]
        point = square_linear_minimum(model, elements, x, y)
        fit_error = max(fit_error, float(sum_of_squares(ps.functional_call(model, point, x), y)))
        by_label.setdefault(component_label(model, point, x), []).append(point)

    def path_loss(a: Mapping[str, Tensor], b: Mapping[str, Tensor]) -> float:
        path = minimum_path(model, a, b, x, y)
        losses = losses_along(model, sum_of_squares, (x, y), path, config.path_points)
        return float(losses.max()) / scale

    worst = 0.0
    for points in by_label.values():
        if len(points) >= 2:
            worst = max(worst, path_loss(points[0], points[1]))
    reference = next(iter(by_label.values()))[0]
    aligned = 0
    for points in by_label.values():
        moved = align_components(model, points[0], reference)
        same_function = (
            float(sum_of_squares(ps.functional_call(model, moved.params, x), y)) / scale < ZERO_LOSS
        )
        if moved.label_after == moved.reference_label and same_function:
            aligned += 1
            worst = max(worst, path_loss(moved.params, reference))
    return SquareChainSummary(
        depth, width, samples, len(by_label), fit_error / scale, worst, aligned, len(by_label)
    )


def run_components(config: ComponentsConfig, progress: Progress) -> Result:
    metrics: dict[str, Any] = {}
    residual: dict[str, list[Any]] = {"epsilon": [], "w1": [], "w2": [], "w3": [], "component": []}
    counts = []
    for epsilon in config.epsilons:
        found = residual_minimum_components(
            epsilon, x=1.0, y=1.0, box=config.box, resolution=config.resolution, cap=config.cap
        )
        counts.append(found.count)
        metrics[f"residual_components_eps{epsilon:g}"] = found.count
        keep = torch.randperm(found.points.shape[0], generator=generator(config.seed))[:3000]
        for point, label in zip(
            found.points[keep].tolist(), found.labels[keep].tolist(), strict=True
        ):
            residual["epsilon"].append(epsilon)
            residual["w1"].append(point[0])
            residual["w2"].append(point[1])
            residual["w3"].append(point[2])
            residual["component"].append(label)
    metrics["residual_components"] = counts
    metrics["residual_epsilons"] = list(config.epsilons)
    chains = [
        _square_chain(depth, width, config)
        for depth, width in progress.track(
            list(itertools.product(config.depths, config.widths)), description="linear nets"
        )
    ]
    table = {f.name: [getattr(c, f.name) for c in chains] for f in dataclasses.fields(chains[0])}
    metrics["labels_found"] = table["labels"]
    metrics["labels_expected"] = [2 ** (c.depth - 1) for c in chains]
    metrics["max_fit_error"] = max(table["max_fit_error"])
    metrics["max_path_loss"] = max(table["max_path_loss"])
    metrics["aligned"] = sum(table["aligned"])
    metrics["alignment_cases"] = sum(table["alignment_cases"])
    notes = [
        "components of the 1-D residual minimum counted on a chart grid "
        f"(w_3 = Y/(X(w1 w2 + ε)), {config.resolution}² points on "
        f"[−{config.box:g}, {config.box:g}]², |w3| ≤ {config.cap:g})",
        "square linear nets: X, Y and the chart coordinates g_i have i.i.d. N(0, 1) entries; "
        "path losses are ‖Y − f‖² / ‖Y‖² along minimum_path (zero-loss curve in GL_h^{l−1})",
    ]
    return Result(metrics, {"residual": residual, "square_linear": table}, notes)


def plot_components(result: Result) -> dict[str, Any]:
    """Fig 3.1: the minimum {w3(w2 w1 + ε) = 1} in 3-D, one colour per component; and the
    number of labels of the square linear nets against 2^{l−1}."""
    residual = result.series["residual"]
    epsilons = sorted(set(residual["epsilon"]))
    figure = plt.figure(figsize=(5.0 * len(epsilons), 4.6))
    eps = np.array(residual["epsilon"])
    for i, epsilon in enumerate(epsilons):
        axes = figure.add_subplot(1, len(epsilons), i + 1, projection="3d")
        keep = eps == epsilon
        colour = np.array(residual["component"])[keep]
        axes.scatter(
            np.array(residual["w1"])[keep],
            np.array(residual["w2"])[keep],
            np.array(residual["w3"])[keep],
            c=colour,
            cmap="tab10",
            vmin=0,
            vmax=9,
            s=2,
        )
        axes.set_xlabel("$w_1$")
        axes.set_ylabel("$w_2$")
        axes.set_zlabel("$w_3$")
        count = len(set(colour.tolist()))
        kind = "no skip" if epsilon == 0 else f"skip ε = {epsilon:g}"
        axes.set_title(f"$w_3(w_2 w_1 + ε) = 1$, {kind}: {count} components")
    figure.tight_layout()
    table = result.series["square_linear"]
    bars, axes2 = plt.subplots(figsize=(6.0, 4.2))
    labels = [f"l={d}, h={w}" for d, w in zip(table["depth"], table["width"], strict=True)]
    positions = np.arange(len(labels))
    axes2.bar(positions, table["labels"], color="tab:blue", label="labels found")
    axes2.scatter(
        positions,
        [2 ** (d - 1) for d in table["depth"]],
        color="k",
        marker="_",
        s=400,
        label="$2^{l-1}$",
        zorder=3,
    )
    axes2.set_xticks(positions, labels, rotation=30)
    axes2.set_yscale("log", base=2)
    axes2.set_ylim(bottom=1)
    axes2.set_ylabel("components (sign-det labels)")
    axes2.set_title("square linear networks (Cor. 3.2.2)")
    axes2.legend()
    bars.tight_layout()
    return {"minimum_components.png": figure, "linear_components.png": bars}


def _residual_counts(r: Result) -> tuple[dict[str, int], bool]:
    """Prop. 3.2.3: 4 components for ε = 0, 3 for ε ≠ 0."""
    pairs = zip(r.metrics["residual_epsilons"], r.metrics["residual_components"], strict=True)
    counts = {f"ε={e:g}": c for e, c in pairs}
    expected = [4 if e == 0 else 3 for e in r.metrics["residual_epsilons"]]
    return counts, r.metrics["residual_components"] == expected


def _labels_match(r: Result) -> tuple[str, bool]:
    found, expected = r.metrics["labels_found"], r.metrics["labels_expected"]
    return f"found {found}, 2^(l−1) = {expected}", found == expected


experiment(
    "minimum-components",
    seed_ref="seed 001, Fig 3.1; Prop 3.2.1, Cor 3.2.2, Prop 3.2.3, Prop 3.3.2",
    description=(
        "connected components of minima: the 1-D 3-layer network w3 w2 w1 X = Y without and "
        "with the skip connection εX (X = Y = 1), counted on a chart grid; square full-rank "
        "linear nets, random minima from the chart f(g) of Eq. B.1 labelled by sign det, "
        "joined by zero-loss paths, and aligned across components by odd permutations"
    ),
    presets={
        "quick": ComponentsConfig(),
        "paper": ComponentsConfig(
            resolution=601, depths=(2, 3, 4, 5), widths=(2, 3, 5, 8), samples_per_component=16
        ),
    },
    claims=[
        Claim(
            "the minimum of the 1-D 3-layer net has 4 components, 3 with the residual connection",
            "seed 001, Fig 3.1 / Prop 3.2.3",
            "4 (ε = 0) and 3 (ε ≠ 0)",
            _residual_counts,
        ),
        Claim(
            "the minimum of a square linear net of depth l has 2^(l−1) components, for any width",
            "seed 001, Prop 3.2.1 / Cor 3.2.2",
            "2^(l−1) sign-det labels for every (l, h)",
            _labels_match,
        ),
        Claim(
            "minima with the same label are joined by a path on the minimum (zero loss)",
            "seed 001, Prop 3.2.1 (homeomorphism to GL_h^(l−1))",
            "max ‖Y − f‖²/‖Y‖² along the paths ≈ 0 (< 1e-16: float64 rounding)",
            lambda r: (
                f"{r.metrics['max_path_loss']:.2e}",
                r.metrics["max_path_loss"] < ZERO_LOSS,
            ),
        ),
        Claim(
            "permutations connect every component to every other (mode connectivity up to "
            "permutation, h ≥ 2)",
            "seed 001, Prop 3.3.2 (with the corrected action (P1W1, P2W2P1⁻¹, …, WlPl−1⁻¹))",
            "every label moved onto the reference's, same function",
            lambda r: (
                f"{r.metrics['aligned']}/{r.metrics['alignment_cases']} aligned",
                r.metrics["aligned"] == r.metrics["alignment_cases"],
            ),
        ),
    ],
    plot=plot_components,
)(run_components)


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
    presets={
        "quick": BarrierConfig(),
        "paper": BarrierConfig(
            scales=(2.0, 10.0, 100.0, 1000.0, 10000.0),
            alphas=101,
            widths=(16, 32, 7, 4),
            samples=64,
        ),
    },
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


# == symmetry-curves (Fig 3.3) ====================================================================


@dataclass(frozen=True)
class CurvesConfig:
    """Settings of ``symmetry-curves``.

    Attributes:
        seed: base seed.
        nets: random two-layer sigmoid nets of Fig 3.3a.
        size_low, size_high: m, h, n, k ~ uniform integers in [size_low, size_high].
        train_steps, learning_rate: full-batch GD on ‖Uσ(VX) − Y‖²/k before the map (Fig 3.3a),
            step ``learning_rate / λ`` (:func:`stable_learning_rate`).
        inputs, samples, hidden, outputs: the LeakyReLU net of Figs 3.3b-c (X ∈ R^{16×8},
            W1 ∈ R^{32×16}, W2 ∈ R^{64×32}, Y ∈ R^{64×8}).
        curve_train_steps, curve_learning_rate: GD to the minimum the curves start from.
        curves: random curves per panel (the paper: 5).
        scales: size of the algebra element M of g = exp(M) for panels (b) and (c).
        points: t values on [0, 1].
        geometry_points: t values at which the curvature is sampled (Thm 3.4.2).
        orbit_probes, orbit_iterations: interior chord points whose distance to the orbit of w
            is minimised by L-BFGS (:func:`distance_to_orbit`), and its iterations.
    """

    seed: int = 0
    nets: int = 100
    size_low: int = 2
    size_high: int = 100
    train_steps: int = 100
    learning_rate: float = 0.5
    inputs: int = 16
    samples: int = 8
    hidden: int = 32
    outputs: int = 64
    curve_train_steps: int = 1000
    curve_learning_rate: float = 0.05
    curves: int = 5
    scales: tuple[float, float] = (0.5, 1.5)
    points: int = 21
    geometry_points: int = 17
    orbit_probes: int = 3
    orbit_iterations: int = 30


def per_sample_squares(output: Tensor, target: Tensor) -> Tensor:
    """‖Y − f(X)‖²_F / k (k samples): the loss of Figs 3.3a-c, normalised per sample."""
    return ((output - target) ** 2).sum() / output.shape[0]


def _pinv_symmetry(model: nn.Module) -> DataDependentGL:
    """The pseudo-inverse map of Eq. 3.6 on the hidden layer of a two-layer net."""
    found = [s for s in ps.symmetries(model, data_dependent=True) if s.name.startswith("pinv_GL")]
    symmetry = found[0]
    assert isinstance(symmetry, DataDependentGL)
    return symmetry


def stable_learning_rate(model: nn.Sequential, x: Tensor, fraction: float) -> float:
    """``fraction / λ`` with λ = 2‖σ(VX)‖₂²/k, the largest Hessian eigenvalue of
    ‖Uσ(VX) − Y‖²/k in U: a step size that GD on the last layer tolerates whatever m, h, n, k."""
    with torch.no_grad():
        hidden = model[1](model[0](x))
        top = float(torch.linalg.matrix_norm(hidden, ord=2)) ** 2
    return fraction * x.shape[0] / (2.0 * top)


def _output_change_scatter(config: CurvesConfig, progress: Progress) -> dict[str, list[Any]]:
    """Fig 3.3a: per random trained sigmoid net, ‖Uσ(VX)‖ and ‖Uσ(VX) − U'σ(V'X)‖ for a random
    Gaussian g (entries N(0, 1/h), invertible almost surely)."""
    rng = np.random.default_rng(config.seed)
    columns = ("m", "h", "n", "k", "output_norm", "change_norm", "exact", "train_loss")
    table: dict[str, list[Any]] = {k: [] for k in columns}
    for i in progress.track(range(config.nets), description="Fig 3.3a nets"):
        m, h, n, k = (int(v) for v in rng.integers(config.size_low, config.size_high + 1, 4))
        seed = config.seed * 100_003 + i
        g = generator(seed)
        model = ps.mlp([n, h, m], "sigmoid", bias=False, dtype=F64, seed=seed)
        x = torch.randn(k, n, generator=g, dtype=F64)
        y = torch.randn(k, m, generator=g, dtype=F64)
        rate = stable_learning_rate(model, x, config.learning_rate)
        loss = gradient_descent(model, (x, y), per_sample_squares, rate, config.train_steps)
        element = torch.randn(h, h, generator=g, dtype=F64) / math.sqrt(h)
        change = layer_output_change(_pinv_symmetry(model), ps.params_of(model), element, x)
        values = (m, h, n, k, change.output_norm, change.change_norm, k <= h, loss)
        for key, value in zip(columns, values, strict=True):
            table[key].append(value)
    return table


def distance_to_orbit(
    symmetry: DataDependentGL,
    params: Mapping[str, Tensor],
    x: Tensor,
    point: Mapping[str, Tensor],
    start: Tensor,
    iterations: int,
) -> float:
    """min over ξ of ‖exp(ξ)·w − p‖ by L-BFGS from ``start``: a local optimum, hence an upper
    bound on the distance from p to the orbit of w, and so to the level set L⁻¹(L(w)) when the
    action is exact on the batch (never above the distance from ``exp(start)·w``)."""
    xi = start.detach().clone().requires_grad_()
    target = flatten(point).detach()
    optimizer = torch.optim.LBFGS([xi], max_iter=iterations, line_search_fn="strong_wolfe")

    def objective() -> Tensor:
        return ((flatten(symmetry.act(params, symmetry.exp(xi), x)) - target) ** 2).sum()

    def closure() -> Tensor:
        optimizer.zero_grad()
        value = objective()
        value.backward()
        return value

    with torch.no_grad():
        initial = float(objective())
    optimizer.step(closure)
    with torch.no_grad():
        return math.sqrt(min(initial, float(objective())))


def _curve_panel(
    model: nn.Module,
    batch: tuple[Tensor, Tensor],
    scale: float,
    config: CurvesConfig,
    seed: int,
) -> tuple[dict[str, list[float]], list[dict[str, float]]]:
    """Loss along γ(t) = exp(tM)·w (Eqs. 3.5-3.6) and along its chord for ``config.curves``
    random M (coordinates N(0, scale²/h)), and Thm 3.4.2's d_max against the distances of the
    chord from the sampled curve and (at ``orbit_probes`` interior points) from the orbit of w,
    which lies in the level set because the map is exact on the batch (k ≤ h)."""
    symmetry = _pinv_symmetry(model)
    w = ps.params_of(model)
    x, _ = batch
    ts = torch.linspace(0.0, 1.0, config.points, dtype=F64)
    gamma_losses, chord_losses, bounds = [], [], []
    for c in range(config.curves):
        xi = torch.randn(symmetry.dim, generator=generator(seed + c), dtype=F64)
        xi = xi * scale / math.sqrt(symmetry.width)
        gamma = symmetry_path(symmetry, w, xi=xi, x=x)
        gamma_losses.append(losses_along(model, per_sample_squares, batch, gamma, ts))
        chord = linear_path(gamma(ts[0]), gamma(ts[-1]))
        chord_losses.append(losses_along(model, per_sample_squares, batch, chord, ts))
        geometry = curve_geometry(gamma, config.geometry_points)
        probes = torch.linspace(0.0, 1.0, config.orbit_probes + 2, dtype=F64)[1:-1]
        orbit = max(
            distance_to_orbit(symmetry, w, x, chord(t), t * xi, config.orbit_iterations)
            for t in probes
        )
        record = {
            "kappa_max": geometry.kappa_max,
            "length": geometry.length,
            "chord_length": geometry.chord_length,
            "d_max": math.nan,
            "curve_distance": chord_distance(gamma, config.points, 4 * config.points),
            "orbit_distance": orbit,
        }
        if (
            geometry.kappa_max * geometry.length <= math.pi
            and geometry.kappa_max * geometry.chord_length <= 2
        ):
            record["d_max"] = geometry.chord_bound().d_max
        bounds.append(record)
    stacked_gamma, stacked_chord = torch.stack(gamma_losses), torch.stack(chord_losses)
    curve = {
        "t": ts.tolist(),
        "gamma_mean": stacked_gamma.mean(0).tolist(),
        "gamma_std": stacked_gamma.std(0).tolist(),
        "chord_mean": stacked_chord.mean(0).tolist(),
        "chord_std": stacked_chord.std(0).tolist(),
        "gamma_below_chord": [
            float((g <= ch + 1e-12 * (1 + ch.abs())).all())
            for g, ch in zip(stacked_gamma, stacked_chord, strict=True)
        ],
    }
    return curve, bounds


def run_curves(config: CurvesConfig, progress: Progress) -> Result:
    scatter = _output_change_scatter(config, progress)
    g = generator(config.seed + 1)
    x = torch.randn(config.samples, config.inputs, generator=g, dtype=F64)
    y = torch.randn(config.samples, config.outputs, generator=g, dtype=F64)
    model = ps.mlp(
        [config.inputs, config.hidden, config.outputs],
        "leaky_relu",
        bias=False,
        dtype=F64,
        seed=config.seed + 1,
    )
    start_loss = gradient_descent(
        model, (x, y), per_sample_squares, config.curve_learning_rate, config.curve_train_steps
    )
    series: dict[str, dict[str, list[Any]]] = {"output_change": scatter}
    metrics: dict[str, Any] = {}
    bounds_table: dict[str, list[Any]] = {
        k: []
        for k in (
            "panel",
            "kappa_max",
            "length",
            "chord_length",
            "d_max",
            "curve_distance",
            "orbit_distance",
        )
    }
    for panel, scale in progress.track(
        list(zip("bc", config.scales, strict=True)), description="curves"
    ):
        curve, bounds = _curve_panel(model, (x, y), scale, config, config.seed * 1000 + ord(panel))
        series[f"curve_{panel}"] = {k: v for k, v in curve.items() if k != "gamma_below_chord"}
        interior = slice(1, -1)
        chord_excess = max(c - curve["chord_mean"][0] for c in curve["chord_mean"][interior])
        gamma_excess = max(abs(v - curve["gamma_mean"][0]) for v in curve["gamma_mean"])
        metrics[f"{panel}_scale"] = scale
        metrics[f"{panel}_curves_below_chord"] = int(sum(curve["gamma_below_chord"]))
        metrics[f"{panel}_chord_barrier"] = chord_excess
        metrics[f"{panel}_gamma_max_change"] = gamma_excess
        for record in bounds:
            bounds_table["panel"].append(panel)
            for key, value in record.items():
                bounds_table[key].append(value)
    series["chord_bound"] = bounds_table
    norms, changes = np.array(scatter["output_norm"]), np.array(scatter["change_norm"])
    applicable = [i for i, d in enumerate(bounds_table["d_max"]) if math.isfinite(d)]
    metrics.update(
        {
            "nets": config.nets,
            "nets_above_diagonal": int((changes <= norms * (1 + 1e-12)).sum()),
            "max_change_ratio": float((changes / norms).max()),
            "exact_nets": int(sum(scatter["exact"])),
            "max_exact_change_ratio": float(
                max(
                    (c / o for c, o, e in zip(changes, norms, scatter["exact"], strict=True) if e),
                    default=0.0,
                )
            ),
            "start_loss": start_loss,
            "curves": config.curves,
            "chord_bound_applicable": len(applicable),
            "curve_distance_within_bound": sum(
                bounds_table["curve_distance"][i] <= bounds_table["d_max"][i] * (1 + 1e-9)
                for i in applicable
            ),
            "chord_bound_holds": sum(
                bounds_table["orbit_distance"][i] <= bounds_table["d_max"][i] * (1 + 1e-9)
                for i in applicable
            ),
        }
    )
    notes = [
        "Fig 3.3a: g has i.i.d. N(0, 1/h) entries; the nets are trained by full-batch GD "
        f"(lr {config.learning_rate:g}, {config.train_steps} steps) on ‖Uσ(VX) − Y‖²/k, PyTorch's "
        "default initialisation, no biases",
        "Figs 3.3b-c: W2 ∈ R^{64×32} (the text's R^{32} is a typo); the loss is ‖Y − W2σ(W1X)‖²/k; "
        "k = 8 ≤ h = 32, so the map of Eq. 3.6 is exact on X and the loss along γ is constant; "
        f"g = exp(M), M with i.i.d. N(0, s²/h) entries, s = {config.scales[0]:g} (b) and "
        f"{config.scales[1]:g} (c); γ(t) = exp(tM)·w",
        "Thm 3.4.2 is checked only on curves of length ≤ π/κ_max (notes erratum), κ_max sampled "
        f"at {config.geometry_points} points; distance = chord's distance to the sampled curve",
    ]
    return Result(metrics, series, notes)


def plot_curves(result: Result) -> dict[str, Any]:
    """Fig 3.3a: output norm against output change (all above y = x); Figs 3.3b-c: loss along
    γ and along the chord, mean ± std over the curves."""
    scatter = result.series["output_change"]
    figure, axes = plt.subplots(1, 3, figsize=(15.0, 4.4))
    changes, norms = np.array(scatter["change_norm"]), np.array(scatter["output_norm"])
    exact = np.array(scatter["exact"], dtype=bool)
    floor = max(norms.min() * 1e-3, 1e-12)
    axes[0].scatter(np.maximum(changes[~exact], floor), norms[~exact], s=12, label="k > h")
    axes[0].scatter(
        np.maximum(changes[exact], floor),
        norms[exact],
        s=12,
        marker="^",
        label=f"k ≤ h (exact; shown at {floor:.0e})",
    )
    line = np.array([floor, norms.max() * 1.2])
    axes[0].plot(line, line, "k--", linewidth=1, label="y = x")
    axes[0].set_xscale("log")
    axes[0].set_yscale("log")
    axes[0].set_xlabel("‖Uσ(VX) − U'σ(V'X)‖")
    axes[0].set_ylabel("‖Uσ(VX)‖")
    axes[0].set_title("Fig 3.3a: Prop 3.4.1 on random sigmoid nets")
    axes[0].legend(fontsize=8)
    for ax, panel in zip(axes[1:], "bc", strict=True):
        curve = result.series[f"curve_{panel}"]
        t = np.array(curve["t"])
        for key, colour, label in (
            ("gamma", "tab:blue", "γ(t) = exp(t log g)·w"),
            ("chord", "tab:red", "chord"),
        ):
            mean, std = np.array(curve[f"{key}_mean"]), np.array(curve[f"{key}_std"])
            ax.plot(t, mean, color=colour, label=label)
            ax.fill_between(t, mean - std, mean + std, color=colour, alpha=0.2)
        ax.set_xlabel("t")
        ax.set_ylabel("loss ‖Y − W2σ(W1X)‖²/k")
        scale = result.metrics.get(f"{panel}_scale", float("nan"))
        ax.set_title(f"Fig 3.3{panel}: |M| scale {scale:g}, mean ± std over curves")
        ax.legend()
    figure.tight_layout()
    return {"symmetry_curves.png": figure}


experiment(
    "symmetry-curves",
    seed_ref="seed 001, Fig 3.3a-c; Eqs. 3.5-3.6, Prop 3.4.1, Thm 3.4.2",
    description=(
        "(a) 100 random two-layer sigmoid nets (m, h, n, k uniform in [2, 100], X, Y ~ N(0, 1), "
        "no biases) trained by full-batch GD (chosen: loss ‖Y − Uσ(VX)‖²/k, step 0.5/λ with λ "
        "the top Hessian eigenvalue in U, 100 steps quick / 1000 paper), then the pseudo-inverse "
        "map (Eq. 3.6) with a random Gaussian g (entries N(0, 1/h)); (b, c) loss along "
        "γ(t) = exp(tM)·w (g = exp(M), M entries N(0, s²/h), s = 0.5 and 1.5) and along its "
        "chord, from a full-batch GD minimum (lr 0.05, loss ≈ 1e-31) of a 16-32-64 LeakyReLU "
        "net on 8 samples, 5 curves each; Thm 3.4.2's d_max against the distance of chord "
        "points to the orbit of w (L-BFGS over the algebra)"
    ),
    presets={
        "quick": CurvesConfig(),
        "paper": CurvesConfig(
            train_steps=1000, curve_train_steps=5000, points=51, geometry_points=33
        ),
    },
    claims=[
        Claim(
            "the pseudo-inverse map changes the layer output by at most its norm",
            "seed 001, Fig 3.3a / Prop 3.4.1",
            "all 100 points above y = x",
            lambda r: (
                f"{r.metrics['nets_above_diagonal']}/{r.metrics['nets']} above, max ratio "
                f"{r.metrics['max_change_ratio']:.3f} ({r.metrics['exact_nets']} exact nets: "
                f"ratio ≤ {r.metrics['max_exact_change_ratio']:.1e})",
                r.metrics["nets_above_diagonal"] == r.metrics["nets"],
            ),
        ),
        Claim(
            "the loss along the symmetry-induced curve stays below the loss along the chord",
            "seed 001, Fig 3.3b (small g)",
            "γ's loss consistently lower than the chord's (5 curves)",
            lambda r: (
                f"{r.metrics['b_curves_below_chord']}/{r.metrics['curves']} curves below at every "
                f"t; chord barrier {r.metrics['b_chord_barrier']:.3g}, γ loss change "
                f"{r.metrics['b_gamma_max_change']:.1e}",
                r.metrics["b_curves_below_chord"] == r.metrics["curves"],
            ),
        ),
        Claim(
            "with a larger g the chord's barrier is larger, and γ still stays below it",
            "seed 001, Fig 3.3c",
            "larger chord barrier than (b); γ below the chord",
            lambda r: (
                f"chord barrier {r.metrics['c_chord_barrier']:.3g} vs "
                f"{r.metrics['b_chord_barrier']:.3g} (b); "
                f"{r.metrics['c_curves_below_chord']}/{r.metrics['curves']} curves below",
                r.metrics["c_chord_barrier"] > r.metrics["b_chord_barrier"]
                and r.metrics["c_curves_below_chord"] == r.metrics["curves"],
            ),
        ),
        Claim(
            "every chord point is within d_max of the level set (curvature bound)",
            "seed 001, Thm 3.4.2 (with the length ≤ π/κ_max condition of the notes' erratum)",
            "distance from chord points to the level set ≤ d_max (measured: to the orbit of w, "
            "an upper bound)",
            lambda r: (
                f"orbit distance ≤ d_max on {r.metrics['chord_bound_holds']}/"
                f"{r.metrics['chord_bound_applicable']} curves (distance to the curve itself ≤ "
                f"d_max on {r.metrics['curve_distance_within_bound']}; the other "
                f"{2 * r.metrics['curves'] - r.metrics['chord_bound_applicable']} curves are "
                "longer than π/κ_max)",
                r.metrics["chord_bound_applicable"] > 0
                and r.metrics["chord_bound_holds"] == r.metrics["chord_bound_applicable"],
            ),
        ),
    ],
    plot=plot_curves,
)(run_curves)


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
        return _per_pair([get(pair) for pair in pairs])

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
    presets={
        "quick": AlignmentConfig(),
        "paper": AlignmentConfig(
            dataset="mnist", hidden=(512, 512, 512), pairs=3, epochs=10, batch_size=128, alphas=25
        ),
    },
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
