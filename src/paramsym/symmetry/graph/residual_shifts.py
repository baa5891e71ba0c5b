"""β absorption in Post-LN blocks: a LayerNorm's shift absorbed by its readers and its residual.

In a Post-LN block (BERT, DistilBERT, ELECTRA, ALBERT) a LayerNorm's output ``y = γ ⊙ x̂ + β``
is read by the next linear maps and added, as it is, to the output of the block's last linear
map (the residual): ``LN(W₂ h + b₂ + y)``. Moving β by δ moves y by δ for every input; each
linear reader ``W y + b`` takes it back in its bias (``b − W δ``, notes 006 §3 (b1)) and the
residual's partner takes it back in its own bias (``b₂ − δ``), so the sum, and everything after
it, is unchanged. :class:`~paramsym.symmetry.absorption.BiasAbsorption` with ``partners``.

Found on the traced graph for every LayerNorm whose β is a parameter used there only and whose
output (followed through :mod:`.feature_axis`) is read by linear maps with biases used there
only and by at least one ``add`` whose other operand is, through ops that keep its last axis, a
linear map's output with such a bias and nothing else reading it. The LayerNorms whose outputs
only linear maps read are :func:`~paramsym.symmetry.graph.absorptions.norm_translations`'.

The same holds for a linear map's bias in place of β (``bias_shift``): ELECTRA's embedding
projection, whose output the first block's query, key and value maps read and its residual adds
to the attention output. It needs a linear reader and a residual partner: biases that are only
added together (a parallel block's) are :mod:`.bias_sums`', a chain of linear maps
:mod:`.linear_streams`'.
"""

from __future__ import annotations

from typing import Any

from torch.fx import Node

from paramsym.symmetry.absorption import BiasAbsorption, Part, Reader
from paramsym.symmetry.base import Symmetry
from paramsym.symmetry.graph.absorptions import _linear_parts, _Params
from paramsym.symmetry.graph.feature_axis import keeps_last_axis, readers_along_last_axis, shape_of
from paramsym.symmetry.graph.trace import TracedGraph
from paramsym.symmetry.graph.walk import op_name


def residual_norm_shifts(traced: TracedGraph, unexplained: dict[str, str]) -> list[Symmetry]:
    """The Post-LN β absorptions of the traced graph, and the bias absorptions of linear maps
    whose outputs only linear maps and residual adds read (module docstring)."""
    params = _Params(traced, unexplained)
    found: list[Symmetry] = []
    for node in traced.graph.nodes:
        source = _source(node, params)
        if source is None:
            continue
        name, width, norm = source
        absorbed = _absorbers(node, params, width)
        if absorbed is None or not absorbed[1] or not (norm or absorbed[0]):
            continue  # something else reads the output; no residual (a norm read by linear
            # maps alone is norm_translations', a chain of linear maps linear_streams'); or
            # biases only added together (bias_sums')
        readers, partners = absorbed
        site = name.rpartition(".")[0] or node.name
        found.append(
            BiasAbsorption(
                Part(name, 0, 0, width),
                readers,
                family="norm_shift" if norm else "bias_shift",
                site=site,
                partners=partners,
            )
        )
    return found


def _source(node: Node, params: _Params) -> tuple[str, int, bool] | None:
    """(the shift, its width, whether a LayerNorm's) of a LayerNorm's β or a linear map's bias
    used there only, else ``None``."""
    if op_name(node) == "layer_norm":
        shape: Any = node.args[1] if len(node.args) > 1 else None
        beta = node.args[3] if len(node.args) > 3 else node.kwargs.get("bias")
        name = params.movable(beta)
        if name is None or not isinstance(shape, (list, tuple)) or len(shape) != 1:
            return None
        return name, int(shape[0]), True
    parts = _linear_parts(node)
    if parts is None or parts[2] is None or params.name(parts[1]) is None:
        return None
    name = params.movable(parts[2])
    shape = params.shape(name) if name else None
    out = shape_of(node)
    if name is None or shape is None or len(shape) != 1 or not out or out[-1] != shape[0]:
        return None
    return name, shape[0], False


def _absorbers(node: Node, params: _Params, width: int) -> tuple[list[Reader], list[str]] | None:
    """(linear readers, residual partners' biases) of a LayerNorm's output, or ``None`` when
    something else reads it."""
    readers: list[Reader] = []
    partners: list[str] = []
    seen: set[Node] = set()
    for user, source in readers_along_last_axis(node):
        if user in seen:
            continue
        seen.add(user)
        parts = _linear_parts(user)
        if parts is not None and parts[0] is source:
            _, weight, bias, axis = parts
            weight_name = params.name(weight)
            bias_name = params.movable(bias) if bias is not None else None
            if weight_name is None or bias_name is None:
                return None
            shape = params.shape(weight_name)
            if shape is None or len(shape) != 2 or shape[axis] != width:
                return None
            readers.append(Reader(weight_name, axis, 0, bias_name))
            continue
        partner = _residual_partner(user, source, params, width)
        if partner is None:
            return None
        partners.append(partner)
    if len(set(partners)) != len(partners):
        return None
    return readers, partners


def _residual_partner(user: Node, source: Node, params: _Params, width: int) -> str | None:
    """The bias of the linear map whose output ``user`` (an ``add``) adds to ``source``, or
    ``None`` when ``user`` is not such an add."""
    if op_name(user) != "add" or len(user.args) != 2 or user.kwargs.get("alpha", 1) != 1:
        return None
    other: Any = user.args[1] if user.args[0] is source else user.args[0]
    if other is source or not isinstance(other, Node):
        return None
    shape = shape_of(user)
    if not shape or shape != shape_of(source) or shape_of(other) != shape:
        return None  # a broadcast would spread δ differently
    current: Any = other
    while len(current.users) == 1 and keeps_last_axis(current):
        current = current.args[0]
    if len(current.users) != 1:
        return None  # the partner's output is read elsewhere too
    parts = _linear_parts(current)
    if parts is None or parts[2] is None:
        return None
    bias = params.movable(parts[2])
    shape = params.shape(bias) if bias is not None else None
    return bias if shape == (width,) else None
