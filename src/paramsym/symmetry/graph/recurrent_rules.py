"""Recurrent layers on the graph: ``nn.LSTM``, ``nn.GRU`` and ``nn.RNN`` (fused aten ops).

A recurrent layer's hidden units form one feature space per layer, produced by the rows of
every gate of ``weight_ih``, ``weight_hh`` and the biases (gate blocks of H rows each) and
read back by the columns of ``weight_hh`` at the next step:

* **permutations** of the hidden units re-index every gate block's rows and ``weight_hh``'s
  columns alike (the gates act unit by unit);
* **sign flips** pass when the hidden state is odd in the gates that produce it: for an LSTM
  ``h = o ⊙ tanh(c)`` with ``c = f ⊙ c' + i ⊙ g``, flipping the cell-candidate gate g's rows
  (and ``weight_hh``'s columns) flips c and h; for a GRU the candidate gate n; for a tanh RNN
  all rows;
* **rescaling** passes only a ReLU RNN (``h = relu(W x + U h' + b)``, U ↦ c U c⁻¹).

The initial state must be zero (the default): a given ``h0`` is input the symmetry cannot move.
Bidirectional layers, and a final state ``h_n`` of several layers that is read later, block
the hidden spaces (the layers' states are stacked on one axis).
"""

from __future__ import annotations

from typing import Any

from paramsym.symmetry.graph.facts import ALL_FAMILIES, Family, Law, Member
from paramsym.symmetry.graph.rules import PERM
from paramsym.symmetry.graph.values import ParamValue, TensorValue
from paramsym.symmetry.graph.walk import OpCall, Walk, blank, rule

_GATES = {"lstm": 4, "gru": 3, "rnn_tanh": 1, "rnn_relu": 1}
_CANDIDATE = {"lstm": 2, "gru": 2, "rnn_tanh": 0}  # gate block whose sign follows h
_PASSING = {
    "lstm": PERM | {Family.SIGN},
    "gru": PERM | {Family.SIGN},
    "rnn_tanh": PERM | {Family.SIGN},
    "rnn_relu": PERM | {Family.SCALING},
}


@rule("zeros", "zeros_like", "new_zeros")
def zeros(walk: Walk, call: OpCall) -> Any:
    return TensorValue(tuple(call.shape), zero=True)


@rule("lstm", "gru", "rnn_tanh", "rnn_relu")
def recurrent(walk: Walk, call: OpCall) -> Any:
    x, hx, params = call.args[0], call.args[1], call.args[2]
    has_biases, layers, bidirectional = bool(call.args[3]), int(call.args[4]), bool(call.args[7])
    states = list(hx) if isinstance(hx, (list, tuple)) else [hx]
    per_layer = 4 if has_biases else 2
    outputs = blank(call.shape)
    if (
        not isinstance(x, TensorValue)
        or not all(isinstance(p, ParamValue) for p in params)
        or len(params) != layers * per_layer * (2 if bidirectional else 1)
    ):
        return walk.fallback(call)
    gates, facts = _GATES[call.op], walk.facts
    passing = _PASSING[call.op]
    hidden = params[1].shape[1]
    reason = ""
    if bidirectional:
        reason = "bidirectional"
    elif not all(isinstance(s, TensorValue) and s.zero for s in states):
        reason = "its initial state is given (only a zero initial state keeps the symmetry)"
    elif layers > 1 and (call.used_outputs - {0}):
        reason = "the final states of several layers are read (they share one axis)"
    member = x.member(-1)
    spaces: list[Member] = []
    for layer in range(layers):
        w_ih, w_hh, *biases = params[layer * per_layer : (layer + 1) * per_layer]
        if member is not None:
            facts.attach(member, w_ih.name, 1, Law.COVECTOR, block=member.block)
        space = facts.new_space(hidden, call.module, frozenset() if reason else passing)
        for gate in range(gates):
            offset = gate * hidden
            for tensor in (w_ih, w_hh, *biases):
                _rows(walk, call.op, space, tensor, gate, offset, passing)
        facts.attach(space, w_hh.name, 1, Law.COVECTOR, families=passing)
        facts.block(space, ALL_FAMILIES - passing, f"{call.where} (recurrent gates)")
        if reason:
            facts.block(space, ALL_FAMILIES, f"{call.where}: {reason}")
        spaces.append(space)
        member = space
    if reason or not isinstance(outputs, list):
        return outputs
    last = spaces[-1]
    out = [TensorValue(tuple(outputs[0].shape), {len(outputs[0].shape) - 1: last})]
    for state in outputs[1:]:  # h_n (and c_n): (layers, batch, hidden)
        axes = {len(state.shape) - 1: last} if layers == 1 else {}
        out.append(TensorValue(tuple(state.shape), axes))
    return out


def _rows(
    walk: Walk,
    op: str,
    space: Member,
    tensor: ParamValue,
    gate: int,
    offset: int,
    passing: frozenset[Family],
) -> None:
    """Attach one gate block's rows: permuted in every passing family; flipped (sign) only in
    the candidate gate; scaled only in a ReLU RNN."""
    facts = walk.facts
    facts.attach(space, tensor.name, 0, Law.VECTOR, offset=offset, families=PERM)
    if Family.SIGN in passing and gate == _CANDIDATE[op]:
        facts.attach(
            space, tensor.name, 0, Law.VECTOR, offset=offset, families=frozenset({Family.SIGN})
        )
    if Family.SCALING in passing:
        facts.attach(
            space, tensor.name, 0, Law.VECTOR, offset=offset, families=frozenset({Family.SCALING})
        )
