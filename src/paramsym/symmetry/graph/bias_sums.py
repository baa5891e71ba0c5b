"""Biases of several linear maps added into one sum: each may take what another gives up.

A parallel block (Phi, GPT-J, GPT-NeoX with ``use_parallel_residual``, Falcon) adds the
attention's and the MLP's outputs into the residual stream in one sum,
``h + (W_o a + b_o) + (W_2 m + b_2)``, and nothing reads the partial sums. Moving one bias by
δ and the other by −δ, ``(b_o + δ, b_2 − δ)``, changes no sum:
:class:`~paramsym.symmetry.absorption.ParameterTranslation` (family ``bias_sum``), one per bias
after the first, each against the first. (Sequential blocks write their biases into sums that
are read in between, by the next block's norm, so they have none.)

On the traced graph: a chain of ``add`` ops, each partial sum read only by the next add; its
terms that are, through ops that pass values unchanged (dropout, casts, views keeping the
last axis), the outputs of linear maps (``linear``, ``addmm``) whose bias is a parameter used
there only, whose output nothing else reads, and whose shape is the sum's (a bias that a
broadcast repeats over more positions than another's reaches a different set). Sums with a
parameter added as it is are :func:`~paramsym.symmetry.graph.additive.parameter_sum_translations`';
sums of lookups, :func:`~paramsym.symmetry.graph.absorptions.embedding_translations`'.
"""

from __future__ import annotations

from typing import Any

from torch.fx import Node

from paramsym.symmetry.absorption import ParameterTranslation, Part
from paramsym.symmetry.base import Symmetry
from paramsym.symmetry.graph.absorptions import _linear_parts, _Params
from paramsym.symmetry.graph.additive import is_sum_add
from paramsym.symmetry.graph.feature_axis import PASS, VIEWS, shape_of
from paramsym.symmetry.graph.trace import TracedGraph
from paramsym.symmetry.graph.walk import op_name


def bias_sum_translations(traced: TracedGraph, unexplained: dict[str, str]) -> list[Symmetry]:
    """The ``bias_sum`` translations of the traced graph (module docstring)."""
    params = _Params(traced, unexplained)
    tops: dict[Node, None] = {}
    for node in traced.graph.nodes:
        if is_sum_add(node):
            top = node
            while len(top.users) == 1 and is_sum_add(next(iter(top.users))):
                top = next(iter(top.users))
            tops.setdefault(top)
    found: list[Symmetry] = []
    for top in tops:
        terms: list[Any] = []
        _terms(top, terms)
        if any(isinstance(t, Node) and t.op == "placeholder" for t in terms):
            continue
        shape = shape_of(top)
        biases = [b for b in (_bias(t, shape, params) for t in terms) if b is not None]
        biases = list(dict.fromkeys(biases))
        if len(biases) < 2 or shape is None:
            continue
        width = shape[-1]
        first = biases[0]
        for other in biases[1:]:
            parts = [Part(first, 0, 0, width), Part(other, 0, 0, width, -1.0)]
            site = f"{first.rpartition('.')[0]},{other.rpartition('.')[0]}"
            found.append(ParameterTranslation(parts, family="bias_sum", site=site))
    return found


def _terms(node: Node, terms: list[Any]) -> None:
    """The operands of the chain of adds ending at ``node`` that are not themselves partial
    sums read only by the chain."""
    for operand in node.args[:2]:
        if isinstance(operand, Node) and is_sum_add(operand) and len(operand.users) == 1:
            _terms(operand, terms)
        else:
            terms.append(operand)


def _bias(term: Any, shape: tuple[int, ...] | None, params: _Params) -> str | None:
    """The bias of the linear map ``term`` passes on unchanged, or ``None``."""
    if not isinstance(term, Node) or shape is None or shape_of(term) != shape:
        return None
    node = term
    while op_name(node) in PASS or op_name(node) in VIEWS:
        source = node.args[0] if node.args else None
        if not isinstance(source, Node) or len(source.users) != 1:
            return None
        if (shape_of(source) or (None,))[-1:] != shape[-1:]:
            return None
        node = source
    parts = _linear_parts(node)
    if parts is None or parts[2] is None or len(node.users) != 1:
        return None
    bias = params.movable(parts[2])
    return bias if bias is not None and params.shape(bias) == (shape[-1],) else None
