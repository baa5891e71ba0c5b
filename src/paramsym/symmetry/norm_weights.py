"""A LayerNorm's shift absorbed by readers that have no bias (GPT-Neo, Falcon).

A LayerNorm writes ``y = γ ⊙ x̂ + β`` with ``1ᵀx̂ = 0`` for every input. A linear map reading y,
``W y``, sees x̂ only through ``W diag(γ)`` on the hyperplane ``1ᵀx̂ = 0``, so adding
``u (1/γ)ᵀ`` to W changes its output by ``u (1/γ)ᵀ(γ ⊙ x̂ + β) = u S`` with ``S = Σᵢ βᵢ/γᵢ``:
a constant vector, the same for every input. Where the reader has a bias, the bias takes it
back (:class:`~paramsym.symmetry.absorption.NormReaderTranslation`); without one, two families
remain (notes 006 §3, found by the completeness audit on GPT-Neo):

* :class:`NormShiftIntoWeights` — ``(β, W_r) ↦ (β + δ, W_r − (W_r δ)(1/γ)ᵀ / S')`` with
  ``S' = Σᵢ (β + δ)ᵢ/γᵢ``: each reader's output ``W_r γ⊙x̂ + W_r β`` is kept exactly (the
  shift ``W_r δ`` of β cancels against the ``−W_r δ`` the weight's change brings). The group
  is (ℝ^d, +) (an element δ moves β to β + δ, and the readers' weights to the one matrix of
  the form ``W_r + u (1/γ)ᵀ`` that keeps ``W_r β`` at the new β); it is defined where
  ``S' ≠ 0``. Not affine in θ: W's change is a product of W with a function of β.
* :class:`NormRowShift` — the rows of a reader that make attention keys, moved by
  ``u (1/γ)ᵀ``, shift every key by ``u S``, which the softmax ignores (as a key bias:
  :mod:`paramsym.symmetry.absorption`); the rows that make values shift every value by
  ``u S``, which reaches the output projection as ``W_o u S`` (attention rows sum to one) and
  its bias takes back. A translation of the moved rows (and the output projection's bias) by
  amounts read off γ, β and W_o (:attr:`~paramsym.symmetry.Symmetry.shifts_by_reads`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
from torch import Tensor

from paramsym.core.params import Params, check_finite
from paramsym.errors import InvalidArgumentError, InvalidGroupElementError, ShapeError
from paramsym.symmetry.absorption import Reader, _get, _Shifts
from paramsym.symmetry.base import GroupElement, Region
from paramsym.symmetry.translation import TranslationGroup


def _inverse_gamma(params: Mapping[str, Tensor], weight: str | None, width: int, owner: str,
                   like: Tensor) -> Tensor:  # fmt: skip
    if weight is None:
        return torch.ones(width, dtype=like.dtype, device=like.device)
    gamma = _get(params, weight, owner)
    if tuple(gamma.shape) != (width,):
        raise ShapeError(f"{owner}: '{weight}' has shape {tuple(gamma.shape)}, expected ({width},)")
    return 1.0 / gamma


def _rank_one(weight: Tensor, axis: int, left: Tensor, right: Tensor) -> Tensor:
    """``left ⊗ right`` laid out like ``weight``: ``right`` along its input axis ``axis``."""
    return torch.outer(left, right) if axis == 1 else torch.outer(right, left)


class NormShiftIntoWeights(TranslationGroup):
    """``(β, W_r) ↦ (β + δ, W_r − (W_r δ)(1/γ)ᵀ / Σ((β + δ)/γ))`` for a LayerNorm and every
    linear map reading its whole output (module docstring).

    Args:
        weight: the norm's γ (``None``: no elementwise scale).
        bias: the norm's β.
        readers: the linear maps reading the output (``Reader.bias`` is not used: a bias is
            left as it is); each weight's ``axis`` is its input axis, of size ``width``.
        width: d.
        site: label used in the name.
    """

    translation = False

    def __init__(
        self, weight: str | None, bias: str, readers: Sequence[Reader], *, width: int, site: str
    ) -> None:
        if not readers:
            raise InvalidArgumentError(f"norm_shift_weights[{site}]: needs at least one reader")
        super().__init__(
            name=f"norm_shift_weights[{site}]",
            group=f"R^{width}",
            dim=width,
            linear=False,
            affine=False,
        )
        self.weight, self.bias, self.width = weight, bias, int(width)
        self.readers = tuple(readers)

    @property
    def parameter_names(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys([self.bias, *(r.weight for r in self.readers)]))

    @property
    def reads(self) -> tuple[str, ...]:
        return (self.weight,) if self.weight is not None else ()

    @property
    def touched_regions(self) -> frozenset[Region]:
        regions: set[Region] = {(self.bias, 0, 0, None)}
        regions |= {(r.weight, a, 0, None) for r in self.readers for a in (0, 1)}
        return frozenset(regions)

    def _moved(self, params: Mapping[str, Tensor], delta: Tensor) -> dict[str, Tensor]:
        beta = _get(params, self.bias, self.name)
        if tuple(beta.shape) != (self.width,):
            raise ShapeError(
                f"{self.name}: '{self.bias}' has shape {tuple(beta.shape)}, expected "
                f"({self.width},)"
            )
        delta = delta.to(dtype=beta.dtype, device=beta.device)
        inverse = _inverse_gamma(params, self.weight, self.width, self.name, beta)
        moved_beta = beta + delta
        total = (moved_beta * inverse).sum()
        scale = (moved_beta.abs() * inverse.abs()).sum()
        if not bool(total.abs() > 64 * torch.finfo(total.dtype).eps * scale):
            raise InvalidGroupElementError(
                f"{self.name}: the element moves β to where Σ β/γ = 0, where the readers "
                "cannot absorb it; the action is defined where Σ (β + δ)/γ ≠ 0"
            )
        out = {self.bias: moved_beta}
        for reader in self.readers:
            w = _get(params, reader.weight, self.name)
            if w.ndim != 2 or w.shape[reader.axis] != self.width:
                raise ShapeError(
                    f"{self.name}: reader '{reader.weight}' has shape {tuple(w.shape)}, "
                    f"expected {self.width} inputs on axis {reader.axis}"
                )
            taken = torch.tensordot(w, delta, dims=([reader.axis], [0]))
            out[reader.weight] = w - _rank_one(w, reader.axis, taken, inverse / total)
        return out

    def act(self, params: Mapping[str, Tensor], g: GroupElement, x: Tensor | None = None) -> Params:
        moved = self._moved(params, self.check_element(g))
        check_finite(((n, params[n]) for n in (*moved, *self.reads)), self.name)
        return {k: moved.get(k, t) for k, t in params.items()}

    def tangent(self, params: Mapping[str, Tensor], xi: Tensor, x: Tensor | None = None) -> Params:
        """``(ξ, −(W_r ξ)(1/γ)ᵀ / S)``, S = Σ β/γ."""
        xi = self.check_xi(xi)
        beta = _get(params, self.bias, self.name)
        xi = xi.to(dtype=beta.dtype, device=beta.device)
        inverse = _inverse_gamma(params, self.weight, self.width, self.name, beta)
        total = (beta * inverse).sum()
        out = {k: torch.zeros_like(t) for k, t in params.items()}
        out[self.bias] = xi.clone()
        for reader in self.readers:
            w = _get(params, reader.weight, self.name)
            taken = torch.tensordot(w, xi, dims=([reader.axis], [0]))
            out[reader.weight] = out[reader.weight] - _rank_one(
                w, reader.axis, taken, inverse / total
            )
        return out


class NormRowShift(_Shifts):
    """``W_r[rows] += u (1/γ)ᵀ`` on rows of a bias-free linear map reading a LayerNorm's
    output, shifting its outputs on those rows by ``u S`` (S = Σ β/γ), and each absorber's
    bias ``b_a −= W_a[:, cols] u S`` (module docstring).

    Args:
        weight, bias: the norm's γ (``None``: none) and β.
        reader: the map's weight, its input ``axis`` (of size ``width``); ``offset``: the first
            of the moved rows on the other axis (``Reader.bias`` unused).
        length: n, the number of moved rows.
        absorbers: the linear maps whose biases take the shift back (empty: the shift is
            flat, keys before a softmax); each weight's ``axis`` is its input axis and its
            columns ``[offset, offset + n)`` read the shifted features.
        width: d.
        family, site: the name is ``"<family>[<site>]"``.
    """

    translation = False

    def __init__(
        self,
        weight: str | None,
        bias: str,
        reader: Reader,
        length: int,
        absorbers: Sequence[Reader] = (),
        *,
        width: int,
        family: str,
        site: str,
    ) -> None:
        if any(a.bias is None for a in absorbers):
            raise InvalidArgumentError(f"{family}[{site}]: every absorber needs a bias")
        super().__init__(
            name=f"{family}[{site}]", group=f"R^{length}", dim=length, linear=False, affine=False
        )
        self.weight, self.bias, self.reader = weight, bias, reader
        self.absorbers, self.width = tuple(absorbers), int(width)

    @property
    def parameter_names(self) -> tuple[str, ...]:
        return tuple(
            dict.fromkeys([self.reader.weight, *(a.bias for a in self.absorbers if a.bias)])
        )

    @property
    def reads(self) -> tuple[str, ...]:
        names = [self.weight, self.bias, *(a.weight for a in self.absorbers)]
        return tuple(dict.fromkeys(n for n in names if n is not None))

    @property
    def touched_regions(self) -> frozenset[Region]:
        regions: set[Region] = {(self.reader.weight, a, 0, None) for a in (0, 1)}
        regions |= {(a.bias, 0, 0, None) for a in self.absorbers if a.bias}
        return frozenset(regions)

    def _changes(self, params: Mapping[str, Tensor], v: Tensor) -> dict[str, Tensor]:
        w = _get(params, self.reader.weight, self.name)
        rows = 1 - self.reader.axis
        start = self.reader.offset
        if (
            w.ndim != 2
            or w.shape[self.reader.axis] != self.width
            or (w.shape[rows] < start + self.dim)
        ):
            raise ShapeError(
                f"{self.name}: '{self.reader.weight}' has shape {tuple(w.shape)}, expected "
                f"{self.width} inputs on axis {self.reader.axis} and rows from {start} to "
                f"{start + self.dim}"
            )
        beta = _get(params, self.bias, self.name)
        inverse = _inverse_gamma(params, self.weight, self.width, self.name, beta)
        v = v.to(dtype=w.dtype, device=w.device)
        u = torch.zeros(w.shape[rows], dtype=w.dtype, device=w.device)
        u = torch.cat([u[:start], v, u[start + self.dim :]])
        changes = {self.reader.weight: _rank_one(w, self.reader.axis, u, inverse)}
        shift = v * (beta * inverse).sum()
        for absorber in self.absorbers:
            assert absorber.bias is not None
            wa = _get(params, absorber.weight, self.name)
            block = wa.narrow(absorber.axis, absorber.offset, self.dim)
            taken = torch.tensordot(shift.to(wa.dtype), block, dims=([0], [absorber.axis]))
            changes[absorber.bias] = changes.get(absorber.bias, 0) - taken
        return changes
