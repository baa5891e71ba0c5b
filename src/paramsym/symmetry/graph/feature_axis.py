"""Following a feature axis through ops that only rearrange, select or copy the other axes.

The absorbed translations (:mod:`~paramsym.symmetry.graph.absorptions`) hold for every vector
along a tensor's feature axis that a LayerNorm wrote, wherever that vector ends up: a pooler
reading the first token (``select``), Swin's windows (views, a no-op ``pad``, transposes of the
token axes), a ViT's class token (``slice``). :func:`keeps_last_axis` says whether an op's
output is made of its input's vectors along the last axis, whole and unchanged (dropped,
repeated or moved to other places, never mixed or padded with new ones), so that what holds
for each such vector of the input holds for each of the output.

>>> import torch
>>> from torch.fx.experimental.proxy_tensor import make_fx
>>> graph = make_fx(lambda x: x[:, 0].transpose(0, 1))(torch.zeros(2, 3, 4, 5)).graph
>>> [keeps_last_axis(n) for n in graph.nodes if n.op == "call_function"]
[True, True]
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from torch.fx import Node

from paramsym.symmetry.graph.walk import op_name

PASS = frozenset({"dropout", "clone", "contiguous", "to", "_to_copy", "alias", "detach",
                  "lift_fresh_copy", "type_as"})  # fmt: skip
"""Ops that copy their first operand's values (dropout in evaluation mode)."""
VIEWS = frozenset({"view", "reshape", "_unsafe_view"})


def shape_of(node: Any) -> tuple[int, ...] | None:
    """The traced shape of ``node``'s value, or ``None`` (not a tensor node)."""
    value = node.meta.get("val") if isinstance(node, Node) else None
    shape = getattr(value, "shape", None)
    return tuple(int(s) for s in shape) if shape is not None else None


def _axis(value: Any, ndim: int) -> int | None:
    return int(value) % ndim if isinstance(value, int) and ndim else None


def keeps_last_axis(node: Node) -> bool:
    """Whether ``node``'s output, along its last axis, is made of whole vectors of its first
    operand along its last axis (module docstring)."""
    name = op_name(node)
    args: list[Any] = list(node.args)
    source = args[0] if args else None
    before, after = shape_of(source), shape_of(node)
    if before is None or after is None or not before or not after or before[-1] != after[-1]:
        return False
    if name in PASS or name in VIEWS or name == "expand":
        return True
    last = len(before) - 1
    if name in ("transpose", "swapaxes"):
        axes = {_axis(a, len(before)) for a in args[1:3]}
        return last not in axes and None not in axes
    if name == "permute":
        order: Any = args[1] if len(args) > 1 else []
        return bool(order) and _axis(order[-1], len(before)) == last
    if name in ("select", "slice", "index_select", "roll"):
        dims = args[2] if name == "roll" and len(args) > 2 else (args[1] if len(args) > 1 else 0)
        dims = dims if isinstance(dims, (list, tuple)) else [dims]
        return bool(dims) and all(_axis(d, len(before)) not in (last, None) for d in dims)
    if name in ("pad", "constant_pad_nd"):
        pads = args[1] if len(args) > 1 else ()
        return not any(pads)  # padding would add vectors no LayerNorm wrote
    if name == "unsqueeze":
        return _axis(args[1], len(after)) != len(after) - 1
    if name == "squeeze":
        dims = args[1] if len(args) > 1 else None
        if dims is None:
            return before[-1] != 1
        dims = dims if isinstance(dims, (list, tuple)) else [dims]
        return all(_axis(d, len(before)) != last for d in dims)
    return False


def readers_along_last_axis(node: Node) -> Iterator[tuple[Node, Node]]:
    """(user, the node it reads) for every op reading ``node``'s vectors along the last axis,
    through the ops of :func:`keeps_last_axis`; an op that does anything else is yielded too
    (with the node it reads) so callers can refuse it."""
    for user in node.users:
        if user.args and user.args[0] is node and keeps_last_axis(user):
            yield from readers_along_last_axis(user)
        else:
            yield user, node
