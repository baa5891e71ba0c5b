"""Rules of arithmetic, reductions, pooling and softmax.

* ``add``/``sub`` of two tensors link their features (a residual add: one group element on
  both operands); a parameter added along the features moves with them (a bias, a position
  embedding, a class token); a constant added to every feature passes permutations only.
* ``mul``/``div`` by a number or by a tensor constant across the features is linear in them;
  by a parameter along the features (LayerScale) passes the diagonal families with it
  re-indexed; the product of two computed feature tensors (gating) passes permutations.
* Reductions over other axes, average pooling, padding and interpolation are linear per
  feature; max pooling passes permutations and positive rescaling; a sum over the features
  is permutation invariant.
* ``softmax`` over the features passes permutations; over other axes only permutations too.
"""

from __future__ import annotations

from typing import Any

from paramsym.symmetry.graph.facts import ALL_FAMILIES, Family, Law, Member
from paramsym.symmetry.graph.rules import LINEAR_ONLY, PERM, derive, fresh
from paramsym.symmetry.graph.values import ParamValue, TensorValue, broadcast_axes
from paramsym.symmetry.graph.walk import OpCall, Walk, rule

_NUMBER = (int, float, bool)


def _is_zero(value: Any) -> bool:
    return isinstance(value, _NUMBER) and float(value) == 0.0


def _elementwise(
    walk: Walk,
    call: OpCall,
    operands: list[Any],
    *,
    shared: frozenset[Family],
    param_law: Law | None,
    param_families: frozenset[Family],
    constant: frozenset[Family],
) -> TensorValue:
    """Binary elementwise op on right-aligned axes.

    Per output axis: every computed operand's member is linked to a new space in ``shared``
    families; a parameter operand that varies along the axis is attached with ``param_law``
    (passing ``param_families``); an operand of size 1 on the axis (or a number) is
    constant across the features (passing ``constant``); a computed operand that varies
    along the axis without a member blocks it.
    """
    out_shape = tuple(call.shape)
    tensors = [v for v in operands if isinstance(v, (TensorValue, ParamValue))]
    table = broadcast_axes([tuple(v.shape) for v in tensors], len(out_shape))
    facts = walk.facts
    axes: dict[int, Member] = {}
    for j in range(len(out_shape)):
        members: list[Member] = []
        params: list[tuple[ParamValue, int]] = []
        passing = set(ALL_FAMILIES)
        fixed = False
        data = False  # a computed operand varies along the axis without features
        for value, rows in zip(tensors, table, strict=True):
            a = rows[j]
            member = value.axes.get(a) if isinstance(value, TensorValue) and a is not None else None
            if member is not None and a is not None:
                if value.shape[a] == out_shape[j]:
                    members.append(member)
                else:  # features broadcast across features: no group can follow that
                    fixed = True
                    members.append(member)
                continue
            if a is None or value.shape[a] == 1:
                if out_shape[j] > 1:
                    passing &= constant
                continue
            if isinstance(value, ParamValue):
                dim = value.original(a)
                if dim is None or param_law is None:
                    fixed = True
                else:
                    params.append((value, dim))
                    passing &= param_families
            else:
                data = True
        if not members and (not params or data):
            # no features here: a parameter that varies along an axis of the data (a
            # learned position embedding along the tokens) is read where it lines up with
            # the data; the features it meets are on its other axes
            continue
        fixed = fixed or data
        if any(isinstance(v, _NUMBER) and not _is_zero(v) for v in operands):
            passing &= constant
        if fixed or any(m.width != (members or [m])[0].width for m in members):
            for m in members:
                facts.block(m, ALL_FAMILIES, f"{call.where} combines it with fixed features")
            for p, _ in params:
                walk.unexplained(p, call)
            continue
        if len(members) > 1:
            passing &= shared
        like = members[0] if members else Member(-1, 0, out_shape[j])
        # parameters alone (added to or scaling something constant across the features)
        # produce the features where their law moves them as features: re-indexing only
        # for a multiplier
        sources = frozenset() if members else frozenset(passing)
        if param_law is Law.INVARIANT:
            sources &= PERM
        out = fresh(walk, like, call.module, sources)
        for m in members:
            facts.link(m, out, frozenset(passing))
            facts.block(m, ALL_FAMILIES - frozenset(passing), call.where)
        for p, dim in params:
            assert param_law is not None
            facts.attach(out, p.name, dim, param_law, block=out.block)
        axes[j] = out
    for value in operands:  # parameters not attached along any axis were used opaquely
        if (
            isinstance(value, ParamValue)
            and value.ndim
            and all(value.original(a) is None or value.shape[a] == 1 for a in range(value.ndim))
        ):
            walk.unexplained(value, call)
    return TensorValue(out_shape, axes, _head_axes(walk, call, tensors, table, axes))


def _head_axes(
    walk: Walk,
    call: OpCall,
    tensors: list[Any],
    table: list[list[int | None]],
    axes: dict[int, Member],
) -> dict[int, int]:
    """Head axes of the output: those of the head-split operands, which must agree; any other
    operand must be constant along a head axis (a per-head factor would break the heads)."""
    found: dict[int, int] = {}
    for j, member in axes.items():
        if member.heads == 1:
            continue
        heads = set()
        for value, rows in zip(tensors, table, strict=True):
            a = rows[j]
            if isinstance(value, TensorValue) and a is not None and a in value.head_axes:
                heads.add(rows.index(value.head_axes[a]))
        varying = [
            value
            for value, rows in zip(tensors, table, strict=True)
            for h in heads
            if rows[h] is not None
            and value.shape[rows[h]] > 1
            and not (isinstance(value, TensorValue) and rows[j] in value.head_axes)
        ]
        if len(heads) != 1 or varying:
            walk.facts.block(member, ALL_FAMILIES, f"{call.where} mixes attention heads")
            continue
        found[j] = heads.pop()
    return found


@rule("add", "sub", "rsub", heads=True)
def add(walk: Walk, call: OpCall) -> Any:
    operands = [call.args[0], call.args[1]]
    alpha = call.kwargs.get("alpha", 1)
    if not any(isinstance(v, TensorValue) for v in operands):
        return walk.fallback(call)
    return _elementwise(
        walk,
        call,
        operands + ([alpha] if alpha != 1 else []),
        shared=ALL_FAMILIES,
        param_law=Law.VECTOR,
        param_families=ALL_FAMILIES,
        constant=PERM,
    )


_FACTORS = frozenset({Family.SCALING, Family.SIGN})


def _gated(walk: Walk, call: OpCall, a: TensorValue, b: TensorValue) -> TensorValue | None:
    """``act(gate) ⊙ up`` (SwiGLU, GeGLU; notes 005 §3): both factors share one permutation;
    the factor computed by a linear map (``up``, the second when both are) carries rescaling
    and sign flips to the product while the other stays fixed (c·up ⊙ gate = c·(up ⊙ gate));
    GL passes neither. None when the operands are not two feature tensors of one layout."""
    if a.shape != b.shape or a.axes.keys() != b.axes.keys() or a.head_axes or b.head_axes:
        return None
    if any(a.axes[j].width != b.axes[j].width for j in a.axes):
        return None
    facts = walk.facts
    axes: dict[int, Member] = {}
    for j, (ma, mb) in ((j, (a.axes[j], b.axes[j])) for j in a.axes):
        linear = [m for m in (ma, mb) if walk.origins.get(m.space, ("",))[0] == "linear"]
        carrier = linear[-1] if linear else None
        out = fresh(walk, ma, call.module)
        for m in (ma, mb):
            facts.link(m, out, PERM | (_FACTORS if m is carrier else frozenset()))
            passing = PERM | (_FACTORS if m is carrier else frozenset())
            facts.block(m, ALL_FAMILIES - passing, f"{call.where}: a factor of a gated product")
        axes[j] = out
    return TensorValue(tuple(call.shape), axes)


@rule("mul", "div", heads=True)
def mul(walk: Walk, call: OpCall) -> Any:
    a, b = call.args[0], call.args[1]
    if not any(isinstance(v, TensorValue) for v in (a, b)):
        return walk.fallback(call)
    if call.op == "mul" and isinstance(a, TensorValue) and isinstance(b, TensorValue):
        gated = _gated(walk, call, a, b)
        if gated is not None:
            return gated
    if (
        call.op == "div"
        and isinstance(b, (TensorValue, ParamValue))
        and b.shape
        and max(b.shape) > 1
    ):
        if isinstance(b, ParamValue):
            walk.unexplained(b, call)
        walk.block_all([a, b], f"{call.where} divides by a tensor")
        return TensorValue(tuple(call.shape))
    return _elementwise(
        walk,
        call,
        [a, b],
        shared=PERM,
        param_law=Law.INVARIANT,
        param_families=ALL_FAMILIES - LINEAR_ONLY,
        constant=ALL_FAMILIES,
    )


def _reduced_axes(x: TensorValue, dims: Any) -> set[int]:
    if dims is None or dims == []:
        return set(range(x.ndim))
    dims = [dims] if isinstance(dims, int) else dims
    return {int(d) % x.ndim for d in dims}


@rule("mean", "sum", "amax", "max", "amin", "min", "logsumexp", "var", "std", "norm")
def reduction(walk: Walk, call: OpCall) -> Any:
    x = call.args[0]
    if not isinstance(x, TensorValue):
        return walk.fallback(call)
    dims = call.arg(1, "dim")
    if call.op in ("max", "min") and not isinstance(dims, int):
        return walk.fallback(call)
    keepdim = bool(call.arg(2, "keepdim", False))
    reduced = _reduced_axes(x, dims)
    linear = call.op in ("mean", "sum")
    passing = (
        ALL_FAMILIES if linear else (PERM | {Family.SCALING} if call.op != "logsumexp" else PERM)
    )
    if call.op in ("var", "std", "norm"):
        passing = PERM
    facts = walk.facts
    for axis in reduced & set(x.axes):
        member = x.axes[axis]
        if call.op == "sum" or call.op == "mean":
            facts.absorb(
                member, PERM, module=call.module
            )  # a sum over the features is permutation invariant
        facts.block(member, ALL_FAMILIES - PERM if linear else ALL_FAMILIES, call.where)
    kept = TensorValue(x.shape, {a: m for a, m in x.axes.items() if a not in reduced})
    out = derive(walk, call, kept, frozenset(passing))
    mapping = {}
    position = 0
    for a in range(x.ndim):
        if a in reduced and not keepdim:
            continue
        mapping[a] = position
        position += 1
    shape = call.shape[0] if isinstance(call.shape, list) else call.shape
    result = TensorValue(tuple(shape), {mapping[a]: m for a, m in out.axes.items()})
    if isinstance(call.shape, list):
        return [result, TensorValue(tuple(call.shape[1]))]
    return result


def _features_only(walk: Walk, call: OpCall, x: TensorValue) -> TensorValue:
    """Block members on the axes a pooling, padding or resampling op works along (the last
    1, 2 or 3, from its name; for padding, the axes it pads by a nonzero amount: Swin pads
    its feature axis by (0, 0)); keep the others."""
    if call.op in ("constant_pad_nd", "pad"):  # (last left, last right, next left, ...)
        pads = list(call.args[1])
        moved = {a for a in x.axes if any(pads[2 * (x.ndim - 1 - a) : 2 * (x.ndim - a)])}
    else:
        spatial = next((int(d) for d in "123" if f"{d}d" in call.op), 2)
        moved = {a for a in x.axes if a >= x.ndim - spatial}
    for axis in moved:
        walk.facts.block(x.axes[axis], ALL_FAMILIES, f"{call.where} works along it")
    return TensorValue(x.shape, {a: m for a, m in x.axes.items() if a not in moved})


_LINEAR_PER_FEATURE = (
    "avg_pool1d", "avg_pool2d", "avg_pool3d", "adaptive_avg_pool1d", "adaptive_avg_pool2d",
    "adaptive_avg_pool3d", "_adaptive_avg_pool2d", "constant_pad_nd", "pad",
    "upsample_nearest1d", "upsample_nearest2d", "upsample_bilinear2d", "upsample_linear1d",
)  # fmt: skip


@rule(*_LINEAR_PER_FEATURE)
def linear_per_feature(walk: Walk, call: OpCall) -> Any:
    """Linear in the spatial axes, feature by feature (zero padding included)."""
    x = call.args[0]
    if not isinstance(x, TensorValue):
        return walk.fallback(call)
    x = _features_only(walk, call, x)
    if call.op in ("constant_pad_nd", "pad") and not _is_zero(call.arg(2, "value", 0) or 0):
        return derive(walk, call, x, PERM, shape=tuple(call.shape))
    return derive(walk, call, x, ALL_FAMILIES, shape=tuple(call.shape))


@rule("max_pool1d", "max_pool2d", "max_pool3d", "max_pool2d_with_indices", "adaptive_max_pool2d",
      "max_pool1d_with_indices", "max_pool3d_with_indices", "adaptive_max_pool1d")  # fmt: skip
def max_pool(walk: Walk, call: OpCall) -> Any:
    """A maximum per feature commutes with permutations and positive rescaling."""
    x = call.args[0]
    if not isinstance(x, TensorValue):
        return walk.fallback(call)
    x = _features_only(walk, call, x)
    shape = call.shape[0] if isinstance(call.shape, list) else call.shape
    out = derive(walk, call, x, PERM | {Family.SCALING}, shape=tuple(shape))
    if isinstance(call.shape, list):
        return [out, TensorValue(tuple(call.shape[1]))]
    return out


@rule("softmax", "_softmax", "log_softmax", "_log_softmax")
def softmax(walk: Walk, call: OpCall) -> Any:
    x = call.args[0]
    if not isinstance(x, TensorValue):
        return walk.fallback(call)
    axis = x.axis(int(call.args[1]))
    out = derive(walk, call, x, PERM)
    member = x.axes.get(axis)
    if member is not None:
        walk.origins[out.axes[axis].space] = ("softmax", member)
    return out


def _empty_along(value: Any, axis: int, ndim: int) -> bool:
    """Whether ``value`` is a tensor with no entries along ``axis`` (of an ``ndim``-axis
    result): ``x[..., d:]`` of a d-wide axis, concatenated to nothing."""
    shape = getattr(value, "shape", None)
    return shape is not None and len(shape) == ndim and shape[axis] == 0


@rule("cat", "concat", "concatenate", heads=True)
def cat(walk: Walk, call: OpCall) -> Any:
    """Concatenation along an axis without features links the parts' features (a class
    token joined to patch tokens); along a feature axis it blocks them. Parts with no entries
    along the axis are left out: one part joined to empty ones is that part, heads and all
    (any other concatenation of heads blocks them)."""
    parts = call.args[0]
    out_shape = tuple(call.shape)
    axis = int(call.arg(1, "dim", 0)) % len(out_shape)
    filled = [p for p in parts if not _empty_along(p, axis, len(out_shape))]
    if len(filled) == 1 and isinstance(filled[0], TensorValue) and filled[0].shape == out_shape:
        return filled[0]  # joined to empty parts only: the tensor itself
    parts = [walk.strip_heads(p, call) for p in parts]  # heads pass only the case above
    computed = [p for p in parts if isinstance(p, TensorValue)]
    if any(axis in p.axes for p in computed):
        walk.block_all(parts, f"{call.where} concatenates features")
        for p in parts:
            walk.unexplained(p, call)
        return TensorValue(out_shape)
    return _elementwise(
        walk,
        call,
        list(parts),
        shared=ALL_FAMILIES,
        param_law=Law.VECTOR,
        param_families=ALL_FAMILIES,
        constant=frozenset(),
    )
