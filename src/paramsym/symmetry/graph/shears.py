"""Finding :class:`~paramsym.symmetry.shear.StreamShear` on a traced graph.

A linear map (``linear``, Hugging Face ``Conv1D``'s ``addmm``) whose weight and bias it alone
uses, whose output is read by other linear maps (with weights they alone use, reading the whole
output) and is added, as it is, into a stream that nothing but LayerNorms reads (through
residual adds, dropout, casts and views that keep the feature axis last): ELECTRA's and ALBERT's
embedding projection. Outputs that only the stream reads are left to the stream's mean
translation (:mod:`.streams`), which contains their shears.
"""

from __future__ import annotations

from torch.fx import Node

from paramsym.symmetry.absorption import Reader
from paramsym.symmetry.base import Symmetry
from paramsym.symmetry.graph.absorptions import _linear_parts, _Params
from paramsym.symmetry.graph.feature_axis import keeps_last_axis, readers_along_last_axis, shape_of
from paramsym.symmetry.graph.trace import TracedGraph
from paramsym.symmetry.graph.walk import op_name
from paramsym.symmetry.shear import StreamShear

_CHECKS = frozenset({"_assert_tensor_metadata", "_assert_scalar", "sym_size", "sym_numel"})


def stream_shears(traced: TracedGraph, unexplained: dict[str, str]) -> list[Symmetry]:
    """The stream shears of the traced graph (module docstring)."""
    params = _Params(traced, unexplained)
    live = _live(traced)
    found: list[Symmetry] = []
    for node in traced.graph.nodes:
        parts = _linear_parts(node)
        if parts is None:
            continue
        _, weight, bias, axis = parts
        weight_name = params.movable(weight)
        bias_name = params.movable(bias) if bias is not None else None
        shape = params.shape(weight_name) if weight_name else None
        if weight_name is None or (bias is not None and bias_name is None) or shape is None:
            continue
        if len(shape) != 2:
            continue
        width = shape[1 - axis]
        readers = _readers_and_stream(node, params, width, live)
        if readers:
            site = weight_name.rpartition(".")[0] or weight_name
            found.append(StreamShear(weight_name, 1 - axis, bias_name, readers, width=width,
                                     site=site))  # fmt: skip
    return found


def _readers_and_stream(node: Node, params: _Params, width: int, live: set[Node]) -> list[Reader]:
    """The linear readers of ``node``'s output when it also flows into a stream only
    LayerNorms read and nothing else reads it; else ``[]``."""
    readers: list[Reader] = []
    streams = 0
    seen: set[Node] = set()
    for user, source in readers_along_last_axis(node):
        if user in seen or user not in live or op_name(user) in _CHECKS:
            continue
        seen.add(user)
        parts = _linear_parts(user)
        if parts is not None and parts[0] is source:
            _, weight, bias, axis = parts
            weight_name = params.movable(weight)
            shape = params.shape(weight_name) if weight_name else None
            if weight_name is None or shape is None or len(shape) != 2 or shape[axis] != width:
                return []
            readers.append(Reader(weight_name, axis, 0, params.name(bias) if bias else None))
            continue
        if op_name(user) == "add" and shape_of(user) == shape_of(source):
            if not _read_only_by_norms(user, live, set()):
                return []
            streams += 1
            continue
        return []
    return readers if streams else []


def _read_only_by_norms(node: Node, live: set[Node], seen: set[Node]) -> bool:
    """Whether everything that reads ``node`` (through adds and ops keeping its last axis) is
    a LayerNorm over its last axis."""
    if node in seen:
        return True
    seen.add(node)
    for user in node.users:
        name = op_name(user)
        if user not in live or name in _CHECKS:
            continue
        if name == "layer_norm" and user.args[0] is node:
            shape = user.args[1] if len(user.args) > 1 else None
            if isinstance(shape, (list, tuple)) and len(shape) == 1:
                continue
            return False
        if name in ("add", "sub") and shape_of(user) == shape_of(node):
            if not _read_only_by_norms(user, live, seen):
                return False
            continue
        if user.args and user.args[0] is node and keeps_last_axis(user):
            if not _read_only_by_norms(user, live, seen):
                return False
            continue
        return False
    return True


def _live(traced: TracedGraph) -> set[Node]:
    """The nodes the graph's output depends on."""
    live: set[Node] = set()
    frontier = [n for n in traced.graph.nodes if n.op == "output"]
    while frontier:
        node = frontier.pop()
        if node not in live:
            live.add(node)
            frontier.extend(node.all_input_nodes)
    return live
