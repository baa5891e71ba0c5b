"""``q-drift`` (seed 001, Fig A.1).

How far gradient *descent* moves Eq. 2.17's Q, per learning rate. The common setup is in
:mod:`paramsym.experiments.conserved`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import torch
from torch import Tensor

import paramsym as ps
from paramsym.core.tables import append_row
from paramsym.experiments.conserved import gradient_descent
from paramsym.experiments.registry import Claim, Progress, Result, experiment
from paramsym.experiments.threads import single_threaded

# == q-drift (Fig A.1) ===========================================================================


@dataclass(frozen=True)
class QDriftConfig:
    """Settings of ``q-drift`` (Fig A.1: the setup of Fig 2.4 at three learning rates).

    Attributes:
        seed: randomness of Y and of the (Xavier, Eq. 2.15) initialisation.
        outputs, hidden, inputs: m, h, n (Y ∈ R^{5×10}, U ∈ R^{5×50}, V ∈ R^{10×50}).
        activations: σ (the paper: identity, ReLU, sigmoid, tanh).
        learning_rates: the paper's 0.1, 0.01, 0.001 (same init and steps for all).
        steps: GD steps (not given in the paper).
        every: Q is recorded every this many steps.
        threshold: the loss has converged when L ≤ threshold·‖Y‖²_F.
        loss: ``"sum"`` (‖Y − Uσ(Vᵀ)‖²_F, as printed for Fig 2.4) or ``"mean"`` (divided by
            the n·m entries, i.e. the learning rates divided by n·m); the paper does not say.
    """

    seed: int = 0
    outputs: int = 5
    hidden: int = 50
    inputs: int = 10
    activations: tuple[str, ...] = ("identity", "relu", "sigmoid", "tanh")
    learning_rates: tuple[float, ...] = (0.1, 0.01, 0.001)
    steps: int = 3000
    every: int = 10
    threshold: float = 1e-3
    loss: str = "sum"


def run_q_drift(config: QDriftConfig, progress: Progress) -> Result:
    generator = torch.Generator().manual_seed(config.seed)
    m, h, n = config.outputs, config.hidden, config.inputs
    target = torch.randn(n, m, generator=generator, dtype=torch.float64)
    bar = config.threshold * float((target**2).sum())
    if config.loss not in ("sum", "mean"):
        raise ps.InvalidArgumentError(f"q-drift: loss must be 'sum' or 'mean', got {config.loss!r}")
    per_entry = 1.0 if config.loss == "sum" else 1.0 / (n * m)
    lrs = per_entry * torch.tensor(config.learning_rates, dtype=torch.float64)
    table: dict[str, list[Any]] = {
        "activation": [],
        "lr": [],
        "step": [],
        "relative_change": [],
        "loss": [],
    }
    final: dict[str, list[float]] = {}
    after: dict[str, list[float]] = {}
    diverged = 0
    for activation in progress.track(config.activations, description="Fig A.1 activations"):
        w1 = torch.randn(h, n, generator=generator, dtype=torch.float64) / math.sqrt(n)
        w2 = torch.randn(m, h, generator=generator, dtype=torch.float64) / math.sqrt(h)
        runs = len(config.learning_rates)
        result = gradient_descent.batched_gradient_descent(
            activation,
            w1.expand(runs, h, n),
            w2.expand(runs, m, h),
            target,
            lrs,
            config.steps,
            keep_every=config.every,
        )
        q = torch.stack(
            [
                gradient_descent.elementwise_q(activation, a, b)[0]
                for a, b in zip(result.incoming, result.outgoing, strict=True)
            ]
        )
        _, size = gradient_descent.elementwise_q(activation, result.incoming[0], result.outgoing[0])
        change = (q - q[0]) / size  # (checkpoints, runs): signed ΔQ̃ of App. A.4.2
        converged = gradient_descent.steps_to_threshold(result.losses, bar)
        final[activation], after[activation] = [], []
        for b, lr in enumerate(config.learning_rates):
            ok = bool(torch.isfinite(change[:, b]).all())
            diverged += not ok
            final[activation].append(float(change[-1, b].abs()) if ok else math.nan)
            after[activation].append(_late_share(result.checkpoints, change[:, b], converged[b]))
            for i, step in enumerate(result.checkpoints):
                append_row(
                    table, activation, lr, step, float(change[i, b]), float(result.losses[b, step])
                )
    metrics = {
        "final_abs_relative_change": final,
        "max_abs_relative_change": float(np.nanmax([np.abs(table["relative_change"])])),
        "largest_lr_largest_change": {
            a: bool(np.nanargmax(v) == int(np.argmax(config.learning_rates)))
            for a, v in final.items()
        },
        "change_ratio_across_lrs": {
            a: float(np.nanmax(v) / np.nanmin(v)) for a, v in final.items()
        },
        "share_after_convergence": after,
        "diverged_runs": diverged,
        "convergence_threshold": bar,
    }
    notes = [
        "ΔQ̃ = (Q(t) − Q(0)) / (|½‖U₀‖²| + |ΣF_σ(V₀)|) (App. A.4.2; signed, the library's "
        "ConservedTracker.relative_trace_change), Q of Eq. 2.17.",
        "share_after_convergence: the part of the final |ΔQ̃| accumulated after the loss first "
        f"fell below {config.threshold:g}·‖Y‖² (NaN if it never did).",
    ]
    return Result(metrics, {"drift": table}, notes)


def _late_share(checkpoints: list[int], change: Tensor, converged_at: float) -> float:
    """|ΔQ̃(T) − ΔQ̃(t_c)| / |ΔQ̃(T)|, t_c the first checkpoint at or after convergence."""
    later = [i for i, s in enumerate(checkpoints) if s >= converged_at]
    total = float(change[-1].abs())
    if math.isnan(converged_at) or not later or total == 0.0 or not math.isfinite(total):
        return math.nan
    return float((change[-1] - change[later[0]]).abs()) / total


def plot_q_drift(result: Result) -> dict[str, Any]:
    table = result.series["drift"]
    activations = list(dict.fromkeys(table["activation"]))
    lrs = list(dict.fromkeys(table["lr"]))
    figure, axes = plt.subplots(
        2, len(activations), figsize=(3.8 * len(activations), 6.4), squeeze=False
    )
    colours = plt.get_cmap("plasma")
    for j, activation in enumerate(activations):
        for i, lr in enumerate(lrs):
            rows = [
                (s, c, loss)
                for a, r, s, c, loss in zip(
                    table["activation"],
                    table["lr"],
                    table["step"],
                    table["relative_change"],
                    table["loss"],
                    strict=True,
                )
                if a == activation and r == lr
            ]
            colour = colours(i / max(1, len(lrs)))
            axes[0, j].plot(
                [r[0] for r in rows], [abs(r[1]) for r in rows], color=colour, label=f"lr = {lr:g}"
            )
            axes[1, j].plot(
                [r[0] for r in rows], [r[2] for r in rows], color=colour, label=f"lr = {lr:g}"
            )
        axes[0, j].set_title(activation)
        axes[0, j].set_yscale("symlog", linthresh=1e-8)
        axes[0, j].set_ylabel("|ΔQ̃|")
        axes[1, j].set_yscale("log")
        axes[1, j].set_ylabel("loss")
        axes[1, j].set_xlabel("GD step")
        for ax in axes[:, j]:
            ax.set_xscale("symlog", linthresh=10)  # the drift happens in the first steps
            ax.set_xlim(left=0)
        axes[0, j].legend(fontsize=7)
    figure.suptitle("Fig A.1: drift of the conserved Q under gradient descent", fontsize=10)
    figure.tight_layout()
    return {"drift.png": figure}


experiment(
    "q-drift",
    seed_ref="seed 001, Fig A.1; App. A.4",
    description=(
        "relative change ΔQ̃ of Eq. 2.17's Q and the loss under full-batch GD at lr 0.1, 0.01, "
        "0.001 (setup of Fig 2.4: Y 5×10, U 5×50, V 10×50, X = I, loss ‖Y − Uσ(Vᵀ)‖² without "
        "½ (loss=mean divides it by nm), Xavier init, the same init and number of steps for "
        "every lr; steps chosen here)"
    ),
    quick=QDriftConfig(),
    paper=QDriftConfig(steps=20000, every=20),
    claims=[
        Claim(
            "GD changes Q only a little compared with the terms it is a difference of",
            f"{gradient_descent.SOURCE}, Fig A.1, App. A.4.2",
            "|ΔQ̃| ≤ 0.1 in every run",
            lambda r: (
                f"max |ΔQ̃| = {r.metrics['max_abs_relative_change']:.2e} "
                f"({r.metrics['diverged_runs']} diverged runs)",
                r.metrics["max_abs_relative_change"] <= 0.1 and r.metrics["diverged_runs"] == 0,
            ),
        ),
        Claim(
            "the largest learning rate gives the largest change of Q",
            f"{gradient_descent.SOURCE}, Fig A.1",
            "final |ΔQ̃| largest at lr 0.1, for every activation",
            lambda r: (
                r.metrics["largest_lr_largest_change"],
                all(r.metrics["largest_lr_largest_change"].values()),
            ),
        ),
        Claim(
            "... but the changes at the three learning rates are of the same order of magnitude",
            f"{gradient_descent.SOURCE}, Fig A.1",
            "max / min final |ΔQ̃| over the lrs < 10, for every activation",
            lambda r: (
                {k: round(v, 1) for k, v in r.metrics["change_ratio_across_lrs"].items()},
                all(v < 10 for v in r.metrics["change_ratio_across_lrs"].values()),
            ),
        ),
        Claim(
            "Q stops changing once the loss has converged",
            f"{gradient_descent.SOURCE}, Fig A.1",
            "≤ 5% of the final |ΔQ̃| accrues after the loss reaches 1e-3·‖Y‖² (runs that do)",
            lambda r: _late_check(r.metrics["share_after_convergence"]),
        ),
    ],
    plot=plot_q_drift,
)(single_threaded(run_q_drift))


def _late_check(shares: dict[str, list[float]]) -> tuple[str, bool]:
    values = [v for vs in shares.values() for v in vs if math.isfinite(v)]
    if not values:
        return "no run converged", False
    return f"max share {max(values):.3f} over {len(values)} converged runs", max(values) <= 0.05
