"""The block analysers of attention modules, for the module-by-module walk of
:func:`paramsym.symmetries` (registered with :func:`~paramsym.symmetry.register_block`).

They build the groups of :mod:`paramsym.symmetry.attention` (per-head query-key and
value-output GL, head permutations) for the library's :class:`~paramsym.nn.MultiHeadAttention`
and for ``torch.nn.MultiheadAttention`` (packed ``in_proj_weight`` rows Q | K | V, or separate
``q/k/v_proj_weight``; ``bias_k``/``bias_v`` move with the keys/values), and find them inside
``nn.TransformerEncoderLayer``/``DecoderLayer`` (with the feed-forward hidden layer),
``nn.TransformerEncoder``/``Decoder`` and :class:`~paramsym.nn.TinyTransformer`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch.nn.functional as F  # noqa: N812
from torch import nn

from paramsym.nn.activations import ActivationSpec, activation_spec, get_activation
from paramsym.nn.attention import MultiHeadAttention, TinyTransformer, TransformerBlock
from paramsym.symmetry.attention import HeadPermutation, QueryKeyGL, ValueOutputGL
from paramsym.symmetry.base import Slot, Symmetry
from paramsym.symmetry.chain import Node, hidden_layer_symmetries, is_softmax_cross_entropy
from paramsym.symmetry.detect import BlockContext, register_block
from paramsym.symmetry.translation import SoftmaxTranslation


def _head_symmetries(
    site: str,
    heads: int,
    d_k: int,
    d_v: int,
    query: list[tuple[str, int, int]],
    key: list[tuple[str, int, int]],
    value: list[tuple[str, int, int]],
    output: list[tuple[str, int, int]],
) -> list[Symmetry]:
    """Per-head QK and VO groups and the head permutation, from (name, axis, offset) triples
    locating each head-0 block (head i is at offset + i·d)."""

    def slots(items: list[tuple[str, int, int]], power: float, width: int, head: int) -> list[Slot]:
        return [Slot(n, axis, power, offset=o + head * width) for n, axis, o in items]

    def blocks(items: list[tuple[str, int, int]], power: float, width: int) -> list[Slot]:
        return [Slot(n, axis, power, offset=o, block=width) for n, axis, o in items]

    found: list[Symmetry] = []
    for i in range(heads):
        found.append(
            QueryKeyGL(
                d_k, slots(query, 1.0, d_k, i), slots(key, -1.0, d_k, i), site=f"{site}.head{i}"
            )
        )
        found.append(
            ValueOutputGL(
                d_v, slots(value, 1.0, d_v, i), slots(output, -1.0, d_v, i), site=f"{site}.head{i}"
            )
        )
    if heads > 1:
        found.append(
            HeadPermutation(
                heads,
                blocks(query, 1.0, d_k) + blocks(key, 1.0, d_k) + blocks(value, 1.0, d_v),
                blocks(output, -1.0, d_v),
                site=site,
            )
        )
    return found


def _site(prefix: str, default: str) -> str:
    return prefix[:-1] if prefix else default


def analyse_multi_head_attention(
    module: nn.Module, prefix: str, context: BlockContext
) -> list[Symmetry]:
    """The library's :class:`~paramsym.nn.MultiHeadAttention`."""
    assert isinstance(module, MultiHeadAttention)
    bias = module.q_proj.bias is not None

    def proj(name: str) -> list[tuple[str, int, int]]:
        weight = [(f"{prefix}{name}.weight", 0, 0)]
        return weight + ([(f"{prefix}{name}.bias", 0, 0)] if bias else [])

    return _head_symmetries(
        _site(prefix, "attention"),
        module.num_heads,
        module.d_k,
        module.d_v,
        proj("q_proj"),
        proj("k_proj"),
        proj("v_proj"),
        [(f"{prefix}out_proj.weight", 1, 0)],
    )


def analyse_torch_multihead_attention(
    module: nn.Module, prefix: str, context: BlockContext
) -> list[Symmetry]:
    """``torch.nn.MultiheadAttention``, packed (``in_proj_weight``) or separate projections."""
    assert isinstance(module, nn.MultiheadAttention)
    e, hd = module.embed_dim, module.head_dim
    if module.in_proj_weight is not None:
        q = [(f"{prefix}in_proj_weight", 0, 0)]
        k = [(f"{prefix}in_proj_weight", 0, e)]
        v = [(f"{prefix}in_proj_weight", 0, 2 * e)]
    else:
        q = [(f"{prefix}q_proj_weight", 0, 0)]
        k = [(f"{prefix}k_proj_weight", 0, 0)]
        v = [(f"{prefix}v_proj_weight", 0, 0)]
    if module.in_proj_bias is not None:
        q.append((f"{prefix}in_proj_bias", 0, 0))
        k.append((f"{prefix}in_proj_bias", 0, e))
        v.append((f"{prefix}in_proj_bias", 0, 2 * e))
    if module.bias_k is not None:  # learned extra key and value tokens, shape (1, 1, E)
        k.append((f"{prefix}bias_k", 2, 0))
    if module.bias_v is not None:
        v.append((f"{prefix}bias_v", 2, 0))
    return _head_symmetries(
        _site(prefix, "attention"),
        module.num_heads,
        hd,
        hd,
        q,
        k,
        v,
        [(f"{prefix}out_proj.weight", 1, 0)],
    )


_FUNCTIONAL_ACTIVATIONS: dict[Callable[..., Any], str] = {F.relu: "relu", F.gelu: "gelu"}


def _activation_of(layer: TorchLayer) -> ActivationSpec | None:
    activation = layer.activation
    if isinstance(activation, nn.Module):
        return activation_spec(activation)
    name = _FUNCTIONAL_ACTIVATIONS.get(activation)
    return get_activation(name) if name else None


TorchLayer = nn.TransformerEncoderLayer | nn.TransformerDecoderLayer


def _feedforward(layer: TorchLayer, prefix: str, context: BlockContext) -> list[Symmetry]:
    """The hidden layer ``linear1 → activation → dropout → linear2`` of a torch layer."""
    spec = _activation_of(layer)
    if spec is None:
        context.report(
            f"'{prefix}activation' ({layer.activation!r}): not an activation paramsym knows"
        )
        return []
    first = Node(f"{prefix}linear1", layer.linear1, "linear")
    middle = [
        Node(f"{prefix}activation", nn.Identity(), "activation", spec),
        Node(f"{prefix}dropout", layer.dropout, "dropout"),
    ]
    return hidden_layer_symmetries(first, middle, Node(f"{prefix}linear2", layer.linear2, "linear"))


def analyse_encoder_layer(module: nn.Module, prefix: str, context: BlockContext) -> list[Symmetry]:
    """``nn.TransformerEncoderLayer``: self-attention and the feed-forward hidden layer. Its
    LayerNorms sit on the residual stream, where they have no symmetry of their own."""
    assert isinstance(module, nn.TransformerEncoderLayer)
    found = analyse_torch_multihead_attention(module.self_attn, f"{prefix}self_attn.", context)
    return found + _feedforward(module, prefix, context)


def analyse_decoder_layer(module: nn.Module, prefix: str, context: BlockContext) -> list[Symmetry]:
    """``nn.TransformerDecoderLayer``: self-attention, cross-attention, feed-forward."""
    assert isinstance(module, nn.TransformerDecoderLayer)
    found = analyse_torch_multihead_attention(module.self_attn, f"{prefix}self_attn.", context)
    found += analyse_torch_multihead_attention(
        module.multihead_attn, f"{prefix}multihead_attn.", context
    )
    return found + _feedforward(module, prefix, context)


def analyse_layer_stack(module: nn.Module, prefix: str, context: BlockContext) -> list[Symmetry]:
    """``nn.TransformerEncoder``/``Decoder``: each layer in turn (the final norm has none)."""
    assert isinstance(module, (nn.TransformerEncoder, nn.TransformerDecoder))
    for i, layer in enumerate(module.layers):
        context.walk(layer, f"{prefix}layers.{i}")
    return []


def analyse_transformer_block(
    module: nn.Module, prefix: str, context: BlockContext
) -> list[Symmetry]:
    """:class:`~paramsym.nn.TransformerBlock`: its attention and its MLP chain."""
    assert isinstance(module, TransformerBlock)
    context.walk(module.attention, f"{prefix}attention")
    context.walk(module.mlp, f"{prefix}mlp")
    return []


def analyse_tiny_transformer(
    module: nn.Module, prefix: str, context: BlockContext
) -> list[Symmetry]:
    """:class:`~paramsym.nn.TinyTransformer`: its blocks, and with a cross-entropy loss the
    translation of the read-out (its logits feed the softmax directly)."""
    assert isinstance(module, TinyTransformer)
    for i, block in enumerate(module.blocks):
        context.walk(block, f"{prefix}blocks.{i}")
    if context.at_output and is_softmax_cross_entropy(context.loss_fn):
        head = module.head
        bias = f"{prefix}head.bias" if head.bias is not None else None
        return [
            SoftmaxTranslation(
                f"{prefix}head.weight",
                bias,
                head.in_features,
                preserves="loss",
                site=f"{prefix}head",
            )
        ]
    return []


register_block(MultiHeadAttention, analyse_multi_head_attention)
register_block(nn.MultiheadAttention, analyse_torch_multihead_attention)
register_block(nn.TransformerEncoderLayer, analyse_encoder_layer)
register_block(nn.TransformerDecoderLayer, analyse_decoder_layer)
register_block(nn.TransformerEncoder, analyse_layer_stack)
register_block(nn.TransformerDecoder, analyse_layer_stack)
register_block(TransformerBlock, analyse_transformer_block)
register_block(TinyTransformer, analyse_tiny_transformer)
