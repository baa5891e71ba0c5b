"""Shared helpers of the synthetic teleportation experiments (seed 001, dissertation ch. 4, §4.6).

Plot colours and labels of the optimizers, the convergence step |L_t − L_{t+1}| < tol, the
comparison of two trajectories at equal loss (Fig 4.4) and small table helpers, used by the
modules of ``teleport-testfunctions``, ``teleport-regression``, ``teleport-sweep`` and
``teleport-runtime`` in :mod:`paramsym.experiments.teleport`.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch

F64 = torch.float64
OptimizerName = Literal["gd", "adagrad"]
OPTIMIZERS: tuple[OptimizerName, ...] = ("gd", "adagrad")
COLOURS = {
    "gd": "tab:blue",
    "gd+teleport": "tab:orange",
    "adagrad": "tab:green",
    "adagrad+teleport": "tab:red",
}
LABELS = {
    "gd": "GD",
    "gd+teleport": "GD + teleport",
    "adagrad": "AdaGrad",
    "adagrad+teleport": "AdaGrad + teleport",
}

# -- shared helpers ---------------------------------------------------------------------------


def convergence_step(losses: Sequence[float], tol: float = 1e-3) -> int | None:
    """The first step t ≥ 1 with |L_{t−1} − L_t| < ``tol`` (the paper's convergence test
    |L_t − L_{t+1}| < 10⁻³, §4.6.3), or ``None`` if the losses never settle."""
    for t in range(1, len(losses)):
        if abs(losses[t] - losses[t - 1]) < tol:
            return t
    return None


def first_passage(losses: Sequence[float], values: Sequence[float], level: float) -> float:
    """``values[t]`` at the first step t with ``losses[t] <= level`` (NaN if never)."""
    for loss, value in zip(losses, values, strict=True):
        if loss <= level:
            return float(value)
    return math.nan


@dataclass(frozen=True)
class EqualLossComparison:
    """dL/dt of two trajectories at the same loss values (Figs 4.4, 4.5d): at each level, the
    rate at the first step where each trajectory's loss reaches it."""

    levels: list[float]
    rate_baseline: list[float]
    rate_teleport: list[float]

    @property
    def fraction_larger(self) -> float:
        """Fraction of levels where the teleported trajectory has the larger dL/dt."""
        pairs = self._pairs()
        return sum(t > b for b, t in pairs) / len(pairs) if pairs else math.nan

    @property
    def median_ratio(self) -> float:
        """Median of (teleport dL/dt) / (baseline dL/dt) over the levels."""
        pairs = [(b, t) for b, t in self._pairs() if b > 0]
        return statistics.median(t / b for b, t in pairs) if pairs else math.nan

    def _pairs(self) -> list[tuple[float, float]]:
        return [
            (b, t)
            for b, t in zip(self.rate_baseline, self.rate_teleport, strict=True)
            if math.isfinite(b) and math.isfinite(t)
        ]


def compare_at_equal_loss(
    baseline: tuple[Sequence[float], Sequence[float]],
    teleported: tuple[Sequence[float], Sequence[float]],
    below: float,
    points: int = 40,
) -> EqualLossComparison:
    """Compare dL/dt of two (losses, rates) trajectories at ``points`` log-spaced loss levels
    strictly between ``below`` (e.g. the loss at the first teleport, above which the two
    trajectories coincide) and the lowest loss both reach."""
    floor = max(min(baseline[0]), min(teleported[0]))
    if not (0 < floor < below):
        return EqualLossComparison([], [], [])
    levels = np.geomspace(floor, below, points + 2)[1:-1].tolist()
    return EqualLossComparison(
        levels,
        [first_passage(*baseline, level) for level in levels],
        [first_passage(*teleported, level) for level in levels],
    )


def _mean_std(values: Sequence[float]) -> tuple[float, float]:
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return math.nan, math.nan
    return statistics.fmean(finite), statistics.stdev(finite) if len(finite) > 1 else 0.0


def _format_steps(step: int | None) -> str:
    return "never" if step is None else str(step)


def step_bound(max_step_norm: float) -> float | None:
    """``0`` in a config means an unbounded ascent step (``max_step_norm=None``)."""
    return max_step_norm if max_step_norm > 0 else None
