"""The group-ensemble experiment of seed 001, chapter 2 (Figs 2.8, 2.9; §2.9): majority-vote
ensembles of copies of a classifier moved by random g = I + εM of the pseudo-inverse GL(h)
action (Eq. 2.54), against four baselines, with FGSM and PGD robustness curves.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, cast

import matplotlib.pyplot as plt
import numpy as np
import torch
import torch.nn.functional as F  # noqa: N812
from torch import Tensor, nn

import paramsym as ps
from paramsym import data as datasets
from paramsym.core.tables import append_row
from paramsym.ensembles import (
    KINDS,
    EnsembleKind,
    GroupEnsemble,
    Reference,
    accuracy,
    attack_accuracy,
    group_ensemble,
)
from paramsym.experiments.registry import Claim, Progress, Result, experiment
from paramsym.experiments.threads import single_threaded

SOURCE = "seed 001"


# == group-ensemble (Figs 2.8, 2.9) ==============================================================


@dataclass(frozen=True)
class GroupEnsembleConfig:
    """Settings of ``group-ensemble``.

    Attributes:
        seed: randomness of the split, initialisation, minibatches and group elements.
        dataset: ``"digits"`` (8×8, always available) or ``"cifar10"`` (files in ``data_dir``).
        data_dir: directory with the CIFAR-10 python batches (--data-dir / PARAMSYM_DATA).
        channels: convolution channels (not given in the paper).
        hidden: width of the transformed hidden layer (the paper: 32).
        negative_slope: of the LeakyReLU (not given; torch's default 0.01).
        epochs, batch_size, learning_rate: Adam training with cross-entropy (not given).
        epsilons: ε of g = I + εM, M_ij ~ N(0, 1) (grid not given).
        members: ensemble size (not given).
        reference_samples: training inputs on which π(g, H) = σ(H)σ(gH)⁺ is computed once
            with ``reference="fixed"`` (more than ``hidden``: π is a least-squares fit).
        reference: ``"batch"`` (default: the paper's "modified activation" σ′(H) =
            π(g, H)σ(gH), π recomputed on every evaluated batch, also inside the attacks'
            gradients) or ``"fixed"`` (π from the reference inputs; members are plain nets).
        attack_epsilon: ε of the ensembles attacked in Fig 2.9.
        attack_samples: test inputs attacked (0: all).
        fgsm_strengths, pgd_strengths: L∞ attack radii (inputs in [0, 1]; not given).
        pgd_steps: PGD iterations (step 2.5ε/steps, random start).
    """

    seed: int = 0
    dataset: str = "digits"
    data_dir: str | None = None
    channels: int = 16
    hidden: int = 32
    negative_slope: float = 0.01
    epochs: int = 40
    batch_size: int = 64
    learning_rate: float = 1e-3
    epsilons: tuple[float, ...] = (0.01, 0.03, 0.1, 0.3, 1.0)
    members: int = 10
    reference_samples: int = 1000
    reference: str = "batch"
    attack_epsilon: float = 0.1
    attack_samples: int = 0
    fgsm_strengths: tuple[float, ...] = (0.0, 0.02, 0.05, 0.1, 0.2)
    pgd_strengths: tuple[float, ...] = (0.0, 0.02, 0.05, 0.1)
    pgd_steps: int = 10


def ensemble_cnn(
    in_channels: int, side: int, channels: int, hidden: int, classes: int, slope: float
) -> nn.Sequential:
    """Fig 2.8's network: conv (kernel 3) → max-pool → FC → LeakyReLU → FC; the group acts on
    the last two FC layers (hidden width ``hidden``)."""
    pooled = (side - 2) // 2
    return nn.Sequential(
        nn.Conv2d(in_channels, channels, 3),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(channels * pooled * pooled, hidden),
        nn.LeakyReLU(slope),
        nn.Linear(hidden, classes),
    )


def _image_data(config: GroupEnsembleConfig) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(x_train, y_train, x_test, y_test) as float32 images (N, C, side, side) in [0, 1]."""
    if config.dataset == "digits":
        ds = datasets.digits(seed=config.seed, dtype=torch.float32)
        reshape = (1, 8, 8)
    elif config.dataset == "cifar10":
        ds = datasets.load("cifar10", data_dir=config.data_dir, dtype=torch.float32)
        reshape = (3, 32, 32)
    else:
        raise ps.InvalidArgumentError(
            f"group-ensemble: dataset must be 'digits' or 'cifar10', got {config.dataset!r}"
        )
    x_train, y_train = ds.train
    x_test, y_test = ds.test
    return (x_train.reshape(-1, *reshape), y_train, x_test.reshape(-1, *reshape), y_test)


def train_classifier(
    model: nn.Module, x: Tensor, y: Tensor, config: GroupEnsembleConfig, generator: torch.Generator
) -> list[float]:
    """Adam on cross-entropy, shuffled minibatches; returns the mean loss of each epoch."""
    optimizer = torch.optim.Adam(model.parameters(), lr=config.learning_rate)
    history = []
    for _ in range(config.epochs):
        order = torch.randperm(x.shape[0], generator=generator)
        total = 0.0
        for start in range(0, x.shape[0], config.batch_size):
            batch = order[start : start + config.batch_size]
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x[batch]), y[batch])
            loss.backward()
            optimizer.step()
            total += float(loss.detach()) * batch.numel()
        history.append(total / x.shape[0])
    return history


def run_group_ensemble(config: GroupEnsembleConfig, progress: Progress) -> Result:
    x_train, y_train, x_test, y_test = _image_data(config)
    generator = torch.Generator().manual_seed(config.seed)
    torch_seed = torch.initial_seed()
    torch.manual_seed(config.seed)  # nn.Module's default initialisation
    model = ensemble_cnn(
        x_train.shape[1],
        x_train.shape[-1],
        config.channels,
        config.hidden,
        int(y_train.max()) + 1,
        config.negative_slope,
    )
    torch.manual_seed(torch_seed)
    history = train_classifier(model, x_train, y_train, config, generator)
    model.eval()
    base = accuracy(model, x_test, y_test)
    reference = x_train[: config.reference_samples]
    heat: dict[str, list[Any]] = {
        "kind": [],
        "epsilon": [],
        "accuracy": [],
        "change": [],
        "layer_change": [],
    }
    cases = [(k, e) for k in KINDS for e in config.epsilons]
    for kind, eps in progress.track(cases, description="ensembles (Fig 2.8)"):
        ensemble = _ensemble(model, reference, kind, eps, config, generator)
        acc = accuracy(ensemble.predict, x_test, y_test)
        append_row(heat, kind, eps, acc, acc - base, float(np.mean(ensemble.layer_changes)))
    attacks = _attack_curves(model, reference, x_test, y_test, config, generator, progress)
    metrics = {
        "train_loss_final": history[-1],
        "test_accuracy": base,
        **_ensemble_metrics(heat, attacks, config),
    }
    notes = [
        f"reference={config.reference!r}: π(g, H) "
        + (
            "from each evaluated batch (test batches of ≤ 512, attack batches of ≤ 256)"
            if config.reference == "batch"
            else f"from the first {config.reference_samples} training inputs"
        )
        + "; ensembles vote (mode); attacks are white-box through the members' mean logits "
        "(GroupEnsemble.logits), inputs clamped to [0, 1].",
        "g = I + εM with M_ij ~ N(0, 1); the baselines are those of paramsym.ensembles.",
    ]
    return Result(metrics, {"accuracy_change": heat, "attacks": attacks}, notes)


def _ensemble(
    model: nn.Module,
    reference: Tensor,
    kind: str,
    epsilon: float,
    config: GroupEnsembleConfig,
    generator: torch.Generator,
) -> GroupEnsemble:
    """The ensemble of one kind (``paramsym.ensembles.group_ensemble``) at ε."""
    return group_ensemble(
        model,
        reference,
        kind=cast(EnsembleKind, kind),
        epsilon=epsilon,
        members=config.members,
        reference=cast(Reference, config.reference),
        generator=generator,
    )


def _attack_curves(
    model: nn.Module,
    reference: Tensor,
    x: Tensor,
    y: Tensor,
    config: GroupEnsembleConfig,
    generator: torch.Generator,
    progress: Progress,
) -> dict[str, list[Any]]:
    """Fig 2.9: accuracy under FGSM and PGD of the model and of each kind's ensemble."""
    if config.attack_samples:
        x, y = x[: config.attack_samples], y[: config.attack_samples]
    predictors: list[tuple[str, Callable[[Tensor], Tensor], Callable[[Tensor], Tensor]]] = [
        ("original", model, model)
    ]
    for kind in KINDS:
        ensemble = _ensemble(model, reference, kind, config.attack_epsilon, config, generator)
        predictors.append((kind, ensemble.logits, ensemble.predict))
    table: dict[str, list[Any]] = {"attack": [], "predictor": [], "strength": [], "accuracy": []}
    for name, logits, predict in progress.track(predictors, description="attacks (Fig 2.9)"):
        plans: list[tuple[Literal["fgsm", "pgd"], tuple[float, ...], dict[str, Any]]] = [
            ("fgsm", config.fgsm_strengths, {}),
            ("pgd", config.pgd_strengths, {"steps": config.pgd_steps, "generator": config.seed}),
        ]
        for attack, strengths, settings in plans:
            curve = attack_accuracy(
                logits,
                predict,
                F.cross_entropy,
                x,
                y,
                strengths,
                attack=attack,
                clamp=(0.0, 1.0),
                **settings,
            )
            for strength, acc in zip(curve.epsilons, curve.accuracy, strict=True):
                append_row(table, attack, name, strength, acc)
    return table


def _ensemble_metrics(
    heat: dict[str, list[Any]], attacks: dict[str, list[Any]], config: GroupEnsembleConfig
) -> dict[str, Any]:
    def change(kind: str, keep: Callable[[float], bool]) -> list[float]:
        return [
            c
            for k, e, c in zip(heat["kind"], heat["epsilon"], heat["change"], strict=True)
            if k == kind and keep(e)
        ]

    def curve(attack: str, name: str) -> list[float]:
        return [
            a
            for t, p, s, a in zip(
                attacks["attack"],
                attacks["predictor"],
                attacks["strength"],
                attacks["accuracy"],
                strict=True,
            )
            if t == attack and p == name and s > 0
        ]

    small = change("group", lambda e: e <= 0.1)
    large = {k: float(np.mean(change(k, lambda e: e > 0.1) or [math.nan])) for k in KINDS}
    fgsm = {name: curve("fgsm", name) for name in ("original", *KINDS)}
    pgd = {name: curve("pgd", name) for name in ("original", *KINDS)}
    others = [k for k in KINDS if k != "group"]
    return {
        "group_max_abs_change_small_eps": max(abs(c) for c in small) if small else math.nan,
        "mean_change_large_eps": large,
        "group_best_at_large_eps": all(large["group"] >= large[k] for k in others),
        "fgsm_accuracy": fgsm,
        "fgsm_group_not_worse": all(
            g >= max(fgsm[o][i] for o in ("original", *others)) for i, g in enumerate(fgsm["group"])
        ),
        "pgd_accuracy": pgd,
        "pgd_group_minus_original_max": max(
            (abs(g - o) for g, o in zip(pgd["group"], pgd["original"], strict=True)), default=0.0
        ),
    }


def plot_group_ensemble(result: Result) -> dict[str, Any]:
    heat, attacks = result.series["accuracy_change"], result.series["attacks"]
    kinds = list(dict.fromkeys(heat["kind"]))
    epsilons = list(dict.fromkeys(heat["epsilon"]))
    grid = np.array(
        [
            [
                100 * c
                for k, e, c in zip(heat["kind"], heat["epsilon"], heat["change"], strict=True)
                if k == kind
            ]
            for kind in kinds
        ]
    )
    fig1, ax = plt.subplots(figsize=(1.2 * len(epsilons) + 2.5, 0.55 * len(kinds) + 1.6))
    bound = max(1.0, float(np.abs(grid).max()))
    image = ax.imshow(grid, cmap="RdBu", vmin=-bound, vmax=bound, aspect="auto")
    for i in range(len(kinds)):
        for j in range(len(epsilons)):
            ax.text(j, i, f"{grid[i, j]:+.1f}", ha="center", va="center", fontsize=8)
    ax.set_xticks(range(len(epsilons)), [f"{e:g}" for e in epsilons])
    ax.set_yticks(range(len(kinds)), kinds)
    ax.set_xlabel("ε (g = I + εM)")
    ax.set_title(
        "Fig 2.8: ensemble accuracy − single model (points; red = degradation)", fontsize=9
    )
    fig1.colorbar(image, ax=ax)
    fig1.tight_layout()
    fig2, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for ax2, attack in zip(axes, ("fgsm", "pgd"), strict=True):
        for name in dict.fromkeys(attacks["predictor"]):
            rows = [
                (s, a)
                for t, p, s, a in zip(
                    attacks["attack"],
                    attacks["predictor"],
                    attacks["strength"],
                    attacks["accuracy"],
                    strict=True,
                )
                if t == attack and p == name
            ]
            style: dict[str, Any] = {"lw": 1}
            if name in ("group", "original"):
                style = {"lw": 2.5, "color": "k", "ls": "--" if name == "original" else "-"}
            ax2.plot([r[0] for r in rows], [r[1] for r in rows], marker="o", label=name, **style)
        ax2.set_xlabel("attack strength (L∞ radius)")
        ax2.set_ylabel("test accuracy")
        ax2.set_title(f"Fig 2.9: {attack.upper()}")
        ax2.legend(fontsize=7)
    fig2.tight_layout()
    return {"accuracy_change.png": fig1, "attacks.png": fig2}


experiment(
    "group-ensemble",
    seed_ref="seed 001, Figs 2.8-2.9; Eq. 2.54",
    description=(
        "majority-vote ensembles of a conv → max-pool → FC(32) → LeakyReLU → FC classifier "
        "moved by random g = I + εM of the pseudo-inverse GL(32) action on the last two FC "
        "layers, against g⁻¹, random-diagonal, shuffled-π and interpolated-permutation "
        "baselines: accuracy change vs ε, accuracy under FGSM and PGD. Chosen here (the paper is "
        "silent): Adam lr 1e-3, conv channels, ε grid, 10 members, π recomputed on each "
        "evaluated batch (the 'modified activation'), attack radii and 10 PGD steps"
    ),
    data="digits (quick); CIFAR-10 python batches in --data-dir (paper)",
    quick=GroupEnsembleConfig(),
    paper=GroupEnsembleConfig(
        dataset="cifar10",
        channels=32,
        epochs=20,
        batch_size=128,
        reference_samples=5000,
        attack_samples=2000,
        fgsm_strengths=(0.0, 1 / 255, 2 / 255, 4 / 255, 8 / 255),
        pgd_strengths=(0.0, 1 / 255, 2 / 255, 4 / 255, 8 / 255),
    ),
    claims=[
        Claim(
            "the group ensemble keeps the model's accuracy for small ε",
            f"{SOURCE}, Fig 2.8",
            "|accuracy change| ≤ 1 point for every ε ≤ 0.1",
            lambda r: (
                f"max |Δacc| = {100 * r.metrics['group_max_abs_change_small_eps']:.2f} points",
                r.metrics["group_max_abs_change_small_eps"] <= 0.01,
            ),
        ),
        Claim(
            "at larger ε the group ensemble loses less accuracy than the baselines",
            f"{SOURCE}, Fig 2.8",
            "mean Δacc over ε > 0.1: group ≥ every baseline",
            lambda r: (
                {k: round(100 * v, 2) for k, v in r.metrics["mean_change_large_eps"].items()},
                r.metrics["group_best_at_large_eps"],
            ),
        ),
        Claim(
            "under FGSM the group ensemble is consistently more accurate than the original model "
            "and the baselines",
            f"{SOURCE}, Fig 2.9",
            "group ≥ original and every baseline at every attack strength > 0",
            lambda r: (
                {k: [round(a, 3) for a in v] for k, v in r.metrics["fgsm_accuracy"].items()},
                r.metrics["fgsm_group_not_worse"],
            ),
        ),
        Claim(
            "under PGD the group ensemble makes a negligible difference",
            f"{SOURCE}, Fig 2.9",
            "|accuracy(group) − accuracy(original)| ≤ 3 points at every strength",
            lambda r: (
                f"max {100 * r.metrics['pgd_group_minus_original_max']:.2f} points",
                r.metrics["pgd_group_minus_original_max"] <= 0.03,
            ),
        ),
    ],
    plot=plot_group_ensemble,
)(single_threaded(run_group_ensemble))
