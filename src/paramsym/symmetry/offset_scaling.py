"""Rescaling through a norm whose scale enters as ``offset + γ`` (Gemma's ``(1 + weight)``).

An RMSNorm (or LayerNorm) writes ``(o + γ) ⊙ n`` with n the normalised vector and o a fixed
number (Gemma: ``o = 1``, the weight stored as a deviation from 1). Linear maps that read the
output, ``W_r ((o + γ) ⊙ n)``, see only the products ``W_r diag(o + γ)``, so for every
c ∈ (ℝ>0)^d

    (γ, W_r) ↦ (c ⊙ (o + γ) − o,  W_r diag(c)⁻¹)

leaves every reader's output unchanged, exactly: the rescaling of a plain norm's γ against its
readers (:class:`~paramsym.symmetry.PositiveScaling`), written in the stored parameter. The
action is affine in θ, ``γ ↦ c ⊙ γ + (c − 1) o``, not linear: its tangent ``(ξ ⊙ (o + γ),
−W_r diag(ξ))`` has the constant part ``ξ o`` on γ. Gradients transport as along any affine
action (``A(c)ᵀ ∇L(c·θ) = ∇L(θ)``).

Group (ℝ>0)^d under the entrywise product, Lie algebra ℝ^d with exp(ξ) = e^ξ (as
:class:`~paramsym.symmetry.scaling.PositiveVectorGroup`).

>>> import torch
>>> s = OffsetNormScaling("norm.weight", 1.0, [Slot("proj.weight", 1, -1.0)], width=3)
>>> params = {"norm.weight": torch.zeros(3), "proj.weight": torch.ones(2, 3)}
>>> moved = s.act(params, torch.tensor([2.0, 1.0, 0.5]))
>>> moved["norm.weight"], moved["proj.weight"][0]
(tensor([ 1.0000,  0.0000, -0.5000]), tensor([0.5000, 1.0000, 2.0000]))
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
from torch import Tensor

from paramsym.core.params import Params, check_finite
from paramsym.errors import (
    InvalidArgumentError,
    InvalidGroupElementError,
    MissingParameterError,
    ShapeError,
)
from paramsym.symmetry.base import GroupElement, Region, Slot, Symmetry, scale_along
from paramsym.symmetry.scaling import PositiveVectorGroup


class OffsetNormScaling(PositiveVectorGroup, Symmetry):
    """``(γ, W_r) ↦ (c ⊙ (o + γ) − o, W_r diag(c)⁻¹)`` for a norm writing ``(o + γ) ⊙ n`` and
    the linear maps reading its output (module docstring).

    Args:
        weight: the norm's γ, shape ``(width,)``.
        offset: o (Gemma: 1).
        readers: the readers' weights, each a :class:`~paramsym.symmetry.base.Slot` on the
            weight's input axis (``offset`` where the norm's features are a run of a longer
            axis); its ``power`` is ignored (the columns take c⁻¹).
        width: d.
        site: label used in the name (default: the norm's module).
    """

    default_teleport = False
    """Left out of the default teleport: Gemma computes its ``1 + weight`` norm in float32
    inside a float64 model, so the rescaled weight is kept only to float32 (a teleport's loss
    drifts by about 1e-8); pass it in ``symmetries=`` to move along it."""

    def __init__(
        self,
        weight: str,
        offset: float,
        readers: Sequence[Slot],
        *,
        width: int,
        site: str | None = None,
    ) -> None:
        if not readers:
            raise InvalidArgumentError("offset_rescaling: needs at least one reader")
        if width < 1:
            raise InvalidArgumentError(f"offset_rescaling: width must be >= 1, got {width}")
        site = site or weight.rpartition(".")[0] or weight
        super().__init__(
            name=f"offset_rescaling[{site}]",
            group=f"(R>0)^{width}",
            dim=width,
            linear=False,
            affine=True,
        )
        self.weight, self.offset, self.width = weight, float(offset), int(width)
        self.readers = tuple(Slot(r.name, r.axis, -1.0, r.offset, 1) for r in readers)

    @property
    def parameter_names(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys([self.weight, *(r.name for r in self.readers)]))

    @property
    def touched_regions(self) -> frozenset[Region]:
        own: Region = (self.weight, 0, 0, None)
        return frozenset({own, *(r.region(self.width) for r in self.readers)})

    def check_element(self, g: GroupElement) -> Tensor:
        g = self._element_tensor(g, (self.dim,), "a scale vector")
        if not bool(torch.isfinite(g).all()) or not bool((g > 0).all()):
            raise InvalidGroupElementError(f"{self.name}: scales must be finite and positive")
        return g

    def _check(self, params: Mapping[str, Tensor]) -> None:
        for name in self.parameter_names:
            if name not in params:
                raise MissingParameterError(
                    f"{self.name} acts on parameter '{name}', which is not in params"
                )
        if tuple(params[self.weight].shape) != (self.width,):
            raise ShapeError(
                f"{self.name}: '{self.weight}' has shape {tuple(params[self.weight].shape)}, "
                f"expected ({self.width},)"
            )
        for slot in self.readers:
            t = params[slot.name]
            start = slot.offset or 0
            if (
                t.ndim <= slot.axis
                or t.shape[slot.axis] < start + self.width
                or (slot.offset is None and t.shape[slot.axis] != self.width)
            ):
                raise ShapeError(
                    f"{self.name}: reader '{slot.name}' has shape {tuple(t.shape)}, expected "
                    f"{self.width} inputs on axis {slot.axis} from {start}"
                )
        check_finite(((n, params[n]) for n in self.parameter_names), self.name)

    def _along(self, t: Tensor, slot: Slot, factors: Tensor, outside: float) -> Tensor:
        """``t`` times ``factors`` along the slot's run of its axis and ``outside`` elsewhere."""
        full = factors
        if slot.offset is not None:
            size, start = t.shape[slot.axis], slot.offset
            rest = torch.full((size,), outside, dtype=t.dtype, device=t.device)
            full = torch.cat([rest[:start], factors, rest[start + self.width :]])
        return scale_along(t, slot.axis, full)

    def act(self, params: Mapping[str, Tensor], g: GroupElement, x: Tensor | None = None) -> Params:
        self._check(params)
        gamma = params[self.weight]
        c = self.check_element(g).to(dtype=gamma.dtype, device=gamma.device)
        out = dict(params)
        out[self.weight] = c * (gamma + self.offset) - self.offset
        for slot in self.readers:
            out[slot.name] = self._along(out[slot.name], slot, 1.0 / c, 1.0)
        return out

    def tangent(self, params: Mapping[str, Tensor], xi: Tensor, x: Tensor | None = None) -> Params:
        xi = self.check_xi(xi)
        self._check(params)
        gamma = params[self.weight]
        xi = xi.to(dtype=gamma.dtype, device=gamma.device)
        out = {k: torch.zeros_like(t) for k, t in params.items()}
        out[self.weight] = xi * (gamma + self.offset)
        for slot in self.readers:
            out[slot.name] = out[slot.name] + self._along(params[slot.name], slot, -xi, 0.0)
        return out
