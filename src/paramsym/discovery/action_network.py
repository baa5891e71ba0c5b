"""The action network of learned symmetry discovery (dissertation §6.5): an MLP
a: R^{P² + P + D} → R^P with forward-mode tangents pushed through it by hand, so the many JVPs
the loss terms need at one point cost a few matrix products (and stay differentiable by
reverse mode)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from itertools import pairwise
from typing import cast

import torch
from torch import Tensor, nn


# -- activations with their derivatives (for forward-mode tangents through the network) -------
def _gelu_derivative(z: Tensor) -> Tensor:
    cdf = 0.5 * (1.0 + torch.erf(z / math.sqrt(2.0)))
    pdf = torch.exp(-0.5 * z * z) / math.sqrt(2.0 * math.pi)
    return cdf + z * pdf


def _silu_derivative(z: Tensor) -> Tensor:
    s = torch.sigmoid(z)
    return s * (1.0 + z * (1.0 - s))


_ACTIVATIONS: dict[str, tuple[Callable[[Tensor], Tensor], Callable[[Tensor], Tensor]]] = {
    "silu": (nn.functional.silu, _silu_derivative),
    "tanh": (torch.tanh, lambda z: 1.0 - torch.tanh(z) ** 2),
    "sigmoid": (torch.sigmoid, lambda z: torch.sigmoid(z) * (1.0 - torch.sigmoid(z))),
    "softplus": (nn.functional.softplus, torch.sigmoid),
    "gelu": (nn.functional.gelu, _gelu_derivative),
    "elu": (nn.functional.elu, lambda z: torch.where(z > 0, torch.ones_like(z), torch.exp(z))),
    "leaky_relu": (
        nn.functional.leaky_relu,
        lambda z: torch.where(z > 0, torch.ones_like(z), torch.full_like(z, 0.01)),
    ),
    "relu": (torch.relu, lambda z: (z > 0).to(z.dtype)),
}
"""Activations of the action network, each with σ'; ReLU-type ones are allowed, but Thm 6.3.1
assumes a differentiable action."""


class ActionNetwork(nn.Module):
    """The action MLP a: R^{P² + P + D} → R^P with forward-mode tangents by hand.

    :meth:`linearize` returns the output at one input and a map that pushes tangents of the
    first layer's pre-activation to the output (dz_{l+1} = W_{l+1}(σ'(z_l) ⊙ dz_l)): many JVPs
    at one point for the price of a few matrix products, differentiable by reverse mode.
    """

    def __init__(
        self, in_features: int, hidden: Sequence[int], out_features: int, activation: str
    ) -> None:
        super().__init__()
        widths = [in_features, *hidden, out_features]
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in pairwise(widths))
        self.activation = activation

    @property
    def linears(self) -> list[nn.Linear]:
        """The layers, typed."""
        return [cast(nn.Linear, layer) for layer in self.layers]

    def forward(self, inputs: Tensor) -> Tensor:
        """a on a batch of encoded inputs (B, in_features) → (B, P)."""
        sigma = _ACTIVATIONS[self.activation][0]
        out = inputs
        for i, layer in enumerate(self.layers):
            out = layer(out)
            if i < len(self.layers) - 1:
                out = sigma(out)
        return out

    def linearize(self, inputs: Tensor) -> tuple[Tensor, Callable[[Tensor], Tensor]]:
        """The output (B, P) at ``inputs`` and ``push``: a tangent dz₀ of the first layer's
        pre-activation, shape (m, B, H₀) or (m, 1, H₀), to the output tangent (m, B, P)."""
        sigma, derivative = _ACTIVATIONS[self.activation]
        slopes = []
        out = inputs
        for i, layer in enumerate(self.layers):
            out = layer(out)
            if i < len(self.layers) - 1:
                slopes.append(derivative(out))
                out = sigma(out)
        layers = self.linears

        def push(tangent: Tensor) -> Tensor:
            for slope, layer in zip(slopes, layers[1:], strict=True):
                tangent = (slope * tangent) @ layer.weight.T
            return tangent

        return out, push
