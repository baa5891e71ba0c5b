"""Many matrix symmetries of one layer acted with as one: the per-head groups of attention.

A transformer layer has one query–key and one value–output group per head (144 each in
GPT-2-small), each a :class:`~paramsym.symmetry.gl.MatrixNeuronSymmetry` acting on one head's
slice of the same projections. Acting with them one by one costs a few small tensor
operations per head and per slot; :class:`MatrixBatch` stacks the heads' elements into one
``(n, w, w)`` tensor and each slot's regions into one ``(n, w, rest)`` tensor, so that an
element, a move, a covector transport or an algebra pullback of the whole layer is a handful
of batched operations (``torch.linalg.matrix_exp``, ``inv_ex``, ``bmm``) whatever the number
of heads.

Members batch together when they are acting-in-place matrix symmetries of the same class and
width whose slots correspond one to one (same parameter, axis and power; one neuron per entry)
and whose regions do not overlap (:func:`batch_symmetries`). The members' regions are then
disjoint, so their actions commute and acting with all of them at once is acting with each in
turn. Elements of a batch are pairs ``(G, G⁻¹)`` of ``(n, w, w)`` tensors (the inverse is
computed once per element, checked, and reused by the move and by the transport).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Hashable, Iterable, Mapping, MutableMapping, Sequence
from typing import Literal

import torch
from torch import Tensor

from paramsym.core.linalg import SMALL_EXP_NORM, small_exp_pair
from paramsym.errors import InvalidArgumentError, InvalidGroupElementError
from paramsym.symmetry.base import GroupElement, Region, Symmetry
from paramsym.symmetry.gl import MatrixNeuronSymmetry, matrix_pairing

BatchElement = tuple[Tensor, Tensor]
"""``(G, G⁻¹)``, each of shape ``(n, w, w)``: one element per member."""


class MatrixBatch:
    """Members of one class acting on parallel, disjoint regions, acted with as one.

    Args:
        members: at least two :class:`MatrixNeuronSymmetry` that :func:`batchable` accepts.

    Attributes:
        members: the symmetries, in order; element ``i`` of a batch element is member ``i``'s.
        width: the members' width w.
        parameter_names: every parameter a member moves.
    """

    acts_in_place = True
    linear = True

    def __init__(self, members: Sequence[MatrixNeuronSymmetry]) -> None:
        if (
            len(members) < 2
            or not all(batchable(m) and _kind(m) == _kind(members[0]) for m in members)
            or not _disjoint(r for m in members for r in m.touched_regions)
        ):
            raise InvalidArgumentError(
                "MatrixBatch: needs two or more matrix symmetries of one class and width with "
                "matching slots on disjoint regions (see batch_symmetries)"
            )
        self.members = list(members)
        first = self.members[0]
        self.width = first.width
        self.name = f"{first.family}×{len(self.members)}[{first.site}…]"
        self.parameter_names = tuple(
            dict.fromkeys(n for m in self.members for n in m.parameter_names)
        )
        self.dim = sum(m.dim for m in self.members)
        # per slot position: (parameter, axis, power, the members' offsets along the axis)
        self._slots: list[tuple[str, int, float, list[int]]] = [
            (slot.name, slot.axis, slot.power, [m.slots[k].offset or 0 for m in self.members])
            for k, slot in enumerate(first.slots)
        ]

    @property
    def slot_offsets(self) -> list[tuple[str, int, list[int]]]:
        """Per slot position of the members: (parameter, axis, the members' offsets along the
        axis); each member multiplies ``width`` entries of the axis from its offset."""
        return [(name, axis, offsets) for name, axis, _, offsets in self._slots]

    @property
    def touched_regions(self) -> frozenset[Region]:
        return frozenset(r for m in self.members for r in m.touched_regions)

    def __repr__(self) -> str:
        return f"MatrixBatch({self.name!r}, members={len(self.members)}, width={self.width})"

    # -- elements --------------------------------------------------------------------------
    def algebra(self, xis: Sequence[Tensor]) -> Tensor:
        """The members' algebra matrices for coordinates ``xis`` (one per member), ``(n, w, w)``."""
        return torch.stack(
            [m._algebra(m.check_xi(xi)) for m, xi in zip(self.members, xis, strict=True)]
        )

    def element(
        self, xis: Sequence[Tensor], parameterization: Literal["exp", "first_order"]
    ) -> BatchElement:
        """``(G, G⁻¹)`` with ``G = exp(M(ξ))`` (or ``I + M(ξ)``), checked invertible. A small
        step's exponentials come from one Taylor series
        (:func:`~paramsym.core.linalg.small_exp_pair`: the inverse is exp(−M), exact to
        rounding); larger ones from ``matrix_exp`` and an inversion checked by its residual."""
        generators = self.algebra(xis)
        if parameterization == "exp":
            norm = float(generators.abs().sum(dim=-2).amax())
            if norm <= SMALL_EXP_NORM:  # a teleport step: both exponentials from one series
                g, inverse = small_exp_pair(generators)
                return g, self._checked(g, inverse, residual=False)
            g = torch.linalg.matrix_exp(generators)
        else:
            g = torch.eye(self.width, dtype=generators.dtype, device=generators.device) + generators
        work = g.to(torch.promote_types(g.dtype, torch.float32))
        inverse, info = torch.linalg.inv_ex(work)
        return g, self._checked(g, inverse.to(g.dtype), info=info)

    def _checked(
        self, g: Tensor, inverse: Tensor, residual: bool = True, info: Tensor | None = None
    ) -> Tensor:
        """``inverse``, after raising :class:`InvalidGroupElementError` naming the first member
        whose element or inverse is not finite, whose inversion failed (``info``), or (with
        ``residual``) for which ‖g g⁻¹ − I‖_max exceeds √eps·w (the test of
        ``gl._checked_inverse``, batched)."""
        finite = torch.isfinite(g).flatten(1).all(dim=1) & torch.isfinite(inverse).flatten(1).all(
            dim=1
        )
        error = torch.zeros(len(self.members), dtype=g.dtype, device=g.device)
        if residual:
            work = g.to(torch.promote_types(g.dtype, torch.float32))
            eye = torch.eye(self.width, dtype=work.dtype, device=g.device)
            error = (work @ inverse.to(work.dtype) - eye).abs().flatten(1).amax(dim=1).to(g.dtype)
        good = finite & (error <= self.width * torch.finfo(g.dtype).eps ** 0.5)
        if info is not None:
            good = good & (info == 0)
        if not bool(good.all()):
            bad = int((~good).nonzero()[0, 0])
            raise InvalidGroupElementError(
                f"{self.members[bad].name}: the group element is not finite or numerically "
                f"singular (‖g g⁻¹ − I‖_max = {float(error[bad]):.2e})"
            )
        return inverse

    @staticmethod
    def inverse(g: GroupElement) -> BatchElement:
        forward, backward = _pair(g)
        return backward, forward

    @staticmethod
    def compose(g1: GroupElement, g2: GroupElement) -> BatchElement:
        """g1·g2 member by member (act with g2 first)."""
        (a, a_inv), (b, b_inv) = _pair(g1), _pair(g2)
        return a @ b, b_inv @ a_inv

    # -- regions ---------------------------------------------------------------------------
    def _strided(self, t: Tensor, axis: int, offsets: list[int]) -> Tensor | None:
        """The members' regions of ``t`` along ``axis`` as a view of ``t`` with that axis split
        into (member, entry), where the offsets are evenly spaced (heads side by side, or
        every k-th head of a key/value group); ``None`` otherwise."""
        n, w = len(offsets), self.width
        step = offsets[1] - offsets[0]
        if step < w or any(b - a != step for a, b in itertools.pairwise(offsets)):
            return None
        size, stride = list(t.shape), list(t.stride())
        size[axis : axis + 1] = [n, w]
        stride[axis : axis + 1] = [step * stride[axis], stride[axis]]
        return t.as_strided(size, stride, t.storage_offset() + offsets[0] * t.stride(axis))

    def _index(self, offsets: list[int], device: torch.device) -> Tensor:
        return torch.cat([torch.arange(o, o + self.width) for o in offsets]).to(device)

    def _rows(self, t: Tensor, axis: int, offsets: list[int]) -> Tensor:
        """The members' regions of ``t``, shape ``(n, w, rest)`` (a copy)."""
        view = self._strided(t, axis, offsets)
        if view is None:
            view = t.index_select(axis, self._index(offsets, t.device))
            view = view.unflatten(axis, (len(offsets), self.width))
        return view.movedim((axis, axis + 1), (0, 1)).reshape(len(offsets), self.width, -1)

    def _apply(self, t: Tensor, axis: int, offsets: list[int], matrices: Tensor) -> None:
        """Each member's region of ``t`` ← its matrix · region along ``axis``, in place."""
        strided = self._strided(t, axis, offsets)
        if strided is not None and axis == t.dim() - 1 and t.dim() == 2:
            # columns of a matrix (heads side by side along its last axis): the product in the
            # tensor's own layout, (n, rows, w) · Mᵀ, written back through the view (no copy
            # of the region into (n, w, rows) and back: a third of a transport step)
            columns = strided.movedim(1, 0)
            columns.copy_(columns @ matrices.to(t.dtype).transpose(1, 2))
            return
        if strided is None:
            index = self._index(offsets, t.device)
            region = t.index_select(axis, index).unflatten(axis, (len(offsets), self.width))
        else:
            region = strided
        moved = region.movedim((axis, axis + 1), (0, 1))
        out = matrices.to(t.dtype) @ moved.reshape(len(offsets), self.width, -1)
        out = out.reshape(moved.shape).movedim((0, 1), (axis, axis + 1))
        if strided is not None:  # a view of t: write through it
            strided.copy_(out)
        else:
            t.index_copy_(axis, index, out.flatten(axis, axis + 1))

    def act_in_place(
        self,
        params: MutableMapping[str, Tensor],
        g: GroupElement,
        owned: set[str] | None = None,
    ) -> None:
        """Each member's action by its element, written into ``params``' tensors: slots of
        power +1 become ``G · T``, those of power −1 ``G⁻ᵀ · T``. ``owned``: as for
        :meth:`NeuronSymmetry.act_in_place <paramsym.symmetry.base.NeuronSymmetry.act_in_place>`
        (a tensor the caller does not own is copied first)."""
        forward, backward = _pair(g)
        for name, axis, power, offsets in self._slots:
            matrices = forward if power > 0 else backward.transpose(1, 2)
            self._write(params, name, owned, axis, offsets, matrices)

    def pull_back_in_place(
        self,
        covector: MutableMapping[str, Tensor],
        g: GroupElement,
        owned: set[str] | None = None,
    ) -> None:
        """m ← A_gᵀ m (the transpose of :meth:`act_in_place`'s linear map), in place (the
        parameters ``covector`` lacks are skipped). With g⁻¹ this carries a gradient along a
        move by g."""
        forward, backward = _pair(g)
        for name, axis, power, offsets in self._slots:
            if name in covector:
                matrices = forward.transpose(1, 2) if power > 0 else backward
                self._write(covector, name, owned, axis, offsets, matrices)

    def _write(
        self,
        tensors: MutableMapping[str, Tensor],
        name: str,
        owned: set[str] | None,
        axis: int,
        offsets: list[int],
        matrices: Tensor,
    ) -> None:
        """``tensors[name]``'s regions ← matrices · region (:meth:`_apply`). Where the members'
        regions are the whole tensor's leading rows, side by side (a Llama's q/k/v projections
        by heads) and the caller does not own it, the product is the new tensor: no copy of
        it first and no write back."""
        t = tensors[name]
        n, w = len(offsets), self.width
        if (
            owned is not None
            and name not in owned
            and axis == 0
            and t.is_contiguous()
            and n * w == t.shape[0]
            and offsets == list(range(0, n * w, w))
        ):
            tensors[name] = (matrices.to(t.dtype) @ t.reshape(n, w, -1)).reshape(t.shape)
            owned.add(name)
            return
        self._apply(_owned(tensors, name, owned), axis, offsets, matrices)

    def pullbacks(
        self, params: Mapping[str, Tensor], cotangent: Mapping[str, Tensor]
    ) -> list[Tensor]:
        """T_sᵀ c for every member (:meth:`Symmetry.cotangent_pullback`), batched: the tangent
        of a slot under M is ``M P`` (power +1) or ``−Mᵀ P`` (power −1) for the slot's region P
        of ``params``, so ⟨c, tangent⟩ = ⟨M, Σ₊ C Pᵀ − Σ₋ P Cᵀ⟩ with C the region of c
        (:func:`~paramsym.symmetry.gl.matrix_pairing`); the algebra coordinates' rates are
        that matrix pulled back through each member's ``_algebra`` (a reshape for GL)."""
        total: Tensor | None = None
        for name, axis, power, offsets in self._slots:
            if name not in params or name not in cotangent:
                continue
            p = self._rows(params[name], axis, offsets)
            same = cotangent[name] is params[name]
            c = p if same else self._rows(cotangent[name], axis, offsets).to(p.dtype)
            term = matrix_pairing(p, c, power)
            total = term if total is None else total + term
        if total is None:  # none of its tensors given: every rate zero
            ref = next(iter(params.values()), torch.zeros(()))
            total = ref.new_zeros(len(self.members), self.width, self.width)
        return [m._algebra_adjoint(part) for m, part in zip(self.members, total, strict=True)]


def _owned(tensors: MutableMapping[str, Tensor], name: str, owned: set[str] | None) -> Tensor:
    """``tensors[name]``, replaced by a copy first unless the caller owns it."""
    if owned is not None and name not in owned:
        tensors[name] = tensors[name].clone()
        owned.add(name)
    return tensors[name]


def _pair(g: GroupElement) -> BatchElement:
    """``g`` as a batch element ``(G, G⁻¹)``, or an error naming what it is."""
    if not (isinstance(g, tuple) and len(g) == 2 and all(isinstance(t, Tensor) for t in g)):
        raise InvalidArgumentError(
            "MatrixBatch: an element is a pair (G, G⁻¹) of (n, w, w) tensors, got "
            f"{type(g).__name__}"
        )
    return g[0], g[1]  # type: ignore[return-value]


def batchable(s: Symmetry) -> bool:
    """Whether ``s`` can join a :class:`MatrixBatch`: a matrix neuron symmetry acting in place
    (linear, data-free, slot by slot) whose slots each cover ``width`` entries from an
    offset."""
    return (
        isinstance(s, MatrixNeuronSymmetry)
        and s.acts_in_place
        and s.dim > 0
        and all(slot.offset is not None and slot.block == 1 for slot in s.slots)
    )


def _kind(s: MatrixNeuronSymmetry) -> Hashable:
    """What members of one batch share: class, width and each slot's parameter, axis, power."""
    return type(s), s.width, tuple((slot.name, slot.axis, slot.power) for slot in s.slots)


def _disjoint(regions: Iterable[Region]) -> bool:
    """Whether no two of ``regions`` overlap (sorted by start on each parameter axis)."""
    by_axis: dict[tuple[str, int], list[tuple[int, float]]] = {}
    for name, axis, start, stop in regions:
        by_axis.setdefault((name, axis), []).append((start, math.inf if stop is None else stop))
    for intervals in by_axis.values():
        intervals.sort()
        if any(b[0] < a[1] for a, b in itertools.pairwise(intervals)):
            return False
    return True


def batch_symmetries(symmetries: Sequence[Symmetry]) -> list[Symmetry | MatrixBatch]:
    """``symmetries`` with every set of two or more that batch together replaced by one
    :class:`MatrixBatch`, placed where its first member was; the others stay as they are.

    A member joins the first open batch of its kind (same class, width and slots) whose
    members' regions it does not touch. Acting with a batch is acting with its members in
    turn, at the batch's place in the order.
    """
    groups: list[list[Symmetry]] = []
    regions: list[list[Region]] = []
    open_groups: dict[Hashable, list[int]] = {}
    for s in symmetries:
        if not batchable(s):
            groups.append([s])
            regions.append([])
            continue
        mine = list(s.touched_regions)
        candidates = open_groups.setdefault(_kind(s), [])  # type: ignore[arg-type]
        for index in candidates:
            if _disjoint([*regions[index], *mine]):
                groups[index].append(s)
                regions[index].extend(mine)
                break
        else:
            candidates.append(len(groups))
            groups.append([s])
            regions.append(mine)
    return [
        MatrixBatch(group) if len(group) > 1 else group[0]  # type: ignore[arg-type]
        for group in groups
    ]
