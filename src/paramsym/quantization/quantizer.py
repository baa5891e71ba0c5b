"""Fake quantization: round-to-nearest onto a uniform grid, kept in floating point.

A :class:`Quantizer` maps a tensor to the nearest point of a ``bits``-bit uniform grid and back
(``dequantize(quantize(t))``, the "fake-quantized" tensor that simulated low-precision inference
computes with), with

* one grid per tensor (``granularity="tensor"``) or one per slice along ``axis``
  (``"channel"``: per output channel of a weight, axis 0; per token of an activation, axis 0
  of a (tokens, features) matrix);
* a symmetric grid, ``scale = max|t| / (2^(b−1) − 1)``, integers in [−(2^(b−1) − 1),
  2^(b−1) − 1] and no zero point, or an asymmetric one, ``scale = (max t − min t) / (2^b − 1)``
  and an integer zero point, integers in [0, 2^b − 1] (the range always holds 0, so zeros stay
  exact);
* the straight-through estimator (Bengio et al. 2013) for gradients: ``fake(t, ste=True)`` has
  the value of the quantized tensor and the gradient of the identity with respect to ``t``
  (the scale is taken from ``t`` without gradient), which is what learned rotations train
  through (SpinQuant).

The grid is the one of PyTorch's ``torch.fake_quantize_per_tensor_affine`` /
``…_per_channel_affine`` (round half to even, clamp to the integer range), computed here with
plain tensor operations so that every dtype (float64 included) and autograd work; the tests
compare both.

>>> import torch
>>> q = Quantizer(bits=4)
>>> q.fake(torch.tensor([0.0, 0.1, 0.5, -1.0]))
tensor([ 0.0000,  0.1429,  0.4286, -1.0000])
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from paramsym.errors import InvalidArgumentError, ShapeError

GRANULARITIES = ("tensor", "channel")
"""Where a :class:`Quantizer` takes its range: the whole tensor, or each slice along ``axis``."""

MAX_BITS = 16
"""The widest grid a :class:`Quantizer` accepts (beyond 16 bits float32 rounding dominates)."""


@dataclass(frozen=True)
class Quantizer:
    """A uniform round-to-nearest quantizer (module docstring).

    Attributes:
        bits: grid width, 2 to 16 (a symmetric grid needs two bits: one for the sign).
        granularity: ``"tensor"`` or ``"channel"`` (:data:`GRANULARITIES`).
        symmetric: a grid symmetric around 0 without zero point, else an asymmetric
            (min/max) grid with an integer zero point.
        axis: the channel axis for ``granularity="channel"``.
    """

    bits: int = 8
    granularity: str = "tensor"
    symmetric: bool = True
    axis: int = 0

    def __post_init__(self) -> None:
        lowest = 2 if self.symmetric else 1
        if isinstance(self.bits, bool) or not isinstance(self.bits, int):
            raise InvalidArgumentError(f"Quantizer: bits must be an integer, got {self.bits!r}")
        if not lowest <= self.bits <= MAX_BITS:
            raise InvalidArgumentError(
                f"Quantizer: bits must be between {lowest} and {MAX_BITS} for a "
                f"{'symmetric' if self.symmetric else 'asymmetric'} grid, got {self.bits}"
            )
        if self.granularity not in GRANULARITIES:
            raise InvalidArgumentError(
                f"Quantizer: granularity must be one of {GRANULARITIES}, got {self.granularity!r}"
            )

    @property
    def levels(self) -> tuple[int, int]:
        """The integer range (lowest, highest) of the grid."""
        if self.symmetric:
            top = 2 ** (self.bits - 1) - 1
            return -top, top
        return 0, 2**self.bits - 1

    def _reduce_dims(self, t: Tensor) -> list[int] | None:
        if self.granularity == "tensor":
            return None
        if not -t.ndim <= self.axis < t.ndim or t.ndim < 1:
            raise ShapeError(
                f"Quantizer: channel axis {self.axis} is out of range for a tensor of shape "
                f"{tuple(t.shape)}"
            )
        axis = self.axis % t.ndim
        return [d for d in range(t.ndim) if d != axis]

    def _extremes(self, t: Tensor) -> tuple[Tensor, Tensor]:
        dims = self._reduce_dims(t)
        if dims is None:
            return t.min(), t.max()
        if not dims:  # a vector quantized per entry
            return t, t
        return t.amin(dim=dims, keepdim=True), t.amax(dim=dims, keepdim=True)

    def _grid(self, t: Tensor, *, keep_gradient: bool = False) -> tuple[Tensor, Tensor]:
        """(scale, zero point) shaped to broadcast against ``t``; the scale carries the
        range's gradient when ``keep_gradient``."""
        low, high = self._extremes(t)
        if not keep_gradient:
            low, high = low.detach(), high.detach()
        lowest, highest = self.levels
        if self.symmetric:
            scale = torch.maximum(high.abs(), low.abs()) / highest
            zero = torch.zeros_like(scale)
        else:
            low, high = torch.clamp(low, max=0.0), torch.clamp(high, min=0.0)
            scale = (high - low) / (highest - lowest)
            zero = torch.round(-low / torch.where(scale > 0, scale, 1.0))
        return torch.where(scale > 0, scale, torch.ones_like(scale)), zero.detach()

    def _on_grid(self, t: Tensor, scale: Tensor, zero: Tensor) -> Tensor:
        lowest, highest = self.levels
        integers = torch.clamp(torch.round(t.detach() / scale.detach()) + zero, lowest, highest)
        return (integers - zero) * scale

    def scale_and_zero(self, t: Tensor) -> tuple[Tensor, Tensor]:
        """The grid step and integer zero point of ``t`` (shaped to broadcast against it,
        detached): ``t ≈ scale · (integer − zero)``. An all-zero range gets step 1."""
        return self._grid(t)

    def quantize(self, t: Tensor) -> Tensor:
        """The integers of ``t`` on the grid (as a tensor of ``t``'s dtype)."""
        scale, zero = self._grid(t)
        lowest, highest = self.levels
        return torch.clamp(torch.round(t.detach() / scale) + zero, lowest, highest)

    def fake(self, t: Tensor, *, ste: bool = False) -> Tensor:
        """``scale · (quantize(t) − zero)``: ``t`` on the grid, in ``t``'s dtype. With
        ``ste=True`` the result carries the identity's gradient to ``t`` (straight-through)."""
        if not t.is_floating_point():
            raise InvalidArgumentError(
                f"Quantizer.fake: needs a floating-point tensor, got {t.dtype}"
            )
        grid = self._on_grid(t, *self._grid(t))
        return t + (grid - t).detach() if ste else grid

    def squared_error(self, t: Tensor) -> Tensor:
        """``(fake(t) − t)²`` entry by entry, differentiable in ``t`` through the grid's range
        (the rounding has zero derivative almost everywhere, the range does not): what
        :class:`~paramsym.quantization.WeightError` sums."""
        scale, zero = self._grid(t, keep_gradient=True)
        return (self._on_grid(t, scale, zero) - t).square()

    def error(self, t: Tensor) -> Tensor:
        """``‖fake(t) − t‖²`` (differentiable as :meth:`squared_error`)."""
        return self.squared_error(t).sum()
