"""``q-sharpness`` (seed 001, Fig 2.7, §2.8.1).

The Hessian at the minimum gradient flow reaches depends on Q; the 1-D example's eigenvalue is
√(Q² + 4) (**erratum**: Eq. 2.53 prints 2√(Q² + 4)). The nullity-vs-orbit part of Fig 2.7(a)
is ``flat-minimum`` (experiments/dissertation.py). The common setup is in
:mod:`paramsym.experiments.conserved`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.ticker import NullFormatter
from torch import Tensor

import paramsym as ps
from paramsym.conserved import (
    flat_minimum,
    scalar_linear_minimum,
    scalar_linear_sharpness,
)
from paramsym.core.tables import append_row, empty_table
from paramsym.experiments.conserved import gradient_descent
from paramsym.experiments.registry import Claim, Progress, Result, experiment
from paramsym.experiments.threads import single_threaded

# == q-sharpness (Fig 2.7, §2.8.1) ===============================================================


@dataclass(frozen=True)
class QSharpnessConfig:
    """Settings of ``q-sharpness``.

    Attributes:
        seed: randomness of Y and of the initialisations.
        scalar_qs: Q = U² − V² of the 1-D example L = ½(1 − UV)² (§2.8.1).
        scalar_learning_rate, scalar_steps: GD from (U, V) near the saddle with that Q.
        outputs, hidden, inputs: m, h, n of Fig 2.7 (U ∈ R^{10×50}, V ∈ R^{5×50}: 750 params).
        panels: (activation, init scheme) per panel: identity is Fig 2.7(a), the others
            elementwise nonlinear. The scheme says how the variances reach E[Q]
            (:func:`init_scales`): ``"product"`` (fixed s_U·s_V) or ``"outgoing"`` (V at
            Xavier, only s_U varies); the paper says only "various std".
        q_targets: E[Q] of the initialisations, scheme ``"product"``.
        outgoing_q_targets: the same for scheme ``"outgoing"`` (E[Q] > −hnE[F_σ] there).
        learning_rate, steps, loss_tolerance: GD on ‖Y − Uσ(Vᵀ)‖² until the loss is below the
            tolerance (or ``steps``).
        threshold: |λ| ≤ threshold counts as zero (Fig 2.7: 1e-3).
    """

    seed: int = 0
    scalar_qs: tuple[float, ...] = (-3.0, -2.0, -1.0, -0.5, 0.0, 0.5, 1.0, 2.0, 3.0)
    scalar_learning_rate: float = 1e-3
    scalar_steps: int = 20000
    outputs: int = 10
    hidden: int = 50
    inputs: int = 5
    panels: tuple[tuple[str, str], ...] = (
        ("identity", "product"),
        ("identity", "outgoing"),
        ("relu", "product"),
        ("sigmoid", "product"),
        ("tanh", "product"),
    )
    q_targets: tuple[float, ...] = (-40.0, -20.0, 0.0, 20.0, 40.0)
    outgoing_q_targets: tuple[float, ...] = (-10.0, 0.0, 10.0, 20.0, 40.0)
    learning_rate: float = 0.01
    steps: int = 3000
    loss_tolerance: float = 1e-10
    threshold: float = 1e-3


def scalar_start(q: float, boost: float = 0.1) -> tuple[float, float]:
    """(U, V) with U² − V² = q and small UV > 0: a point near the saddle on the level set of Q."""
    if q == 0.0:
        return boost, boost
    r = math.sqrt(abs(q))
    big, small = r * math.cosh(boost), r * math.sinh(boost)
    return (big, small) if q > 0 else (small, big)


def scalar_gradient_descent(
    u: Tensor, v: Tensor, lr: float, steps: int, x: float = 1.0, y: float = 1.0
) -> tuple[Tensor, Tensor]:
    """GD on L = ½(Y − UVX)² for a vector of independent scalar pairs (U, V) (§2.8.1)."""
    u, v = u.clone(), v.clone()
    for _ in range(steps):
        residual = y - u * v * x
        u, v = u + lr * residual * v * x, v + lr * residual * u * x
    return u, v


def _scalar_example(config: QSharpnessConfig) -> tuple[dict[str, Any], dict[str, list[Any]]]:
    starts = [scalar_start(q) for q in config.scalar_qs]
    u0 = torch.tensor([s[0] for s in starts], dtype=torch.float64)
    v0 = torch.tensor([s[1] for s in starts], dtype=torch.float64)
    u, v = scalar_gradient_descent(u0, v0, config.scalar_learning_rate, config.scalar_steps)
    model = ps.mlp([1, 1, 1], "identity", bias=False, dtype=torch.float64)
    batch = (torch.ones(1, 1, dtype=torch.float64), torch.ones(1, 1, dtype=torch.float64))
    loss = lambda f, t: 0.5 * ((f - t) ** 2).sum()  # noqa: E731
    table = empty_table(
        "q q_final u v u_predicted v_predicted eigenvalue sqrt_q2_plus_4 paper_2_sqrt_q2_plus_4 "
        "zero_eigenvalues"
    )
    for q, uu, vv in zip(config.scalar_qs, u.tolist(), v.tolist(), strict=True):
        params = {"0.weight": torch.tensor([[vv]]), "2.weight": torch.tensor([[uu]])}
        params = {k: t.double() for k, t in params.items()}
        flat = flat_minimum(model, loss, batch, params=params, threshold=1e-8)
        u_star, v_star = scalar_linear_minimum(q)
        reached = uu * uu - vv * vv  # Q at the point GD reached (GD drifts it by O(lr))
        values = (
            q,
            reached,
            uu,
            vv,
            u_star,
            v_star,
            max(flat.eigenvalues),
            scalar_linear_sharpness(reached),
            2 * scalar_linear_sharpness(reached),
            flat.near_zero,
        )
        append_row(table, *values)
    measured = np.array(table["eigenvalue"])
    corrected, printed = (
        np.array(table["sqrt_q2_plus_4"]),
        np.array(table["paper_2_sqrt_q2_plus_4"]),
    )
    metrics = {
        "scalar_flattest_q": config.scalar_qs[int(np.argmin(measured))],
        "scalar_eigenvalue_at_flattest": float(measured.min()),
        "scalar_error_vs_sqrt": float(np.max(np.abs(measured / corrected - 1))),
        "scalar_error_vs_paper": float(np.max(np.abs(measured / printed - 1))),
        "scalar_q_drift": float(np.max(np.abs(np.array(table["q_final"]) - config.scalar_qs))),
        "scalar_distance_to_predicted_minimum": float(
            np.max(
                np.hypot(
                    np.array(table["u"]) - table["u_predicted"],
                    np.array(table["v"]) - table["v_predicted"],
                )
            )
        ),
    }
    return metrics, table


def _spectra(
    config: QSharpnessConfig, progress: Progress
) -> tuple[dict[str, Any], dict[str, list[Any]], dict[str, list[Any]]]:
    """Fig 2.7: the Hessian at the minimum GD reaches, per activation and initial Q."""
    generator = torch.Generator().manual_seed(config.seed)
    m, h, n = config.outputs, config.hidden, config.inputs
    target = torch.randn(n, m, generator=generator, dtype=torch.float64)
    x = torch.eye(n, dtype=torch.float64)
    spectrum: dict[str, list[Any]] = {"panel": [], "q": [], "eigenvalue": []}
    runs = empty_table("panel q loss near_zero orbit_dimension nonzero_median nonzero_mean")
    rho: dict[str, float] = {}
    for activation, scheme in progress.track(config.panels, description="Fig 2.7 panels"):
        label = f"{activation}/{scheme}"
        targets = config.q_targets if scheme == "product" else config.outgoing_q_targets
        w1, w2, _ = gradient_descent.initial_weights(
            m, h, n, activation, targets, generator, scheme
        )
        q0, _ = gradient_descent.elementwise_q(activation, w1, w2)
        trained = gradient_descent.batched_gradient_descent(
            activation,
            w1,
            w2,
            target,
            config.learning_rate,
            config.steps,
            stop_below=config.loss_tolerance,
        )
        model = ps.mlp([n, h, m], activation, bias=False, dtype=torch.float64)
        for b, q in enumerate(q0.tolist()):
            params = {"0.weight": trained.incoming[-1][b], "2.weight": trained.outgoing[-1][b]}
            flat = flat_minimum(
                model,
                gradient_descent.sum_squares,
                (x, target),
                params=params,
                threshold=config.threshold,
            )
            nonzero = [e for e in flat.eigenvalues if abs(e) > config.threshold]
            spectrum["panel"] += [label] * len(nonzero)
            spectrum["q"] += [q] * len(nonzero)
            spectrum["eigenvalue"] += nonzero
            append_row(
                runs,
                label,
                q,
                flat.loss,
                flat.near_zero,
                flat.orbit_dimension,
                flat.nonzero_median,
                flat.nonzero_mean,
            )
        own = [i for i, p in enumerate(runs["panel"]) if p == label]
        rho[label] = gradient_descent.spearman(
            [runs["q"][i] for i in own], [runs["nonzero_median"][i] for i in own]
        )
    linear = [i for i, p in enumerate(runs["panel"]) if p.startswith("identity/")]
    metrics = {
        "spearman_q_median_eigenvalue": rho,
        "max_final_loss": max(runs["loss"]),
        "linear_min_near_zero": min((runs["near_zero"][i] for i in linear), default=-1),
        "linear_orbit_dimension": max((runs["orbit_dimension"][i] for i in linear), default=-1),
    }
    return metrics, spectrum, runs


def _sharpness_check(result: Result, panel: str) -> tuple[str, bool]:
    rho = result.metrics["spearman_q_median_eigenvalue"]
    others = {k: v for k, v in rho.items() if not k.startswith("identity/")}
    value = rho.get(panel, math.nan)
    return f"ρ = {value:+.2f} (nonlinear: {gradient_descent.rho_text(others)})", value >= 0.8 - 1e-9


def run_q_sharpness(config: QSharpnessConfig, progress: Progress) -> Result:
    scalar_metrics, scalar = _scalar_example(config)
    metrics, spectrum, runs = _spectra(config, progress)
    notes = [
        "1-D example: X = Y = 1, L = ½(1 − UV)², GD from near the saddle on the level set "
        "U² − V² = Q; the Hessian eigenvalue is from the dense 2×2 Hessian.",
        "Fig 2.7: centre = median of the eigenvalues with |λ| > threshold at the point GD "
        "reached (its loss is recorded; max_final_loss says how close to a minimum it is).",
    ]
    return Result(
        {**scalar_metrics, **metrics}, {"scalar": scalar, "spectrum": spectrum, "runs": runs}, notes
    )


def plot_q_sharpness(result: Result) -> dict[str, Any]:
    scalar, spectrum = result.series["scalar"], result.series["spectrum"]
    fig1, ax = plt.subplots(figsize=(5.4, 4))
    grid = np.linspace(min(scalar["q"]) - 0.5, max(scalar["q"]) + 0.5, 200)
    ax.plot(grid, np.sqrt(grid**2 + 4), "k-", lw=1, label="√(Q² + 4) (corrected)")
    ax.plot(grid, 2 * np.sqrt(grid**2 + 4), "r:", lw=1.5, label="2√(Q² + 4) (Eq. 2.53 as printed)")
    ax.scatter(
        scalar["q"],
        scalar["eigenvalue"],
        color="tab:blue",
        zorder=3,
        label="dense Hessian at the GD minimum",
    )
    ax.set_xlabel("Q = U² − V²")
    ax.set_ylabel("nonzero Hessian eigenvalue")
    ax.set_title("§2.8.1: sharpness along the minimum UV = 1", fontsize=10)
    ax.legend(fontsize=8)
    fig1.tight_layout()
    labels = list(dict.fromkeys(spectrum["panel"]))
    fig2, axes = plt.subplots(1, len(labels), figsize=(3.8 * len(labels), 3.6))
    cmap = plt.get_cmap("viridis")
    for panel, activation in zip(np.atleast_1d(axes), labels, strict=True):
        qs = sorted(
            {q for a, q in zip(spectrum["panel"], spectrum["q"], strict=True) if a == activation}
        )
        values = [
            abs(e)
            for a, e in zip(spectrum["panel"], spectrum["eigenvalue"], strict=True)
            if a == activation
        ]
        bins = np.logspace(np.log10(max(min(values), 1e-3)), np.log10(max(values)), 30)
        for i, q in enumerate(qs):
            eig = [
                abs(e)
                for a, qq, e in zip(
                    spectrum["panel"], spectrum["q"], spectrum["eigenvalue"], strict=True
                )
                if a == activation and qq == q
            ]
            panel.hist(
                eig,
                bins=bins,
                histtype="step",
                lw=1.5,
                color=cmap(i / max(1, len(qs) - 1)),
                label=f"Q = {q:.1f}",
            )
        panel.set_xscale("log")
        panel.xaxis.set_minor_formatter(NullFormatter())
        panel.set_xlabel("|eigenvalue| > 1e-3")
        panel.set_ylabel("count")
        panel.set_title(activation)
        panel.legend(fontsize=7)
    fig2.suptitle("Fig 2.7: Hessian eigenvalues at the minimum, per initial Q", fontsize=10)
    fig2.tight_layout()
    return {"sharpness_1d.png": fig1, "spectra.png": fig2}


experiment(
    "q-sharpness",
    seed_ref="seed 001, Fig 2.7, §2.8.1 (Eqs 2.51-2.53)",
    description=(
        "how the conserved Q sets sharpness: the 1-D example L = ½(1 − UV)² (nonzero Hessian "
        "eigenvalue √(Q²+4), erratum to Eq. 2.53) and the nonzero Hessian spectrum at the "
        "minimum GD reaches from inits with different Q (Fig 2.7: U 10×50, V 5×50, X = I, "
        "loss ‖Y − Uσ(Vᵀ)‖²; GD lr and steps chosen here; the nullity part is 'flat-minimum')"
    ),
    quick=QSharpnessConfig(),
    paper=QSharpnessConfig(
        q_targets=(-60.0, -40.0, -30.0, -20.0, -10.0, 0.0, 10.0, 20.0, 40.0),
        steps=20000,
        loss_tolerance=1e-14,
    ),
    claims=[
        Claim(
            "in the 1-D example, Q = 0 is the flattest point of the minimum",
            f"{gradient_descent.SOURCE}, §2.8.1, Fig 2.1",
            "smallest nonzero eigenvalue at Q = 0, where it is 2",
            lambda r: (
                f"flattest at Q = {r.metrics['scalar_flattest_q']:g}, λ = "
                f"{r.metrics['scalar_eigenvalue_at_flattest']:.6f}",
                r.metrics["scalar_flattest_q"] == 0.0
                and abs(r.metrics["scalar_eigenvalue_at_flattest"] - 2.0) < 1e-6,
            ),
        ),
        Claim(
            "the nonzero Hessian eigenvalue at the 1-D minimum is √(Q² + 4)",
            f"{gradient_descent.SOURCE}, Eq. 2.53 (erratum: printed 2√(Q² + 4))",
            "relative error ≤ 1e-6 against √(Q² + 4) (and ≈ 50% against the printed 2√(Q² + 4))",
            lambda r: (
                f"vs √(Q²+4): {r.metrics['scalar_error_vs_sqrt']:.1e}; vs 2√(Q²+4): "
                f"{r.metrics['scalar_error_vs_paper']:.2f}",
                r.metrics["scalar_error_vs_sqrt"] <= 1e-6,
            ),
        ),
        Claim(
            "linear net: after removing the ~0 eigenvalues, the centre of the Hessian spectrum "
            "correlates positively with Q (Q set by the std of U, with V at Xavier)",
            f"{gradient_descent.SOURCE}, Fig 2.7(a)",
            "Spearman ρ(Q, median nonzero eigenvalue) ≥ 0.8",
            lambda r: _sharpness_check(r, "identity/outgoing"),
        ),
        Claim(
            "... and when Q is set at a fixed product of the stds (both sides of the balanced "
            "point)",
            f"{gradient_descent.SOURCE}, Fig 2.7(a)",
            "Spearman ρ(Q, median nonzero eigenvalue) ≥ 0.8",
            lambda r: _sharpness_check(r, "identity/product"),
        ),
    ],
    plot=plot_q_sharpness,
)(single_threaded(run_q_sharpness))
