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
  (:mod:`.heads`, built once the classes are known).

Under grouped-query attention G query heads read one key/value head (repeated along the head
axis, :func:`repeat_heads`, or with ``enable_gqa=True``): their query features are all linked
to that key head, so one map acts on the G query heads alike. Multi-query attention (one
key/value head) has no head split on its keys and values, since viewing D features as one
head of D splits nothing: a key or value tensor with a size-1 axis where the queries have
their heads (:func:`one_head`) is that one head, broadcast over every query head.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from paramsym.symmetry.graph.facts import ALL_FAMILIES, Attention, Facts, Family, Member, Rotary
from paramsym.symmetry.graph.rules import fresh
from paramsym.symmetry.graph.values import ParamValue, TensorValue, reshape_axis
from paramsym.symmetry.graph.walk import OpCall, Walk, rule


def split_or_merge_heads(
    walk: Walk, call: OpCall, x: TensorValue, axis: int, out_shape: tuple[int, ...]
) -> tuple[int, Member, int | None] | None:
    """How a view moves a member between whole and head-split form: ``(output axis, member,
    head axis or None)``, or ``None`` if this view neither splits nor merges it."""
    member, shape = x.axes[axis], x.shape
    if member.repeat != 1:
        return None
    if axis in x.head_axes:  # merge (..., H, D, ...) -> (..., H·D, ...)
        head_axis = x.head_axes[axis]
        if head_axis != axis - 1:
            return _regroup_heads(x, axis, out_shape)
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


def _regroup_heads(
    x: TensorValue, axis: int, out_shape: tuple[int, ...]
) -> tuple[int, Member, int] | None:
    """A view that keeps the features whole and moves the head axis by merging it, heads
    innermost, with the axes before it, or splitting such a merged axis again: (B, H, T, D) ↔
    (B·H, T, D), BLOOM's layout for ``bmm``. Then the head axis is the output axis whose
    extent ends where the old one did, the heads its innermost factor."""
    member, shape = x.axes[axis], x.shape
    head_axis = x.head_axes[axis]
    placed = reshape_axis(shape, out_shape, axis, member)
    if placed is None or placed[1] != member or head_axis > axis:
        return None
    end = math.prod(shape[: head_axis + 1])
    for j in range(placed[0]):
        if math.prod(out_shape[: j + 1]) == end and out_shape[j] % member.heads == 0:
            return placed[0], member, j
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


HEAD_BIAS = "a per-head bias of the attention scores"
"""Block reason of a per-head bias member: it moves with head permutations only."""


def _scores_bias(walk: Walk, call: OpCall, mask: Any, heads: int) -> tuple[Member | None, str]:
    """What a mask (or bias) added to the (…, heads, queries, keys) scores does per head: its
    member on the head axis (a per-head bias read from a parameter), or why the heads get a
    term that no parameter holds (``""`` when the mask is the same for every head)."""
    if isinstance(mask, ParamValue):
        walk.unexplained(mask, call)
        return None, f"{call.where} adds the parameter '{mask.name}' to the scores"
    if not isinstance(mask, TensorValue) or mask.ndim < 3:
        return None, ""
    head_axis = mask.ndim - 3
    bias = mask.axes.get(head_axis)
    for axis, member in mask.axes.items():
        walk.facts.block(member, ALL_FAMILIES, HEAD_BIAS if axis == head_axis else call.where)
    if bias is None and mask.shape[head_axis] > 1 and heads > 1:
        return None, f"{call.where} adds a different term to each head's scores"
    if bias is not None and bias.width != heads:
        walk.facts.block(bias, ALL_FAMILIES, f"{call.where}: bias heads do not line up")
        return None, f"{call.where}: the per-head bias has {bias.width} heads, not {heads}"
    return bias, ""


@rule("scaled_dot_product_attention", "attention", heads=True)
def scaled_dot_product_attention(walk: Walk, call: OpCall) -> Any:
    """``scaled_dot_product_attention(q, k, v, attn_mask)``, and attention written by hand
    (``attention(q, k, v, masks, key_axis=…)`` from :mod:`.patterns`; ``key_axis=-2`` when the
    model hands over the keys transposed)."""
    q, k, v = call.args[0], call.args[1], call.args[2]
    out_shape = tuple(call.shape)
    key_axis = int(call.kwargs.get("key_axis", -1))
    query = _attention_member(q, -1)
    head_axis = query[1] if query is not None else None
    parts = [query, _attention_member(k, key_axis, head_axis), _attention_member(v, -1, head_axis)]
    if any(p is None for p in parts):
        reason = f"{call.where}: queries, keys and values must be feature tensors"
        walk.block_all([q, k, v], reason)
        return TensorValue(out_shape)
    (qm, q_head), (km, k_head), (vm, v_head) = parts  # type: ignore[misc]
    gqa = bool(call.kwargs.get("enable_gqa", False))
    masks = call.args[3] if call.op == "attention" else [call.arg(3, "attn_mask")]
    return attend(walk, call, (qm, km, vm), (q_head, k_head, v_head), masks, out_shape, gqa=gqa)


def _attention_member(
    value: Any, axis: int, query_head_axis: int | None = None
) -> tuple[Member, int | None] | None:
    """The feature member on ``axis`` of ``value`` and its head axis (None: one head).

    A key or value tensor of one head (multi-query attention: (B, 1, T, D) against queries
    (B, H, T, D)) has no head split, since a view to one head splits nothing: its size-1 axis
    at the queries' head axis ``query_head_axis`` is then its head axis, broadcast over the
    query heads (:func:`one_head`)."""
    found = _heads_member(value, axis)
    if found is not None:
        return found
    if not isinstance(value, TensorValue) or value.member(axis) is None:
        return None
    member = value.member(axis)
    assert member is not None
    if member.heads != 1:
        return None
    if query_head_axis is not None and one_head(value, value.axis(axis), query_head_axis):
        return member, query_head_axis
    return member, None


def one_head(value: TensorValue, axis: int, head_axis: int) -> bool:
    """Whether ``value`` holds one attention head's features on ``axis`` with a size-1 axis
    ``head_axis`` where a head-split tensor has its heads: the keys or values of multi-query
    attention, (B, 1, T, D) after ``view(B, T, 1, D)`` (or ``unsqueeze``) and a transpose."""
    member = value.axes.get(axis)
    return (
        member is not None
        and member.heads == 1
        and member.repeat == 1
        and axis not in value.head_axes
        and -value.ndim <= head_axis < value.ndim
        and head_axis % value.ndim != axis
        and value.shape[head_axis] == 1
        and head_axis % value.ndim not in value.axes
    )


def attend(
    walk: Walk,
    call: OpCall,
    members: tuple[Member, Member, Member],
    head_axes: tuple[int | None, int | None, int | None],
    masks: list[Any],
    out_shape: tuple[int, ...],
    *,
    gqa: bool = False,
) -> TensorValue:
    """The facts of one attention op with head-split queries, keys and values (module
    docstring): head i's queries against the keys of its key/value head (contragredient), its
    output features linked to that head's values. ``gqa``: the key/value heads are not
    repeated along the head axis (``enable_gqa=True``); repeated heads carry ``repeat``."""
    qm, km, vm = members
    facts = walk.facts
    heads = qm.heads
    groups = [_group(qm, m, gqa) for m in (km, vm)]
    if qm.repeat != 1 or len(set(head_axes)) != 1 or None in groups or groups[0] != groups[1]:
        walk.facts.block(qm, ALL_FAMILIES, f"{call.where}: heads do not line up")
        walk.facts.block(km, ALL_FAMILIES, f"{call.where}: heads do not line up")
        walk.facts.block(vm, ALL_FAMILIES, f"{call.where}: heads do not line up")
        return TensorValue(out_shape)
    group = int(groups[0] or 1)
    bias, fixed = None, ""
    for mask in masks:
        found, why = _scores_bias(walk, call, mask, heads)
        fixed = fixed or why
        if found is not None and bias is not None:
            fixed = fixed or f"{call.where} adds two per-head biases to the scores"
        bias = bias or found
    # queries against keys: contragredient in every family (q·k unchanged)
    for i in range(heads):
        facts.link(_head(qm, i), _head(km, i // group), ALL_FAMILIES, dual=True)
    out = facts.new_space(vm.head_width * heads, call.module)
    facts.cut(out, vm.head_width)
    out = Member(out.space, 0, out.stop, 1, heads)
    for i in range(heads):
        facts.link(_head(vm, i // group), _head(out, i), ALL_FAMILIES)
    facts.attention.append(Attention(call.module, qm, km, vm, out, group, bias, fixed))
    axis = len(out_shape) - 1
    head = head_axes[0]
    return TensorValue(out_shape, {axis: out}, {axis: head} if head is not None else {})


def _group(query: Member, other: Member, gqa: bool) -> int | None:
    """Query heads per key (or value) head, or None when the heads do not line up. One key
    (or value) head on a size-1 head axis is broadcast over every query head."""
    along_axis = other.heads * other.repeat
    broadcast = along_axis == 1
    if along_axis != query.heads and not broadcast and not (gqa and query.heads % along_axis == 0):
        return None
    return query.heads // other.heads if query.heads % other.heads == 0 else None


@rule("repeat_heads", heads=True)
def repeat_heads(walk: Walk, call: OpCall) -> Any:
    """Key/value heads repeated for grouped-query attention (see
    :mod:`~paramsym.symmetry.graph.patterns`): each head-split member whose head axis is
    repeated serves ``repeat`` consecutive query heads."""
    x, repeat, axis = call.args[0], int(call.kwargs["repeat"]), int(call.kwargs["axis"])
    if isinstance(x, TensorValue) and not x.head_axes:  # one key/value head (multi-query)
        single = [a for a in x.axes if one_head(x, a, axis)]
        if len(single) == 1:
            x = TensorValue(x.shape, dict(x.axes), {single[0]: axis}, x.zero)
    repeated = isinstance(x, TensorValue) and axis in x.head_axes.values()
    if not isinstance(x, TensorValue) or not repeated or axis in x.axes:
        return walk.fallback(call)
    axes = {
        a: replace(m, repeat=m.repeat * repeat) if x.head_axes.get(a) == axis else m
        for a, m in x.axes.items()
    }
    return TensorValue(tuple(call.shape), axes, dict(x.head_axes))


@rule("packed_heads", heads=True)
def packed_heads(walk: Walk, call: OpCall) -> Any:
    """One packed projection (…, C·H·D) read as C chunks of H heads of D features (see
    :mod:`~paramsym.symmetry.graph.patterns`): each chunk a head-split member."""
    x, chunks, heads = call.args[0], int(call.kwargs["chunks"]), int(call.kwargs["heads"])
    head_axis, feature_axis = int(call.kwargs["head_axis"]), int(call.kwargs["feature_axis"])
    member = x.member(-1) if isinstance(x, TensorValue) else None
    if member is None or member.block != 1 or member.heads != 1:
        return walk.fallback(call)
    walk.block_all(TensorValue(x.shape, {a: m for a, m in x.axes.items() if a != x.axis(-1)}),
                   f"{call.where} moves it among attention heads")  # fmt: skip
    width = member.width // chunks
    outputs = []
    for c, shape in enumerate(call.shape):
        part = member.narrow(c * width, (c + 1) * width)
        walk.facts.cut(part, width)
        walk.facts.cut(part, width // heads)
        split = Member(part.space, part.start, part.stop, 1, heads)
        outputs.append(TensorValue(tuple(shape), {feature_axis: split}, {feature_axis: head_axis}))
    return outputs


@rule("head_chunk", heads=True)
def head_chunk(walk: Walk, call: OpCall) -> Any:
    """Chunk ``c`` of the C chunks of a packed projection (…, H·C·D) whose heads are outermost
    (see :mod:`~paramsym.symmetry.graph.patterns`): the features ``[c·D, (c + 1)·D)`` of each
    head's run of C·D, strided in the projection's space (:func:`head_slice`)."""
    x, chunk, heads = call.args[0], int(call.kwargs["chunk"]), int(call.kwargs["heads"])
    shape = tuple(call.shape)
    member = x.member(-1) if isinstance(x, TensorValue) else None
    if member is None or member.block != 1 or member.heads != 1:
        return walk.fallback(call)
    d = shape[-1]
    part = head_slice(walk, call, replace(member, heads=heads), chunk * d, (chunk + 1) * d)
    axes = {a: m for a, m in x.axes.items() if a != x.axis(-1)}
    axes[len(shape) - 1] = part
    return TensorValue(shape, axes, {len(shape) - 1: len(shape) - 2})


def head_slice(walk: Walk, call: OpCall, member: Member, start: int, stop: int) -> Member:
    """Features ``[start, stop)`` of every head of a head-split ``member``: strided in its
    space, so they get a new space split into the same heads, each head linked in every
    family to its features (a re-indexing, as a slice is)."""
    facts, width, run = walk.facts, stop - start, member.head_width
    part = facts.new_space(member.heads * width, call.module)
    facts.cut(part, width)
    for h in range(member.heads):
        source = member.narrow(h * run + start, h * run + stop)
        facts.link(source, part.narrow(h * width, (h + 1) * width), ALL_FAMILIES)
    return Member(part.space, 0, part.stop, 1, member.heads)


@rule("rotary", heads=True)
def rotary(walk: Walk, call: OpCall) -> Any:
    """A rotary embedding (see :mod:`~paramsym.symmetry.rotary`): in each head the first
    ``rotated`` coordinates pass only the scaled rotations of their ``pairs`` (family
    ``ROTARY``), the others pass everything."""
    x, pairs, rotated = call.args[0], call.kwargs["pairs"], int(call.kwargs["rotated"])
    if not isinstance(x, TensorValue) or x.member(-1) is None:
        return walk.fallback(call)
    member = x.member(-1)
    assert member is not None
    d = member.head_width
    if member.repeat != 1 or member.block != 1 or rotated > d:
        walk.block_all(x, f"{call.where}: rotary embedding on features it cannot split")
        return TensorValue(tuple(call.shape))
    facts = walk.facts
    out = fresh(walk, member, call.module)
    rotation = frozenset({Family.ROTARY})
    for i in range(member.heads):
        head_in, head_out = _head(member, i), _head(out, i)
        facts.link(head_in.narrow(0, rotated), head_out.narrow(0, rotated), rotation)
        facts.block(head_in.narrow(0, rotated), ALL_FAMILIES - rotation, f"{call.where} rotates")
        if rotated < d:
            facts.link(head_in.narrow(rotated, d), head_out.narrow(rotated, d), ALL_FAMILIES)
    facts.rotary.append(Rotary(out, tuple(pairs), rotated))
    facts.rotary.append(Rotary(member, tuple(pairs), rotated))
    axis = x.axis(-1)
    return TensorValue(x.shape, {**x.axes, axis: out}, dict(x.head_axes))


def _head(member: Member, i: int) -> Member:
    d = member.head_width
    return Member(member.space, member.start + i * d, member.start + (i + 1) * d)


def attention_role(facts: Facts, atoms: list[tuple[int, int, int]]) -> tuple[str, str, int] | None:
    """``("QK" | "VO", module, head)`` when a class holds one head's query or value features
    of an attention op (under grouped-query attention: one key/value head's, named
    ``kv_head``), else None."""
    for record in facts.attention:
        pairs = (("QK", record.key), ("VO", record.value))
        if record.group == 1:
            pairs = (("QK", record.query), ("VO", record.value))
        for kind, member in pairs:
            d = member.head_width
            for space, start, stop in atoms:
                if space == member.space and member.start <= start and stop <= member.stop:
                    head = (start - member.start) // d
                    if (stop - 1 - member.start) // d == head:
                        label = "kv_head" if record.group > 1 else "head"
                        where = f"{record.module}." if record.module else ""
                        return kind, f"{where}{label}", head
    return None


def rotary_pairs(
    facts: Facts, atoms: list[tuple[int, int, int]]
) -> tuple[tuple[int, int], ...] | None:
    """The rotated pairs of a class that holds the rotated coordinates of one head (as one
    atom), else None."""
    for record in facts.rotary:
        member, d = record.member, record.member.head_width
        for space, start, stop in atoms:
            inside = member.start <= start < member.stop
            if space == member.space and inside and (start - member.start) % d == 0:
                return record.pairs if stop - start == record.rotated else None
    return None
