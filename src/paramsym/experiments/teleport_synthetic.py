"""Symmetry teleportation on synthetic problems (seed 001, dissertation ch. 4, §4.6).

* ``teleport-testfunctions`` (Figs 4.3, 4.4): gradient descent with and without teleportation
  along the SO(2) change-of-variables symmetry of the Rosenbrock and Booth functions.
* ``teleport-regression`` (Fig 4.5): a 3-layer LeakyReLU(0.1) regression trained by GD and
  AdaGrad, teleported once at epoch 5 along the data-dependent GL actions of every layer pair.
* ``teleport-sweep`` (Fig 4.7): wall-clock (and step) speedup to |L_t − L_{t+1}| < 1e-3 of that
  teleport over a grid of teleport learning rates and ascent steps.
* ``teleport-runtime`` (Fig 4.9): runtime of GD with a 10-step teleport every 10 epochs against
  the width and the depth of the network, and the teleport's share of it.

Every teleport runs through :func:`paramsym.teleport` (test functions) or
:class:`paramsym.Teleporter` (networks); these experiments only choose the symmetries, the
objective and the options. The regression training is exposed for benchmarks:

>>> problem = make_regression_problem(seed=0)
>>> base = train_regression(problem, "gd", 1e-4, 2000, stop_at_convergence=True)
>>> plan = RegressionTeleport(at=5, steps=8, lr=1e-7)
>>> tele = train_regression(problem, "gd", 1e-4, 2000, plan, stop_at_convergence=True)
>>> tele.converged_step < base.converged_step  # steps to |L_{t-1} - L_t| < 1e-3
True
>>> wall, steps = speedup(base, tele)  # Fig 4.7's t_opt / t_opt+teleport, and in steps

Choices where the dissertation is silent or its text and the authors' code disagree (notes 001b
§9; each is also in the experiments' descriptions and notes):

* regression loss 0.5‖Y − f(X)‖²_F (the authors' code; the text's unsquared norm does not fit
  the learning rates), float64, weights, X and Y drawn U[0, 1] from one generator per run;
* the GL action is Eq. 4.13 (``inverse_GL``, σ⁻¹ = LeakyReLU(10), a left inverse of the layer
  input; exact here since 4 samples ≤ 5 and 6 input features) with g = I + T
  (``parameterization="first_order"``) and its exact inverse instead of the text's I − T, so
  the loss is invariant to rounding; each ascent step starts again from T = 0 (the authors'
  composition). Ascent steps are bounded to ‖T‖ ≤ 0.1 (``max_step_norm``): with the paper's
  unbounded steps (``max_step_norm=0``) the ascent at lr 1e-7 reached ‖∇L‖² ≈ 3·10⁹ and GD
  diverged in 2 of 5 of our initialisations;
* AdaGrad (eps 1e-10, zero initial accumulator) keeps its accumulator through the teleport
  and teleports along the plain ‖∇L‖² (Ch. 4; the preconditioned objective is Ch. 5);
* test functions: Rosenbrock teleports at steps 99, 199, … (the authors' code) from the
  identity (θ₀ = 0), maximising log‖∇L‖² (same maximiser as ‖∇L‖²; its θ-gradient is scale
  free, so the paper's lr 0.1 acts alike at L = 10² and L = 10⁻⁶, where the raw objective's
  gradient vanishes) with steps bounded to 1 rad; Booth follows the text: raw ‖∇L‖², lr 1e-3,
  from a random angle θ₀ ~ U[0, π), teleport before step 4 (index 4, the authors' code);
* wall-clock times run torch on one thread (the paper: "one CPU"), after a warm-up, with the
  runs being compared measured back to back in the same process.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import statistics
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import matplotlib.pyplot as plt
import numpy as np
import torch
from torch import Tensor, nn

import paramsym as ps
from paramsym.errors import InvalidArgumentError, NonFiniteError
from paramsym.experiments.registry import Claim, Progress, Result, experiment
from paramsym.experiments.threads import torch_threads
from paramsym.landscapes import Booth, Landscape, Rosenbrock, value_loss
from paramsym.symmetry.base import Symmetry
from paramsym.teleportation import (
    FunctionObjective,
    Schedule,
    TeleportConfig,
    TeleportDriftWarning,
    Teleporter,
    TeleportEvent,
)

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


# == teleport-testfunctions (Figs 4.3, 4.4) ========================================================


def log_grad_norm(
    model: nn.Module, params: dict[str, Tensor], loss_fn: Any, batch: Any, optimizer: Any
) -> Tensor:
    """log‖∇L‖² of a landscape (a :class:`~paramsym.teleportation.FunctionObjective`): the
    same maximiser on an orbit as ‖∇L‖², with a θ-gradient that does not scale with L."""
    loss = loss_fn(ps.functional_call(model, params, batch[0]), batch[1])
    gradients = torch.autograd.grad(loss, list(params.values()), create_graph=True)
    return torch.log(sum((g * g).sum() for g in gradients))  # type: ignore[arg-type]


LOG_GRAD_NORM = FunctionObjective(log_grad_norm, name="log_grad_norm")


@dataclass(frozen=True)
class LandscapeTeleport:
    """How a test-function trajectory teleports (Algorithm 1 on SO(2)).

    Attributes:
        steps, lr: gradient-ascent steps on the angle θ and their learning rate.
        objective: ``"grad_norm"`` (‖∇L‖², the paper) or ``"log_grad_norm"``.
        theta0: ``"identity"`` (ascent from θ = 0) or ``"random"`` (first rotate by
            θ₀ ~ U[0, π), the text's Booth setting and the authors' code).
        max_step_norm: bound on each ascent step |Δθ| in radians (``None``: unbounded).
        line_search: halve a step until the objective improves.
    """

    steps: int = 10
    lr: float = 0.1
    objective: str = "grad_norm"
    theta0: str = "identity"
    max_step_norm: float | None = 1.0
    line_search: bool = False


@dataclass
class TeleportRecord:
    """One teleport of a test-function trajectory: where it started and ended, and ‖∇L‖²
    before (at the point gradient descent reached) and after."""

    step: int
    point_before: list[float]
    point_after: list[float]
    loss_before: float
    loss_after: float
    rate_before: float
    rate_after: float


@dataclass
class LandscapeRun:
    """A gradient-descent trajectory on a test function.

    Attributes:
        points: w_t before step t, and the final point (``steps + 1`` entries).
        losses, rates: L(w_t) and dL/dt = ‖∇L(w_t)‖² at each step, after any teleport.
        teleports: one record per teleport.
    """

    points: list[list[float]] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)
    rates: list[float] = field(default_factory=list)
    teleports: list[TeleportRecord] = field(default_factory=list)


def _loss_and_gradient(landscape: Landscape) -> tuple[float, Tensor]:
    loss = landscape(None)
    (gradient,) = torch.autograd.grad(loss, landscape.w)
    return float(loss.detach()), gradient


def _teleport_landscape(
    landscape: Landscape, options: LandscapeTeleport, generator: torch.Generator
) -> tuple[float, float]:
    """Teleport ``landscape`` in place along its SO(2) symmetry; (‖∇L‖² before, after)."""
    (symmetry,) = ps.symmetries(landscape)
    rate_before = float(_loss_and_gradient(landscape)[1].pow(2).sum())
    if options.theta0 == "random":
        theta = torch.rand(1, generator=generator, dtype=landscape.w.dtype) * math.pi
        rotated = symmetry.act(ps.params_of(landscape), symmetry.exp(theta))
        with torch.no_grad():
            landscape.w.copy_(rotated["w"])
    elif options.theta0 != "identity":
        raise InvalidArgumentError(
            f"teleport-testfunctions: theta0 must be 'identity' or 'random', got {options.theta0!r}"
        )
    objective = LOG_GRAD_NORM if options.objective == "log_grad_norm" else options.objective
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TeleportDriftWarning)
        result = ps.teleport(
            landscape,
            value_loss,
            (None, None),
            [symmetry],
            objective=objective,
            steps=options.steps,
            lr=options.lr,
            max_step_norm=options.max_step_norm,
            line_search=options.line_search,
            max_loss_drift=1e-6,
            keep_worse=True,  # Algorithm 1 applies every teleport
        )
    return rate_before, result.grad_norm_after**2


def run_landscape(
    landscape: Landscape,
    steps: int,
    lr: float,
    teleport_at: Sequence[int] = (),
    options: LandscapeTeleport | None = None,
    generator: torch.Generator | None = None,
) -> LandscapeRun:
    """Gradient descent w ← w − lr ∇L(w) for ``steps`` steps on ``landscape`` (changed in
    place), teleporting before the gradient of each step in ``teleport_at`` (Algorithm 1)."""
    options = options or LandscapeTeleport()
    generator = generator or torch.Generator().manual_seed(0)
    run = LandscapeRun()
    due = set(teleport_at)
    for t in range(steps):
        if t in due:
            before = landscape.w.detach().tolist()
            loss_before = float(landscape(None).detach())
            rate_before, rate_after = _teleport_landscape(landscape, options, generator)
            run.teleports.append(
                TeleportRecord(
                    t,
                    before,
                    landscape.w.detach().tolist(),
                    loss_before,
                    float(landscape(None).detach()),
                    rate_before,
                    rate_after,
                )
            )
        run.points.append(landscape.w.detach().tolist())
        loss, gradient = _loss_and_gradient(landscape)
        run.losses.append(loss)
        run.rates.append(float(gradient.pow(2).sum()))
        with torch.no_grad():
            landscape.w.sub_(lr * gradient)
    run.points.append(landscape.w.detach().tolist())
    return run


@dataclass(frozen=True)
class LandscapeConfig:
    """Settings of ``teleport-testfunctions`` (dissertation §4.6.1, Figs 4.3, 4.4).

    Attributes:
        seed: the random θ₀ of draw d uses generator ``seed·1000 + d``.
        rosenbrock_start, rosenbrock_steps, rosenbrock_lr: GD from (−1, −1), 1000 steps, 1e-3.
        rosenbrock_every: teleport before steps every−1, 2·every−1, … (the authors' 99, 199, …).
        rosenbrock_teleport_steps, rosenbrock_teleport_lr: ascent on θ (10 steps, lr 0.1).
        rosenbrock_objective, rosenbrock_theta0: see :class:`LandscapeTeleport` (our choice:
            log‖∇L‖² from the identity; the paper is silent).
        booth_start, booth_steps, booth_lr: GD from (5, −5), 10 steps, lr 0.08.
        booth_teleport_at: the step before which Booth teleports once (4: "before epoch 5").
        booth_teleport_steps, booth_teleport_lr, booth_objective, booth_theta0: the text's 10
            ascent steps at lr 1e-3 on ‖∇L‖² from θ₀ ~ U[0, π).
        booth_draws: random θ₀ drawn (draw 0 is drawn in the figures).
        max_step_norm: bound on each ascent step in radians (0: unbounded).
        target_loss: the loss at which the target counts as reached (Rosenbrock).
        threads: torch threads (tiny ``torch.func`` transforms are 10-20× slower with two
            threads contending on a shared machine).
    """

    seed: int = 0
    rosenbrock_start: tuple[float, ...] = (-1.0, -1.0)
    rosenbrock_steps: int = 1000
    rosenbrock_lr: float = 1e-3
    rosenbrock_every: int = 100
    rosenbrock_teleport_steps: int = 10
    rosenbrock_teleport_lr: float = 0.1
    rosenbrock_objective: str = "log_grad_norm"
    rosenbrock_theta0: str = "identity"
    booth_start: tuple[float, ...] = (5.0, -5.0)
    booth_steps: int = 10
    booth_lr: float = 0.08
    booth_teleport_at: int = 4
    booth_teleport_steps: int = 10
    booth_teleport_lr: float = 1e-3
    booth_objective: str = "grad_norm"
    booth_theta0: str = "random"
    booth_draws: int = 20
    max_step_norm: float = 1.0
    target_loss: float = 1e-3
    threads: int = 1


def _bound(max_step_norm: float) -> float | None:
    """``0`` in a config means an unbounded ascent step (``max_step_norm=None``)."""
    return max_step_norm if max_step_norm > 0 else None


def _landscape_series(name: str, label: str, run: LandscapeRun) -> dict[str, list[Any]]:
    teleported = {r.step for r in run.teleports}
    return {
        "function": [name] * len(run.losses),
        "trajectory": [label] * len(run.losses),
        "step": list(range(len(run.losses))),
        "w1": [p[0] for p in run.points[:-1]],
        "w2": [p[1] for p in run.points[:-1]],
        "loss": run.losses,
        "dL_dt": run.rates,
        "teleported": [t in teleported for t in range(len(run.losses))],
    }


def _concat(tables: Sequence[dict[str, list[Any]]]) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {k: [] for k in tables[0]}
    for table in tables:
        for key in out:
            out[key] += table[key]
    return out


def _teleport_table(name: str, draw: int, run: LandscapeRun) -> dict[str, list[Any]]:
    return {
        "function": [name] * len(run.teleports),
        "draw": [draw] * len(run.teleports),
        "step": [r.step for r in run.teleports],
        "w1_before": [r.point_before[0] for r in run.teleports],
        "w2_before": [r.point_before[1] for r in run.teleports],
        "w1_after": [r.point_after[0] for r in run.teleports],
        "w2_after": [r.point_after[1] for r in run.teleports],
        "loss_before": [r.loss_before for r in run.teleports],
        "loss_after": [r.loss_after for r in run.teleports],
        "dL_dt_before": [r.rate_before for r in run.teleports],
        "dL_dt_after": [r.rate_after for r in run.teleports],
    }


def _landscape_metrics(
    prefix: str, baseline: LandscapeRun, teleported: LandscapeRun, target: float
) -> dict[str, Any]:
    first = teleported.teleports[0].loss_before if teleported.teleports else baseline.losses[0]
    equal = compare_at_equal_loss(
        (baseline.losses, baseline.rates), (teleported.losses, teleported.rates), below=first
    )
    reached = [
        next((t for t, v in enumerate(run.losses) if v < target), None)
        for run in (baseline, teleported)
    ]
    return {
        f"{prefix}_final_loss_gd": baseline.losses[-1],
        f"{prefix}_final_loss_teleport": teleported.losses[-1],
        f"{prefix}_target_step_gd": reached[0],
        f"{prefix}_target_step_teleport": reached[1],
        f"{prefix}_final_point_gd": baseline.points[-1],
        f"{prefix}_final_point_teleport": teleported.points[-1],
        f"{prefix}_teleports": len(teleported.teleports),
        f"{prefix}_teleports_with_gain": sum(
            r.rate_after > r.rate_before for r in teleported.teleports
        ),
        f"{prefix}_gain_factors": [r.rate_after / r.rate_before for r in teleported.teleports],
        f"{prefix}_max_teleport_loss_drift": max(
            (abs(r.loss_after - r.loss_before) for r in teleported.teleports), default=0.0
        ),
        f"{prefix}_equal_loss_fraction_larger": equal.fraction_larger,
        f"{prefix}_equal_loss_median_ratio": equal.median_ratio,
        f"{prefix}_equal_loss_levels": len(equal.levels),
    }


def run_testfunctions(config: LandscapeConfig, progress: Progress) -> Result:
    """Figs 4.3, 4.4: GD with and without teleportation on Rosenbrock and Booth (float64)."""
    with torch_threads(config.threads):
        return _run_testfunctions(config, progress)


def _run_testfunctions(config: LandscapeConfig, progress: Progress) -> Result:
    rosenbrock = LandscapeTeleport(
        config.rosenbrock_teleport_steps,
        config.rosenbrock_teleport_lr,
        config.rosenbrock_objective,
        config.rosenbrock_theta0,
        _bound(config.max_step_norm),
    )
    booth = LandscapeTeleport(
        config.booth_teleport_steps,
        config.booth_teleport_lr,
        config.booth_objective,
        config.booth_theta0,
        _bound(config.max_step_norm),
    )
    schedule = range(config.rosenbrock_every - 1, config.rosenbrock_steps, config.rosenbrock_every)

    def start(cls: type[Landscape], point: tuple[float, ...]) -> Landscape:
        return cls(torch.tensor(point, dtype=F64))

    def generator(draw: int) -> torch.Generator:
        return torch.Generator().manual_seed(config.seed * 1000 + draw)

    progress.log("Rosenbrock: GD, then GD + teleport")
    rb_gd = run_landscape(
        start(Rosenbrock, config.rosenbrock_start), config.rosenbrock_steps, config.rosenbrock_lr
    )
    rb_tp = run_landscape(
        start(Rosenbrock, config.rosenbrock_start),
        config.rosenbrock_steps,
        config.rosenbrock_lr,
        schedule,
        rosenbrock,
        generator(0),
    )
    booth_gd = run_landscape(start(Booth, config.booth_start), config.booth_steps, config.booth_lr)
    draws = [
        run_landscape(
            start(Booth, config.booth_start),
            config.booth_steps,
            config.booth_lr,
            [config.booth_teleport_at],
            booth,
            generator(d),
        )
        for d in progress.track(range(config.booth_draws), description="Booth θ₀ draws")
    ]
    metrics: dict[str, Any] = {
        **_landscape_metrics("rosenbrock", rb_gd, rb_tp, config.target_loss),
        **_landscape_metrics("booth", booth_gd, draws[0], config.target_loss),
        "target_loss": config.target_loss,
        "booth_draws": len(draws),
        "booth_draws_lower_final_loss": sum(r.losses[-1] < booth_gd.losses[-1] for r in draws),
        "booth_draws_with_gain": sum(
            r.teleports[0].rate_after > r.teleports[0].rate_before for r in draws
        ),
        "booth_final_loss_teleport_median": statistics.median(r.losses[-1] for r in draws),
        "booth_max_rate_on_level_set": 36.0 * draws[0].teleports[0].loss_before,
    }
    series: dict[str, dict[str, list[Any]]] = {
        "trajectories": _concat(
            [
                _landscape_series("rosenbrock", "gd", rb_gd),
                _landscape_series("rosenbrock", "gd+teleport", rb_tp),
                _landscape_series("booth", "gd", booth_gd),
                _landscape_series("booth", "gd+teleport", draws[0]),
            ]
        ),
        "teleports": _concat(
            [_teleport_table("rosenbrock", 0, rb_tp)]
            + [_teleport_table("booth", d, r) for d, r in enumerate(draws)]
        ),
        "final_point": {
            "function": ["rosenbrock", "rosenbrock", "booth", "booth"],
            "trajectory": ["gd", "gd+teleport", "gd", "gd+teleport"],
            "w1": [r.points[-1][0] for r in (rb_gd, rb_tp, booth_gd, draws[0])],
            "w2": [r.points[-1][1] for r in (rb_gd, rb_tp, booth_gd, draws[0])],
        },
    }
    notes = [
        f"Rosenbrock: teleports before steps {list(schedule)} (the authors' code), "
        f"objective {config.rosenbrock_objective}, θ₀ = {config.rosenbrock_theta0}, steps "
        f"bounded to {config.max_step_norm or 'unbounded'} rad (our choices; see module doc)",
        f"Booth: one teleport before step {config.booth_teleport_at}, objective "
        f"{config.booth_objective}, θ₀ = {config.booth_theta0}; {config.booth_draws} draws of "
        "θ₀, draw 0 in the figures; on Booth max ‖∇L‖² on the level set L = c is 36c",
        "dL/dt = ‖∇L‖² (gradient flow with η = 1), recorded at every step after the teleport",
    ]
    return Result(metrics, series, notes)


def _level_set(cls: type[Landscape], loss: float, points: int = 400) -> tuple[Any, Any]:
    """The level set L = ``loss``: the preimage under h of the circle of radius √loss."""
    angle = torch.linspace(0, 2 * math.pi, points, dtype=F64)
    latent = math.sqrt(loss) * torch.stack([torch.cos(angle), torch.sin(angle)])
    w = cls.from_latent(latent)  # type: ignore[attr-defined]
    return w[0].numpy(), w[1].numpy()


def _rows(table: dict[str, list[Any]], **where: Any) -> dict[str, list[Any]]:
    keep = [
        i
        for i in range(len(next(iter(table.values()))))
        if all(table[k][i] == v for k, v in where.items())
    ]
    return {k: [column[i] for i in keep] for k, column in table.items()}


LANDSCAPES: dict[str, tuple[type[Landscape], tuple[float, float], tuple[float, ...]]] = {
    "rosenbrock": (Rosenbrock, (1.0, 1.0), (1.0, 10.0, 1e2, 1e3, 1e4)),
    "booth": (Booth, (1.0, 3.0), (1.0, 10.0, 1e2, 1e3)),
}


def _draw_trajectory(axis: Any, result: Result, name: str, label: str) -> None:
    """One panel of Fig 4.3 (a, b): level sets, the trajectory, teleport jumps (orange), the
    final point (blue star) and the target (green star)."""
    cls, target, levels = LANDSCAPES[name]
    for level in levels:
        axis.plot(*_level_set(cls, level), color="gray", linewidth=0.8)
    rows = _rows(result.series["trajectories"], function=name, trajectory=label)
    final = _rows(result.series["final_point"], function=name, trajectory=label)
    w1, w2 = rows["w1"] + final["w1"], rows["w2"] + final["w2"]
    axis.plot(w1, w2, "-o", color="tab:blue", markersize=2.5, linewidth=1)
    if label == "gd+teleport":
        jumps = _rows(result.series["teleports"], function=name, draw=0)
        for i in range(len(jumps["step"])):
            axis.plot(
                [jumps["w1_before"][i], jumps["w1_after"][i]],
                [jumps["w2_before"][i], jumps["w2_after"][i]],
                color="tab:orange",
                linewidth=1.5,
            )
        axis.scatter(jumps["w1_before"], jumps["w2_before"], color="tab:orange", s=22, zorder=3)
    axis.scatter(final["w1"], final["w2"], marker="*", s=110, color="tab:blue", zorder=4)
    axis.scatter(*target, marker="*", s=160, color="tab:green", zorder=4)
    if name == "rosenbrock":
        axis.set_xlim(-2, 2)
        axis.set_ylim(-2, 2)
    else:
        everything = _rows(result.series["trajectories"], function=name)
        xs, ys = everything["w1"] + [target[0]], everything["w2"] + [target[1]]
        pad = 0.15 * max(max(xs) - min(xs), max(ys) - min(ys))
        axis.set_xlim(min(xs) - pad, max(xs) + pad)
        axis.set_ylim(min(ys) - pad, max(ys) + pad)
    axis.set_xlabel("$w_1$")
    axis.set_ylabel("$w_2$")
    axis.set_title(f"{name}: {LABELS[label]}")


def plot_testfunctions(result: Result) -> dict[str, Any]:
    """Fig 4.3 (trajectories; loss and dL/dt vs step, log y) and Fig 4.4 (dL/dt vs loss,
    log-log)."""
    table = result.series["trajectories"]
    figure, grid = plt.subplots(2, 4, figsize=(18, 8.4))
    for row, name in enumerate(("rosenbrock", "booth")):
        _draw_trajectory(grid[row][0], result, name, "gd")
        _draw_trajectory(grid[row][1], result, name, "gd+teleport")
        for column, key, ylabel in ((2, "loss", "loss"), (3, "dL_dt", "dL/dt = ‖∇L‖²")):
            axis = grid[row][column]
            for label in ("gd", "gd+teleport"):
                rows = _rows(table, function=name, trajectory=label)
                axis.plot(rows["step"], rows[key], color=COLOURS[label], label=LABELS[label])
            axis.set_yscale("log")
            axis.set_xlabel("step")
            axis.set_ylabel(ylabel)
            axis.legend(fontsize=8)
            axis.set_title(f"{name}: {ylabel} vs step")
    figure.suptitle("GD with and without symmetry teleportation (dissertation Fig 4.3)")
    figure.tight_layout()

    rates, axes = plt.subplots(1, 2, figsize=(11, 4.4))
    for axis, name in zip(axes, ("rosenbrock", "booth"), strict=True):
        for label in ("gd", "gd+teleport"):
            rows = _rows(table, function=name, trajectory=label)
            axis.plot(rows["loss"], rows["dL_dt"], color=COLOURS[label], label=LABELS[label])
            marks = [i for i, t in enumerate(rows["teleported"]) if t]
            if label == "gd+teleport" and marks:
                axis.scatter(
                    [rows["loss"][i] for i in marks],
                    [rows["dL_dt"][i] for i in marks],
                    color=COLOURS[label],
                    s=18,
                    zorder=3,
                    label="right after a teleport",
                )
        axis.set_xscale("log")
        axis.set_yscale("log")
        axis.set_xlabel("loss")
        axis.set_ylabel("dL/dt = ‖∇L‖²")
        axis.set_title(name)
        axis.legend(fontsize=8)
    rates.suptitle("dL/dt at equal loss (dissertation Fig 4.4)")
    rates.tight_layout()
    return {"trajectories.png": figure, "rate_vs_loss.png": rates}


def _check_rosenbrock_target(result: Result) -> tuple[str, bool]:
    m = result.metrics
    gd, tp = m["rosenbrock_target_step_gd"], m["rosenbrock_target_step_teleport"]
    measured = (
        f"L < {result.metrics.get('target_loss', 1e-3):g} first at step {_format_steps(tp)} with "
        f"teleport vs {_format_steps(gd)} for GD; final L {m['rosenbrock_final_loss_teleport']:.2e}"
        f" vs {m['rosenbrock_final_loss_gd']:.2e}"
    )
    earlier = tp is not None and (gd is None or tp < gd)
    return measured, earlier and m["rosenbrock_final_loss_teleport"] < m["rosenbrock_final_loss_gd"]


def _check_booth_rate(result: Result) -> tuple[str, bool]:
    m = result.metrics
    draws = m["booth_draws"]
    measured = (
        f"final L {m['booth_final_loss_teleport']:.2e} (draw 0) vs GD "
        f"{m['booth_final_loss_gd']:.2e}; lower in {m['booth_draws_lower_final_loss']}/{draws} "
        f"draws of θ₀ (median {m['booth_final_loss_teleport_median']:.2e})"
    )
    return measured, m["booth_draws_lower_final_loss"] > draws / 2


def _check_equal_loss(result: Result) -> tuple[str, bool]:
    m = result.metrics
    parts, holds = [], True
    for name in ("rosenbrock", "booth"):
        fraction = m[f"{name}_equal_loss_fraction_larger"]
        parts.append(
            f"{name}: larger at {fraction:.0%} of {m[f'{name}_equal_loss_levels']} loss levels "
            f"(median ratio {m[f'{name}_equal_loss_median_ratio']:.3g})"
        )
        holds = holds and fraction > 0.5
    return "; ".join(parts), holds


def _check_gain(result: Result) -> tuple[str, bool]:
    m = result.metrics
    rb, rb_n = m["rosenbrock_teleports_with_gain"], m["rosenbrock_teleports"]
    bo, bo_n = m["booth_draws_with_gain"], m["booth_draws"]
    factors = m["rosenbrock_gain_factors"]
    measured = (
        f"Rosenbrock {rb}/{rb_n} teleports (gain ×{min(factors):.3g} … ×{max(factors):.3g}); "
        f"Booth {bo}/{bo_n} draws of θ₀"
    )
    return measured, rb == rb_n and bo >= 0.9 * bo_n


experiment(
    "teleport-testfunctions",
    seed_ref="seed 001, dissertation Figs 4.3, 4.4 (§4.6.1)",
    description=(
        "GD with and without SO(2) teleportation on Rosenbrock (from (−1,−1), 1000 steps, lr "
        "1e-3, teleport before steps 99, 199, …, 10 ascent steps lr 0.1) and Booth (from "
        "(5,−5), 10 steps, lr 0.08, one teleport before step 4, 10 ascent steps lr 1e-3 from "
        "θ₀ ~ U[0, π)). Chosen here: Rosenbrock ascends log‖∇L‖² from θ₀ = 0 (the raw "
        "objective's θ-gradient vanishes near the minimum); ascent steps bounded to 1 rad"
    ),
    presets={
        "quick": LandscapeConfig(booth_draws=10),
        "paper": LandscapeConfig(),
    },
    claims=[
        Claim(
            "Rosenbrock: teleportation reaches the target (the minimum) in fewer steps",
            "seed 001, Fig 4.3 (top), §4.6.1",
            "GD does not reach the target in 1000 steps; GD + teleport 'much earlier'",
            _check_rosenbrock_target,
        ),
        Claim(
            "Booth: teleportation moves to a trajectory with a larger convergence rate",
            "seed 001, Fig 4.3 (bottom), §4.6.1",
            "lower loss after the 10 steps with the teleport",
            _check_booth_rate,
        ),
        Claim(
            "at equal loss, the teleported trajectory has the larger dL/dt",
            "seed 001, Fig 4.4",
            "dL/dt(teleport) > dL/dt(GD) at the same loss, both functions",
            _check_equal_loss,
        ),
        Claim(
            "the gradient norm is larger right after each teleport",
            "seed 001, Fig 4.3d, §4.6.1",
            "every teleport raises ‖∇L‖² (the step after it)",
            _check_gain,
        ),
    ],
    plot=plot_testfunctions,
)(run_testfunctions)


# == regression training (Figs 4.5, 4.7; exposed for benchmarks) =================================


def regression_loss(output: Tensor, target: Tensor) -> Tensor:
    """0.5‖Y − f(X)‖²_F, the authors' regression loss (the text writes ‖Y − f(X)‖₂; notes 001b
    §9.6); rows are samples."""
    return 0.5 * (output - target).pow(2).sum()


@dataclass(frozen=True)
class RegressionProblem:
    """The §4.6.1 regression min ‖Y − W₃σ(W₂σ(W₁X))‖ as a model and one batch.

    Attributes:
        model: ``ps.mlp`` without biases and LeakyReLU(0.1), at its initial weights (each
            training run works on a copy).
        x: inputs, shape ``(samples, widths[0])`` (the paper's X ∈ R^{5×4} transposed).
        y: targets, shape ``(samples, widths[-1])``.
    """

    model: nn.Sequential
    x: Tensor
    y: Tensor


def make_regression_problem(
    seed: int,
    widths: Sequence[int] = (5, 6, 7, 8),
    samples: int = 4,
    dtype: torch.dtype = F64,
    slope: float = 0.1,
) -> RegressionProblem:
    """Weights W₁ … W_L, then X, then Y, all U[0, 1] from ``torch.Generator(seed)``
    (dissertation §4.6.1: W₁ 6×5, W₂ 7×6, W₃ 8×7, X 5×4, Y 8×4)."""
    generator = torch.Generator().manual_seed(seed)
    model = ps.mlp(list(widths), nn.LeakyReLU(slope), bias=False, dtype=dtype, seed=seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.rand(p.shape, generator=generator, dtype=dtype))
    x = torch.rand(samples, widths[0], generator=generator, dtype=dtype)
    y = torch.rand(samples, widths[-1], generator=generator, dtype=dtype)
    return RegressionProblem(model, x, y)


def layer_pair_actions(model: nn.Module, family: str = "inverse_GL") -> list[Symmetry]:
    """The data-dependent GL actions of one family on every adjacent layer pair of ``model``:
    ``"inverse_GL"`` (Eq. 4.13, the authors' NeurIPS code) or ``"pinv_GL"`` (Eq. 4.16)."""
    found = [
        s for s in ps.symmetries(model, data_dependent=True) if s.name.startswith(f"{family}[")
    ]
    if not found:
        raise InvalidArgumentError(
            f"no {family} action found on this model; use 'inverse_GL' or 'pinv_GL' on an MLP "
            "with an invertible activation such as LeakyReLU"
        )
    return found


@dataclass(frozen=True)
class RegressionTeleport:
    """One teleport during a regression training (§4.6.1, the GD setting by default).

    Attributes:
        at: optimizer steps taken before it (5: "at epoch 5").
        steps, lr: gradient-ascent steps on T and their learning rate (GD 8, 1e-7; AdaGrad
            2, 1e-5).
        action: ``"inverse_GL"`` (Eq. 4.13) or ``"pinv_GL"`` (Eq. 4.16) on every layer pair.
        parameterization: ``"first_order"`` (g = I + T, exact inverse) or ``"exp"``.
        max_step_norm: bound on ‖T‖ of each ascent step (all pairs together); 0: unbounded,
            the paper's setting.
    """

    at: int = 5
    steps: int = 8
    lr: float = 1e-7
    action: str = "inverse_GL"
    parameterization: str = "first_order"
    max_step_norm: float = 0.1

    def config(self) -> TeleportConfig:
        return TeleportConfig(
            objective="grad_norm",
            steps=self.steps,
            lr=self.lr,
            parameterization=self.parameterization,  # type: ignore[arg-type]
            max_step_norm=_bound(self.max_step_norm),
            keep_worse=True,  # Algorithm 1 applies every teleport
        )


@dataclass
class TrainingRun:
    """One full-batch training (:func:`train_network`, :func:`train_regression`).

    Attributes:
        optimizer: ``"gd"`` or ``"adagrad"``.
        losses: L(w_t) at each step t (before its update; after a teleport at t).
        rates: ‖∇L(w_t)‖², the paper's dL/dt.
        seconds: wall-clock seconds from the start to the end of step t (teleports included).
        converged_step: first t with |L_{t−1} − L_t| < tol, or ``None``.
        diverged: the loss became non-finite.
        teleport_steps_taken: the optimizer steps before which a teleport happened.
        teleport_seconds: time spent teleporting, all teleports together.
        ascent_steps: accepted ascent steps, all teleports together.
        teleport: the first teleport's :meth:`TeleportResult.to_dict` (without its history)
            and its ``step``, or ``None``.
    """

    optimizer: str
    losses: list[float] = field(default_factory=list)
    rates: list[float] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)
    converged_step: int | None = None
    diverged: bool = False
    teleport_steps_taken: list[int] = field(default_factory=list)
    teleport_seconds: float = 0.0
    ascent_steps: int = 0
    teleport: dict[str, Any] | None = None

    @property
    def time_to_convergence(self) -> float:
        """Seconds until the convergence test first held (NaN if it never did)."""
        if self.converged_step is None or self.diverged:
            return math.nan
        return self.seconds[self.converged_step]

    @property
    def step_seconds(self) -> float:
        """Median seconds of one optimizer step (steps with a teleport excluded)."""
        steps = [b - a for a, b in zip([0.0, *self.seconds], self.seconds, strict=False)]
        skip = set(self.teleport_steps_taken)
        kept = [s for t, s in enumerate(steps) if t not in skip]
        return statistics.median(kept) if kept else math.nan

    def record_teleports(self, events: Sequence[TeleportEvent]) -> None:
        """Fill the teleport fields from a :class:`~paramsym.Teleporter`'s history."""
        self.teleport_steps_taken = [e.step for e in events]
        self.teleport_seconds = sum(e.seconds for e in events)
        self.ascent_steps = sum(r.steps for e in events for r in e.results)
        if events:
            first = {**events[0].results[0].to_dict(), "step": events[0].step}
            first.pop("history")
            self.teleport = first


def _optimizer(name: str, parameters: Any, lr: float) -> torch.optim.Optimizer:
    if name == "gd":
        return torch.optim.SGD(parameters, lr=lr)
    if name == "adagrad":  # G accumulates from 0, ε = 1e-10 (the authors' AdaGrad)
        return torch.optim.Adagrad(parameters, lr=lr, eps=1e-10)
    raise InvalidArgumentError(f"optimizer must be 'gd' or 'adagrad', got {name!r}")


def train_network(
    model: nn.Module,
    batch: tuple[Tensor, Tensor],
    optimizer: OptimizerName,
    lr: float,
    steps: int,
    *,
    schedule: Schedule | None = None,
    teleport: TeleportConfig | None = None,
    symmetries: Sequence[Symmetry] = (),
    loss_fn: Callable[[Tensor, Tensor], Tensor] = regression_loss,
    tol: float = 1e-3,
    stop_at_convergence: bool = False,
    threads: int | None = 1,
) -> TrainingRun:
    """Full-batch GD or AdaGrad on ``model`` (changed in place), teleporting along
    ``symmetries`` with :class:`paramsym.Teleporter` whenever ``schedule`` is due (Algorithm 1).

    The loop is the same with and without teleports (a never-due schedule), so wall-clock
    times compare. Training stops when the loss or ‖∇L‖² is not finite (``diverged``) and, with
    ``stop_at_convergence``, at the first t with |L_{t−1} − L_t| < ``tol``.
    """
    parameters = list(model.parameters())
    opt = _optimizer(optimizer, parameters, lr)
    tele = Teleporter(
        model,
        loss_fn,
        opt,
        schedule=schedule or Schedule.never(),
        data=lambda: batch,
        symmetries=symmetries,
        config=teleport or TeleportConfig(),
    )
    run = TrainingRun(optimizer)
    x, y = batch
    with torch_threads(threads), warnings.catch_warnings():
        warnings.simplefilter("ignore", TeleportDriftWarning)
        start = time.perf_counter()
        for t in range(steps):
            try:
                tele.zero_grad()  # teleports first when due
            except NonFiniteError:
                run.diverged = True
                break
            loss = loss_fn(model(x), y)
            loss.backward()
            rate = sum(float(p.grad.pow(2).sum()) for p in parameters if p.grad is not None)
            tele.step()
            run.seconds.append(time.perf_counter() - start)
            run.losses.append(float(loss.detach()))
            run.rates.append(rate)
            if not (math.isfinite(run.losses[-1]) and math.isfinite(rate)):
                run.diverged = True
                break
            if t and run.converged_step is None and abs(run.losses[-1] - run.losses[-2]) < tol:
                run.converged_step = t
                if stop_at_convergence:
                    break
    run.record_teleports(tele.history)
    return run


def train_regression(
    problem: RegressionProblem,
    optimizer: OptimizerName,
    lr: float,
    steps: int,
    teleport: RegressionTeleport | None = None,
    *,
    tol: float = 1e-3,
    stop_at_convergence: bool = False,
    threads: int | None = 1,
) -> TrainingRun:
    """Train a copy of ``problem.model`` with GD or AdaGrad for ``steps`` full-batch steps,
    teleporting once if ``teleport`` is given (dissertation §4.6.1, Figs 4.5, 4.7).

    Args:
        problem: from :func:`make_regression_problem`.
        optimizer, lr: ``"gd"`` (``torch.optim.SGD``) or ``"adagrad"`` (ε = 1e-10).
        steps: most optimizer steps (300 in Fig 4.5, 2000 in Fig 4.7).
        teleport: when and how to teleport; ``None`` trains without.
        tol: the convergence test |L_{t−1} − L_t| < tol (Fig 4.7: 1e-3).
        stop_at_convergence: stop at the first converged step (Fig 4.7's time to convergence).
        threads: torch threads while training (``None``: unchanged); the paper times on one
            CPU.

    Returns:
        A :class:`TrainingRun` with per-step losses, ‖∇L‖², cumulative wall-clock times, the
        convergence step and its time (``time_to_convergence``), and the teleport's result.
    """
    model = copy.deepcopy(problem.model)
    plan = teleport or RegressionTeleport()
    return train_network(
        model,
        (problem.x, problem.y),
        optimizer,
        lr,
        steps,
        schedule=Schedule.at([plan.at]) if teleport else Schedule.never(),
        teleport=plan.config(),
        symmetries=layer_pair_actions(model, plan.action),
        tol=tol,
        stop_at_convergence=stop_at_convergence,
        threads=threads,
    )


def warm_up(problem: RegressionProblem) -> None:
    """Run every code path once (autograd, ``torch.func``, the teleport) so that the first
    timed training does not pay for one-time initialisation."""
    for name in OPTIMIZERS:
        train_regression(problem, name, 1e-6, 8, RegressionTeleport(at=2, steps=2, lr=1e-12))


def speedup(baseline: TrainingRun, teleported: TrainingRun) -> tuple[float, float]:
    """(wall-clock, steps) speedup to convergence, t_opt / t_opt+teleport (Fig 4.7); NaN when
    either run did not converge or diverged."""
    if baseline.converged_step is None or teleported.converged_step is None:
        return math.nan, math.nan
    if baseline.diverged or teleported.diverged:
        return math.nan, math.nan
    return (
        baseline.time_to_convergence / teleported.time_to_convergence,
        baseline.converged_step / teleported.converged_step,
    )


@dataclass(frozen=True)
class RegressionSetup:
    """What ``teleport-regression`` and ``teleport-sweep`` share (dissertation §4.6.1).

    Attributes:
        seed, runs: run r trains on :func:`make_regression_problem` with seed ``seed·1000 + r``.
        gd_lr, adagrad_lr: the optimizers' learning rates (1e-4, 1e-1).
        teleport_at: optimizer steps before the one teleport (5).
        action, parameterization, max_step_norm: see :class:`RegressionTeleport`.
        tol: the convergence test |L_{t−1} − L_t| < tol (1e-3).
        threads: torch threads during the timed trainings (the paper: one CPU).
    """

    seed: int = 0
    runs: int = 5
    gd_lr: float = 1e-4
    adagrad_lr: float = 1e-1
    teleport_at: int = 5
    action: str = "inverse_GL"
    parameterization: str = "first_order"
    max_step_norm: float = 0.1
    tol: float = 1e-3
    threads: int = 1

    def problem(self, run: int) -> RegressionProblem:
        return make_regression_problem(self.seed * 1000 + run)

    def lr(self, optimizer: str) -> float:
        return self.gd_lr if optimizer == "gd" else self.adagrad_lr

    def teleport(self, steps: int, lr: float) -> RegressionTeleport:
        return RegressionTeleport(
            self.teleport_at, steps, lr, self.action, self.parameterization, self.max_step_norm
        )

    def train(
        self,
        run: int,
        optimizer: OptimizerName,
        steps: int,
        teleport: RegressionTeleport | None,
        stop_at_convergence: bool = False,
    ) -> TrainingRun:
        return train_regression(
            self.problem(run),
            optimizer,
            self.lr(optimizer),
            steps,
            teleport,
            tol=self.tol,
            stop_at_convergence=stop_at_convergence,
            threads=self.threads,
        )


def _setup_notes(config: RegressionSetup) -> list[str]:
    bound = config.max_step_norm or "unbounded (the paper)"
    return [
        "loss 0.5‖Y − f(X)‖²_F (the authors' code), float64, W, X, Y ~ U[0, 1]; run r seeded "
        f"{config.seed}·1000 + r",
        f"teleport: {config.action} on every layer pair, g = I + T ({config.parameterization}; "
        f"exact inverse, the text's I − T is first order), ascent on ‖∇L‖², each step bounded "
        f"to ‖T‖ ≤ {bound}; AdaGrad keeps its accumulator",
        f"wall-clock on {config.threads} torch thread(s) after a warm-up; with and without "
        "teleport trained back to back per run and optimizer",
    ]


@dataclass(frozen=True)
class RegressionConfig(RegressionSetup):
    """Settings of ``teleport-regression`` (Fig 4.5): :class:`RegressionSetup` and

    Attributes:
        steps: optimizer steps (300).
        gd_teleport_steps, gd_teleport_lr: GD's ascent (8 steps, lr 1e-7).
        adagrad_teleport_steps, adagrad_teleport_lr: AdaGrad's ascent (2 steps, lr 1e-5).
    """

    steps: int = 300
    gd_teleport_steps: int = 8
    gd_teleport_lr: float = 1e-7
    adagrad_teleport_steps: int = 2
    adagrad_teleport_lr: float = 1e-5

    def plan(self, optimizer: str) -> RegressionTeleport:
        if optimizer == "gd":
            return self.teleport(self.gd_teleport_steps, self.gd_teleport_lr)
        return self.teleport(self.adagrad_teleport_steps, self.adagrad_teleport_lr)


def loss_at_time(run: TrainingRun, when: float) -> float:
    """The loss of the last step finished by ``when`` seconds (the first loss before that)."""
    index = int(np.searchsorted(np.asarray(run.seconds), when, side="right")) - 1
    return run.losses[max(index, 0)]


def _curve_table(runs: dict[tuple[str, bool], list[TrainingRun]]) -> dict[str, list[Any]]:
    table: dict[str, list[Any]] = {
        k: [] for k in ("optimizer", "teleport", "run", "step", "loss", "dL_dt", "seconds")
    }
    for (optimizer, teleported), trainings in runs.items():
        for r, training in enumerate(trainings):
            n = len(training.losses)
            table["optimizer"] += [optimizer] * n
            table["teleport"] += [teleported] * n
            table["run"] += [r] * n
            table["step"] += list(range(n))
            table["loss"] += training.losses
            table["dL_dt"] += training.rates
            table["seconds"] += training.seconds
    return table


def _mean_curve(trainings: Sequence[TrainingRun], key: str = "losses") -> np.ndarray:
    """Mean over runs of a per-step list (runs that stopped early are padded with NaN)."""
    length = max(len(getattr(t, key)) for t in trainings)
    rows = [getattr(t, key) + [math.nan] * (length - len(getattr(t, key))) for t in trainings]
    return np.nanmean(np.asarray(rows, dtype=float), axis=0)


def _compare_in_time(
    baseline: Sequence[TrainingRun], teleported: Sequence[TrainingRun], at: int, points: int = 50
) -> dict[str, Any]:
    """Mean loss over runs at equal wall-clock times (Fig 4.5b), from the end of the teleport
    step to the end of the shorter training."""
    end = min(
        statistics.median(t.seconds[-1] for t in baseline),
        statistics.median(t.seconds[-1] for t in teleported),
    )
    start = statistics.median(t.seconds[min(at, len(t.seconds) - 1)] for t in teleported)

    def mean_loss(trainings: Sequence[TrainingRun], when: float) -> float:
        return statistics.fmean(loss_at_time(t, when) for t in trainings)

    grid = np.linspace(start, end, points).tolist() if start < end else []
    lower = [mean_loss(teleported, g) < mean_loss(baseline, g) for g in grid]
    return {
        "time_compared_until": end,
        "time_teleport_done": start,
        "loss_at_end_time": mean_loss(baseline, end),
        "loss_at_end_time_teleport": mean_loss(teleported, end),
        "time_fraction_lower": sum(lower) / len(lower) if lower else math.nan,
    }


def _regression_metrics(
    optimizer: str, baseline: list[TrainingRun], teleported: list[TrainingRun], at: int
) -> dict[str, Any]:
    base_curve, tele_curve = _mean_curve(baseline), _mean_curve(teleported)
    after = range(at, min(len(base_curve), len(tele_curve)))
    final = [
        _mean_std([t.losses[-1] if not t.diverged else math.nan for t in runs])
        for runs in (baseline, teleported)
    ]
    gains = [
        (t.teleport["grad_norm_after"] / t.teleport["grad_norm_before"]) ** 2
        for t in teleported
        if t.teleport
    ]
    step_seconds = statistics.median(t.step_seconds for t in baseline)
    teleport_seconds = statistics.median(t.teleport_seconds for t in teleported)
    first = teleported[0]
    equal = compare_at_equal_loss(
        (baseline[0].losses, baseline[0].rates),
        (first.losses, first.rates),
        below=first.losses[min(at, len(first.losses) - 1)],
    )
    timing = _compare_in_time(baseline, teleported, at)
    metrics = {
        "final_loss": final[0][0],
        "final_loss_std": final[0][1],
        "final_loss_teleport": final[1][0],
        "final_loss_teleport_std": final[1][1],
        "epoch_fraction_lower": sum(tele_curve[t] < base_curve[t] for t in after) / len(after),
        "diverged_teleport": sum(t.diverged for t in teleported),
        "converged_steps": [t.converged_step for t in baseline],
        "converged_steps_teleport": [t.converged_step for t in teleported],
        "gain_mean": statistics.fmean(gains) if gains else math.nan,
        "step_seconds": step_seconds,
        "teleport_seconds": teleport_seconds,
        "teleport_cost_in_steps": teleport_seconds / step_seconds,
        "equal_loss_fraction_larger": equal.fraction_larger,
        **timing,
    }
    return {f"{optimizer}_{k}": v for k, v in metrics.items()}


def run_regression(config: RegressionConfig, progress: Progress) -> Result:
    """Fig 4.5: GD and AdaGrad with and without one teleport at epoch 5, ``runs`` runs."""
    warm_up(config.problem(0))
    runs: dict[tuple[str, bool], list[TrainingRun]] = {
        (o, t): [] for o in OPTIMIZERS for t in (False, True)
    }
    for r in progress.track(range(config.runs), description="runs"):
        for optimizer in OPTIMIZERS:
            runs[(optimizer, False)].append(config.train(r, optimizer, config.steps, None))
            runs[(optimizer, True)].append(
                config.train(r, optimizer, config.steps, config.plan(optimizer))
            )
    metrics: dict[str, Any] = {"runs": config.runs, "steps": config.steps}
    for optimizer in OPTIMIZERS:
        metrics.update(
            _regression_metrics(
                optimizer, runs[(optimizer, False)], runs[(optimizer, True)], config.teleport_at
            )
        )
    notes = [
        *_setup_notes(config),
        f"GD: {config.gd_teleport_steps} ascent steps at lr {config.gd_teleport_lr:g}; AdaGrad: "
        f"{config.adagrad_teleport_steps} at lr {config.adagrad_teleport_lr:g} (the paper's)",
    ]
    return Result(metrics, {"curves": _curve_table(runs)}, notes)


def _trainings_from(
    table: dict[str, list[Any]], optimizer: str, teleported: bool
) -> list[TrainingRun]:
    rows = _rows(table, optimizer=optimizer, teleport=teleported)
    out = []
    for r in sorted(set(rows["run"])):
        one = _rows(rows, run=r)
        out.append(TrainingRun(optimizer, one["loss"], one["dL_dt"], one["seconds"]))
    return out


def _band(axis: Any, x: np.ndarray, rows: np.ndarray, colour: str, label: str) -> None:
    mean, std = np.nanmean(rows, axis=0), np.nanstd(rows, axis=0)
    axis.plot(x, mean, color=colour, linewidth=2, label=label)
    axis.fill_between(x, np.clip(mean - std, 1e-12, None), mean + std, color=colour, alpha=0.3)


def plot_regression(result: Result) -> dict[str, Any]:
    """Fig 4.5: (a) loss vs epoch and (b) vs wall-clock time (mean ± 1 std over runs), (c)
    ‖∇L‖² vs epoch and (d) dL/dt vs loss (run 0)."""
    table = result.series["curves"]
    figure, grid = plt.subplots(1, 4, figsize=(19, 4.4))
    for optimizer in OPTIMIZERS:
        for teleported in (False, True):
            key = f"{optimizer}+teleport" if teleported else optimizer
            trainings = _trainings_from(table, optimizer, teleported)
            length = min(len(t.losses) for t in trainings)
            losses = np.array([t.losses[:length] for t in trainings])
            seconds = np.array([t.seconds[:length] for t in trainings]).mean(axis=0)
            _band(grid[0], np.arange(length), losses, COLOURS[key], LABELS[key])
            _band(grid[1], seconds, losses, COLOURS[key], LABELS[key])
            first = trainings[0]
            grid[2].plot(first.rates, color=COLOURS[key], label=LABELS[key])
            grid[3].plot(first.losses, first.rates, color=COLOURS[key], label=LABELS[key])
    titles = (
        "(a) loss vs epoch",
        "(b) loss vs wall-clock time",
        "(c) ‖∇L‖² vs epoch (run 0)",
        "(d) dL/dt vs loss (run 0)",
    )
    xlabels = ("epoch", "time (s)", "epoch", "loss")
    ylabels = ("loss", "loss", "dL/dt = ‖∇L‖²", "dL/dt = ‖∇L‖²")
    for axis, title, xlabel, ylabel in zip(grid, titles, xlabels, ylabels, strict=True):
        axis.set_yscale("log")
        axis.set_title(title)
        axis.set_xlabel(xlabel)
        axis.set_ylabel(ylabel)
        axis.legend(fontsize=8)
    grid[3].set_xscale("log")
    figure.suptitle("3-layer LeakyReLU regression, one teleport at epoch 5 (dissertation Fig 4.5)")
    figure.tight_layout()
    return {"regression.png": figure}


def _check_epochs(optimizer: str) -> Callable[[Result], tuple[str, bool]]:
    def check(result: Result) -> tuple[str, bool]:
        m = {
            k[len(optimizer) + 1 :]: v
            for k, v in result.metrics.items()
            if k.startswith(optimizer + "_")
        }
        measured = (
            f"loss at epoch {result.metrics['steps']}: {m['final_loss_teleport']:.3g} ± "
            f"{m['final_loss_teleport_std']:.2g} with teleport vs {m['final_loss']:.3g} ± "
            f"{m['final_loss_std']:.2g}; mean lower at {m['epoch_fraction_lower']:.0%} of the "
            f"epochs after the teleport; diverged {m['diverged_teleport']}/"
            f"{result.metrics['runs']}"
        )
        holds = m["final_loss_teleport"] < m["final_loss"] and m["epoch_fraction_lower"] > 0.5
        return measured, holds

    return check


def _check_time(optimizer: str) -> Callable[[Result], tuple[str, bool]]:
    def check(result: Result) -> tuple[str, bool]:
        m = {
            k[len(optimizer) + 1 :]: v
            for k, v in result.metrics.items()
            if k.startswith(optimizer + "_")
        }
        fraction = m["time_fraction_lower"]
        measured = (
            f"at t = {m['time_compared_until']:.3f} s (end of the shorter run): loss "
            f"{m['loss_at_end_time_teleport']:.3g} with teleport vs {m['loss_at_end_time']:.3g}; "
            + (
                f"lower at {fraction:.0%} of times after the teleport; "
                if math.isfinite(fraction)
                else "the teleport alone outlasted the run without it; "
            )
            + f"one teleport = {m['teleport_seconds'] * 1e3:.1f} ms = "
            f"{m['teleport_cost_in_steps']:.0f} optimizer steps"
        )
        holds = (
            math.isfinite(fraction)
            and fraction > 0.5
            and m["loss_at_end_time_teleport"] < m["loss_at_end_time"]
        )
        return measured, holds

    return check


experiment(
    "teleport-regression",
    seed_ref="seed 001, dissertation Fig 4.5 (§4.6.1)",
    description=(
        "3-layer LeakyReLU(0.1) regression (W₃ 8×7, W₂ 7×6, W₁ 6×5, 4 samples, all U[0,1]) "
        "with GD (lr 1e-4) and AdaGrad (lr 1e-1) for 300 steps, one teleport at epoch 5 along "
        "Eq. 4.13 on both layer pairs (GD 8 ascent steps lr 1e-7, AdaGrad 2 steps lr 1e-5). "
        "Chosen here: loss 0.5‖·‖²_F, g = I + T with exact inverse, ascent steps bounded to "
        "‖T‖ ≤ 0.1, float64, one torch thread"
    ),
    presets={
        "quick": RegressionConfig(runs=3),
        "paper": RegressionConfig(),
    },
    claims=[
        Claim(
            "GD: teleportation lowers the loss at equal epochs",
            "seed 001, Fig 4.5a",
            "GD + teleport below GD after the teleport (mean of 5 runs)",
            _check_epochs("gd"),
        ),
        Claim(
            "GD: teleportation lowers the loss at equal wall-clock time",
            "seed 001, Fig 4.5b",
            "GD + teleport below GD in loss vs time (mean of 5 runs)",
            _check_time("gd"),
        ),
        Claim(
            "AdaGrad: teleportation lowers the loss at equal epochs",
            "seed 001, Fig 4.5a",
            "AdaGrad + teleport below AdaGrad after the teleport (mean of 5 runs)",
            _check_epochs("adagrad"),
        ),
        Claim(
            "AdaGrad: teleportation lowers the loss at equal wall-clock time",
            "seed 001, Fig 4.5b",
            "AdaGrad + teleport below AdaGrad in loss vs time (mean of 5 runs)",
            _check_time("adagrad"),
        ),
    ],
    plot=plot_regression,
)(run_regression)


# == teleport-sweep (Fig 4.7) ======================================================================


@dataclass(frozen=True)
class SweepConfig(RegressionSetup):
    """Settings of ``teleport-sweep`` (Fig 4.7): :class:`RegressionSetup` and

    Attributes:
        teleport_lrs, teleport_steps: the grid (1e-9 … 1e-5 × 1, 2, 4, …, 32).
        optimizers: ``"gd"`` and/or ``"adagrad"``.
        max_steps: a training that has not converged by then counts as not converged (2000).
    """

    teleport_lrs: tuple[float, ...] = (1e-9, 1e-8, 1e-7, 1e-6, 1e-5)
    teleport_steps: tuple[int, ...] = (1, 2, 4, 8, 16, 32)
    optimizers: tuple[str, ...] = OPTIMIZERS
    max_steps: int = 2000


def _status(baseline: TrainingRun, teleported: TrainingRun) -> str:
    if baseline.diverged or baseline.converged_step is None:
        return "baseline_failed"
    if teleported.diverged:
        return "diverged"
    return "no_convergence" if teleported.converged_step is None else "converged"


def _sweep_rows(config: SweepConfig, progress: Progress) -> dict[str, list[Any]]:
    """One row per (optimizer, teleport lr, ascent steps, run): the two trainings to
    convergence, measured back to back."""
    rows: dict[str, list[Any]] = {
        k: []
        for k in (
            "optimizer",
            "teleport_lr",
            "teleport_steps",
            "run",
            "status",
            "steps_to_convergence",
            "steps_to_convergence_teleport",
            "seconds_to_convergence",
            "seconds_to_convergence_teleport",
            "teleport_seconds",
            "speedup_wall",
            "speedup_steps",
        )
    }
    grid = [
        (o, lr, n, r)
        for o in config.optimizers
        for lr in config.teleport_lrs
        for n in config.teleport_steps
        for r in range(config.runs)
    ]
    for optimizer, lr, n, r in progress.track(grid, total=len(grid), description="grid"):
        name: OptimizerName = "gd" if optimizer == "gd" else "adagrad"
        base = config.train(r, name, config.max_steps, None, stop_at_convergence=True)
        tele = config.train(
            r, name, config.max_steps, config.teleport(n, lr), stop_at_convergence=True
        )
        wall, steps = speedup(base, tele)
        values = (
            optimizer,
            lr,
            n,
            r,
            _status(base, tele),
            base.converged_step,
            tele.converged_step,
            base.time_to_convergence,
            tele.time_to_convergence,
            tele.teleport_seconds,
            wall,
            steps,
        )
        for key, value in zip(rows, values, strict=True):
            rows[key].append(value)
    return rows


def _grid_points(rows: dict[str, list[Any]], config: SweepConfig) -> dict[str, list[Any]]:
    """Per grid point: mean speedups over runs; omitted (NaN) unless every run converged."""
    points: dict[str, list[Any]] = {
        k: []
        for k in (
            "optimizer",
            "teleport_lr",
            "teleport_steps",
            "converged_runs",
            "speedup_wall",
            "speedup_wall_std",
            "speedup_steps",
        )
    }
    for optimizer in config.optimizers:
        for lr in config.teleport_lrs:
            for n in config.teleport_steps:
                one = _rows(rows, optimizer=optimizer, teleport_lr=lr, teleport_steps=n)
                converged = sum(s == "converged" for s in one["status"])
                complete = converged == len(one["status"])
                wall = _mean_std(one["speedup_wall"]) if complete else (math.nan, math.nan)
                steps = _mean_std(one["speedup_steps"])[0] if complete else math.nan
                for key, value in zip(
                    points, (optimizer, lr, n, converged, wall[0], wall[1], steps), strict=True
                ):
                    points[key].append(value)
    return points


def _sweep_metrics(points: dict[str, list[Any]], optimizer: str) -> dict[str, Any]:
    one = _rows(points, optimizer=optimizer)
    wall = [v for v in one["speedup_wall"] if math.isfinite(v)]
    steps = [v for v in one["speedup_steps"] if math.isfinite(v)]
    best = max(
        (i for i in range(len(one["speedup_wall"])) if math.isfinite(one["speedup_wall"][i])),
        key=lambda i: one["speedup_wall"][i],
        default=None,
    )
    return {
        f"{optimizer}_points": len(one["speedup_wall"]),
        f"{optimizer}_points_converged": len(wall),
        f"{optimizer}_points_faster_wall": sum(v > 1 for v in wall),
        f"{optimizer}_points_faster_steps": sum(v > 1 for v in steps),
        f"{optimizer}_median_speedup_wall": statistics.median(wall) if wall else math.nan,
        f"{optimizer}_median_speedup_steps": statistics.median(steps) if steps else math.nan,
        f"{optimizer}_best_speedup_wall": one["speedup_wall"][best] if best is not None else None,
        f"{optimizer}_best_point": (
            [one["teleport_lr"][best], one["teleport_steps"][best]] if best is not None else None
        ),
    }


def run_sweep(config: SweepConfig, progress: Progress) -> Result:
    """Fig 4.7: speedup to convergence of one teleport at epoch 5 over the (lr, steps) grid."""
    unknown = set(config.optimizers) - set(OPTIMIZERS)
    if unknown:
        raise InvalidArgumentError(
            f"teleport-sweep: optimizers must be among {OPTIMIZERS}, got {sorted(unknown)}"
        )
    warm_up(config.problem(0))
    rows = _sweep_rows(config, progress)
    points = _grid_points(rows, config)
    metrics: dict[str, Any] = {"runs": config.runs, "max_steps": config.max_steps}
    for optimizer in config.optimizers:
        metrics.update(_sweep_metrics(points, optimizer))
    notes = [
        *_setup_notes(config),
        "speedup = t_opt / t_opt+teleport to the first |L_{t−1} − L_t| < "
        f"{config.tol:g}, wall-clock (the paper) and in optimizer steps; a grid point is "
        f"omitted unless all {config.runs} runs converged within {config.max_steps} steps "
        "without diverging",
    ]
    return Result(metrics, {"runs": rows, "points": points}, notes)


def _speedup_panels(result: Result, key: str, what: str) -> Any:
    """Fig 4.7 layout: for each optimizer, speedup vs teleport lr (one line per number of
    ascent steps) and vs ascent steps (one line per lr), dashed at speedup = 1."""
    points = result.series["points"]
    optimizers = list(dict.fromkeys(points["optimizer"]))
    figure, grid = plt.subplots(
        1, 2 * len(optimizers), figsize=(5.2 * 2 * len(optimizers), 4.2), squeeze=False
    )
    letters = "abcd"
    for i, optimizer in enumerate(optimizers):
        one = _rows(points, optimizer=optimizer)
        by_lr, by_steps = grid[0][2 * i], grid[0][2 * i + 1]
        for n in sorted(set(one["teleport_steps"])):
            line = _rows(one, teleport_steps=n)
            by_lr.plot(line["teleport_lr"], line[key], "-o", markersize=4, label=f"steps = {n}")
        for lr in sorted(set(one["teleport_lr"])):
            line = _rows(one, teleport_lr=lr)
            by_steps.plot(
                line["teleport_steps"], line[key], "-o", markersize=4, label=f"lr = {lr:g}"
            )
        by_lr.set_xscale("log")
        by_steps.set_xscale("log", base=2)
        by_lr.set_xlabel("teleport learning rate")
        by_steps.set_xlabel("teleport steps")
        for j, axis in enumerate((by_lr, by_steps)):
            axis.axhline(1.0, color="k", linestyle="--", linewidth=1)
            axis.set_ylabel(f"speedup ({what})")
            axis.set_title(f"({letters[2 * i + j]}) {LABELS[optimizer]}")
            axis.legend(fontsize=7)
    figure.suptitle(
        f"speedup to |ΔL| < 1e-3 from one teleport at epoch 5, {what} (dissertation Fig 4.7); "
        "missing points: not converged or diverged"
    )
    figure.tight_layout()
    return figure


def plot_sweep(result: Result) -> dict[str, Any]:
    return {
        "speedup_wall.png": _speedup_panels(result, "speedup_wall", "wall-clock"),
        "speedup_steps.png": _speedup_panels(result, "speedup_steps", "steps"),
    }


def _check_sweep(key: str) -> Callable[[Result], tuple[str, bool]]:
    def check(result: Result) -> tuple[str, bool]:
        m = result.metrics
        parts, holds = [], True
        for optimizer in OPTIMIZERS:
            if f"{optimizer}_points" not in m:
                continue
            faster, converged = (
                m[f"{optimizer}_points_faster_{key}"],
                m[f"{optimizer}_points_converged"],
            )
            parts.append(
                f"{LABELS[optimizer]}: {faster}/{converged} converged points > 1 (of "
                f"{m[f'{optimizer}_points']}; median {m[f'{optimizer}_median_speedup_{key}']:.2f})"
            )
            holds = holds and converged > 0 and faster > converged / 2
        return "; ".join(parts), holds

    return check


experiment(
    "teleport-sweep",
    seed_ref="seed 001, dissertation Fig 4.7 (§4.6.3)",
    description=(
        "speedup t_opt / t_opt+teleport to convergence (|L_t − L_{t+1}| < 1e-3, at most 2000 "
        "steps) of one teleport at epoch 5 on the Fig 4.5 regression, over teleport lr "
        "1e-9 … 1e-5 × 1 … 32 ascent steps, for GD (lr 1e-4) and AdaGrad (lr 1e-1); "
        "wall-clock (the paper) and in steps. Chosen here: as teleport-regression, with and "
        "without teleport timed back to back on one torch thread"
    ),
    presets={
        "quick": SweepConfig(runs=2, teleport_lrs=(1e-8, 1e-7, 1e-6), teleport_steps=(1, 4, 16)),
        "paper": SweepConfig(),
    },
    claims=[
        Claim(
            "most teleport hyperparameters speed up convergence in wall-clock time",
            "seed 001, Fig 4.7, §4.6.3",
            "speedup > 1 at most converged grid points, GD and AdaGrad",
            _check_sweep("wall"),
        ),
        Claim(
            "the same, counted in optimizer steps to convergence (derived; less noisy)",
            "seed 001, Fig 4.7 (restated in steps)",
            "speedup > 1 at most converged grid points, GD and AdaGrad",
            _check_sweep("steps"),
        ),
    ],
    plot=plot_sweep,
)(run_sweep)


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
        max_step_norm=_bound(config.max_step_norm),
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
        "runtime": _concat([_runtime_table(by_dimension, "a"), _runtime_table(by_depth, "b")])
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
        rows = _rows(table, panel=panel)
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
    right.set_xticks(sorted(set(_rows(table, panel="b")["layers"])))
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
    presets={
        "quick": RuntimeConfig(
            epochs=40, dimensions=(8, 16, 32, 64, 128), depths=(2, 3, 4, 5, 6), depth_width=32
        ),
        "paper": RuntimeConfig(),
    },
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
