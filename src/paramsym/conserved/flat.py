"""Flat minima: Hessian nullity against orbit dimension, and how Q sets sharpness (§2.3, §2.8).

A continuous symmetry maps a minimum to a whole orbit of minima, so at a minimum the Hessian
vanishes on the orbit's tangent space: nullity ≥ orbit dimension (Fig 2.7(a): 700 of 750
eigenvalues of a 10×50 / 5×50 linear net, the GL(50) orbit dimension h(n+m) − nm).
:func:`flat_minimum` computes both numbers with the dense Hessian and the stacked tangent
matrices of the model's continuous symmetries, plus where the nonzero spectrum sits (the
centre that Fig 2.7 relates to Q).

**The 1-D example (§2.8.1).** For L = ½(Y − UVX)² with scalars U, V, gradient flow conserves
Q = U² − V² (the paper's sign here; it is −μ), and reaches the minimum
U² = ½(Q + √(Q² + 4c²)), V² = ½(−Q + √(Q² + 4c²)) with c = Y/X on the branch UV = c > 0.
There H = X²[[V², c], [c, U²]] has det 0 and trace X²(U² + V²), so its eigenvalues are 0 and

    λ = X² √(Q² + 4c²)  =  √(Q² + 4) for X = Y = 1.

**[ERRATUM]** Eq. 2.53 prints 2√(Q² + 4); trace and determinant of Eq. 2.52 give √(Q² + 4)
(notes 001a §6.11, checked against the dense Hessian in the tests). Q = 0 is still the flattest
point of the valley (λ = 2|XY|).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from paramsym.conserved.base import Batch, LossFn
from paramsym.core.params import resolve_params, to_dtype
from paramsym.curvature import hessian, loss_function, tangent_matrix
from paramsym.errors import InvalidArgumentError
from paramsym.symmetry.base import Symmetry
from paramsym.symmetry.detect import symmetries as find_symmetries


@dataclass
class FlatMinimum:
    """Hessian spectrum at a (near-)minimum against the symmetry orbit through it.

    Attributes:
        parameters: P.
        loss: the loss at the point.
        near_zero: eigenvalues with |λ| ≤ ``threshold``.
        orbit_dimension: dimension of the orbit of all given symmetries together (rank of
            their stacked tangent matrices).
        threshold: the cut between zero and nonzero eigenvalues (Fig 2.7: 1e-3).
        nonzero_mean, nonzero_median: centre of the eigenvalues above the threshold (NaN if
            there are none), the quantity Fig 2.7 relates to Q.
        symmetries: names of the symmetries counted.
        eigenvalues: all P eigenvalues, ascending.
    """

    parameters: int
    loss: float
    near_zero: int
    orbit_dimension: int
    threshold: float
    nonzero_mean: float
    nonzero_median: float
    symmetries: list[str]
    eigenvalues: list[float] = field(repr=False)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def joint_orbit_dimension(
    symmetries: Sequence[Symmetry],
    params: Mapping[str, Tensor],
    x: Tensor | None = None,
    *,
    rtol: float | None = None,
) -> int:
    """Dimension of the orbit of several symmetries at once: the rank of their stacked
    ``(Σ dim, P)`` tangent matrices, in float64, with :func:`~paramsym.orbit_dimension`'s rank
    rule (``rtol = max(shape) · eps``). Orbits of overlapping groups (e.g. GL(h) and its
    rescalings) are not double-counted."""
    point = to_dtype(dict(params), torch.float64)
    rows = [tangent_matrix(s, point, x) for s in symmetries if s.dim > 0]
    if not rows:
        return 0
    matrix = torch.cat(rows)
    singular = torch.linalg.svdvals(matrix)
    if float(singular[0]) == 0.0:
        return 0
    tol = rtol if rtol is not None else max(matrix.shape) * torch.finfo(torch.float64).eps
    return int((singular > tol * singular[0]).sum())


def flat_minimum(
    model: nn.Module,
    loss_fn: LossFn,
    batch: Batch,
    symmetries: Sequence[Symmetry] | None = None,
    params: Mapping[str, Tensor] | None = None,
    *,
    threshold: float = 1e-3,
    max_params: int = 10_000,
) -> FlatMinimum:
    """Hessian nullity vs orbit dimension at θ (Fig 2.7(a), Prop A.2.9).

    Args:
        model, loss_fn, batch: the loss L(θ) = loss_fn(model(x; θ), y).
        symmetries: whose orbit to measure (default: every continuous, data-independent
            symmetry of ``ps.symmetries(model)``).
        params: the point θ (default: the model's parameters), ideally a minimum.
        threshold: |λ| at or below which an eigenvalue counts as zero.
        max_params: passed to :func:`~paramsym.hessian` (dense P×P Hessian).

    At a minimum ``near_zero >= orbit_dimension``; away from one the Hessian need not vanish
    on the orbit (only the gradient is orthogonal to it).
    """
    if not threshold >= 0:
        raise InvalidArgumentError(f"flat_minimum: threshold must be >= 0, got {threshold}")
    point = resolve_params(model, params)
    chosen = (
        [s for s in find_symmetries(model) if s.dim > 0 and not s.data_dependent]
        if symmetries is None
        else list(symmetries)
    )
    dense = hessian(model, loss_fn, batch, point, max_params=max_params)
    eigenvalues = torch.linalg.eigvalsh(dense.to(torch.float64))
    nonzero = eigenvalues[eigenvalues.abs() > threshold]
    with torch.no_grad():
        loss = float(loss_function(model, loss_fn, batch)(point))
    return FlatMinimum(
        parameters=int(eigenvalues.numel()),
        loss=loss,
        near_zero=int((eigenvalues.abs() <= threshold).sum()),
        orbit_dimension=joint_orbit_dimension(chosen, point),
        threshold=float(threshold),
        nonzero_mean=float(nonzero.mean()) if nonzero.numel() else math.nan,
        nonzero_median=float(nonzero.median()) if nonzero.numel() else math.nan,
        symmetries=[s.name for s in chosen],
        eigenvalues=eigenvalues.tolist(),
    )


def scalar_linear_minimum(q: float, x: float = 1.0, y: float = 1.0) -> tuple[float, float]:
    """The minimum (U, V) of L = ½(Y − UVX)² with U² − V² = q, on the branch U, V > 0
    (U > 0 > V when Y/X < 0) (§2.8.1): U² = ½(q + √(q² + 4c²)), V² = ½(−q + √(q² + 4c²)),
    c = Y/X. Gradient flow from any point with U² − V² = q ends here or at (−U, −V)."""
    if x == 0.0 or y == 0.0:
        raise InvalidArgumentError(
            "scalar_linear_minimum: needs X ≠ 0 and Y ≠ 0 (else the minimum is UV = 0)"
        )
    c = y / x
    root = math.hypot(q, 2 * c)
    u = math.sqrt(0.5 * (q + root))
    v = math.sqrt(0.5 * (-q + root))
    return u, math.copysign(v, c)


def scalar_linear_sharpness(q: float, x: float = 1.0, y: float = 1.0) -> float:
    """The nonzero Hessian eigenvalue at that minimum: X²√(Q² + 4Y²/X²), which is √(Q² + 4)
    for X = Y = 1 (**[ERRATUM]**: Eq. 2.53 says 2√(Q² + 4)); smallest at Q = 0.

    >>> scalar_linear_sharpness(0.0), round(scalar_linear_sharpness(3.0), 12)
    (2.0, 3.605551275464)
    """
    if x == 0.0 or y == 0.0:
        raise InvalidArgumentError("scalar_linear_sharpness: needs X ≠ 0 and Y ≠ 0")
    return x * x * math.hypot(q, 2 * y / x)
