"""``q-distribution`` (seed 001, Figs 2.2, 2.3).

The conserved Q at "Xavier" initialisation is concentrated around E[Q] = (m − h)/2
(**erratum**: Eq. 2.16 prints m − h).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import matplotlib.pyplot as plt
import numpy as np

from paramsym.conserved import (
    sample_xavier_q,
    xavier_q_statistics,
)
from paramsym.experiments.conserved.gradient_descent import SOURCE
from paramsym.experiments.registry import Claim, Progress, Result, experiment
from paramsym.experiments.threads import single_threaded

# == q-distribution (Figs 2.2, 2.3) ==============================================================


@dataclass(frozen=True)
class QDistributionConfig:
    """Settings of ``q-distribution``.

    Attributes:
        seed: randomness of the draws.
        shapes: (m, h, n) of the linear nets of Fig 2.2 (the paper does not list its tuples).
        samples: parameter sets per histogram (the paper: 1000).
        activations: the nonlinearities of Fig 2.3 (not listed in the paper).
        nonlinear_size: m = h = n of Fig 2.3 (the paper: 100).
    """

    seed: int = 0
    shapes: tuple[tuple[int, int, int], ...] = ((10, 50, 20), (100, 100, 100), (50, 10, 30))
    samples: int = 1000
    activations: tuple[str, ...] = ("identity", "relu", "sigmoid", "tanh")
    nonlinear_size: int = 100


def _q_sample_rows(
    label: str, m: int, h: int, n: int, activation: str, config: QDistributionConfig, seed: int
) -> tuple[dict[str, Any], list[float]]:
    """Monte-Carlo Q at Xavier init (N(0, 1/h), N(0, 1/n)) against the closed form."""
    draws = sample_xavier_q(m, h, n, config.samples, activation, generator=seed)
    stats = xavier_q_statistics(m, h, n, activation)
    f_mean = stats.mean - 0.5 * m  # E[½‖U‖²] = m/2 at u_std² = 1/h
    scale = 0.5 * m + abs(f_mean)  # the two terms Q is a difference of (App. A.4.2)
    row = {
        "label": label,
        "activation": activation,
        "m": m,
        "h": h,
        "n": n,
        "mean": float(draws.mean()),
        "std": float(draws.std()),
        "mean_closed_form": stats.mean,
        "std_closed_form": stats.std,
        "paper_eq_2_16": float(m - h) if activation == "identity" else math.nan,
        "relative_spread": float(draws.std()) / scale,
    }
    return row, draws.tolist()


def run_q_distribution(config: QDistributionConfig, progress: Progress) -> Result:
    rows: list[dict[str, Any]] = []
    draws: dict[str, list[Any]] = {"panel": [], "label": [], "q": []}
    cases = [(f"m={m}, h={h}, n={n}", m, h, n, "identity", "linear") for m, h, n in config.shapes]
    size = config.nonlinear_size
    cases += [(a, size, size, size, a, "nonlinear") for a in config.activations]
    for index, (label, m, h, n, activation, panel) in enumerate(
        progress.track(cases, description="Q histograms")
    ):
        row, values = _q_sample_rows(label, m, h, n, activation, config, config.seed * 997 + index)
        rows.append({"panel": panel, **row})
        draws["panel"] += [panel] * len(values)
        draws["label"] += [label] * len(values)
        draws["q"] += values
    table = {key: [r[key] for r in rows] for key in rows[0]}
    linear = [r for r in rows if r["panel"] == "linear"]
    nonlinear = [r for r in rows if r["panel"] == "nonlinear"]
    standard_errors = [
        abs(r["mean"] - (r["m"] - r["h"]) / 2) / (r["std"] / math.sqrt(config.samples))
        for r in linear
    ]
    metrics = {
        "samples": config.samples,
        "linear_means": [r["mean"] for r in linear],
        "linear_predicted_means": [(r["m"] - r["h"]) / 2 for r in linear],
        "linear_paper_means": [r["m"] - r["h"] for r in linear],
        "linear_mean_error_in_standard_errors": max(standard_errors),
        "linear_stds": [r["std"] for r in linear],
        "linear_max_relative_spread": max(r["relative_spread"] for r in linear),
        "nonlinear_relative_spread": {r["activation"]: r["relative_spread"] for r in nonlinear},
        "nonlinear_stds": {r["activation"]: r["std"] for r in nonlinear},
        "std_vs_closed_form_max_ratio_error": max(
            abs(r["std"] / r["std_closed_form"] - 1) for r in rows
        ),
    }
    notes = [
        "Xavier here is the dissertation's Eq. 2.15, N(0, 1/fan_in) (LeCun normal).",
        "relative spread = std(Q) / (E½‖U‖² + |EΣF_σ(V)|), the App. A.4.2 normaliser: how wide "
        "the band of Q is compared with the terms Q is a difference of.",
    ]
    return Result(metrics, {"summary": table, "draws": draws}, notes)


def plot_q_distribution(result: Result) -> dict[str, Any]:
    draws, summary = result.series["draws"], result.series["summary"]
    figures: dict[str, Any] = {}
    for panel, name, title in (
        ("linear", "q_linear.png", "Fig 2.2: Q = ½Tr[UᵀU − VVᵀ] at Xavier init, linear nets"),
        ("nonlinear", "q_nonlinear.png", "Fig 2.3: Eq. 2.17's Q at Xavier init, m = h = n = 100"),
    ):
        labels = [
            lab for p, lab in zip(summary["panel"], summary["label"], strict=True) if p == panel
        ]
        figure, axes = plt.subplots(1, len(labels), figsize=(3.6 * len(labels), 3.4))
        for ax, label in zip(np.atleast_1d(axes), labels, strict=True):
            values = [
                q
                for p, lab, q in zip(draws["panel"], draws["label"], draws["q"], strict=True)
                if p == panel and lab == label
            ]
            ax.hist(values, bins=40, color="tab:blue", alpha=0.8)
            i = summary["label"].index(label)
            ax.axvline(summary["mean_closed_form"][i], color="k", ls="--", lw=1, label="E[Q]")
            if panel == "linear":
                ax.axvline(
                    summary["paper_eq_2_16"][i], color="r", ls=":", lw=1.5, label="m − h (Eq. 2.16)"
                )
            ax.set_title(label, fontsize=9)
            ax.set_xlabel("Q")
            ax.set_ylabel("count")
            ax.legend(fontsize=7)
        figure.suptitle(title, fontsize=10)
        figure.tight_layout()
        figures[name] = figure
    return figures


experiment(
    "q-distribution",
    seed_ref="seed 001, Figs 2.2-2.3; Eqs 2.14-2.17",
    description=(
        "histograms of the conserved Q at Xavier init (N(0,1/fan_in), Eq. 2.15) for linear nets "
        "(several (m,h,n); the paper's tuples are not given, chosen here) and for elementwise "
        "nonlinear nets with X = I (Eq. 2.17), against the closed-form mean and variance"
    ),
    quick=QDistributionConfig(samples=500),
    paper=QDistributionConfig(samples=1000),
    claims=[
        Claim(
            "the histograms of Q at Xavier init are centred at Eq. 2.16's E[Q]",
            f"{SOURCE}, Fig 2.2, Eq. 2.16 (erratum: (m − h)/2 with Eq. 2.14's ½)",
            "centre = (m − h)/2 within 4 standard errors (the printed m − h is off by (m − h)/2)",
            lambda r: (
                f"means {[round(v, 2) for v in r.metrics['linear_means']]} vs (m−h)/2 = "
                f"{r.metrics['linear_predicted_means']} (printed m−h: "
                f"{r.metrics['linear_paper_means']}); worst "
                f"{r.metrics['linear_mean_error_in_standard_errors']:.2f} s.e.",
                r.metrics["linear_mean_error_in_standard_errors"] <= 4.0,
            ),
        ),
        Claim(
            "Xavier init puts Q in a narrow band (linear nets)",
            f"{SOURCE}, §2.6, Fig 2.2",
            "std(Q) small against the terms Q is a difference of: relative spread < 0.1",
            lambda r: (
                f"stds {[round(v, 2) for v in r.metrics['linear_stds']]}; relative spread ≤ "
                f"{r.metrics['linear_max_relative_spread']:.3f}",
                r.metrics["linear_max_relative_spread"] < 0.1,
            ),
        ),
        Claim(
            "with elementwise nonlinearities Q is also concentrated in a small range",
            f"{SOURCE}, Fig 2.3 (m = h = n = 100)",
            "relative spread < 0.1 for every activation",
            lambda r: (
                {k: round(v, 3) for k, v in r.metrics["nonlinear_relative_spread"].items()},
                max(r.metrics["nonlinear_relative_spread"].values()) < 0.1,
            ),
        ),
    ],
    plot=plot_q_distribution,
)(single_threaded(run_q_distribution))
