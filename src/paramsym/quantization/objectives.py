"""Quantization objectives for :func:`paramsym.teleport` (issue 31): what a move along the exact
symmetries should lower so that the model quantizes well, the function being kept.

:class:`WeightError` (data-free)
    For each weight W (a tensor of two or more axes, or a named one) quantized by a
    :class:`Quantizer`, the relative squared error ‖Q(W)_c − W_c‖² / ‖W_c‖² of each channel c,
    averaged over the output channels (slices along axis 0) and over the input channels (axis
    1), the two averages added, summed over the weights. Relative, because a symmetry trades
    scale between tensors (a rescaling shrinks one weight as it grows the next), and per
    channel, because a channel whose small range a per-tensor grid flattens to zero carries its
    signal on through the next layer whatever its share of ‖W‖: the per-tensor ‖ΔW‖² / ‖W‖²
    hides it, and cross-layer equalization, which evens the ranges, raised that measure on a
    MobileNetV2-style block (0.024 → 0.057) while it halved this one (0.91 → 0.45) and the
    quantized model's output error. Differentiable through the quantizer's range (the rounding
    has zero derivative almost everywhere), which is what a move changes.

Every objective is minimised (``maximize = False``) and keeps the function
(``keeps_function = True``): ``ps.teleport(model, loss_fn, batch, objective=WeightError(bits=4))``
descends it along the exact symmetries of the function (by default; a symmetry of the loss
alone, such as the logits' softmax translation, would change what the quantized model
computes), and the teleport's guard checks the loss is kept.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from paramsym.errors import InvalidArgumentError
from paramsym.quantization.quantizer import Quantizer
from paramsym.teleportation.objectives import Objective, TeleportContext


class WeightError(Objective):
    """The per-channel relative quantization error of the weights (module docstring),
    minimised.

    Args:
        bits, granularity, symmetric: the :class:`Quantizer` of every weight (ignored when
            ``quantizer`` is given).
        quantizer: the quantizer to use.
        parameters: names of the tensors to quantize; default: every parameter with two or
            more axes (the weights of linear maps, convolutions and embeddings).

    >>> import torch, paramsym as ps
    >>> model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    >>> WeightError(bits=4).name
    'weight_error(4-bit, per tensor)'
    """

    maximize = False
    keeps_function = True

    def __init__(
        self,
        bits: int = 8,
        granularity: str = "tensor",
        symmetric: bool = True,
        *,
        quantizer: Quantizer | None = None,
        parameters: Sequence[str] | None = None,
    ) -> None:
        self.quantizer = quantizer or Quantizer(bits, granularity, symmetric)
        self.parameters = None if parameters is None else list(parameters)
        per = "per tensor" if self.quantizer.granularity == "tensor" else "per channel"
        self.name = f"weight_error({self.quantizer.bits}-bit, {per})"

    def names(self, params: dict[str, Tensor]) -> list[str]:
        """The quantized tensors among ``params``."""
        if self.parameters is None:
            return [k for k, t in params.items() if t.ndim >= 2]
        missing = [k for k in self.parameters if k not in params]
        if missing:
            raise InvalidArgumentError(
                f"{self.name}: no parameter named {missing[0]!r} in the model (its parameters: "
                f"{', '.join(list(params)[:5])}, …)"
            )
        return list(self.parameters)

    def value(self, params: dict[str, Tensor]) -> Tensor:
        """The objective at ``params`` (differentiable)."""
        names = self.names(params)
        if not names:
            raise InvalidArgumentError(f"{self.name}: the model has no weight to quantize")
        total = torch.zeros((), dtype=params[names[0]].dtype, device=params[names[0]].device)
        for k in names:
            t = params[k]
            if t.ndim < 2:
                raise InvalidArgumentError(
                    f"{self.name}: parameter {k!r} has shape {tuple(t.shape)}; per-channel "
                    "errors need a weight with two or more axes"
                )
            error, size = self.quantizer.squared_error(t), t.square()
            for axis in (0, 1):
                others = [a for a in range(t.ndim) if a != axis]
                share = error.sum(dim=others) / size.sum(dim=others).clamp_min(1e-300)
                total = total + share.mean()
        return total

    def __call__(self, context: TeleportContext) -> Tensor:
        return self.value(context.params)
