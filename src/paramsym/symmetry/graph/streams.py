"""Residual streams that only mean-subtracting norms read, and their translations.

LayerNorm subtracts the mean of its input, so ``LN(x + t·1) = LN(x)`` exactly (eps included).
Where every reader of a residual stream is a LayerNorm, each map that writes into the stream
may add a multiple of the all-ones direction to its output
(:class:`~paramsym.symmetry.translation.StreamTranslation`; notes 005 §4, found by the
project's exact discovery on GPT-2).

On the traced graph: the stream is everything a LayerNorm's input is computed from through
residual adds, dropout, casts and layout ops (views, ``flatten``, ``transpose``/``permute``,
``expand``, a ``cat`` along another axis), with the feature axis followed through each; the
writers at its edge are linear maps (``linear``, Hugging Face ``Conv1D``'s ``addmm``),
embeddings, ungrouped convolutions writing their channels (a ViT's patch embedding) and
parameters added or concatenated as they are (a class token, a position table). A stream is
translated only when nothing but LayerNorms (and the stream itself) reads any of its tensors:
a linear map reading it, a head on it, or the model's output would see the translation. A
writer whose parameters are used anywhere else (a tied embedding) is left out.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, cast

from torch.fx import Node
from torch.fx.node import Argument

from paramsym.symmetry.base import Symmetry
from paramsym.symmetry.graph.absorptions import _linear_parts
from paramsym.symmetry.graph.shared_calls import SHARED_USES
from paramsym.symmetry.graph.trace import TracedGraph
from paramsym.symmetry.graph.walk import op_name
from paramsym.symmetry.translation import StreamTranslation

_PASS = frozenset({"add", "add_", "sub", "dropout", "clone", "contiguous", "to", "_to_copy",
                   "alias", "detach"})  # fmt: skip
_SUMS = ("add", "add_", "sub")
"""Ops adding their two operands (``add_``: in place, Falcon's ``mlp_output += attention``)."""
_VIEWS = frozenset({"view", "reshape", "_unsafe_view"})
_CONVOLUTIONS = frozenset({"conv1d", "conv2d", "conv3d"})
_WRITERS = {"linear": (1, 2, 0), "addmm": (2, 0, 1), "embedding": (0, None, 1),
            "layer_norm": (None, 3, 0),
            **{name: (1, 2, 0) for name in _CONVOLUTIONS}}  # fmt: skip
"""op -> (weight argument, bias argument, the weight's feature axis); a LayerNorm writes its
shift β (its scale γ multiplies, it does not add)."""


def _shape(node: object) -> tuple[int, ...] | None:
    value = node.meta.get("val") if isinstance(node, Node) else None
    shape = getattr(value, "shape", None)
    return tuple(int(s) for s in shape) if shape is not None else None


def _sources(node: Any, axis: int) -> list[tuple[Node, int]] | None:
    """The operands of a pass-through ``node`` that carry its feature axis ``axis`` (≥ 0, in
    ``node``'s output), with the axis in each; ``None`` when ``node`` does not pass a
    translation of that axis through (a view that moves or splits it, a broadcast across it,
    a ``cat`` along it, a convolution writing something other than its channels)."""
    name = op_name(node)
    out = _shape(node)
    if out is None:
        return None
    if name in _PASS:
        operands = node.args[:2] if name in _SUMS else node.args[:1]
        found: list[tuple[Node, int]] = []
        for operand in operands:
            shape = _shape(operand)
            if shape is None:  # a Python number: closedness decides
                continue
            inner = axis - (len(out) - len(shape))
            if inner < 0 or shape[inner] != out[axis]:
                return None  # broadcast across the features
            found.append((operand, inner))
        return found
    if name == "cat":
        dim = (node.args[1] if len(node.args) > 1 else 0) % len(out)
        if dim == axis:
            return None
        return [(t, axis) for t in node.args[0] if isinstance(t, Node)]
    source: Any = node.args[0] if node.args else None
    shape = _shape(source)
    if shape is None:
        return None
    if name in _VIEWS:
        # the feature axis must stay last with the same size (a view that keeps it whole)
        if axis != len(out) - 1 or shape[-1] != out[-1]:
            return None
        return [(source, len(shape) - 1)]
    if name == "flatten":
        start = node.args[1] if len(node.args) > 1 else 0
        end = node.args[2] if len(node.args) > 2 else -1
        start, end = start % len(shape), end % len(shape)
        if axis < start:
            return [(source, axis)]
        if axis > start:
            return [(source, axis + end - start)]
        return [(source, start)] if start == end else None
    if name in ("transpose", "swapaxes"):
        a, b = (int(d) % len(shape) for d in node.args[1:3])
        return [(source, b if axis == a else a if axis == b else axis)]
    if name == "roll":  # Swin's shifted windows move tokens, not features
        dims = node.args[2] if len(node.args) > 2 else []
        dims = dims if isinstance(dims, (list, tuple)) else [dims]
        rolled = {int(d) % len(shape) for d in dims}
        return [(source, axis)] if dims and axis not in rolled else None
    if name == "permute":
        return [(source, int(node.args[1][axis]) % len(shape))]
    if name == "expand":
        inner = axis - (len(out) - len(shape))
        return [(source, inner)] if inner >= 0 and shape[inner] == out[axis] else None
    return None


def _writes(node: Any, axis: int, traced: TracedGraph) -> bool:
    """Whether ``node`` writes into the stream on its feature axis ``axis``: a linear map or
    embedding (features last), an ungrouped convolution (channels), or a parameter."""
    if node.op == "placeholder":  # a parameter used here only (a tied one is left out)
        return node.name in traced.parameters and len(node.users) == 1
    name = op_name(node)
    if name in _CONVOLUTIONS:
        groups = node.args[6] if len(node.args) > 6 else node.kwargs.get("groups", 1)
        return axis == 1 and groups == 1
    if name == "layer_norm" and not _feeds_only_streams(node):
        return False  # a Post-LN block's norm, read by the next linear maps: a fixed input
    if name in ("matmul", "mm"):  # x @ W.T with a parameter W (Falcon's linear maps)
        return _linear_parts(node) is not None and axis == len(_shape(node) or ()) - 1
    return name in _WRITERS and axis == len(_shape(node) or ()) - 1


def _feeds_only_streams(node: Node) -> bool:
    """Whether every reader of ``node`` is a LayerNorm, a residual add or a pass-through op
    whose readers are such (a LayerNorm's output that only the next stream carries: Swin's and
    ViT's embedding norms)."""
    for user in node.users:
        name = op_name(user)
        if name in _CHECKS or name in _SUMS or (name == "layer_norm" and user.args[0] is node):
            continue
        if name in _PASS and user.args[0] is node and _feeds_only_streams(user):
            continue
        return False
    return True


def _stream(
    graph_nodes: list[Node], traced: TracedGraph
) -> tuple[dict[Node, int], dict[Node, int]]:
    """(stream nodes, writer nodes), each with its feature axis: what LayerNorm inputs are
    computed from through ops that pass a translation along the features."""
    stream: dict[Node, int] = {}
    writers: dict[Node, int] = {}
    frontier: list[tuple[Any, int]] = []
    for n in graph_nodes:
        shape = _shape(n.args[0]) if n.args else None
        if (
            op_name(n) == "layer_norm"
            and shape
            and isinstance(n.args[1], (list, tuple))
            and len(n.args[1]) == 1
        ):
            frontier.append((n.args[0], len(shape) - 1))
    while frontier:
        node, axis = frontier.pop()
        if node in stream:
            continue
        if _writes(node, axis, traced):
            writers[node] = stream[node] = axis
            continue
        if node.op != "call_function":
            continue
        sources = _sources(node, axis)
        if sources is None:
            continue
        stream[node] = axis
        frontier.extend(sources)
    return stream, writers


def _moved(stream: dict[Node, int], writers: dict[Node, int], nodes: list[Node]) -> dict[Node, int]:
    """The stream nodes a translation of the writers changes: writers, and nodes with an operand
    that changes. A branch with no writer above it (a Post-LN block's residual, the output of
    the previous LayerNorm, which its attention also reads) keeps its value, so its other
    readers do not see the translation."""
    moved: dict[Node, int] = {}
    for node in nodes:  # graph order: operands first
        if node not in stream:
            continue
        if node in writers or any(isinstance(a, Node) and a in moved for a in node.all_input_nodes):
            moved[node] = stream[node]
    return moved


def _unexposed(
    stream: dict[Node, int], writers: dict[Node, int], nodes: list[Node], live: set[Node]
) -> tuple[dict[Node, int], dict[Node, int]]:
    """The moved stream (:func:`_moved`) and its writers once the writers above every node
    that something other than a LayerNorm reads are left out (kept fixed): ELECTRA's embedding
    projection writes into the first block's residual stream, but its queries read it too, so
    only the attention output may move the stream."""
    while True:
        moved = _moved(stream, writers, nodes)
        exposed = [
            n
            for n in moved
            if any(
                u not in moved
                and u in live
                and op_name(u) not in _CHECKS
                and not (op_name(u) == "layer_norm" and u.args[0] is n)
                for u in n.users
            )
        ]
        if not exposed:
            return moved, writers
        above: set[Node] = set()
        frontier = list(exposed)
        while frontier:
            node = frontier.pop()
            if node in above or node not in moved:
                continue
            above.add(node)
            frontier.extend(node.all_input_nodes)
        writers = {w: a for w, a in writers.items() if w not in above}


def _components(stream: set[Node]) -> list[set[Node]]:
    parent = {n: n for n in stream}

    def find(n: Node) -> Node:
        while parent[n] is not n:
            parent[n] = parent[parent[n]]
            n = parent[n]
        return n

    for node in stream:
        for user in node.users:
            if user in stream and op_name(user) != "layer_norm":  # a norm's β starts a stream
                parent[find(user)] = find(node)
    groups: dict[Node, set[Node]] = {}
    for node in stream:
        groups.setdefault(find(node), set()).add(node)
    return list(groups.values())


_CHECKS = frozenset({"_assert_tensor_metadata", "_assert_scalar", "sym_size", "sym_numel"})
"""Ops that read a tensor's metadata only (``torch.export`` inserts them), not its values."""


def _live(nodes: list[Node]) -> set[Node]:
    """The nodes the graph's output depends on (Swin computes a reshaped copy of its hidden
    states that it does not return)."""
    live: set[Node] = set()
    frontier = [n for n in nodes if n.op == "output"]
    while frontier:
        node = frontier.pop()
        if node not in live:
            live.add(node)
            frontier.extend(node.all_input_nodes)
    return live


def _read_only_by_norms(component: set[Node], live: set[Node]) -> bool:
    for node in component:
        for user in node.users:
            if user in component or op_name(user) in _CHECKS or user not in live:
                continue
            if op_name(user) == "layer_norm" and user.args[0] is node:
                continue
            return False
    return True


def mean_translations(traced: TracedGraph, unexplained: dict[str, str]) -> list[Symmetry]:
    """The stream translations of the traced graph (module docstring)."""
    nodes = list(traced.graph.nodes)
    stream, writers = _stream(nodes, traced)
    live = _live(nodes)
    stream, writers = _unexposed(stream, writers, nodes, live)
    found: list[Symmetry] = []
    order = {n: i for i, n in enumerate(nodes)}
    for component in sorted(_components(set(stream)), key=lambda c: min(order[n] for n in c)):
        if not _read_only_by_norms(component, live):
            continue
        entries: list[tuple[str, int]] = []
        sizes: list[int] = []
        modules: list[str] = []
        written: set[Node] = set()
        for writer in sorted(component & writers.keys(), key=order.__getitem__):
            found_entries = _writer_entries(traced, writer, writers[writer], unexplained)
            if SHARED_USES.get():
                # a writer applied in several calls moves once for all of them: its own
                # translation, counted over its sites by shared_calls
                if found_entries and _reused(traced, writer):
                    found.append(_single_writer(traced, component, nodes, found_entries))
                continue
            if found_entries:
                written.add(writer)
                for name, axis, size in found_entries:
                    entries.append((name, axis))
                    sizes.append(size)
                modules.append(found_entries[0][0].rsplit(".", 1)[0])
        if entries:
            site = modules[0] if len(modules) == 1 else f"{modules[0]},…,{modules[-1]}"
            readers = _norm_modules(traced, component, nodes)
            closed = _closed(component, written, writers)
            found.append(
                StreamTranslation(entries, sizes, site=site, readers=readers, closed=closed)
            )
    return found


def _reused(traced: TracedGraph, writer: Node) -> bool:
    """Whether a parameter ``writer`` writes with is read by more than one op."""
    return any(
        isinstance(a, Node) and a.name in traced.parameters and len(a.users) > 1
        for a in (*writer.args, *writer.kwargs.values())
    )


def _single_writer(
    traced: TracedGraph,
    component: set[Node],
    nodes: list[Node],
    entries: list[tuple[str, int, int]],
) -> StreamTranslation:
    """The translation of one writer's output alone (not ``closed``: the stream has others)."""
    site = entries[0][0].rsplit(".", 1)[0]
    return StreamTranslation(
        [(name, axis) for name, axis, _ in entries],
        [size for _, _, size in entries],
        site=site,
        readers=_norm_modules(traced, component, nodes),
    )


def _closed(component: set[Node], written: set[Node], writers: dict[Node, int]) -> bool:
    """Whether everything added into the stream comes from the writers in ``written``: no
    writer left out (tied), no tensor from outside the stream, no constant added."""
    for node in component:
        if node in writers:
            if node not in written:
                return False
            continue
        name = op_name(node)
        if name == "cat":
            operands = tuple(cast(Sequence[Argument], node.args[0]))
        else:
            operands = node.args[:2] if name in _SUMS else node.args[:1]
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
    traced: TracedGraph, writer: Node, axis: int, unexplained: dict[str, str]
) -> list[tuple[str, int, int]]:
    """(parameter, feature axis, translation size) of a writer's weight and bias (or of the
    parameter itself, written on its axis ``axis``), or nothing when they are not parameters
    used by this op alone."""
    weight: Argument
    bias: Argument
    if writer.op == "placeholder":
        weight, bias, feature_axis = writer, None, axis
    elif op_name(writer) in ("matmul", "mm"):
        parts = _linear_parts(writer)
        if parts is None:
            return []
        weight, bias, feature_axis = parts[1], None, 1 - parts[3]
    else:
        weight_index, bias_index, feature_axis = _WRITERS[op_name(writer)]
        weight = (
            writer.args[weight_index]
            if weight_index is not None and len(writer.args) > weight_index
            else None
        )
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
        shape = _shape(node) or ()
        if (len(node.users) != 1 and not SHARED_USES.get()) or name in unexplained:
            return []  # tied or reused: the translation would reach its other use
        if is_bias:
            entries.append((name, 0, 1))
        elif len(shape) >= 2 or writer.op == "placeholder":
            entries.append((name, feature_axis, math.prod(shape) // shape[feature_axis]))
        else:
            return []
    return entries
