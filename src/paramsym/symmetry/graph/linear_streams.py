"""Feature spaces joined by linear maps only, on a traced graph: a writer's bias and its unread
directions.

A *writer* is a ``linear`` op whose output is followed, through adds and ops that keep each
vector along the last axis whole (:func:`~paramsym.symmetry.graph.feature_axis.keeps_last_axis`),
to the ops that read it. Where every op met is a linear map reading it as its input, and no two
paths meet (a vector would carry the writer twice):

* **linear_shift** — a writer's bias whose readers all have biases moves by δ, each reader's
  bias taking back ``R δ`` (:class:`~paramsym.symmetry.absorption.BiasAbsorption`: the bias of a
  residual MLP's block, which reaches its output map through the residual add);
* **unread** — the readers of a writer stack to fewer rows than its width
  (:class:`~paramsym.symmetry.unread.UnreadTranslation`).

On a single link (one writer read by one reader that reads nothing else) GL(n) already moves
the unread directions unless the writer has more inputs than n, so they are only reported then.
A bias that an absorption found before already moves as its source (a residual partner's
``bias_shift``, :mod:`~paramsym.symmetry.graph.residual_shifts`) is left to it. Every parameter
moved must be used by that op alone and understood by the walk; those read must be understood.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from torch.fx import Node

from paramsym.symmetry.absorption import BiasAbsorption, Part, Reader
from paramsym.symmetry.base import Symmetry
from paramsym.symmetry.graph.absorptions import _Params
from paramsym.symmetry.graph.feature_axis import keeps_last_axis, shape_of
from paramsym.symmetry.graph.trace import TracedGraph
from paramsym.symmetry.graph.walk import op_name
from paramsym.symmetry.unread import UnreadTranslation


@dataclass(frozen=True)
class _Map:
    """A linear op: its node, weight and bias names (``None``: not a parameter the walk
    understood / no bias), whether each is used by it alone, and its sizes."""

    node: Node
    weight: str | None
    bias: str | None
    has_bias: bool
    movable: bool
    inputs: int
    outputs: int


def _map(node: Node, params: _Params) -> _Map | None:
    if op_name(node) != "linear":
        return None
    weight = node.args[1]
    bias = node.args[2] if len(node.args) > 2 else node.kwargs.get("bias")
    weight_name, bias_name = params.name(weight), params.name(bias)
    shape = params.shape(weight_name) if weight_name else None
    if weight_name is None or shape is None or len(shape) != 2:
        return None
    if bias is not None and bias_name is None:
        return None
    movable = params.movable(weight) is not None and (bias is None or params.movable(bias))
    return _Map(node, weight_name, bias_name, bias is not None, bool(movable), shape[1], shape[0])


def _is_add(node: Node) -> bool:
    return bool(
        op_name(node) == "add"
        and len(node.args) == 2
        and all(isinstance(a, Node) for a in node.args)
        and node.kwargs.get("alpha", 1) == 1
        and node.args[0] is not node.args[1]
    )


def _readers(writer: Node) -> list[Node] | None:
    """The linear ops reading ``writer``'s output (module docstring), or ``None`` where
    something else reads it or two paths meet."""
    width = (shape_of(writer) or (None,))[-1]
    found: list[Node] = []
    seen: set[Node] = set()
    stack = [writer]
    while stack:
        node = stack.pop()
        for user in node.users:
            if user in seen:
                return None  # two paths meet
            seen.add(user)
            if op_name(user) == "linear" and user.args[0] is node:
                found.append(user)
                continue
            added = _is_add(user) and (shape_of(user) or (None,))[-1] == width
            if not (added or (user.args and user.args[0] is node and keeps_last_axis(user))):
                return None
            stack.append(user)
    return found


def _writers(node: Any) -> list[Node] | None:
    """The linear ops whose outputs, added, make up ``node`` (through adds and the ops of
    :func:`~paramsym.symmetry.graph.feature_axis.keeps_last_axis`), or ``None`` where something
    else contributes or a writer contributes twice."""
    if not isinstance(node, Node):
        return None
    if op_name(node) == "linear":
        return [node]
    if _is_add(node):
        parts = [_writers(a) for a in node.args]
        if any(p is None for p in parts):
            return None
        found = [w for p in parts for w in p or ()]
        return found if len(set(found)) == len(found) else None
    if node.args and keeps_last_axis(node):
        return _writers(node.args[0])
    return None


def _site(*maps: _Map) -> str:
    return ",".join(dict.fromkeys((m.weight or "?").rpartition(".")[0] or "?" for m in maps))


def linear_stream_symmetries(
    traced: TracedGraph, unexplained: dict[str, str], found_before: Sequence[Symmetry] = ()
) -> list[Symmetry]:
    """The linear shifts and unread translations of the graph (module docstring), less the
    shifts of biases that an absorption of ``found_before`` moves as its source."""
    params = _Params(traced, unexplained)
    maps = {n: m for n in traced.graph.nodes if (m := _map(n, params)) is not None}
    readers_of = {n: _readers(n) for n in maps}
    writers_of = {n: _writers(n.args[0]) for n in maps}
    found: list[Symmetry] = []
    for node, writer in maps.items():
        readers = readers_of[node]
        if readers is None or not readers or any(r not in maps for r in readers):
            continue
        found += _writer_families(writer, [maps[r] for r in readers], writers_of)
    return [s for s in found if not _known(s, found_before)]


def _known(symmetry: Symmetry, before: Sequence[Symmetry]) -> bool:
    """Whether ``symmetry`` is a bias absorption whose source an earlier one moves too."""
    return isinstance(symmetry, BiasAbsorption) and any(
        isinstance(s, BiasAbsorption) and s.source.name == symmetry.source.name for s in before
    )


def _writer_families(
    writer: _Map, readers: list[_Map], writers_of: dict[Node, list[Node] | None]
) -> Iterator[Symmetry]:
    site = f"{_site(writer)}->{_site(*readers)}"
    if (
        writer.has_bias
        and writer.bias
        and writer.movable
        and all(r.has_bias and r.movable for r in readers)
    ):
        yield BiasAbsorption(
            Part(writer.bias, 0, 0, writer.outputs),
            [Reader(r.weight, 1, 0, r.bias) for r in readers if r.weight],
            family="linear_shift",
            site=site,
        )
    rows = sum(r.outputs for r in readers)
    single = len(readers) == 1 and writers_of.get(readers[0].node) == [writer.node]
    if (
        writer.movable
        and rows < writer.outputs
        and not (single and writer.inputs <= writer.outputs)
    ):
        assert writer.weight is not None
        yield UnreadTranslation(
            writer.weight,
            writer.bias,
            [r.weight for r in readers if r.weight],
            width=writer.outputs,
            inputs=writer.inputs,
            rows=rows,
            site=site,
        )
