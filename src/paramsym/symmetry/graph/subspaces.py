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
from paramsym.symmetry.graph.feature_axis import keeps_last_axis
from paramsym.symmetry.graph.trace import TracedGraph
from paramsym.symmetry.graph.walk import op_name
from paramsym.symmetry.subspace import Map, SubspaceReaderTranslation

_Chain = tuple[list[Map], list[int], tuple[str | None, str | None] | None, int]
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
        rank = width - 1 if norm is not None else width
        if min([rank, *widths]) >= widths[-1]:
            continue  # the output fills its space
        readers, outputs, only_linear = linear_readers(node, params, widths[-1])
        others = not only_linear
        if not others:
            continue  # linear maps alone read it: the GL of the link moves these directions
        offset = any(m.bias for m in maps) or (norm is not None and norm[1] is not None)
        if offset:
            kept = [(r, o) for r, o in zip(readers, outputs, strict=True) if r.bias is not None]
            readers, outputs = [r for r, _ in kept], [o for _, o in kept]
        if not readers:
            continue
        site = maps[-1].weight.rpartition(".")[0] or maps[-1].weight
        found.append(
            SubspaceReaderTranslation(
                maps, norm, readers, outputs, width=width, widths=widths, site=site
            )
        )
    return found


def _chain(node: Node, params: _Params, depth: int = 0) -> _Chain | None:
    """The linear maps that make ``node``'s output (``node`` a linear map), back to a LayerNorm
    or to an input they do not constrain; ``None`` when ``node`` is not a linear map with
    parameters the walk understood."""
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
    while isinstance(source, Node) and keeps_last_axis(source):
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
