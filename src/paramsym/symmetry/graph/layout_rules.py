"""Rules of layout ops: views, transposes, slices, splits and concatenations.

They move features between axes without computing anything, so they create no spaces: a
member travels to its new axis (:func:`~paramsym.symmetry.graph.values.reshape_axis` for
views), a slice narrows it (and cuts the space there, so no group mixes the kept and the
dropped features), and a parameter seen through ``t()``/``transpose`` remembers which of its
own axes each axis is. A view that splits or interleaves features blocks them.
"""

from __future__ import annotations

from typing import Any

from paramsym.symmetry.graph.attention_rules import head_slice, split_or_merge_heads
from paramsym.symmetry.graph.facts import ALL_FAMILIES, Member
from paramsym.symmetry.graph.values import ParamValue, TensorValue, reshape_axis
from paramsym.symmetry.graph.walk import OpCall, Walk, blank, rule


def _shape(call: OpCall) -> tuple[int, ...]:
    return tuple(call.shape)


@rule(
    "view", "reshape", "_unsafe_view", "flatten", "unflatten", "view_as", "reshape_as", heads=True
)
def view(walk: Walk, call: OpCall) -> Any:
    x, out_shape = call.args[0], _shape(call)
    if isinstance(x, ParamValue):
        if tuple(x.shape) == out_shape:
            return x
        return _param_view(walk, call, x, out_shape)
    if not isinstance(x, TensorValue):
        return walk.fallback(call)
    if x.shape == out_shape:
        return x
    axes: dict[int, Member] = {}
    head_axes: dict[int, int] = {}
    for axis in list(x.axes):
        heads = split_or_merge_heads(walk, call, x, axis, out_shape)
        if heads is not None:
            out_axis, moved, head_axis = heads
            axes[out_axis] = moved
            if head_axis is not None:
                head_axes[out_axis] = head_axis
            x = TensorValue(x.shape, {a: m for a, m in x.axes.items() if a != axis}, x.head_axes)
    for axis, member in x.axes.items():
        if axis in x.head_axes:
            walk.facts.block(member, ALL_FAMILIES, f"{call.where} reshapes attention heads")
            continue
        placed = reshape_axis(x.shape, out_shape, axis, member)
        if placed is None:
            walk.facts.block(member, ALL_FAMILIES, f"{call.where} splits or interleaves features")
        else:
            axes[placed[0]] = placed[1]
    return TensorValue(out_shape, axes, head_axes)


def _param_view(walk: Walk, call: OpCall, x: ParamValue, out_shape: tuple[int, ...]) -> Any:
    """A parameter viewed with size-1 axes added or removed keeps its axes; anything else is
    an unrecognised use."""
    kept = [d for d, s in zip(x.dims, x.shape, strict=True) if s != 1]
    if [s for s in x.shape if s != 1] == [s for s in out_shape if s != 1]:
        it = iter(kept)
        dims = tuple(next(it) if s != 1 else None for s in out_shape)
        return ParamValue(x.name, out_shape, dims, x.buffer)
    walk.unexplained(x, call)
    return TensorValue(out_shape)


@rule("permute", "transpose", "t", "swapaxes", "movedim", "numpy_T", "mT", heads=True)
def permute(walk: Walk, call: OpCall) -> Any:
    x = call.args[0]
    if not isinstance(x, (TensorValue, ParamValue)):
        return walk.fallback(call)
    n = x.ndim
    order = list(range(n))
    if call.op == "permute":
        order = [int(d) % n for d in call.args[1]]
    elif call.op in ("transpose", "swapaxes"):
        a, b = int(call.args[1]) % n, int(call.args[2]) % n
        order[a], order[b] = order[b], order[a]
    elif call.op in ("t", "numpy_T", "mT") and n >= 2:
        order[-1], order[-2] = order[-2], order[-1]
    elif call.op == "movedim":
        source, dest = int(call.args[1]) % n, int(call.args[2]) % n
        order.remove(source)
        order.insert(dest, source)
    if isinstance(x, ParamValue):
        dims = tuple(x.dims[i] for i in order)
        return ParamValue(x.name, tuple(x.shape[i] for i in order), dims, x.buffer)
    inverse = {old: new for new, old in enumerate(order)}
    heads = {inverse[a]: inverse[h] for a, h in x.head_axes.items()}
    return TensorValue(_shape(call), {inverse[a]: m for a, m in x.axes.items()}, heads)


@rule("unsqueeze", "squeeze", "expand", "expand_as", "broadcast_to")
def add_or_drop_unit_axes(walk: Walk, call: OpCall) -> Any:
    """Axes of size 1 come and go (``expand`` repeats size-1 axes): members keep their order."""
    x, out_shape = call.args[0], _shape(call)
    if not isinstance(x, (TensorValue, ParamValue)):
        return walk.fallback(call)
    if isinstance(x, ParamValue):
        return _param_unit_axes(walk, call, x, out_shape)
    if call.op in ("expand", "expand_as", "broadcast_to"):
        offset = len(out_shape) - x.ndim
        return TensorValue(out_shape, {a + offset: m for a, m in x.axes.items()})
    real_in = [a for a, s in enumerate(x.shape) if s != 1]
    real_out = [a for a, s in enumerate(out_shape) if s != 1]
    if len(real_in) != len(real_out):
        return walk.fallback(call)
    mapping = dict(zip(real_in, real_out, strict=True))
    axes = {mapping[a]: m for a, m in x.axes.items() if a in mapping}
    return TensorValue(out_shape, axes)


def _param_unit_axes(walk: Walk, call: OpCall, x: ParamValue, out_shape: tuple[int, ...]) -> Any:
    if call.op in ("expand", "expand_as", "broadcast_to"):
        offset = len(out_shape) - x.ndim
        dims = tuple([None] * offset) + tuple(
            d if s == o else None
            for d, s, o in zip(x.dims, x.shape, out_shape[offset:], strict=True)
        )
        if any(s != o and s != 1 for s, o in zip(x.shape, out_shape[offset:], strict=True)):
            walk.unexplained(x, call)
            return TensorValue(out_shape)
        # an expanded size-1 axis is a broadcast: keep the parameter's real axes only
        return ParamValue(x.name, out_shape, dims, x.buffer)
    return _param_view(walk, call, x, out_shape)


@rule("contiguous", "clone", "alias", "detach", "_to_copy", "to", "type_as", "lift_fresh_copy",
      "_assert_tensor_metadata", heads=True)  # fmt: skip
def identity(walk: Walk, call: OpCall) -> Any:
    x = call.args[0]
    if call.op == "_assert_tensor_metadata":
        return None
    return x if isinstance(x, (TensorValue, ParamValue)) else walk.fallback(call)


def _heads_whole(walk: Walk, call: OpCall, x: TensorValue, axis: int, whole: bool) -> TensorValue:
    """``x`` for an op that splits or slices ``axis``: its head-split members are blocked
    where the op takes heads apart (``unbind``, or ``axis`` is their head axis and not kept
    ``whole``)."""
    apart = call.op == "unbind" or (axis in x.head_axes.values() and not whole)
    return walk.strip_heads(x, call) if apart else x


def _some_heads(x: TensorValue, axis: int, start: int, stop: int) -> TensorValue | None:
    """``x`` with the whole heads ``[start, stop)`` of its head axis ``axis`` kept (a packed
    projection viewed as (…, H + 2, D) and split into H query heads, one key and one value
    head: Falcon's multi-query layout): each member split along ``axis`` narrowed to those
    heads' features, a head-split member again unless one head is left. ``None`` when a member
    cannot be narrowed so (repeated heads, features flattened with other axes)."""
    if stop <= start:
        return None
    axes, head_axes = dict(x.axes), {}
    for feature_axis, head_axis in x.head_axes.items():
        if head_axis != axis:
            head_axes[feature_axis] = head_axis
            continue
        member = x.axes[feature_axis]
        if member.repeat != 1 or member.block != 1 or member.heads != x.shape[axis]:
            return None
        d = member.head_width
        kept = Member(member.space, member.start + start * d, member.start + stop * d)
        axes[feature_axis] = Member(kept.space, kept.start, kept.stop, 1, stop - start)
        if stop - start > 1:
            head_axes[feature_axis] = head_axis
    return TensorValue(x.shape, axes, head_axes, x.zero)


def _of_heads(
    walk: Walk, call: OpCall, x: TensorValue, axis: int, start: int, stop: int, step: int = 1
) -> TensorValue:
    """``x`` for a slice ``[start, stop)`` of ``axis``: whole heads kept where ``axis`` is a
    head axis (:func:`_some_heads`), else as :func:`_heads_whole`."""
    size = x.shape[axis]
    if axis not in x.head_axes.values() or (start, stop, step) == (0, size, 1):
        return _heads_whole(walk, call, x, axis, True)
    picked = _some_heads(x, axis, start, stop) if step == 1 else None
    return picked if picked is not None else walk.strip_heads(x, call)


@rule("slice", heads=True)
def slice_(walk: Walk, call: OpCall) -> Any:
    x = call.args[0]
    if not isinstance(x, TensorValue):
        return walk.fallback(call)
    axis = x.axis(int(call.arg(1, "dim", 0)))
    size = x.shape[axis]
    start, stop, step = call.arg(2, "start"), call.arg(3, "end"), call.arg(4, "step", 1)
    start = 0 if start is None else int(start)
    stop = size if stop is None else min(int(stop), size)
    start, stop = (start + size if start < 0 else start), (stop + size if stop < 0 else stop)
    x = _of_heads(walk, call, x, axis, start, stop, int(step))
    axes = dict(x.axes)
    member = axes.pop(axis, None)
    if member is not None:
        narrowed = _narrow(walk, call, member, start, stop, int(step))
        if narrowed is not None:
            axes[axis] = narrowed
    return TensorValue(_shape(call), axes, _kept_heads(x, axes))


def _kept_heads(x: TensorValue, axes: dict[int, Member]) -> dict[int, int]:
    """The head axes of ``x`` for the feature axes still in ``axes`` (same axis numbers)."""
    return {a: h for a, h in x.head_axes.items() if a in axes and axes[a].heads > 1}


def _narrow(
    walk: Walk, call: OpCall, member: Member, start: int, stop: int, step: int = 1
) -> Member | None:
    """``member`` restricted to its tensor positions ``[start, stop)``; the dropped features
    are cut off (blocked if the slice does not fall on feature boundaries). In a head-split
    member the positions are within each head (:func:`head_slice`). An empty slice holds
    no features (``None``; nothing is cut)."""
    if stop <= start:
        return None
    if step != 1 or start % member.block or stop % member.block:
        walk.facts.block(member, ALL_FAMILIES, f"{call.where} slices inside features")
        return None
    if member.heads > 1:
        if member.repeat != 1 or member.block != 1:
            walk.facts.block(member, ALL_FAMILIES, f"{call.where} slices repeated heads")
            return None
        return head_slice(walk, call, member, start, stop)
    narrowed = member.narrow(start // member.block, stop // member.block)
    walk.facts.cut(Member(member.space, narrowed.start, narrowed.stop), narrowed.width or 1)
    walk.facts.cut(Member(member.space, member.start, member.stop), member.width or 1)
    return narrowed


@rule("select")
def select(walk: Walk, call: OpCall) -> Any:
    x = call.args[0]
    if not isinstance(x, TensorValue):
        return walk.fallback(call)
    axis = x.axis(int(call.args[1]))
    if axis in x.axes:
        walk.facts.block(x.axes[axis], ALL_FAMILIES, f"{call.where} selects one feature")
    axes = {(a if a < axis else a - 1): m for a, m in x.axes.items() if a != axis}
    return TensorValue(_shape(call), axes)


@rule("split", "split_with_sizes", "chunk", "unbind", "tensor_split", heads=True)
def split(walk: Walk, call: OpCall) -> Any:
    x = call.args[0]
    if not isinstance(x, TensorValue) or not isinstance(call.shape, list):
        return walk.fallback(call)
    dim_index = {"split": 2, "split_with_sizes": 2, "chunk": 2, "unbind": 1, "tensor_split": 2}
    axis = x.axis(int(call.arg(dim_index[call.op], "dim", 0)))
    if call.op != "unbind" and axis in x.head_axes.values():  # whole heads split off
        return _split_heads(walk, call, x, axis)
    x = _heads_whole(walk, call, x, axis, len(call.shape) == 1)
    outputs, position = [], 0
    for shape in call.shape:
        shape = tuple(shape)
        axes = {}
        for a, member in x.axes.items():
            if a != axis:
                axes[a if call.op != "unbind" or a < axis else a - 1] = member
            elif call.op != "unbind":
                narrowed = _narrow(walk, call, member, position, position + shape[axis])
                if narrowed is not None:
                    axes[a] = narrowed
        if call.op == "unbind" and axis in x.axes:
            walk.facts.block(x.axes[axis], ALL_FAMILIES, f"{call.where} unbinds features")
        position += shape[axis] if call.op != "unbind" else 1
        outputs.append(TensorValue(shape, axes, _kept_heads(x, axes)))
    return outputs


def _split_heads(walk: Walk, call: OpCall, x: TensorValue, axis: int) -> list[TensorValue]:
    """A split along the head axis ``axis`` of ``x``: each part keeps its whole heads
    (:func:`_some_heads`); when one part cannot, every head-split member is blocked."""
    parts, position = [], 0
    for shape in call.shape:
        stop = position + tuple(shape)[axis]
        parts.append(_some_heads(x, axis, position, stop) if stop > position else None)
        position = stop
    if any(p is None and tuple(s)[axis] for p, s in zip(parts, call.shape, strict=True)):
        x = walk.strip_heads(x, call)
        parts = [x] * len(parts)
    outputs = []
    for part, shape in zip(parts, call.shape, strict=True):
        if part is None:  # an empty part: no features
            outputs.append(TensorValue(tuple(shape)))
            continue
        outputs.append(TensorValue(tuple(shape), dict(part.axes), dict(part.head_axes)))
    return outputs


@rule("getitem", heads=True)
def getitem(walk: Walk, call: OpCall) -> Any:
    container, index = call.args[0], call.args[1]
    if isinstance(container, (list, tuple)):
        return container[index]
    return blank(call.shape)


@rule("roll")
def roll(walk: Walk, call: OpCall) -> Any:
    """Shifts positions along axes (Swin's shifted windows, ``torch.roll`` over the token grid):
    features on other axes pass unchanged; a member on a rolled axis, or every member of a
    roll of the flattened tensor (no ``dims``), is blocked."""
    x = call.args[0]
    if not isinstance(x, TensorValue):
        return walk.fallback(call)
    dims = call.arg(2, "dims", [])
    dims = list(dims) if isinstance(dims, (list, tuple)) else [dims]
    rolled = {x.axis(int(d)) for d in dims} if dims else set(x.axes)
    if not rolled & set(x.axes):
        return x
    for axis in rolled & set(x.axes):
        walk.facts.block(x.axes[axis], ALL_FAMILIES, f"{call.where} rolls along it")
    axes = {a: m for a, m in x.axes.items() if a not in rolled}
    return TensorValue(x.shape, axes, _kept_heads(x, axes))
