"""The models of ``linear-discovery``, written the way people write them: ``nn.Sequential``
MLPs, a multi-head self-attention with a fused QKV layer and ``F.scaled_dot_product_attention``,
one with per-head layers and a written-out softmax, and a W-Asym net (Lim et al. 2024); plus a
fresh-data sampler. The derivations of their symmetry dimensions are in
:mod:`paramsym.experiments.discovery.zoo`."""

from __future__ import annotations

import itertools
import math
from typing import Any

import torch
import torch.nn.functional as F  # noqa: N812
from torch import Tensor, nn

F64 = torch.float64
Batch = tuple[Tensor, Tensor]


def sequential(
    widths: tuple[int, ...], activation: type[nn.Module] | None, bias: bool
) -> nn.Sequential:
    """``Linear, act, Linear, …, Linear`` (no activation at all for a linear net)."""
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(itertools.pairwise(widths)):
        layers.append(nn.Linear(a, b, bias=bias))
        if activation is not None and i < len(widths) - 2:
            layers.append(activation())
    return nn.Sequential(*layers)


class SelfAttention(nn.Module):
    """Multi-head self-attention with one fused QKV projection and
    ``F.scaled_dot_product_attention``, no biases; x: (batch, tokens, d_model)."""

    def __init__(self, d_model: int, heads: int, d_k: int, d_v: int) -> None:
        super().__init__()
        self.heads, self.d_k, self.d_v = heads, d_k, d_v
        self.qkv = nn.Linear(d_model, heads * (2 * d_k + d_v), bias=False)
        self.out = nn.Linear(heads * d_v, d_model, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        b, t, _ = x.shape
        h, dk, dv = self.heads, self.d_k, self.d_v
        q, k, v = self.qkv(x).split([h * dk, h * dk, h * dv], dim=-1)
        q = q.view(b, t, h, dk).transpose(1, 2)
        k = k.view(b, t, h, dk).transpose(1, 2)
        v = v.view(b, t, h, dv).transpose(1, 2)
        o = F.scaled_dot_product_attention(q, k, v)
        return self.out(o.transpose(1, 2).reshape(b, t, h * dv))


class AttentionHead(nn.Module):
    """One head with its own query, key and value layers and a written-out softmax."""

    def __init__(self, d_model: int, d_k: int, d_v: int) -> None:
        super().__init__()
        self.query = nn.Linear(d_model, d_k, bias=False)
        self.key = nn.Linear(d_model, d_k, bias=False)
        self.value = nn.Linear(d_model, d_v, bias=False)
        self.scale = 1 / math.sqrt(d_k)

    def forward(self, x: Tensor) -> Tensor:
        scores = self.query(x) @ self.key(x).transpose(-2, -1) * self.scale
        return torch.softmax(scores, dim=-1) @ self.value(x)


class PerHeadAttention(nn.Module):
    """Multi-head self-attention as a list of heads, concatenated, then an output layer."""

    def __init__(self, d_model: int, heads: int, d_k: int, d_v: int) -> None:
        super().__init__()
        self.heads = nn.ModuleList(AttentionHead(d_model, d_k, d_v) for _ in range(heads))
        self.out = nn.Linear(heads * d_v, d_model, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.out(torch.cat([head(x) for head in self.heads], dim=-1))


class WAsymLinear(nn.Module):
    """W-Asym layer (Lim et al. 2024): ``fixed_per_row`` entries of every row are pinned to
    random values N(0, fixed_std²) (a buffer); only the other entries and the bias train."""

    fixed: Tensor
    free: Tensor

    def __init__(self, inputs: int, outputs: int, fixed_per_row: int, fixed_std: float,
                 generator: torch.Generator) -> None:  # fmt: skip
        super().__init__()
        order = torch.rand(outputs, inputs, generator=generator).argsort(dim=1)
        pinned = torch.zeros(outputs, inputs, dtype=torch.bool)
        pinned.scatter_(1, order[:, :fixed_per_row], True)
        values = torch.randn(outputs, inputs, generator=generator, dtype=F64) * fixed_std
        self.register_buffer("fixed", (values * pinned).flatten())
        self.register_buffer("free", (~pinned).flatten().nonzero().flatten())
        self.shape = (outputs, inputs)
        self.weight = nn.Parameter(torch.empty(int(self.free.numel()), dtype=F64))
        self.bias = nn.Parameter(torch.empty(outputs, dtype=F64))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        bound = 1 / math.sqrt(self.shape[1])
        with torch.no_grad():
            self.weight.uniform_(-bound, bound)
            self.bias.uniform_(-bound, bound)

    def forward(self, x: Tensor) -> Tensor:
        weight = self.fixed.scatter(0, self.free, self.weight).view(self.shape)
        return F.linear(x, weight, self.bias)


class PerUnitLeakyReLU(nn.Module):
    """``z_i`` if ``z_i > 0`` else ``a_i z_i``, a fixed slope a_i per unit (a buffer)."""

    slopes: Tensor

    def __init__(self, slopes: Tensor) -> None:
        super().__init__()
        self.register_buffer("slopes", slopes)

    def forward(self, z: Tensor) -> Tensor:
        return torch.where(z > 0, z, self.slopes * z)


def wasym_mlp(
    widths: tuple[int, ...], fixed_per_row: int, fixed_std: float, seed: int
) -> nn.Sequential:
    """W-Asym layers with per-unit LeakyReLUs (slopes uniform in [0.05, 0.5]) between them."""
    generator = torch.Generator().manual_seed(10_007 * seed + 17)
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(itertools.pairwise(widths)):
        layers.append(WAsymLinear(a, b, fixed_per_row, fixed_std, generator))
        if i < len(widths) - 2:
            slopes = 0.05 + 0.45 * torch.rand(b, generator=generator, dtype=F64)
            layers.append(PerUnitLeakyReLU(slopes))
    return nn.Sequential(*layers)


def fresh(x_shape: tuple[int, ...], y_shape: tuple[int, ...], classes: int = 0) -> Any:
    """A callable drawing fresh N(0, 1) inputs and targets (class labels when ``classes``)."""

    def draw(generator: torch.Generator) -> Batch:
        x = torch.randn(x_shape, generator=generator, dtype=F64)
        if classes:
            return x, torch.randint(0, classes, x_shape[:1], generator=generator)
        return x, torch.randn(y_shape, generator=generator, dtype=F64)

    return draw
