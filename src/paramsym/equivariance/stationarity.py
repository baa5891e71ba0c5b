"""Symmetry directions as Hessian null vectors (seed 003 §5.4).

For a symmetry with generator field J(θ) (at g₀; for T = exp(gG)θ it is J = Gθ), item 2a of
Theorem 1 with K = 0 reads

    H J = −(∂_θJ)ᵀ ∇L          at every θ  (for linear generators: H Gθ = −Gᵀ∇L),

so at a stationary point (∇L = 0) **every symmetry direction is an exact null vector**, and if
the columns J_1 … J_k span r dimensions H has at least r zero eigenvalues (Sagun et al.'s
near-zero bulk; Kunin et al. 2020). For a linear factorisation UV with full-rank factors of
inner dimension r at a realisable minimum, the GL(r) directions J_{ab} = (U E_ab, −E_ab V) span
r² dimensions and H has exactly r² zeros (note 003 §5 item 8). Near a stationary point ‖HJ‖
scales with ‖∇L‖, which the identity above makes exact.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from paramsym.core.params import Params, flatten, resolve_trainable, unflatten
from paramsym.curvature import HessianOperator, hessian, lanczos
from paramsym.equivariance.stacked import (
    ApplicationResult,
    Batch,
    LossFn,
    relative_residual,
    spectral_norm,
    vector_norm,
)
from paramsym.errors import InvalidArgumentError, ShapeError

Generator = Tensor | Callable[[Params], Params]
"""A ``(P, P)`` matrix G (J = Gθ, the symmetry exp(gG)), or a function θ ↦ J(θ) on params
dicts (e.g. ``lambda p: symmetry.tangent(p, xi)``)."""


@dataclass
class StationaryNullSpace(ApplicationResult):
    """Hessian null directions from symmetries at a (near-)stationary point (§5.4).

    Attributes:
        loss: L(θ).
        gradient_norm: ‖∇L‖ (0 at a stationary point).
        hessian_norm: ‖H‖₂ = max|λ| (dense: exact; Lanczos: its largest-magnitude Ritz value).
        direction_norms: ‖J_j‖ per generator.
        null_residuals: ‖HJ_j‖ / (‖H‖₂‖J_j‖): 0 at a stationary point (and of order
            ‖∂J_j‖‖∇L‖/(‖H‖‖J_j‖) near one).
        away_residuals: the identity HJ_j = −(∂J_j)ᵀ∇L, exact at every θ:
            ‖HJ_j + (∂J_j)ᵀ∇L‖ / (‖H‖₂‖J_j‖ + ‖G_j‖₂‖∇L‖) for a matrix, with ‖(∂J_j)ᵀ∇L‖ in
            place of ‖G_j‖₂‖∇L‖ for a function.
        orthogonality_residuals: item 1, |⟨J_j, ∇L⟩| / (‖J_j‖‖∇L‖): a check that each
            generator is a symmetry of the loss.
        rank: rank of the stacked ``(P, k)`` matrix [J_1 … J_k].
        zero_count: eigenvalues with |λ| ≤ zero_tol·‖H‖₂ (among those computed).
        zero_tol: that relative threshold.
        count_holds: zero_count ≥ rank.
        method: ``"dense"`` or ``"lanczos"``.
        converged: whether the Lanczos runs met their tolerance (``True`` for dense).
        smallest_eigenvalues: the smallest eigenvalues computed, ascending (at most
            ``num_eigenvalues``).
    """

    loss: float
    gradient_norm: float
    hessian_norm: float
    direction_norms: list[float]
    null_residuals: list[float]
    away_residuals: list[float]
    orthogonality_residuals: list[float]
    rank: int
    zero_count: int
    zero_tol: float
    count_holds: bool
    method: str
    converged: bool
    smallest_eigenvalues: list[float] = field(repr=False)

    @property
    def _residual_fields(self) -> tuple[str, ...]:
        return ("null_residuals", "away_residuals", "orthogonality_residuals")


def _direction_and_pullback(
    generator: Generator, point: Params, gradient: Params, index: int
) -> tuple[Tensor, Tensor, float]:
    """(J flat, (∂J)ᵀ∇L flat, the scale factor ‖G‖₂‖∇L‖ or ‖(∂J)ᵀ∇L‖)."""
    theta, grad = flatten(point), flatten(gradient)
    if isinstance(generator, Tensor):
        size = theta.numel()
        if generator.shape != (size, size):
            raise ShapeError(
                f"generators[{index}] has shape {tuple(generator.shape)}, expected "
                f"({size}, {size}) (flatten order of the parameters)"
            )
        matrix = generator.to(theta)
        pulled = matrix.T @ grad
        return matrix @ theta, pulled, spectral_norm(matrix) * vector_norm(grad)
    if not callable(generator):
        raise InvalidArgumentError(
            f"generators[{index}] must be a (P, P) tensor or a function params -> params, got "
            f"{type(generator).__name__}"
        )
    pair = torch.func.vjp(generator, point)
    direction, pullback = pair[0], pair[1]
    unknown = sorted(set(direction) - set(point))
    if unknown:
        raise ShapeError(f"generators[{index}] returned entries for unknown parameters {unknown}")
    (pulled,) = pullback({k: gradient[k] for k in direction})
    # parameters the generator leaves out do not move: their entries of J are zero
    full = {k: direction[k] if k in direction else torch.zeros_like(t) for k, t in point.items()}
    pulled_flat = flatten(pulled).detach()
    return flatten(full).detach(), pulled_flat, vector_norm(pulled_flat)


def stationary_null_space(
    model: nn.Module,
    loss_fn: LossFn,
    batch: Batch,
    generators: Sequence[Generator],
    params: Mapping[str, Tensor] | None = None,
    *,
    dense: bool = False,
    zero_tol: float = 1e-8,
    num_eigenvalues: int | None = None,
    tol: float = 1e-10,
    max_iter: int | None = None,
    max_params: int = 4000,
    rank_tol: float | None = None,
) -> StationaryNullSpace:
    """HJ = 0 for symmetry directions at a stationary point, and zero count ≥ rank J (§5.4).

    Also checks the identity H J = −(∂J)ᵀ∇L, which holds away from stationarity (for a linear
    generator, H Gθ = −Gᵀ∇L), and each generator's first-order identity ⟨J, ∇L⟩ = 0.

    Cost: one HVP and one VJP per generator; then either the dense Hessian and ``eigvalsh``
    (``dense=True``, for P ≤ ``max_params``), or two Lanczos runs (largest magnitude for ‖H‖,
    then the ``num_eigenvalues`` smallest). At a minimum (H ⪰ 0) the zeros are the smallest
    eigenvalues. Lanczos from one start vector sees one copy of a repeated eigenvalue per
    invariant subspace it exhausts, so its zero count is reliable only when ``max_iter``
    lets it run to about P products (the default allows min(P, max(100, 4k))); on large
    models read it as a lower bound, and ``null_residuals`` as the evidence.

    Args:
        model, loss_fn, batch: L(θ) = loss_fn(model(x; θ), y).
        generators: each a ``(P, P)`` matrix G (J = Gθ) or a function θ ↦ J(θ) on params
            dicts, for symmetries of the loss (``P`` in :func:`~paramsym.flatten` order of the
            trainable parameters, or of ``params``).
        params: θ (default: the model's trainable parameters), ideally a stationary point.
        dense: use the dense Hessian (explicitly; refused above ``max_params``).
        zero_tol: an eigenvalue counts as zero when |λ| ≤ zero_tol·‖H‖₂.
        num_eigenvalues: how many smallest eigenvalues Lanczos computes (default
            min(P, rank + 10)).
        tol, max_iter: for the Lanczos runs.
        max_params: the largest P for ``dense=True``.
        rank_tol: singular values of [J_1 … J_k] above rank_tol·σ_max count (default
            max(P, k)·eps).
    """
    where = "stationary_null_space"
    if not generators:
        raise InvalidArgumentError(f"{where}: give at least one generator")
    point = {k: t.detach() for k, t in resolve_trainable(model, params).items()}
    operator = HessianOperator(model, loss_fn, batch, point)
    size = operator.shape[0]
    gradient = operator.gradient
    columns, pulled, pulled_scales = [], [], []
    for index, generator in enumerate(generators):
        j, p, s = _direction_and_pullback(generator, point, gradient, index)
        columns.append(j)
        pulled.append(p)
        pulled_scales.append(s)
    stacked = torch.stack(columns, dim=1)  # (P, k)
    products = [operator.matvec(j) for j in columns]

    converged = True
    if dense:
        if size > max_params:
            raise InvalidArgumentError(
                f"{where}: dense=True needs the {size}×{size} Hessian, above max_params="
                f"{max_params}; use dense=False (Lanczos) or raise max_params"
            )
        matrix = hessian(model, loss_fn, batch, point, max_params=max_params)
        eigenvalues = torch.linalg.eigvalsh(matrix.to(torch.float64))
        norm = float(eigenvalues.abs().max())
        smallest = eigenvalues.tolist()[: num_eigenvalues or size]
        method = "dense"
    else:
        top = lanczos(
            operator.matvec,
            size,
            1,
            which="magnitude",
            tol=tol,
            max_iter=max_iter,
            dtype=operator.dtype,
            device=operator.device,
        )
        norm = abs(top.eigenvalues[0])
        rank_guess = int(torch.linalg.matrix_rank(stacked.double()))
        count = min(size, num_eigenvalues or rank_guess + 10)
        bottom = lanczos(
            operator.matvec,
            size,
            count,
            which="smallest",
            tol=tol,
            max_iter=max_iter,
            dtype=operator.dtype,
            device=operator.device,
        )
        smallest = sorted(bottom.eigenvalues)
        converged = top.converged and bottom.converged
        method = "lanczos"

    singular = torch.linalg.svdvals(stacked.double())
    threshold = (
        rank_tol if rank_tol is not None else max(stacked.shape) * torch.finfo(stacked.dtype).eps
    )
    rank = 0 if float(singular[0]) == 0.0 else int((singular > threshold * singular[0]).sum())
    zero_count = sum(1 for lam in smallest if abs(lam) <= zero_tol * norm)

    grad_flat = flatten(gradient)
    grad_norm = vector_norm(grad_flat)
    norms = [vector_norm(j) for j in columns]
    return StationaryNullSpace(
        loss=float(operator.loss),
        gradient_norm=grad_norm,
        hessian_norm=norm,
        direction_norms=norms,
        null_residuals=[
            relative_residual(vector_norm(hj), norm * nj)
            for hj, nj in zip(products, norms, strict=True)
        ],
        away_residuals=[
            relative_residual(vector_norm(hj + p), norm * nj + s)
            for hj, p, nj, s in zip(products, pulled, norms, pulled_scales, strict=True)
        ],
        orthogonality_residuals=[
            relative_residual(abs(float(j @ grad_flat)), nj * grad_norm)
            for j, nj in zip(columns, norms, strict=True)
        ],
        rank=rank,
        zero_count=zero_count,
        zero_tol=float(zero_tol),
        count_holds=zero_count >= rank,
        method=method,
        converged=converged,
        smallest_eigenvalues=[float(v) for v in smallest],
    )


def generator_matrix(generator: Callable[[Params], Params], like: Mapping[str, Tensor]) -> Tensor:
    """The ``(P, P)`` matrix G of a generator function θ ↦ Gθ that is linear in θ (by
    ``torch.func.jacrev`` on the flattened parameters), e.g. to pass as a matrix above."""
    point = dict(like)
    flat = flatten(point)

    def apply(z: Tensor) -> Tensor:
        out = generator(unflatten(z, point))
        return flatten({k: out[k] if k in out else torch.zeros_like(t) for k, t in point.items()})

    return torch.func.jacrev(apply)(flat).detach()
