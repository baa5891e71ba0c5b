"""``symmetry-null-space`` (seed 003, §5.4 and §6, Corollary 4; note 003 §5 items 8 and 13).

§5.4: at a stationary point every symmetry direction is a Hessian null vector (HJ = 0; off it,
HJ = −(∂J)ᵀ∇L), so H has ≥ rank[J₁ … J_k] zeros: r² for the GL(r) of a deep linear net W₂W₁ at
a generic realisable minimum. Corollary 4: at a fixed point of a mirror R = I − 2OOᵀ,
Oᵀ∇L = 0 and Oᵀ H (I − OOᵀ) = 0 (a tanh net's neuron swap and sign flip). The paper has no
experiment; the figure is what it predicts. Dense Hessians throughout (small P).
"""

# ruff: noqa: E741  (O is the paper's name for the mirror's orthonormal basis)

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import torch
from torch import Tensor, nn

import paramsym as ps
from paramsym.conserved.base import loss_gradient
from paramsym.core.tables import Table, append_row, empty_table
from paramsym.curvature import hessian
from paramsym.equivariance.mirror import (
    mirror_fixed_point,
    mirror_identities,
    neuron_swap_mirror,
    sign_flip_mirror,
)
from paramsym.equivariance.stationarity import StationaryNullSpace, stationary_null_space
from paramsym.experiments.registry import Claim, Progress, Result, experiment
from paramsym.experiments.threads import single_threaded

F64 = torch.float64
EXACT = 1e-9
Params = dict[str, Tensor]


@dataclass(frozen=True)
class NullSpaceConfig:
    """Settings of ``symmetry-null-space`` (the paper has no experiment: all chosen here).

    Attributes:
        seed: teacher, data, initialisations, perturbation directions.
        inputs, outputs, rank: the linear teacher x ↦ Mx, M (outputs × inputs) of rank r.
        samples: n inputs x ~ N(0, I) (n ≥ inputs: the data span every input direction).
        hidden: inner widths h of the trained students (h = rank: generic; h > rank:
            over-parameterised, a minimum set larger than the GL orbit).
        train_lr, train_steps, polish_tol: GD until ‖∇L‖ ≤ 1e-5 (at most train_steps), then
            pseudo-inverse Newton steps until ‖∇L‖ ≤ polish_tol.
        zero_tol: an eigenvalue is zero when |λ| ≤ zero_tol·‖H‖₂.
        scales: distances ‖θ − θ*‖/‖θ*‖ of the off-minimum points (random direction).
        tanh_widths: the tanh net (with biases) of the mirror checks; samples as above.
        distances: ‖Oᵀθ‖ of the points off each mirror's fixed set (negative control).
    """

    seed: int = 0
    inputs: int = 6
    outputs: int = 5
    rank: int = 2
    samples: int = 12
    hidden: tuple[int, ...] = (2, 3)
    train_lr: float = 0.5
    train_steps: int = 5000
    polish_tol: float = 1e-13
    zero_tol: float = 1e-8
    scales: tuple[float, ...] = (1e-8, 1e-6, 1e-4, 1e-2, 1e-1)
    tanh_widths: tuple[int, ...] = (3, 4, 2)
    distances: tuple[float, ...] = (1e-8, 1e-6, 1e-4, 1e-2, 1e-1, 1.0)


def _gl_generators(h: int) -> list[Callable[[Params], Params]]:
    """J_ab(θ) = (−E_ab W₁, W₂ E_ab): W₁ ↦ e^{−gE}W₁, W₂ ↦ W₂e^{gE}, a symmetry of W₂W₁."""

    def direction(E: Tensor) -> Callable[[Params], Params]:
        def j(p: Params) -> Params:
            return {"0.weight": -E @ p["0.weight"], "2.weight": p["2.weight"] @ E}

        return j

    return [direction(E) for E in torch.eye(h * h, dtype=F64).reshape(h * h, h, h)]


def _add(table: Table, row: dict[str, Any]) -> None:
    """Append the values of ``row`` named by the table's columns."""
    append_row(table, *(row[column] for column in table))


def _train(config: NullSpaceConfig, model: nn.Module, batch: tuple[Tensor, Tensor]) -> Params:
    """GD to ‖∇L‖ ≤ 1e-5, then (at most 10) pseudo-inverse Newton steps to ‖∇L‖ ≤ polish_tol."""
    point, loss_fn = ps.params_of(model), nn.MSELoss()

    def gradient_at(p: Params) -> tuple[Tensor, float]:
        g = ps.flatten(loss_gradient(model, loss_fn, batch, p))
        return g, float(torch.linalg.vector_norm(g))

    for _ in range(config.train_steps):
        gradient, norm = gradient_at(point)
        if norm <= 1e-5:
            break
        point = ps.unflatten(ps.flatten(point) - config.train_lr * gradient, point)
    for _ in range(10):
        gradient, norm = gradient_at(point)
        if norm <= config.polish_tol:
            break
        values, vectors = torch.linalg.eigh(hessian(model, loss_fn, batch, point))
        keep = values.abs() > 1e-10 * values.abs().max()
        g = vectors.T @ gradient
        point = ps.unflatten(ps.flatten(point) - vectors[:, keep] @ (g[keep] / values[keep]), point)
    return point


def _minimum_row(
    name: str, h: int, point: Params, result: StationaryNullSpace, dims: tuple[int, int]
) -> dict[str, Any]:
    """One row of the minima table; ``predicted_zeros`` = P − dim{dW₂W₁ + W₂dW₁}, the
    dimension count of the null space of FᵀF at a realisable minimum (data spanning R^i)."""
    ranks = [
        int((sv > 1e-8 * sv[0]).sum())
        for sv in (torch.linalg.svdvals(point["0.weight"]), torch.linalg.svdvals(point["2.weight"]))
    ]
    size, (i, o) = ps.flatten(point).numel(), dims
    relative = sorted(abs(v) / result.hessian_norm for v in result.smallest_eigenvalues)
    zeros = result.zero_count
    gap = relative[zeros] / max(relative[zeros - 1], 1e-300) if 0 < zeros < size else math.inf
    return {
        **result.to_dict(),
        **{"case": name, "hidden": h, "parameters": size, "gap": gap},
        "predicted_zeros": size - (o * ranks[0] + i * ranks[1] - ranks[0] * ranks[1]),
        "null_residual": max(result.null_residuals),
        "away_residual": max(result.away_residuals),
        "orthogonality_residual": max(result.orthogonality_residuals),
    }


def _linear_cases(config: NullSpaceConfig, tables: dict[str, Table]) -> None:
    """§5.4 at the constructed and the trained minima, and off the constructed one."""
    generator = torch.Generator().manual_seed(config.seed)
    i, o, r = config.inputs, config.outputs, config.rank
    x = torch.randn(config.samples, i, generator=generator, dtype=F64)
    left, right = (
        torch.randn(*shape, generator=generator, dtype=F64) for shape in ((o, r), (r, i))
    )
    teacher = left @ right / math.sqrt(r * i)
    exact = ps.mlp([i, r, o], "identity", bias=False, seed=config.seed, dtype=F64)
    with torch.no_grad():  # targets the student's own output: L = 0 and ∇L = 0 exactly
        y_exact = exact(x)
    cases = [("constructed", r, exact, (x, y_exact), ps.params_of(exact))]
    for h in config.hidden:
        model = ps.mlp([i, h, o], "identity", bias=False, seed=config.seed + h, dtype=F64)
        batch = (x, x @ teacher.T)
        cases.append((f"trained h={h}", h, model, batch, _train(config, model, batch)))
    loss_fn = nn.MSELoss()
    for name, h, model, batch, point in cases:
        result = stationary_null_space(
            model, loss_fn, batch, _gl_generators(h), point, dense=True, zero_tol=config.zero_tol
        )
        _add(tables["minima"], _minimum_row(name, h, point, result, (i, o)))
        for index, value in enumerate(result.smallest_eigenvalues):
            append_row(tables["spectrum"], name, index, value, abs(value) / result.hessian_norm)
    theta = ps.flatten(cases[0][4])
    direction = torch.randn(theta.shape, generator=generator, dtype=F64)
    direction *= float(torch.linalg.vector_norm(theta) / torch.linalg.vector_norm(direction))
    for scale in config.scales:
        point = ps.unflatten(theta + scale * direction, cases[0][4])
        result = stationary_null_space(
            exact, loss_fn, (x, y_exact), _gl_generators(r), point, dense=True
        )
        _add(tables["off_minimum"], {"scale": scale, **_minimum_row("", r, point, result, (i, o))})


MIRRORS: dict[str, Callable[[Params], Tensor]] = {
    "swap neurons 0 and 1": lambda p: neuron_swap_mirror(
        p, ["0.weight", "0.bias"], ["2.weight"], 0, 1
    ),
    "sign flip of neuron 2": lambda p: sign_flip_mirror(p, ["0.weight", "0.bias"], ["2.weight"], 2),
}


def _mirror_cases(config: NullSpaceConfig, tables: dict[str, Table]) -> dict[str, float]:
    """Corollary 4 at each mirror's fixed point and at distances ‖Oᵀθ‖ off it."""
    if len(config.tanh_widths) != 3 or config.tanh_widths[1] < 3:
        raise ps.InvalidArgumentError("symmetry-null-space: tanh_widths is (in, ≥ 3, out)")
    generator = torch.Generator().manual_seed(config.seed + 1)
    model = ps.mlp(config.tanh_widths, "tanh", seed=config.seed, dtype=F64)
    x = torch.randn(config.samples, config.tanh_widths[0], generator=generator, dtype=F64)
    y = torch.randn(config.samples, config.tanh_widths[-1], generator=generator, dtype=F64)
    batch, loss_fn, start = (x, y), nn.MSELoss(), ps.params_of(model)
    theta = ps.flatten(start)
    invariance = 0.0
    for name, build in MIRRORS.items():
        O = build(start)
        reflected = ps.unflatten(theta - 2 * O @ (O.T @ theta), start)
        before = float(loss_fn(ps.functional_call(model, start, x), y))
        after = float(loss_fn(ps.functional_call(model, reflected, x), y))
        invariance = max(invariance, abs(after - before) / before)  # L(Rθ) = L(θ): a symmetry
        fixed = mirror_fixed_point(start, O)
        u = torch.randn(O.shape[1], generator=generator, dtype=F64)
        u /= torch.linalg.vector_norm(u)
        for distance in (0.0, *config.distances):
            point = ps.unflatten(ps.flatten(fixed) + distance * (O @ u), start)
            H = hessian(model, loss_fn, batch, point)
            norm = float(torch.linalg.matrix_norm(H, ord=2))
            check = distance == 0.0
            result = mirror_identities(
                model, loss_fn, batch, O, point, hessian_norm=norm, check_fixed_point=check
            )
            _add(tables["mirror"], {**result.to_dict(), "mirror": name})
            if name == next(iter(MIRRORS)) and distance in (0.0, max(config.distances)):
                basis = torch.linalg.qr(O, mode="complete").Q  # span(O) first, then its ⊥
                rotated = (basis.T @ H @ basis).abs() / norm
                for (a, b), value in np.ndenumerate(rotated.numpy()):
                    append_row(tables["heatmap"], distance, a, b, float(value), O.shape[1])
    return {"loss_invariance": invariance}


def _slope(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope of log y against log x."""
    return float(np.polyfit(np.log(xs), np.log(ys), 1)[0])


def run_null_space(config: NullSpaceConfig, progress: Progress) -> Result:
    """§5.4 on the deep linear minima and Corollary 4 on the tanh mirrors."""
    tables = {
        "minima": empty_table(
            "case hidden parameters rank zero_count predicted_zeros gap gradient_norm "
            "null_residual away_residual orthogonality_residual hessian_norm"
        ),
        "spectrum": empty_table("case index eigenvalue relative"),
        "off_minimum": empty_table("scale gradient_norm null_residual away_residual"),
        "mirror": empty_table("mirror distance gradient_residual hessian_residual gradient_norm"),
        "heatmap": empty_table("distance row column value rank"),
    }
    progress.log("deep linear minima (§5.4)")
    _linear_cases(config, tables)
    progress.log("tanh mirrors (Corollary 4)")
    extra = _mirror_cases(config, tables)
    minima, off, mirror = tables["minima"], tables["off_minimum"], tables["mirror"]
    cases = {
        minima["case"][k]: {c: minima[c][k] for c in minima if c != "case"}
        for k in range(len(minima["case"]))
    }
    per_mirror: dict[str, dict[str, float]] = {}
    for name in MIRRORS:
        rows = [k for k, m in enumerate(mirror["mirror"]) if m == name]
        small = [k for k in rows[1:] if mirror["distance"][k] <= 1e-2]
        per_mirror[name] = {}
        for kind in ("gradient", "hessian"):
            column = mirror[f"{kind}_residual"]
            per_mirror[name][f"fixed_{kind}_residual"] = column[rows[0]]
            per_mirror[name][f"farthest_{kind}_residual"] = column[rows[-1]]
            distances = [mirror["distance"][k] for k in small]
            per_mirror[name][f"{kind}_slope"] = _slope(distances, [column[k] for k in small])
    metrics: dict[str, Any] = {
        "teacher_rank": config.rank,
        "minima": cases,
        "max_null_residual_at_minima": max(minima["null_residual"]),
        "max_gradient_norm_at_minima": max(minima["gradient_norm"]),
        "off_minimum_max_away_residual": max(off["away_residual"]),
        "off_minimum_null_slope": _slope(off["gradient_norm"], off["null_residual"]),
        "off_minimum_largest_null_residual": off["null_residual"][-1],
        "mirrors": per_mirror,
        **extra,
    }
    notes = [
        "Deep linear net x ↦ W₂W₁x (bias-free, float64), L = mean squared error over n samples. "
        "'constructed': a random student (PyTorch init, h = r) whose own outputs are the "
        "targets, so L = 0 and ∇L = 0 exactly. 'trained h': a student of inner width h fitted "
        "to a rank-r teacher (product of Gaussian factors / √(ri)) by GD, then Newton steps "
        "with the pseudo-inverse of the dense Hessian (eigenvalues above 1e-10·‖H‖₂), a "
        "realisable global minimum reached by training.",
        f"Generators: the {config.rank}² (or h²) matrix units E_ab of gl(h), J_ab = "
        "(−E_ab W₁, W₂E_ab); rank J = rank of the stacked (P, h²) matrix (singular values above "
        "max(P, h²)·eps·σ_max). Zero count: eigenvalues of the dense Hessian (torch.linalg."
        f"eigvalsh) with |λ| ≤ {config.zero_tol:g}·‖H‖₂. Null residual: ‖HJ‖/(‖H‖₂‖J‖); away "
        "residual: the identity HJ = −(∂J)ᵀ∇L, exact at every θ (stationary_null_space).",
        "Off the minimum: θ* + s·‖θ*‖·d (d a random unit direction) for s in scales; the null "
        "residual should grow like ‖∇L‖ (slope 1 in log–log) while the away identity stays "
        "exact.",
        "Mirrors (Corollary 4) on a tanh net with biases, random regression targets (not at a "
        "minimum: Corollary 4 holds at every fixed point): O from neuron_swap_mirror (neurons 0 "
        "and 1: incoming row, bias, outgoing column) and sign_flip_mirror (neuron 2); the "
        "fixed point is the projection θ − OOᵀθ of PyTorch's init; the off-set points move a "
        "distance ‖Oᵀθ‖ along a random direction of span(O). Residual scales as in "
        "mirror_identities, with ‖H‖₂ from the dense Hessian. Slopes: log–log fits over "
        "distances ≤ 1e-2.",
        "Expected zero count at a realisable minimum (data spanning R^i): P − dim{dW₂W₁ + "
        "W₂dW₁} = P − (o·rank W₁ + i·rank W₂ − rank W₁·rank W₂) (predicted_zeros; ranks at "
        "1e-8·σ_max). It is r² = rank J when h = r; when h > r one factor is rank-deficient "
        "and the zero count exceeds rank J. gap: the smallest |λ| above the threshold over the "
        "largest at or below it.",
        "Heatmap: |BᵀHB|/‖H‖₂ with B = [O, O⊥] (complete QR of O) for the swap mirror, at the "
        "fixed point and at the largest distance: Corollary 4 says the off-diagonal blocks "
        "vanish on the fixed set.",
    ]
    return Result(metrics, tables, notes)


def _generic_check(result: Result) -> tuple[dict[str, str], bool]:
    """Zero count ≥ rank J everywhere, = rank J = r² at the minima with h = r."""
    r, holds, measured = result.metrics["teacher_rank"], True, {}
    for case, v in result.metrics["minima"].items():
        measured[case] = (
            f"{v['zero_count']} zeros (dimension count {v['predicted_zeros']}, gap "
            f"{v['gap']:.1e}), rank J {v['rank']}"
        )
        holds &= v["zero_count"] >= v["rank"]
        if v["hidden"] == r:  # a generic minimum: equality, r² zeros
            holds &= v["zero_count"] == v["rank"] == r * r
    return measured, holds


def _mirror_check(result: Result, prefix: str) -> tuple[dict[str, Any], bool]:
    """Corollary 4 at the fixed points (``prefix="fixed"``) or the negative control."""
    values = {
        name: [v[f"{prefix}_gradient_residual"], v[f"{prefix}_hessian_residual"]]
        for name, v in result.metrics["mirrors"].items()
    }
    if prefix == "fixed":
        invariance = result.metrics["loss_invariance"]
        holds = invariance <= EXACT and all(max(v) <= EXACT for v in values.values())
        return {"residuals": values, "|L(Rθ) − L(θ)|/L": invariance}, holds
    slopes = {
        name: [v["gradient_slope"], v["hessian_slope"]]
        for name, v in result.metrics["mirrors"].items()
    }
    holds = all(min(v) > 1e-3 for v in values.values()) and all(
        0.8 <= s <= 1.2 for v in slopes.values() for s in v
    )
    return {"farthest": values, "slopes": slopes}, holds


CLAIMS = [
    Claim(
        "at a stationary point every symmetry direction is a Hessian null vector, HJ = 0",
        "seed 003, §5.4; note 003 §5 item 8",
        "‖HJ‖/(‖H‖‖J‖) ≤ 1e-9 for every GL generator at every minimum",
        lambda r: (
            [r.metrics["max_null_residual_at_minima"], r.metrics["max_gradient_norm_at_minima"]],
            r.metrics["max_null_residual_at_minima"] <= EXACT,
        ),
    ),
    Claim(
        "H has at least rank[J₁ … J_k] zero eigenvalues; r² for UV at a generic minimum",
        "seed 003, §5.4; note 003 §5 item 8",
        "zero count ≥ rank J at every minimum, = rank J = r² where h = r (h > r: excess reported)",
        _generic_check,
    ),
    Claim(
        "off stationarity HJ = −(∂J)ᵀ∇L, so ‖HJ‖ grows with ‖∇L‖",
        "seed 003, §5.4 (item 2a with K = 0); note 003 §5 items 7–8",
        "identity ≤ 1e-9 at every perturbed point; log–log slope of ‖HJ‖ against ‖∇L‖ in [0.8, "
        "1.2]",
        lambda r: (
            [r.metrics["off_minimum_max_away_residual"], r.metrics["off_minimum_null_slope"]],
            r.metrics["off_minimum_max_away_residual"] <= EXACT
            and 0.8 <= r.metrics["off_minimum_null_slope"] <= 1.2,
        ),
    ),
    Claim(
        "Corollary 4: Oᵀ∇L = 0 and Oᵀ H (I − OOᵀ) = 0 at a mirror's fixed point",
        "seed 003, §6 (Corollary 4); note 003 §5 item 13",
        "both residuals ≤ 1e-9 for the neuron swap and the sign flip (and L(Rθ) = L(θ))",
        lambda r: _mirror_check(r, "fixed"),
    ),
    Claim(
        "negative control: off the fixed set neither identity holds",
        "seed 003, §6; note 003 §5 item 13",
        "residuals > 1e-3 at the largest ‖Oᵀθ‖, growing like ‖Oᵀθ‖ (slope in [0.8, 1.2])",
        lambda r: _mirror_check(r, "farthest"),
    ),
]


def _log_panel(ax: Any, title: str, xlabel: str, ylabel: str = "residual") -> None:
    """Log–log axes with a title, labels and a legend."""
    ax.set(xscale="log", yscale="log", title=title, xlabel=xlabel, ylabel=ylabel)
    ax.legend(fontsize=7)


def plot_null_space(result: Result) -> dict[str, Any]:
    """Spectra, zero counts, residuals off the minimum and off the fixed set, heatmaps."""
    s = result.series
    figure, axes = plt.subplots(2, 3, figsize=(15, 8.5))
    minima, spectrum, off, mirror = s["minima"], s["spectrum"], s["off_minimum"], s["mirror"]
    for k, case in enumerate(minima["case"]):
        rows = [j for j, c in enumerate(spectrum["case"]) if c == case]
        values = np.maximum(sorted(spectrum["relative"][j] for j in rows), 1e-20)
        line = axes[0, 0].plot(range(1, len(values) + 1), values, ".-", label=case)
        axes[0, 0].axvline(minima["rank"][k] + 0.5, color=line[0].get_color(), ls=":")
    axes[0, 0].axhline(1e-8, color="grey", ls="--", label="zero threshold")
    _log_panel(
        axes[0, 0],
        "Hessian spectrum at the minima (dotted: rank J)",
        "eigenvalue index",
        "|λ| / ‖H‖₂",
    )
    axes[0, 0].set_xscale("linear")
    width, x = 0.4, np.arange(len(minima["case"]))
    axes[0, 1].bar(x - width / 2, minima["zero_count"], width, label="Hessian zero count")
    axes[0, 1].bar(x + width / 2, minima["rank"], width, label="rank J (GL(h))")
    axes[0, 1].set_xticks(x, minima["case"], fontsize=8)
    axes[0, 1].set_title("zero count ≥ rank J (§5.4)")
    axes[0, 1].legend(fontsize=7)
    axes[0, 2].plot(off["gradient_norm"], off["null_residual"], "o-", label="‖HJ‖/(‖H‖‖J‖)")
    away = np.maximum(off["away_residual"], 1e-18)
    axes[0, 2].plot(off["gradient_norm"], away, "s--", label="HJ = −(∂J)ᵀ∇L (0 drawn at 1e-18)")
    _log_panel(axes[0, 2], "null directions need ∇L = 0", "‖∇L‖ off the constructed minimum")
    for name in dict.fromkeys(mirror["mirror"]):
        rows = [k for k, m in enumerate(mirror["mirror"]) if m == name][1:]
        for kind, style in (("gradient", "o-"), ("hessian", "s--")):
            residual = [mirror[f"{kind}_residual"][k] for k in rows]
            axes[1, 0].plot(
                [mirror["distance"][k] for k in rows], residual, style, label=f"{name}: {kind}"
            )
    _log_panel(axes[1, 0], "Corollary 4 off the fixed set", "‖Oᵀθ‖ (0 on the fixed set)")
    heat = s["heatmap"]
    for ax, distance in zip(axes[1, 1:], sorted(set(heat["distance"])), strict=True):
        rows = [k for k, d in enumerate(heat["distance"]) if d == distance]
        size, r = max(heat["row"][k] for k in rows) + 1, heat["rank"][rows[0]]
        grid = np.zeros((size, size))
        for k in rows:
            grid[heat["row"][k], heat["column"][k]] = heat["value"][k]
        image = ax.imshow(np.log10(np.maximum(grid, 1e-17)), vmin=-17, vmax=0, cmap="magma")
        ax.axhline(r - 0.5, color="cyan", lw=0.8)
        ax.axvline(r - 0.5, color="cyan", lw=0.8)
        ax.set_title(f"log₁₀ |BᵀHB|/‖H‖, B = [O, O⊥], swap, ‖Oᵀθ‖ = {distance:g}", fontsize=9)
        figure.colorbar(image, ax=ax, shrink=0.8)
    figure.suptitle("Symmetry null space (§5.4) and mirror fixed points (Corollary 4), seed 003")
    figure.tight_layout()
    return {"null_space.png": figure}


experiment(
    "symmetry-null-space",
    seed_ref="seed 003, §5.4 and §6 (Corollary 4); no figure in the paper",
    description=(
        "deep linear net W₂W₁ at realisable global minima (constructed, and trained to a "
        "rank-r teacher at inner width h = r and h > r): Hessian zero count against rank J of "
        "the GL(h) generators and ‖HJ‖; a tanh net at the fixed points of a neuron-swap and a "
        "sign-flip mirror: Oᵀ∇L = 0 and OᵀH(I − OOᵀ) = 0, with residuals off the fixed set "
        "(dense Hessians, small P)"
    ),
    quick=NullSpaceConfig(),
    paper=NullSpaceConfig(
        inputs=20,
        outputs=15,
        rank=4,
        samples=40,
        hidden=(4, 6),
        train_steps=20_000,
        tanh_widths=(5, 8, 3),
    ),
    claims=CLAIMS,
    plot=plot_null_space,
)(single_threaded(run_null_space))
