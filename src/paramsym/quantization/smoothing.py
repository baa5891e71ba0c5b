"""SmoothQuant's migration of activation outliers into the weights (Xiao et al., ICML 2023,
Eq. 4), on the rescalings the detector finds.

Where an exact per-channel rescaling joins a producer to the linear maps that read its output
(a norm's weight to the query/key/value or gate/up projections, an up projection to the down
projection, a linear map through a ReLU to the next), dividing channel j of the readers' input
X by s_j and multiplying column j of their weights W by s_j keeps the function
(:class:`~paramsym.symmetry.PositiveScaling`, the producer's channel j divided by s_j). With
max|X_j| measured on a calibration batch and max|W_j| over every reader's column j,

    s_j = max|X_j|^α / max|W_j|^(1 − α)            (their Eq. 4; α = 0.5 by default),

which moves the activation outliers into the weights: at α = 0.5 both ranges become
√(max|X_j| · max|W_j|). Every scale is computed from the calibration statistics of the given
model (as the paper does): moving one group does not change the activations another group's
readers see (each move keeps the function, and readers of one tensor are in one group). The
groups are moved downstream first, each reading the weight ranges the later ones left (a
SwiGLU's up projection is a reader of the norm's group by its columns and the producer of the
down projection's group by its rows). A reader's input feature is read through the slot's
layout (a flattened channel spans its block of features).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import torch
from torch import Tensor, nn

from paramsym.core.calls import call_arguments
from paramsym.core.params import output_change
from paramsym.errors import InvalidArgumentError, UnsupportedModuleError
from paramsym.quantization.equalization import equalizable, neuron_ranges, side_range
from paramsym.quantization.simulate import reads_last_axis
from paramsym.symmetry.base import Symmetry
from paramsym.symmetry.scaling import PositiveScaling


@dataclass
class SmoothingResult:
    """What :func:`smooth` did.

    Attributes:
        model: the smoothed model (a new one; the given model is unchanged).
        groups: names of the rescaling groups moved.
        scales: s of each group (by name): the readers' input channel j was divided by s_j.
        activation_ranges: max|X_j| of each group's readers' input on the calibration batch,
            before smoothing.
        output_change: max |f_new(x) − f(x)| / max |f(x)| on the calibration batch.
    """

    model: nn.Module = field(repr=False)
    groups: list[str]
    scales: dict[str, Tensor] = field(default_factory=dict, repr=False)
    activation_ranges: dict[str, Tensor] = field(default_factory=dict, repr=False)
    output_change: float = math.nan

    def __str__(self) -> str:
        return (
            f"{type(self.model).__name__} smoothed: {len(self.groups)} rescaling group(s); "
            f"output change {self.output_change:.2e}"
        )


def _readers(s: PositiveScaling, modules: dict[str, nn.Module]) -> list[str] | None:
    """The modules whose weights are the outgoing slots of ``s``, when every one is a reader
    of its input's last axis (else ``None``)."""
    names = []
    for slot in s.slots:
        if slot.power > 0:
            continue
        module_name, _, leaf = slot.name.rpartition(".")
        module = modules.get(module_name)
        if module is None or leaf != "weight" or not reads_last_axis(module):
            return None
        names.append(module_name)
    return list(dict.fromkeys(names)) or None


def activation_ranges(
    model: nn.Module, modules: Sequence[str], calibration: Any
) -> dict[str, Tensor]:
    """max |x| over every axis but the last of the input of each module in ``modules``, on
    one forward pass over ``calibration``: shape (in_features,) each."""
    found: dict[str, Tensor] = {}
    named = dict(model.named_modules())

    def hook(name: str):
        def record(module: nn.Module, inputs: tuple[Any, ...]) -> None:
            x = inputs[0].detach()
            value = x.abs().reshape(-1, x.shape[-1]).amax(dim=0)
            found[name] = torch.maximum(found[name], value) if name in found else value

        return record

    handles = [named[m].register_forward_pre_hook(hook(m)) for m in modules]
    args, kwargs = call_arguments(model, calibration)
    try:
        with torch.no_grad():
            model(*args, **kwargs)
    finally:
        for handle in handles:
            handle.remove()
    return found


def smooth(
    model: nn.Module,
    calibration: Any,
    *,
    alpha: float = 0.5,
    symmetries: Sequence[Symmetry] | None = None,
) -> SmoothingResult:
    """SmoothQuant's migration on every exact rescaling into linear maps (module docstring).

    Args:
        model: any model :func:`paramsym.symmetries` traces (left unchanged).
        calibration: a batch the model accepts (a tensor, a tuple, or a dict of keyword
            inputs): the activation ranges are measured on it, and the trace made from it.
        alpha: migration strength α ∈ [0, 1] (1: every activation range becomes 1; 0: every
            weight range does; 0.5: the two become equal).
        symmetries: the groups to use (default: :func:`paramsym.symmetries` of the model).

    Returns:
        A :class:`SmoothingResult` with the new model.

    Raises:
        InvalidArgumentError: ``alpha`` outside [0, 1].
        UnsupportedModuleError: no exact rescaling whose readers are linear maps.
    """
    if not 0.0 <= alpha <= 1.0:
        raise InvalidArgumentError(f"smooth: alpha must be in [0, 1], got {alpha}")
    if symmetries is None:
        from paramsym.symmetry.detect import symmetries as detect

        symmetries = detect(model, example_input=calibration)
    modules = dict(model.named_modules())
    groups = []
    for s in equalizable(symmetries):
        readers = _readers(s, modules)
        if readers is not None and s.degree == 1.0:
            groups.append((s, readers))
    if not groups:
        raise UnsupportedModuleError(
            f"smooth: {type(model).__name__} has no exact rescaling whose readers are linear "
            "maps (nn.Linear or Hugging Face Conv1D): nothing to migrate activation outliers "
            "along"
        )
    ranges = activation_ranges(model, sorted({m for _, r in groups for m in r}), calibration)
    smoothed = copy.deepcopy(model)
    state = {k: v.detach() for k, v in smoothed.named_parameters()}
    result = SmoothingResult(smoothed, [s.name for s, _ in groups])
    # downstream first: a group's move rescales its producer's rows, which may be the readers'
    # columns of the group before it (up_proj for norm → gate/up, after up → down), so each
    # group reads the weight ranges the later ones left
    for s, _ in reversed(groups):
        outgoing = [t for t in s.slots if t.power < 0]
        x_range = torch.stack(
            [neuron_ranges(ranges[t.name.rpartition(".")[0]], replace(t, axis=0), s.width)
             for t in outgoing]
        ).amax(dim=0)  # fmt: skip
        w_range = side_range(s, state, incoming=False)
        assert w_range is not None  # every outgoing slot is a reader's weight
        usable = (x_range > 0) & (w_range > 0)
        scale = torch.where(
            usable, x_range.pow(alpha) / torch.where(usable, w_range, 1.0).pow(1 - alpha), 1.0
        )
        state.update(s.act({k: state[k] for k in s.parameter_names}, 1.0 / scale))
        result.scales[s.name] = scale
        result.activation_ranges[s.name] = x_range
    with torch.no_grad():
        for name, value in state.items():
            smoothed.get_parameter(name).copy_(value)
    result.output_change = output_change(model, smoothed, calibration)
    return result
