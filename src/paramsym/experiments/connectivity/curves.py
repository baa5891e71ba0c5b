"""``symmetry-curves`` (seed 001, Fig 3.3a-c; Eqs. 3.5-3.6, Prop. 3.4.1, Thm 3.4.2).

The pseudo-inverse map changes a layer's output by at most its norm; the loss along the curve
exp(t log g)·w stays below the loss along the chord; chord points lie within Thm 3.4.2's d_max
of the level set (measured as the distance to the orbit of w, an upper bound).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import torch
from torch import Tensor, nn

import paramsym as ps
from paramsym.connectivity import (
    chord_distance,
    curve_geometry,
    layer_output_change,
    linear_path,
    losses_along,
    symmetry_path,
)
from paramsym.core.params import flatten
from paramsym.core.tables import empty_table
from paramsym.experiments.connectivity.common import F64, generator, gradient_descent
from paramsym.experiments.registry import Claim, Progress, Result, experiment
from paramsym.symmetry.nonlinear import DataDependentGL

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
    bounds_table = empty_table(
        "panel kappa_max length chord_length d_max curve_distance orbit_distance"
    )
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
    quick=CurvesConfig(),
    paper=CurvesConfig(train_steps=1000, curve_train_steps=5000, points=51, geometry_points=33),
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
