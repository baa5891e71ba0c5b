"""Layers of the library: the NTK-parameterised linear layer."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F  # noqa: N812
from torch import Tensor, nn

from paramsym.errors import InvalidArgumentError


class NTKLinear(nn.Module):
    """Linear layer in the NTK parameterisation (seed 000, App. A.6, Eqs. 33-35).

    ``y = (weight_std / sqrt(fan_in)) · W x + bias_std · b`` with ``W`` and ``b`` drawn from
    N(0, 1), so every parameter is O(1) at initialisation and the 1/sqrt(fan_in) factor lives in
    the forward pass. Seed 000 writes 1/sqrt(n_1) for the first layer; as the notes (000 §2)
    say, that is a typo for the fan-in n_0, which is what this layer uses in every layer.

    The scale factors are constants, so every linear symmetry of the standard layer (GL,
    rescaling, permutations, ...) acts on the raw ``weight``/``bias`` in the same way.

    Shapes: ``weight`` (out_features, in_features), ``bias`` (out_features,), input
    (..., in_features) -> output (..., out_features).
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        *,
        weight_std: float = 1.0,
        bias_std: float = 1.0,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        if in_features < 1 or out_features < 1:
            raise InvalidArgumentError(
                f"NTKLinear: in_features and out_features must be >= 1, "
                f"got {in_features} and {out_features}"
            )
        self.in_features = in_features
        self.out_features = out_features
        self.weight_std = float(weight_std)
        self.bias_std = float(bias_std)
        self.weight = nn.Parameter(
            torch.empty(out_features, in_features, device=device, dtype=dtype)
        )
        self.bias = (
            nn.Parameter(torch.empty(out_features, device=device, dtype=dtype)) if bias else None
        )
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Draw every parameter from N(0, 1) (the NTK parameterisation's initialisation)."""
        nn.init.normal_(self.weight)
        if self.bias is not None:
            nn.init.normal_(self.bias)

    @property
    def weight_scale(self) -> float:
        """The constant ``weight_std / sqrt(fan_in)`` multiplying the weight in the forward."""
        return self.weight_std / math.sqrt(self.in_features)

    def forward(self, x: Tensor) -> Tensor:
        bias = None if self.bias is None else self.bias_std * self.bias
        return F.linear(x, self.weight_scale * self.weight, bias)

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"bias={self.bias is not None}, weight_std={self.weight_std}, "
            f"bias_std={self.bias_std}"
        )
