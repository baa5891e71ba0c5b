"""The graph of a stack of identical blocks, from a trace of its first few.

A decoder's forward runs one block ``L`` times (``model.layers``, ``transformer.h``,
``encoder.layer``), and tracing every repetition is most of detection's time on a full-size
model: 24 blocks of a 0.5 B-parameter Llama are about 1500 ops, 2.4 s of fake-tensor dispatch
on the 2-core reference machine. :func:`trace_repeated` traces the model with its block list
cut to its first :data:`KEEP` blocks and builds the full graph from that trace: traced block 0
as the first block, traced block 1 for every middle block, the last traced block as the last
one, each copy reading its own block's parameters (placeholders renamed) and the previous
copy's outputs, and every copy's ops recorded under its own block's module path. The walk
and the solver then run on the full graph, so what detection reports is the same as after a
full trace (``tests/test_graph_repeat.py`` compares the two on every architecture it can).

The repetition is used only where nothing says the blocks differ, and returns ``None`` (the
caller traces the whole model) on any doubt:

* the blocks are distinct modules of one class with the same parameter and buffer names,
  shapes and dtypes, and the same settings (every plain attribute of every submodule equal
  across blocks, except one that holds the block's own index, such as ``layer_idx``: a
  per-block ``attention_type`` or ``sliding_window`` keeps the full trace);
* the traced blocks are the same subgraph: op by op the same targets, constants and shapes,
  each block reading the same tensors computed before the blocks (rotary tables, the mask)
  and the previous block's outputs at the same positions;
* no op runs between blocks, and nothing after the blocks reads a block other than the last.
"""

from __future__ import annotations

import copy
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn
from torch.fx import Graph, Node

from paramsym.symmetry.graph.trace import TracedGraph, TraceError, trace_forward

KEEP = 3
"""Blocks traced: a first, a middle and a last block."""

MIN_BLOCKS = KEEP + 2
"""Fewer blocks than this are traced in full (the repetition would save little)."""

_PLAIN = (bool, int, float, str, type(None))


def block_list(model: nn.Module) -> tuple[str, nn.ModuleList] | None:
    """The largest ``nn.ModuleList`` of at least :data:`MIN_BLOCKS` alike blocks (module
    docstring), as (path, list), or None."""
    best: tuple[str, nn.ModuleList, int] | None = None
    for path, module in model.named_modules():
        if not isinstance(module, nn.ModuleList) or len(module) < MIN_BLOCKS:
            continue
        if not _alike(list(module)):
            continue
        size = sum(p.numel() for p in module.parameters())
        if best is None or size > best[2]:
            best = (path, module, size)
    return (best[0], best[1]) if best else None


def _signature(block: nn.Module) -> list[tuple[str, tuple[int, ...], torch.dtype]]:
    tensors = [*block.named_parameters(), *block.named_buffers()]
    return [(name, tuple(t.shape), t.dtype) for name, t in tensors]


def _settings(block: nn.Module) -> dict[tuple[str, str], Any]:
    """Every plain attribute of every submodule, and each submodule's class."""
    found: dict[tuple[str, str], Any] = {}
    for path, module in block.named_modules():
        found[(path, "class")] = type(module)
        for key, value in vars(module).items():
            if key.startswith("_") or key == "training":
                continue
            if isinstance(value, _PLAIN) or (
                isinstance(value, tuple) and all(isinstance(v, _PLAIN) for v in value)
            ):
                found[(path, key)] = value
    return found


def _alike(blocks: list[nn.Module]) -> bool:
    if len({id(b) for b in blocks}) != len(blocks) or len({type(b) for b in blocks}) != 1:
        return False
    shared = {id(p) for b in blocks for p in b.parameters()}
    if len(shared) != sum(len(list(b.parameters())) for b in blocks):
        return False  # a parameter used by two blocks
    first = _signature(blocks[0])
    if any(_signature(b) != first for b in blocks):
        return False
    settings = [_settings(b) for b in blocks]
    if any(s.keys() != settings[0].keys() for s in settings):
        return False
    index = list(range(len(blocks)))
    for key in settings[0]:
        values = [s[key] for s in settings]
        if any(v != values[0] for v in values) and values != index:
            return False  # a setting that differs, other than the block's own index
    return True


@contextmanager
def _first_blocks(blocks: nn.ModuleList, keep: int) -> Iterator[None]:
    """``blocks`` holding only its first ``keep`` entries for the duration."""
    saved = blocks._modules
    blocks._modules = OrderedDict(list(saved.items())[:keep])
    try:
        yield
    finally:
        blocks._modules = saved


def _clean(path: str) -> str:
    return str(path).replace("L['self'].", "").replace("L__self__.", "")


class _Layout:
    """The traced graph cut into the nodes before the blocks, each block's nodes, and the
    nodes after; None-returning checks of the module docstring."""

    def __init__(self, traced: TracedGraph, prefix: str) -> None:
        self.traced, self.prefix = traced, prefix
        self.placeholders: list[Node] = []
        self.before: list[Node] = []
        self.blocks: list[list[Node]] = [[] for _ in range(KEEP)]
        self.after: list[Node] = []
        self.block_of: dict[Node, int] = {}
        self.position: dict[Node, int] = {}
        self.param_block: dict[Node, tuple[int, str]] = {}  # placeholder -> (block, suffix)

    def split(self) -> bool:
        names = {**self.traced.parameters, **self.traced.buffers}
        last = -1
        for node in self.traced.graph.nodes:
            if node.op == "placeholder":
                self.placeholders.append(node)
                owner = _block_index(names.get(node.name, ""), self.prefix)
                if owner is not None:
                    self.param_block[node] = owner
                continue
            if node.op == "output":
                continue
            block = self._block(node)
            if block is None:
                if last == -1:
                    self.before.append(node)
                else:
                    self.after.append(node)
                continue
            if block < last or self.after or block >= KEEP:
                return False  # an op between blocks, or blocks out of order
            last = block
            self.block_of[node] = block
            self.position[node] = len(self.blocks[block])
            self.blocks[block].append(node)
        return all(self.blocks) and len({len(b) for b in self.blocks}) == 1

    def _block(self, node: Node) -> int | None:
        for path, _ in (node.meta.get("nn_module_stack") or {}).values():
            owner = _block_index(_clean(path) + ".", self.prefix)
            if owner is not None:
                return owner[0]
        return None

    def consistent(self) -> bool:
        """Blocks 1 … KEEP−1 are block 1's subgraph; block 0 has block 1's ops; after the
        blocks only the last block is read."""
        template = self.blocks[1]
        for b in range(KEEP):
            for node, model in zip(self.blocks[b], template, strict=True):
                if node.target != model.target or not _same_value(node, model):
                    return False
                if b >= 1 and not self._same_args(node, model, b):
                    return False
        for node in self.after:
            for arg in node.all_input_nodes:
                if self.block_of.get(arg, KEEP - 1) != KEEP - 1:
                    return False
        return True

    def _same_args(self, node: Node, model: Node, b: int) -> bool:
        """``node`` of block ``b`` reads what ``model`` of block 1 reads, shifted by b − 1."""
        return _same(node.args, model.args, lambda x, y: self._match(x, y, b)) and _same(
            node.kwargs, model.kwargs, lambda x, y: self._match(x, y, b)
        )

    def _match(self, x: Node, y: Node, b: int) -> bool:
        if x in self.param_block or y in self.param_block:
            bx, by = self.param_block.get(x), self.param_block.get(y)
            return bx is not None and by is not None and (bx[0], by[0]) == (b, 1) and bx[1] == by[1]
        ix, iy = self.block_of.get(x), self.block_of.get(y)
        if ix is None or iy is None:
            return x is y  # read before the blocks: the same tensor for every block
        return ix - iy == b - 1 and self.position[x] == self.position[y]


def _block_index(name: str, prefix: str) -> tuple[int, str] | None:
    """(block, rest of the name) when ``name`` is inside block ``prefix + i``."""
    if not name.startswith(prefix):
        return None
    head, _, rest = name[len(prefix) :].partition(".")
    return (int(head), rest) if head.isdigit() else None


def _same_value(a: Node, b: Node) -> bool:
    va, vb = a.meta.get("val"), b.meta.get("val")
    if isinstance(va, torch.Tensor) and isinstance(vb, torch.Tensor):
        return va.shape == vb.shape and va.dtype == vb.dtype
    return type(va) is type(vb)


def _same(a: Any, b: Any, match: Any) -> bool:
    if isinstance(a, Node) or isinstance(b, Node):
        return isinstance(a, Node) and isinstance(b, Node) and match(a, b)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y, match) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k], match) for k in a)
    return type(a) is type(b) and a == b


def trace_repeated(
    model: nn.Module, example_input: Any, tracers: tuple[str, ...]
) -> tuple[TracedGraph, str] | None:
    """The full graph of ``model`` from a trace of the first :data:`KEEP` blocks of its block
    list, and a note saying so; None where the module docstring's conditions do not hold
    (then trace the whole model)."""
    found = block_list(model)
    if found is None:
        return None
    path, blocks = found
    prefix = f"{path}." if path else ""
    start = time.perf_counter()
    try:
        with _first_blocks(blocks, KEEP):
            traced = trace_forward(model, example_input, tracers)
    except (TraceError, IndexError, RuntimeError, ValueError):
        return None
    layout = _Layout(traced, prefix)
    if not layout.split() or not layout.consistent():
        return None
    try:
        full = _Builder(model, layout, len(blocks)).build()
    except _NotRepeatableError:
        return None
    full.seconds = time.perf_counter() - start
    note = (
        f"traced {KEEP} of the {len(blocks)} identical blocks of '{path}' and repeated the "
        "middle one's graph (paramsym.symmetry.graph.repeat)"
    )
    return full, note


class _NotRepeatableError(Exception):
    """The traced graph does not have the layout the repetition needs."""


class _Builder:
    """The full graph: placeholders for every parameter and buffer of ``model``, the nodes
    before the blocks, ``count`` block copies, the nodes after."""

    def __init__(self, model: nn.Module, layout: _Layout, count: int) -> None:
        self.layout, self.count = layout, count
        self.graph = Graph()
        self.env: dict[Node, Node] = {}
        self.parameters = [name for name, _ in model.named_parameters()]
        self.buffers = [name for name, _ in model.named_buffers()]

    def build(self) -> TracedGraph:
        layout, traced = self.layout, self.layout.traced
        by_name = {**traced.parameters, **traced.buffers}
        template = {name: node for node in layout.placeholders if (name := by_name.get(node.name))}
        placeholders: dict[str, str] = {}
        for name in [*self.parameters, *self.buffers]:
            model_name = name
            owner = _block_index(name, layout.prefix)
            if owner is not None:
                model_name = f"{layout.prefix}{self._template(owner[0])}.{owner[1]}"
            source = template[model_name]
            node = self.graph.placeholder(f"p_{len(placeholders)}")
            node.meta = copy.copy(source.meta)
            placeholders[node.name] = name
            if owner is None:
                self.env[source] = node
        self.by_param = {name: node for node, name in self._nodes(placeholders)}
        inputs = []
        for node in layout.placeholders:
            if node.name in traced.user_inputs:
                self.env[node] = self.graph.node_copy(node)
                inputs.append(self.env[node].name)
        for node in layout.before:
            self.env[node] = self.graph.node_copy(node, self._arg(None))
        previous: list[Node] = []
        for j in range(self.count):
            previous = self._block(j, previous)
        for node in [*layout.after, *[n for n in traced.graph.nodes if n.op == "output"]]:
            self.env[node] = self.graph.node_copy(node, self._arg(None, previous))
        parameters = {p: n for p, n in placeholders.items() if n in set(self.parameters)}
        buffers = {p: n for p, n in placeholders.items() if n not in set(self.parameters)}
        return TracedGraph(
            self.graph, parameters, buffers, inputs, 0.0, traced.tracer, list(traced.notes)
        )

    def _nodes(self, placeholders: dict[str, str]) -> Iterator[tuple[Node, str]]:
        for node in self.graph.nodes:
            if node.op == "placeholder" and node.name in placeholders:
                yield node, placeholders[node.name]

    def _template(self, j: int) -> int:
        """The traced block copied as block ``j``: first, middle, last."""
        return 0 if j == 0 else KEEP - 1 if j == self.count - 1 else 1

    def _block(self, j: int, previous: list[Node]) -> list[Node]:
        t = self._template(j)
        layout = self.layout
        local: dict[Node, Node] = {}
        copied = []
        for node in layout.blocks[t]:
            new = self.graph.node_copy(node, self._arg((t, j, local), previous))
            new.meta["nn_module_stack"] = self._renamed(node, t, j)
            local[node] = new
            copied.append(new)
        return copied

    def _renamed(self, node: Node, t: int, j: int) -> dict[str, Any]:
        old, new = f"{self.layout.prefix}{t}", f"{self.layout.prefix}{j}"
        stack = {}
        for key, (path, kind) in (node.meta.get("nn_module_stack") or {}).items():
            clean = _clean(path)
            if clean == old or clean.startswith(old + "."):
                clean = new + clean[len(old) :]
            stack[key] = (clean, kind)
        return stack

    def _arg(
        self, block: tuple[int, int, dict[Node, Node]] | None, previous: list[Node] | None = None
    ) -> Callable[[Node], Node]:
        """How a copied node's arguments map: its own block's nodes, its block's parameters,
        the previous copy's outputs, and everything else as copied before."""
        layout = self.layout
        previous = previous or []

        def mapped(node: Node) -> Node:
            if block is not None and node in block[2]:
                return block[2][node]
            owner = layout.param_block.get(node)
            if owner is not None and block is not None:
                return self.by_param[f"{layout.prefix}{block[1]}.{owner[1]}"]
            if node in layout.block_of:  # the previous block's output, at the same position
                return previous[layout.position[node]]
            if node not in self.env:
                raise _NotRepeatableError(f"{node.name} is read outside its block")
            return self.env[node]

        return mapped
