"""Subgraphs the walk reads as one op: RMSNorm, rotary embeddings, repeated key/value heads.

Modern decoders write three of their parts by hand out of elementwise ops, and op by op they
look like nothing a group passes: RMSNorm (``x * rsqrt(mean(x²) + eps)``, then ``γ ⊙``), the
rotary position embedding (``q * cos + rotate_half(q) * sin``) and the repetition of key/value
heads for grouped-query attention (``k[:, :, None].expand(...).reshape(...)``). Before the walk,
:func:`fuse` finds each such subgraph in the traced graph and replaces it by one synthetic call
with its own rule:

* ``rms_norm(x, [d], γ, eps)``: the same rule as torch's fused ``rms_norm`` op (Gemma's
  ``(1 + γ) ⊙`` with ``weight_offset=1``);
* ``rotary(x, pairs=…, rotated=r)``: which coordinates of each head the rotation pairs up,
  read off the slices, the negation and the concatenation of ``rotate_half`` (j with j + r/2,
  Hugging Face's layout) or of the interleaved form (2j with 2j + 1, the original RoPE code),
  and the first ``r`` coordinates rotated (``partial_rotary_factor``), the rest passed through;
* ``repeat_heads(k, repeat=G)``: each key/value head serves G consecutive query heads;
* ``packed_heads(x, chunks=C, heads=H)``: one packed projection read as C chunks (q, k, v) of H
  heads each by a single view, permute and unbind (timm's ViT attention);
* ``head_chunk(x, chunk=c, heads=H)``: the same with the heads outermost, each head's
  q, k and v side by side, read by a view to (…, H, C, D) and a ``select`` per chunk (BLOOM);
* ``grouped_heads(x, kv=K, group=G, chunk=…)``: a packed projection viewed as K groups of
  G query heads, one key and one value head each, ``(…, K, G + 2, D)``, its queries sliced off
  and flattened, its key and value selected (Falcon's new decoder architecture);
* ``attention(q, k, v, masks)``: attention written by hand, ``softmax(q @ kᵀ · s + mask) @ v``
  with casts, dropout and masking (``add``, ``masked_fill``, ``where``) in between, read as
  ``scaled_dot_product_attention`` is; the scores may come from ``baddbmm(bias, q, kᵀ)`` and
  move between (B·H, T, S) and (B, H, T, S) on the way (BLOOM).

A subgraph is fused only where its inner nodes are used by nothing outside it, so the walk
loses nothing by skipping them. What is not fused is walked op by op.

Fusion reads the graph's structure, not its values: that ``cos`` and ``sin`` hold one
frequency per rotated pair (as every RoPE implementation builds them) is not checked here,
which is what :mod:`paramsym.symmetry.verify` does numerically.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.fx import Node

_CASTS = frozenset({"to", "_to_copy", "type_as", "contiguous", "clone"})


@dataclass
class Fused:
    """One synthetic call: the op name, its arguments (fx nodes or constants) and keywords."""

    op: str
    args: list[Any]
    kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass
class Fusion:
    """What :func:`fuse` found: calls replacing nodes, and the inner nodes to skip."""

    calls: dict[str, Fused] = field(default_factory=dict)
    skipped: set[str] = field(default_factory=set)


def _name(node: Any) -> str:
    if not isinstance(node, Node) or node.op != "call_function":
        return ""
    if node.target is operator.getitem:
        return "getitem"
    packet = getattr(node.target, "overloadpacket", None)
    return str(packet.__name__) if packet is not None else getattr(node.target, "__name__", "")


def _shape(node: Any) -> tuple[int, ...] | None:
    value = node.meta.get("val") if isinstance(node, Node) else None
    return tuple(int(s) for s in value.shape) if isinstance(value, torch.Tensor) else None


def _uncast(node: Any) -> Any:
    """``node`` without the dtype casts and copies in front of it."""
    while _name(node) in _CASTS:
        node = node.args[0]
    return node


def _only_users(node: Any, allowed: set[Node]) -> bool:
    return all(user in allowed for user in node.users)


def _axis(node: Any, dim: Any) -> int | None:
    shape = _shape(node)
    if shape is None or not isinstance(dim, int):
        return None
    return dim % len(shape)


def _operands(node: Any) -> tuple[Any, Any]:
    return node.args[0], node.args[1]


# -- RMSNorm ---------------------------------------------------------------------------------


def _rms_factor(node: Any) -> tuple[Any, float, list[Node]] | None:
    """``rsqrt(mean(x², -1, keepdim) + eps)`` (casts allowed): (x, eps, inner nodes)."""
    inner = []
    while _name(node) in _CASTS:
        inner.append(node)
        node = node.args[0]
    if _name(node) != "rsqrt":
        return None
    added = node.args[0]
    if _name(added) != "add" or not isinstance(added.args[1], (int, float)):
        return None
    mean = added.args[0]
    if _name(mean) != "mean" or len(mean.args) < 2:
        return None
    dims, keepdim = (
        mean.args[1],
        mean.args[2] if len(mean.args) > 2 else mean.kwargs.get("keepdim", False),
    )
    if not keepdim or list(dims) not in ([-1], [len(_shape(mean) or ()) - 1]):
        return None
    power = mean.args[0]
    if _name(power) != "pow" or power.args[1] != 2:
        return None
    return power.args[0], float(added.args[1]), [*inner, node, added, mean, power]


def _rms_norm(node: Any, fusion: Fusion) -> None:
    if _name(node) != "mul":
        return
    for x, factor in (_operands(node), _operands(node)[::-1]):
        found = _rms_factor(factor)
        if found is None or not isinstance(x, Node):
            continue
        source, eps, inner = found
        if _uncast(source) is not _uncast(x):
            continue
        if not all(_only_users(n, {node, *inner}) for n in inner):
            continue
        shape = _shape(x)
        if shape is None:
            continue
        fused_at, weight, chain, offset = _weight_after(node)
        fusion.skipped.update(n.name for n in inner)
        fusion.skipped.update(n.name for n in chain)
        options = {"weight_offset": offset} if offset else {}
        fusion.calls[fused_at.name] = Fused("rms_norm", [x, [shape[-1]], weight, eps], options)
        return


def _offset_weight(node: Any) -> tuple[Node, float, list[Node]] | None:
    """``γ`` or ``offset + γ`` (Gemma's ``1 + weight``; casts allowed): (γ's placeholder,
    offset, the nodes between), γ a 1-D placeholder."""
    inner: list[Node] = []
    offset = 0.0
    if _name(node) == "add" and isinstance(node.args[1], (int, float)):
        inner.append(node)
        node, offset = node.args[0], float(node.args[1])
    while _name(node) in _CASTS:
        inner.append(node)
        node = node.args[0]
    if isinstance(node, Node) and node.op == "placeholder" and len(_shape(node) or ()) == 1:
        return node, offset, inner
    return None


def _weight_after(node: Any) -> tuple[Node, Any, list[Node], float]:
    """The ``γ ⊙ normalised`` multiplication after ``node`` (casts allowed), if there is one:
    (the node to replace, γ's node or None, the nodes between, the offset added to γ)."""
    chain = [node]
    current = node
    while len(current.users) == 1:
        user = next(iter(current.users))
        if _name(user) in _CASTS:
            chain.append(user)
            current = user
            continue
        if _name(user) == "mul":
            a, b = _operands(user)
            found = _offset_weight(b if a is current else a)
            if found is not None and all(len(n.users) == 1 for n in found[2]):
                return user, found[0], chain + found[2], found[1]
        break
    return node, None, [], 0.0


# -- rotary embeddings -----------------------------------------------------------------------


def _rotate_half(node: Any) -> tuple[Any, list[tuple[int, int]], list[Node]] | None:
    """``cat([-x[..., h:], x[..., :h]], -1)``: (x, pairs (j, j + h), inner nodes)."""
    if _name(node) != "cat" or len(node.args[0]) != 2:
        return None
    negated, low = node.args[0]
    if _axis(node, node.args[1] if len(node.args) > 1 else 0) != len(_shape(node) or ()) - 1:
        return None
    if _name(negated) != "neg":
        return None
    high = negated.args[0]
    if _name(low) != "slice" or _name(high) != "slice" or low.args[0] is not high.args[0]:
        return None
    x = low.args[0]
    width = (_shape(x) or (0,))[-1]
    last = len(_shape(x) or ()) - 1
    if _axis(x, low.args[1]) != last or _axis(x, high.args[1]) != last:
        return None
    half = width // 2
    if width % 2 or _bounds(low, width) != (0, half) or _bounds(high, width) != (half, width):
        return None
    return x, [(j, j + half) for j in range(half)], [node, negated, low, high]


def _rotate_every_two(node: Any) -> tuple[Any, list[tuple[int, int]], list[Node]] | None:
    """``stack([-x[..., 1::2], x[..., ::2]], -1).flatten(-2)``: pairs (2j, 2j + 1)."""
    if _name(node) not in ("flatten", "view", "reshape", "_unsafe_view"):
        return None
    stacked = node.args[0]
    if _name(stacked) != "stack" or len(stacked.args[0]) != 2:
        return None
    negated, even = stacked.args[0]
    if _name(negated) != "neg":
        return None
    odd = negated.args[0]
    if _name(even) != "slice" or _name(odd) != "slice" or even.args[0] is not odd.args[0]:
        return None
    x = even.args[0]
    width = (_shape(x) or (0,))[-1]
    if _step(even) != 2 or _step(odd) != 2 or _start(even) != 0 or _start(odd) != 1:
        return None
    if _shape(node) != _shape(x):
        return None
    return x, [(2 * j, 2 * j + 1) for j in range(width // 2)], [node, stacked, negated, even, odd]


def _start(node: Any) -> int:
    return int(node.args[2]) if len(node.args) > 2 and node.args[2] is not None else 0


def _step(node: Any) -> int:
    return int(node.args[4]) if len(node.args) > 4 else 1


def _bounds(node: Any, width: int) -> tuple[int, int]:
    start = _start(node)
    stop = node.args[3] if len(node.args) > 3 and node.args[3] is not None else width
    stop = min(int(stop), width)
    return (start + width if start < 0 else start), (stop + width if stop < 0 else stop)


def _rotary_sum(node: Any) -> tuple[Any, list[tuple[int, int]], list[Node]] | None:
    """``x * cos + rotate(x) * sin`` (either order): (x, pairs, inner nodes)."""
    if _name(node) != "add" or not all(_name(a) == "mul" for a in _operands(node)):
        return None
    for plain, rotated in (_operands(node), _operands(node)[::-1]):
        for r in _operands(rotated):
            found = _rotate_half(r) or _rotate_every_two(r)
            if found is None:
                continue
            x, pairs, inner = found
            if x not in _operands(plain):
                continue
            nodes = [plain, rotated, *inner]
            if all(_only_users(n, {node, *nodes}) for n in nodes):
                return x, pairs, [*nodes]
    return None


def _last_axis_slice(node: Any, whole: Any) -> bool:
    """Whether ``node`` is a slice of ``whole`` along its last axis."""
    shape = _shape(whole)
    return (
        _name(node) == "slice"
        and node.args[0] is whole
        and shape is not None
        and _axis(whole, node.args[1] if len(node.args) > 1 else 0) == len(shape) - 1
    )


def _rotary(node: Any, fusion: Fusion) -> None:
    """``x * cos + rotate(x) * sin`` as ``rotary(x)``; with the partial-rotary ``cat`` after
    it (``cat([rotary(x[..., :r]), x[..., r:]], -1)``) as ``rotary(x, rotated=r)``. The
    rotated part may be the whole of ``x`` (``x[..., :d]`` traces as ``alias(x)``), the
    passed part then empty (Phi-3's ``apply_rotary_pos_emb`` at ``partial_rotary_factor=1``)."""
    found = _rotary_sum(node)
    if found is None:
        return
    x, pairs, inner = found
    fused_at, source, rotated = node, x, (_shape(x) or (0,))[-1]
    if len(node.users) == 1:  # partial rotary: cat([rotary(x[..., :r]), x[..., r:]], -1)
        user = next(iter(node.users))
        parts: Any = user.args[0] if _name(user) == "cat" else ()
        if len(parts) == 2 and parts[0] is node and _name(x) in ("slice", "alias"):
            whole = x.args[0]
            width = (_shape(whole) or (0,))[-1]
            if (
                _last_axis_slice(parts[1], whole)
                and (_name(x) == "alias" or _last_axis_slice(x, whole))
                and _bounds(x, width) == (0, rotated)
                and _bounds(parts[1], width) == (rotated, width)
                and _only_users(x, {*inner}) and _only_users(parts[1], {user})
            ):  # fmt: skip
                fused_at, source = user, whole
                inner = [*inner, node, x, parts[1]]
    fusion.skipped.update(n.name for n in inner)
    fusion.calls[fused_at.name] = Fused(
        "rotary", [source], {"pairs": tuple(pairs), "rotated": rotated}
    )


# -- repeated key/value heads ----------------------------------------------------------------


def _repeat_heads(node: Any, fusion: Fusion) -> None:
    """``x.unsqueeze(u).expand(..., G, ...).reshape(...)`` merging axes u − 1 and u."""
    if _name(node) not in ("reshape", "view", "_unsafe_view"):
        return
    expanded = node.args[0]
    if _name(expanded) != "expand" or len(expanded.users) != 1:
        return
    unsqueezed = expanded.args[0]
    if _name(unsqueezed) != "unsqueeze" or len(unsqueezed.users) != 1:
        return
    x = unsqueezed.args[0]
    shape, big, out = _shape(x), _shape(expanded), _shape(node)
    if shape is None or big is None or out is None:
        return
    u = int(unsqueezed.args[1]) % (len(shape) + 1)
    if u == 0 or len(out) != len(shape):
        return
    repeat = big[u]
    if list(out) != [*shape[: u - 1], shape[u - 1] * repeat, *shape[u:]]:
        return
    fusion.skipped.update((expanded.name, unsqueezed.name))
    fusion.calls[node.name] = Fused("repeat_heads", [x], {"repeat": repeat, "axis": u - 1})


# -- attention written by hand ---------------------------------------------------------------

_PROBABILITIES = frozenset({*_CASTS, "dropout", "alpha_dropout", "feature_dropout"})
_MATMUL = frozenset({"matmul", "bmm"})
_SCORES = frozenset({*_MATMUL, "baddbmm"})
"""The scores' product: ``baddbmm(bias, q, kᵀ)`` adds a bias (BLOOM's ALiBi) as it multiplies."""
_VIEWS = frozenset({"view", "reshape", "_unsafe_view"})


def _regroups_batch(node: Any) -> bool:
    """A view that only regroups the leading (batch, head) axes of scores or probabilities:
    (B·H, T, S) ↔ (B, H, T, S), as BLOOM moves between its heads-in-batch layout and masks."""
    if _name(node) not in _VIEWS:
        return False
    before, after = _shape(node.args[0]), _shape(node)
    return before is not None and after is not None and before[-2:] == after[-2:]


def _swaps_last_two(node: Any) -> bool:
    """``k.transpose(-2, -1)``, ``k.mT``, ``k.permute(…, n − 1, n − 2)``."""
    shape = _shape(node.args[0]) if _name(node) else None
    if shape is None or len(shape) < 2:
        return False
    n = len(shape)
    if _name(node) in ("transpose", "swapaxes"):
        return {int(node.args[1]) % n, int(node.args[2]) % n} == {n - 2, n - 1}
    if _name(node) == "permute":
        order = [int(d) % n for d in node.args[1]]
        return order == [*range(n - 2), n - 1, n - 2]
    return _name(node) in ("mT", "t") and n == 2


def _reaches_matmul(node: Any, depth: int = 8) -> bool:
    """Whether ``node`` is a matmul seen through scaling, masking and casts."""
    for _ in range(depth):
        name = _name(node)
        if name in _SCORES:
            return True
        if name not in (*_CASTS, "mul", "div", "add", "masked_fill", "where") and not (
            _regroups_batch(node)
        ):
            return False
        node = node.args[1] if name == "where" else node.args[0]
        if name == "add" and not _reaches_matmul(node, depth - 1):
            return False
    return False


def _scores(node: Any, chain: list[Node], masks: list[Any]) -> Any:
    """Walk back from softmax's input through scaling, masking and casts to the scores'
    matmul; collect the masks; return the matmul node (or None)."""
    while True:
        chain.append(node)
        name = _name(node)
        if name == "baddbmm":
            masks.append(node.args[0])
            return node
        if name in _MATMUL:
            return node
        if name in _CASTS or _regroups_batch(node):
            node = node.args[0]
        elif name in ("mul", "div") and isinstance(node.args[1], (int, float, Node)):
            other = node.args[1]
            if isinstance(other, Node) and _shape(other) not in ((), None):
                return None  # a per-entry factor, not a scale
            node = node.args[0]
        elif name == "add" and len(node.args) == 2:
            a, b = node.args
            inner = a if _reaches_matmul(a) else b
            masks.append(b if inner is a else a)
            node = inner
        elif name == "masked_fill":
            masks.append(node.args[1])
            node = node.args[0]
        elif name == "where" and len(node.args) == 3 and isinstance(node.args[1], Node):
            masks.append(node.args[0])
            node = node.args[1]
        else:
            return None


def _attention(node: Any, fusion: Fusion) -> None:
    """``softmax(q @ kᵀ · s + mask) @ v`` (casts, dropout, masking) as one attention op."""
    if _name(node) not in _MATMUL:
        return
    probabilities, v = node.args[0], node.args[1]
    chain: list[Node] = []
    while _name(probabilities) in _PROBABILITIES or _regroups_batch(probabilities):
        chain.append(probabilities)
        probabilities = probabilities.args[0]
    if _name(probabilities) not in ("softmax", "_softmax"):
        return
    ndim = len(_shape(probabilities) or ())
    if _axis(probabilities, probabilities.args[1]) != ndim - 1:
        return
    chain.append(probabilities)
    masks: list[Any] = []
    scores = _scores(probabilities.args[0], chain, masks)
    if scores is None:
        return
    q, k_t = scores.args[1:3] if _name(scores) == "baddbmm" else scores.args[:2]
    key_axis = -2
    k = k_t
    if _swaps_last_two(k_t) and len(k_t.users) == 1:
        k, key_axis = k_t.args[0], -1
        chain.append(k_t)
    if not all(_only_users(n, {node, *chain}) for n in chain):
        return
    fusion.skipped.update(n.name for n in chain)
    fusion.calls[node.name] = Fused("attention", [q, k, v, masks], {"key_axis": key_axis})


# -- packed q, k, v split into heads in one view (timm, DINOv2, open_clip) --------------------


def _three_way(viewed: Any) -> tuple[Any, tuple[int, ...], int] | None:
    """(source, view shape, k) when ``viewed`` is a view that splits the last axis of its
    source, a packed projection, into three axes at k, k + 1, k + 2."""
    if _name(viewed) not in _VIEWS:
        return None
    source, shape, packed = viewed.args[0], _shape(viewed), _shape(viewed.args[0])
    if shape is None or packed is None or len(shape) != len(packed) + 2:
        return None
    k = len(packed) - 1
    if list(shape[:k]) != list(packed[:k]) or shape[k] * shape[k + 1] * shape[k + 2] != packed[k]:
        return None
    return source, shape, k


def _packed_heads(node: Any, fusion: Fusion) -> None:
    """``x.reshape(…, C, H, D).permute(…).unbind(c_axis)``: C chunks of H heads of D features
    read off one packed projection (q, k, v)."""
    if _name(node) != "unbind":
        return
    permuted = node.args[0]
    if _name(permuted) != "permute" or len(permuted.users) != 1:
        return
    viewed = permuted.args[0]
    if len(viewed.users) != 1 or (split := _three_way(viewed)) is None:
        return
    source, shape, k = split  # (C, H, D) at k, k + 1, k + 2
    order = [int(d) % len(shape) for d in permuted.args[1]]
    axis = int(node.args[1] if len(node.args) > 1 else node.kwargs.get("dim", 0)) % len(shape)
    if order[axis] != k:
        return
    rest = [a for a in order if a != k]  # axes of each chunk, in their new order
    fusion.skipped.update((viewed.name, permuted.name))
    fusion.calls[node.name] = Fused(
        "packed_heads",
        [source],
        {"chunks": shape[k], "heads": shape[k + 1], "head_axis": rest.index(k + 1),
         "feature_axis": rest.index(k + 2)},
    )  # fmt: skip


def _head_chunk(node: Any, fusion: Fusion) -> None:
    """``x.view(…, H, C, D)[…, c, :]``: chunk c (q, k or v) of every head read off one packed
    projection whose heads are outermost (BLOOM's fused ``query_key_value``)."""
    if _name(node) != "select":
        return
    viewed = node.args[0]
    if (split := _three_way(viewed)) is None:
        return
    source, shape, k = split  # (H, C, D) at k, k + 1, k + 2
    if not all(_name(u) == "select" and _axis(viewed, u.args[1]) == k + 1 for u in viewed.users):
        return
    fusion.skipped.add(viewed.name)
    fusion.calls[node.name] = Fused(
        "head_chunk",
        [source],
        {"chunk": int(node.args[2]) % shape[k + 1], "heads": shape[k]},
    )


# -- heads grouped around their key/value head (Falcon's new decoder architecture) -----------


def _grouped_layout(viewed: Any) -> tuple[Node, dict[str, Any], dict[Node, str], list[Node]] | None:
    """``x.view(…, K, G + 2, D)`` of a packed projection ``x`` (…, K·(G + 2)·D) whose users
    are exactly ``[…, :G, :]`` flattened to K·G query heads and the selects of entry G (the
    key) and G + 1 (the value) of each group: (x, options, end node -> chunk, inner nodes)."""
    shape = _shape(viewed)
    if _name(viewed) not in _VIEWS or shape is None or len(shape) < 4 or shape[-2] < 3:
        return None
    kv, slots, d = shape[-3:]
    k = len(shape) - 2  # the axis of the G + 2 entries of a group
    views, source = [viewed], viewed.args[0]
    while _name(source) in _VIEWS and len(source.users) == 1:
        views.append(source)
        source = source.args[0]
    packed = _shape(source)
    if packed is None or list(packed[:-1]) != list(shape[:-3]) or packed[-1] != kv * slots * d:
        return None
    ends: dict[Node, str] = {}
    inner = list(views)
    for user in viewed.users:
        if _name(user) == "select" and _axis(viewed, user.args[1]) == k:
            entry = int(user.args[2]) % slots
            if entry < slots - 2:
                return None
            ends[user] = "key" if entry == slots - 2 else "value"
        elif _name(user) == "slice" and _axis(viewed, user.args[1]) == k and len(user.users) == 1:
            flat = next(iter(user.users))
            stop = _bounds(user, slots)
            dims = [_axis(user, a) for a in flat.args[1:3]] if len(flat.args) > 2 else []
            if _name(flat) != "flatten" or stop != (0, slots - 2) or dims != [k - 1, k]:
                return None
            ends[flat] = "query"
            inner.append(user)
        else:
            return None
    if sorted(ends.values()) != ["key", "query", "value"]:
        return None
    return source, {"kv": kv, "group": slots - 2}, ends, inner


def _grouped_heads(node: Any, fusion: Fusion) -> None:
    """The queries, key and value of :func:`_grouped_layout` as ``grouped_heads(x, kv=K,
    group=G, chunk=…)``."""
    if _name(node) == "flatten" and _name(node.args[0]) == "slice":
        viewed = node.args[0].args[0]
    elif _name(node) == "select":
        viewed = node.args[0]
    else:
        return
    found = _grouped_layout(viewed)
    if found is None or node not in found[2]:
        return
    source, options, ends, inner = found
    fusion.skipped.update(n.name for n in inner)
    fusion.calls[node.name] = Fused("grouped_heads", [source], {**options, "chunk": ends[node]})


_FINDERS = (
    _rms_norm,
    _rotary,
    _repeat_heads,
    _attention,
    _packed_heads,
    _grouped_heads,
    _head_chunk,
)


def fuse(graph: torch.fx.Graph) -> Fusion:
    """Every fusable subgraph of ``graph`` (see the module docstring)."""
    fusion = Fusion()
    for node in reversed(list(graph.nodes)):  # outermost first: a fused node's inputs stay
        if node.op != "call_function" or node.name in fusion.skipped:
            continue
        for finder in _FINDERS:
            if node.name not in fusion.calls:
                finder(node, fusion)
    return fusion
