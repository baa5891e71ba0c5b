"""The two biases of a recurrent layer, read only through their sum (``nn.LSTM``, ``nn.GRU``,
``nn.RNN``), found on the fused aten ops (``lstm``, ``gru``, ``rnn_tanh``, ``rnn_relu``).

Every gate of a recurrent cell computes ``W_ih x + b_ih + W_hh h + b_hh`` (torch's
documentation of each layer), so moving one bias by δ and the other by −δ changes nothing:
:class:`~paramsym.symmetry.absorption.ParameterTranslation` with parts ``(b_ih, +δ)`` and
``(b_hh, −δ)``, one per layer and direction, on the rows of the gates that read the sum:

* LSTM (gates i, f, g, o): all ``4H`` rows;
* GRU (gates r, z, n): the reset and update gates' ``2H`` rows; the candidate gate computes
  ``tanh(W_in x + b_in + r ⊙ (W_hn h + b_hn))``, where ``b_hn`` is multiplied by r, so its
  two biases are not a sum;
* RNN (tanh or ReLU): all ``H`` rows.

This holds whatever the initial state, the number of layers or the direction: nothing else
reads the biases. Each bias must be a parameter that only this op uses (a bias tied elsewhere
would carry the move there) and that the walk understood (an LSTM with a projection
``proj_size`` has no rule, and its parameters are reported as not analysed).
"""

from __future__ import annotations

from paramsym.symmetry.absorption import ParameterTranslation, Part
from paramsym.symmetry.base import Symmetry
from paramsym.symmetry.graph.absorptions import _Params
from paramsym.symmetry.graph.trace import TracedGraph
from paramsym.symmetry.graph.walk import op_name

_SUMMED_GATES = {"lstm": 4, "gru": 2, "rnn_tanh": 1, "rnn_relu": 1}
"""Per op: how many of the gate blocks (H rows each, from the top) read b_ih + b_hh."""


def recurrent_bias_translations(traced: TracedGraph, unexplained: dict[str, str]) -> list[Symmetry]:
    """``(b_ih + δ, b_hh − δ)`` on the summed gate rows of every layer and direction of every
    fused recurrent op in the graph (module docstring)."""
    params = _Params(traced, unexplained)
    found: list[Symmetry] = []
    for node in traced.graph.nodes:
        name = op_name(node)
        if name not in _SUMMED_GATES or len(node.args) < 5:
            continue
        weights = node.args[2]
        if not isinstance(weights, (list, tuple)) or not bool(node.args[3]):
            continue  # no biases
        groups = int(node.args[4]) * (2 if len(node.args) > 7 and bool(node.args[7]) else 1)
        if groups and len(weights) % groups == 0 and len(weights) // groups in (4, 5):
            found += _layer_translations(name, list(weights), len(weights) // groups, params)
    return found


def _layer_translations(
    op: str, weights: list[object], per_group: int, params: _Params
) -> list[Symmetry]:
    """One translation per (layer, direction) group of ``weights``: ``w_ih, w_hh, b_ih, b_hh``
    (and an LSTM's projection ``w_hr``: five per group)."""
    found: list[Symmetry] = []
    for start in range(0, len(weights), per_group):
        names = [params.movable(b) for b in weights[start + 2 : start + 4]]
        if names[0] is None or names[1] is None:
            continue
        bias_shape = params.shape(names[0])
        if bias_shape is None or bias_shape != params.shape(names[1]) or len(bias_shape) != 1:
            continue
        hidden = bias_shape[0] // {"lstm": 4, "gru": 3}.get(op, 1)
        rows = _SUMMED_GATES[op] * hidden
        parts = [Part(names[0], 0, 0, rows), Part(names[1], 0, 0, rows, -1.0)]
        module = names[0].rpartition(".")[0]
        layer = names[0].rpartition("bias_ih")[2].lstrip("_") or names[0]  # l0, l1_reverse
        site = f"{module}_{layer}" if module else layer
        found.append(ParameterTranslation(parts, family="recurrent_bias", site=site))
    return found
