"""``minimum-components`` (seed 001, Fig 3.1; Prop. 3.2.1, Cor. 3.2.2, Prop. 3.2.3, 3.3.2).

The minimum of the 1-D three-layer network has 4 components, 3 with the residual connection; the
minimum of a square full-rank linear network of depth l has 2^{l−1}, whatever the width;
same-label minima are joined by zero-loss paths and odd permutations join all components.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import torch
from torch import Tensor

import paramsym as ps
from paramsym.connectivity import (
    align_components,
    component_label,
    losses_along,
    minimum_path,
    residual_minimum_components,
    square_linear_minimum,
)
from paramsym.experiments.connectivity.common import F64, ZERO_LOSS, generator, sum_of_squares
from paramsym.experiments.registry import Claim, Progress, Result, experiment

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
    quick=ComponentsConfig(),
    paper=ComponentsConfig(
        resolution=601, depths=(2, 3, 4, 5), widths=(2, 3, 5, 8), samples_per_component=16
    ),
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
