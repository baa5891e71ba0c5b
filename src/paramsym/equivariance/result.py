"""The result of an identity check, and the residual scale every identity uses.

**Residual scale** (notes 003 §5b). Each identity is ``lhs = rhs`` with lhs and rhs sums of
terms; its residual is ``‖lhs − rhs‖`` divided by the sum over the terms of the products of the
norms of the term's factors, never by the terms' values: item 1 of a symmetry has both sides ≈ 0
(Jᵀ∇L is an inner product of two vectors that are orthogonal), and ``max(|lhs|, |rhs|)`` reports
1.0 there for a correct identity. 0/0 := 0.

* item 1: ``‖J‖‖∇L‖ + ‖K‖‖∇ℓ‖`` (Frobenius norms of J, K of shape (k, ·)).
* item 2b (k × k): for each term a k × k matrix of factor-norm products (``‖J_i‖‖HJ_j‖``,
  ``‖K_i‖‖∇²ℓK_j‖``, ``‖a‖‖T_θθ[J_i, J_j]‖``, ``‖c‖‖S_gg[e_i, e_j]‖``, ...), and the sum of
  their Frobenius norms.
* item 2a (k × P) and Theorem 2 item 2: the terms are vectors in parameter space produced by
  operators reachable only through products (H, F, ∂J, ∂K), so each ‖operator‖·‖vector‖ is
  replaced by the norm of the product (‖HJ‖, ‖Fᵀu‖, ...). That under-estimates the scale when
  a product vanishes by cancellation, which happens for HJ at a stationary point of a
  symmetry (HJ = −(∂J)ᵀ∇L = 0): pass ``hessian_norm`` (e.g. λ_max from
  :func:`~paramsym.top_eigenvalues`) to use ``hessian_norm · ‖J‖`` there.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

THEOREM1 = ("item1", "item2a", "item2b_gg", "item2b_mixed", "consistency")
"""Identities of seed 003 Theorem 1 (continuous equivariance), in order."""

THEOREM2 = ("thm2_item1", "thm2_item2")
"""Identities of seed 003 Theorem 2 (discrete symmetry at a fixed point)."""


def norm(t: Tensor) -> float:
    """Euclidean (Frobenius) norm of all entries, as a float."""
    return float(torch.linalg.vector_norm(t.reshape(-1)))


def distance(a: Tensor, b: Tensor) -> float:
    """‖a − b‖ (Frobenius) without allocating the difference."""
    return float(torch.dist(a, b))


def ratio(numerator: float, denominator: float) -> float:
    """``numerator / denominator`` with 0/0 := 0 (and x/0 = inf for x > 0)."""
    if numerator == 0.0:
        return 0.0
    return numerator / denominator if denominator > 0 else float("inf")


@dataclass
class IdentityResult:
    """The identities of seed 003 checked at one point.

    Attributes:
        residuals: identity name -> ‖lhs − rhs‖ / scale (see the module docstring). Names:
            ``"item1"``, ``"item2a"``, ``"item2b_gg"``, ``"item2b_mixed"``, ``"consistency"``
            (Theorem 1) or ``"thm2_item1"``, ``"thm2_item2"`` (Theorem 2).
        scales: identity name -> the denominator used.
        checked: the identities computed, in order.
        theorem: 1 (continuous equivariance) or 2 (discrete symmetry at a fixed point).
        transformation: the transformation's name.
        exact: whether the transformation is labelled exact.
        g: the group coordinate (Theorem 1), else ``None``.
        solver: how J = A⁻¹B and K = C⁻¹D were found (``"identity"``, ``"direct"``,
            ``"gmres"``; ``"A: ..., C: ..."`` when they differ); ``"-"`` for Theorem 2.
        sanity: residuals of the sanity check f(T(θ, g)) = S(f(θ), g), by point.
        lhs, rhs: identity name -> tensors. Item 1: ``(k,)``; item 2a: ``(k, P)`` (row j is
            (HJ)_j, flattened like :func:`~paramsym.flatten`; with ``fused=True`` lhs is
            HJ − Fᵀu and rhs the parameter-side term); items 2b and consistency: ``(k, k)``;
            Theorem 2 item 1: ``(P,)``; item 2: ``(m, P)`` for m probe vectors.
        terms: the ingredients and separate terms, for diagnostics: ``"J"`` (k, P), ``"a"``
            (P,), ``"K"`` (k, d), ``"c"`` (d,); ``"item2a_output"`` (Fᵀu, the output side
            folded into one VJP), ``"item2a_parameter"`` (the T term);
            ``"item2b_gauss_newton"``, ``"item2b_output_gg"``, ``"item2b_parameter_gg"`` and
            the ``_mixed`` ones; Theorem 2: ``"thm2_item2_sandwich"`` (RᵀHRv),
            ``"thm2_item2_correction"`` (the ∂²T term) and ``"probes"``.
    """

    residuals: dict[str, float]
    scales: dict[str, float]
    checked: tuple[str, ...]
    theorem: int
    transformation: str
    exact: bool
    g: list[float] | None
    solver: str
    sanity: dict[str, float]
    lhs: dict[str, Tensor] = field(default_factory=dict, repr=False)
    rhs: dict[str, Tensor] = field(default_factory=dict, repr=False)
    terms: dict[str, Tensor] = field(default_factory=dict, repr=False)

    def holds(self, tol: float = 1e-9) -> bool:
        """Whether every checked identity has residual ≤ ``tol``."""
        return all(value <= tol for value in self.residuals.values())

    def to_dict(self) -> dict[str, Any]:
        """The plain-number fields, for JSON (tensors left out)."""
        return {
            "residuals": dict(self.residuals),
            "scales": dict(self.scales),
            "checked": list(self.checked),
            "theorem": self.theorem,
            "transformation": self.transformation,
            "exact": self.exact,
            "g": self.g,
            "solver": self.solver,
            "sanity": dict(self.sanity),
        }
