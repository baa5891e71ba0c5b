"""GL(h) acting on a hidden layer with a linear activation (dissertation Ex. 1.2.2, A.2.4).

For ``f(x) = W_B σ(W_A x + b_A) + b_B`` with σ the identity, every invertible g ∈ GL(h) gives
``(W_A, b_A, W_B) ↦ (g W_A, g b_A, W_B g⁻¹)`` with the same function. Applied at every hidden
layer of a deep linear network this is the "hidden symmetry group" ∏ GL(n_i) acting as
``W_i ↦ g_i W_i g_{i-1}⁻¹, b_i ↦ g_i b_i`` (Table 1.1 row 17): the product of the per-layer
symmetries (:class:`~paramsym.symmetry.ProductSymmetry`).

Lie algebra gl(h): all h×h matrices M, coordinates ξ = M.flatten() (row-major, dim = h²).
Infinitesimal action: ``M·(W_A, b_A, W_B) = (M W_A, M b_A, −W_B M)``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from paramsym.core.linalg import matrix_exp
from paramsym.errors import InvalidArgumentError, InvalidGroupElementError, ShapeError
from paramsym.symmetry.base import (
    FamilyNeuronSymmetry,
    GroupElement,
    Slot,
    matmul_along,
)


class MatrixGroup:
    """Group operations shared by the h×h matrix groups (GL(h), O(h) and the data-dependent GL
    actions): identity, product, exponential map and sampling. Needs ``width``, ``dim``,
    ``check_element``, ``check_xi`` and ``_algebra`` from the class it is mixed into."""

    width: int
    dim: int

    if TYPE_CHECKING:  # provided by the classes this is mixed into

        def check_element(self, g: GroupElement) -> Tensor: ...

        def check_xi(self, xi: Tensor) -> Tensor: ...

        def _algebra(self, xi: Tensor) -> Tensor: ...

    def _identity(self, dtype: torch.dtype) -> Tensor:
        return torch.eye(self.width, dtype=dtype)

    def compose(self, g1: GroupElement, g2: GroupElement) -> Tensor:
        return self.check_element(g1) @ self.check_element(g2)

    def exp(self, xi: Tensor) -> Tensor:
        return matrix_exp(self._algebra(self.check_xi(xi)))

    def linear_element(self, xi: Tensor) -> Tensor:
        """``I + M(ξ)``, the first-order element (not orthogonal for O(h))."""
        generator = self._algebra(self.check_xi(xi))
        return torch.eye(self.width, dtype=generator.dtype, device=generator.device) + generator

    def _sample(
        self, scale: float, generator: torch.Generator | None, dtype: torch.dtype
    ) -> Tensor:
        """``exp(M)`` with algebra coordinates drawn i.i.d. N(0, scale²/h), so that the
        generator's operator norm is about ``2·scale`` whatever the width."""
        xi = torch.randn(self.dim, generator=generator, dtype=dtype)
        return self.exp(xi * (scale / self.width**0.5))


class GeneralLinearGroup(MatrixGroup):
    """GL(h) elements: invertible h×h matrices, algebra gl(h) with coordinates ξ = M.flatten()
    (row-major, dim = h²). Needs ``width`` and ``name``."""

    name: str

    def check_element(self, g: GroupElement) -> Tensor:
        return self._validated_inverse_transpose(g)[0]

    def inverse(self, g: GroupElement) -> Tensor:
        return self._validated_inverse_transpose(g)[1].T

    def _validated_inverse_transpose(self, g: GroupElement) -> tuple[Tensor, Tensor]:
        if not isinstance(g, Tensor) or tuple(g.shape) != (self.width, self.width):
            shape = tuple(g.shape) if isinstance(g, Tensor) else type(g).__name__
            raise ShapeError(
                f"{self.name}: a GL element must have shape {(self.width, self.width)}, got {shape}"
            )
        return g, _checked_inverse(g, self.name).T

    def _algebra(self, xi: Tensor) -> Tensor:
        return xi.reshape(self.width, self.width)

    def _algebra_adjoint(self, m: Tensor) -> Tensor:
        """ξ = M.flatten(), so the adjoint is the flattening (a subgroup with its own
        :meth:`_algebra`, such as the rotary one, takes the generic adjoint)."""
        if type(self)._algebra is GeneralLinearGroup._algebra:
            return m.reshape(-1)
        return super()._algebra_adjoint(m)  # type: ignore[misc]


def matrix_pairing(t: Tensor, c: Tensor, power: float) -> Tensor:
    """∂⟨c, tangent⟩/∂M for a slot of a matrix group, with ``t`` (the slot's region) and ``c``
    (the covector's) of shape ``(..., w, R)``, the neuron axis second to last: the tangent is
    ``M T`` (power +1), giving C Tᵀ, or ``−Mᵀ T`` (power −1), giving −T Cᵀ. Shape
    ``(..., w, w)``."""
    return c @ t.transpose(-1, -2) if power > 0 else -(t @ c.transpose(-1, -2))


class MatrixNeuronSymmetry(MatrixGroup, FamilyNeuronSymmetry):
    """Shared machinery of matrix groups acting on a hidden layer (GL(h), O(h)).

    Slots with power +1 transform as ``g · T`` along their axis (incoming weights, biases);
    slots with power −1 as ``T · g⁻¹`` (the outgoing weight), i.e. by g⁻ᵀ along the axis.
    Constructor arguments: see :class:`~paramsym.symmetry.base.FamilyNeuronSymmetry`.
    """

    def _check_slots(self) -> None:
        if any(s.power not in (1.0, -1.0) for s in self.slots):
            raise InvalidArgumentError(
                f"{self.name}: slot powers of a matrix group must be +1 or -1"
            )

    def _validated_inverse_transpose(self, g: GroupElement) -> tuple[Tensor, Tensor]:
        """Check ``g`` and return it with g⁻ᵀ (computed once)."""
        raise NotImplementedError

    def _cast_element(self, g: GroupElement, dtype: torch.dtype, device: torch.device) -> Any:
        """``g`` in the parameters' dtype and on their device (a plain cast; what is not a
        tensor is left for validation to name)."""
        return g.to(dtype=dtype, device=device) if isinstance(g, Tensor) else g

    def _prepare(self, g: GroupElement, dtype: torch.dtype, device: torch.device) -> Any:
        # Cast first, invert second: g⁻ᵀ is then the inverse of the g that acts, to the
        # parameters' precision (a float32 inverse cast to float64 is off by ~1e-7).
        return self._validated_inverse_transpose(self._cast_element(g, dtype, device))

    def _transform(self, t: Tensor, slot: Slot, prepared: Any) -> Tensor:
        g, g_inv_t = prepared
        return matmul_along(t, slot.axis, g if slot.power > 0 else g_inv_t)

    def _transform_transpose(self, t: Tensor, slot: Slot, prepared: Any) -> Tensor:
        g, g_inv_t = prepared
        return matmul_along(t, slot.axis, g.T if slot.power > 0 else g_inv_t.T)

    def _differential(self, t: Tensor, slot: Slot, generator: Tensor) -> Tensor:
        # d/dt exp(tM) = M; d/dt exp(tM)^{-T} = -Mᵀ at t = 0.
        return matmul_along(t, slot.axis, generator if slot.power > 0 else -generator.T)

    def _pairing(self, t: Tensor, c: Tensor, slot: Slot) -> Tensor:
        def rows(a: Tensor) -> Tensor:
            return a.movedim(slot.axis, 0).reshape(self.width, -1)

        return matrix_pairing(rows(t), rows(c), slot.power)


class HiddenGL(GeneralLinearGroup, MatrixNeuronSymmetry):
    """GL(h) on the hidden layer between two linear maps (linear activation).

    Arguments as for :class:`MatrixNeuronSymmetry`. Elements are invertible h×h matrices;
    ``sample`` returns ``exp(M)``.

    >>> import torch, paramsym as ps
    >>> model = ps.mlp([3, 4, 2], activation="identity", seed=0)
    >>> s = HiddenGL(4, incoming=["0.weight", "0.bias"], outgoing=["2.weight"])
    >>> s
    HiddenGL('GL[0->2]', group=GL(4), dim=16)
    >>> theta = ps.params_of(model)
    >>> x = torch.randn(5, 3)
    >>> y = ps.functional_call(model, s.act(theta, s.sample(scale=0.5)), x)
    >>> torch.allclose(y, model(x), atol=1e-5)
    True
    """

    family = "GL"

    group_symbol = "GL({})"

    @staticmethod
    def _algebra_dimension(width: int) -> int:
        return width * width


def _checked_inverse(g: Tensor, name: str) -> Tensor:
    """g⁻¹ in g's dtype, raising unless g is finite and numerically invertible (g g⁻¹ = I to
    √eps·h of g's dtype). Half-precision elements are inverted in float32 (LAPACK has no
    half precision) and the inverse rounded back."""
    if not bool(torch.isfinite(g).all()):
        raise InvalidGroupElementError(f"{name}: the group element has NaN or infinite entries")
    work = g.to(torch.promote_types(g.dtype, torch.float32))
    inv, info = torch.linalg.inv_ex(work)
    h = g.shape[0]
    tol = h * torch.finfo(g.dtype).eps ** 0.5
    if int(info) != 0 or not bool(torch.isfinite(inv).all()):
        raise InvalidGroupElementError(f"{name}: the group element is singular (not in GL({h}))")
    residual = (work @ inv - torch.eye(h, dtype=work.dtype, device=g.device)).abs().max().detach()
    if float(residual) > tol:
        raise InvalidGroupElementError(
            f"{name}: the group element is numerically singular (‖g g⁻¹ − I‖_max = "
            f"{float(residual):.2e} > {tol:.1e}); use a better-conditioned element"
        )
    return inv.to(g.dtype)
