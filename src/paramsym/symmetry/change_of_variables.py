"""Symmetries of the test functions of dissertation ch. 4 (App. C.1), by change of variables.

* If ``L(w) = ‖h(w)‖²`` for an invertible map h, every orthogonal g acts by
  ``g·w = h⁻¹(g h(w))`` (:class:`ChangeOfVariablesRotation`). Rosenbrock and Booth have this
  form with h : R² → R²; the dissertation uses the identity component SO(2).
* A positive-definite quadratic ``L(w) = wᵀ A w`` has the linear O(n) action
  ``g·w = A^{−1/2} g A^{1/2} w``, transitive on each level set (Lemma 4.5.5)
  (:class:`QuadraticOrthogonal`). The ellipse ``w₁² + a w₂²`` is the case A = diag(1, a).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import torch
from torch import Tensor

from paramsym.core.params import Params, check_finite
from paramsym.errors import InvalidArgumentError, MissingParameterError, ShapeError
from paramsym.symmetry.base import GroupElement, Region, Symmetry
from paramsym.symmetry.orthogonal import OrthogonalGroup

VectorMap = Callable[[Tensor], Tensor]


class _VectorOrthogonalSymmetry(OrthogonalGroup, Symmetry):
    """O(n) acting on one parameter vector ``w`` of length n through :meth:`_apply`."""

    def __init__(
        self, parameter: str, width: int, *, family: str, site: str | None, linear: bool
    ) -> None:
        self.parameter = parameter
        self.width = int(width)
        super().__init__(
            name=f"{family}[{site or parameter}]",
            group=f"O({width})",
            dim=width * (width - 1) // 2,
            linear=linear,
        )

    @property
    def parameter_names(self) -> tuple[str, ...]:
        return (self.parameter,)

    @property
    def touched_regions(self) -> frozenset[Region]:
        return frozenset({(self.parameter, 0, 0, None)})

    def _apply(self, w: Tensor, g: Tensor) -> Tensor:
        raise NotImplementedError

    def act(self, params: Mapping[str, Tensor], g: GroupElement, x: Tensor | None = None) -> Params:
        if self.parameter not in params:
            raise MissingParameterError(
                f"{self.name} acts on parameter '{self.parameter}', which is not in params"
            )
        w = params[self.parameter]
        if w.shape != (self.width,):
            raise ShapeError(
                f"{self.name}: '{self.parameter}' has shape {tuple(w.shape)}, "
                f"expected ({self.width},)"
            )
        check_finite([(self.parameter, w)], self.name)
        g = self._orthogonal_in(g, w.dtype, w.device)
        out = dict(params)
        out[self.parameter] = self._apply(w, g)
        return out


class ChangeOfVariablesRotation(_VectorOrthogonalSymmetry):
    """O(2) acting by ``g·w = h⁻¹(g h(w))`` on a 2-vector, for ``L = ‖h(w)‖²``.

    Args:
        parameter: name of w, shape (2,).
        to_latent: h, mapping w to (u, v).
        from_latent: h⁻¹.
    """

    def __init__(
        self,
        parameter: str,
        to_latent: VectorMap,
        from_latent: VectorMap,
        *,
        site: str | None = None,
    ) -> None:
        super().__init__(parameter, 2, family="latent_rotation", site=site, linear=False)
        self.to_latent, self.from_latent = to_latent, from_latent

    def _apply(self, w: Tensor, g: Tensor) -> Tensor:
        return self.from_latent(g @ self.to_latent(w))


class QuadraticOrthogonal(_VectorOrthogonalSymmetry):
    """O(n) acting on ``L(w) = wᵀ A w`` by ``g·w = A^{−1/2} g A^{1/2} w`` (Eq. 4.33).

    Args:
        parameter: name of w, shape (n,).
        matrix: A, symmetric positive definite (n, n).
    """

    def __init__(self, parameter: str, matrix: Tensor, *, site: str | None = None) -> None:
        matrix = torch.as_tensor(matrix)
        if matrix.ndim != 2 or matrix.shape[0] != matrix.shape[1]:
            raise ShapeError(f"QuadraticOrthogonal: A must be square, got {tuple(matrix.shape)}")
        if not torch.allclose(matrix, matrix.T):
            raise InvalidArgumentError("QuadraticOrthogonal: A must be symmetric")
        values, vectors = torch.linalg.eigh(matrix)
        if float(values.min()) <= 0:
            raise InvalidArgumentError(
                "QuadraticOrthogonal: A must be positive definite, smallest eigenvalue "
                f"{float(values.min()):.3g}"
            )
        super().__init__(
            parameter, matrix.shape[0], family="quadratic_orthogonal", site=site, linear=True
        )
        self.matrix = matrix
        self.sqrt = vectors @ torch.diag(values.sqrt()) @ vectors.T
        self.inverse_sqrt = vectors @ torch.diag(values.rsqrt()) @ vectors.T

    def _apply(self, w: Tensor, g: Tensor) -> Tensor:
        root = self.sqrt.to(dtype=w.dtype, device=w.device)
        inverse_root = self.inverse_sqrt.to(dtype=w.dtype, device=w.device)
        return inverse_root @ (g @ (root @ w))
