"""``teleport-testfunctions`` (seed 001, dissertation Figs 4.3, 4.4, §4.6.1).

Gradient descent with and without teleportation along the SO(2) change-of-variables symmetry of
the Rosenbrock and Booth functions; every teleport runs through :func:`paramsym.teleport`.

Choices where the dissertation is silent or its text and the authors' code disagree (notes 001b
§9): Rosenbrock teleports at steps 99, 199, … (the authors' code) from the identity (θ₀ = 0),
maximising log‖∇L‖² (same maximiser as ‖∇L‖²; its θ-gradient is scale free, so the paper's
lr 0.1 acts alike at L = 10² and L = 10⁻⁶, where the raw objective's gradient vanishes) with
steps bounded to 1 rad; Booth follows the text: raw ‖∇L‖², lr 1e-3, from a random angle
θ₀ ~ U[0, π), teleport before step 4 (index 4, the authors' code).
"""

from __future__ import annotations

import math
import statistics
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import matplotlib.pyplot as plt
import torch
from torch import Tensor, nn

import paramsym as ps
from paramsym.core.tables import concat_tables, table_rows
from paramsym.errors import InvalidArgumentError
from paramsym.experiments.registry import Claim, Progress, Result, experiment
from paramsym.experiments.teleport.convergence import (
    COLOURS,
    F64,
    LABELS,
    _format_steps,
    compare_at_equal_loss,
    step_bound,
)
from paramsym.experiments.threads import torch_threads
from paramsym.landscapes import Booth, Landscape, Rosenbrock, value_loss
from paramsym.teleportation import (
    FunctionObjective,
    TeleportDriftWarning,
)

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
        step_bound(config.max_step_norm),
    )
    booth = LandscapeTeleport(
        config.booth_teleport_steps,
        config.booth_teleport_lr,
        config.booth_objective,
        config.booth_theta0,
        step_bound(config.max_step_norm),
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
        "trajectories": concat_tables(
            [
                _landscape_series("rosenbrock", "gd", rb_gd),
                _landscape_series("rosenbrock", "gd+teleport", rb_tp),
                _landscape_series("booth", "gd", booth_gd),
                _landscape_series("booth", "gd+teleport", draws[0]),
            ]
        ),
        "teleports": concat_tables(
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
    rows = table_rows(result.series["trajectories"], function=name, trajectory=label)
    final = table_rows(result.series["final_point"], function=name, trajectory=label)
    w1, w2 = rows["w1"] + final["w1"], rows["w2"] + final["w2"]
    axis.plot(w1, w2, "-o", color="tab:blue", markersize=2.5, linewidth=1)
    if label == "gd+teleport":
        jumps = table_rows(result.series["teleports"], function=name, draw=0)
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
        everything = table_rows(result.series["trajectories"], function=name)
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
                rows = table_rows(table, function=name, trajectory=label)
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
            rows = table_rows(table, function=name, trajectory=label)
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
    quick=LandscapeConfig(booth_draws=10),
    paper=LandscapeConfig(),
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
