"""Attention on the graph: heads split by views, and ``scaled_dot_product_attention``.

A view (B, T, H·D) → (B, T, H, D) splits a feature member into H heads of D features (cut
every D, so no group mixes heads); the reverse view merges them. In
``scaled_dot_product_attention(q, k, v)`` head i of the output is ``softmax(q_i k_iᵀ) v_i``
(dissertation Ex. 1.2.11-1.2.12, row-major convention):

* the scores depend on the queries and keys only through ``q_i · k_i``, so head i's query
  features are linked *contragrediently* to its key features: g on the queries, g⁻ᵀ on the
  keys (per-head GL(d_k); c and 1/c for rescaling; P and P for permutations);
* the output is linear in the values, so head i's output features are linked to its value
  features in every family (they then meet the output projection's columns: per-head
  GL(d_v));
* whole heads can be permuted together in q, k, v and the output
  (:func:`head_permutations`, built once the classes are known).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from paramsym.symmetry.attention import HeadPermutation
from paramsym.symmetry.base import Slot, Symmetry
from paramsym.symmetry.graph.facts import ALL_FAMILIES, Attention, Facts, Member
from paramsym.symmetry.graph.solve import Class
from paramsym.symmetry.graph.values import TensorValue
from paramsym.symmetry.graph.walk import OpCall, Walk, rule


def split_or_merge_heads(
    walk: Walk, call: OpCall, x: TensorValue, axis: int, out_shape: tuple[int, ...]
) -> tuple[int, Member, int | None] | None:
    """How a view moves a member between whole and head-split form: ``(output axis, member,
    head axis or None)``, or ``None`` if this view neither splits nor merges it."""
    member, shape = x.axes[axis], x.shape
    if axis in x.head_axes:  # merge (..., H, D, ...) -> (..., H·D, ...)
        head_axis = x.head_axes[axis]
        if head_axis != axis - 1:
            return None
        before, size = math.prod(shape[:head_axis]), shape[head_axis] * shape[axis]
        for j in range(len(out_shape)):
            if math.prod(out_shape[:j]) == before and out_shape[j] == size:
                merged = Member(member.space, member.start, member.stop, member.block)
                return j, merged, None
        return None
    if member.block != 1 or member.heads != 1:
        return None
    before, size, after = math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1 :])
    for j in range(len(out_shape) - 1):
        heads, width = out_shape[j], out_shape[j + 1]
        if (
            math.prod(out_shape[:j]) == before
            and heads * width == size
            and heads > 1
            and width > 1
            and math.prod(out_shape[j + 2 :]) == after
        ):
            walk.facts.cut(member, width)
            split = Member(member.space, member.start, member.stop, 1, heads)
            return j + 1, split, j
    return None


def _heads_member(value: Any, axis: int) -> tuple[Member, int] | None:
    """The head-split member on ``axis`` of ``value`` and its head axis, if any."""
    if not isinstance(value, TensorValue):
        return None
    axis = value.axis(axis)
    member = value.axes.get(axis)
    if member is None or axis not in value.head_axes:
        return None
    return member, value.head_axes[axis]


@rule("scaled_dot_product_attention", heads=True)
def scaled_dot_product_attention(walk: Walk, call: OpCall) -> Any:
    q, k, v = call.args[0], call.args[1], call.args[2]
    mask = call.arg(3, "attn_mask")
    out_shape = tuple(call.shape)
    facts = walk.facts
    parts = [_heads_member(t, -1) for t in (q, k, v)]
    if (
        any(p is None for p in parts)
        or call.kwargs.get("enable_gqa", False)
        or not all(isinstance(t, TensorValue) for t in (q, k, v))
    ):
        reason = f"{call.where}: queries, keys and values must be split into heads"
        walk.block_all([q, k, v], reason)
        return TensorValue(out_shape)
    (qm, q_head), (km, k_head), (vm, v_head) = parts  # type: ignore[misc]
    if not (q_head == k_head == v_head and qm.heads == km.heads == vm.heads):
        walk.block_all([q, k, v], f"{call.where}: heads do not line up")
        return TensorValue(out_shape)
    if isinstance(mask, TensorValue) and mask.axes:
        walk.block_all(mask, f"{call.where}: the mask holds features")
    # queries against keys: contragredient in every family (q·k unchanged)
    for i in range(qm.heads):
        facts.link(_head(qm, i), _head(km, i), ALL_FAMILIES, dual=True)
    out = facts.new_space(vm.width, call.module)
    facts.cut(out, vm.head_width)
    out = Member(out.space, 0, out.stop, 1, vm.heads)
    facts.link(vm, out, ALL_FAMILIES)
    facts.attention.append(Attention(call.module, qm, km, vm, out))
    head_axis = q_head
    return TensorValue(out_shape, {len(out_shape) - 1: out}, {len(out_shape) - 1: head_axis})


def _head(member: Member, i: int) -> Member:
    d = member.head_width
    return Member(member.space, member.start + i * d, member.start + (i + 1) * d)


def attention_role(facts: Facts, atoms: list[tuple[int, int, int]]) -> tuple[str, str, int] | None:
    """``("QK" | "VO", module, head)`` when a class holds one head's query or value features
    of an attention op, else None."""
    for record in facts.attention:
        for kind, member in (("QK", record.query), ("VO", record.value)):
            d = member.head_width
            for space, start, stop in atoms:
                if space == member.space and member.start <= start and stop <= member.stop:
                    head = (start - member.start) // d
                    if (stop - 1 - member.start) // d == head:
                        return kind, record.module, head
    return None


def head_permutations(
    facts: Facts,
    class_of: dict[tuple[int, int, int], Class],
    usable: set[int],
    slots: Callable[[Class], list[Slot] | None],
) -> list[tuple[tuple[int, int], Symmetry]]:
    """Per attention op, the permutations of whole heads: head i's query class and value class
    (each valid, holding exactly that head) are moved to head p(i) together. The slots of
    head i must be those of head 0 shifted by i heads, so one block slot per parameter
    covers them all. Returns (sort key, symmetry) pairs."""
    found: list[tuple[tuple[int, int], Symmetry]] = []
    for record in facts.attention:
        heads = record.query.heads
        if heads < 2:
            continue
        per_head: list[list[Slot]] = []
        for i in range(heads):
            head_slots: list[Slot] = []
            for member in (record.query, record.value):
                d = member.head_width
                atom = (member.space, member.start + i * d, member.start + (i + 1) * d)
                cls = class_of.get(atom)
                found_slots = slots(cls) if cls is not None and id(cls) in usable else None
                if cls is None or found_slots is None or cls.width != d:
                    break
                head_slots += found_slots
            else:
                per_head.append(sorted(head_slots, key=lambda t: (t.name, t.axis, t.offset or 0)))
                continue
            break
        if len(per_head) != heads or not _congruent(per_head):
            continue
        first = per_head[0]
        blocks = [  # one block per head: head 0's entries through the start of head 1
            Slot(t.name, t.axis, 1.0, t.offset or 0, (nxt.offset or 0) - (t.offset or 0))
            for t, nxt in zip(first, per_head[1], strict=True)
        ]
        key = min(a for a in class_of if a[0] == record.query.space)[:2]
        found.append((key, HeadPermutation(heads, blocks, (), site=record.module)))
    return found


def _congruent(per_head: list[list[Slot]]) -> bool:
    """Whether head i's slots are head 0's shifted by i equal steps, per parameter axis."""
    first = per_head[0]
    if len(per_head) < 2 or any(len(h) != len(first) for h in per_head):
        return False
    for j, slot in enumerate(first):
        step = (per_head[1][j].offset or 0) - (slot.offset or 0)
        if step <= 0:
            return False
        for i, head in enumerate(per_head):
            other = head[j]
            if (other.name, other.axis, other.block) != (slot.name, slot.axis, slot.block):
                return False
            if (other.offset or 0) != (slot.offset or 0) + i * step:
                return False
    return True
