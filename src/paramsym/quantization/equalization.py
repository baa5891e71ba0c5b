"""Cross-layer equalization (Nagel et al., ICCV 2019, "Data-free quantization through weight
equalization and bias correction", §4.1), on the rescalings the detector finds.

Between two layers joined by a positively homogeneous activation (ReLU: σ(cz) = c σ(z)), the
rescaling ``W1 ↦ diag(c) W1, b1 ↦ c ⊙ b1, W2 ↦ W2 diag(c)⁻¹`` keeps the function
(:class:`~paramsym.symmetry.PositiveScaling`). With r1_i the range max|·| of output channel i of
W1 and r2_i that of input channel i of W2, Nagel et al.'s closed form divides W1's channel i by

    s_i = √(r1_i r2_i) / r2_i            (their Eq. 11; here c_i = 1 / s_i = √(r2_i / r1_i)),

after which both ranges are √(r1_i r2_i): the per-channel ranges are equal, which maximises
the sum over channels of each one's precision under a per-tensor quantizer. For an α-homogeneous
activation the outgoing weight takes c^{−α} and the equal point is c = (r2 / r1)^{1/(1 + α)};
where several weights feed (or read) the channels, r is the largest of their ranges. Chains
(conv → depthwise conv → conv, as in MobileNetV2) have one group per joint; as in the paper, the
closed form is applied to each group in turn and the sweeps repeated until no scale moves by
more than ``tol`` (in log).

Every group comes from :func:`paramsym.symmetries` on the model's traced graph, so the same code
equalises an MLP, a CNN, a ResNet's inner convolutions, or a gated MLP's up/down pair; the
function is kept exactly (up to rounding; :attr:`EqualizationResult.output_change`). BatchNorm
between the layers must be folded into the convolutions first (as the paper does): the
rescaling then acts on the folded weights.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from paramsym.core.params import output_change
from paramsym.errors import InvalidArgumentError, UnsupportedModuleError
from paramsym.symmetry.base import Slot, Symmetry
from paramsym.symmetry.scaling import PositiveScaling


@dataclass
class EqualizationResult:
    """What :func:`equalize` did.

    Attributes:
        model: the equalized model (a new one; the given model is unchanged).
        groups: names of the rescaling groups equalized.
        sweeps: sweeps over the groups until every scale moved by at most ``tol`` (in log).
        converged: whether that happened within ``max_sweeps``.
        scales: the total scale c of each group (by name): channel i of the incoming weights
            was multiplied by c_i, of the outgoing ones by c_i^(−α).
        output_change: max |f_new(x) − f(x)| / max |f(x)| on the example input.
    """

    model: nn.Module = field(repr=False)
    groups: list[str]
    sweeps: int
    converged: bool
    scales: dict[str, Tensor] = field(default_factory=dict, repr=False)
    output_change: float = math.nan

    def __str__(self) -> str:
        state = "converged" if self.converged else "not converged"
        return (
            f"{type(self.model).__name__} equalized: {len(self.groups)} rescaling group(s), "
            f"{self.sweeps} sweep(s), {state}; output change {self.output_change:.2e}"
        )


def neuron_ranges(t: Tensor, slot: Slot, width: int) -> Tensor:
    """max |t| over everything but the neuron axis of ``slot``: shape ``(width,)``."""
    part = t.narrow(slot.axis, slot.offset or 0, width * slot.block).movedim(slot.axis, 0)
    return part.reshape(width, -1).abs().amax(dim=1)


def equalizable(symmetries: Sequence[Symmetry]) -> list[PositiveScaling]:
    """The exact per-neuron rescalings with a weight (a tensor of two or more axes) on both
    sides: what cross-layer equalization moves along."""
    return [
        s
        for s in symmetries
        if isinstance(s, PositiveScaling)
        and s.exact
        and s.per_neuron
        and any(slot.power > 0 for slot in s.slots)
        and any(slot.power < 0 for slot in s.slots)
    ]


def side_range(s: PositiveScaling, state: dict[str, Tensor], incoming: bool) -> Tensor | None:
    """The largest :func:`neuron_ranges` over the weights (tensors of two or more axes) on one
    side of group ``s`` (``incoming``: the slots multiplied by c; else those by c^(−α)), shape
    ``(width,)``; ``None`` when that side has no weight (biases follow the weights)."""
    ranges = [
        neuron_ranges(state[slot.name], slot, s.width)
        for slot in s.slots
        if (slot.power > 0) == incoming and state[slot.name].ndim >= 2
    ]
    return torch.stack(ranges).amax(dim=0) if ranges else None


def _sides(s: PositiveScaling, state: dict[str, Tensor]) -> tuple[Tensor, Tensor, float] | None:
    """(r_in, r_out, power difference) of group ``s``; ``None`` when a side has no weight."""
    r_in, r_out = side_range(s, state, True), side_range(s, state, False)
    if r_in is None or r_out is None:
        return None
    incoming = next(t.power for t in s.slots if t.power > 0)
    outgoing = next(t.power for t in s.slots if t.power < 0)
    return r_in, r_out, incoming - outgoing


def equalize(
    model: nn.Module,
    example_input: Any,
    *,
    max_sweeps: int = 100,
    tol: float = 1e-6,
    symmetries: Sequence[Symmetry] | None = None,
) -> EqualizationResult:
    """Cross-layer equalization of every exact rescaling of ``model`` (module docstring).

    Args:
        model: any model :func:`paramsym.symmetries` traces (left unchanged).
        example_input: a batch the model accepts, for the trace and the output check.
        max_sweeps: most sweeps over the groups.
        tol: stop when no scale of a sweep differs from 1 by more than ``tol`` in log.
        symmetries: the groups to use (default: :func:`paramsym.symmetries` of the model);
            the rescalings among them with weights on both sides are equalized.

    Returns:
        An :class:`EqualizationResult` with the new model.

    Raises:
        UnsupportedModuleError: no rescaling between two weights (e.g. a BatchNorm between
            every pair of layers: fold it into the convolutions first,
            ``torch.nn.utils.fusion.fuse_conv_bn_eval``).
        InvalidArgumentError: ``max_sweeps < 1`` or ``tol ≤ 0``.
    """
    if max_sweeps < 1 or not tol > 0:
        raise InvalidArgumentError(
            f"equalize: max_sweeps ≥ 1 and tol > 0 are needed, got {max_sweeps}, {tol}"
        )
    if symmetries is None:
        from paramsym.symmetry.detect import symmetries as detect

        symmetries = detect(model, example_input=example_input)
    groups = equalizable(symmetries)
    equalized = copy.deepcopy(model)
    state = {k: v.detach() for k, v in equalized.named_parameters()}
    groups = [s for s in groups if _sides(s, state) is not None]
    if not groups:
        raise UnsupportedModuleError(
            f"equalize: {type(model).__name__} has no exact rescaling between two weight "
            "layers (a ReLU-type activation between linear maps or convolutions); fold "
            "BatchNorm into the convolutions first (torch.nn.utils.fusion.fuse_conv_bn_eval)"
        )
    totals = {s.name: torch.ones(s.width, dtype=torch.float64) for s in groups}
    sweeps, converged = 0, False
    while sweeps < max_sweeps and not converged:
        sweeps += 1
        largest = 0.0
        for s in groups:
            sides = _sides(s, state)
            assert sides is not None
            r_in, r_out, spread = sides
            usable = (r_in > 0) & (r_out > 0)
            ratio = torch.where(usable, r_out / torch.where(usable, r_in, 1.0), 1.0)
            c = ratio ** (1.0 / spread)
            largest = max(largest, float(c.double().log().abs().max()))
            state.update(s.act({k: state[k] for k in s.parameter_names}, c))
            totals[s.name] *= c.double().cpu()
        converged = largest <= tol
    with torch.no_grad():
        for name, value in state.items():
            equalized.get_parameter(name).copy_(value)
    return EqualizationResult(
        model=equalized,
        groups=[s.name for s in groups],
        sweeps=sweeps,
        converged=converged,
        scales=totals,
        output_change=output_change(model, equalized, example_input),
    )
