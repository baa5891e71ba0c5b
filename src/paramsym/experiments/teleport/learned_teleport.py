"""``learned-teleport`` (seed 001, dissertation §5.5, Algorithm 3, Fig 5.12).

Learning to teleport: a meta-optimiser that learns both a local update f_t (LSTM m₁) and a
group element g_t (LSTM m₂, one per layer pair) and moves the parameters by
w_{t+1} = g_t·(w_t + f_t) (:class:`paramsym.LearnedTeleporter`). The four methods of Fig 5.12,
``LSTM(update,tele)`` (the proposal), ``LSTM(update)`` (g_t = I), ``LSTM(lr,tele)`` (a learned
step size and g_t) and ``GD`` (step 3·10⁻⁴), are meta-trained by Algorithm 3 (truncated
back-propagation of Σ L(w_i) every ``unroll`` steps) on training trajectories and then run on
unseen test trajectories.

The task is the text's (notes 001b §4): L(W₁, W₂) on a 2-layer LeakyReLU(0.1) network without
biases, W₁, W₂, X, Y ∈ R^{20×20}, trajectories of 100 steps, unroll 10. The text only says "random
X, Y and randomly initialized W's"; as in the dissertation's other regressions and the authors'
code, every entry is drawn from U[0, 1] (``init="uniform"``; ``"pytorch"`` gives
:func:`paramsym.teleportation.regression_task`'s N(0, 1) data and nn.Linear weights), and the
loss is the code's 0.5‖Y − W₂σ(W₁X)‖_F², for which 3·10⁻⁴ is indeed about the largest stable GD
step (10⁻³ diverges). The group elements act through the exact Eq. 4.13 batch action (the
authors' code uses I + T and I − T), so teleporting keeps the batch loss to rounding.

The convergence measure: on each test trajectory the threshold is the loss GD reaches at the
last step (its loss after ``steps`` steps); a method's score is the first step at which its loss
is at or below that threshold (:func:`paramsym.teleportation.steps_to_threshold`; never reached
counts as ∞). The claim compares medians over the test trajectories.

Presets. ``paper``: the text's 700 / 600 / 30 training trajectories, hidden size 300, meta
learning rates 10⁻⁴ (m₁) and 10⁻³ (m₂, and the step-size LSTM, which the text counts as part of
m₂), 5 test trajectories. ``quick`` (≈ 45 s on one core): 30 training trajectories per method,
hidden size 20, m₁'s meta learning rate raised to 10⁻² and the step-size LSTM's to 10⁻² (with
20× fewer trajectories, 10⁻⁴ leaves m₁ close to its initialisation), m₂ at the text's 10⁻³, no
clipping (clipping the meta-gradient made LSTM(lr, tele)'s step size run away and its inner
optimisation diverge), 10 test trajectories. ``paper`` uses the authors' update LSTM on the
whole flattened gradient (``update_input="full"``, hidden 300; ≈ 1.5 s per training trajectory
with teleport and 0.7 s without on one core, about 25 minutes in all); ``quick`` the library's
coordinate-wise LSTM (Andrychowicz et al.; a coordinate-wise LSTM of hidden size 300 would take
≈ 30 s per trajectory). A meta-training whose inner optimisation diverges stops there (reported
as ``<method>_train_diverged_at``) and is evaluated with its last finite weights; a test
trajectory that diverges scores ∞ from then on.

Measured (seed 0). Quick: LSTM(update,tele) reaches GD's final loss first (median 11 steps
against 15, 41.5 and 100), but the margin over LSTM(update) is within the training noise (seeds
1-3: 8.5 vs 8, 5 vs 9, 7 vs 7). Paper (32 minutes on one core): both update LSTMs fall to a loss
of ≈ 30 within 5 steps, far ahead of GD over the first 30 steps that the authors plot, then
stall, so no learned method reaches GD's final loss within 100 steps and the claim fails.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import torch
from torch import Tensor

import paramsym as ps
from paramsym.core.tables import append_row, empty_table, table_rows
from paramsym.errors import InvalidArgumentError, NonFiniteError
from paramsym.experiments.registry import Claim, Progress, Result, experiment
from paramsym.experiments.threads import torch_threads
from paramsym.teleportation import (
    METHODS,
    LearnedTeleportConfig,
    LearnedTeleporter,
    MetaTask,
    regression_task,
    steps_to_threshold,
)

PROPOSAL = "LSTM(update,tele)"
METHOD_ORDER = ("LSTM(update,tele)", "LSTM(update)", "LSTM(lr,tele)", "GD")
"""The methods of Fig 5.12, the proposal first."""
ALIASES = {
    "update_tele": "LSTM(update,tele)",
    "update": "LSTM(update)",
    "lr_tele": "LSTM(lr,tele)",
    "gd": "GD",
}
"""Names without commas or parentheses, which ``--set methods=update,gd`` can pass."""
TEST_OFFSET = 900_000
"""Test trajectory j uses seed ``seed·1000003 + TEST_OFFSET + j``; training trajectory i
``seed·1000003 + i`` (disjoint while i < TEST_OFFSET)."""


@dataclass(frozen=True)
class LearnedTeleportExperimentConfig:
    """Settings of ``learned-teleport`` (paper preset: §5.5 and notes 001b §4).

    Attributes:
        seed: base seed of the trajectories and of the LSTMs' initialisation.
        methods: which of Fig 5.12's methods to run (GD is always run: it sets the threshold),
            by name or by the comma-free aliases of :data:`ALIASES` (for ``--set methods=...``).
        widths: network widths [d_in, h, d_out] (§5.5: 20, 20, 20).
        samples: columns of X and Y (§5.5: 20, so X is square and Eq. 4.13 is exact).
        slope: LeakyReLU slope (0.1).
        init: ``"uniform"`` (X, Y, W ~ U[0, 1], the text's regressions and the authors' code) or
            ``"pytorch"`` (:func:`~paramsym.teleportation.regression_task`).
        train_update_tele, train_update, train_lr_tele: training trajectories of the three
            learned methods (§5.5: 700, 600, 30).
        meta_epochs: passes over the training trajectories (§5.5: one).
        steps: steps of every training and test trajectory (§5.5: 100).
        unroll: truncation length of Algorithm 3 (§5.5: 10).
        test_trajectories: unseen test trajectories (§5.5: 5).
        hidden, layers: size of the update and teleport LSTMs (§5.5: 300, 2).
        lr_hidden: hidden size of LSTM(lr, tele)'s step-size LSTM (authors' code: 20).
        update_input, update_scale, preprocess, teleport_norm, group_map, action, gd_lr,
            lr_range: as :class:`~paramsym.teleportation.LearnedTeleportConfig` (§5.5: raw
            gradients, ‖T‖_F = 0.01, GD step 3·10⁻⁴, learned step in [10⁻⁷, 5·10⁻³]).
        meta_lr_update: Adam learning rate of m₁ (text: 10⁻⁴).
        meta_lr_teleport: Adam learning rate of m₂ (text: 10⁻³).
        meta_lr_step: Adam learning rate of LSTM(lr, tele)'s step-size LSTM, which the text
            counts as part of m₂ (10⁻³).
        meta_grad_clip: clip the meta-gradient's norm to this (0: no clipping, the text).
        dtype: ``"float64"`` or ``"float32"``.
        threads: torch intra-op threads during the run (0: unchanged).
    """

    seed: int = 0
    methods: tuple[str, ...] = METHOD_ORDER
    widths: tuple[int, ...] = (20, 20, 20)
    samples: int = 20
    slope: float = 0.1
    init: str = "uniform"
    train_update_tele: int = 30
    train_update: int = 30
    train_lr_tele: int = 30
    meta_epochs: int = 1
    steps: int = 100
    unroll: int = 10
    test_trajectories: int = 10
    hidden: int = 20
    layers: int = 2
    lr_hidden: int = 20
    update_input: str = "coordinatewise"
    update_scale: float = 0.1
    preprocess: str = "none"
    teleport_norm: float = 0.01
    group_map: str = "first_order"
    action: str = "auto"
    gd_lr: float = 3e-4
    lr_range: tuple[float, ...] = (1e-7, 5e-3)
    meta_lr_update: float = 1e-2
    meta_lr_teleport: float = 1e-3
    meta_lr_step: float = 1e-2
    meta_grad_clip: float = 0.0
    dtype: str = "float64"
    threads: int = 1


def _half_sq(output: Tensor, target: Tensor) -> Tensor:
    """0.5‖Y − f(X)‖_F² (the authors' code; the text writes ‖Y − W₂σ(W₁X)‖₂)."""
    return 0.5 * ((output - target) ** 2).sum()


def _validate(config: LearnedTeleportExperimentConfig) -> None:
    unknown = [m for m in config.methods if m not in METHODS and m.lower() not in ALIASES]
    if unknown or not config.methods:
        raise InvalidArgumentError(
            f"learned-teleport: methods must be among {list(METHOD_ORDER)} or their aliases "
            f"{list(ALIASES)}, got {list(config.methods)}"
        )
    if config.init not in ("uniform", "pytorch"):
        raise InvalidArgumentError(
            f"learned-teleport: init must be 'uniform' or 'pytorch', got {config.init!r}"
        )
    if config.dtype not in ("float64", "float32"):
        raise InvalidArgumentError(
            f"learned-teleport: dtype must be float64 or float32, got {config.dtype!r}"
        )
    if config.test_trajectories < 1 or config.steps < 1 or config.unroll < 1:
        raise InvalidArgumentError(
            "learned-teleport: test_trajectories, steps and unroll must be ≥ 1, got "
            f"{config.test_trajectories}, {config.steps}, {config.unroll}"
        )
    counts = (config.train_update_tele, config.train_update, config.train_lr_tele)
    if min(counts) < 1 or config.meta_epochs < 1:
        raise InvalidArgumentError(
            f"learned-teleport: every method needs ≥ 1 training trajectory and meta_epochs "
            f"≥ 1, got {counts}, {config.meta_epochs}"
        )
    if len(config.lr_range) != 2:
        raise InvalidArgumentError(
            f"learned-teleport: lr_range must be (low, high), got {config.lr_range}"
        )
    if len(config.widths) != 3:
        raise InvalidArgumentError(
            f"learned-teleport: widths must be [d_in, h, d_out] (§5.5's 2-layer net), got "
            f"{list(config.widths)}"
        )


def make_model(config: LearnedTeleportExperimentConfig) -> torch.nn.Sequential:
    """The §5.5 network W₂σ(W₁x) without biases (rows of X are samples here)."""
    dtype = torch.float64 if config.dtype == "float64" else torch.float32
    return ps.mlp(list(config.widths), torch.nn.LeakyReLU(config.slope), bias=False, dtype=dtype)


def make_task(
    model: torch.nn.Module, config: LearnedTeleportExperimentConfig, seed: int
) -> MetaTask:
    """One trajectory's start W and batch (X, Y), drawn from ``seed``."""
    generator = torch.Generator().manual_seed(seed)
    dtype = next(model.parameters()).dtype
    if config.init == "pytorch":
        return regression_task(model, config.samples, generator=generator, dtype=dtype)
    params = {
        n: torch.rand(p.shape, generator=generator, dtype=dtype)
        for n, p in model.named_parameters()
    }
    x = torch.rand(config.samples, config.widths[0], generator=generator, dtype=dtype)
    y = torch.rand(config.samples, config.widths[-1], generator=generator, dtype=dtype)
    return MetaTask(params, (x, y))


def teleporter(
    model: torch.nn.Module, method: str, config: LearnedTeleportExperimentConfig
) -> LearnedTeleporter:
    """The meta-optimiser of ``method`` with the experiment's settings."""
    lo, hi = config.lr_range
    settings = LearnedTeleportConfig(
        hidden=config.hidden,
        layers=config.layers,
        lr_hidden=config.lr_hidden,
        update_input=config.update_input,  # type: ignore[arg-type]
        update_scale=config.update_scale,
        preprocess=config.preprocess,  # type: ignore[arg-type]
        teleport_norm=config.teleport_norm,
        group_map=config.group_map,  # type: ignore[arg-type]
        action=config.action,  # type: ignore[arg-type]
        gd_lr=config.gd_lr,
        lr_range=(lo, hi),
        meta_lr_update=config.meta_lr_step if method == "LSTM(lr,tele)" else config.meta_lr_update,
        meta_lr_teleport=config.meta_lr_teleport,
        meta_grad_clip=config.meta_grad_clip or None,
        seed=config.seed,
    )
    return LearnedTeleporter.from_method(model, _half_sq, method, config=settings)


def train_count(method: str, config: LearnedTeleportExperimentConfig) -> int:
    """Training trajectories of ``method`` (0 for GD)."""
    return {
        "LSTM(update,tele)": config.train_update_tele,
        "LSTM(update)": config.train_update,
        "LSTM(lr,tele)": config.train_lr_tele,
    }.get(method, 0)


@dataclass
class Trajectory:
    """One test trajectory: ``losses[t]`` = L(w_t) (∞ after a divergence), the largest relative
    change of the batch loss by a teleport, |L(g·(w + f)) − L(w + f)| / L(w + f), and the mean
    ‖g − I‖_F of the group elements (both 0 without teleport)."""

    losses: list[float]
    drift: float
    distance: float


def evaluate(tele: LearnedTeleporter, task: MetaTask, steps: int) -> Trajectory:
    """Run ``tele`` on ``task`` for ``steps`` steps without meta-gradients, checking that
    every learned g_t keeps the batch loss."""
    params = {n: t.detach() for n, t in task.params.items()}
    state = tele.initial_state()
    losses: list[float] = []
    drift, distances = 0.0, []
    with torch.no_grad():
        for _ in range(steps):
            try:
                out = tele.step(params, task.batch, state)
            except NonFiniteError:  # the parameters overflowed: the trajectory diverged
                break
            losses.append(float(out.loss))
            if not math.isfinite(losses[-1]):
                break
            if out.elements:
                before = float(tele.loss(out.moved, task.batch))
                after = float(tele.loss(out.params, task.batch))
                drift = max(drift, abs(after - before) / max(abs(before), 1e-300))
                for g in out.elements.values():
                    eye = torch.eye(g.shape[0], dtype=g.dtype, device=g.device)
                    distances.append(float(torch.linalg.matrix_norm(g - eye)))
            params = {n: t.detach() for n, t in out.params.items()}
            state = out.state.detach()
        else:
            losses.append(float(tele.loss(params, task.batch)))
    losses = [v if math.isfinite(v) else math.inf for v in losses]
    losses += [math.inf] * (steps + 1 - len(losses))
    return Trajectory(losses, drift, float(np.mean(distances)) if distances else 0.0)


def quantile(values: Sequence[float], q: float) -> float:
    """Linear-interpolation quantile that keeps ∞ (never reached) as ∞."""
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    low, high = math.floor(position), math.ceil(position)
    if (math.isinf(ordered[high]) and high != low) or math.isinf(ordered[low]):
        return math.inf
    return ordered[low] + (position - low) * (ordered[high] - ordered[low])


def _finite_or_none(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _meta_train(
    tele: LearnedTeleporter,
    method: str,
    model: torch.nn.Module,
    config: LearnedTeleportExperimentConfig,
    progress: Progress,
) -> tuple[list[float], int | None]:
    """Algorithm 3 on the method's training trajectories; the meta-losses, and the index of
    the training trajectory on which the inner optimisation diverged (``None``: it did not;
    training stops there and the LSTMs keep their last finite weights)."""
    count = train_count(method, config)
    if count == 0:  # GD: nothing to learn
        return [], None
    ticks = iter(progress.track(range(count * config.meta_epochs), description=method))
    current = [0]

    def sample(i: int) -> MetaTask:
        next(ticks, None)
        current[0] = i
        return make_task(model, config, config.seed * 1_000_003 + i)

    try:
        result = tele.meta_train(
            sample, num_tasks=count, steps=config.steps, unroll=config.unroll,
            epochs=config.meta_epochs,
        )  # fmt: skip
    except NonFiniteError:
        return [], current[0]
    finally:
        for _ in ticks:
            pass
    return result.meta_losses, None


def run_learned_teleport(config: LearnedTeleportExperimentConfig, progress: Progress) -> Result:
    """Meta-train the learned methods, run all on the test trajectories, score them."""
    _validate(config)
    chosen = {ALIASES.get(m.lower(), m) for m in config.methods}
    methods = [m for m in METHOD_ORDER if m in chosen or m == "GD"]
    curves = empty_table("method trajectory step loss")
    scores = empty_table("method trajectory threshold steps_to_threshold final_loss drift")
    training = empty_table("method window meta_loss")
    metrics: dict[str, Any] = {"methods": methods, "steps": config.steps, "dtype": config.dtype}
    with torch_threads(config.threads):
        model = make_model(config)
        tests = [
            make_task(model, config, config.seed * 1_000_003 + TEST_OFFSET + j)
            for j in range(config.test_trajectories)
        ]
        runs: dict[str, list[Trajectory]] = {}
        for method in methods:
            tele = teleporter(model, method, config)
            start = time.perf_counter()
            meta_losses, diverged = _meta_train(tele, method, model, config, progress)
            metrics[f"{method}_train_seconds"] = time.perf_counter() - start
            metrics[f"{method}_train_trajectories"] = train_count(method, config)
            metrics[f"{method}_train_diverged_at"] = diverged
            for k, value in enumerate(meta_losses):
                append_row(training, method, k, value)
            runs[method] = [evaluate(tele, task, config.steps) for task in tests]
    thresholds = [run.losses[-1] for run in runs["GD"]]
    for method in methods:
        reached: list[float] = []
        for j, run in enumerate(runs[method]):
            for step, loss in enumerate(run.losses):
                append_row(curves, method, j, step, loss)
            first = steps_to_threshold(run.losses, thresholds[j])
            reached.append(math.inf if first is None else float(first))
            append_row(
                scores, method, j, thresholds[j], -1 if first is None else first,
                run.losses[-1], run.drift,
            )  # fmt: skip
        finals = [run.losses[-1] for run in runs[method]]
        metrics[f"{method}_steps_median"] = _finite_or_none(quantile(reached, 0.5))
        metrics[f"{method}_steps_quartiles"] = [
            _finite_or_none(quantile(reached, q)) for q in (0.25, 0.75)
        ]
        metrics[f"{method}_never_reached"] = sum(math.isinf(v) for v in reached)
        metrics[f"{method}_final_loss_median"] = _finite_or_none(quantile(finals, 0.5))
        metrics[f"{method}_max_teleport_drift"] = max(run.drift for run in runs[method])
        metrics[f"{method}_mean_element_distance"] = float(
            np.mean([run.distance for run in runs[method]])
        )
    metrics["gd_diverged"] = sum(math.isinf(v) for v in thresholds)
    metrics["initial_loss_median"] = quantile([run.losses[0] for run in runs["GD"]], 0.5)
    metrics["threshold_median"] = _finite_or_none(quantile(thresholds, 0.5))
    notes = [
        f"task: 2-layer LeakyReLU({config.slope:g}) net, widths {list(config.widths)}, "
        f"{config.samples} samples, init {config.init}, loss 0.5‖Y − f(X)‖_F²; "
        f"{config.test_trajectories} unseen test trajectories of {config.steps} steps",
        "threshold on each test trajectory: GD's loss after the last step; steps to threshold "
        "= first step with loss ≤ threshold (never reached = ∞; quartiles by linear "
        "interpolation, None when ∞)",
        f"meta-training: Adam, lrs m₁ {config.meta_lr_update:g}, m₂ {config.meta_lr_teleport:g}, "
        f"step-size LSTM {config.meta_lr_step:g}, grad clip {config.meta_grad_clip or 'none'}; "
        f"LSTM hidden {config.hidden}, {config.update_input} update LSTM, unroll "
        f"{config.unroll}; g_t through the exact Eq. 4.13 batch action (not I ± T)",
        "the trained meta-optimisers are not saved (the experiment Result has no artifact "
        "files); rerun with the same seed to rebuild them deterministically",
    ]
    series = {"test_curves": curves, "steps_to_threshold": scores, "meta_training": training}
    return Result(metrics, series, notes)


def _steps(value: float | None) -> float:
    return math.inf if value is None else value


def _fmt(value: float | None) -> str:
    return "∞" if value is None else f"{value:g}"


def _describe(m: dict[str, Any], method: str) -> str:
    q1, q3 = m[f"{method}_steps_quartiles"]
    final = m[f"{method}_final_loss_median"]
    return (
        f"{method}: median {_fmt(m[f'{method}_steps_median'])} steps [IQR {_fmt(q1)}-"
        f"{_fmt(q3)}], {m[f'{method}_never_reached']} never; median final loss "
        f"{'∞' if final is None else f'{final:.3g}'}"
    )


def faster_claim(result: Result) -> tuple[str, bool | None]:
    """LSTM(update,tele) reaches GD's final loss in fewer steps (median over the test
    trajectories) than each of the other three methods."""
    m = result.metrics
    methods = m["methods"]
    if PROPOSAL not in methods or len(methods) < 2:
        return "not evaluated: LSTM(update,tele) or every baseline was left out", None
    if m["gd_diverged"]:
        return f"not evaluated: GD diverged on {m['gd_diverged']} test trajectories", None
    text = "; ".join(_describe(m, method) for method in methods)
    mine = _steps(m[f"{PROPOSAL}_steps_median"])
    holds = all(mine < _steps(m[f"{other}_steps_median"]) for other in methods if other != PROPOSAL)
    return text, holds


def drift_tolerance(result: Result) -> float:
    return 1e-8 if result.metrics.get("dtype", "float64") == "float64" else 1e-3


def invariance_claim(result: Result) -> tuple[str, bool | None]:
    """Every learned g_t keeps the batch loss: the teleport moves along a level set."""
    m = result.metrics
    tele = [method for method in m["methods"] if method.endswith("tele)")]
    if not tele:
        return "not evaluated: no teleporting method was run", None
    drifts = {method: m[f"{method}_max_teleport_drift"] for method in tele}
    moved = {method: m[f"{method}_mean_element_distance"] for method in tele}
    text = "; ".join(
        f"{method}: max relative loss change {drifts[method]:.1e}, mean ‖g − I‖_F "
        f"{moved[method]:.3g}"
        for method in tele
    )
    holds = all(v <= drift_tolerance(result) for v in drifts.values()) and all(
        v > 0 for v in moved.values()
    )
    return text, holds


def plot_learned_teleport(result: Result) -> dict[str, Any]:
    """Fig 5.12: test loss against step (mean over the test trajectories, band from the
    smallest to the largest, log y), and the steps to GD's final loss per test trajectory."""
    curves = result.series["test_curves"]
    scores = result.series["steps_to_threshold"]
    steps = result.metrics["steps"]
    figure, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5), width_ratios=(3, 2))
    for method in result.metrics["methods"]:
        rows = table_rows(curves, method=method)
        n = len(set(rows["trajectory"]))
        losses = np.array(rows["loss"], dtype=float).reshape(n, steps + 1)
        losses = np.where(np.isfinite(losses), losses, np.nan)
        x = np.arange(steps + 1)
        line = left.plot(x, np.nanmean(losses, axis=0), lw=1.8, label=method)[0]
        left.fill_between(
            x, np.nanmin(losses, axis=0), np.nanmax(losses, axis=0), color=line.get_color(),
            alpha=0.15, lw=0,
        )  # fmt: skip
        reached = table_rows(scores, method=method)["steps_to_threshold"]
        shown = [steps * 1.08 if v < 0 else v for v in reached]
        k = result.metrics["methods"].index(method)
        right.scatter(shown, np.full(len(shown), k) + np.linspace(-0.2, 0.2, len(shown)),
                      color=line.get_color(), s=18)  # fmt: skip
        median = result.metrics[f"{method}_steps_median"]
        if median is not None:
            right.plot([median, median], [k - 0.3, k + 0.3], color="black", lw=2)
    if result.metrics["threshold_median"] is not None:
        left.axhline(result.metrics["threshold_median"], color="grey", ls=":",
                     label="GD's final loss (median)")  # fmt: skip
    left.set(yscale="log", xlabel="step", ylabel="test loss",
             title=f"(a) Fig 5.12: mean over {n} unseen trajectories, band = min-max")  # fmt: skip
    left.legend(fontsize=8)
    names = result.metrics["methods"]
    right.set_yticks(range(len(names)), names)
    right.axvline(steps * 1.08, color="grey", ls=":")
    right.text(steps * 1.08, -0.45, " never", color="grey", fontsize=8, va="top")
    right.set(xlabel="steps to reach GD's final loss (bar: median)",
              title="(b) per test trajectory", xlim=(-2, steps * 1.15))  # fmt: skip
    right.invert_yaxis()
    figure.tight_layout()
    return {"learned_teleport.png": figure}


experiment(
    "learned-teleport",
    seed_ref="seed 001, Fig 5.12; §5.5, Algorithm 3",
    description=(
        "learning to teleport: LSTM meta-optimisers for the update f_t and the group element "
        "g_t (w ← g·(w + f), Eq. 4.13 batch action) meta-trained by truncated BPTT on 20×20 "
        "2-layer LeakyReLU regressions (X, Y, W ~ U[0, 1]), against LSTM(update), "
        "LSTM(lr,tele) and GD on unseen trajectories: steps to GD's final loss and final loss"
    ),
    quick=LearnedTeleportExperimentConfig(),
    paper=LearnedTeleportExperimentConfig(
        train_update_tele=700,
        train_update=600,
        train_lr_tele=30,
        test_trajectories=5,
        hidden=300,
        update_input="full",
        meta_lr_update=1e-4,
        meta_lr_teleport=1e-3,
        meta_lr_step=1e-3,
        meta_grad_clip=0.0,
        threads=0,
    ),
    claims=[
        Claim(
            "on unseen trajectories LSTM(update,tele) reaches a low loss sooner than "
            "LSTM(update), LSTM(lr,tele) and GD",
            "seed 001, §5.5, Fig 5.12",
            "median (over test trajectories) steps to reach GD's final loss is lower for "
            "LSTM(update,tele) than for each of the three (never reached = ∞)",
            faster_claim,
        ),
        Claim(
            "the learned g_t are symmetries: teleporting keeps the batch loss",
            "seed 001, §5.5 (w_{t+1} = g_t·(w_t + f_t)), Eq. 4.13",
            "max |L(g·(w + f)) − L(w + f)| / L(w + f) ≤ 1e-8 (float64) over every test step, "
            "with g ≠ I",
            invariance_claim,
        ),
    ],
    plot=plot_learned_teleport,
)(run_learned_teleport)
