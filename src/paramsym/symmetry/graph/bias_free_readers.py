"""Finding :mod:`paramsym.symmetry.norm_weights` on a traced graph: a LayerNorm's shift where
readers of its output have no bias (GPT-Neo's query, key and value maps; Falcon's).

For every ``layer_norm`` whose β is a parameter used there only, and whose output (followed
through the ops of :mod:`~paramsym.symmetry.graph.feature_axis`) only linear maps read, each as
its whole input along the normalised axis with a weight used there only, and some of them
without a bias:

* :class:`~paramsym.symmetry.norm_weights.NormShiftIntoWeights` on β and every reader's weight
  (where every reader has a bias, :func:`~.absorptions.norm_translations`' β absorption and
  norm-reader translations span it);
* from the attention groups already found: the rows of a bias-free reader that make one
  head's keys of a query–key GL (not rotary: RoPE rotates a key shift by position) get
  :class:`~paramsym.symmetry.norm_weights.NormRowShift` on their own (``key_shift``); the rows
  that make one head's values of a value–output GL whose output projection has a bias get it
  with that bias absorbing (``value_shift``).
"""

from __future__ import annotations

from collections.abc import Sequence

from torch.fx import Node

from paramsym.symmetry.absorption import Reader
from paramsym.symmetry.attention import QueryKeyGL, ValueOutputGL
from paramsym.symmetry.base import Symmetry
from paramsym.symmetry.graph.absorptions import (
    _output_biases,
    _Params,
    linear_readers,
)
from paramsym.symmetry.graph.trace import TracedGraph
from paramsym.symmetry.graph.walk import op_name
from paramsym.symmetry.norm_weights import NormRowShift, NormShiftIntoWeights

_Norm = tuple[str | None, str, int]
"""(γ or ``None``, β, width) of a LayerNorm."""


def bias_free_reader_shifts(
    traced: TracedGraph, unexplained: dict[str, str], found: Sequence[Symmetry]
) -> list[Symmetry]:
    """The families of the module docstring."""
    params = _Params(traced, unexplained)
    out: list[Symmetry] = []
    bias_free: dict[str, _Norm] = {}  # a bias-free reader's weight -> its norm
    for node in traced.graph.nodes:
        if op_name(node) != "layer_norm":
            continue
        shape = node.args[1] if len(node.args) > 1 else None
        gamma, beta = (node.args[i] if len(node.args) > i else None for i in (2, 3))
        if not isinstance(shape, (list, tuple)) or len(shape) != 1 or beta is None:
            continue
        width = int(shape[0])
        gamma_name, beta_name = params.name(gamma), params.movable(beta)
        if beta_name is None or (gamma is not None and gamma_name is None):
            continue
        readers = _readers(node, params, width)
        if not readers or all(r.bias is not None for r in readers):
            continue
        site = beta_name.rpartition(".")[0] or beta_name
        out.append(NormShiftIntoWeights(gamma_name, beta_name, readers, width=width, site=site))
        for r in readers:
            if r.bias is None:
                bias_free[r.weight] = (gamma_name, beta_name, width)
    if not bias_free:
        return out
    biases = _output_biases(traced, params)
    for s in found:
        if type(s) not in (QueryKeyGL, ValueOutputGL):
            continue  # exactly these: a rotary query–key map rotates a key shift by position
        assert isinstance(s, (QueryKeyGL, ValueOutputGL))
        site = s.name[s.name.index("[") + 1 : -1]
        moved = [slot for slot in s.slots if slot.name in bias_free]
        rows = [t for t in moved if (t.power < 0) == (type(s) is QueryKeyGL)]
        if len(rows) != 1:
            continue
        slot = rows[0]
        gamma_name, beta_name, width = bias_free[slot.name]
        shape = params.shape(slot.name)
        if shape is None or len(shape) != 2 or shape[1 - slot.axis] != width:
            continue  # the rows must be along the output axis, the input axis the norm's
        reader = Reader(slot.name, 1 - slot.axis, slot.offset or 0, None)
        length = slot.length(s.width)
        if type(s) is QueryKeyGL:
            out.append(NormRowShift(gamma_name, beta_name, reader, length, width=width,
                                    family="key_shift", site=site))  # fmt: skip
            continue
        outputs = [t for t in s.slots if t.power < 0]
        absorbers = [Reader(t.name, t.axis, t.offset or 0, biases.get(t.name)) for t in outputs]
        if outputs and all(a.bias is not None for a in absorbers):
            out.append(NormRowShift(gamma_name, beta_name, reader, length, absorbers,
                                    width=width, family="value_shift", site=site))  # fmt: skip
    return out


def _readers(node: Node, params: _Params, width: int) -> list[Reader]:
    """The linear maps reading the norm's output (bias ``None`` where they have none), or
    nothing when anything else reads it or a weight or bias is used elsewhere (the walk of
    :func:`~paramsym.symmetry.graph.absorptions.linear_readers`)."""
    readers, _, only_linear = linear_readers(node, params, width)
    return readers if only_linear else []
