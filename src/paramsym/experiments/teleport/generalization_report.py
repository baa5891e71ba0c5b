"""Claims, notes and figures of ``teleport-generalization`` (seed 001, §5.3, Figs 5.7, 5.8).

The arms, the claims' checks on the metrics that
:func:`paramsym.experiments.teleport.generalization.summarise` writes, and the figure: one per
optimizer, test (solid) and training (dashed) loss against the epoch with the φ arms left and
the ψ arms right, as the dissertation draws them, and below each the paired difference of the
test loss against no teleport.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import matplotlib.pyplot as plt
import numpy as np

from paramsym.core.tables import Table, table_rows
from paramsym.experiments.registry import Claim, Result
from paramsym.experiments.teleport.training import LABELS

ARMS = ("none", "phi_up", "phi_down", "psi_up", "psi_down")
"""No teleport, then φ raised / lowered, ψ raised / lowered."""

ARM_LABELS = {
    "none": "no teleport",
    "phi_up": "φ ↑",
    "phi_down": "φ ↓",
    "psi_up": "ψ ↑",
    "psi_down": "ψ ↓",
}
COLOURS = {
    "none": "black",
    "phi_up": "tab:red",
    "phi_down": "tab:blue",
    "psi_up": "tab:red",
    "psi_down": "tab:blue",
}

# -- claims ---------------------------------------------------------------------------------------


def _fmt(m: dict[str, Any], o: str, arm: str) -> str:
    k = f"{o}_{arm}"
    low, high = m[f"{k}_ci"]
    return (
        f"{LABELS[o]}: Δ = {m[f'{k}_delta']:+.4f} ± {m[f'{k}_delta_std']:.4f} "
        f"(95% CI [{low:+.4f}, {high:+.4f}], p = {m[f'{k}_p']:.2g}, "
        f"{m[f'{k}_runs_lower']}/{m[f'{k}_runs']} runs lower; no teleport "
        f"{m[f'{o}_none_test']:.4f})"
    )


def effect_check(arm: str, sign: int) -> Callable[[Result], tuple[str, bool]]:
    """A claim check: Δ of ``arm`` has the sign of ``sign`` with paired p < 0.05 for every
    optimizer; ``sign = 0``: no detectable effect (p ≥ 0.05 for every optimizer)."""

    def check(result: Result) -> tuple[str, bool]:
        m = result.metrics
        parts, holds = [], True
        for o in m["optimizers"]:
            parts.append(_fmt(m, o, arm))
            k = f"{o}_{arm}"
            if sign == 0:
                holds &= m[f"{k}_p"] >= 0.05
            else:
                holds &= sign * m[f"{k}_delta"] > 0 and m[f"{k}_p"] < 0.05
        return "; ".join(parts), holds

    return check


def objective_check(result: Result) -> tuple[str, bool]:
    """Every teleport arm moved its own objective the asked way on average over its teleports
    (after/before on the teleport batch, with that teleport's directions or curves), none to
    the wrong side, the batch loss within the guard. The probe ratio (a fixed batch, fixed
    fresh directions and curves, before and after the whole teleport) is reported, not
    checked."""
    m = result.metrics
    parts, holds = [], True
    for o in m["optimizers"]:
        items, moved, total, drift = [], 0, 0, 0.0
        for arm in ARMS[1:]:
            k = f"{o}_{arm}"
            ratio, up = m[f"{k}_objective_ratio"], arm.endswith("up")
            holds &= (ratio > 1 if up else ratio < 1) and m[f"{k}_wrong_way"] == 0
            holds &= m[f"{k}_batch_drift"] <= m["max_loss_drift"] * (1 + 1e-6)
            moved, total = moved + m[f"{k}_moved"], total + m[f"{k}_teleports"]
            drift = max(drift, m[f"{k}_batch_drift"])
            items.append(f"{ARM_LABELS[arm]} ×{ratio:.3f} (probe ×{m[f'{k}_probe_ratio']:.3f})")
        parts.append(
            f"{LABELS[o]}: " + ", ".join(items) + f"; {moved}/{total} teleports moved it, batch "
            f"|ΔL| ≤ {100 * drift:.2f}%"
        )
    return "; ".join(parts), holds


def jump_notes(metrics: dict[str, Any]) -> list[str]:
    """One line per optimizer: each arm's mean relative change of the teleport-batch loss and
    mean change of the whole training and test losses at the teleport (the warm restart)."""
    lines = []
    for o in metrics["optimizers"]:
        items = [
            f"{ARM_LABELS[arm]} batch {100 * metrics[f'{o}_{arm}_batch_loss_change']:+.2f}%, "
            f"train {metrics[f'{o}_{arm}_train_jump']:+.4f}, test "
            f"{metrics[f'{o}_{arm}_test_jump']:+.4f}"
            for arm in ARMS[1:]
        ]
        lines.append(f"{LABELS[o]}, loss change at the teleport: " + "; ".join(items))
    return lines


SOURCE = "seed 001, §5.3, Figs 5.7, 5.8"
CLAIMS = [
    Claim(
        '"Teleporting to flatter points slightly improves the validation loss"',
        SOURCE,
        "Δ(φ ↓) < 0 with paired p < 0.05 for every optimizer (Δ per run: mean test loss over "
        "the last epochs, teleport arm − no teleport)",
        effect_check("phi_down", -1),
    ),
    Claim(
        '"teleporting to sharper points has no effect" (a "warm restart")',
        SOURCE,
        "Δ(φ ↑) not distinguishable from 0: paired p ≥ 0.05 for every optimizer",
        effect_check("phi_up", 0),
    ),
    Claim(
        '"Teleporting to points with larger curvatures helps find a minimum with lower '
        'validation loss"',
        SOURCE,
        "Δ(ψ ↑) < 0 with paired p < 0.05 for every optimizer",
        effect_check("psi_up", -1),
    ),
    Claim(
        '"teleporting to points with smaller curvatures has the opposite effect"',
        SOURCE,
        "Δ(ψ ↓) > 0 with paired p < 0.05 for every optimizer",
        effect_check("psi_down", 1),
    ),
    Claim(
        "the teleports change φ or ψ as asked (Algorithm 2), the batch loss within the guard",
        "seed 001, §5.3, Algorithm 2; notes 001b §2.5",
        "mean after/before of the objective on the teleport batches > 1 (↑) or < 1 (↓), none "
        "on the wrong side, |ΔL| ≤ max_loss_drift on every batch; probe ratio (fixed batch, "
        "fresh directions and curves) reported",
        objective_check,
    ),
]

# -- figure ---------------------------------------------------------------------------------------


def per_run(curves: Table, optimizer: str, arm: str, column: str) -> np.ndarray:
    """``column`` of ``arm`` as an array (runs, epochs)."""
    rows = table_rows(curves, optimizer=optimizer, arm=arm)
    runs = sorted(set(rows["run"]))
    return np.array(
        [[v for r, v in zip(rows["run"], rows[column], strict=True) if r == run] for run in runs]
    )


def plot_generalization(result: Result) -> dict[str, Any]:
    """Figs 5.7 / 5.8, one figure per optimizer. Top: test (solid) and training (dashed) loss
    against the epoch, means over runs, φ arms left and ψ arms right. Bottom: Δ test loss
    against no teleport per epoch (mean ± std over runs), the epochs the claims compare
    shaded. The x axis starts halfway to the teleport (dotted)."""
    curves, m = result.series["curves"], result.metrics
    last, teleport = m["epochs"], m["teleport_epoch"]
    xs = np.arange(last + 1)[teleport // 2 :]
    figures = {}
    for o in m["optimizers"]:
        figure, axes = plt.subplots(2, 2, figsize=(11, 7), sharex=True)
        panels = (("sharpness φ", ("phi_up", "phi_down")), ("curvature ψ", ("psi_up", "psi_down")))
        base = per_run(curves, o, "none", "test_loss")
        for col, (quantity, arms) in enumerate(panels):
            top, bottom = axes[0, col], axes[1, col]
            for arm in ("none", *arms):
                style = {"color": COLOURS[arm], "lw": 1.0 if arm == "none" else 1.6}
                style["zorder"] = 3 if arm == "none" else 2
                for column, dash, what in (
                    ("test_loss", "-", "test"),
                    ("train_loss", "--", "train"),
                ):
                    values = per_run(curves, o, arm, column).mean(axis=0)[xs]
                    top.plot(xs, values, ls=dash, label=f"{ARM_LABELS[arm]} {what}", **style)
                if arm != "none":
                    delta = (per_run(curves, o, arm, "test_loss") - base)[:, xs]
                    mean, std = delta.mean(axis=0), delta.std(axis=0)
                    bottom.plot(xs, mean, color=COLOURS[arm], label=ARM_LABELS[arm])
                    bottom.fill_between(xs, mean - std, mean + std, color=COLOURS[arm], alpha=0.15)
            for ax in (top, bottom):
                ax.axvline(teleport, color="k", ls=":", lw=1)
            bottom.axhline(0.0, color="tab:gray", lw=1)
            bottom.axvspan(last - m["final_epochs"] + 0.5, last + 0.5, color="k", alpha=0.06)
            top.set(title=f"{LABELS[o]}: teleport to change {quantity}", ylabel="loss")
            bottom.set(xlabel="epoch", ylabel="Δ test loss vs no teleport")
            top.legend(fontsize=7, ncol=3)
            bottom.legend(fontsize=8)
        figure.suptitle(
            f"{m['dataset']}, mean over {m['runs']} runs; dotted: teleport; shaded: epochs compared"
        )
        figure.tight_layout()
        figures[f"teleport_generalization_{o}.png"] = figure
    return figures
