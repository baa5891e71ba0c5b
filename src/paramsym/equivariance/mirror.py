"""Mirror symmetries at their fixed points (seed 003 §6, Corollary 4; Ziyin 2023 Th. 1.1/1.2).

A mirror is the reflection R = I − 2OOᵀ of parameter space, with O ∈ R^{P×r} orthonormal
(OᵀO = I), that leaves the loss unchanged: L(Rθ) = L(θ). Its fixed set is {θ : Oᵀθ = 0}, and
Theorem 2 (eqs. 8–9, R linear so there is no ∂²T correction) gives there

1. **Oᵀ∇L = 0**: the gradient has no component along the mirror;
2. **Oᵀ H (I − OOᵀ) = 0**: H maps span(O) into span(O) and its complement into itself
   (equivalently HR = RH).

Off the fixed set neither needs to hold. Two mirrors of hidden layers (note 003 §6, [derived,
verified numerically]):

* swapping hidden neurons i and j of a layer, at a point where the two are identical
  (:func:`neuron_swap_mirror`): O has one column (e_{a,i} − e_{a,j})/√2 per coordinate a a
  neuron owns (its incoming row, its bias, its outgoing column);
* flipping the sign of a neuron with an odd activation (tanh), at a point where its incoming
  and outgoing weights are zero (:func:`sign_flip_mirror`): O is that neuron's coordinates.

O is a dense ``(P, r)`` matrix in :func:`~paramsym.flatten` order of the parameters.
"""

# ruff: noqa: E741  (O is the paper's name for the mirror's orthonormal basis)

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from paramsym.core.params import Params, flatten, resolve_trainable, unflatten
from paramsym.curvature import HessianOperator
from paramsym.equivariance.stacked import (
    ApplicationResult,
    Batch,
    LossFn,
    hessian_norm_estimate,
    relative_residual,
    vector_norm,
)
from paramsym.errors import FixedPointError, InvalidArgumentError, ShapeError


def _offsets(params: Mapping[str, Tensor]) -> dict[str, int]:
    offsets, position = {}, 0
    for name, t in params.items():
        offsets[name] = position
        position += t.numel()
    return offsets


def _neuron_coordinates(
    params: Mapping[str, Tensor], incoming: Sequence[str], outgoing: Sequence[str], neuron: int
) -> list[int]:
    """Flat indices of everything ``neuron`` owns: index ``neuron`` along axis 0 of each
    ``incoming`` tensor (weight rows, bias entries) and along axis 1 of each ``outgoing`` one."""
    offsets = _offsets(params)
    size = sum(t.numel() for t in params.values())
    coordinates: list[int] = []
    for names, axis in ((incoming, 0), (outgoing, 1)):
        for name in names:
            if name not in params:
                raise InvalidArgumentError(
                    f"no parameter '{name}'; the parameters are {list(params)}"
                )
            t = params[name]
            if t.ndim <= axis or not 0 <= neuron < t.shape[axis]:
                raise ShapeError(
                    f"'{name}' has shape {tuple(t.shape)}: no neuron {neuron} along axis {axis}"
                )
            index = torch.zeros(size, dtype=torch.bool)
            mask = torch.zeros(t.shape, dtype=torch.bool)
            mask.select(axis, neuron).fill_(True)
            index[offsets[name] : offsets[name] + t.numel()] = mask.reshape(-1)
            coordinates.extend(torch.nonzero(index).reshape(-1).tolist())
    return coordinates


def neuron_swap_mirror(
    params: Mapping[str, Tensor],
    incoming: Sequence[str],
    outgoing: Sequence[str],
    i: int,
    j: int,
) -> Tensor:
    """O ``(P, r)`` of the mirror that swaps hidden neurons i and j of one layer.

    Args:
        params: the parameters (for shapes and the flatten order).
        incoming: tensors indexed by the neuron along axis 0 (e.g. ``["0.weight", "0.bias"]``
            of an ``mlp``'s first layer).
        outgoing: tensors indexed by the neuron along axis 1 (e.g. ``["2.weight"]``).
        i, j: the two neurons (distinct).

    R = I − 2OOᵀ exchanges the two neurons' coordinates; its fixed set is where they are equal.
    """
    if i == j:
        raise InvalidArgumentError(f"neuron_swap_mirror: i and j must differ, got {i} twice")
    first = _neuron_coordinates(params, incoming, outgoing, i)
    second = _neuron_coordinates(params, incoming, outgoing, j)
    ref = next(iter(params.values()))
    size = sum(t.numel() for t in params.values())
    O = torch.zeros(size, len(first), dtype=ref.dtype, device=ref.device)
    for column, (a, b) in enumerate(zip(first, second, strict=True)):
        O[a, column] = 1.0 / math.sqrt(2.0)
        O[b, column] = -1.0 / math.sqrt(2.0)
    return O


def sign_flip_mirror(
    params: Mapping[str, Tensor], incoming: Sequence[str], outgoing: Sequence[str], neuron: int
) -> Tensor:
    """O ``(P, r)`` of the sign flip of one neuron with an odd activation (tanh, …).

    Negating the neuron's incoming weights, bias and outgoing weights leaves the function
    unchanged when σ(−z) = −σ(z); R = I − 2OOᵀ with O the unit vectors of those coordinates,
    and the fixed set is where they are all zero. ``incoming``/``outgoing`` as in
    :func:`neuron_swap_mirror`.
    """
    coordinates = _neuron_coordinates(params, incoming, outgoing, neuron)
    ref = next(iter(params.values()))
    size = sum(t.numel() for t in params.values())
    O = torch.zeros(size, len(coordinates), dtype=ref.dtype, device=ref.device)
    for column, index in enumerate(coordinates):
        O[index, column] = 1.0
    return O


def mirror_fixed_point(params: Mapping[str, Tensor], O: Tensor) -> Params:
    """The nearest fixed point θ − OOᵀθ of the mirror R = I − 2OOᵀ (= (θ + Rθ)/2)."""
    theta = flatten(params)
    O = O.to(theta)
    return {k: t.clone() for k, t in unflatten(theta - O @ (O.T @ theta), params).items()}


@dataclass
class MirrorIdentities(ApplicationResult):
    """Corollary 4 at a point θ for a mirror R = I − 2OOᵀ.

    Attributes:
        rank: r, the number of columns of O.
        distance: ‖Oᵀθ‖, the distance from θ to the fixed set.
        gradient_norm: ‖∇L‖.
        gradient_residual: ‖Oᵀ∇L‖ / (‖O‖₂‖∇L‖) (‖O‖₂ = 1).
        hessian_residual: ‖(I − OOᵀ) H O‖_F / (‖H‖₂‖O‖_F), the part of H·span(O) that leaks
            out of span(O) (= ‖Oᵀ H (I − OOᵀ)‖_F, H being symmetric), over the product of the
            factors' norms (‖I − OOᵀ‖₂ = 1, ‖O‖_F = √r).
        hessian_norm: ‖H‖₂ used in that scale (given, or estimated by 20 Lanczos steps).
        hessian_block_norm: ‖HO‖_F.
    """

    rank: int
    distance: float
    gradient_norm: float
    gradient_residual: float
    hessian_residual: float
    hessian_norm: float
    hessian_block_norm: float

    @property
    def _residual_fields(self) -> tuple[str, ...]:
        return ("gradient_residual", "hessian_residual")


def mirror_identities(
    model: nn.Module,
    loss_fn: LossFn,
    batch: Batch,
    O: Tensor,
    params: Mapping[str, Tensor] | None = None,
    *,
    fixed_point_tol: float = 1e-10,
    check_fixed_point: bool = True,
    hessian_norm: float | None = None,
) -> MirrorIdentities:
    """Corollary 4: Oᵀ∇L = 0 and Oᵀ H (I − OOᵀ) = 0 at a fixed point Oᵀθ = 0 of R = I − 2OOᵀ.

    Cost: one gradient and r Hessian-vector products (one per column of O), plus 20 for the
    estimate of ‖H‖₂ in the residual's scale unless ``hessian_norm`` is given.

    Args:
        model, loss_fn, batch: L(θ) = loss_fn(model(x; θ), y).
        O: ``(P, r)`` with orthonormal columns (checked), in :func:`~paramsym.flatten` order of
            the trainable parameters (or of ``params``); see :func:`neuron_swap_mirror` and
            :func:`sign_flip_mirror`. That R is a symmetry of the loss is the caller's claim.
        params: θ (default: the model's trainable parameters).
        fixed_point_tol: θ counts as a fixed point when ‖Oᵀθ‖ ≤ fixed_point_tol·‖θ‖.
        check_fixed_point: raise :class:`~paramsym.errors.FixedPointError` off the fixed
            set (default); ``False`` computes the residuals anyway, as a diagnostic of how they
            grow with the distance.
        hessian_norm: ‖H‖₂ for the scale of the Hessian residual, if known (e.g. |λ|_max
            from a Lanczos run); default: estimated (:func:`hessian_norm_estimate`).
    """
    where = "mirror_identities"
    point = resolve_trainable(model, params)
    theta = flatten(point).detach()
    size = theta.numel()
    if O.ndim != 2 or O.shape[0] != size:
        raise ShapeError(f"{where}: O has shape {tuple(O.shape)}, expected ({size}, r)")
    O = O.to(theta)
    r = O.shape[1]
    gram_error = vector_norm(O.T @ O - torch.eye(r, dtype=O.dtype, device=O.device))
    if gram_error > 1e-8 * max(1.0, math.sqrt(r)):
        raise InvalidArgumentError(
            f"{where}: O's columns are not orthonormal (‖OᵀO − I‖ = {gram_error:.2e}); "
            "orthonormalise them (torch.linalg.qr) so that R = I − 2OOᵀ is a reflection"
        )
    distance = vector_norm(O.T @ theta)
    if check_fixed_point and distance > fixed_point_tol * vector_norm(theta):
        raise FixedPointError(
            f"{where}: θ is not a fixed point of R = I − 2OOᵀ: ‖Oᵀθ‖ = {distance:.3e} "
            f"(> {fixed_point_tol:g}·‖θ‖); the identities hold only on the fixed set. Project "
            "with θ − OOᵀθ (mirror_fixed_point), or pass check_fixed_point=False to measure "
            "them off it"
        )
    operator = HessianOperator(model, loss_fn, batch, point)
    gradient = flatten(operator.gradient)
    h_o = torch.stack([operator.matvec(column) for column in O.T], dim=1)  # (P, r)
    leak = h_o - O @ (O.T @ h_o)
    grad_norm = vector_norm(gradient)
    if hessian_norm is None:
        hessian_norm = hessian_norm_estimate(operator.matvec, size, dtype=operator.dtype)
    return MirrorIdentities(
        rank=r,
        distance=distance,
        gradient_norm=grad_norm,
        gradient_residual=relative_residual(vector_norm(O.T @ gradient), grad_norm),
        hessian_residual=relative_residual(vector_norm(leak), hessian_norm * math.sqrt(r)),
        hessian_norm=float(hessian_norm),
        hessian_block_norm=vector_norm(h_o),
    )
