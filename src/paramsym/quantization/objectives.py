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

Two more read a calibration batch (the teleport's own batch unless one is given):

:class:`ActivationOutliers`
    How far the inputs of the linear maps are from outlier-free, averaged over the readers
    (:mod:`~paramsym.quantization.simulate`): ``"max_rms"``, max|x| / RMS(x) of each reader's
    input (the range a per-tensor grid spends against the typical size; 1 for a flat tensor,
    √n for a single spike), or ``"kurtosis"``, E[(x − μ)⁴] / σ⁴ over the input's entries (3 for
    a Gaussian; heavy tails raise it, which is what SpinQuant and Bondarenko et al. measure).
:class:`QuantizedLoss`
    The model's loss with its readers' weights and inputs fake-quantized, the rounding passed
    by the straight-through estimator (SpinQuant's training objective).

Every objective is minimised (``maximize = False``) and keeps the function
(``keeps_function = True``): ``ps.teleport(model, loss_fn, batch, objective=WeightError(bits=4))``
descends it along the exact symmetries of the function (by default; a symmetry of the loss
alone, such as the logits' softmax translation, would change what the quantized model
computes), and the teleport's guard checks the loss is kept.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import Tensor, nn

from paramsym.core.calls import call_arguments
from paramsym.core.params import stateless_call
from paramsym.errors import InvalidArgumentError, MissingCalibrationError
from paramsym.quantization.quantizer import Quantizer
from paramsym.quantization.simulate import quantized_call, reader_inputs, readers
from paramsym.symmetry.base import Symmetry
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

    def value(self, params: Mapping[str, Tensor]) -> Tensor:
        """The objective at ``params`` (differentiable)."""
        names = self.names(dict(params))
        if not names:
            raise InvalidArgumentError(f"{self.name}: the model has no weight to quantize")
        return self._sum(params, names)

    def _sum(self, params: Mapping[str, Tensor], names: Sequence[str]) -> Tensor:
        first = params[names[0]] if names else next(iter(params.values()))
        total = torch.zeros((), dtype=first.dtype, device=first.device)
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

    def start(
        self, symmetries: Sequence[Symmetry], params: Mapping[str, Tensor], batch: Any
    ) -> None:
        """At the start of a teleport: the terms of the weights no symmetry moves are constant
        (a Llama's token embedding, which only approximate symmetries move), so they are
        summed once here, without a graph, and each evaluation differentiates only the moved
        weights' terms."""
        names = self.names(dict(params))
        if not names:
            raise InvalidArgumentError(f"{self.name}: the model has no weight to quantize")
        touched = {n for s in symmetries for n in s.parameter_names}
        self._moved = [k for k in names if k in touched]
        with torch.no_grad():
            self._constant = self._sum(params, [k for k in names if k not in touched]).detach()

    def __call__(self, context: TeleportContext) -> Tensor:
        moved = getattr(self, "_moved", None)
        if moved is None:
            return self.value(context.params)
        return self._sum(context.params, moved) + self._constant


OUTLIER_MEASURES = ("max_rms", "kurtosis")
"""What :class:`ActivationOutliers` measures of each reader's input."""


def outlier_measure(x: Tensor, measure: str) -> Tensor:
    """``"max_rms"``: max|x| / RMS(x); ``"kurtosis"``: E[(x − μ)⁴] / σ⁴, over all entries."""
    if measure == "max_rms":
        return x.abs().max() / x.square().mean().sqrt().clamp_min(1e-300)
    centred = x - x.mean()
    variance = centred.square().mean().clamp_min(1e-300)
    return centred.pow(4).mean() / variance.square()


class ActivationOutliers(Objective):
    """The mean over the readers of an outlier measure of their inputs on a calibration batch
    (module docstring), minimised.

    Args:
        measure: ``"max_rms"`` or ``"kurtosis"`` (:data:`OUTLIER_MEASURES`).
        calibration: the inputs to measure on (a batch the model accepts); default: the
            teleport batch's inputs.
        skip: reader modules left out (e.g. ``["lm_head"]``).
    """

    maximize = False
    keeps_function = True

    def __init__(
        self, measure: str = "max_rms", calibration: Any = None, *, skip: Sequence[str] = ()
    ) -> None:
        if measure not in OUTLIER_MEASURES:
            raise InvalidArgumentError(
                f"ActivationOutliers: measure must be one of {OUTLIER_MEASURES}, got {measure!r}"
            )
        self.measure, self.calibration, self.skip = measure, calibration, tuple(skip)
        self.name = f"activation_outliers({measure})"

    def value(self, model: nn.Module, params: dict[str, Tensor], calibration: Any = None) -> Tensor:
        """The measure at ``params`` on ``calibration`` (default: the one given at
        construction), differentiable in ``params``."""
        inputs = self.calibration if calibration is None else calibration
        if inputs is None:
            raise MissingCalibrationError(
                f"{self.name}: no calibration batch; give ActivationOutliers(calibration=x) or "
                "call it from ps.teleport, whose batch's inputs it then reads"
            )
        modules = readers(model, self.skip)
        if not modules:
            raise InvalidArgumentError(
                f"{self.name}: {type(model).__name__} has no linear map or convolution to read"
            )
        args, kwargs = call_arguments(model, inputs, self.name)
        with reader_inputs(modules, {}) as seen:
            stateless_call(model, params, args, kwargs)
        if not seen:
            raise InvalidArgumentError(
                f"{self.name}: no reader of {type(model).__name__} was called on the batch"
            )
        values = [outlier_measure(x, self.measure) for x in seen.values()]
        return torch.stack(values).mean()

    def __call__(self, context: TeleportContext) -> Tensor:
        fallback = context.batch[0] if context.batch is not None else None
        return self.value(context.model, context.params, self.calibration or fallback)


class QuantizedLoss(Objective):
    """The teleport batch's loss of the fake-quantized model (straight-through), minimised.

    Args:
        weights, activations: the :class:`Quantizer` of the readers' weights and inputs (at
            least one).
        skip: readers kept in floating point.
    """

    maximize = False
    keeps_function = True

    def __init__(
        self,
        weights: Quantizer | None = None,
        activations: Quantizer | None = None,
        *,
        skip: Sequence[str] = (),
    ) -> None:
        if weights is None and activations is None:
            raise InvalidArgumentError(
                "QuantizedLoss: give a weight or an activation Quantizer (nothing is quantized)"
            )
        self.weights, self.activations, self.skip = weights, activations, tuple(skip)
        parts = [
            f"W{weights.bits}" if weights else "",
            f"A{activations.bits}" if activations else "",
        ]
        self.name = f"quantized_loss({''.join(parts)})"

    def __call__(self, context: TeleportContext) -> Tensor:
        inputs, targets = context.batch
        output = quantized_call(
            context.model,
            context.params,
            inputs,
            weights=self.weights,
            activations=self.activations,
            ste=True,
            skip=self.skip,
        )
        return context.loss_fn(output, targets)
