"""``teleport-alignment`` (seed 000, §5, Prop 5.1, notes 000 Algo 2).

Over random initialisations of the same architecture, one-shot teleport along the genuine
neuron-rescaling symmetry (Eq. 5) to increase ‖∇L‖², with bounded steps (the paper needs
‖Γ‖ bounded). Checks: the loss alignment A (Eq. 28) rises in exactly the ratio ‖∇L‖² does
(f = ∂L/∂F is invariant on the orbit, Prop 5.1); teleporting by A and by ‖∇L‖² reach the
same point; and the teleported twin (larger A) halves its training loss sooner than the
untouched initialisation (seed 000 Fig 2's measurement, paired).

The choices where the paper is silent are listed in :mod:`paramsym.experiments.teleport_ntk`.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import scipy.stats
import torch
from torch import Tensor, nn

import paramsym as ps
from paramsym.core.params import functional_call
from paramsym.experiments.ntk_alignment import AlignmentSpeedConfig, alignment_data, halving_time
from paramsym.experiments.registry import Claim, Progress, Result, experiment
from paramsym.experiments.teleport_ntk.common import ntk_mlp, parameter_distance
from paramsym.experiments.threads import torch_threads
from paramsym.teleportation import TeleportResult

# -- teleport-alignment (Prop 5.1, Algo 2) -------------------------------------------------------


@dataclass(frozen=True)
class TeleportAlignmentConfig:
    """Settings of ``teleport-alignment`` (seed 000 §5, Prop 5.1; notes 000 Algo 2).

    Attributes:
        seed: base seed; initialisation r uses ``seed·100003 + r`` (the same networks as
            ``ntk-alignment-speed``) and its minibatch order the same seed.
        dataset, train_samples, alignment_samples, width, learning_rate, momentum,
            batch_size, epochs, check_every, data_dir: as in ``ntk-alignment-speed``; the
            teleport and A use the first ``alignment_samples`` training points.
        runs: random initialisations, each with a teleported twin.
        teleport_steps: ascent steps on the log-scales of every hidden neuron (Eq. 5).
        max_step_norm: ‖ξ‖ of every step (all hidden neurons together), so the log-scales
            u satisfy ‖u‖ ≤ teleport_steps·max_step_norm and ‖Γ‖ ≤ :func:`distortion_bound`,
            whatever the width.
        teleport_lr: the ascent's lr, large enough that every step is cut to
            the step norm (normalised ascent; the fraction cut is reported).
        threads: torch intra-op threads during the run (``None``: leave as is).
    """

    seed: int = 0
    dataset: str = "digits"
    train_samples: int = 5000
    alignment_samples: int = 1000
    runs: int = 20
    width: int = 64
    teleport_steps: int = 10
    max_step_norm: float = 0.1
    teleport_lr: float = 1e4
    learning_rate: float = 1.0
    momentum: float = 0.9
    batch_size: int = 128
    epochs: int = 10
    check_every: int = 1
    threads: int | None = 1
    data_dir: str | None = None


def _speed_config(config: TeleportAlignmentConfig) -> AlignmentSpeedConfig:
    """The ``ntk-alignment-speed`` settings whose data preparation and loss-halving clock
    this experiment reuses."""
    return AlignmentSpeedConfig(
        seed=config.seed,
        dataset=config.dataset,
        train_samples=config.train_samples,
        alignment_samples=config.alignment_samples,
        runs=config.runs,
        width=config.width,
        learning_rate=config.learning_rate,
        momentum=config.momentum,
        batch_size=config.batch_size,
        epochs=config.epochs,
        check_every=config.check_every,
        data_dir=config.data_dir,
    )


def rescaling_symmetries(model: nn.Module) -> list[ps.Symmetry]:
    """The neuron-rescaling actions of Eq. 5 that ``ps.symmetries`` finds (one per hidden
    layer); other families (permutations, softmax translation) are left out."""
    return [s for s in ps.symmetries(model) if s.name.startswith("rescaling")]


def group_distortion(before: dict[str, Tensor], after: dict[str, Tensor]) -> float:
    """max over nonzero weight entries of max(|G|, 1/|G|) with G = θ_after/θ_before: for
    the linear rescaling g = G (diagonal), this bounds ‖Γ‖ = ‖G⁻ᵀ‖ and ‖Γ⁻¹‖ (Eq. 15)."""
    ratios = torch.cat([(after[k] / before[k])[before[k] != 0].abs() for k in before])
    return float(torch.maximum(ratios, 1.0 / ratios).max())


def distortion_bound(steps: int, step_norm: float) -> float:
    """Bound on :func:`group_distortion` after ``steps`` rescaling steps of ‖ξ‖ ≤ ``step_norm``.

    With u = log c over all hidden neurons, ‖u‖ ≤ steps·step_norm (triangle inequality), and
    the entries of G are c_i (first layer), c_i/c_j (between hidden layers) and 1/c_j (last
    layer), so |log G| ≤ |u_i| + |u_j| ≤ √2‖u‖.
    """
    return math.exp(math.sqrt(2.0) * steps * step_norm)


@dataclass
class _Twin:
    alignment_before: float
    alignment_after: float
    grad_sq_before: float
    grad_sq_after: float
    ratio_deviation: float
    output_change: float
    endpoint_distance: float
    distortion: float
    clipped: float
    halving_untouched: float
    halving_teleported: float


def _teleport(
    model: nn.Module, batch: tuple[Tensor, Tensor], objective: str, config: TeleportAlignmentConfig
) -> TeleportResult:
    return ps.teleport(
        model,
        nn.CrossEntropyLoss(),
        batch,
        rescaling_symmetries(model),
        objective=objective,
        steps=config.teleport_steps,
        lr=config.teleport_lr,
        max_step_norm=config.max_step_norm,
        update_model=False,
    )


def teleport_twin(
    model: nn.Module, batch: tuple[Tensor, Tensor], config: TeleportAlignmentConfig
) -> tuple[nn.Module, dict[str, float]]:
    """Teleport a float64 copy of ``model`` along Eq. 5 by ‖∇L‖² and, separately, by A on
    ``batch``; return the ‖∇L‖²-teleported twin (float32) and the Prop 5.1 measurements."""
    exact = copy.deepcopy(model).double()
    batch64 = (batch[0].double(), batch[1])
    loss_fn = nn.CrossEntropyLoss()
    by_gradient = _teleport(exact, batch64, "grad_norm", config)
    by_alignment = _teleport(exact, batch64, "loss_alignment", config)
    before = {k: p.detach() for k, p in exact.named_parameters()}
    a_before = ps.loss_alignment(exact, loss_fn, batch64)
    a_after = ps.loss_alignment(exact, loss_fn, batch64, params=by_gradient.params)
    g_before, g_after = by_gradient.grad_norm_before**2, by_gradient.grad_norm_after**2
    with torch.no_grad():
        out_before = functional_call(exact, before, batch64[0])
        out_after = functional_call(exact, by_gradient.params, batch64[0])
    twin = copy.deepcopy(exact)
    with torch.no_grad():
        for name, p in twin.named_parameters():
            p.copy_(by_gradient.params[name])
    cut = [abs(h.step_norm - config.max_step_norm) <= 1e-9 for h in by_gradient.history]
    return twin.float(), {
        "alignment_before": a_before,
        "alignment_after": a_after,
        "grad_sq_before": g_before,
        "grad_sq_after": g_after,
        "ratio_deviation": abs((a_after / a_before) / (g_after / g_before) - 1.0),
        "output_change": float((out_after - out_before).abs().max() / out_before.abs().max()),
        "endpoint_distance": parameter_distance(by_alignment.params, by_gradient.params),
        "distortion": group_distortion(before, by_gradient.params),
        "clipped": sum(cut) / len(cut) if cut else math.nan,
    }


def run_teleport_alignment(config: TeleportAlignmentConfig, progress: Progress) -> Result:
    """Prop 5.1 and Algo 2 over ``config.runs`` initialisations, each with a teleported twin."""
    speed = _speed_config(config)
    x, y = alignment_data(speed)
    classes = int(y.max()) + 1
    batch = (x[: config.alignment_samples], y[: config.alignment_samples])
    twins = []
    with torch_threads(config.threads):
        for run in progress.track(range(config.runs), description="initialisations"):
            seed = config.seed * 100003 + run
            model = ntk_mlp(x.shape[1], config.width, classes, seed)
            teleported, measured = teleport_twin(model, batch, config)
            halving = [
                halving_time(m, x, y, speed, torch.Generator().manual_seed(seed))
                for m in (model, teleported)
            ]
            twins.append(
                _Twin(**measured, halving_untouched=halving[0], halving_teleported=halving[1])
            )
    return _summarise_teleport(twins, config)


def _paired_statistics(untouched: np.ndarray, teleported: np.ndarray) -> dict[str, Any]:
    """Paired comparison of loss-halving epochs (pairs where both halved): fractions of pairs
    where the teleported twin is strictly faster, tied (the same checked step) and slower, the
    mean difference, and the one-sided Wilcoxon signed-rank p-value for 'teleported sooner'
    (ties dropped, as the test does)."""
    both = np.isfinite(untouched) & np.isfinite(teleported)
    difference = teleported[both] - untouched[both]
    p_value = math.nan
    if np.any(difference != 0):
        p_value = float(scipy.stats.wilcoxon(difference, alternative="less").pvalue)
    return {
        "pairs": int(both.sum()),
        "fraction_faster": float(np.mean(difference < 0)) if both.any() else math.nan,
        "fraction_ties": float(np.mean(difference == 0)) if both.any() else math.nan,
        "fraction_slower": float(np.mean(difference > 0)) if both.any() else math.nan,
        "mean_difference": float(difference.mean()) if both.any() else math.nan,
        "mean_relative_speedup": float(np.mean(1 - teleported[both] / untouched[both]))
        if both.any()
        else math.nan,
        "wilcoxon_p": p_value,
    }


def _pearson(a: np.ndarray, h: np.ndarray) -> tuple[float, float]:
    keep = np.isfinite(h)
    if keep.sum() < 3 or np.ptp(h[keep]) == 0:
        return math.nan, math.nan
    r, p = scipy.stats.pearsonr(a[keep], h[keep])
    return float(r), float(p)


def _summarise_teleport(twins: list[_Twin], config: TeleportAlignmentConfig) -> Result:
    columns = {
        f.name: np.array([getattr(t, f.name) for t in twins], dtype=float)
        for f in dataclasses.fields(_Twin)
    }
    gain = columns["alignment_after"] / columns["alignment_before"]
    pooled_a = np.concatenate([columns["alignment_before"], columns["alignment_after"]])
    pooled_h = np.concatenate([columns["halving_untouched"], columns["halving_teleported"]])
    r_init, p_init = _pearson(columns["alignment_before"], columns["halving_untouched"])
    r_pooled, p_pooled = _pearson(pooled_a, pooled_h)
    metrics: dict[str, Any] = {
        "runs": config.runs,
        "max_ratio_deviation": float(columns["ratio_deviation"].max()),
        "max_output_change": float(columns["output_change"].max()),
        "alignment_gain_min": float(gain.min()),
        "alignment_gain_mean": float(gain.mean()),
        "alignment_gain_max": float(gain.max()),
        "max_endpoint_distance": float(columns["endpoint_distance"].max()),
        "max_distortion": float(columns["distortion"].max()),
        "distortion_bound": distortion_bound(config.teleport_steps, config.max_step_norm),
        "fraction_steps_cut": float(np.nanmean(columns["clipped"])),
        "pearson_r_init": r_init,
        "p_value_init": p_init,
        "pearson_r_pooled": r_pooled,
        "p_value_pooled": p_pooled,
        **_paired_statistics(columns["halving_untouched"], columns["halving_teleported"]),
    }
    series = {
        "runs": {"run": list(range(len(twins))), **{k: v.tolist() for k, v in columns.items()}}
    }
    notes = [
        f"teleport: {config.teleport_steps} normalised ascent steps of ‖ξ‖ = "
        f"{config.max_step_norm:g} on the log-scales of all {2 * config.width} hidden neurons "
        f"(Eq. 5), on the first {config.alignment_samples} training points, in float64; "
        "twins trained in float32 on the same minibatches",
        "cross-entropy loss, standardised features, loss-halving time resolved every "
        f"{config.check_every} step(s) (the data preparation and clock of ntk-alignment-speed)",
    ]
    missing = int(np.sum(~np.isfinite(pooled_h)))
    if missing:
        notes.append(f"{missing} trainings did not halve their loss within {config.epochs} epochs")
    return Result(metrics, series, notes)


def _plot_speed(result: Result) -> Any:
    """Seed 000 Fig 2's axes with the teleported twins: A at t = 0 vs loss-halving epoch,
    twins joined, least-squares line over all points."""
    runs = result.series["runs"]
    a0, a1 = np.array(runs["alignment_before"]), np.array(runs["alignment_after"])
    h0 = np.array(runs["halving_untouched"], dtype=float)
    h1 = np.array(runs["halving_teleported"], dtype=float)
    figure, axis = plt.subplots(figsize=(6.4, 4.6))
    for x0, x1, y0, y1 in zip(a0, a1, h0, h1, strict=True):
        axis.plot([x0, x1], [y0, y1], color="grey", linewidth=0.6, alpha=0.6)
    axis.scatter(a0, h0, s=16, color="tab:blue", label="initialisation")
    axis.scatter(a1, h1, s=16, color="tab:orange", label="teleported twin")
    a, h = np.concatenate([a0, a1]), np.concatenate([h0, h1])
    keep = np.isfinite(h)
    if keep.sum() >= 2 and np.ptp(a[keep]) > 0:
        slope, intercept = np.polyfit(a[keep], h[keep], 1)
        line = np.linspace(a[keep].min(), a[keep].max(), 2)
        axis.plot(line, slope * line + intercept, "k--", linewidth=1, label="least squares")
    axis.set_xlabel("modified alignment A at t = 0")
    axis.set_ylabel("epoch at which the training loss halves")
    axis.set_title(
        f"teleport raises A and speeds up training (r = {result.metrics['pearson_r_pooled']:.2f})"
    )
    axis.legend()
    figure.tight_layout()
    return figure


def _plot_ratios(result: Result) -> Any:
    """Prop 5.1: A_after/A_before against ‖∇L‖²_after/‖∇L‖²_before, on the diagonal."""
    runs = result.series["runs"]
    ratio_a = np.array(runs["alignment_after"]) / np.array(runs["alignment_before"])
    ratio_g = np.array(runs["grad_sq_after"]) / np.array(runs["grad_sq_before"])
    figure, axis = plt.subplots(figsize=(5.2, 4.6))
    axis.scatter(ratio_g, ratio_a, s=16, color="tab:purple")
    bounds = [min(ratio_g.min(), ratio_a.min()), max(ratio_g.max(), ratio_a.max())]
    axis.plot(bounds, bounds, "k--", linewidth=1, label="A ratio = ‖∇L‖² ratio")
    axis.set_xlabel("‖∇L‖² after / before teleport")
    axis.set_ylabel("A after / before teleport")
    axis.set_title(f"Prop 5.1 (max deviation {result.metrics['max_ratio_deviation']:.1e})")
    axis.legend()
    figure.tight_layout()
    return figure


def plot_teleport_alignment(result: Result) -> dict[str, Any]:
    return {"teleport_speed.png": _plot_speed(result), "prop51_ratio.png": _plot_ratios(result)}


def _ratio_identity(result: Result) -> tuple[str, bool]:
    m = result.metrics
    measured = (
        f"largest relative deviation of the A ratio from the ‖∇L‖² ratio "
        f"{m['max_ratio_deviation']:.1e} over {m['runs']} "
        f"runs; A gain {m['alignment_gain_min']:.3f}–{m['alignment_gain_max']:.3f}; outputs "
        f"changed ≤ {m['max_output_change']:.1e} (relative); max distortion "
        f"{m['max_distortion']:.2f} ≤ {m['distortion_bound']:.2f}"
    )
    holds = (
        m["max_ratio_deviation"] < 1e-9
        and m["alignment_gain_min"] > 1
        and m["max_distortion"] <= m["distortion_bound"] * (1 + 1e-9)
    )
    return measured, holds


def _same_argmax(result: Result) -> tuple[str, bool]:
    m = result.metrics
    measured = (
        f"max ‖θ_A − θ_‖∇L‖²‖ / ‖θ‖ = {m['max_endpoint_distance']:.1e} "
        f"({m['fraction_steps_cut']:.0%} of steps cut to the step bound)"
    )
    return measured, m["max_endpoint_distance"] < 1e-8


def _alignment_predicts_speed(result: Result) -> tuple[str, bool]:
    m = result.metrics
    measured = (
        f"r = {m['pearson_r_pooled']:.3f} (p = {m['p_value_pooled']:.1e}) over initialisations "
        f"and twins; r = {m['pearson_r_init']:.3f} (p = {m['p_value_init']:.1e}) over "
        "initialisations only"
    )
    return measured, m["pearson_r_pooled"] < 0 and m["p_value_pooled"] < 0.05


def _teleported_faster(result: Result) -> tuple[str, bool]:
    m = result.metrics
    measured = (
        f"of {m['pairs']} pairs the teleported twin is faster in {m['fraction_faster']:.0%}, "
        f"tied in {m['fraction_ties']:.0%}, slower in {m['fraction_slower']:.0%}; mean "
        f"difference {m['mean_difference']:+.3f} epochs ({m['mean_relative_speedup']:.1%} "
        f"sooner); one-sided Wilcoxon p = {m['wilcoxon_p']:.1e}"
    )
    holds = m["fraction_faster"] > m["fraction_slower"] and m["wilcoxon_p"] < 0.05
    return measured, holds


experiment(
    "teleport-alignment",
    seed_ref="seed 000, §5, Prop 5.1 (Eqs. 25, 28-30), Eq. 5; Fig 2's measurement",
    description=(
        "one-shot teleport of NTK-parameterised 2-hidden-layer ReLU MLPs (no biases) along "
        "the neuron-rescaling symmetry (Eq. 5), 10 normalised ascent steps of ‖ξ‖ = 0.1 on "
        "the neurons' log-scales (‖Γ‖ ≤ exp(√2) at any width): A and ‖∇L‖² rise in the same "
        "ratio (Prop 5.1), ascent on A and on ‖∇L‖² reach the same point, and the teleported twins "
        "halve the training loss sooner (SGD lr 1, momentum 0.9, batch 128). Unstated, chosen "
        "here: cross-entropy, standardised features, teleport on the first 1000 training "
        "points in float64"
    ),
    data="digits (quick); Fashion-MNIST IDX files in --data-dir (paper)",
    quick=TeleportAlignmentConfig(),
    paper=TeleportAlignmentConfig(
        dataset="fashion_mnist", runs=100, width=1024, epochs=100, threads=None
    ),
    claims=[
        Claim(
            "on a symmetry orbit the loss alignment A and ‖∇L‖² change in exactly the same "
            "ratio (f = ∂L/∂F is invariant), and teleport by ‖∇L‖² raises A",
            "seed 000, Prop 5.1 (Eqs. 29-30)",
            "A_after/A_before = ‖∇L‖²_after/‖∇L‖²_before exactly (deviation < 1e-9 in "
            "float64); A gain > 1 with ‖Γ‖ bounded",
            _ratio_identity,
        ),
        Claim(
            "maximising A and maximising ‖∇L‖² over the orbit lead to the same point",
            "seed 000, §5 (Prop 5.1)",
            "the same ascent endpoint (relative distance < 1e-8)",
            _same_argmax,
        ),
        Claim(
            "larger alignment at initialisation gives faster early training",
            "seed 000, §5.2, Fig 2",
            "Pearson r(A, loss-halving epoch) < 0 (paper: −0.76), p < 0.05",
            _alignment_predicts_speed,
        ),
        Claim(
            "teleported initialisations (larger A) halve the training loss sooner than their "
            "untouched twins",
            "seed 000, §5 (Eq. 25 with Prop 5.1; Zhao et al. 2023's one-shot teleport)",
            "more pairs faster than slower (ties: the same checked step), one-sided Wilcoxon "
            "signed-rank p < 0.05",
            _teleported_faster,
        ),
    ],
    plot=plot_teleport_alignment,
)(run_teleport_alignment)
