"""Shears of a linear map's output along the all-ones direction, where only LayerNorms see it.

A LayerNorm subtracts its input's mean, so ``LN(z + 1·s) = LN(z)`` for any number s, and in
particular for ``s = wᵀx`` with x one term of z: the shear ``A = I + 1wᵀ`` applied to x is
invisible to a norm reading ``x + (anything)``. Where x is a linear map's output ``P u + b``
that a residual stream carries to LayerNorms and that other linear maps also read (ELECTRA's
and ALBERT's embedding projection, read by the first block's query, key and value maps and
added to its attention output before the block's norm), the group ``{I + 1wᵀ : 1 + wᵀ1 ≠ 0}``
acts by

    (P, b) ↦ (A P, A b),        W_r ↦ W_r A⁻¹ = W_r − (W_r 1) wᵀ / (1 + wᵀ1)

on the writer and on every reader r: the readers see the same values, the stream gains
``1·(wᵀx)``, which its norms remove. The action is linear in the parameters, so gradients
transport as for GL. Where nothing but the stream reads x, the shear is part of the stream's
mean translation (:class:`~paramsym.symmetry.translation.StreamTranslation` moves each
writer's rows by ``1 uᵀ``, any u).

Elements are the vectors w (shape ``(d,)``); ``exp(ξ) = I + 1ξᵀ (e^s − 1)/s`` with s = ξᵀ1,
``A(w₁) A(w₂) = A(w₁ + w₂ + (w₁ᵀ1) w₂)``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
from torch import Tensor

from paramsym.core.params import Params, check_finite
from paramsym.errors import InvalidArgumentError, InvalidGroupElementError, ShapeError
from paramsym.symmetry.absorption import Reader, _get
from paramsym.symmetry.base import GroupElement, Region, Symmetry


class StreamShear(Symmetry):
    """``x ↦ (I + 1wᵀ) x`` on the output of one linear map, undone in its linear readers
    (module docstring).

    Args:
        weight: the writer's weight; ``axis`` its output axis (0 for ``nn.Linear``'s (out, in),
            1 for Hugging Face ``Conv1D``'s (in, out)).
        bias: the writer's bias, or ``None``.
        readers: the linear maps reading x (weights' ``axis`` their input axis, offset 0);
            their biases are not moved.
        width: d, the width of x.
        site: label used in the name.
    """

    def __init__(
        self,
        weight: str,
        axis: int,
        bias: str | None,
        readers: Sequence[Reader],
        *,
        width: int,
        site: str,
    ) -> None:
        if not readers or width < 2:
            raise InvalidArgumentError(f"stream_shear[{site}]: needs a reader and width ≥ 2")
        super().__init__(
            name=f"stream_shear[{site}]",
            group=f"{{I + 1wᵀ}} ⊂ GL({width})",
            dim=width,
            linear=True,
        )
        self.weight, self.axis, self.bias = weight, int(axis), bias
        self.readers, self.width = tuple(readers), int(width)

    @property
    def parameter_names(self) -> tuple[str, ...]:
        names = [
            self.weight,
            *([self.bias] if self.bias else []),
            *(r.weight for r in self.readers),
        ]
        return tuple(dict.fromkeys(names))

    @property
    def touched_regions(self) -> frozenset[Region]:
        regions = {(self.weight, self.axis, 0, None)}
        if self.bias:
            regions.add((self.bias, 0, 0, None))
        regions |= {(r.weight, r.axis, 0, None) for r in self.readers}
        return frozenset(regions)

    # -- group ------------------------------------------------------------------------------
    def _identity(self, dtype: torch.dtype) -> Tensor:
        return torch.zeros(self.width, dtype=dtype)

    def _sample(
        self, scale: float, generator: torch.Generator | None, dtype: torch.dtype
    ) -> Tensor:
        return self.exp(scale * torch.randn(self.width, generator=generator, dtype=dtype))

    def exp(self, xi: Tensor) -> Tensor:
        xi = self.check_xi(xi)
        s = xi.sum()
        small = s.abs() <= 1e-8
        safe = torch.where(small, torch.ones_like(s), s)  # no 0/0 in the unused branch
        factor = torch.where(small, 1 + s / 2, torch.expm1(safe) / safe)
        return xi * factor

    def linear_element(self, xi: Tensor) -> Tensor:
        return self.check_xi(xi)

    def compose(self, g1: GroupElement, g2: GroupElement) -> Tensor:
        a, b = self.check_element(g1), self.check_element(g2)
        return a + b + a.sum() * b

    def inverse(self, g: GroupElement) -> Tensor:
        w = self.check_element(g)
        return -w / (1 + w.sum())

    def check_element(self, g: GroupElement) -> Tensor:
        w = self._element_tensor(g, (self.width,), "a shear vector")
        if not bool(torch.isfinite(w).all()):
            raise InvalidGroupElementError(f"{self.name}: the shear has NaN or inf entries")
        if float((1 + w.sum()).abs()) <= torch.finfo(w.dtype).eps ** 0.5:
            raise InvalidGroupElementError(
                f"{self.name}: 1 + Σw = {float(1 + w.sum()):.3g}, so I + 1wᵀ is not invertible"
            )
        return w

    # -- action -----------------------------------------------------------------------------
    def _changes(
        self, params: Mapping[str, Tensor], w: Tensor, inverse: Tensor
    ) -> dict[str, Tensor]:
        """What multiplying x by I + 1wᵀ in the writer and by ``I + 1·inverseᵀ`` in the
        readers adds to each parameter (the inverse shear's vector, or −ξ for a tangent)."""
        weight = _get(params, self.weight, self.name)
        w = w.to(dtype=weight.dtype, device=weight.device)
        if weight.ndim != 2 or weight.shape[self.axis] != self.width:
            raise ShapeError(
                f"{self.name}: weight '{self.weight}' has shape {tuple(weight.shape)}, expected "
                f"{self.width} outputs on axis {self.axis}"
            )
        ones = torch.ones(self.width, dtype=weight.dtype, device=weight.device)
        if self.axis == 0:
            changes = {self.weight: torch.outer(ones, w @ weight)}
        else:
            changes = {self.weight: torch.outer(weight @ w, ones)}
        if self.bias is not None:
            bias = _get(params, self.bias, self.name)
            changes[self.bias] = ones * (w @ bias)
        inverse = inverse.to(dtype=weight.dtype, device=weight.device)
        for reader in self.readers:
            matrix = _get(params, reader.weight, self.name)
            if matrix.ndim != 2 or matrix.shape[reader.axis] != self.width:
                raise ShapeError(
                    f"{self.name}: weight '{reader.weight}' has shape {tuple(matrix.shape)}, "
                    f"expected {self.width} inputs on axis {reader.axis}"
                )
            step = (
                torch.outer(matrix @ ones, inverse)
                if reader.axis == 1
                else torch.outer(inverse, ones @ matrix)
            )
            changes[reader.weight] = (
                changes[reader.weight] + step if reader.weight in changes else step
            )
        return changes

    def act(self, params: Mapping[str, Tensor], g: GroupElement, x: Tensor | None = None) -> Params:
        w = self.check_element(g)
        check_finite(((n, params[n]) for n in self.parameter_names if n in params), self.name)
        changes = self._changes(params, w, self.inverse(w))
        return {k: t + changes[k] if k in changes else t for k, t in params.items()}

    def tangent(self, params: Mapping[str, Tensor], xi: Tensor, x: Tensor | None = None) -> Params:
        xi = self.check_xi(xi)
        changes = self._changes(params, xi, -xi)
        return {k: changes[k] if k in changes else torch.zeros_like(t) for k, t in params.items()}
