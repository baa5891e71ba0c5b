"""Radial-basis-function networks (Broomhead & Lowe 1988)."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn

from paramsym.errors import InvalidArgumentError, ShapeError

BASIS: dict[str, Callable[[Tensor], Tensor]] = {
    "gaussian": lambda r: torch.exp(-(r**2)),
    "inverse_quadratic": lambda r: 1.0 / (1.0 + r**2),
    "multiquadric": lambda r: torch.sqrt(1.0 + r**2),
}


class RBFNetwork(nn.Module):
    """``f(x) = Σ_i w_i φ(‖x − c_i‖ / b_i) + bias`` with k centers (dissertation Ex. 1.2.10).

    Parameters: ``centers`` c (k, n), ``widths`` b (k,) (kept positive by the caller; the
    forward uses them as given), ``weight`` w (out, k), ``bias`` (out,). Permuting the k units,
    (w_i, b_i, c_i) ↦ (w_π⁻¹(i), b_π⁻¹(i), c_π⁻¹(i)), preserves f: the group S_k.

    Shapes: input (batch, n) → output (batch, out).
    """

    def __init__(
        self,
        in_features: int,
        num_centers: int,
        out_features: int = 1,
        basis: str = "gaussian",
        *,
        bias: bool = True,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        if basis not in BASIS:
            raise InvalidArgumentError(
                f"RBFNetwork: basis must be one of {sorted(BASIS)}, got {basis!r}"
            )
        self.basis = basis
        self.centers = nn.Parameter(torch.randn(num_centers, in_features, dtype=dtype))
        self.widths = nn.Parameter(torch.ones(num_centers, dtype=dtype))
        self.weight = nn.Parameter(
            torch.randn(out_features, num_centers, dtype=dtype) / num_centers**0.5
        )
        self.bias = nn.Parameter(torch.zeros(out_features, dtype=dtype)) if bias else None

    def forward(self, x: Tensor) -> Tensor:
        if x.ndim != 2 or x.shape[1] != self.centers.shape[1]:
            raise ShapeError(
                f"RBFNetwork: input must be (batch, {self.centers.shape[1]}), got {tuple(x.shape)}"
            )
        distance = torch.sqrt(((x[:, None, :] - self.centers[None]) ** 2).sum(-1) + 1e-30)
        features = BASIS[self.basis](distance / self.widths)
        out = features @ self.weight.T
        return out if self.bias is None else out + self.bias
