"""Shared helpers of the seed 000 teleportation experiments (``ntk-linearization``,
``teleport-alignment``): NTK-parameterised MLPs, the losses, power-law fits and summaries.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence

import numpy as np
from torch import Tensor, nn

import paramsym as ps

LossFn = Callable[[Tensor, Tensor], Tensor]
VARIANTS = ("standard", "transformed")
COLOURS = {"standard": "tab:blue", "transformed": "tab:orange"}
LINESTYLES = {"standard": "-", "transformed": "--"}

# -- shared helpers -------------------------------------------------------------------------------


def ntk_mlp(inputs: int, width: int, classes: int, seed: int) -> nn.Sequential:
    """The seed 000 architecture: two ReLU hidden layers of ``width``, no biases, NTK
    parameterisation (App. A.6, Eq. 33), float32, drawn from ``seed``."""
    return ps.mlp(
        [inputs, width, width, classes], "relu", bias=False, parameterization="ntk", seed=seed
    )


def half_squared_error(outputs: Tensor, labels: Tensor) -> Tensor:
    """C = ½‖F − onehot(y)‖² summed over outputs, mean over samples (seed 000 Eq. 13)."""
    target = nn.functional.one_hot(labels, outputs.shape[-1]).to(outputs.dtype)
    return 0.5 * (outputs - target).pow(2).sum(dim=-1).mean()


def loss_function(name: str) -> LossFn:
    """``"cross_entropy"`` (``nn.CrossEntropyLoss``) or ``"mse"`` (:func:`half_squared_error`)."""
    if name == "cross_entropy":
        return nn.CrossEntropyLoss()
    if name == "mse":
        return half_squared_error
    raise ps.InvalidArgumentError(f"loss must be 'cross_entropy' or 'mse', got {name!r}")


def power_law_exponent(widths: Sequence[float], values: Sequence[float]) -> float:
    """α of the least-squares fit log v = α log n + b (NaN with fewer than two points)."""
    if len(widths) < 2:
        return math.nan
    slope, _ = np.polyfit(np.log(np.asarray(widths)), np.log(np.asarray(values)), 1)
    return float(slope)


def _spread(values: Sequence[float]) -> float:
    return statistics.stdev(values) if len(values) > 1 else math.nan


def parameter_distance(a: dict[str, Tensor], b: dict[str, Tensor]) -> float:
    """‖a − b‖ / ‖b‖ over all entries."""
    difference = sum(float((a[k] - b[k]).pow(2).sum()) for k in b)
    return math.sqrt(difference / sum(float(t.pow(2).sum()) for t in b.values()))
