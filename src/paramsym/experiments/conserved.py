"""Experiments of seed 001, chapter 2 (Zhao et al., ICLR 2023 [160]): conserved quantities of
gradient flow, what they do to convergence and sharpness, and ensembles from group elements.

* ``q-distribution`` (Figs 2.2, 2.3): the conserved Q at "Xavier" initialisation is
  concentrated around E[Q] = (m − h)/2 (**erratum**: Eq. 2.16 prints m − h).
* ``q-convergence`` (Figs 2.4, 2.5): the time gradient descent needs to converge depends on Q
  (elementwise two-layer nets) and on λ_i (radial net with spectral init, Prop 2.7.3).
* ``q-sharpness`` (Fig 2.7, §2.8.1): the Hessian at the minimum gradient flow reaches depends
  on Q; the 1-D example's eigenvalue is √(Q² + 4) (**erratum**: Eq. 2.53 prints 2√(Q² + 4)).
  The nullity-vs-orbit part of Fig 2.7(a) is ``flat-minimum`` (experiments/dissertation.py).
* ``q-drift`` (Fig A.1): how far gradient *descent* moves Eq. 2.17's Q, per learning rate.
(``group-ensemble``, Figs 2.8 and 2.9, is in :mod:`paramsym.experiments.group_ensemble`.)

Common setup of Figs 2.4, 2.7 and A.1: L = ‖Y − U σ(Vᵀ)‖²_F (no ½, as printed), whitened input
X = I, built as ``ps.mlp([n, h, m], σ, bias=False)`` evaluated on I_n (first weight Vᵀ, second
U), float64, full-batch gradient descent. Several initialisations are trained together as one
batch of networks (:func:`batched_gradient_descent`; each run gets exactly its own gradient,
tested against ``torch.optim.SGD`` on the model). Q is set through the initial variances at a
fixed product s_U·s_V = 1/√(hn) (``paramsym.conserved.q_init_scales``: E[Q] = target; the
paper only says "different variances"), so the achieved Q scatters around the target by the
Xavier standard deviation; every figure uses the achieved Q.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import scipy.stats
import torch
from matplotlib.ticker import NullFormatter
from torch import Tensor

import paramsym as ps
from paramsym.conserved import (
    ElementwiseQ,
    RadialReparameterization,
    flat_minimum,
    q_init_scales,
    sample_xavier_q,
    scalar_linear_minimum,
    scalar_linear_sharpness,
    spectral_init,
    spectral_rate_bound,
    xavier_q_statistics,
)
from paramsym.experiments.registry import Claim, Progress, Result, experiment
from paramsym.experiments.threads import single_threaded

ELEMENTWISE: dict[str, Callable[[Tensor], Tensor]] = {
    "identity": lambda z: z,
    "relu": torch.relu,
    "sigmoid": torch.sigmoid,
    "tanh": torch.tanh,
}
"""The activations of Figs 2.3, 2.4, 2.7 and A.1, as functions (the same as ``ps.mlp``'s)."""

SOURCE = "seed 001"


def sum_squares(output: Tensor, target: Tensor) -> Tensor:
    """‖output − target‖²_F, the loss of Figs 2.4, 2.7 and A.1 (no ½, as printed)."""
    return ((output - target) ** 2).sum()


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman's rank correlation (NaN when either side is constant or has < 3 values)."""
    a, b = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    keep = np.isfinite(a) & np.isfinite(b)
    if keep.sum() < 3 or np.ptp(a[keep]) == 0 or np.ptp(b[keep]) == 0:
        return math.nan
    return float(scipy.stats.spearmanr(a[keep], b[keep]).statistic)


# -- batched gradient descent on U σ(Vᵀ) -------------------------------------------------------


@dataclass
class Trajectories:
    """B runs of full-batch gradient descent on ‖Y − U σ(Vᵀ)‖²_F, whitened input.

    Attributes:
        losses: (B, T) loss before each step (T = steps + 1 unless stopped early).
        checkpoints: steps at which the weights were kept.
        incoming, outgoing: the kept weights, lists of (B, h, n) (Vᵀ) and (B, m, h) (U).
    """

    losses: Tensor
    checkpoints: list[int]
    incoming: list[Tensor]
    outgoing: list[Tensor]


def two_layer_output(activation: str, incoming: Tensor, outgoing: Tensor) -> Tensor:
    """Outputs on X = I_n of B nets ``ps.mlp([n, h, m], σ, bias=False)``: σ(W₁)ᵀW₂ᵀ, (B, n, m)."""
    return ELEMENTWISE[activation](incoming).transpose(1, 2) @ outgoing.transpose(1, 2)


def batched_gradient_descent(
    activation: str,
    incoming: Tensor,
    outgoing: Tensor,
    target: Tensor,
    lr: float | Tensor,
    steps: int,
    *,
    keep_every: int = 0,
    stop_below: float | None = None,
) -> Trajectories:
    """Full-batch GD, W ← W − η∇L, of B independent nets at once (float64).

    Args:
        activation: a key of :data:`ELEMENTWISE`.
        incoming, outgoing: initial first (B, h, n) and second (B, m, h) weights.
        target: Y as the nets' output on I_n, shape (n, m).
        lr: η, one number or one per run (B,).
        steps: most GD steps.
        keep_every: keep the weights every this many steps (0: first and last only).
        stop_below: stop once every run's loss is below this.
    """
    w1 = incoming.detach().clone().requires_grad_(True)
    w2 = outgoing.detach().clone().requires_grad_(True)
    rate = torch.as_tensor(lr, dtype=w1.dtype).reshape(-1, 1, 1)
    losses: list[Tensor] = []
    kept: tuple[list[int], list[Tensor], list[Tensor]] = ([], [], [])

    def keep(step: int) -> None:
        kept[0].append(step)
        kept[1].append(w1.detach().clone())
        kept[2].append(w2.detach().clone())

    for step in range(steps + 1):
        residual = two_layer_output(activation, w1, w2) - target
        per_run = (residual**2).sum(dim=(1, 2))
        losses.append(per_run.detach())
        done = step == steps or (stop_below is not None and bool((per_run < stop_below).all()))
        due = (keep_every and step % keep_every == 0) or step == 0 or done
        if due and (not kept[0] or kept[0][-1] != step):
            keep(step)
        if done:
            break
        g1, g2 = torch.autograd.grad(per_run.sum(), (w1, w2))
        with torch.no_grad():
            w1 -= rate * g1
            w2 -= rate * g2
    return Trajectories(torch.stack(losses, dim=1), *kept)


def steps_to_threshold(losses: Tensor, threshold: float) -> list[float]:
    """Per run (row), the first step whose loss is ≤ ``threshold``; NaN if none."""
    below = losses <= threshold
    return [float(int(row.nonzero()[0])) if bool(row.any()) else math.nan for row in below]


def init_scales(
    outputs: int, hidden: int, inputs: int, target: float, activation: str, scheme: str
) -> tuple[float, float]:
    """(s_U, s_V) with E[Q] = ``target`` (Eq. 2.17 at Gaussian init).

    ``scheme="product"``: s_U·s_V = 1/√(hn) fixed (``q_init_scales``); ``"outgoing"``:
    s_V = 1/√n (Xavier) fixed and s_U² = 2(target + hn E[F_σ(v)])/(mh), which needs
    target > −hn E[F_σ(v)].
    """
    if scheme == "product":
        return q_init_scales(outputs, hidden, inputs, target, activation)
    if scheme != "outgoing":
        raise ps.InvalidArgumentError(
            f"init scheme must be 'product' or 'outgoing', got {scheme!r}"
        )
    floor = xavier_q_statistics(outputs, hidden, inputs, activation, u_std=0.0).mean
    if target <= floor:
        raise ps.InvalidArgumentError(
            f"init scheme 'outgoing': E[Q] = {target} is below {floor:.3g}, the value at s_U = 0"
        )
    return math.sqrt(2 * (target - floor) / (outputs * hidden)), 1.0 / math.sqrt(inputs)


def initial_weights(
    outputs: int,
    hidden: int,
    inputs: int,
    activation: str,
    targets: Sequence[float],
    generator: torch.Generator,
    scheme: str = "product",
) -> tuple[Tensor, Tensor, list[tuple[float, float]]]:
    """Gaussian (incoming (B, h, n), outgoing (B, m, h)) with E[Q] = each target of ``targets``
    (:func:`init_scales`), and the (s_U, s_V) used."""
    firsts, seconds, scales = [], [], []
    for target in targets:
        su, sv = init_scales(outputs, hidden, inputs, float(target), activation, scheme)
        firsts.append(sv * torch.randn(hidden, inputs, generator=generator, dtype=torch.float64))
        seconds.append(su * torch.randn(outputs, hidden, generator=generator, dtype=torch.float64))
        scales.append((su, sv))
    return torch.stack(firsts), torch.stack(seconds), scales


def elementwise_q(activation: str, incoming: Tensor, outgoing: Tensor) -> tuple[Tensor, Tensor]:
    """Eq. 2.17's Q (the library's :class:`ElementwiseQ`) of B nets and its App. A.4.2
    normaliser |½‖U‖²| + |ΣF_σ(V)|, each shape (B,)."""
    _, h, n = incoming.shape
    m = outgoing.shape[1]
    q = ElementwiseQ(ps.mlp([n, h, m], activation, bias=False, dtype=torch.float64))
    values, sizes = [], []
    for w1, w2 in zip(incoming, outgoing, strict=True):
        point = {"0.weight": w1, "2.weight": w2}
        values.append(q(point))
        sizes.append(q.magnitude(point))
    return torch.stack(values), torch.stack(sizes)


# == q-distribution (Figs 2.2, 2.3) ==============================================================


@dataclass(frozen=True)
class QDistributionConfig:
    """Settings of ``q-distribution``.

    Attributes:
        seed: randomness of the draws.
        shapes: (m, h, n) of the linear nets of Fig 2.2 (the paper does not list its tuples).
        samples: parameter sets per histogram (the paper: 1000).
        activations: the nonlinearities of Fig 2.3 (not listed in the paper).
        nonlinear_size: m = h = n of Fig 2.3 (the paper: 100).
    """

    seed: int = 0
    shapes: tuple[tuple[int, int, int], ...] = ((10, 50, 20), (100, 100, 100), (50, 10, 30))
    samples: int = 1000
    activations: tuple[str, ...] = ("identity", "relu", "sigmoid", "tanh")
    nonlinear_size: int = 100


def _q_sample_rows(
    label: str, m: int, h: int, n: int, activation: str, config: QDistributionConfig, seed: int
) -> tuple[dict[str, Any], list[float]]:
    """Monte-Carlo Q at Xavier init (N(0, 1/h), N(0, 1/n)) against the closed form."""
    draws = sample_xavier_q(m, h, n, config.samples, activation, generator=seed)
    stats = xavier_q_statistics(m, h, n, activation)
    f_mean = stats.mean - 0.5 * m  # E[½‖U‖²] = m/2 at u_std² = 1/h
    scale = 0.5 * m + abs(f_mean)  # the two terms Q is a difference of (App. A.4.2)
    row = {
        "label": label,
        "activation": activation,
        "m": m,
        "h": h,
        "n": n,
        "mean": float(draws.mean()),
        "std": float(draws.std()),
        "mean_closed_form": stats.mean,
        "std_closed_form": stats.std,
        "paper_eq_2_16": float(m - h) if activation == "identity" else math.nan,
        "relative_spread": float(draws.std()) / scale,
    }
    return row, draws.tolist()


def run_q_distribution(config: QDistributionConfig, progress: Progress) -> Result:
    rows: list[dict[str, Any]] = []
    draws: dict[str, list[Any]] = {"panel": [], "label": [], "q": []}
    cases = [(f"m={m}, h={h}, n={n}", m, h, n, "identity", "linear") for m, h, n in config.shapes]
    size = config.nonlinear_size
    cases += [(a, size, size, size, a, "nonlinear") for a in config.activations]
    for index, (label, m, h, n, activation, panel) in enumerate(
        progress.track(cases, description="Q histograms")
    ):
        row, values = _q_sample_rows(label, m, h, n, activation, config, config.seed * 997 + index)
        rows.append({"panel": panel, **row})
        draws["panel"] += [panel] * len(values)
        draws["label"] += [label] * len(values)
        draws["q"] += values
    table = {key: [r[key] for r in rows] for key in rows[0]}
    linear = [r for r in rows if r["panel"] == "linear"]
    nonlinear = [r for r in rows if r["panel"] == "nonlinear"]
    standard_errors = [
        abs(r["mean"] - (r["m"] - r["h"]) / 2) / (r["std"] / math.sqrt(config.samples))
        for r in linear
    ]
    metrics = {
        "samples": config.samples,
        "linear_means": [r["mean"] for r in linear],
        "linear_predicted_means": [(r["m"] - r["h"]) / 2 for r in linear],
        "linear_paper_means": [r["m"] - r["h"] for r in linear],
        "linear_mean_error_in_standard_errors": max(standard_errors),
        "linear_stds": [r["std"] for r in linear],
        "linear_max_relative_spread": max(r["relative_spread"] for r in linear),
        "nonlinear_relative_spread": {r["activation"]: r["relative_spread"] for r in nonlinear},
        "nonlinear_stds": {r["activation"]: r["std"] for r in nonlinear},
        "std_vs_closed_form_max_ratio_error": max(
            abs(r["std"] / r["std_closed_form"] - 1) for r in rows
        ),
    }
    notes = [
        "Xavier here is the dissertation's Eq. 2.15, N(0, 1/fan_in) (LeCun normal).",
        "relative spread = std(Q) / (E½‖U‖² + |EΣF_σ(V)|), the App. A.4.2 normaliser: how wide "
        "the band of Q is compared with the terms Q is a difference of.",
    ]
    return Result(metrics, {"summary": table, "draws": draws}, notes)


def plot_q_distribution(result: Result) -> dict[str, Any]:
    draws, summary = result.series["draws"], result.series["summary"]
    figures: dict[str, Any] = {}
    for panel, name, title in (
        ("linear", "q_linear.png", "Fig 2.2: Q = ½Tr[UᵀU − VVᵀ] at Xavier init, linear nets"),
        ("nonlinear", "q_nonlinear.png", "Fig 2.3: Eq. 2.17's Q at Xavier init, m = h = n = 100"),
    ):
        labels = [
            lab for p, lab in zip(summary["panel"], summary["label"], strict=True) if p == panel
        ]
        figure, axes = plt.subplots(1, len(labels), figsize=(3.6 * len(labels), 3.4))
        for ax, label in zip(np.atleast_1d(axes), labels, strict=True):
            values = [
                q
                for p, lab, q in zip(draws["panel"], draws["label"], draws["q"], strict=True)
                if p == panel and lab == label
            ]
            ax.hist(values, bins=40, color="tab:blue", alpha=0.8)
            i = summary["label"].index(label)
            ax.axvline(summary["mean_closed_form"][i], color="k", ls="--", lw=1, label="E[Q]")
            if panel == "linear":
                ax.axvline(
                    summary["paper_eq_2_16"][i], color="r", ls=":", lw=1.5, label="m − h (Eq. 2.16)"
                )
            ax.set_title(label, fontsize=9)
            ax.set_xlabel("Q")
            ax.set_ylabel("count")
            ax.legend(fontsize=7)
        figure.suptitle(title, fontsize=10)
        figure.tight_layout()
        figures[name] = figure
    return figures


experiment(
    "q-distribution",
    seed_ref="seed 001, Figs 2.2-2.3; Eqs 2.14-2.17",
    description=(
        "histograms of the conserved Q at Xavier init (N(0,1/fan_in), Eq. 2.15) for linear nets "
        "(several (m,h,n); the paper's tuples are not given, chosen here) and for elementwise "
        "nonlinear nets with X = I (Eq. 2.17), against the closed-form mean and variance"
    ),
    presets={
        "quick": QDistributionConfig(samples=500),
        "paper": QDistributionConfig(samples=1000),
    },
    claims=[
        Claim(
            "the histograms of Q at Xavier init are centred at Eq. 2.16's E[Q]",
            f"{SOURCE}, Fig 2.2, Eq. 2.16 (erratum: (m − h)/2 with Eq. 2.14's ½)",
            "centre = (m − h)/2 within 4 standard errors (the printed m − h is off by (m − h)/2)",
            lambda r: (
                f"means {[round(v, 2) for v in r.metrics['linear_means']]} vs (m−h)/2 = "
                f"{r.metrics['linear_predicted_means']} (printed m−h: "
                f"{r.metrics['linear_paper_means']}); worst "
                f"{r.metrics['linear_mean_error_in_standard_errors']:.2f} s.e.",
                r.metrics["linear_mean_error_in_standard_errors"] <= 4.0,
            ),
        ),
        Claim(
            "Xavier init puts Q in a narrow band (linear nets)",
            f"{SOURCE}, §2.6, Fig 2.2",
            "std(Q) small against the terms Q is a difference of: relative spread < 0.1",
            lambda r: (
                f"stds {[round(v, 2) for v in r.metrics['linear_stds']]}; relative spread ≤ "
                f"{r.metrics['linear_max_relative_spread']:.3f}",
                r.metrics["linear_max_relative_spread"] < 0.1,
            ),
        ),
        Claim(
            "with elementwise nonlinearities Q is also concentrated in a small range",
            f"{SOURCE}, Fig 2.3 (m = h = n = 100)",
            "relative spread < 0.1 for every activation",
            lambda r: (
                {k: round(v, 3) for k, v in r.metrics["nonlinear_relative_spread"].items()},
                max(r.metrics["nonlinear_relative_spread"].values()) < 0.1,
            ),
        ),
    ],
    plot=plot_q_distribution,
)(single_threaded(run_q_distribution))


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
        w1, w2, _ = initial_weights(m, h, n, activation, config.q_targets, generator)
        q0, _ = elementwise_q(activation, w1, w2)
        result = batched_gradient_descent(
            activation, w1, w2, target, config.learning_rate, config.steps, stop_below=bar
        )
        converged = steps_to_threshold(result.losses, bar)
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
        rho[activation] = spearman(q0.tolist(), converged)
        rho_abs[activation] = spearman(q0.abs().tolist(), converged)
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
            for key, value in zip(
                table,
                (lam, step, t, float(losses[b, step]), distance, float(bound.max())),
                strict=True,
            ):
                table[key].append(value)
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


def _rho_text(rho: dict[str, float]) -> str:
    return ", ".join(f"{k}: {v:+.2f}" for k, v in rho.items())


experiment(
    "q-convergence",
    seed_ref="seed 001, Figs 2.4-2.5; Props 2.7.1-2.7.3",
    description=(
        "loss vs GD step for inits with different conserved Q: two-layer nets U σ(Vᵀ) with "
        "whitened input (Fig 2.4; loss ‖Y − Uσ(Vᵀ)‖² without ½, lr 1e-3, Q set by init "
        "variances at fixed product; steps and Q values chosen here) and the radial net with "
        "spectral init (Fig 2.5; quick lr 1e-3, paper lr 1e-5, same gradient-flow time 12)"
    ),
    presets={
        "quick": QConvergenceConfig(),
        "paper": QConvergenceConfig(
            q_targets=(-80.0, -60.0, -40.0, -20.0, 0.0, 20.0, 40.0, 60.0, 80.0),
            steps=20000,
            radial_learning_rate=1e-5,
            radial_steps=1_200_000,
        ),
    },
    claims=[
        Claim(
            "the conserved Q changes how many steps GD needs to converge, in linear and "
            "elementwise nonlinear nets",
            f"{SOURCE}, Fig 2.4",
            "steps to convergence differ by ≥ 1.5× across the Q values, for every activation",
            lambda r: (
                {k: round(v, 2) for k, v in r.metrics["steps_max_over_min"].items()},
                all(v >= 1.5 for v in r.metrics["steps_max_over_min"].values()),
            ),
        ),
        Claim(
            "the number of steps to (near) convergence correlates with Q",
            f"{SOURCE}, Fig 2.4 (direction not stated)",
            "|Spearman ρ(Q, steps)| ≥ 0.8 for every activation (monotone in Q)",
            lambda r: (
                f"ρ(Q, steps) {_rho_text(r.metrics['spearman_q_steps'])}; ρ(|Q|, steps) "
                f"{_rho_text(r.metrics['spearman_abs_q_steps'])}",
                all(abs(v) >= 0.8 for v in r.metrics["spearman_q_steps"].values()),
            ),
        ),
        Claim(
            "radial net with spectral init: smaller λ = ū² + v̄² converges faster",
            f"{SOURCE}, Fig 2.5, Prop 2.7.3",
            "convergence time strictly increasing in λ (every run converges)",
            lambda r: (
                f"λ {r.metrics['radial_lambdas']} → t "
                f"{[round(t, 4) for t in r.metrics['radial_convergence_times']]}",
                r.metrics["radial_time_increasing_in_lambda"],
            ),
        ),
        Claim(
            "|σ_i^X(t) − σ_i^Y| ≤ |σ_i^X(0) − σ_i^Y| e^{−t/λ_i}",
            f"{SOURCE}, Prop 2.7.3",
            "measured / bound ≤ 1 (up to the O(lr) discretisation of GD)",
            lambda r: (
                f"max ratio {r.metrics['radial_worst_bound_ratio']:.4f}",
                r.metrics["radial_worst_bound_ratio"] <= 1.0 + 1e-3,
            ),
        ),
    ],
    plot=plot_q_convergence,
)(single_threaded(run_q_convergence))


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
    table: dict[str, list[Any]] = {
        key: []
        for key in (
            "q",
            "q_final",
            "u",
            "v",
            "u_predicted",
            "v_predicted",
            "eigenvalue",
            "sqrt_q2_plus_4",
            "paper_2_sqrt_q2_plus_4",
            "zero_eigenvalues",
        )
    }
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
        for key, value in zip(table, values, strict=True):
            table[key].append(value)
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
    runs: dict[str, list[Any]] = {
        key: []
        for key in (
            "panel",
            "q",
            "loss",
            "near_zero",
            "orbit_dimension",
            "nonzero_median",
            "nonzero_mean",
        )
    }
    rho: dict[str, float] = {}
    for activation, scheme in progress.track(config.panels, description="Fig 2.7 panels"):
        label = f"{activation}/{scheme}"
        targets = config.q_targets if scheme == "product" else config.outgoing_q_targets
        w1, w2, _ = initial_weights(m, h, n, activation, targets, generator, scheme)
        q0, _ = elementwise_q(activation, w1, w2)
        trained = batched_gradient_descent(
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
                model, sum_squares, (x, target), params=params, threshold=config.threshold
            )
            nonzero = [e for e in flat.eigenvalues if abs(e) > config.threshold]
            spectrum["panel"] += [label] * len(nonzero)
            spectrum["q"] += [q] * len(nonzero)
            spectrum["eigenvalue"] += nonzero
            for key, value in zip(
                runs,
                (
                    label,
                    q,
                    flat.loss,
                    flat.near_zero,
                    flat.orbit_dimension,
                    flat.nonzero_median,
                    flat.nonzero_mean,
                ),
                strict=True,
            ):
                runs[key].append(value)
        own = [i for i, p in enumerate(runs["panel"]) if p == label]
        rho[label] = spearman([runs["q"][i] for i in own], [runs["nonzero_median"][i] for i in own])
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
    return f"ρ = {value:+.2f} (nonlinear: {_rho_text(others)})", value >= 0.8 - 1e-9


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
    presets={
        "quick": QSharpnessConfig(),
        "paper": QSharpnessConfig(
            q_targets=(-60.0, -40.0, -30.0, -20.0, -10.0, 0.0, 10.0, 20.0, 40.0),
            steps=20000,
            loss_tolerance=1e-14,
        ),
    },
    claims=[
        Claim(
            "in the 1-D example, Q = 0 is the flattest point of the minimum",
            f"{SOURCE}, §2.8.1, Fig 2.1",
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
            f"{SOURCE}, Eq. 2.53 (erratum: printed 2√(Q² + 4))",
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
            f"{SOURCE}, Fig 2.7(a)",
            "Spearman ρ(Q, median nonzero eigenvalue) ≥ 0.8",
            lambda r: _sharpness_check(r, "identity/outgoing"),
        ),
        Claim(
            "... and when Q is set at a fixed product of the stds (both sides of the balanced "
            "point)",
            f"{SOURCE}, Fig 2.7(a)",
            "Spearman ρ(Q, median nonzero eigenvalue) ≥ 0.8",
            lambda r: _sharpness_check(r, "identity/product"),
        ),
    ],
    plot=plot_q_sharpness,
)(single_threaded(run_q_sharpness))


# == q-drift (Fig A.1) ===========================================================================


@dataclass(frozen=True)
class QDriftConfig:
    """Settings of ``q-drift`` (Fig A.1: the setup of Fig 2.4 at three learning rates).

    Attributes:
        seed: randomness of Y and of the (Xavier, Eq. 2.15) initialisation.
        outputs, hidden, inputs: m, h, n (Y ∈ R^{5×10}, U ∈ R^{5×50}, V ∈ R^{10×50}).
        activations: σ (the paper: identity, ReLU, sigmoid, tanh).
        learning_rates: the paper's 0.1, 0.01, 0.001 (same init and steps for all).
        steps: GD steps (not given in the paper).
        every: Q is recorded every this many steps.
        threshold: the loss has converged when L ≤ threshold·‖Y‖²_F.
        loss: ``"sum"`` (‖Y − Uσ(Vᵀ)‖²_F, as printed for Fig 2.4) or ``"mean"`` (divided by
            the n·m entries, i.e. the learning rates divided by n·m); the paper does not say.
    """

    seed: int = 0
    outputs: int = 5
    hidden: int = 50
    inputs: int = 10
    activations: tuple[str, ...] = ("identity", "relu", "sigmoid", "tanh")
    learning_rates: tuple[float, ...] = (0.1, 0.01, 0.001)
    steps: int = 3000
    every: int = 10
    threshold: float = 1e-3
    loss: str = "sum"


def run_q_drift(config: QDriftConfig, progress: Progress) -> Result:
    generator = torch.Generator().manual_seed(config.seed)
    m, h, n = config.outputs, config.hidden, config.inputs
    target = torch.randn(n, m, generator=generator, dtype=torch.float64)
    bar = config.threshold * float((target**2).sum())
    if config.loss not in ("sum", "mean"):
        raise ps.InvalidArgumentError(f"q-drift: loss must be 'sum' or 'mean', got {config.loss!r}")
    per_entry = 1.0 if config.loss == "sum" else 1.0 / (n * m)
    lrs = per_entry * torch.tensor(config.learning_rates, dtype=torch.float64)
    table: dict[str, list[Any]] = {
        "activation": [],
        "lr": [],
        "step": [],
        "relative_change": [],
        "loss": [],
    }
    final: dict[str, list[float]] = {}
    after: dict[str, list[float]] = {}
    diverged = 0
    for activation in progress.track(config.activations, description="Fig A.1 activations"):
        w1 = torch.randn(h, n, generator=generator, dtype=torch.float64) / math.sqrt(n)
        w2 = torch.randn(m, h, generator=generator, dtype=torch.float64) / math.sqrt(h)
        runs = len(config.learning_rates)
        result = batched_gradient_descent(
            activation,
            w1.expand(runs, h, n),
            w2.expand(runs, m, h),
            target,
            lrs,
            config.steps,
            keep_every=config.every,
        )
        q = torch.stack(
            [
                elementwise_q(activation, a, b)[0]
                for a, b in zip(result.incoming, result.outgoing, strict=True)
            ]
        )
        _, size = elementwise_q(activation, result.incoming[0], result.outgoing[0])
        change = (q - q[0]) / size  # (checkpoints, runs): signed ΔQ̃ of App. A.4.2
        converged = steps_to_threshold(result.losses, bar)
        final[activation], after[activation] = [], []
        for b, lr in enumerate(config.learning_rates):
            ok = bool(torch.isfinite(change[:, b]).all())
            diverged += not ok
            final[activation].append(float(change[-1, b].abs()) if ok else math.nan)
            after[activation].append(_late_share(result.checkpoints, change[:, b], converged[b]))
            for i, step in enumerate(result.checkpoints):
                for key, value in zip(
                    table,
                    (activation, lr, step, float(change[i, b]), float(result.losses[b, step])),
                    strict=True,
                ):
                    table[key].append(value)
    metrics = {
        "final_abs_relative_change": final,
        "max_abs_relative_change": float(np.nanmax([np.abs(table["relative_change"])])),
        "largest_lr_largest_change": {
            a: bool(np.nanargmax(v) == int(np.argmax(config.learning_rates)))
            for a, v in final.items()
        },
        "change_ratio_across_lrs": {
            a: float(np.nanmax(v) / np.nanmin(v)) for a, v in final.items()
        },
        "share_after_convergence": after,
        "diverged_runs": diverged,
        "convergence_threshold": bar,
    }
    notes = [
        "ΔQ̃ = (Q(t) − Q(0)) / (|½‖U₀‖²| + |ΣF_σ(V₀)|) (App. A.4.2; signed, the library's "
        "ConservedTracker.relative_trace_change), Q of Eq. 2.17.",
        "share_after_convergence: the part of the final |ΔQ̃| accumulated after the loss first "
        f"fell below {config.threshold:g}·‖Y‖² (NaN if it never did).",
    ]
    return Result(metrics, {"drift": table}, notes)


def _late_share(checkpoints: list[int], change: Tensor, converged_at: float) -> float:
    """|ΔQ̃(T) − ΔQ̃(t_c)| / |ΔQ̃(T)|, t_c the first checkpoint at or after convergence."""
    later = [i for i, s in enumerate(checkpoints) if s >= converged_at]
    total = float(change[-1].abs())
    if math.isnan(converged_at) or not later or total == 0.0 or not math.isfinite(total):
        return math.nan
    return float((change[-1] - change[later[0]]).abs()) / total


def plot_q_drift(result: Result) -> dict[str, Any]:
    table = result.series["drift"]
    activations = list(dict.fromkeys(table["activation"]))
    lrs = list(dict.fromkeys(table["lr"]))
    figure, axes = plt.subplots(
        2, len(activations), figsize=(3.8 * len(activations), 6.4), squeeze=False
    )
    colours = plt.get_cmap("plasma")
    for j, activation in enumerate(activations):
        for i, lr in enumerate(lrs):
            rows = [
                (s, c, loss)
                for a, r, s, c, loss in zip(
                    table["activation"],
                    table["lr"],
                    table["step"],
                    table["relative_change"],
                    table["loss"],
                    strict=True,
                )
                if a == activation and r == lr
            ]
            colour = colours(i / max(1, len(lrs)))
            axes[0, j].plot(
                [r[0] for r in rows], [abs(r[1]) for r in rows], color=colour, label=f"lr = {lr:g}"
            )
            axes[1, j].plot(
                [r[0] for r in rows], [r[2] for r in rows], color=colour, label=f"lr = {lr:g}"
            )
        axes[0, j].set_title(activation)
        axes[0, j].set_yscale("symlog", linthresh=1e-8)
        axes[0, j].set_ylabel("|ΔQ̃|")
        axes[1, j].set_yscale("log")
        axes[1, j].set_ylabel("loss")
        axes[1, j].set_xlabel("GD step")
        for ax in axes[:, j]:
            ax.set_xscale("symlog", linthresh=10)  # the drift happens in the first steps
            ax.set_xlim(left=0)
        axes[0, j].legend(fontsize=7)
    figure.suptitle("Fig A.1: drift of the conserved Q under gradient descent", fontsize=10)
    figure.tight_layout()
    return {"drift.png": figure}


experiment(
    "q-drift",
    seed_ref="seed 001, Fig A.1; App. A.4",
    description=(
        "relative change ΔQ̃ of Eq. 2.17's Q and the loss under full-batch GD at lr 0.1, 0.01, "
        "0.001 (setup of Fig 2.4: Y 5×10, U 5×50, V 10×50, X = I, loss ‖Y − Uσ(Vᵀ)‖² without "
        "½ (loss=mean divides it by nm), Xavier init, the same init and number of steps for "
        "every lr; steps chosen here)"
    ),
    presets={
        "quick": QDriftConfig(),
        "paper": QDriftConfig(steps=20000, every=20),
    },
    claims=[
        Claim(
            "GD changes Q only a little compared with the terms it is a difference of",
            f"{SOURCE}, Fig A.1, App. A.4.2",
            "|ΔQ̃| ≤ 0.1 in every run",
            lambda r: (
                f"max |ΔQ̃| = {r.metrics['max_abs_relative_change']:.2e} "
                f"({r.metrics['diverged_runs']} diverged runs)",
                r.metrics["max_abs_relative_change"] <= 0.1 and r.metrics["diverged_runs"] == 0,
            ),
        ),
        Claim(
            "the largest learning rate gives the largest change of Q",
            f"{SOURCE}, Fig A.1",
            "final |ΔQ̃| largest at lr 0.1, for every activation",
            lambda r: (
                r.metrics["largest_lr_largest_change"],
                all(r.metrics["largest_lr_largest_change"].values()),
            ),
        ),
        Claim(
            "... but the changes at the three learning rates are of the same order of magnitude",
            f"{SOURCE}, Fig A.1",
            "max / min final |ΔQ̃| over the lrs < 10, for every activation",
            lambda r: (
                {k: round(v, 1) for k, v in r.metrics["change_ratio_across_lrs"].items()},
                all(v < 10 for v in r.metrics["change_ratio_across_lrs"].values()),
            ),
        ),
        Claim(
            "Q stops changing once the loss has converged",
            f"{SOURCE}, Fig A.1",
            "≤ 5% of the final |ΔQ̃| accrues after the loss reaches 1e-3·‖Y‖² (runs that do)",
            lambda r: _late_check(r.metrics["share_after_convergence"]),
        ),
    ],
    plot=plot_q_drift,
)(single_threaded(run_q_drift))


def _late_check(shares: dict[str, list[float]]) -> tuple[str, bool]:
    values = [v for vs in shares.values() for v in vs if math.isfinite(v)]
    if not values:
        return "no run converged", False
    return f"max share {max(values):.3f} over {len(values)} converged runs", max(values) <= 0.05
