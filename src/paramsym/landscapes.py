"""Test functions of dissertation ch. 4 (App. C.1) as models, with their symmetries.

Each landscape is an ``nn.Module`` with one parameter ``w`` whose forward returns L(w) (any
input is ignored), so every analysis that takes ``(model, loss_fn, batch)`` works on it with
:func:`value_loss` and ``batch = (None, None)``; ``ps.symmetries`` finds its symmetry.

>>> import torch, paramsym as ps
>>> f = Rosenbrock(torch.tensor([-1.0, 2.0], dtype=torch.float64))
>>> (s,) = ps.symmetries(f)
>>> moved = s.act(ps.params_of(f), s.exp(torch.tensor([0.7], dtype=torch.float64)))
>>> bool(torch.isclose(ps.functional_call(f, moved, None), f(None)))
True
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from paramsym.errors import InvalidArgumentError
from paramsym.symmetry.base import Symmetry
from paramsym.symmetry.change_of_variables import ChangeOfVariablesRotation, QuadraticOrthogonal


def value_loss(output: Tensor, target: Any = None) -> Tensor:
    """The loss of a landscape: its value. Use ``(landscape, value_loss, (None, None))``."""
    return output


class Landscape(nn.Module):
    """A function L(w) of one parameter vector ``w``."""

    def __init__(self, w: Tensor | list[float], size: int | None = None) -> None:
        super().__init__()
        w = torch.as_tensor(
            w, dtype=torch.get_default_dtype() if not isinstance(w, Tensor) else None
        )
        if w.ndim != 1 or (size is not None and w.numel() != size):
            raise InvalidArgumentError(
                f"{type(self).__name__}: w must be a vector"
                + (f" of length {size}" if size else "")
                + f", got shape {tuple(w.shape)}"
            )
        self.w = nn.Parameter(w.clone())

    def value(self, w: Tensor) -> Tensor:
        raise NotImplementedError

    def forward(self, x: Any = None) -> Tensor:
        return self.value(self.w)

    def symmetry(self, prefix: str = "") -> Symmetry:
        raise NotImplementedError

    def paramsym_symmetries(self, prefix: str) -> list[Symmetry]:
        return [self.symmetry(prefix)]


class Rosenbrock(Landscape):
    """``L = 100 (w₁² − w₂)² + (w₁ − 1)²``, minimum 0 at (1, 1).

    With ``h(w) = (10 (w₁² − w₂), w₁ − 1)``, L = ‖h(w)‖² and h⁻¹(u, v) = (v + 1, (v + 1)² − u/10).
    """

    def __init__(self, w: Tensor | list[float]) -> None:
        super().__init__(w, size=2)

    def value(self, w: Tensor) -> Tensor:
        return 100.0 * (w[0] ** 2 - w[1]) ** 2 + (w[0] - 1.0) ** 2

    @staticmethod
    def to_latent(w: Tensor) -> Tensor:
        return torch.stack([10.0 * (w[0] ** 2 - w[1]), w[0] - 1.0])

    @staticmethod
    def from_latent(z: Tensor) -> Tensor:
        return torch.stack([z[1] + 1.0, (z[1] + 1.0) ** 2 - 0.1 * z[0]])

    def symmetry(self, prefix: str = "") -> Symmetry:
        return ChangeOfVariablesRotation(
            f"{prefix}w", self.to_latent, self.from_latent, site=f"{prefix}rosenbrock"
        )


class Booth(Landscape):
    """``L = (w₁ + 2 w₂ − 7)² + (2 w₁ + w₂ − 5)²``, minimum 0 at (1, 3).

    With ``h(w) = (w₁ + 2w₂ − 7, 2w₁ + w₂ − 5)``: h⁻¹(u, v) = (−u/3 + 2v/3 + 1, 2u/3 − v/3 + 3).
    """

    def __init__(self, w: Tensor | list[float]) -> None:
        super().__init__(w, size=2)

    def value(self, w: Tensor) -> Tensor:
        return (w[0] + 2 * w[1] - 7.0) ** 2 + (2 * w[0] + w[1] - 5.0) ** 2

    @staticmethod
    def to_latent(w: Tensor) -> Tensor:
        return torch.stack([w[0] + 2 * w[1] - 7.0, 2 * w[0] + w[1] - 5.0])

    @staticmethod
    def from_latent(z: Tensor) -> Tensor:
        return torch.stack([-z[0] / 3 + 2 * z[1] / 3 + 1.0, 2 * z[0] / 3 - z[1] / 3 + 3.0])

    def symmetry(self, prefix: str = "") -> Symmetry:
        return ChangeOfVariablesRotation(
            f"{prefix}w", self.to_latent, self.from_latent, site=f"{prefix}booth"
        )


class Quadratic(Landscape):
    """``L = wᵀ A w`` with A symmetric positive definite; O(n) acts by A^{−1/2} g A^{1/2}."""

    def __init__(self, matrix: Tensor, w: Tensor | list[float]) -> None:
        matrix = torch.as_tensor(matrix)
        super().__init__(w, size=matrix.shape[0])
        self.matrix: Tensor
        self.register_buffer("matrix", matrix.to(self.w.dtype))
        self.symmetry()  # validates A (square, symmetric, positive definite)

    def value(self, w: Tensor) -> Tensor:
        return w @ self.matrix @ w

    def symmetry(self, prefix: str = "") -> Symmetry:
        return QuadraticOrthogonal(f"{prefix}w", self.matrix, site=f"{prefix}quadratic")


class Ellipse(Quadratic):
    """``L = w₁² + a w₂²`` (a > 0), the quadratic with A = diag(1, a) (App. C.2); the action is
    ``diag(1, 1/√a) R(θ) diag(1, √a)``."""

    def __init__(self, a: float, w: Tensor | list[float]) -> None:
        if not a > 0:
            raise InvalidArgumentError(f"Ellipse: a must be > 0, got {a}")
        w = torch.as_tensor(
            w, dtype=torch.get_default_dtype() if not isinstance(w, Tensor) else None
        )
        super().__init__(torch.diag(torch.tensor([1.0, float(a)], dtype=w.dtype)), w)
