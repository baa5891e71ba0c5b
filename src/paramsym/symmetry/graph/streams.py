"""Residual streams that only mean-subtracting norms read, and their translations.

LayerNorm subtracts the mean of its input, so ``LN(x + t·1) = LN(x)`` exactly (eps included).
Where every reader of a residual stream is a LayerNorm, each map that writes into the stream
may add a multiple of the all-ones direction to its output
(:class:`~paramsym.symmetry.translation.StreamTranslation`; notes 005 §4, found by the
project's exact discovery on GPT-2).

On the traced graph: the stream is everything a LayerNorm's input is computed from through
residual adds, dropout, casts and views that keep the feature axis last; the writers are the
linear maps (``linear``, Hugging Face ``Conv1D``'s ``addmm``) and embeddings at its edge. A
stream is translated only when nothing but LayerNorms (and the stream itself) reads any of
its tensors: a linear map reading it, a head on it, or the model's output would see the
translation. A writer whose parameters are used anywhere else (a tied embedding) is left out.
"""

from __future__ import annotations

from torch.fx import Node

from paramsym.symmetry.base import Symmetry
from paramsym.symmetry.graph.trace import TracedGraph
from paramsym.symmetry.graph.walk import op_name
from paramsym.symmetry.translation import StreamTranslation

_PASS = frozenset({"add", "sub", "dropout", "clone", "contiguous", "to", "_to_copy", "alias",
                   "detach", "view", "reshape", "_unsafe_view"})  # fmt: skip
_WRITERS = {"linear": (1, 2, 0), "addmm": (2, 0, 1), "embedding": (0, None, 1)}
"""op -> (weight argument, bias argument, the weight's feature axis)."""


def _width(node: Node) -> int | None:
    value = node.meta.get("val")
    shape = getattr(value, "shape", None)
    return int(shape[-1]) if shape is not None and len(shape) else None


def _stream(graph_nodes: list[Node]) -> tuple[set[Node], set[Node]]:
    """(stream nodes, writer nodes): what LayerNorm inputs are computed from through ops that
    pass a translation along the features."""
    stream: set[Node] = set()
    writers: set[Node] = set()
    frontier = [
        n.args[0]
        for n in graph_nodes
        if op_name(n) == "layer_norm"
        and isinstance(n.args[0], Node)
        and isinstance(n.args[1], (list, tuple))
        and len(n.args[1]) == 1
    ]
    while frontier:
        node = frontier.pop()
        if node in stream or node.op != "call_function":
            continue
        name = op_name(node)
        if name in _WRITERS:
            writers.add(node)
            stream.add(node)
        elif name in _PASS:
            operands = node.args[:2] if name in ("add", "sub") else node.args[:1]
            inputs = [a for a in operands if isinstance(a, Node)]
            if any(_width(a) != _width(node) for a in inputs):
                continue  # a view that moves the features, or a broadcast across them
            stream.add(node)
            frontier.extend(inputs)
    return stream, writers


def _components(stream: set[Node]) -> list[set[Node]]:
    parent = {n: n for n in stream}

    def find(n: Node) -> Node:
        while parent[n] is not n:
            parent[n] = parent[parent[n]]
            n = parent[n]
        return n

    for node in stream:
        for user in node.users:
            if user in stream:
                parent[find(user)] = find(node)
    groups: dict[Node, set[Node]] = {}
    for node in stream:
        groups.setdefault(find(node), set()).add(node)
    return list(groups.values())


_CHECKS = frozenset({"_assert_tensor_metadata", "_assert_scalar", "sym_size", "sym_numel"})
"""Ops that read a tensor's metadata only (``torch.export`` inserts them), not its values."""


def _read_only_by_norms(component: set[Node]) -> bool:
    for node in component:
        for user in node.users:
            if user in component or op_name(user) in _CHECKS:
                continue
            if op_name(user) == "layer_norm" and user.args[0] is node:
                continue
            return False
    return True


def mean_translations(traced: TracedGraph, unexplained: dict[str, str]) -> list[Symmetry]:
    """The stream translations of the traced graph (module docstring)."""
    nodes = list(traced.graph.nodes)
    stream, writers = _stream(nodes)
    found: list[Symmetry] = []
    for component in sorted(_components(stream), key=lambda c: min(nodes.index(n) for n in c)):
        if not _read_only_by_norms(component):
            continue
        entries: list[tuple[str, int]] = []
        sizes: list[int] = []
        modules: list[str] = []
        written: set[Node] = set()
        for writer in sorted(component & writers, key=nodes.index):
            found_entries = _writer_entries(traced, writer, unexplained)
            if found_entries:
                written.add(writer)
                for name, axis, size in found_entries:
                    entries.append((name, axis))
                    sizes.append(size)
                modules.append(found_entries[0][0].rsplit(".", 1)[0])
        if entries:
            site = modules[0] if len(modules) == 1 else f"{modules[0]},…,{modules[-1]}"
            readers = _norm_modules(traced, component, nodes)
            closed = _closed(component, written)
            found.append(
                StreamTranslation(entries, sizes, site=site, readers=readers, closed=closed)
            )
    return found


def _closed(component: set[Node], written: set[Node]) -> bool:
    """Whether everything added into the stream comes from the writers in ``written``: no
    writer left out (tied), no tensor from outside the stream, no constant added."""
    for node in component:
        name = op_name(node)
        if name in _WRITERS:
            if node not in written:
                return False
            continue
        operands = node.args[:2] if name in ("add", "sub") else node.args[:1]
        if any(not isinstance(a, Node) or a not in component for a in operands):
            return False
    return True


def _norm_modules(traced: TracedGraph, component: set[Node], nodes: list[Node]) -> tuple[str, ...]:
    """The modules of the LayerNorms reading ``component``, named by their weight parameter
    (norms without a weight parameter are left out)."""
    names: list[str] = []
    for user in sorted({u for n in component for u in n.users if op_name(u) == "layer_norm"},
                       key=nodes.index):  # fmt: skip
        weight = user.args[2] if len(user.args) > 2 else user.kwargs.get("weight")
        if isinstance(weight, Node) and weight.name in traced.parameters:
            names.append(traced.parameters[weight.name].rpartition(".")[0])
    return tuple(dict.fromkeys(names))


def _writer_entries(
    traced: TracedGraph, writer: Node, unexplained: dict[str, str]
) -> list[tuple[str, int, int]]:
    """(parameter, feature axis, translation size) of a writer's weight and bias, or nothing
    when they are not parameters used by this op alone."""
    weight_index, bias_index, feature_axis = _WRITERS[op_name(writer)]
    weight = writer.args[weight_index] if len(writer.args) > weight_index else None
    bias = (
        writer.args[bias_index]
        if bias_index is not None and len(writer.args) > bias_index
        else writer.kwargs.get("bias")
    )
    entries: list[tuple[str, int, int]] = []
    for node, is_bias in ((weight, False), (bias, True)):
        if node is None:
            continue
        if not isinstance(node, Node) or node.name not in traced.parameters:
            return []
        name = traced.parameters[node.name]
        shape = tuple(node.meta["val"].shape)
        if len(node.users) != 1 or name in unexplained:
            return []  # tied or reused: the translation would reach its other use
        if is_bias:
            entries.append((name, 0, 1))
        elif len(shape) == 2:
            entries.append((name, feature_axis, shape[1 - feature_axis]))
        else:
            return []
    return entries
