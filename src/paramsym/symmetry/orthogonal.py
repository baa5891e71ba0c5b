"""O(h) acting on a hidden layer with a radial rescaling activation (Ex. 1.2.6, 2.3.7, A.2.7).

A radial activation σ(z) = f(‖z‖) z commutes with every orthogonal g, so
``(W_A, b_A, W_B) ↦ (g W_A, g b_A, W_B gᵀ)`` preserves the function. The Lie algebra is so(h),
antisymmetric matrices with basis ``E_kl − E_lk`` (k < l, row-major over the upper triangle),
dim = h(h−1)/2; antisymmetric generators give no conserved quantities (Cor. A.2.12), only the
angular-momentum identity of Thm 2.5.6.
"""

from __future__ import annotations

import torch
from torch import Tensor

from paramsym.errors import InvalidGroupElementError, ShapeError
from paramsym.symmetry.base import GroupElement
from paramsym.symmetry.gl import MatrixGroup, MatrixNeuronSymmetry


class OrthogonalGroup(MatrixGroup):
    """O(h) elements: orthogonal h×h matrices (checked to ``√eps·h``), algebra so(h) with basis
    ``E_kl − E_lk`` (k < l, row-major over the upper triangle); ``exp`` gives rotations.
    Needs ``width`` and ``name``."""

    name: str

    def check_element(self, g: GroupElement) -> Tensor:
        if not isinstance(g, Tensor) or tuple(g.shape) != (self.width, self.width):
            shape = tuple(g.shape) if isinstance(g, Tensor) else type(g).__name__
            raise ShapeError(
                f"{self.name}: an O(h) element must have shape {(self.width, self.width)}, "
                f"got {shape}"
            )
        if not bool(torch.isfinite(g).all()):
            raise InvalidGroupElementError(f"{self.name}: the group element has NaN or inf entries")
        eye = torch.eye(self.width, dtype=g.dtype, device=g.device)
        error = float((g.T @ g - eye).abs().max().detach())
        tol = self.width * torch.finfo(g.dtype).eps ** 0.5
        if error > tol:
            raise InvalidGroupElementError(
                f"{self.name}: the group element is not orthogonal (‖gᵀg − I‖_max = {error:.2e} "
                f"> {tol:.1e}); this symmetry only holds for orthogonal matrices"
            )
        return g

    def inverse(self, g: GroupElement) -> Tensor:
        return self.check_element(g).T

    def _orthogonal_in(self, g: GroupElement, dtype: torch.dtype, device: torch.device) -> Tensor:
        """``g``, checked orthogonal in its own dtype, in ``dtype`` on ``device``. Cast to a
        finer dtype, g is orthogonal only to its own precision (a float32 rotation has
        ‖gᵀg − I‖ ≈ 1e-7, which gᵀ standing in for g⁻¹ passes on to the output), so it is
        replaced there by its orthogonal polar factor (Newton–Schulz steps
        ``g ← g (3I − gᵀg) / 2``, which move it by that much)."""
        g = self.check_element(g)
        cast = g.to(dtype=dtype, device=device)
        if not cast.is_floating_point() or torch.finfo(dtype).eps >= torch.finfo(g.dtype).eps:
            return cast
        eye = torch.eye(self.width, dtype=dtype, device=device)
        target = self.width * torch.finfo(dtype).eps * 10
        for _ in range(8):  # quadratic convergence: float16 to float64 takes four steps
            gram = cast.T @ cast
            if float((gram - eye).abs().max().detach()) <= target:
                break
            cast = cast @ (3 * eye - gram) / 2
        return cast

    def _algebra(self, xi: Tensor) -> Tensor:
        rows, cols = torch.triu_indices(self.width, self.width, offset=1, device=xi.device)
        m = xi.new_zeros(self.width, self.width).index_put((rows, cols), xi)
        return m - m.T


class HiddenOrthogonal(OrthogonalGroup, MatrixNeuronSymmetry):
    """O(h) on the hidden layer between two linear maps (radial or linear activation).

    Arguments as for :class:`~paramsym.symmetry.gl.MatrixNeuronSymmetry`.
    """

    family = "orthogonal"

    group_symbol = "O({})"

    @staticmethod
    def _algebra_dimension(width: int) -> int:
        return width * (width - 1) // 2

    def _cast_element(self, g: GroupElement, dtype: torch.dtype, device: torch.device) -> Tensor:
        return self._orthogonal_in(g, dtype, device)

    def _validated_inverse_transpose(self, g: GroupElement) -> tuple[Tensor, Tensor]:
        g = self.check_element(g)
        return g, g  # g⁻ᵀ = g for orthogonal g
