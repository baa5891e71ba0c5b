"""Parameters the function reads only through sums: a ViT's class token, position table and patch
bias, and the per-head bias tables added to attention scores.

Two families of fixed translations
(:class:`~paramsym.symmetry.absorption.ParameterTranslation`), found on the traced graph:

* **parameter sums** (``parameter_sum``): a tensor built only by adding, concatenating along
  other axes, broadcasting and rearranging terms that are parameters added as they are (a
  class token, a position table), biases of linear maps and convolutions, embedding lookups and
  fixed inputs. Each term's *blocks* (a parameter's rows, a bias, a whole table) each reach a
  set of the sum's positions; moving the blocks by vectors whose total at every position is
  zero changes nothing. Where some block reaches one position alone (a row of a position table)
  it takes back what any other block brings to that position: a ViT gets
  ``(cls + c, pos[0] − c)`` and ``(b_patch + c, pos[1:] − c)``. Blocks that reach the same
  positions and meet no such absorber are traded against each other. Found only for sums with a
  parameter added as it is (sums of lookups alone are
  :func:`~paramsym.symmetry.graph.absorptions.embedding_translations`'); which block reaches
  which position is computed by running the sum's ops on indicator tensors.
* **score biases** (``score_bias``): a table of per-head biases (rows × heads) looked up
  (``embedding``, ``index``) and added to attention scores, as ``scaled_dot_product_attention``'s
  mask or before a softmax, through layout ops and adds only (T5's relative positions, Swin's
  relative position table): a constant per head, ``T[:, h] + c_h``, adds ``c_h`` to every score
  of head h, which the softmax over keys ignores. Rows no position pair uses are flat too, but
  they are not a symmetry: the audit reports them as unreached.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.fx import Node

from paramsym.symmetry.absorption import ParameterTranslation, Part
from paramsym.symmetry.base import Symmetry
from paramsym.symmetry.graph.absorptions import _linear_parts, _Params
from paramsym.symmetry.graph.feature_axis import PASS, VIEWS, keeps_last_axis, shape_of
from paramsym.symmetry.graph.trace import TracedGraph
from paramsym.symmetry.graph.walk import op_name

_CONVOLUTIONS = frozenset({"conv1d", "conv2d", "conv3d"})
_LAYOUT = frozenset({*PASS, *VIEWS, "expand", "flatten", "transpose", "permute", "unsqueeze",
                     "squeeze", "swapaxes"})  # fmt: skip
"""Ops inside a sum that move or copy values without combining them."""


@dataclass
class _Term:
    """A term of a sum: the node, its blocks (each a list of parts moved by +c), and the
    indicator tensor of each block (the node's shape, feature values on the block)."""

    node: Node
    blocks: list[tuple[Part, ...]]
    markers: list[torch.Tensor]


# -- parameter sums ---------------------------------------------------------------------------


def parameter_sum_translations(traced: TracedGraph, unexplained: dict[str, str]) -> list[Symmetry]:
    """The ``parameter_sum`` translations of the traced graph (module docstring)."""
    params = _Params(traced, unexplained)
    tops: dict[Node, None] = {}
    for node in traced.graph.nodes:
        if is_sum_add(node):
            top = node
            while len(top.users) == 1 and _interior(next(iter(top.users))):
                top = next(iter(top.users))
            tops.setdefault(top)
    found: list[Symmetry] = []
    for top in tops:
        found += _sum_translations(top, params)
    return found


def is_sum_add(node: Any) -> bool:
    """Whether ``node`` adds its two operands: ``add`` (α = 1), or ``add_`` onto a value used
    nowhere else (Falcon's ``mlp_output += attention_output``)."""
    if not isinstance(node, Node) or len(node.args) != 2 or node.kwargs.get("alpha", 1) != 1:
        return False
    if op_name(node) == "add_":
        first = node.args[0]
        return isinstance(first, Node) and len(first.users) == 1
    return op_name(node) == "add"


def _interior(node: Node) -> bool:
    if is_sum_add(node) or op_name(node) == "cat":
        return True
    return op_name(node) in _LAYOUT


def _sum_translations(top: Node, params: _Params) -> list[Symmetry]:
    shape = shape_of(top)
    if not shape or op_name(top) == "cat":
        return []
    width = shape[-1]
    interior: list[Node] = []
    terms: list[_Term] = []
    fixed: set[Node] = set()
    if not _collect(top, top, params, width, interior, terms, fixed):
        return []
    if not any(t.node.op == "placeholder" for t in terms):
        return []  # lookups and biases alone: embedding_translations' or nothing
    order = {n: i for i, n in enumerate(top.graph.nodes)}
    interior.sort(key=order.__getitem__)
    features = torch.arange(1, width + 1, dtype=torch.float64)
    reach: list[torch.Tensor] = []  # per block: which positions of the sum it reaches
    blocks: list[tuple[Part, ...]] = []
    for term in terms:
        for parts, marker in zip(term.blocks, term.markers, strict=True):
            out = _run(interior, {term.node: marker}, terms, fixed)
            if out is None or tuple(out.shape) != shape:
                return []
            count = out[..., :1] / features[0]
            if not torch.equal(out, count * features) or not torch.equal(count, count.round()):
                return []  # features mixed or moved off the last axis
            reach.append(count.reshape(-1))
            blocks.append(parts)
    return _solve(torch.stack(reach, dim=1), blocks)


def _collect(
    node: Node,
    top: Node,
    params: _Params,
    width: int,
    interior: list[Node],
    terms: list[_Term],
    fixed: set[Node],
) -> bool:
    """Walk the sum below ``node``: interior ops, terms and fixed inputs; ``False`` when an
    interior op's value is read outside the sum."""
    if node is not top and _interior(node) and len(node.users) != 1:
        return False
    if _interior(node):
        interior.append(node)
        name = op_name(node)
        operands = node.args[0] if name == "cat" else node.args[: 2 if is_sum_add(node) else 1]
        for operand in operands:  # type: ignore[union-attr]
            if (
                isinstance(operand, Node)
                and operand not in interior
                and not _collect(operand, top, params, width, interior, terms, fixed)
            ):
                return False
        return True
    term = _term(node, params, width)
    if term is None:
        fixed.add(node)
    else:
        terms.append(term)
    return True


def _term(node: Node, params: _Params, width: int) -> _Term | None:
    """``node`` as a term of a sum, with its blocks, or ``None`` (a fixed input)."""
    shape = shape_of(node)
    if shape is None or len(node.users) != 1:
        return None
    features = torch.arange(1, width + 1, dtype=torch.float64)
    if node.op == "placeholder":
        name = params.movable(node)
        if name is None or shape[-1] != width:
            return None
        rows = [a for a, s in enumerate(shape[:-1]) if s > 1]
        last = len(shape) - 1
        if len(rows) > 1:  # one block: the whole parameter
            return _Term(node, [(Part(name, last, 0, width),)], [torch.ones(shape) * features])
        if not rows:
            return _Term(node, [(Part(name, last, 0, width),)], [torch.ones(shape) * features])
        axis = rows[0]
        blocks: list[tuple[Part, ...]] = []
        markers: list[torch.Tensor] = []
        for row in range(shape[axis]):
            marker = torch.zeros(shape, dtype=torch.float64)
            marker.narrow(axis, row, 1).copy_(features.expand_as(marker.narrow(axis, row, 1)))
            blocks.append((Part(name, last, 0, width, within=(axis, row, row + 1)),))
            markers.append(marker)
        return _Term(node, blocks, markers)
    name = op_name(node)
    if name == "embedding":
        table = params.movable(node.args[0])
        table_shape = params.shape(table) if table else None
        if table is None or table_shape is None or table_shape != (table_shape[0], width):
            return None
        marker = torch.ones(shape, dtype=torch.float64) * features
        return _Term(node, [(Part(table, 1, 0, width),)], [marker])
    axis = len(shape) - 1
    bias: Any = None
    if name in _CONVOLUTIONS:
        bias, axis = (node.args[2] if len(node.args) > 2 else None), 1
    elif _linear_parts(node) is not None:
        bias = _linear_parts(node)[2]  # type: ignore[index]
    bias_name = params.movable(bias) if bias is not None else None
    if bias_name is None or params.shape(bias_name) != (width,) or shape[axis] != width:
        return None
    view = [1] * len(shape)
    view[axis] = width
    marker = torch.ones(shape, dtype=torch.float64) * features.reshape(view)
    return _Term(node, [(Part(bias_name, 0, 0, width),)], [marker])


def _run(
    interior: list[Node], values: dict[Node, torch.Tensor], terms: list[_Term], fixed: set[Node]
) -> torch.Tensor | None:
    """The sum's value with the given terms' values and every other input zero."""
    env: dict[Node, Any] = dict(values)
    for term in terms:
        if term.node not in env:
            env[term.node] = torch.zeros(shape_of(term.node) or (), dtype=torch.float64)
    for node in fixed:
        env[node] = torch.zeros(shape_of(node) or (), dtype=torch.float64)

    def value(a: Any) -> Any:
        if isinstance(a, Node):
            return env[a]
        if isinstance(a, (list, tuple)):
            return type(a)(value(b) for b in a)
        return a

    out = None
    for node in interior:
        # an in-place add on the indicator tensors would change a term's marker: added afresh
        target = torch.add if op_name(node) == "add_" else node.target
        try:
            out = target(*value(node.args), **{k: value(v) for k, v in node.kwargs.items()})  # type: ignore[operator]
        except (RuntimeError, TypeError, KeyError):
            return None
        if isinstance(out, torch.Tensor) and out.is_floating_point() and out.dtype != torch.float64:
            out = out.double()
        env[node] = out
    return out if isinstance(out, torch.Tensor) else None


def _solve(reach: torch.Tensor, blocks: Sequence[tuple[Part, ...]]) -> list[Symmetry]:
    """Translations of the blocks (columns of ``reach``: positions × blocks) that add up to zero
    at every position (module docstring)."""
    if reach.max() > 1:
        return []  # a block reaching a position twice: not handled
    reach = torch.unique(reach, dim=0)  # positions every block reaches alike are one
    count = reach.shape[1]
    covers = [frozenset(int(p) for p in reach[:, b].nonzero().flatten()) for b in range(count)]
    absorber: dict[int, int] = {}  # position -> the block that reaches it alone
    for b in sorted(range(count), key=lambda b: -_rows(blocks[b])):
        if len(covers[b]) == 1:
            absorber.setdefault(next(iter(covers[b])), b)
    found: list[Symmetry] = []
    used = set(absorber.values())
    pending: dict[frozenset[int], list[int]] = {}
    for b in range(count):
        if b in used or not covers[b]:
            continue
        if all(p in absorber for p in covers[b]):
            takers = sorted({absorber[p] for p in covers[b]})
            parts = [*_signed(blocks[b], 1.0)]
            parts += _merged([blocks[t] for t in takers], -1.0)
            found.append(_translation(parts))
        elif not any(p in absorber for p in covers[b]):
            pending.setdefault(covers[b], []).append(b)
    for same in pending.values():
        for other in same[1:]:
            found.append(_translation([*_signed(blocks[same[0]], 1.0),
                                       *_signed(blocks[other], -1.0)]))  # fmt: skip
    return found


def _rows(parts: tuple[Part, ...]) -> int:
    """A block's rank among absorbers: rows of a table first (a position table's row)."""
    return 1 if any(p.within is not None for p in parts) else 0


def _signed(parts: tuple[Part, ...], sign: float) -> list[Part]:
    return [Part(p.name, p.axis, p.offset, p.length, sign * p.sign, p.within) for p in parts]


def _merged(blocks: list[tuple[Part, ...]], sign: float) -> list[Part]:
    """The parts of ``blocks`` with runs of consecutive rows of one parameter joined."""
    out: list[Part] = []
    for block in blocks:
        for part in _signed(block, sign):
            last = out[-1] if out else None
            if (
                last is not None
                and part.within is not None
                and last.within is not None
                and (last.name, last.within[0], last.sign) == (part.name, part.within[0], part.sign)
                and last.within[2] == part.within[1]
            ):
                axis, start, _ = last.within
                out[-1] = Part(last.name, last.axis, last.offset, last.length, last.sign,
                               (axis, start, part.within[2]))  # fmt: skip
            else:
                out.append(part)
    return out


def _translation(parts: list[Part]) -> ParameterTranslation:
    names = list(dict.fromkeys(p.name.rpartition(".")[0] or p.name for p in parts))
    site = names[0] if len(names) == 1 else f"{names[0]},{names[-1]}"
    return ParameterTranslation(parts, family="parameter_sum", site=site)


# -- score biases ------------------------------------------------------------------------------


def score_bias_translations(traced: TracedGraph, unexplained: dict[str, str]) -> list[Symmetry]:
    """The ``score_bias`` translations of the traced graph (module docstring)."""
    params = _Params(traced, unexplained)
    found: list[Symmetry] = []
    for node in traced.graph.nodes:
        name = op_name(node)
        if name not in ("embedding", "index") or not node.args:
            continue
        if name == "index" and (
            not isinstance(node.args[1], (list, tuple)) or len(node.args[1]) != 1
        ):
            continue  # only the rows indexed
        table = params.movable(node.args[0])
        shape = params.shape(table) if table else None
        out = shape_of(node)
        if table is None or shape is None or len(shape) != 2 or not out:
            continue
        if _scores_only(node, len(out) - 1):
            site = table.rpartition(".")[0] or table
            part = Part(table, 1, 0, shape[1])
            found.append(ParameterTranslation([part], family="score_bias", site=site))
    return found


def _scores_only(node: Node, axis: int) -> bool:
    """Whether every use of ``node`` (the head axis at ``axis``, the only axis the translation
    varies along) ends in attention scores along an axis other than ``axis``."""
    if not node.users:
        return False
    for user in node.users:
        name = op_name(user)
        out = shape_of(user)
        if name in ("scaled_dot_product_attention", "_scaled_dot_product_flash_attention_for_cpu"):
            mask = user.args[3] if len(user.args) > 3 else user.kwargs.get("attn_mask")
            if mask is not node or user.args[:3].count(node):
                return False
            if axis + (4 - len(shape_of(node) or ())) == 3:
                return False  # the key axis: the softmax would see it
            continue
        if name in ("softmax", "_softmax"):
            dim = int(user.args[1]) % len(out or (0,))  # type: ignore[arg-type]
            if dim == axis:
                return False
            continue
        moved = _follow(user, node, axis)
        if moved is None or not _scores_only(user, moved):
            return False
    return True


def _follow(user: Node, node: Node, axis: int) -> int | None:
    """Where ``user`` puts ``node``'s axis ``axis``, or ``None`` when it mixes it or is not a
    layout op or an add."""
    name = op_name(user)
    args: list[Any] = list(user.args)
    before, after = shape_of(node), shape_of(user)
    if before is None or after is None:
        return None
    if name == "add" and user.kwargs.get("alpha", 1) != 1:
        return None
    if name != "add" and args[0] is not node:
        return None
    if name in ("mul", "div") and isinstance(args[1], Node):
        return None  # scaled by a tensor: no longer one constant per head
    if name in ("add", "mul", "div", "expand") or name in PASS:
        moved = axis + len(after) - len(before)
        return moved if after[moved] == before[axis] else None
    if name in ("permute",):
        order = [int(a) % len(before) for a in args[1]]
        return order.index(axis)
    if name in ("transpose", "swapaxes"):
        a, b = (int(d) % len(before) for d in args[1:3])
        return b if axis == a else a if axis == b else axis
    if name == "unsqueeze":
        dim = int(args[1]) % len(after)
        return axis + 1 if dim <= axis else axis
    if name in VIEWS or name == "flatten":
        # the axis survives a view where the sizes before it multiply to the same number
        prefix = math.prod(before[:axis])
        for moved in range(len(after)):
            if math.prod(after[:moved]) == prefix and after[moved] == before[axis]:
                return moved
        return None
    if keeps_last_axis(user) and axis == len(before) - 1:
        return len(after) - 1
    return None
