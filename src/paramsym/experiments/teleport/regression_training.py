"""Regression training with teleportation (seed 001, dissertation ch. 4, Figs 4.5, 4.7, 4.9).

The 3-layer LeakyReLU(0.1) regression, its GL actions between layer pairs and the GD / AdaGrad
training loop driving :class:`paramsym.Teleporter`, shared by
:mod:`~paramsym.experiments.teleport.regression`, :mod:`~paramsym.experiments.teleport.sweep`
and :mod:`~paramsym.experiments.teleport.runtime`, and exposed for benchmarks:

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
* wall-clock times run torch on one thread (the paper: "one CPU"), after a warm-up, with the
  runs being compared measured back to back in the same process.
"""

from __future__ import annotations

import copy
import math
import statistics
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

import paramsym as ps
from paramsym.errors import InvalidArgumentError, NonFiniteError
from paramsym.experiments.teleport.convergence import F64, OPTIMIZERS, OptimizerName, step_bound
from paramsym.experiments.threads import torch_threads
from paramsym.symmetry.base import Symmetry
from paramsym.teleportation import (
    Schedule,
    TeleportConfig,
    TeleportDriftWarning,
    Teleporter,
    TeleportEvent,
)

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
            2, 1e-5); ``lr=None`` takes trust-region steps of ‖T‖ = ``step_norm`` instead
            (``ps.teleport``'s scale-free default).
        step_norm: ‖T‖ of each trust-region step when ``lr`` is ``None`` (``None``: the
            library default, 0.1).
        action: ``"inverse_GL"`` (Eq. 4.13) or ``"pinv_GL"`` (Eq. 4.16) on every layer pair.
        parameterization: ``"first_order"`` (g = I + T, exact inverse) or ``"exp"``.
        max_step_norm: bound on ‖T‖ of each ascent step (all pairs together); 0: unbounded,
            the paper's setting.
    """

    at: int = 5
    steps: int = 8
    lr: float | None = 1e-7
    action: str = "inverse_GL"
    parameterization: str = "first_order"
    max_step_norm: float = 0.1
    step_norm: float | None = None

    def config(self) -> TeleportConfig:
        return TeleportConfig(
            objective="grad_norm",
            steps=self.steps,
            lr=self.lr,
            step_norm=self.step_norm,
            parameterization=self.parameterization,  # type: ignore[arg-type]
            max_step_norm=step_bound(self.max_step_norm),
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
