"""Finding the absorbed translations of :mod:`paramsym.symmetry.absorption` on a traced graph.

Read off the aten graph (notes 006 §3), each only where every parameter it moves is used by one
op and understood by the walk (a tied or reused tensor would carry the move elsewhere):

* **norm readers**: every linear map (``linear``; Hugging Face ``Conv1D``'s ``addmm``) that
  reads a LayerNorm's output along its normalised axis (through dropout, casts, views and
  selections of tokens that keep that axis last: :mod:`.feature_axis`) gets
  :class:`~paramsym.symmetry.absorption.NormReaderTranslation`; it needs a bias where the norm
  has a shift β;
* **β absorption**: a LayerNorm whose output only linear maps with biases read gets
  :class:`~paramsym.symmetry.absorption.BiasAbsorption` of its β into their biases;
* **embedding sums**: tables looked up (``embedding``) and added, whatever else is added with
  them, get :class:`~paramsym.symmetry.absorption.ParameterTranslation` ``(E₁ + 1cᵀ, Eⱼ − 1cᵀ)``
  for each table j after the first;
* **key and value biases**: from the attention groups already found. A query–key GL (not
  rotary: RoPE rotates a key bias by position) makes the key bias rows of its keys flat on their
  own; a value–output GL whose value projection has a bias and whose output projection has one
  gets the value bias absorbed into the output bias (attention rows sum to one).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch.fx import Node

from paramsym.symmetry.absorption import (
    BiasAbsorption,
    NormReaderTranslation,
    ParameterTranslation,
    Part,
    Reader,
)
from paramsym.symmetry.attention import QueryKeyGL, ValueOutputGL
from paramsym.symmetry.base import Symmetry
from paramsym.symmetry.graph.feature_axis import readers_along_last_axis
from paramsym.symmetry.graph.shared_calls import SHARED_USES
from paramsym.symmetry.graph.trace import TracedGraph
from paramsym.symmetry.graph.walk import op_name

_PASS = frozenset({"dropout", "clone", "contiguous", "to", "_to_copy", "alias", "detach"})
_VIEWS = frozenset({"view", "reshape", "_unsafe_view"})


def _shape(node: Any) -> tuple[int, ...] | None:
    value = node.meta.get("val") if isinstance(node, Node) else None
    shape = getattr(value, "shape", None)
    return tuple(int(s) for s in shape) if shape is not None else None


class _Params:
    """Which placeholders are parameters the walk understood, and how often each is used."""

    def __init__(self, traced: TracedGraph, unexplained: dict[str, str]) -> None:
        self.traced = traced
        self.unexplained = unexplained
        self.nodes = {
            traced.parameters[node.name]: node
            for node in traced.graph.nodes
            if node.op == "placeholder" and node.name in traced.parameters
        }

    def name(self, node: Any) -> str | None:
        """The parameter ``node`` holds, or ``None`` (not a parameter, or not understood)."""
        if not isinstance(node, Node) or node.op != "placeholder":
            return None
        name = self.traced.parameters.get(node.name)
        return None if name is None or name in self.unexplained else name

    def movable(self, node: Any) -> str | None:
        """The parameter ``node`` holds when only one op uses it (so moving it moves nothing
        else), else ``None``; any number of ops while
        :data:`~paramsym.symmetry.graph.shared_calls.SHARED_USES` is set (a layer applied
        several times, whose sites :mod:`~paramsym.symmetry.graph.shared_calls` counts)."""
        name = self.name(node)
        if name is None:
            return None
        return name if len(node.users) == 1 or SHARED_USES.get() else None

    def shape(self, name: str) -> tuple[int, ...] | None:
        node = self.nodes.get(name)
        return _shape(node) if node is not None else None


def _linear_parts(node: Node) -> tuple[Any, Any, Any, int] | None:
    """(input, weight, bias, the weight's input axis) of a linear map, or ``None``."""
    name = op_name(node)
    if name == "linear":
        bias = node.args[2] if len(node.args) > 2 else node.kwargs.get("bias")
        return node.args[0], node.args[1], bias, 1
    if name == "addmm":  # Conv1D: bias + x @ W, W (in, out)
        return node.args[1], node.args[2], node.args[0], 0
    if name in ("matmul", "mm") and len(node.args) == 2:  # x @ W.T (Falcon), x @ W
        weight = node.args[1]
        if isinstance(weight, Node) and weight.op == "placeholder":
            return (node.args[0], weight, None, 0) if len(_shape(weight) or ()) == 2 else None
        if (
            isinstance(weight, Node)
            and op_name(weight) in ("t", "numpy_T", "mT")
            and len(weight.users) == 1
            and isinstance(weight.args[0], Node)
            and weight.args[0].op == "placeholder"
            and len(_shape(weight.args[0]) or ()) == 2
        ):
            return node.args[0], weight.args[0], None, 1
    return None


def _linear_with_bias(node: Node) -> tuple[Any, Any, Any, int] | None:
    """:func:`_linear_parts`, with the bias a product ``x @ Wᵀ`` has added as the one use of
    its value (Falcon's ``FalconLinear``) for the families that move a map's weight and bias
    together (a norm's readers, a value bias's absorber); the families that follow the map's
    output take the product alone, the added bias being a term of its own there."""
    parts = _linear_parts(node)
    if parts is None or parts[2] is not None or op_name(node) not in ("matmul", "mm"):
        return parts
    return parts[0], parts[1], _added_bias(node), parts[3]


def _added_bias(node: Node) -> Node | None:
    """The vector parameter added to a product ``x @ W`` as its one use (Falcon's
    ``FalconLinear``: ``x @ W.T + b``), else ``None``."""
    if len(node.users) != 1:
        return None
    (user,) = node.users
    if op_name(user) not in ("add", "add_") or len(user.args) != 2 or user.kwargs.get("alpha"):
        return None
    other = user.args[1] if user.args[0] is node else user.args[0]
    out = _shape(node)
    if (
        isinstance(other, Node)
        and other.op == "placeholder"
        and out
        and _shape(other) == (out[-1],)
        and _shape(user) == out
    ):
        return other
    return None


def norm_translations(traced: TracedGraph, unexplained: dict[str, str]) -> list[Symmetry]:
    """The norm-reader translations and β absorptions of every LayerNorm in the graph."""
    params = _Params(traced, unexplained)
    found: list[Symmetry] = []
    for node in traced.graph.nodes:
        if op_name(node) != "layer_norm":
            continue
        shape = node.args[1] if len(node.args) > 1 else None
        if not isinstance(shape, (list, tuple)) or len(shape) != 1:
            continue
        width = int(shape[0])
        gamma, beta = (node.args[i] if len(node.args) > i else None for i in (2, 3))
        gamma_name, beta_name = params.name(gamma), params.name(beta)
        if (gamma is not None and gamma_name is None) or (beta is not None and beta_name is None):
            continue  # a scale or shift that is not a parameter the walk understood
        readers, outputs, everything_linear = linear_readers(node, params, width)
        site = (gamma_name or beta_name or node.name).rpartition(".")[0] or node.name
        usable = [(r, o) for r, o in zip(readers, outputs, strict=True)
                  if r.bias is not None or beta_name is None]  # fmt: skip
        if usable:
            found.append(
                NormReaderTranslation(
                    gamma_name,
                    beta_name,
                    [r for r, _ in usable],
                    [o for _, o in usable],
                    width=width,
                    site=site,
                )
            )
        if (
            everything_linear
            and readers
            and all(r.bias is not None for r in readers)
            and params.movable(beta) is not None
        ):
            assert beta_name is not None
            source = Part(beta_name, 0, 0, width)
            found.append(BiasAbsorption(source, readers, family="norm_shift", site=site))
    return found


def linear_readers(
    node: Node, params: _Params, width: int, *, bias_moves: bool = True
) -> tuple[list[Reader], list[int], bool]:
    """The linear maps reading ``node``'s vectors as their whole input along the last axis
    (``width`` features), followed through the ops of
    :mod:`~paramsym.symmetry.graph.feature_axis` (a pooler's ``select``, Swin's windows),
    whose weight (and bias, when ``bias_moves``) only they use; their output sizes; and
    whether nothing but such maps reads ``node``. Shared by every family that moves a
    norm's or a map's readers (norm readers, β absorptions, offset-norm scalings, span
    readers, bias-free readers)."""
    readers: list[Reader] = []
    outputs: list[int] = []
    only_linear = True
    seen: set[Node] = set()
    for user, source in readers_along_last_axis(node):
        if user in seen:
            continue
        seen.add(user)
        parts = _linear_with_bias(user)
        if parts is None or parts[0] is not source:
            only_linear = False
            continue
        _, weight, bias, axis = parts
        weight_name = params.movable(weight)
        bias_name = params.movable(bias) if bias is not None and bias_moves else None
        shape = params.shape(weight_name) if weight_name else None
        if (
            weight_name is None
            or (bias_moves and bias is not None and bias_name is None)
            or shape is None
            or len(shape) != 2
            or shape[axis] != width
        ):
            only_linear = False
            continue
        readers.append(Reader(weight_name, axis, 0, bias_name))
        outputs.append(shape[1 - axis])
    return readers, outputs, only_linear


def embedding_translations(traced: TracedGraph, unexplained: dict[str, str]) -> list[Symmetry]:
    """``(E₁ + 1cᵀ, Eⱼ − 1cᵀ)`` for tables whose lookups are added together."""
    params = _Params(traced, unexplained)
    roots: dict[Node, list[tuple[str, int]]] = {}  # the add a lookup reaches -> its tables
    for node in traced.graph.nodes:
        if op_name(node) != "embedding":
            continue
        table = params.movable(node.args[0])
        shape = params.shape(table) if table else None
        if table is None or shape is None or len(shape) != 2:
            continue
        reached = _added_into(node)
        if reached is not None:
            roots.setdefault(reached, []).append((table, shape[1]))
    sums: dict[Node, list[tuple[str, int]]] = {}  # the top of each chain of adds -> its tables
    for add, leaves in roots.items():
        top = add
        while len(top.users) == 1 and op_name(next(iter(top.users))) == "add":
            top = next(iter(top.users))
        sums.setdefault(top, []).extend(leaves)
    found: list[Symmetry] = []
    for leaves in sums.values():
        if len(leaves) < 2 or len({w for _, w in leaves}) != 1:
            continue
        (first, width), rest = leaves[0], leaves[1:]
        for table, _ in rest:
            parts = [Part(first, 1, 0, width), Part(table, 1, 0, width, -1.0)]
            site = f"{first.rpartition('.')[0]},{table.rpartition('.')[0]}"
            found.append(ParameterTranslation(parts, family="embedding_sum", site=site))
    return found


def _added_into(node: Node) -> Node | None:
    """The ``add`` that a lookup reaches through pass-through ops and views keeping its last
    axis (the lookup as one operand, added as it is), or ``None``."""
    current = node
    while True:
        if len(current.users) != 1:
            return None
        (user,) = current.users
        name = op_name(user)
        if name == "add" and len(user.args) == 2 and user.kwargs.get("alpha", 1) == 1:
            other = user.args[1] if user.args[0] is current else user.args[0]
            if other is current or _shape(user) is None:
                return None
            if (_shape(user) or ())[-1:] != (_shape(node) or ())[-1:]:
                return None
            return user
        if name in _PASS or name in ("expand",):
            current = user
            continue
        if name in _VIEWS and (_shape(user) or ())[-1:] == (_shape(node) or ())[-1:]:
            current = user
            continue
        return None


def attention_bias_translations(
    traced: TracedGraph, unexplained: dict[str, str], found: Sequence[Symmetry]
) -> list[Symmetry]:
    """Key biases flat on their own and value biases absorbed into the output bias, from the
    query–key and value–output groups in ``found``."""
    params = _Params(traced, unexplained)
    out: list[Symmetry] = []
    bias_of = _output_biases(traced, params)
    low_softmax = _softmax_below_float64(traced)
    for s in found:
        if type(s) is QueryKeyGL:
            keys = [slot for slot in s.slots if slot.power < 0 and _is_vector(params, slot.name)]
            parts = [Part(slot.name, 0, slot.offset or 0, slot.length(s.width)) for slot in keys]
            if parts and all(params.movable(params.nodes[p.name]) for p in parts):
                site = s.name[s.name.index("[") + 1 : -1]
                for part in parts:
                    out.append(ParameterTranslation([part], family="key_bias", site=site))
        elif type(s) is ValueOutputGL:
            values = [slot for slot in s.slots if slot.power > 0 and _is_vector(params, slot.name)]
            outputs = [slot for slot in s.slots if slot.power < 0]
            if len(values) != 1 or not outputs:
                continue
            value = values[0]
            if params.movable(params.nodes[value.name]) is None:
                continue
            readers = [Reader(slot.name, slot.axis, slot.offset or 0, bias_of.get(slot.name))
                       for slot in outputs]  # fmt: skip
            if any(r.bias is None for r in readers):
                continue
            source = Part(value.name, 0, value.offset or 0, value.length(s.width))
            site = s.name[s.name.index("[") + 1 : -1]
            absorbed = BiasAbsorption(source, readers, family="value_bias", site=site)
            if low_softmax:
                # rows of a float32 softmax sum to one to float32 only: exact in exact
                # arithmetic, kept by the model to about 1e-7 (BLOOM); out of the default teleport
                absorbed.default_teleport = False  # type: ignore[attr-defined]
            out.append(absorbed)
    return out


def _softmax_below_float64(traced: TracedGraph) -> bool:
    """Whether a float64 graph computes a softmax in a lower precision (BLOOM's
    ``softmax(..., dtype=float32)``): its rows then sum to one only to that precision."""
    for node in traced.graph.nodes:
        if op_name(node) not in ("_softmax", "softmax"):
            continue
        dtype = getattr(node.meta.get("val"), "dtype", None)
        if dtype in (torch.float32, torch.float16, torch.bfloat16):
            return _graph_is_float64(traced)
    return False


def _graph_is_float64(traced: TracedGraph) -> bool:
    for node in traced.graph.nodes:
        if node.op == "placeholder" and node.name in traced.parameters:
            value = node.meta.get("val")
            return getattr(value, "dtype", None) == torch.float64
    return False


def _is_vector(params: _Params, name: str) -> bool:
    shape = params.shape(name)
    return shape is not None and len(shape) == 1


def _output_biases(traced: TracedGraph, params: _Params) -> dict[str, str]:
    """weight -> the bias of the one linear map using it, where that bias is used only there."""
    found: dict[str, str] = {}
    for node in traced.graph.nodes:
        parts = _linear_with_bias(node)
        if parts is None or parts[2] is None:
            continue
        weight, bias = params.name(parts[1]), params.movable(parts[2])
        if weight is not None and bias is not None:
            found[weight] = bias
    return found
