"""The values the graph walk propagates: tensors with feature members, and parameters.

A :class:`TensorValue` knows its shape and which of its axes hold features of a space (a
:class:`~paramsym.symmetry.graph.facts.Member`); an axis without a member holds features no
symmetry moves (the model's input, the result of an op paramsym does not know). A
:class:`ParamValue` is a parameter or buffer, possibly seen through layout ops
(``weight.t()``), with the original axis of each of its axes. Layout ops (views, transposes,
slices) move members between axes without creating spaces: :func:`reshape_axis` and friends.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from paramsym.symmetry.graph.facts import Member


@dataclass(frozen=True)
class TensorValue:
    """A computed tensor: its shape, the member on each feature axis, the head axis of each
    axis whose member is split into heads (``head_axes[features axis] = head axis``), and
    whether it is known to be all zeros (a recurrent layer's default initial state)."""

    shape: tuple[int, ...]
    axes: dict[int, Member] = field(default_factory=dict)
    head_axes: dict[int, int] = field(default_factory=dict)
    zero: bool = False

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def axis(self, axis: int) -> int:
        return axis % self.ndim if self.ndim else 0

    def member(self, axis: int) -> Member | None:
        return self.axes.get(self.axis(axis)) if self.ndim else None


@dataclass(frozen=True)
class ParamValue:
    """A parameter or buffer ``name`` whose axis ``i`` is its original axis ``dims[i]``
    (``None`` for an axis added by ``unsqueeze``/``expand``)."""

    name: str
    shape: tuple[int, ...]
    dims: tuple[int | None, ...]
    buffer: bool = False

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def original(self, axis: int) -> int | None:
        """The parameter's own axis behind axis ``axis`` of this view."""
        return self.dims[axis % self.ndim] if self.ndim else None


Value = TensorValue | ParamValue


def reshape_axis(
    in_shape: tuple[int, ...], out_shape: tuple[int, ...], axis: int, member: Member
) -> tuple[int, Member] | None:
    """Where ``member`` (on ``axis`` of ``in_shape``) lands after a reshape to ``out_shape``.

    Returns ``(out_axis, member)`` when the axis survives whole, possibly merged with the
    axes after it (then each feature is repeated over them: ``block`` grows, as when
    ``Flatten`` turns (C, H, W) into C·H·W), or ``None`` when the features are split or
    merged with axes before them.
    """
    before = math.prod(in_shape[:axis])
    size = in_shape[axis]
    for j in range(len(out_shape)):
        if math.prod(out_shape[:j]) != before or (out_shape[j] == 1 and size != 1):
            continue
        if out_shape[j] == size:
            return j, member
        inner = out_shape[j] // size if size and out_shape[j] % size == 0 else 0
        if inner > 1:
            # merged with following axes whose product is ``inner``
            product, k = 1, axis + 1
            while product < inner and k < len(in_shape):
                product *= in_shape[k]
                k += 1
            if product == inner:
                return j, Member(member.space, member.start, member.stop, member.block * inner)
        return None
    return None


def broadcast_axes(shapes: list[tuple[int, ...]], out_ndim: int) -> list[list[int | None]]:
    """For each operand, the operand axis behind each output axis (right-aligned), or None."""
    table = []
    for shape in shapes:
        offset = out_ndim - len(shape)
        table.append([j - offset if j - offset >= 0 else None for j in range(out_ndim)])
    return table
