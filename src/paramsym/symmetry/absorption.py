"""Translations that the next map absorbs: the affine families of notes 006 §3.

Each is an action of the additive group (ℝⁿ, +) that leaves the function unchanged exactly, for
every input, found on GPT-2 by the functional-dimension audit (:func:`paramsym.audit`):

* :class:`ParameterTranslation` — fixed directions: parameters the function reads only through
  a sum or a difference. A key bias b_k adds ``q·b_k`` to every score of a query, which the
  softmax ignores, so b_k is flat on its own (not under RoPE, which rotates it by position);
  token and position tables are only ever added, so ``(E_tok + 1cᵀ, E_pos − 1cᵀ)`` keeps every
  sum. ∇L is the same at every point of the orbit (:attr:`Symmetry.translation`).
* :class:`BiasAbsorption` — a vector added before a linear map is absorbed into its bias:
  ``(s, b) ↦ (s + δ, b − W δ)`` for a LayerNorm's β and the maps reading it, or for a value
  bias and the output projection (attention rows sum to one, so a value bias reaches the output
  as ``W_o b_v``); where a residual add also reads the vector (a Post-LN block: BERT), the bias
  of the add's other operand takes back δ itself.
* :class:`NormReaderTranslation` — a LayerNorm's normalised vector x̂ is orthogonal to 1, so a
  map reading ``γ ⊙ x̂ + β`` can add ``u (1/γ)ᵀ`` to its weight and ``−u Σᵢ βᵢ/γᵢ`` to its bias.

The last two move some parameters by amounts that depend on others they read but leave fixed
(W, γ, β): :attr:`~Symmetry.reads` names those. The action is then affine in the parameters it
moves, not in θ: it is a translation θ ↦ θ + D(θ_r)·δ with D linear in δ, so ∇L keeps its
components on the moved parameters and changes on the read ones by −(∂(Dδ)/∂θ_r)ᵀ ∇L, which a
vector-Jacobian product of the action gives exactly (teleport's covector transport).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from paramsym.core.params import Params, check_finite
from paramsym.errors import InvalidArgumentError, MissingParameterError, ShapeError
from paramsym.symmetry.base import GroupElement, Region
from paramsym.symmetry.translation import TranslationGroup


@dataclass(frozen=True)
class Part:
    """A run of ``length`` entries of a parameter along ``axis`` from ``offset``, the same for
    every index of its other axes, that a translation vector of length ``length`` moves (times
    ``sign``). ``within``: ``(other axis, start, stop)`` restricts the move to those indices of
    another axis (the rows of a ViT's position table that its class token meets)."""

    name: str
    axis: int
    offset: int
    length: int
    sign: float = 1.0
    within: tuple[int, int, int] | None = None

    def region(self) -> Region:
        if self.within is not None:
            return (self.name, *self.within)
        return (self.name, self.axis, self.offset, self.offset + self.length)


@dataclass(frozen=True)
class Reader:
    """A linear map reading a translated vector: its weight, the weight's input axis, the
    offset of the translated entries on that axis, and its bias (``None``: no bias)."""

    weight: str
    axis: int
    offset: int
    bias: str | None


def _get(params: Mapping[str, Tensor], name: str, owner: str) -> Tensor:
    if name not in params:
        raise MissingParameterError(f"{owner} acts on parameter '{name}', which is not in params")
    return params[name]


def _shift(t: Tensor, part: Part, vector: Tensor) -> Tensor:
    """The change ``sign·vector`` on ``part``'s run of ``t``, broadcast over its other axes
    (zero elsewhere)."""
    if t.ndim <= part.axis or t.shape[part.axis] < part.offset + part.length:
        raise ShapeError(
            f"parameter '{part.name}' has shape {tuple(t.shape)}, too small for entries "
            f"[{part.offset}, {part.offset + part.length}) along axis {part.axis}"
        )
    shape = [1] * t.ndim
    shape[part.axis] = part.length
    run = (
        (part.sign * vector.to(dtype=t.dtype, device=t.device))
        .reshape(shape)
        .expand(*[t.shape[a] if a != part.axis else part.length for a in range(t.ndim)])
    )
    before = part.offset
    after = t.shape[part.axis] - part.offset - part.length
    pieces = []
    if before:
        pieces.append(
            t.new_zeros(*[s if a != part.axis else before for a, s in enumerate(t.shape)])
        )
    pieces.append(run)
    if after:
        pieces.append(t.new_zeros(*[s if a != part.axis else after for a, s in enumerate(t.shape)]))
    step = torch.cat(pieces, dim=part.axis) if len(pieces) > 1 else run
    if part.within is None:
        return step
    axis, start, stop = part.within
    if axis == part.axis or t.ndim <= axis or not 0 <= start < stop <= t.shape[axis]:
        raise ShapeError(
            f"parameter '{part.name}' has shape {tuple(t.shape)}: no indices [{start}, {stop}) "
            f"along axis {axis} apart from the moved axis {part.axis}"
        )
    mask = torch.zeros(t.shape[axis], dtype=t.dtype, device=t.device)
    mask[start:stop] = 1
    shape = [1] * t.ndim
    shape[axis] = t.shape[axis]
    return step * mask.reshape(shape)


class _Shifts(TranslationGroup):
    """Shared by the families: ``act`` adds :meth:`_changes` (θ, v) and ``tangent`` returns
    :meth:`_changes` (θ, ξ) (the action is a translation by a vector linear in v, which
    depends on the :attr:`~Symmetry.reads` alone: :attr:`~Symmetry.shifts_by_reads`)."""

    shifts_by_reads = True

    def _changes(self, params: Mapping[str, Tensor], v: Tensor) -> dict[str, Tensor]:
        raise NotImplementedError

    def act(self, params: Mapping[str, Tensor], g: GroupElement, x: Tensor | None = None) -> Params:
        changes = self._changes(params, self.check_element(g))
        check_finite(((n, params[n]) for n in (*changes, *self.reads)), self.name)
        return {k: t + changes[k] if k in changes else t for k, t in params.items()}

    def tangent(self, params: Mapping[str, Tensor], xi: Tensor, x: Tensor | None = None) -> Params:
        changes = self._changes(params, self.check_xi(xi))
        return {k: changes[k] if k in changes else torch.zeros_like(t) for k, t in params.items()}


class ParameterTranslation(_Shifts):
    """Fixed translations of parameters that the function reads only through sums:
    ``θ[part] += sign·δ`` for each part, δ ∈ ℝⁿ (module docstring).

    Args:
        parts: the runs moved, all of the same ``length`` n.
        family: ``"key_bias"``, ``"embedding_sum"``, ... (the name's prefix).
        site: label used in the name.
    """

    def __init__(self, parts: Sequence[Part], *, family: str, site: str) -> None:
        if not parts or len({p.length for p in parts}) != 1:
            raise InvalidArgumentError(
                f"{family}[{site}]: needs at least one part, all of the same length"
            )
        dim = parts[0].length
        super().__init__(
            name=f"{family}[{site}]", group=f"R^{dim}", dim=dim, linear=False, affine=True
        )
        self.parts = tuple(parts)

    @property
    def parameter_names(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(p.name for p in self.parts))

    @property
    def touched_regions(self) -> frozenset[Region]:
        return frozenset(p.region() for p in self.parts)

    def _changes(self, params: Mapping[str, Tensor], v: Tensor) -> dict[str, Tensor]:
        changes: dict[str, Tensor] = {}
        for part in self.parts:
            t = _get(params, part.name, self.name)
            step = _shift(t, part, v)
            changes[part.name] = changes[part.name] + step if part.name in changes else step
        return changes


class BiasAbsorption(_Shifts):
    """``(s, b_r) ↦ (s + δ, b_r − W_r δ)``: a vector ``s`` (a norm's β, a value bias) that
    reaches linear maps ``r`` only as part of their input, moved by δ, and each map's bias
    taking back ``W_r δ`` (module docstring).

    Args:
        source: the moved run of ``s`` (its ``sign`` must be 1).
        readers: the linear maps reading it; each weight's ``axis`` is its input axis (1 for
            ``nn.Linear``'s (out, in), 0 for Hugging Face ``Conv1D``'s (in, out)) and the
            translated entries sit at ``offset`` on it. Several readers may share one bias
            (the output projection read by every query head of a grouped-query attention).
        family, site: the name is ``"<family>[<site>]"``.
        partners: biases of length n added to ``s`` where it is read as it is (a Post-LN
            block's residual add of the norm's output and an output projection): each takes
            back δ itself, ``b_p ↦ b_p − δ``, so the sum is unchanged.
    """

    translation = False

    def __init__(
        self,
        source: Part,
        readers: Sequence[Reader],
        *,
        family: str,
        site: str,
        partners: Sequence[str] = (),
    ) -> None:
        if not (readers or partners) or any(r.bias is None for r in readers):
            raise InvalidArgumentError(
                f"{family}[{site}]: every reader needs a bias to absorb the translation"
            )
        dim = source.length
        super().__init__(
            name=f"{family}[{site}]", group=f"R^{dim}", dim=dim, linear=False, affine=False
        )
        self.source = source
        self.readers = tuple(readers)
        self.partners = tuple(partners)

    @property
    def parameter_names(self) -> tuple[str, ...]:
        biases = [r.bias for r in self.readers if r.bias]
        return tuple(dict.fromkeys([self.source.name, *biases, *self.partners]))

    @property
    def reads(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(r.weight for r in self.readers))

    @property
    def touched_regions(self) -> frozenset[Region]:
        biases = {(r.bias, 0, 0, None) for r in self.readers if r.bias}
        biases |= {(name, 0, 0, None) for name in self.partners}
        return frozenset({self.source.region(), *biases})

    def _changes(self, params: Mapping[str, Tensor], v: Tensor) -> dict[str, Tensor]:
        source = _get(params, self.source.name, self.name)
        changes = {self.source.name: _shift(source, self.source, v)}
        for reader in self.readers:
            weight = _get(params, reader.weight, self.name)
            assert reader.bias is not None
            bias = _get(params, reader.bias, self.name)
            if weight.ndim != 2 or weight.shape[reader.axis] < reader.offset + self.dim:
                raise ShapeError(
                    f"{self.name}: weight '{reader.weight}' has shape {tuple(weight.shape)}, "
                    f"expected a matrix with {reader.offset + self.dim}+ inputs on axis "
                    f"{reader.axis}"
                )
            block = weight.narrow(reader.axis, reader.offset, self.dim)
            taken = torch.tensordot(v.to(block.dtype), block, dims=([0], [reader.axis]))
            if taken.shape != bias.shape:
                raise ShapeError(
                    f"{self.name}: bias '{reader.bias}' has shape {tuple(bias.shape)}, "
                    f"expected {tuple(taken.shape)} (the outputs of '{reader.weight}')"
                )
            changes[reader.bias] = (
                changes[reader.bias] - taken if reader.bias in changes else -taken
            )
        for name in self.partners:
            bias = _get(params, name, self.name)
            if bias.shape != (self.dim,):
                raise ShapeError(
                    f"{self.name}: bias '{name}' has shape {tuple(bias.shape)}, expected "
                    f"({self.dim},) (added to the translated vector)"
                )
            taken = v.to(dtype=bias.dtype, device=bias.device)
            changes[name] = changes[name] - taken if name in changes else -taken
        return changes


class NormReaderTranslation(_Shifts):
    """``(W_r, b_r) ↦ (W_r + u_r (1/γ)ᵀ, b_r − u_r Σᵢ βᵢ/γᵢ)`` for every linear map ``r``
    reading ``γ ⊙ x̂ + β``, the output of a LayerNorm (mean subtracted, so ``1ᵀx̂ = 0``): the
    map's output changes by ``u_r (1/γ)ᵀ(γ ⊙ x̂ + β) − u_r Σβ/γ = u_r 1ᵀx̂ = 0``.

    Args:
        weight: the norm's γ (``None``: no elementwise scale, γ = 1).
        bias: the norm's β (``None``: no shift; then readers need no bias).
        readers: the linear maps reading the whole normalised vector (``offset`` 0); their
            weights' ``axis`` is the input axis.
        width: the normalised width d.
        site: label used in the name.

    Elements: one vector u_r per reader, of its output size, concatenated in reader order.
    """

    translation = False

    def __init__(
        self,
        weight: str | None,
        bias: str | None,
        readers: Sequence[Reader],
        outputs: Sequence[int],
        *,
        width: int,
        site: str,
    ) -> None:
        if not readers or len(outputs) != len(readers):
            raise InvalidArgumentError(f"norm_reader[{site}]: one output size per reader")
        if bias is not None and any(r.bias is None for r in readers):
            raise InvalidArgumentError(
                f"norm_reader[{site}]: the norm has a shift β, so every reader needs a bias"
            )
        dim = int(sum(outputs))
        super().__init__(
            name=f"norm_reader[{site}]", group=f"R^{dim}", dim=dim, linear=False, affine=False
        )
        self.weight, self.bias = weight, bias
        self.readers, self.outputs, self.width = tuple(readers), tuple(outputs), int(width)

    @property
    def parameter_names(self) -> tuple[str, ...]:
        names = [r.weight for r in self.readers] + [r.bias for r in self.readers if r.bias]
        return tuple(dict.fromkeys(n for n in names if n is not None))

    @property
    def reads(self) -> tuple[str, ...]:
        return tuple(n for n in (self.weight, self.bias) if n is not None)

    @property
    def touched_regions(self) -> frozenset[Region]:
        regions = {(r.weight, a, 0, None) for r in self.readers for a in (0, 1)}
        regions |= {(r.bias, 0, 0, None) for r in self.readers if r.bias}
        return frozenset(regions)

    def _changes(self, params: Mapping[str, Tensor], v: Tensor) -> dict[str, Tensor]:
        first = _get(params, self.readers[0].weight, self.name)
        gamma = (
            _get(params, self.weight, self.name)
            if self.weight is not None
            else torch.ones(self.width, dtype=first.dtype, device=first.device)
        )
        inverse = 1.0 / gamma
        offset_total = (
            (_get(params, self.bias, self.name) * inverse).sum() if self.bias is not None else None
        )
        changes: dict[str, Tensor] = {}
        start = 0
        for reader, size in zip(self.readers, self.outputs, strict=True):
            weight = _get(params, reader.weight, self.name)
            u = v[start : start + size].to(dtype=weight.dtype, device=weight.device)
            start += size
            if weight.ndim != 2 or weight.shape[reader.axis] != self.width:
                raise ShapeError(
                    f"{self.name}: weight '{reader.weight}' has shape {tuple(weight.shape)}, "
                    f"expected {self.width} inputs on axis {reader.axis} and {size} outputs"
                )
            step = torch.outer(u, inverse) if reader.axis == 1 else torch.outer(inverse, u)
            changes[reader.weight] = changes.get(reader.weight, 0) + step
            if offset_total is not None and reader.bias is not None:
                changes[reader.bias] = changes.get(reader.bias, 0) - u * offset_total
        return changes
