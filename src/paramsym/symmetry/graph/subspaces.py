"""Finding :class:`~paramsym.symmetry.subspace.SubspaceReaderTranslation` on a traced graph.

A linear map's output is confined to an affine subspace of its width d when what it reads has
fewer than d dimensions of its own: a LayerNorm's output of width e (e − 1 directions, its mean
is fixed) or an unconstrained vector of width e < d, through one or more linear maps. Linear
maps reading that output as it is (through :mod:`.feature_axis` ops), with weights and biases
used there only, get the translation: ELECTRA's and ALBERT's embedding projection (e → d)
confines the first block's input, so its query, key and value maps each have ``out·(d − e + 1)``
flat directions. Other readers of the output (a residual add) are not moved; where there are
none, linear maps alone read the output and the GL of that link (the walk's) already moves
these directions, so nothing is reported.
"""

from __future__ import annotations

from torch.fx import Node

from paramsym.symmetry.base import Symmetry
from paramsym.symmetry.graph.absorptions import _linear_parts, _Params, linear_readers
from paramsym.symmetry.graph.feature_axis import keeps_last_axis, shape_of
from paramsym.symmetry.graph.trace import TracedGraph
from paramsym.symmetry.graph.walk import op_name
from paramsym.symmetry.subspace import Average, Map, SubspaceReaderTranslation
from paramsym.symmetry.subspace import chain_rank as _rank

_Chain = tuple[list[Map | Average], list[int], tuple[str | None, str | None] | None, int]
"""(maps in order, their output widths, the norm's (γ, β) or ``None``, the first input's
width)."""


def subspace_reader_translations(
    traced: TracedGraph, unexplained: dict[str, str]
) -> list[Symmetry]:
    """The ``span_reader`` translations of the traced graph (module docstring)."""
    params = _Params(traced, unexplained)
    found: list[Symmetry] = []
    for node in traced.graph.nodes:
        chain = _chain(node, params)
        if chain is None:
            continue
        maps, widths, norm, width = chain
        if _rank(maps, widths, width - 1 if norm is not None else width) >= widths[-1]:
            continue  # the output fills its space
        readers, outputs, only_linear = linear_readers(node, params, widths[-1])
        others = not only_linear
        if not others and not isinstance(maps[-1], Average):
            continue  # linear maps alone read it: the GL of the link moves these directions
        # (through attention there is no such link: the heads' GL moves the values too)
        offset = any(isinstance(m, Map) and m.bias for m in maps) or (
            norm is not None and norm[1] is not None
        )
        if offset:
            kept = [(r, o) for r, o in zip(readers, outputs, strict=True) if r.bias is not None]
            readers, outputs = [r for r, _ in kept], [o for _, o in kept]
        if not readers:
            continue
        last = next(m for m in reversed(maps) if isinstance(m, Map))
        site = last.weight.rpartition(".")[0] or last.weight
        if isinstance(maps[-1], Average):
            site += ".attention"  # the vector the heads' averages make
        found.append(
            SubspaceReaderTranslation(
                maps, norm, readers, outputs, width=width, widths=widths, site=site
            )
        )
    return found


_ATTENTION = frozenset({"scaled_dot_product_attention",
                        "_scaled_dot_product_flash_attention_for_cpu",
                        "_scaled_dot_product_efficient_attention",
                        "_scaled_dot_product_flash_attention"})  # fmt: skip
_HEAD_LAYOUT = frozenset({"view", "reshape", "_unsafe_view", "transpose", "contiguous", "clone",
                          "alias", "dropout"})  # fmt: skip


def _unwrap(node: object) -> object:
    while isinstance(node, Node) and op_name(node) in _HEAD_LAYOUT and node.args:
        node = node.args[0]
    return node


def _averaged_value(node: Node) -> tuple[Node, int] | None:
    """(the value projection, heads) where ``node`` is an attention's output with its heads
    merged back, (B, T, H·D) from (B, H, T, D), whose values are one linear map's output split
    into the same H heads of D: each head's output is an affine combination of its values."""
    if op_name(node) not in ("view", "reshape", "_unsafe_view"):
        return None
    attention = _unwrap(node)
    if isinstance(attention, Node) and op_name(attention) == "getitem":
        attention = attention.args[0]
    if not isinstance(attention, Node) or op_name(attention) not in _ATTENTION:
        return None
    out, merged = shape_of(attention), shape_of(node)
    value = _unwrap(attention.args[2]) if len(attention.args) > 2 else None
    if not isinstance(value, Node) or _linear_parts(value) is None:
        return None
    if out is None or merged is None or len(out) != 4 or value is attention.args[2]:
        return None
    heads, size = out[1], out[3]
    values = shape_of(value)
    if merged[-1] != heads * size or values is None or values[-1] != heads * size:
        return None
    return value, heads


def _chain(node: Node, params: _Params, depth: int = 0) -> _Chain | None:
    """The linear maps that make ``node``'s output (``node`` a linear map, or an attention's
    merged heads: :func:`_averaged_value`), back to a LayerNorm or to an input they do not
    constrain; ``None`` when ``node`` is neither, or has parameters the walk did not
    understand."""
    averaged = _averaged_value(node) if depth <= 8 else None
    if averaged is not None:
        inner = _chain(averaged[0], params, depth + 1)
        if inner is None:
            return None
        maps, widths, norm, first = inner
        return [*maps, Average(averaged[1])], [*widths, widths[-1]], norm, first
    parts = _linear_parts(node)
    if parts is None or depth > 8:
        return None
    source, weight, bias, axis = parts
    weight_name = params.name(weight)
    bias_name = params.name(bias) if bias is not None else None
    shape = params.shape(weight_name) if weight_name else None
    if weight_name is None or (bias is not None and bias_name is None):
        return None
    if shape is None or len(shape) != 2:
        return None
    here = Map(weight_name, axis, bias_name)
    out, width = shape[1 - axis], shape[axis]
    while isinstance(source, Node) and keeps_last_axis(source) and not _averaged_value(source):
        source = source.args[0]
    inner = _chain(source, params, depth + 1) if isinstance(source, Node) else None
    if inner is not None and inner[1][-1] == width:
        maps, widths, norm, first = inner
        return [*maps, here], [*widths, out], norm, first
    norm = _norm(source, params, width)
    return [here], [out], norm, width


def _norm(node: object, params: _Params, width: int) -> tuple[str | None, str | None] | None:
    """(γ, β) of a LayerNorm over the last ``width`` features that ``node`` is, else ``None``."""
    if not isinstance(node, Node) or op_name(node) != "layer_norm":
        return None
    shape = node.args[1] if len(node.args) > 1 else None
    if not isinstance(shape, (list, tuple)) or list(shape) != [width]:
        return None
    gamma, beta = (node.args[i] if len(node.args) > i else None for i in (2, 3))
    gamma_name, beta_name = params.name(gamma), params.name(beta)
    if (gamma is not None and gamma_name is None) or (beta is not None and beta_name is None):
        return None
    return gamma_name, beta_name
