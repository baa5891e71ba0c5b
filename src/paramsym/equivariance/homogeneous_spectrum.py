"""Homogeneous nets and the Hessian spectrum: the sharpness lower bound and Corollary 1 (§5.1).

For an m-homogeneous net (:mod:`paramsym.equivariance.homogeneous_nets`), eq. (4) makes the
Rayleigh quotient of θ computable from output-space quantities alone:

    λ_max(H) ≥ θᵀHθ / ‖θ‖² = [m² fᵀ∇²ℓ(f) f + m(m−1)⟨∇ℓ(f), f⟩] / ‖θ‖²

(:func:`sharpness_bound`; the paper relates its early growth to progressive sharpening, Cohen
et al. 2021, a heuristic). Projecting eq. (3) on an eigenpair (λ_i, v_i) of H gives
**Corollary 1**, true for every output dimension:

    (m−1)⟨∇L, v_i⟩ = λ_i⟨θ, v_i⟩ − m⟨Fᵀ∇²ℓ(f) f, v_i⟩            (:func:`eigen_alignment`)

**Collinearity, only for one scalar.** When the *whole stacked output* is one number (one
sample, d = 1), Fᵀ∇²ℓ f = (fℓ″/ℓ′)∇L and eq. (3) becomes ∇L = c·Hθ with
c = ℓ′ / ((m−1)ℓ′ + m f ℓ″) (= 1/((m−1) + m f ℓ″/ℓ′) when ℓ′ ≠ 0). With n samples of a scalar
output this is false (note 003 §5b: cos(∇L, Hθ) = 0.889 with 12 samples), and "∇L ∈ col(H)" is
false in general (§8.3): for f = θ₁θ₂ with ℓ = ½(f − 1)² at f = 1/3 the denominator vanishes,
Hθ = 0, H is singular with col(H) = θ^⊥, and ∇L = (f − 1)(θ₂, θ₁) has ⟨∇L, θ⟩ = 2f(f − 1) ≠ 0.
:func:`eigen_alignment` reports the collinearity only when it applies and says why otherwise.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from paramsym.core.params import flatten
from paramsym.curvature import EigenResult, HessianOperator, lanczos
from paramsym.equivariance.homogeneous_nets import resolve_degree
from paramsym.equivariance.stacked import (
    ApplicationResult,
    Batch,
    LossFn,
    StackedLoss,
    relative_residual,
    vector_norm,
)
from paramsym.errors import InvalidArgumentError


@dataclass
class SharpnessBound(ApplicationResult):
    """λ_max(H) against the homogeneity bound θᵀHθ/‖θ‖² (eq. 4).

    Attributes:
        degree: m.
        loss: L(θ).
        bound: [m² fᵀ∇²ℓ f + m(m−1)⟨∇ℓ, f⟩] / ‖θ‖², from output-space quantities.
        rayleigh_quotient: θᵀHθ/‖θ‖² from one Hessian-vector product.
        formula_residual: eq. (4), |θᵀHθ − ‖θ‖²·bound| over the sum of its terms' factor norms.
        lambda_max: the largest Ritz value of H (Lanczos); it never exceeds the true λ_max.
        lambda_max_error: its Ritz residual: an eigenvalue lies within it.
        gap: lambda_max − bound.
        bound_holds: bound ≤ lambda_max + lambda_max_error (+ rounding), which the theory
            guarantees (a Rayleigh quotient never exceeds λ_max).
        converged: whether Lanczos met its tolerance.
        two_over_lr: 2/η, the edge-of-stability threshold, when ``lr`` is given.
    """

    degree: int
    loss: float
    bound: float
    rayleigh_quotient: float
    formula_residual: float
    lambda_max: float
    lambda_max_error: float
    gap: float
    bound_holds: bool
    converged: bool
    two_over_lr: float | None = None

    @property
    def _residual_fields(self) -> tuple[str, ...]:
        return ("formula_residual",)


def _top_eigenpairs(
    operator: HessianOperator,
    k: int,
    tol: float,
    max_iter: int | None,
    generator: torch.Generator | int | None,
    *,
    vectors: bool,
) -> EigenResult:
    """The k largest eigenvalues of H (and their eigenvectors) by Lanczos on ``operator``."""
    return lanczos(
        operator.matvec,
        operator.shape[0],
        k,
        which="largest",
        tol=tol,
        max_iter=max_iter,
        generator=generator,
        dtype=operator.dtype,
        device=operator.device,
        return_eigenvectors=vectors,
    )


def sharpness_bound(
    model: nn.Module,
    loss_fn: LossFn,
    batch: Batch,
    degree: int | None = None,
    params: Mapping[str, Tensor] | None = None,
    *,
    lr: float | None = None,
    tol: float = 1e-6,
    max_iter: int | None = None,
    generator: torch.Generator | int | None = None,
) -> SharpnessBound:
    """The sharpness lower bound λ_max ≥ θᵀHθ/‖θ‖² of an m-homogeneous net (§5.1, eq. 4).

    Cost: one HVP for the Rayleigh quotient, and the Lanczos products for λ_max
    (:func:`~paramsym.curvature.lanczos`, ``tol``/``max_iter``/``generator`` passed on). The
    bound itself needs only f, ∇ℓ and one output-space product ∇²ℓ·f.

    Args:
        model, loss_fn, batch: L(θ) = ℓ(f(θ)) with f the stacked output of the batch.
        degree: m (``None``: read from a bias-free ReLU/linear ``nn.Sequential``).
        params: θ (default: the model's trainable parameters).
        lr: a step size η, to report 2/η beside λ_max.
    """
    m = resolve_degree(model, degree, params)
    stacked = StackedLoss(model, loss_fn, batch, params, where="sharpness_bound")
    point, f, grad_ell = stacked.point, stacked.output, stacked.loss_gradient
    operator = HessianOperator(model, loss_fn, batch, point)
    theta = flatten(point)
    theta_sq = float(torch.dot(theta, theta))
    if theta_sq == 0.0:
        raise InvalidArgumentError("sharpness_bound: θ = 0, the bound θᵀHθ/‖θ‖² is undefined")
    h_theta = flatten(operator.hvp(point))
    ell_f = stacked.loss_hvp(f)
    output_form = m * m * float(torch.sum(f * ell_f)) + m * (m - 1) * float(torch.sum(grad_ell * f))
    quadratic = float(torch.dot(theta, h_theta))
    scale = (
        vector_norm(theta) * vector_norm(h_theta)
        + m * m * vector_norm(f) * vector_norm(ell_f)
        + m * abs(m - 1) * vector_norm(grad_ell) * vector_norm(f)
    )
    top = _top_eigenpairs(operator, 1, tol, max_iter, generator, vectors=False)
    bound = output_form / theta_sq
    lam, err = top.eigenvalues[0], top.residuals[0]
    rounding = 64 * torch.finfo(operator.dtype).eps * (abs(lam) + abs(bound))
    return SharpnessBound(
        degree=m,
        loss=float(operator.loss),
        bound=bound,
        rayleigh_quotient=quadratic / theta_sq,
        formula_residual=relative_residual(abs(quadratic - output_form), scale),
        lambda_max=lam,
        lambda_max_error=err,
        gap=lam - bound,
        bound_holds=bool(bound <= lam + err + rounding),
        converged=top.converged,
        two_over_lr=None if lr is None else 2.0 / lr,
    )


@dataclass
class EigenAlignment(ApplicationResult):
    """Corollary 1 on the top-k eigenpairs, and where the gradient's energy sits.

    Attributes:
        degree: m.
        eigenvalues: λ_1 ≥ … ≥ λ_k (Ritz values).
        ritz_residuals: ‖Hv_i − λ_i v_i‖; the identity residual of pair i cannot be smaller
            than about ritz_residual_i/|λ_i| (a floor set by Lanczos' ``tol``).
        lhs: (m−1)⟨∇L, v_i⟩ per pair.
        rhs: λ_i⟨θ, v_i⟩ − m⟨Fᵀ∇²ℓ f, v_i⟩ per pair.
        pair_residuals: |lhs_i − rhs_i| / (|m−1|‖∇L‖ + |λ_i|‖θ‖ + m‖Fᵀ∇²ℓ f‖).
        gradient_energy: ⟨∇L, v_i⟩² / ‖∇L‖² per pair (NaN where ∇L = 0).
        gradient_fraction: their sum, the fraction of ‖∇L‖² in the top-k eigenspace.
        gradient_hessian_theta_cosine: cos(∇L, Hθ) (NaN if either is 0); 1 in absolute value
            when the collinearity applies.
        output_size: n·d, the number of entries of the stacked output.
        collinearity_applicable: whether ∇L = c·Hθ is a theorem here (output_size == 1).
        collinearity_c: c = ℓ′/((m−1)ℓ′ + m f ℓ″), or None (not applicable or undefined).
        collinearity_residual: ‖∇L − cHθ‖ / (‖∇L‖ + |c|‖Hθ‖), or None.
        collinearity_note: why the collinearity is not reported, or ``""``.
        converged: whether Lanczos met its tolerance.
    """

    degree: int
    eigenvalues: list[float]
    ritz_residuals: list[float]
    lhs: list[float]
    rhs: list[float]
    pair_residuals: list[float]
    gradient_energy: list[float]
    gradient_fraction: float
    gradient_hessian_theta_cosine: float
    output_size: int
    collinearity_applicable: bool
    collinearity_c: float | None
    collinearity_residual: float | None
    collinearity_note: str
    converged: bool

    @property
    def _residual_fields(self) -> tuple[str, ...]:
        return ("pair_residuals", "collinearity_residual")


def _cosine(a: Tensor, b: Tensor) -> float:
    na, nb = vector_norm(a), vector_norm(b)
    if na == 0.0 or nb == 0.0:
        return math.nan
    return float(torch.dot(a.double(), b.double())) / (na * nb)


def eigen_alignment(
    model: nn.Module,
    loss_fn: LossFn,
    batch: Batch,
    k: int = 1,
    degree: int | None = None,
    params: Mapping[str, Tensor] | None = None,
    *,
    tol: float = 1e-8,
    max_iter: int | None = None,
    generator: torch.Generator | int | None = None,
) -> EigenAlignment:
    """Corollary 1 per top-k eigenpair, the gradient's energy there, and the d = 1 collinearity.

    For each Ritz pair (λ_i, v_i) of the top-k Lanczos run, the residual of
    (m−1)⟨∇L, v_i⟩ = λ_i⟨θ, v_i⟩ − m⟨Fᵀ∇²ℓ f, v_i⟩ (exact for eigenpairs; for Ritz pairs up to
    the Ritz residual), and the fraction Σ_i⟨∇L, v_i⟩²/‖∇L‖² of the gradient's energy in their
    span (Gur-Ari et al. 2018; the paper's "concentration" is a heuristic, this measures it).
    The collinearity ∇L = c·Hθ is checked only when the stacked output is a single number
    (see the module docstring); otherwise ``collinearity_applicable`` is false and the note
    says so. "∇L ∈ col(H)" is never asserted.

    Cost: the Lanczos products, one HVP (Hθ), one output-space product and one VJP.

    Args:
        model, loss_fn, batch: L(θ) = ℓ(f(θ)) with f the stacked output of the batch.
        k: number of top eigenpairs.
        degree: m (``None``: read from a bias-free ReLU/linear ``nn.Sequential``).
        params: θ (default: the model's trainable parameters).
        tol, max_iter, generator: passed to :func:`~paramsym.curvature.lanczos`; ``tol`` sets
            the floor of the pair residuals.
    """
    m = resolve_degree(model, degree, params)
    stacked = StackedLoss(model, loss_fn, batch, params, where="eigen_alignment")
    point, f, grad_ell = stacked.point, stacked.output, stacked.loss_gradient
    operator = HessianOperator(model, loss_fn, batch, point)
    theta = flatten(point)
    gradient = flatten(operator.gradient)
    h_theta = flatten(operator.hvp(point))
    gn_f = flatten(stacked.vjp(stacked.loss_hvp(f)))
    top = _top_eigenpairs(operator, k, tol, max_iter, generator, vectors=True)
    assert top.eigenvectors is not None
    vectors = top.eigenvectors  # (k, P)
    grad_norm, theta_norm, gn_norm = vector_norm(gradient), vector_norm(theta), vector_norm(gn_f)
    along_grad = vectors @ gradient
    lhs = ((m - 1) * along_grad).tolist()
    rhs = (
        torch.tensor(top.eigenvalues, dtype=vectors.dtype, device=vectors.device)
        * (vectors @ theta)
    ).sub(m * (vectors @ gn_f))
    residuals = [
        relative_residual(
            abs(lhs_i - float(rhs_i)), abs(m - 1) * grad_norm + abs(lam) * theta_norm + m * gn_norm
        )
        for lhs_i, rhs_i, lam in zip(lhs, rhs, top.eigenvalues, strict=True)
    ]
    if grad_norm == 0.0:
        energy = [math.nan] * len(lhs)
    else:
        energy = (along_grad.double() ** 2 / grad_norm**2).tolist()

    size = f.numel()
    c: float | None = None
    collinearity: float | None = None
    note = ""
    if size != 1:
        note = (
            f"not applicable: the stacked output has n·d = {size} entries; ∇L = c·Hθ holds "
            "only when the whole output is one scalar (note 003 §5b), and ∇L ∈ col(H) is false "
            "in general (§8.3)"
        )
    else:
        d1 = float(grad_ell.reshape(()))
        d2 = float(stacked.loss_hvp(torch.ones_like(f)).reshape(()))
        value = float(f.reshape(()))
        denominator = (m - 1) * d1 + m * value * d2
        if abs(denominator) <= 1e-12 * (abs(m - 1) * abs(d1) + m * abs(value * d2)):
            note = (
                "undefined: (m−1)ℓ′ + m f ℓ″ = 0, so Hθ = 0; ∇L is then in col(H) only if "
                "ℓ′ = 0 (the counterexample of note 003 §8.3)"
            )
        else:
            c = d1 / denominator
            collinearity = relative_residual(
                vector_norm(gradient - c * h_theta), grad_norm + abs(c) * vector_norm(h_theta)
            )
    return EigenAlignment(
        degree=m,
        eigenvalues=list(top.eigenvalues),
        ritz_residuals=list(top.residuals),
        lhs=[float(v) for v in lhs],
        rhs=[float(v) for v in rhs],
        pair_residuals=residuals,
        gradient_energy=[float(e) for e in energy],
        gradient_fraction=math.nan if grad_norm == 0.0 else float(sum(energy)),
        gradient_hessian_theta_cosine=_cosine(gradient, h_theta),
        output_size=size,
        collinearity_applicable=size == 1,
        collinearity_c=c,
        collinearity_residual=collinearity,
        collinearity_note=note,
        converged=top.converged,
    )
