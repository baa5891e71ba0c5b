"""The rule of ``grouped_heads``: a packed projection read as K groups of G query heads, one key
and one value head each (Falcon's new decoder architecture; the subgraph is found by
:mod:`~paramsym.symmetry.graph.patterns`).

The projection's features are laid out group by group, ``(k, j, ·)`` at ``(k·(G + 2) + j)·D``:
entries ``j < G`` are query heads, ``j = G`` the key head and ``j = G + 1`` the value head of
group k. Each chunk is a re-indexing of whole heads of the packed space: the queries get a new
space of K·G heads, the keys and values one of K heads, each head linked in every family to its
run of the packed space (as a strided slice is, :func:`~.attention_rules.head_slice`). One
key/value head (K = 1, multi-query) is a plain run of D features, which attention broadcasts
over the query heads by its size-1 head axis (:func:`~.attention_rules.one_head`).
"""

from __future__ import annotations

from typing import Any

from paramsym.symmetry.graph.facts import ALL_FAMILIES, Member
from paramsym.symmetry.graph.values import TensorValue
from paramsym.symmetry.graph.walk import OpCall, Walk, rule


@rule("grouped_heads", heads=True)
def grouped_heads(walk: Walk, call: OpCall) -> Any:
    x, kv, group = call.args[0], int(call.kwargs["kv"]), int(call.kwargs["group"])
    chunk = str(call.kwargs["chunk"])
    shape = tuple(call.shape)
    member = x.member(-1) if isinstance(x, TensorValue) else None
    if member is None or member.block != 1 or member.heads != 1 or x.head_axes:
        return walk.fallback(call)
    d, slots = shape[-1], group + 2
    if member.width != kv * slots * d:
        return walk.fallback(call)
    facts = walk.facts
    facts.cut(member, d)
    if chunk == "query":
        picks = [k * slots + j for k in range(kv) for j in range(group)]
    else:
        picks = [k * slots + group + (chunk == "value") for k in range(kv)]
    last = len(shape) - 1
    axes = {a: m for a, m in x.axes.items() if a != x.axis(-1)}
    if len(picks) == 1:
        axes[last] = member.narrow(picks[0] * d, (picks[0] + 1) * d)
        return TensorValue(shape, axes)
    part = facts.new_space(len(picks) * d, call.module)
    facts.cut(part, d)
    for i, p in enumerate(picks):
        facts.link(member.narrow(p * d, (p + 1) * d), part.narrow(i * d, (i + 1) * d), ALL_FAMILIES)
    axes[last] = Member(part.space, 0, part.stop, 1, len(picks))
    return TensorValue(shape, axes, {last: last - 1})
