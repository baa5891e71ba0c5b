"""Gram surrogates: the transported gradient of a tensor reduced to what its actions read.

The transport path (:class:`~paramsym.teleportation.ascent.TransportAscent`) carries v = ∇L
through every step's group elements and, for J = w‖v‖² (one weight w, ‖∇L‖² itself), needs
of v only the step rates T_sᵀ(2wv) at v and the norms ‖v_k‖². Where every action moving a
tensor multiplies it along one axis a, region by region (a matrix B on each head's or unit's
rows: the per-head query–key and value–output maps; a diagonal one: rescalings), with the
regions disjoint, each action reads only the Gram matrix V Vᵀ of its region V (``width ×
rest``, the other axes flattened): its rate is the pairing ⟨A(M) V, V⟩ = ⟨A(M), V Vᵀ⟩, and
the transport maps V Vᵀ to B V Vᵀ Bᵀ. So V can be replaced by any L with L Lᵀ = V Vᵀ: a
``width × width`` triangle from the QR of Vᵀ for a matrix action, the row norms (one column)
for a diagonal one, whose actions read only the Gram's diagonal. The rest of the tensor
(rows no action moves) is a constant of ‖v_k‖².

:func:`gram_surrogates` builds these once per teleport, after its gradient; the steps then
transport and pair ``width``-column surrogates instead of the tensors: on GPT-2-small, the
FFN's input projections (moved only by the LayerNorm rescalings) and the attention output
projections (moved only by the per-head value–output maps) shrink from 768 × 3072 and
768 × 768 to 768 × 1 and 768 × 64. Tensors moved along two axes (a packed query–key–value
projection: heads on one axis, a norm's rescaling on the other), by affine, data-dependent or
whole-tensor actions, or read by an absorbed translation
(:attr:`~paramsym.symmetry.Symmetry.reads`), are kept whole. The result is exact: the same
rates and J as the whole tensors, to rounding (tests/test_teleport_transport.py).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence

import torch
from torch import Tensor

from paramsym.core.linalg import float64_dot, sum_of_squares
from paramsym.core.params import Params
from paramsym.symmetry.base import NeuronSymmetry
from paramsym.symmetry.batched import MatrixBatch
from paramsym.symmetry.gl import MatrixNeuronSymmetry
from paramsym.symmetry.scaling import PositiveScaling
from paramsym.teleportation.orbit import Unit

Row = tuple[str, int, int, int, bool]
"""(parameter, axis, first index, width, matrix action) of one moved region."""


def moved_regions(unit: Unit) -> list[Row] | None:
    """The regions ``unit`` multiplies along an axis, or ``None`` for an action that does not
    act that way (affine, data-dependent, whole-tensor scales, blocks of entries per
    neuron)."""
    if isinstance(unit, MatrixBatch):
        return [
            (name, axis, offset, unit.width, True)
            for name, axis, offsets in unit.slot_offsets
            for offset in offsets
        ]
    if not isinstance(unit, NeuronSymmetry) or not unit.acts_in_place:
        return None
    if any(slot.block != 1 for slot in unit.slots):
        return None
    if isinstance(unit, MatrixNeuronSymmetry):
        matrix = True
    elif isinstance(unit, PositiveScaling) and unit.per_neuron:
        matrix = False
    else:
        return None
    return [(s.name, s.axis, s.offset or 0, unit.width, matrix) for s in unit.slots]


def regions_by_tensor(units: Sequence[Unit]) -> dict[str, list[tuple[int, Row]]]:
    """The regions ``units`` move, by tensor, each with its unit's position in ``units``;
    without the tensors that any unit moves in another way (:func:`moved_regions` is
    ``None``) or reads (:attr:`~paramsym.symmetry.Symmetry.reads`: an absorbed translation's
    transport adds −(∂b/∂θ_r)ᵀv to their gradient and its rate pairs their whole gradient, so
    neither a Gram surrogate nor two factors of it would do)."""
    by_tensor: dict[str, list[tuple[int, Row]]] = {}
    refused: set[str] = set()
    for position, unit in enumerate(units):
        refused.update(getattr(unit, "reads", ()))
        rows = moved_regions(unit)
        if rows is None:
            refused.update(unit.parameter_names)
            continue
        for row in rows:
            by_tensor.setdefault(row[0], []).append((position, row))
    return {name: rows for name, rows in by_tensor.items() if name not in refused}


def gram_surrogates(
    units: Sequence[Unit], gradient: Mapping[str, Tensor]
) -> tuple[Params, dict[str, float]]:
    """(v with each eligible tensor replaced by its surrogate, ‖v_k‖² − ‖surrogate‖² of
    those tensors): see the module docstring. ``units``: the actions that move (never the
    translations, which a transport never moves)."""
    out, constants = dict(gradient), {}
    for name, entries in regions_by_tensor(units).items():
        rows = [row for _, row in entries]
        v = gradient.get(name)
        if v is None or v.dim() < 2 or len({r[1] for r in rows}) != 1:
            continue
        axis = rows[0][1]
        spans = sorted((start, start + width) for _, _, start, width, _ in rows)
        if any(b[0] < a[1] for a, b in itertools.pairwise(spans)):
            continue  # overlapping regions: no block-diagonal transport
        columns = max((width for *_, width, matrix in rows if matrix), default=1)
        moved = v.movedim(axis, 0).reshape(v.shape[axis], -1)
        if columns >= moved.shape[1]:
            continue  # no smaller than the tensor
        surrogate = moved.new_zeros(moved.shape[0], columns)
        covered = torch.zeros(moved.shape[0], dtype=torch.bool, device=v.device)
        for _, _, start, width, matrix in rows:
            block = moved[start : start + width]
            if matrix:  # L = Rᵀ from Vᵀ = Q R: L Lᵀ = V Vᵀ
                work = block.T.to(torch.promote_types(v.dtype, torch.float32))
                surrogate[start : start + width, :width] = torch.linalg.qr(work, mode="r")[1].T
            else:
                surrogate[start : start + width, 0] = sum_of_squares(block, [1]).sqrt()
            covered[start : start + width] = True
        rest = moved[~covered]
        constants[name] = float(torch.sum(rest.double() ** 2)) if rest.numel() else 0.0
        shape = [moved.shape[0], columns] + [1] * (v.dim() - 2)
        out[name] = surrogate.reshape(shape).movedim(0, axis).contiguous()
    return out, constants


def squared_norm(gradient: Mapping[str, Tensor], constants: Mapping[str, float]) -> float:
    """‖v‖² of a gradient some of whose tensors are surrogates (:func:`gram_surrogates`)."""
    return math.fsum(float64_dot(t, t) for t in gradient.values()) + math.fsum(constants.values())
