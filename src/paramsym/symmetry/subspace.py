"""Readers of a vector confined to an affine subspace: what they add along its complement is lost.

ELECTRA and ALBERT embed tokens in ``e`` dimensions, normalise, and project to the hidden size
``d > e`` before the first block: ``x = P(γ ⊙ x̂ + β) + b_P``. For every input, x lies in the
affine subspace ``x₀ + L`` with ``x₀ = Pβ + b_P`` and ``L = P·diag(γ)·1^⊥`` of dimension
``e − 1`` (x̂ has mean zero), so a linear map reading x, ``W x + b`` (the first block's query,
key and value), can add any ``Z`` that vanishes on L, ``(W, b) ↦ (W + Z, b − Z x₀)``, and its
output is unchanged: ``Z x − Z x₀ = Z (x − x₀) = 0``. The dimension is ``out·(d − dim L)`` per
reader; :class:`~paramsym.symmetry.absorption.NormReaderTranslation` is the case P = I.

The subspace is computed from the parameters that make x (the norm's γ and β, the projections'
weights and biases), which the action reads and leaves fixed (:attr:`~Symmetry.reads`); the
action is a translation of the readers by an amount linear in the group element, so gradients
transport exactly (:mod:`paramsym.symmetry.absorption`). Coordinates: ``Z_r = M_r Fᵀ`` with
``M_r`` of shape (out_r, k), k = d − dim L, and F an orthonormal basis of L⊥: the QR factor of
``Π G``, the projection onto L⊥ of a fixed generic frame G (drawn once from a seeded generator;
any frame in general position gives the same group, and F depends smoothly on the parameters).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from paramsym.errors import InvalidArgumentError, ShapeError
from paramsym.symmetry.absorption import Reader, _get, _Shifts
from paramsym.symmetry.base import Region

FRAME_SEED = 20240611
"""Seed of the fixed generic frame G (module docstring)."""


@dataclass(frozen=True)
class Map:
    """A linear map on the way to the confined vector: weight, its input axis, bias (or
    ``None``)."""

    weight: str
    axis: int
    bias: str | None


@dataclass(frozen=True)
class Average:
    """Attention on the way: the vector is split into ``heads`` equal heads and each head's
    output is an affine combination of its values (softmax rows sum to one), so head h stays
    in the affine subspace of its own rows: the point is kept and the directions become
    block-diagonal, one block of the incoming directions per head (rank at most
    heads · min(rank, head width))."""

    heads: int


class SubspaceReaderTranslation(_Shifts):
    """``(W_r, b_r) ↦ (W_r + M_r Fᵀ, b_r − M_r Fᵀ x₀)`` for every linear map ``r`` reading a
    vector x confined to ``x₀ + L`` (module docstring).

    Args:
        maps: the linear maps that make x, in order (the first reads the norm's output, or an
            unconstrained vector of width ``width``), with an :class:`Average` where x passes
            through attention (ALBERT's first output projection reads the heads' averages of
            values made from the confined stream).
        norm: ``(γ, β)`` of the LayerNorm the first map reads (either may be ``None``), or
            ``None`` when its input is unconstrained.
        readers: the linear maps reading the whole of x (offset 0).
        outputs: each reader's output size.
        width: the width of the first map's input.
        site: label used in the name.
    """

    translation = False

    def __init__(
        self,
        maps: Sequence[Map | Average],
        norm: tuple[str | None, str | None] | None,
        readers: Sequence[Reader],
        outputs: Sequence[int],
        *,
        width: int,
        widths: Sequence[int],
        site: str,
    ) -> None:
        if not maps or not readers or len(outputs) != len(readers) or len(widths) != len(maps):
            raise InvalidArgumentError(
                f"span_reader[{site}]: needs at least one map and one reader, one output size "
                "per reader and one output width per map"
            )
        rank = chain_rank(maps, widths, width - 1 if norm is not None else width)
        self.complement = int(widths[-1]) - rank
        if self.complement < 1:
            raise InvalidArgumentError(
                f"span_reader[{site}]: the vector fills its space (rank {rank} of "
                f"{widths[-1]}): nothing to add along the complement"
            )
        self.maps, self.norm = tuple(maps), norm
        self.readers, self.outputs = tuple(readers), tuple(int(o) for o in outputs)
        self.width, self.widths = int(width), tuple(int(w) for w in widths)
        dim = sum(self.outputs) * self.complement
        super().__init__(
            name=f"span_reader[{site}]", group=f"R^{dim}", dim=dim, linear=False, affine=False
        )
        offset = any(isinstance(m, Map) and m.bias for m in self.maps) or (
            norm is not None and norm[1] is not None
        )
        if offset and any(r.bias is None for r in self.readers):
            raise InvalidArgumentError(
                f"span_reader[{site}]: the vector has an offset, so every reader needs a bias"
            )

    @property
    def parameter_names(self) -> tuple[str, ...]:
        names = [r.weight for r in self.readers] + [r.bias for r in self.readers if r.bias]
        return tuple(dict.fromkeys(n for n in names if n is not None))

    @property
    def reads(self) -> tuple[str, ...]:
        names: list[str | None] = list(self.norm or ())
        for m in self.maps:
            if isinstance(m, Map):
                names += [m.weight, m.bias]
        return tuple(dict.fromkeys(n for n in names if n is not None))

    @property
    def touched_regions(self) -> frozenset[Region]:
        regions = {(r.weight, a, 0, None) for r in self.readers for a in (0, 1)}
        regions |= {(r.bias, 0, 0, None) for r in self.readers if r.bias}
        return frozenset(regions)

    def subspace(self, params: Mapping[str, Tensor]) -> tuple[Tensor, Tensor]:
        """``(x₀, B)``: a point of the subspace x lies in and a basis of its directions (columns),
        from the current parameters."""
        first = _get(params, self._first_weight, self.name)
        dtype, device = first.dtype, first.device
        if self.norm is None:
            basis = torch.eye(self.width, dtype=dtype, device=device)
            point = torch.zeros(self.width, dtype=dtype, device=device)
        else:
            gamma_name, beta_name = self.norm
            centred = torch.eye(self.width, dtype=dtype, device=device) - 1.0 / self.width
            basis = centred[:, :-1]  # e_i − 1/d: a basis of 1^⊥
            if gamma_name is not None:
                basis = _get(params, gamma_name, self.name)[:, None] * basis
            point = (
                _get(params, beta_name, self.name).clone()
                if beta_name is not None
                else torch.zeros(self.width, dtype=dtype, device=device)
            )
        for m, out in zip(self.maps, self.widths, strict=True):
            if isinstance(m, Average):
                basis = _per_head(basis, m.heads)
                continue
            weight = _get(params, m.weight, self.name)
            matrix = weight if m.axis == 1 else weight.T  # (out, in)
            if matrix.ndim != 2 or matrix.shape != (out, point.shape[0]):
                raise ShapeError(
                    f"{self.name}: weight '{m.weight}' has shape {tuple(weight.shape)}, "
                    f"expected a map from {point.shape[0]} to {out} features on axis {m.axis}"
                )
            basis, point = matrix @ basis, matrix @ point
            if m.bias is not None:
                point = point + _get(params, m.bias, self.name)
        return point, basis

    @property
    def _first_weight(self) -> str:
        return next(m.weight for m in self.maps if isinstance(m, Map))

    def frame(self, params: Mapping[str, Tensor]) -> Tensor:
        """F, ``(d, k)``: an orthonormal basis of the complement of the directions of x."""
        _, basis = self.subspace(params)
        d = basis.shape[0]
        generator = torch.Generator().manual_seed(FRAME_SEED + 1000 * d + self.complement)
        fixed = torch.randn(d, self.complement, generator=generator, dtype=torch.float64)
        fixed = fixed.to(dtype=basis.dtype, device=basis.device)
        gram = basis.T @ basis
        projected = fixed - basis @ torch.linalg.solve(gram, basis.T @ fixed)
        return torch.linalg.qr(projected).Q

    def _changes(self, params: Mapping[str, Tensor], v: Tensor) -> dict[str, Tensor]:
        point, _ = self.subspace(params)
        frame = self.frame(params)
        changes: dict[str, Tensor] = {}
        start = 0
        for reader, out in zip(self.readers, self.outputs, strict=True):
            weight = _get(params, reader.weight, self.name)
            size = out * self.complement
            coords = v[start : start + size].to(dtype=weight.dtype, device=weight.device)
            start += size
            step = coords.reshape(out, self.complement) @ frame.T  # (out, d)
            if weight.ndim != 2 or weight.shape[reader.axis] != frame.shape[0]:
                raise ShapeError(
                    f"{self.name}: weight '{reader.weight}' has shape {tuple(weight.shape)}, "
                    f"expected {frame.shape[0]} inputs on axis {reader.axis}"
                )
            changes[reader.weight] = changes.get(reader.weight, 0) + (
                step if reader.axis == 1 else step.T
            )
            if reader.bias is not None:
                changes[reader.bias] = changes.get(reader.bias, 0) - step @ point
        return changes


def _per_head(basis: Tensor, heads: int) -> Tensor:
    """(d, k) directions -> (d, heads·k): head h's rows of every direction, alone (what an
    average within each head can reach)."""
    d, k = basis.shape
    size = d // heads
    blocks = basis.new_zeros(d, heads * k)
    for h in range(heads):
        rows = slice(h * size, (h + 1) * size)
        blocks[rows, h * k : (h + 1) * k] = basis[rows]
    return blocks


def chain_rank(maps: Sequence[Map | Average], widths: Sequence[int], rank: int) -> int:
    """The largest dimension the directions can have after ``maps`` (output ``widths``), from
    ``rank`` at the first map's input."""
    for m, out in zip(maps, widths, strict=True):
        if isinstance(m, Average):
            rank = m.heads * min(rank, int(out) // m.heads)
        rank = min(rank, int(out))
    return rank
