"""``q-convergence`` (seed 001, Figs 2.4, 2.5).

The time gradient descent needs to converge depends on Q (elementwise two-layer nets) and on
λ_i (radial net with spectral init, Prop 2.7.3). The common setup is in
:mod:`paramsym.experiments.conserved`.
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
from torch import Tensor

from paramsym.conserved import (
    RadialReparameterization,
    spectral_init,
    spectral_rate_bound,
)
from paramsym.core.tables import append_row
from paramsym.experiments.conserved import gradient_descent
from paramsym.experiments.registry import Claim, Progress, Result, experiment
from paramsym.experiments.threads import single_threaded

# == q-convergence (Figs 2.4, 2.5) ===============================================================


@dataclass(frozen=True)
class QConvergenceConfig:
    """Settings of ``q-convergence``.

    Attributes:
        seed: randomness of Y and of the initialisations.
        outputs, hidden, inputs: m, h, n of Fig 2.4 (Y ∈ R^{5×10}, U ∈ R^{5×50}, V ∈ R^{10×50}).
        activations: σ of Fig 2.4.
        q_targets: E[Q] of the initialisations (variances at a fixed product; the paper's values
            are not given).
        learning_rate, steps: full-batch GD (the paper: final lr 1e-3; steps not given).
        threshold: converged when L ≤ threshold·‖Y‖²_F.
        radial_outputs, radial_inputs: m, n of Fig 2.5 (U ∈ R^{5×5}, V ∈ R^{10×5}; h = m).
        lambdas: the conserved λ (= ū_i² + v̄_i², the same for every i) of Fig 2.5's 4 runs.
        radial_sigma0: σ_i^X(0) of the spectral initialisation.
        radial_learning_rate, radial_steps: GD on ½‖Y − U g(Vᵀ)‖² (the paper: lr 1e-5).
        radial_threshold: converged when max_i |σ_i^X − σ_i^Y| ≤ this · max_i σ_i^Y.
    """

    seed: int = 0
    outputs: int = 5
    hidden: int = 50
    inputs: int = 10
    activations: tuple[str, ...] = ("identity", "relu", "sigmoid", "tanh")
    q_targets: tuple[float, ...] = (-60.0, -40.0, -20.0, 0.0, 20.0, 40.0, 60.0)
    learning_rate: float = 1e-3
    steps: int = 5000
    threshold: float = 1e-3
    radial_outputs: int = 5
    radial_inputs: int = 10
    lambdas: tuple[float, ...] = (0.5, 1.0, 2.0, 4.0)
    radial_sigma0: float = 0.1
    radial_learning_rate: float = 1e-3
    radial_steps: int = 12000
    radial_threshold: float = 1e-3


def radial_gradient_descent(
    outgoing: Tensor, incoming: Tensor, target: Tensor, lr: float, steps: int, every: int
) -> tuple[list[int], list[Tensor], Tensor]:
    """GD on ½‖Y − U g(Vᵀ)‖²_F, g(v) = v/|v|² per column of V (Prop 2.7.2), for B runs at once.

    Args:
        outgoing, incoming: U (B, m, h) and V (B, n, h).
        target: Y (m, n).
    Returns (steps kept, X = U g(Vᵀ) at those steps as (B, m, n), losses (B, steps + 1)).
    """
    u = outgoing.detach().clone().requires_grad_(True)
    v = incoming.detach().clone().requires_grad_(True)
    kept_steps, kept, losses = [], [], []
    for step in range(steps + 1):
        product = u @ (v / (v * v).sum(dim=1, keepdim=True)).transpose(1, 2)
        per_run = 0.5 * ((product - target) ** 2).sum(dim=(1, 2))
        losses.append(per_run.detach())
        if step % every == 0 or step == steps:
            kept_steps.append(step)
            kept.append(product.detach().clone())
        if step == steps:
            break
        gu, gv = torch.autograd.grad(per_run.sum(), (u, v))
        with torch.no_grad():
            u -= lr * gu
            v -= lr * gv
    return kept_steps, kept, torch.stack(losses, dim=1)


def _elementwise_convergence(
    config: QConvergenceConfig, target: Tensor, generator: torch.Generator, progress: Progress
) -> tuple[dict[str, Any], dict[str, list[Any]], dict[str, list[Any]]]:
    """Fig 2.4: loss curves per activation and Q; Spearman(Q, steps to converge)."""
    m, h, n = config.outputs, config.hidden, config.inputs
    bar = config.threshold * float((target**2).sum())
    curves: dict[str, list[Any]] = {"activation": [], "q": [], "step": [], "loss": []}
    runs: dict[str, list[Any]] = {"activation": [], "q_target": [], "q": [], "steps": []}
    rho: dict[str, float] = {}
    rho_abs: dict[str, float] = {}
    spread: dict[str, float] = {}
    for activation in progress.track(config.activations, description="Fig 2.4 activations"):
        w1, w2, _ = gradient_descent.initial_weights(
            m, h, n, activation, config.q_targets, generator
        )
        q0, _ = gradient_descent.elementwise_q(activation, w1, w2)
        result = gradient_descent.batched_gradient_descent(
            activation, w1, w2, target, config.learning_rate, config.steps, stop_below=bar
        )
        converged = gradient_descent.steps_to_threshold(result.losses, bar)
        stride = max(1, result.losses.shape[1] // 300)
        for b, q in enumerate(q0.tolist()):
            runs["activation"].append(activation)
            runs["q_target"].append(config.q_targets[b])
            runs["q"].append(q)
            runs["steps"].append(converged[b])
            for step in range(0, result.losses.shape[1], stride):
                curves["activation"].append(activation)
                curves["q"].append(q)
                curves["step"].append(step)
                curves["loss"].append(float(result.losses[b, step]))
        rho[activation] = gradient_descent.spearman(q0.tolist(), converged)
        rho_abs[activation] = gradient_descent.spearman(q0.abs().tolist(), converged)
        finite = [s for s in converged if math.isfinite(s)]
        spread[activation] = max(finite) / max(1.0, min(finite)) if finite else math.nan
    metrics = {
        "spearman_q_steps": rho,
        "spearman_abs_q_steps": rho_abs,
        "steps_max_over_min": spread,
        "unconverged_runs": sum(math.isnan(s) for s in runs["steps"]),
        "convergence_threshold": bar,
    }
    return metrics, curves, runs


def _radial_convergence(
    config: QConvergenceConfig, generator: torch.Generator
) -> tuple[dict[str, Any], dict[str, list[Any]]]:
    """Fig 2.5: spectral init with λ_i = λ; distance of σ^X to σ^Y against Prop 2.7.3's bound."""
    m, n = config.radial_outputs, config.radial_inputs
    y = torch.randn(m, n, generator=generator, dtype=torch.float64)
    model = RadialReparameterization(m, m, n, dtype=torch.float64, generator=generator)
    us, vs = [], []
    for lam in config.lambdas:
        spectral_init(model, y, lam, config.radial_sigma0)
        us.append(model.U.detach().clone())
        vs.append(model.V.detach().clone())
    every = max(1, config.radial_steps // 400)
    steps, products, losses = radial_gradient_descent(
        torch.stack(us), torch.stack(vs), y, config.radial_learning_rate, config.radial_steps, every
    )
    phi, sigma_y, psi_t = torch.linalg.svd(y, full_matrices=False)
    sigma0 = torch.full((m,), config.radial_sigma0, dtype=torch.float64)
    table: dict[str, list[Any]] = {
        "lambda": [],
        "step": [],
        "time": [],
        "loss": [],
        "distance": [],
        "bound": [],
    }
    worst_ratio, times = 0.0, []
    for b, lam in enumerate(config.lambdas):
        first = math.nan
        for step, product in zip(steps, products, strict=True):
            sigma_x = torch.diagonal(phi.T @ product[b] @ psi_t.T)
            t = step * config.radial_learning_rate
            distance = float((sigma_x - sigma_y).abs().max())
            bound = spectral_rate_bound(
                t, torch.full((m,), lam, dtype=torch.float64), sigma0, sigma_y
            )
            ratio = (sigma_x - sigma_y).abs() / bound.clamp_min(1e-300)
            active = bound > 1e-12
            if bool(active.any()):
                worst_ratio = max(worst_ratio, float(ratio[active].max()))
            if math.isnan(first) and distance <= config.radial_threshold * float(sigma_y.max()):
                first = t
            append_row(table, lam, step, t, float(losses[b, step]), distance, float(bound.max()))
        times.append(first)
    metrics = {
        "radial_lambdas": list(config.lambdas),
        "radial_hidden": m,
        "radial_convergence_times": times,
        "radial_time_increasing_in_lambda": _increasing(config.lambdas, times),
        "radial_worst_bound_ratio": worst_ratio,
    }
    return metrics, table


def _increasing(keys: Sequence[float], values: Sequence[float]) -> bool:
    """Whether ``values`` (all finite) strictly increase with ``keys``."""
    ordered = [v for _, v in sorted(zip(keys, values, strict=True))]
    finite = all(math.isfinite(v) for v in ordered)
    return finite and all(a < b for a, b in itertools.pairwise(ordered))


def run_q_convergence(config: QConvergenceConfig, progress: Progress) -> Result:
    generator = torch.Generator().manual_seed(config.seed)
    target = torch.randn(config.inputs, config.outputs, generator=generator, dtype=torch.float64)
    metrics, curves, runs = _elementwise_convergence(config, target, generator, progress)
    radial_metrics, radial = _radial_convergence(config, generator)
    notes = [
        "Fig 2.4: Q is set through the init variances at fixed s_U·s_V = 1/√(hn); the achieved Q "
        "(recorded) scatters around the targets by the Xavier std. Steps are counted until "
        f"L ≤ {config.threshold:g}·‖Y‖²_F.",
        "Fig 2.5: time t = step·lr (gradient-flow time); converged when max_i |σ_i^X − σ_i^Y| ≤ "
        f"{config.radial_threshold:g}·max σ^Y.",
    ]
    return Result(
        {**metrics, **radial_metrics},
        {"curves": curves, "runs": runs, "radial": radial},
        notes,
    )


def plot_q_convergence(result: Result) -> dict[str, Any]:
    curves, radial = result.series["curves"], result.series["radial"]
    activations = list(dict.fromkeys(curves["activation"]))
    figure, axes = plt.subplots(1, len(activations), figsize=(3.8 * len(activations), 3.6))
    cmap = plt.get_cmap("viridis")
    for ax, activation in zip(np.atleast_1d(axes), activations, strict=True):
        qs = sorted(
            {q for a, q in zip(curves["activation"], curves["q"], strict=True) if a == activation}
        )
        for i, q in enumerate(qs):
            points = [
                (s, loss)
                for a, qq, s, loss in zip(
                    curves["activation"], curves["q"], curves["step"], curves["loss"], strict=True
                )
                if a == activation and qq == q
            ]
            ax.plot(
                [p[0] for p in points],
                [p[1] for p in points],
                color=cmap(i / max(1, len(qs) - 1)),
                label=f"Q = {q:.1f}",
            )
        ax.set_yscale("log")
        ax.set_xlabel("GD step")
        ax.set_ylabel("loss ‖Y − Uσ(Vᵀ)‖²")
        ax.set_title(activation)
        ax.legend(fontsize=7)
    figure.suptitle("Fig 2.4: convergence depends on the conserved Q", fontsize=10)
    figure.tight_layout()
    fig5, ax5 = plt.subplots(figsize=(5.4, 4))
    hidden = result.metrics["radial_hidden"]
    lambdas = list(dict.fromkeys(radial["lambda"]))
    for i, lam in enumerate(lambdas):
        rows = [
            (s, loss)
            for ll, s, loss in zip(radial["lambda"], radial["step"], radial["loss"], strict=True)
            if ll == lam
        ]
        ax5.plot(
            [r[0] for r in rows],
            [r[1] for r in rows],
            color=cmap(i / max(1, len(lambdas) - 1)),
            label=f"λ = {lam:g} (Q = Σλ_i = {hidden * lam:g})",
        )
    ax5.set_yscale("log")
    ax5.set_xlabel("GD step")
    ax5.set_ylabel("loss ½‖Y − U g(Vᵀ)‖²")
    ax5.set_title("Fig 2.5: radial net, spectral init", fontsize=10)
    ax5.legend(fontsize=8)
    fig5.tight_layout()
    return {"convergence_elementwise.png": figure, "convergence_radial.png": fig5}


experiment(
    "q-convergence",
    seed_ref="seed 001, Figs 2.4-2.5; Props 2.7.1-2.7.3",
    description=(
        "loss vs GD step for inits with different conserved Q: two-layer nets U σ(Vᵀ) with "
        "whitened input (Fig 2.4; loss ‖Y − Uσ(Vᵀ)‖² without ½, lr 1e-3, Q set by init "
        "variances at fixed product; steps and Q values chosen here) and the radial net with "
        "spectral init (Fig 2.5; quick lr 1e-3, paper lr 1e-5, same gradient-flow time 12)"
    ),
    quick=QConvergenceConfig(),
    paper=QConvergenceConfig(
        q_targets=(-80.0, -60.0, -40.0, -20.0, 0.0, 20.0, 40.0, 60.0, 80.0),
        steps=20000,
        radial_learning_rate=1e-5,
        radial_steps=1_200_000,
    ),
    claims=[
        Claim(
            "the conserved Q changes how many steps GD needs to converge, in linear and "
            "elementwise nonlinear nets",
            f"{gradient_descent.SOURCE}, Fig 2.4",
            "steps to convergence differ by ≥ 1.5× across the Q values, for every activation",
            lambda r: (
                {k: round(v, 2) for k, v in r.metrics["steps_max_over_min"].items()},
                all(v >= 1.5 for v in r.metrics["steps_max_over_min"].values()),
            ),
        ),
        Claim(
            "the number of steps to (near) convergence correlates with Q",
            f"{gradient_descent.SOURCE}, Fig 2.4 (direction not stated)",
            "|Spearman ρ(Q, steps)| ≥ 0.8 for every activation (monotone in Q)",
            lambda r: (
                f"ρ(Q, steps) {gradient_descent.rho_text(r.metrics['spearman_q_steps'])}; "
                f"ρ(|Q|, steps) {gradient_descent.rho_text(r.metrics['spearman_abs_q_steps'])}",
                all(abs(v) >= 0.8 for v in r.metrics["spearman_q_steps"].values()),
            ),
        ),
        Claim(
            "radial net with spectral init: smaller λ = ū² + v̄² converges faster",
            f"{gradient_descent.SOURCE}, Fig 2.5, Prop 2.7.3",
            "convergence time strictly increasing in λ (every run converges)",
            lambda r: (
                f"λ {r.metrics['radial_lambdas']} → t "
                f"{[round(t, 4) for t in r.metrics['radial_convergence_times']]}",
                r.metrics["radial_time_increasing_in_lambda"],
            ),
        ),
        Claim(
            "|σ_i^X(t) − σ_i^Y| ≤ |σ_i^X(0) − σ_i^Y| e^{−t/λ_i}",
            f"{gradient_descent.SOURCE}, Prop 2.7.3",
            "measured / bound ≤ 1 (up to the O(lr) discretisation of GD)",
            lambda r: (
                f"max ratio {r.metrics['radial_worst_bound_ratio']:.4f}",
                r.metrics["radial_worst_bound_ratio"] <= 1.0 + 1e-3,
            ),
        ),
    ],
    plot=plot_q_convergence,
)(single_threaded(run_q_convergence))
