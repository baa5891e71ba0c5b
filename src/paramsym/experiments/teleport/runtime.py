"""``teleport-runtime`` (seed 001, dissertation Fig 4.9).

Runtime of GD with a 10-step teleport every 10 epochs against the width and the depth of the
network, and the teleport's share of it. Wall-clock times run torch on one thread (the paper:
"one CPU"), after a warm-up.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import torch
from torch import nn

import paramsym as ps
from paramsym.core.tables import concat_tables, table_rows
from paramsym.errors import InvalidArgumentError
from paramsym.experiments.registry import Claim, Progress, Result, experiment
from paramsym.experiments.teleport.convergence import F64, step_bound
from paramsym.experiments.teleport.regression_training import (
    TrainingRun,
    layer_pair_actions,
    train_network,
)
from paramsym.teleportation import (
    Schedule,
    TeleportConfig,
)

# == teleport-runtime (Fig 4.9) ====================================================================


@dataclass(frozen=True)
class RuntimeConfig:
    """Settings of ``teleport-runtime`` (dissertation §4.6.4, Fig 4.9).

    Attributes:
        seed: initialisation (``ps.mlp``'s default, U(±1/√fan_in)) and data (U[0, 1]).
        epochs: full-batch GD steps (300).
        every, teleport_steps: a ``teleport_steps``-step teleport before steps every−1,
            2·every−1, … (10 and 10).
        dimensions, dimension_layers: (a) ``dimension_layers`` layers with square d×d weights
            and d×d data, for each d.
        depths, depth_width: (b) all matrices ``depth_width`` × ``depth_width`` (128) with
            each number of layers (weight matrices).
        fit_from: the power law is fitted on dimensions ≥ this (below it the fixed cost of
            each call dominates); all dimensions are fitted too, and reported.
        lr, teleport_lr, max_step_norm: GD and ascent rates; runtime does not depend on them
            as long as training stays finite. Chosen tiny for that: Eq. 4.13 moves the weights
            by about cond(h)·‖T‖, and the hidden features of deeper nets are ill-conditioned
            (cond ~ 10⁴ at depth 6), so larger rates diverge.
        action: the GL action on every layer pair.
        threads: torch threads (one, like the paper's timings).
    """

    seed: int = 0
    epochs: int = 300
    every: int = 10
    teleport_steps: int = 10
    dimensions: tuple[int, ...] = (4, 8, 16, 32, 64, 128)
    dimension_layers: int = 3
    depths: tuple[int, ...] = (2, 3, 4, 5, 6)
    depth_width: int = 128
    fit_from: int = 32
    lr: float = 1e-6
    teleport_lr: float = 1e-8
    max_step_norm: float = 1e-4
    action: str = "inverse_GL"
    threads: int = 1


@dataclass
class RuntimeRow:
    """Wall-clock seconds of one network size: GD alone, and GD with teleports."""

    width: int
    layers: int
    seconds_without: float
    seconds_with: float
    teleport_seconds: float
    teleports: int
    ascent_steps: int
    diverged: bool

    @property
    def teleport_share(self) -> float:
        return self.teleport_seconds / self.seconds_with


def time_training(config: RuntimeConfig, width: int, layers: int) -> RuntimeRow:
    """GD for ``config.epochs`` steps on a ``layers``-layer LeakyReLU(0.1) net with square
    ``width`` matrices and ``width`` samples, without and then with the scheduled teleports
    (float64, so that the loss guard of the teleport is not tripped by rounding)."""
    generator = torch.Generator().manual_seed(config.seed)
    widths = [width] * (layers + 1)
    template = ps.mlp(widths, nn.LeakyReLU(0.1), bias=False, dtype=F64, seed=config.seed)
    batch = (
        torch.rand(width, width, generator=generator, dtype=F64),
        torch.rand(width, width, generator=generator, dtype=F64),
    )
    plan = TeleportConfig(
        steps=config.teleport_steps,
        lr=config.teleport_lr,
        parameterization="first_order",
        max_step_norm=step_bound(config.max_step_norm),
        keep_worse=True,  # Algorithm 1 applies every teleport
    )

    def train(schedule: Schedule) -> TrainingRun:
        model = copy.deepcopy(template)
        return train_network(
            model,
            batch,
            "gd",
            config.lr,
            config.epochs,
            schedule=schedule,
            teleport=plan,
            symmetries=layer_pair_actions(model, config.action),
            threads=config.threads,
        )

    without = train(Schedule.never())
    with_teleports = train(Schedule.every(config.every, start=config.every - 1))
    return RuntimeRow(
        width,
        layers,
        without.seconds[-1],
        with_teleports.seconds[-1],
        with_teleports.teleport_seconds,
        len(with_teleports.teleport_steps_taken),
        with_teleports.ascent_steps,
        without.diverged or with_teleports.diverged,
    )


def power_law_fit(x: Sequence[float], y: Sequence[float]) -> tuple[float, float]:
    """(slope, R²) of the least-squares line through (log x, log y): y ∝ x^slope."""
    return linear_fit(np.log(np.asarray(x, float)).tolist(), np.log(np.asarray(y, float)).tolist())


def linear_fit(x: Sequence[float], y: Sequence[float]) -> tuple[float, float]:
    """(slope, R²) of the least-squares line y = a + slope·x."""
    xs, ys = np.asarray(x, float), np.asarray(y, float)
    slope, intercept = np.polyfit(xs, ys, 1)
    residual = float(((ys - (intercept + slope * xs)) ** 2).sum())
    total = float(((ys - ys.mean()) ** 2).sum())
    return float(slope), 1.0 - residual / total if total > 0 else math.nan


def _runtime_table(rows: Sequence[RuntimeRow], panel: str) -> dict[str, list[Any]]:
    return {
        "panel": [panel] * len(rows),
        "width": [r.width for r in rows],
        "layers": [r.layers for r in rows],
        "seconds_without_teleport": [r.seconds_without for r in rows],
        "seconds_with_teleport": [r.seconds_with for r in rows],
        "teleport_seconds": [r.teleport_seconds for r in rows],
        "teleport_share": [r.teleport_share for r in rows],
        "teleports": [r.teleports for r in rows],
        "ascent_steps": [r.ascent_steps for r in rows],
        "diverged": [r.diverged for r in rows],
    }


def run_runtime(config: RuntimeConfig, progress: Progress) -> Result:
    """Fig 4.9: runtime of GD with a teleport every ``every`` epochs vs width and depth."""
    if len(config.dimensions) < 3 or len(config.depths) < 3:
        raise InvalidArgumentError(
            "teleport-runtime: give at least 3 dimensions and 3 depths to fit the growth"
        )
    time_training(dataclasses.replace(config, epochs=2 * config.every), 4, 2)  # warm-up
    by_dimension = [
        time_training(config, d, config.dimension_layers)
        for d in progress.track(config.dimensions, description="(a) dimensions")
    ]
    by_depth = [
        time_training(config, config.depth_width, layers)
        for layers in progress.track(config.depths, description="(b) depths")
    ]
    upper = [r for r in by_dimension if r.width >= config.fit_from]
    if len(upper) < 2:
        upper = sorted(by_dimension, key=lambda r: r.width)[-2:]
    slope, r2 = power_law_fit([r.width for r in upper], [r.seconds_with for r in upper])
    slope_all, r2_all = power_law_fit(
        [r.width for r in by_dimension], [r.seconds_with for r in by_dimension]
    )
    depth_slope, depth_r2 = linear_fit(
        [r.layers for r in by_depth], [r.seconds_with for r in by_depth]
    )
    shares = [r.teleport_share for r in (*by_dimension, *by_depth)]
    metrics = {
        "dimension_slope": slope,
        "dimension_r2": r2,
        "dimension_fit_widths": [r.width for r in upper],
        "dimension_slope_all": slope_all,
        "dimension_r2_all": r2_all,
        "depth_seconds_per_layer": depth_slope,
        "depth_r2": depth_r2,
        "teleport_share_min": min(shares),
        "teleport_share_median": statistics.median(shares),
        "teleports_per_run": by_dimension[0].teleports,
        "ascent_steps_per_teleport": statistics.fmean(
            r.ascent_steps / max(r.teleports, 1) for r in (*by_dimension, *by_depth)
        ),
        "diverged": sum(r.diverged for r in (*by_dimension, *by_depth)),
    }
    series = {
        "runtime": concat_tables([_runtime_table(by_dimension, "a"), _runtime_table(by_depth, "b")])
    }
    notes = [
        f"GD (lr {config.lr:g}, loss 0.5‖·‖²_F, float64) for {config.epochs} epochs with a "
        f"{config.teleport_steps}-step teleport ({config.action} on every layer pair, lr "
        f"{config.teleport_lr:g}, steps bounded to {config.max_step_norm:g}) before steps "
        f"{config.every - 1}, {2 * config.every - 1}, …; the same GD without teleports timed "
        f"right before; {config.threads} torch thread(s)",
        f"power law fitted on widths {[r.width for r in upper]} (≥ {config.fit_from}: at small "
        "widths the fixed per-call overhead dominates)",
    ]
    return Result(metrics, series, notes)


def plot_runtime(result: Result) -> dict[str, Any]:
    """Fig 4.9: (a) runtime vs matrix dimension (log-log), (b) runtime vs number of layers."""
    table = result.series["runtime"]
    figure, (left, right) = plt.subplots(1, 2, figsize=(11, 4.4))
    for axis, panel, key in ((left, "a", "width"), (right, "b", "layers")):
        rows = table_rows(table, panel=panel)
        for column, label, style in (
            ("seconds_with_teleport", "GD + teleport (total)", "-o"),
            ("teleport_seconds", "teleport only", "--s"),
            ("seconds_without_teleport", "GD without teleport", ":^"),
        ):
            axis.plot(rows[key], rows[column], style, label=label)
        axis.set_ylabel("runtime (s)")
        axis.legend(fontsize=8)
    m = result.metrics
    left.set_xscale("log", base=2)
    left.set_yscale("log")
    left.set_xlabel("dimension of the square weight and data matrices")
    left.set_title(
        f"(a) 3 layers: runtime ∝ d^{m['dimension_slope']:.2f} (d ≥ {m['dimension_fit_widths'][0]})"
    )
    right.set_xlabel("number of layers")
    right.set_xticks(sorted(set(table_rows(table, panel="b")["layers"])))
    right.set_title(f"(b) width {table['width'][-1]}: linear fit R² = {m['depth_r2']:.3f}")
    figure.suptitle("GD with a teleport every 10 epochs: runtime (dissertation Fig 4.9)")
    figure.tight_layout()
    return {"runtime.png": figure}


def _check_dimension(result: Result) -> tuple[str, bool]:
    m = result.metrics
    measured = (
        f"runtime ∝ d^{m['dimension_slope']:.2f} (log-log R² {m['dimension_r2']:.3f}) on widths "
        f"{m['dimension_fit_widths']}; over all widths d^{m['dimension_slope_all']:.2f} "
        f"(R² {m['dimension_r2_all']:.3f})"
    )
    return measured, m["dimension_r2"] >= 0.9 and m["dimension_slope"] > 0.5


def _check_depth(result: Result) -> tuple[str, bool]:
    m = result.metrics
    measured = f"{m['depth_seconds_per_layer']:.3g} s per layer, linear fit R² {m['depth_r2']:.3f}"
    return measured, m["depth_r2"] >= 0.95 and m["depth_seconds_per_layer"] > 0


def _check_share(result: Result) -> tuple[str, bool]:
    m = result.metrics
    measured = (
        f"teleport share of the runtime: min {m['teleport_share_min']:.1%}, median "
        f"{m['teleport_share_median']:.1%} ({m['ascent_steps_per_teleport']:.1f} ascent steps "
        "per teleport on average)"
    )
    return measured, m["teleport_share_min"] > 0.5


experiment(
    "teleport-runtime",
    seed_ref="seed 001, dissertation Fig 4.9 (§4.6.4)",
    description=(
        "runtime of 300 epochs of GD on a LeakyReLU(0.1) net with a 10-step teleport "
        "(Eq. 4.13 on every layer pair) every 10 epochs: (a) 3 layers with square d×d weights "
        "and data, (b) 128×128 matrices with varying depth; with and without teleport. Chosen "
        "here: float64, ps.mlp's default init, U[0,1] data, tiny rates so that training "
        "stays finite, one torch thread; the power law is fitted on d ≥ 32"
    ),
    quick=RuntimeConfig(
        epochs=40, dimensions=(8, 16, 32, 64, 128), depths=(2, 3, 4, 5, 6), depth_width=32
    ),
    paper=RuntimeConfig(),
    claims=[
        Claim(
            "runtime grows polynomially with the matrix dimension",
            "seed 001, Fig 4.9a, §4.6.4",
            "polynomial growth (a straight line on log-log axes); cost O(d_max² n l t)",
            _check_dimension,
        ),
        Claim(
            "runtime grows linearly with the number of layers",
            "seed 001, Fig 4.9b, §4.6.4",
            "linear in depth",
            _check_depth,
        ),
        Claim(
            "the runtime is dominated by teleportation in this setting",
            "seed 001, §4.6.4",
            "teleport time > half of the total at every size",
            _check_share,
        ),
    ],
    plot=plot_runtime,
)(run_runtime)
