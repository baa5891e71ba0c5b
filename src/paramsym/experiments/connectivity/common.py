"""Shared helpers of the mode-connectivity experiments (seed 001, ch. 3 (Zhao et al., ICML 2025)).

Seeded generators, the losses and error rate, full-batch gradient descent, slopes and summaries,
used by ``minimum-components``, ``lmc-barrier``, ``symmetry-curves`` and
``permutation-alignment`` (and by ``cnn-matching``, ``teleport-cnn`` and the architecture
experiments). Everything that checks an identity runs in float64; classification training in
float32.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence

import torch
from torch import Tensor, nn

F64 = torch.float64
ZERO_LOSS = 1e-16
"""‖Y − f‖²/‖Y‖² below this counts as zero loss: a relative residual of 1e-8, float64 rounding
amplified by the conditioning of products of up to five random 8 × 8 matrices and inverses."""

# -- shared helpers -------------------------------------------------------------------------------


def generator(seed: int) -> torch.Generator:
    """A CPU generator seeded with ``seed``."""
    return torch.Generator().manual_seed(seed)


def sum_of_squares(output: Tensor, target: Tensor) -> Tensor:
    """‖Y − f(X)‖²_F, the loss of Eq. 3.3 (a sum, not a mean: the closed form (B.5) needs it)."""
    return ((output - target) ** 2).sum()


def error_rate(output: Tensor, target: Tensor) -> Tensor:
    """1 − accuracy, a lower-is-better metric for :func:`linear_interpolation`."""
    return (output.argmax(dim=-1) != target).double().mean()


def gradient_descent(
    model: nn.Module,
    batch: tuple[Tensor, Tensor],
    loss_fn: Callable[[Tensor, Tensor], Tensor],
    learning_rate: float,
    steps: int,
) -> float:
    """Full-batch gradient descent (SGD on the whole batch) in place; returns the final loss."""
    optimizer = torch.optim.SGD(model.parameters(), lr=learning_rate)
    x, y = batch
    for _ in range(steps):
        optimizer.zero_grad()
        loss_fn(model(x), y).backward()
        optimizer.step()
    with torch.no_grad():
        return float(loss_fn(model(x), y))


def log_slope(xs: Sequence[float], ys: Sequence[float]) -> float:
    """d log y / d log x between the last two points."""
    return math.log(ys[-1] / ys[-2]) / math.log(xs[-1] / xs[-2])


def spread(values: Sequence[float], digits: int = 4) -> str:
    """``mean ± std`` (or the single value), the mean to ``digits`` significant digits."""
    if len(values) == 1:
        return f"{values[0]:.{digits}g}"
    return f"{statistics.fmean(values):.{digits}g} ± {statistics.stdev(values):.2g}"


def per_pair(values: Sequence[float]) -> list[float]:
    """Per-pair values as plain floats (for metrics.json)."""
    return [float(v) for v in values]
