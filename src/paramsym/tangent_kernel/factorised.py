"""Layers whose weight Jacobian factorises as ``Σ_t δ_t ⊗ a_t`` (output cotangent times layer
input, summed over positions): ``nn.Linear``, :class:`~paramsym.nn.NTKLinear`,
``nn.Conv1d/2d/3d`` (grouped and depthwise included) and ``nn.Embedding`` (one-hot inputs).

For each: its inputs as rows ``a`` (convolution patches per group, token ids), its output
cotangents ``δ`` as ``(O, b, G, T, C)``, per-sample gradients, the inner products of inputs at
pairs of positions (the co-occurrence of token ids for an embedding) and the cheapest contraction.
:mod:`paramsym.tangent_kernel.structured` assembles the kernel from them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, cast

import torch
import torch.nn.functional as F  # noqa: N812
from torch import Tensor, nn

from paramsym.nn.layers import NTKLinear

LayerKind = Literal["linear", "conv", "embedding"]
Path = Literal["vector", "pairs", "gradients"]

_CONVS = (nn.Conv1d, nn.Conv2d, nn.Conv3d)


@dataclass(frozen=True)
class Layer:
    """A module whose weight Jacobian is ``Σ_t δ_t ⊗ a_t`` (see the module docstring)."""

    name: str
    module: nn.Module
    kind: LayerKind
    weight: str
    bias: str | None
    weight_scale: float = 1.0
    bias_scale: float = 1.0

    @property
    def names(self) -> list[str]:
        """The parameter names this layer covers, weight first."""
        return [self.weight] if self.bias is None else [self.weight, self.bias]

    @property
    def groups(self) -> int:
        return int(self.module.groups) if self.kind == "conv" else 1  # type: ignore[arg-type]

    def features(self, captured: Tensor) -> Tensor:
        """Layer inputs as ``(b, G, T, K)`` rows whose outer product with δ gives ∂f/∂W
        (``(b, T)`` token ids for an embedding)."""
        b = captured.shape[0]
        if self.kind == "conv":
            return _conv_patches(captured, self.module)  # type: ignore[arg-type]
        if self.kind == "embedding":
            return captured.reshape(b, -1)
        return captured.reshape(b, 1, -1, captured.shape[-1])

    def cotangents(self, delta: Tensor) -> Tensor:
        """Output cotangents ``(O, b, *out)`` as ``(O, b, G, T, C)``."""
        o, b = delta.shape[:2]
        if self.kind == "conv":
            g = self.groups
            channels = delta.shape[2]
            grouped = delta.reshape(o, b, g, channels // g, -1)  # (O, b, G, C, T)
            return grouped.transpose(3, 4)
        return delta.reshape(o, b, 1, -1, delta.shape[-1])

    def sizes(self, inputs: torch.Size, outputs: torch.Size) -> tuple[int, int, int, int, int]:
        """``(G, T, K, C, P)`` from per-sample input and output shapes: groups, positions,
        inputs per position and group, outputs per position and group, parameters."""
        count = self.module.weight.numel()  # type: ignore[operator]
        if self.bias is not None:
            count += self.module.bias.numel()  # type: ignore[operator]
        if self.kind == "conv":
            g = self.groups
            channels = int(self.module.out_channels)  # type: ignore[arg-type]
            kernel = self.module.weight[0].numel()  # type: ignore[index]
            return g, outputs.numel() // channels, kernel, channels // g, count
        if self.kind == "embedding":
            return 1, inputs.numel(), 1, outputs[-1], count
        return 1, outputs.numel() // outputs[-1], inputs[-1], outputs[-1], count


def _padding_pairs(conv: nn.modules.conv._ConvNd) -> list[tuple[int, int]]:
    """(left, right) zero padding per spatial dimension, as the convolution applies it."""
    kernel, dilation = conv.kernel_size, conv.dilation
    if conv.padding == "valid":
        return [(0, 0)] * len(kernel)
    if conv.padding == "same":  # torch pads the odd element on the right
        totals = [d * (k - 1) for k, d in zip(kernel, dilation, strict=True)]
        return [(total // 2, total - total // 2) for total in totals]
    return [(int(p), int(p)) for p in conv.padding]


def _conv_patches(x: Tensor, conv: nn.modules.conv._ConvNd) -> Tensor:
    """The input patches of a (grouped) convolution: ``(b, C, *L_in) → (b, G, L, C/G·Πk)``,
    ordered like ``weight[c].flatten()`` within each group."""
    dims = len(conv.kernel_size)
    pads = [p for pair in reversed(_padding_pairs(conv)) for p in pair]
    if any(pads):
        mode = "constant" if conv.padding_mode == "zeros" else conv.padding_mode
        x = F.pad(x, pads, mode=mode)
    windows = zip(conv.kernel_size, conv.stride, conv.dilation, strict=True)
    for axis, (k, s, d) in enumerate(windows):
        x = x.unfold(2 + axis, d * (k - 1) + 1, s)  # window appended as the last axis
        if d > 1:
            x = x[..., ::d]
    b, channels = x.shape[:2]
    g = conv.groups
    positions = x.shape[2 : 2 + dims]
    x = x.reshape(b, g, channels // g, *x.shape[2:])  # (b, G, C/G, *L, *k)
    order = (0, 1, *range(3, 3 + dims), 2, *range(3 + dims, 3 + 2 * dims))
    return x.permute(order).reshape(b, g, math.prod(positions), -1)


_STANDARD_FORWARDS = frozenset(c.forward for c in (nn.Linear, NTKLinear, *_CONVS, nn.Embedding))
"""The forwards the factorisation models: a subclass that replaces one (Hugging Face's
``OPTLearnedPositionalEmbedding`` computes positions from the attention mask) is not a
candidate."""


def candidate_layers(
    model: nn.Module, params: Mapping[str, Tensor]
) -> tuple[list[Layer], dict[str, str]]:
    """Modules of a supported type whose parameters are in ``params``, and why other modules
    of a supported type are not candidates (module name → reason)."""
    owners: dict[int, int] = {}
    for module in model.modules():
        for p in module.parameters(recurse=False):
            owners[id(p)] = owners.get(id(p), 0) + 1
    layers: list[Layer] = []
    reasons: dict[str, str] = {}
    for name, module in model.named_modules():
        prefix = f"{name}." if name else ""
        weight, bias = f"{prefix}weight", f"{prefix}bias"
        kind: LayerKind
        if isinstance(module, nn.Linear | NTKLinear):
            kind = "linear"
        elif isinstance(module, _CONVS):
            kind = "conv"
        elif isinstance(module, nn.Embedding):
            kind = "embedding"
        else:
            continue
        if weight not in params:
            continue
        label = name or "(root)"
        if type(module).forward not in _STANDARD_FORWARDS:
            reasons[label] = (
                f"has its own forward ({type(module).__name__}.forward: its input need not be "
                "what the weight multiplies)"
            )
            continue
        own = [module.weight] + ([module.bias] if getattr(module, "bias", None) is not None else [])
        if any(owners.get(id(p), 0) > 1 for p in own):
            reasons[label] = "shares its weight with another module"
            continue
        if isinstance(module, nn.Embedding):
            if module.max_norm is not None:
                reasons[label] = "renormalises its weight in the forward (max_norm)"
                continue
            if module.scale_grad_by_freq or module.sparse:
                reasons[label] = "has scale_grad_by_freq or sparse gradients"
                continue
        scale_w, scale_b = (
            (module.weight_scale, module.bias_std) if isinstance(module, NTKLinear) else (1.0, 1.0)
        )
        has_bias = getattr(module, "bias", None) is not None and bias in params
        layers.append(
            Layer(
                name,
                module,
                kind,
                weight,
                bias if has_bias else None,
                float(scale_w),
                float(scale_b),
            )
        )
    return layers, reasons


def structured_share(params: Mapping[str, Tensor], layers: Sequence[Layer]) -> float:
    """The fraction of the parameters (by count) that ``layers`` cover."""
    total = sum(p.numel() for p in params.values())
    covered = sum(params[n].numel() for layer in layers for n in layer.names)
    return covered / max(1, total)


def per_sample_gradients(layer: Layer, a: Tensor, d: Tensor) -> Tensor:
    """``(O, b, P_layer)``: the gradient of each output of each sample w.r.t. the layer's
    parameters (weight flattened, then bias), from features ``a`` and cotangents
    ``(O, b, G, T, C)``."""
    o, b = d.shape[:2]
    if layer.kind == "embedding":
        module = cast(nn.Embedding, layer.module)
        rows = d[:, :, 0]  # (O, b, T, D)
        if module.padding_idx is not None:
            rows = rows * (a != module.padding_idx).to(rows.dtype)[None, :, :, None]
        index = a[None, :, :, None].expand(rows.shape)
        grad = rows.new_zeros((o, b, module.num_embeddings, rows.shape[-1]))
        return grad.scatter_add_(2, index, rows).reshape(o, b, -1)
    weight = layer.weight_scale * torch.einsum("oigtc,igtk->oigck", d, a)
    parts = [weight.reshape(o, b, -1)]
    if layer.bias is not None:
        parts.append(layer.bias_scale * d.sum(3).reshape(o, b, -1))
    return torch.cat(parts, dim=2)


def weight_projections(layer: Layer, a: Tensor, d: Tensor, r: Tensor, s: Tensor) -> Tensor:
    """``(m,)``: the inner products ``⟨∂/∂W, r_i s_iᵀ⟩`` of one sample's structured weight
    gradient with m rank-one matrices, without forming the gradient.

    ``a``: the sample's features (``(G, T, K)``, or ``(T,)`` token ids); ``d``: its cotangents
    ``(G, T, C)`` for one output direction; ``r``: ``(rows, m)`` over the rows of
    ``weight.reshape(rows, -1)`` (output channels, or vocabulary entries); ``s``: ``(K, m)``
    over its columns.
    """
    if layer.kind == "embedding":
        padding = cast(nn.Embedding, layer.module).padding_idx
        ids, rows_d = a, d[0]  # (T,), (T, D)
        if padding is not None:
            keep = ids != padding
            ids, rows_d = ids[keep], rows_d[keep]
        return (r[ids] * (rows_d @ s)).sum(0)
    g, _, c = d.shape
    on_rows = torch.einsum("gtc,gcm->gtm", d, r.reshape(g, c, -1))
    on_columns = torch.einsum("gtk,km->gtm", a, s)
    return layer.weight_scale * (on_rows * on_columns).sum((0, 1))


def input_gram(layer: Layer, a1: Tensor, a2: Tensor, dtype: torch.dtype) -> Tensor:
    """``(b1, b2, G, T, S)``: inner products of the inputs at every pair of positions (plus the
    bias term); for an embedding the co-occurrence of token ids."""
    if layer.kind == "embedding":
        same: Tensor = a1[:, None, :, None] == a2[None, :, None, :]  # (b1, b2, T, S)
        padding = cast(nn.Embedding, layer.module).padding_idx
        if padding is not None:
            same = same & (a1 != padding)[:, None, :, None]
        return same.to(dtype).unsqueeze(2)
    gram = layer.weight_scale**2 * torch.einsum("igtk,jgsk->ijgts", a1, a2)
    if layer.bias is not None:
        gram = gram + layer.bias_scale**2
    return gram


def choose_path(layer: Layer, inputs: torch.Size, outputs: torch.Size, o: int) -> Path:
    """The cheapest contraction for one layer with O outputs per sample (module docstring)."""
    g, t, k, c, p = layer.sizes(inputs, outputs)
    if layer.kind != "embedding" and g == 1 and t == 1:
        return "vector"
    pairs = g * t * (t * k + t * o * c + o * o * c)  # flops per pair of samples
    gradients = o * o * p
    return "pairs" if pairs <= gradients else "gradients"


__all__ = [
    "Layer",
    "LayerKind",
    "Path",
    "candidate_layers",
    "choose_path",
    "input_gram",
    "per_sample_gradients",
    "structured_share",
    "weight_projections",
]
