"""``teleport-generalization`` (seed 001, dissertation §5.3, Figs 5.7 (SGD) and 5.8 (AdaGrad)).

A 3-layer LeakyReLU(0.1) MLP without biases (hidden widths h₁ = 32, h₂ = 10) is trained; near
convergence (epoch 20 in the paper) it is teleported on 5 training batches of 2000, one after
another, along the data-dependent GL actions of both layer pairs at once, to raise or lower
the sharpness φ (Eq. 5.1; 10 steps per batch) or the orbit curvature ψ (Eq. 5.2, Algorithm 2;
1 step per batch), group lr 5·10⁻²; then training goes on. Five arms per optimizer (no
teleport, φ ↑, φ ↓, ψ ↑, ψ ↓), averaged over runs. The text reads the figures as: "Teleporting
to flatter points slightly improves the validation loss, while teleporting to sharper points
has no effect" (a "warm restart": "the group action keeps the loss invariant only on the batch
of data used in teleportation"), and "Teleporting to points with larger curvatures helps find
a minimum with lower validation loss, while teleporting to points with smaller curvatures has
the opposite effect".

Choices (notes 001b §2.5, §3, §9 items 5, 10, 11), also in the notes of each run:

* **Action.** The inverse-activation action (Eq. 4.13, ``inverse_GL``, as in
  ``sharpness-curvature-correlation``) on both layer pairs, g = exp ξ. On a batch of k samples
  it is exact only when each pair's inputs have full column rank, k ≤ n (n = 32 for the second
  pair); the pseudo-inverse action (Eq. 4.16, the authors' code; ``action="pinv_GL"``) only
  when k ≤ h (h = 10 for the second pair). The paper's batches (2000; 200 on digits) exceed
  both, so the teleport runs with ``allow_approximate=True`` and the engine's loss guard: a
  step may change the loss on its batch by at most ``max_loss_drift`` (relative; 1%) or it is
  halved. Off the batch the loss moves by as much or more: the warm restart the text
  describes, reported as the change of the whole training and test losses at the teleport.
  Smaller, exact batches are no cure: with k < n the action's identity projects the weights
  onto the batch's span, which changes the function off the batch far more (one ψ teleport
  on 32 digits, exact on its batch, took the training loss from 0.06 to 1.7–400; on 200,
  to at most 0.066).
* **Steps.** Plain gradient steps on ξ at the paper's lr (``max_step_norm=None``) with a line
  search (a step that does not move the objective the asked way is halved) and
  ``keep_worse=False`` (a teleport that ends worse is undone): without them the paper's
  single ψ step often overshoots to the wrong side (checked on digits), which the text does
  not discuss.
* **Objectives.** φ with orthant directions (U[0, 1) entries normalised) and radii 0.1…0.9,
  as the authors' sharpness teleport (which draws 100 directions per radius); ψ with k = 1
  random algebra element per teleport (the text), orthant-distributed (the authors' code).
  Both are drawn afresh for each teleport batch and shared by the ↑ and ↓ arms of a run. φ is
  mostly the loss itself (notes 001b §3), so φ ↓ also lowers the batch loss up to the guard,
  and φ ↑ raises it.
* **Runs and arms.** Each run has its own initialisation (the authors' code starts all five
  from one saved SGD run); its arms share the training up to the teleport (one model, copied),
  the teleport batches and the mini-batch order after it, so they differ only by the teleport.
  Optimizer state (AdaGrad's accumulator) is kept through the teleport (``state_policy``;
  ``"reset"``, as the authors' code re-creates the optimizer, resets it in every arm). The
  authors' script teleports on up to 10 batches (2 for φ ↑, 10 for φ ↓ and ψ ↑, 5 for ψ ↓)
  and ψ along one random curve of one layer pair; this follows the text (5 batches, all pairs).
* **Measurement.** Δ = (mean test loss over the last ``final_epochs`` epochs of the arm) −
  (the same for no teleport), per run; mean ± std over runs, a paired two-sided t-test and
  its 95% interval. "No effect" is read as p ≥ 0.05, which a noisy run satisfies trivially:
  the interval says how small an effect was excluded. φ and ψ are also measured on a fixed
  probe batch with fixed directions and curves right before and after the teleport, to show
  whether the change carries over beyond the teleport's own random draws.

Paper preset: CIFAR-10 from ``--data-dir``, 40 epochs with SGD lr 0.02, batch 20, no
shuffling (the authors' ``teleport_sharpness_curvature.py``); AdaGrad lr 0.01 (not in the
text; the authors' §5.4.2 code); 100 directions per radius, so each φ evaluation is 900 forward
passes of 2000 CIFAR images: hours on a CPU. Quick preset: digits (1347 training images), SGD
lr 0.1 and AdaGrad lr 0.05 (an epoch is 68 steps of 20, against 2500 on CIFAR-10), 2 teleport
batches of 200 after epoch 14 of 22, 5 runs, 4 directions per radius (about 45 s on one CPU
core). There every teleport moves φ or ψ as asked with the batch loss within 1%, yet no arm
changes the final test loss detectably (|Δ| ≲ 0.01 against test losses of 0.14–0.18, all
p > 0.15; SGD at batch 20 on digits is bumpy, so its Δ spread over runs is large): the claims
that φ ↓ and ψ ↑ lower and ψ ↓ raises the test loss fail, and "φ ↑ has no effect" holds.
"""

from __future__ import annotations

import copy
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.stats
import torch
from torch import Tensor, nn

import paramsym as ps
from paramsym.core.tables import Table, append_row, empty_table, table_rows
from paramsym.errors import InvalidArgumentError
from paramsym.experiments.registry import Progress, Result, experiment
from paramsym.experiments.teleport.generalization_report import (
    ARMS,
    CLAIMS,
    jump_notes,
    plot_generalization,
)
from paramsym.experiments.teleport.training import (
    LABELS,
    Split,
    classifier,
    layer_pair_actions,
    load_split,
    make_optimizer,
    mean_loss,
    recorded_warnings,
    warning_counts,
)
from paramsym.experiments.threads import torch_threads

DATASETS = ("digits", "mnist1d", "mnist", "fashion_mnist", "cifar10")
TELEPORT_RADII: tuple[float, ...] = tuple(round(0.1 * i, 1) for i in range(1, 10))
"""The authors' sharpness-teleport radii {0.1, 0.2, …, 0.9} (notes 001b §9 item 10)."""

CURVE_COLUMNS = "optimizer arm run epoch train_loss test_loss"
TELEPORT_COLUMNS = (
    "optimizer arm run batch objective_before objective_after loss_before loss_after "
    "max_loss_drift steps stopped"
)
EVENT_COLUMNS = (
    "optimizer arm run train_before train_after test_before test_after phi_before phi_after "
    "psi_before psi_after"
)
Batch = tuple[Tensor, Tensor]


@dataclass(frozen=True)
class GeneralizationConfig:
    """Settings of ``teleport-generalization``.

    Attributes:
        seed: base seed; run r uses ``seed·1000 + r`` for its initialisation (and offsets of
            it for the mini-batch order, the teleport batches and the objectives' draws).
        dataset: ``digits``, ``mnist1d`` (always available), ``mnist``, ``fashion_mnist``
            or ``cifar10`` (files in ``data_dir``).
        data_dir: directory with the data files (from --data-dir / PARAMSYM_DATA).
        optimizers: ``sgd`` (Fig 5.7) and/or ``adagrad`` (Fig 5.8), with ``learning_rates``.
        runs: runs per optimizer (paper: 5).
        hidden, slope: hidden widths (paper: 32, 10) and LeakyReLU slope (0.1).
        epochs, teleport_epoch: training length and the epoch after which to teleport
            (paper: 40 and 20, as the authors' code).
        batch_size, shuffle: SGD mini-batch (20) and whether to reshuffle every epoch (the
            authors' code: no).
        teleport_batches, teleport_batch_size: teleport batches, one after another (5 of 2000).
        teleport_lr: group learning rate (5·10⁻²).
        sharpness_steps, curvature_steps: steps per batch (10 for φ, 1 for ψ).
        radii, directions: φ's displacements and directions per teleport (|D|).
        curves: ψ's random algebra elements per teleport (the text's k = 1).
        action: ``inverse_GL`` (Eq. 4.13) or ``pinv_GL`` (Eq. 4.16) on every layer pair.
        max_loss_drift: the engine's loss guard on each teleport batch (relative).
        state_policy: ``keep`` the optimizer state through the teleport or ``reset`` it.
        final_epochs: the test loss compared between arms is the mean over the last
            ``final_epochs`` epochs.
        probe_size, probe_directions, probe_curves: φ and ψ measured before and after the
            teleport on one fixed batch of training samples with fixed directions / curves.
        threads: torch intra-op threads during the run (0: unchanged).
    """

    seed: int = 0
    dataset: str = "digits"
    data_dir: str | None = None
    optimizers: tuple[str, ...] = ("sgd", "adagrad")
    learning_rates: tuple[float, ...] = (0.1, 0.05)
    runs: int = 5
    hidden: tuple[int, ...] = (32, 10)
    slope: float = 0.1
    epochs: int = 22
    teleport_epoch: int = 14
    batch_size: int = 20
    shuffle: bool = True
    teleport_batches: int = 2
    teleport_batch_size: int = 200
    teleport_lr: float = 5e-2
    sharpness_steps: int = 10
    curvature_steps: int = 1
    radii: tuple[float, ...] = TELEPORT_RADII
    directions: int = 4
    curves: int = 1
    action: str = "inverse_GL"
    max_loss_drift: float = 1e-2
    state_policy: str = "keep"
    final_epochs: int = 4
    probe_size: int = 200
    probe_directions: int = 4
    probe_curves: int = 1
    threads: int = 1


def generalization_split(config: GeneralizationConfig) -> Split:
    """Flattened float32 inputs and labels; the held-out part is the test set (50 000 of the
    60 000 (Fashion-)MNIST training images, as the authors' code)."""
    if config.dataset not in DATASETS:
        raise InvalidArgumentError(
            f"teleport-generalization: dataset must be one of {DATASETS}, got {config.dataset!r}"
        )
    return load_split(config.dataset, config.data_dir, config.seed, holdout="test")


def check_config(config: GeneralizationConfig) -> None:
    """Refuse settings the run cannot honour, naming the field."""
    where = "teleport-generalization"
    if config.runs < 2:
        raise InvalidArgumentError(f"{where}: runs must be ≥ 2 for a paired comparison")
    if len(config.learning_rates) != len(config.optimizers) or not config.optimizers:
        raise InvalidArgumentError(
            f"{where}: give one learning rate per optimizer ({len(config.optimizers)} "
            f"optimizers, {len(config.learning_rates)} learning rates)"
        )
    unknown = [o for o in config.optimizers if o not in LABELS]
    if unknown:
        raise InvalidArgumentError(
            f"{where}: unknown optimizer {unknown[0]!r}; use one of {sorted(LABELS)}"
        )
    if not 1 <= config.teleport_epoch < config.epochs:
        raise InvalidArgumentError(
            f"{where}: teleport_epoch must be in [1, epochs), got {config.teleport_epoch} "
            f"with epochs={config.epochs}"
        )
    if not 1 <= config.final_epochs <= config.epochs - config.teleport_epoch:
        raise InvalidArgumentError(
            f"{where}: final_epochs must be in [1, epochs − teleport_epoch], got "
            f"{config.final_epochs}"
        )
    if config.action not in ("inverse_GL", "pinv_GL"):
        raise InvalidArgumentError(
            f"{where}: action must be 'inverse_GL' (Eq. 4.13) or 'pinv_GL' (Eq. 4.16), got "
            f"{config.action!r}"
        )
    if config.state_policy not in ("keep", "reset"):
        raise InvalidArgumentError(
            f"{where}: state_policy must be 'keep' or 'reset', got {config.state_policy!r}"
        )
    sizes = ("teleport_batches", "teleport_batch_size", "probe_size", "probe_directions")
    small = [f for f in (*sizes, "probe_curves", "directions", "curves") if getattr(config, f) < 1]
    if small:
        raise InvalidArgumentError(f"{where}: {small[0]} must be ≥ 1")


# -- one run ---------------------------------------------------------------------------------------


def train_epoch(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    split: Split,
    batch_size: int,
    order: torch.Generator | None,
) -> None:
    """One pass over the training set in mini-batches (in order when ``order`` is None)."""
    loss_fn = nn.CrossEntropyLoss()
    n = split.x_train.shape[0]
    permutation = torch.arange(n) if order is None else torch.randperm(n, generator=order)
    for start in range(0, n, batch_size):
        index = permutation[start : start + batch_size]
        optimizer.zero_grad()
        loss_fn(model(split.x_train[index]), split.y_train[index]).backward()
        optimizer.step()


def losses(model: nn.Module, split: Split) -> tuple[float, float]:
    """(whole training set, test set) mean cross-entropy."""
    loss_fn = nn.CrossEntropyLoss()
    return (
        mean_loss(model, loss_fn, split.x_train, split.y_train),
        mean_loss(model, loss_fn, split.x_val, split.y_val),
    )


def probe(
    model: nn.Module, batch: Batch, config: GeneralizationConfig, seed: int
) -> tuple[float, float]:
    """(φ, ψ) on the probe batch with the directions and algebra elements of ``seed`` (so the
    same ones before and after a teleport); ψ in float64 on the layer-pair actions."""
    loss_fn = nn.CrossEntropyLoss()
    with torch.no_grad():
        phi = ps.sharpness(
            model,
            loss_fn,
            batch,
            config.radii,
            config.probe_directions,
            torch.Generator().manual_seed(seed),
            distribution="orthant",
        )
    params64 = {k: v.detach().double() for k, v in model.named_parameters()}
    psi = ps.mean_orbit_curvature(
        model,
        layer_pair_actions(model, config.action),
        config.probe_curves,
        torch.Generator().manual_seed(seed + 1),
        params64,
        batch[0].double(),
    )
    return float(phi), float(psi)


def teleport_arm(
    model: nn.Module, arm: str, batches: Sequence[Batch], config: GeneralizationConfig, seed: int
) -> list[ps.TeleportResult]:
    """Teleport ``model`` in place on each batch in turn, raising (``*_up``) or lowering
    (``*_down``) φ (``phi_*``) or ψ (``psi_*``). The objectives draw their directions or
    algebra elements from a generator seeded with ``seed``, so the ↑ and ↓ arms of a run use
    the same ones."""
    sharp = arm.startswith("phi")
    generator = torch.Generator().manual_seed(seed)
    symmetries = layer_pair_actions(model, config.action)
    results = []
    for batch in batches:
        objective = (
            ps.Sharpness(config.radii, config.directions, generator, distribution="orthant")
            if sharp
            else ps.Curvature(config.curves, generator=generator, distribution="orthant")
        )
        result = ps.teleport(
            model,
            nn.CrossEntropyLoss(),
            batch,
            symmetries,
            objective,
            steps=config.sharpness_steps if sharp else config.curvature_steps,
            lr=config.teleport_lr,
            ascend=arm.endswith("up"),
            parameterization="exp",
            line_search=True,
            max_step_norm=None,
            max_loss_drift=config.max_loss_drift,
            on_drift="shrink",
            max_shrinks=8,
            allow_approximate=True,
            keep_worse=False,
        )
        results.append(result)
    return results


def run_optimizer(
    split: Split,
    name: str,
    lr: float,
    run: int,
    config: GeneralizationConfig,
    tables: dict[str, Table],
    messages: list[str],
) -> None:
    """Run ``run`` of optimizer ``name``: train to ``teleport_epoch``, then each arm from a copy
    of that model and optimizer state, with the same mini-batch order; rows go to ``tables``."""
    seed = config.seed * 1000 + run
    model = classifier(split.inputs, config.hidden, config.slope, seed)
    optimizer = make_optimizer(name, model, lr)
    order = torch.Generator().manual_seed(seed + 1_000_000) if config.shuffle else None
    shared = [losses(model, split)]
    for _ in range(config.teleport_epoch):
        train_epoch(model, optimizer, split, config.batch_size, order)
        shared.append(losses(model, split))
    draw = torch.Generator().manual_seed(seed + 2_000_000)
    n = split.x_train.shape[0]
    pick = torch.randperm(n, generator=draw)[: config.probe_size]
    probe_batch = (split.x_train[pick], split.y_train[pick])
    batches = []
    for _ in range(config.teleport_batches):
        pick = torch.randperm(n, generator=draw)[: config.teleport_batch_size]
        batches.append((split.x_train[pick], split.y_train[pick]))
    before = probe(model, probe_batch, config, seed + 4_000_000)
    for arm in ARMS:
        arm_model = copy.deepcopy(model)
        arm_optimizer = make_optimizer(name, arm_model, lr)
        if config.state_policy == "keep":  # "reset": every arm, no teleport too, starts afresh
            arm_optimizer.load_state_dict(copy.deepcopy(optimizer.state_dict()))
        arm_order = None
        if order is not None:
            arm_order = torch.Generator()
            arm_order.set_state(order.get_state())
        after = before
        if arm != "none":
            with recorded_warnings(messages):
                results = teleport_arm(arm_model, arm, batches, config, seed + 3_000_000)
            for b, r in enumerate(results):
                append_row(
                    tables["teleports"], name, arm, run, b, r.objective_before,
                    r.objective_after, r.loss_before, r.loss_after, r.max_loss_drift, r.steps,
                    r.stopped,
                )  # fmt: skip
            after = probe(arm_model, probe_batch, config, seed + 4_000_000)
        jump = losses(arm_model, split)
        curve = list(shared)
        for _ in range(config.teleport_epoch, config.epochs):
            train_epoch(arm_model, arm_optimizer, split, config.batch_size, arm_order)
            curve.append(losses(arm_model, split))
        for epoch, (train, test) in enumerate(curve):
            append_row(tables["curves"], name, arm, run, epoch, train, test)
        append_row(
            tables["events"], name, arm, run, shared[-1][0], jump[0], shared[-1][1], jump[1],
            before[0], after[0], before[1], after[1],
        )  # fmt: skip


# -- statistics ----------------------------------------------------------------------------------


def final_test_loss(curves: Table, optimizer: str, arm: str, last: int) -> list[float]:
    """Per run, the mean test loss of ``arm`` over its last ``last`` epochs."""
    rows = table_rows(curves, optimizer=optimizer, arm=arm)
    out = []
    for run in sorted(set(rows["run"])):
        test = [t for r, t in zip(rows["run"], rows["test_loss"], strict=True) if r == run]
        out.append(statistics.fmean(test[-last:]))
    return out


def paired(treated: Sequence[float], baseline: Sequence[float]) -> dict[str, Any]:
    """Δ = treated − baseline per run (≥ 2 runs): mean, std, two-sided one-sample t-test
    p-value of the Δ (the paired t-test), its 95% t-interval and how many runs are lower.
    Differences that are all equal give p = 1 if they are 0, else 0."""
    d = np.asarray(treated, dtype=float) - np.asarray(baseline, dtype=float)
    mean, std = float(d.mean()), float(d.std(ddof=1))
    if std == 0.0:
        p, half = (1.0 if mean == 0.0 else 0.0), 0.0
    else:
        p = float(scipy.stats.ttest_1samp(d, 0.0).pvalue)
        half = float(scipy.stats.t.ppf(0.975, d.size - 1) * std / math.sqrt(d.size))
    return {
        "delta": mean,
        "delta_std": std,
        "p": p,
        "ci": [mean - half, mean + half],
        "runs_lower": int((d < 0).sum()),
        "runs": int(d.size),
    }


def _ratios(after: Sequence[float], before: Sequence[float]) -> list[float]:
    return [a / b if b else math.nan for a, b in zip(after, before, strict=True)]


def summarise(tables: dict[str, Table], config: GeneralizationConfig) -> dict[str, Any]:
    """Per optimizer ``o`` and teleport arm ``a``, metrics ``{o}_{a}_…``: the paired test-loss
    comparison with no teleport (``delta``, ``delta_std``, ``p``, ``ci``, ``runs_lower``),
    the teleport's effect on its own objective on the teleport batches (``objective_ratio``,
    ``moved``, ``wrong_way``, ``undone``, ``teleports``) and on the probe (``probe_ratio``), the
    teleport-batch loss (``batch_loss_change`` mean relative change, ``batch_drift`` largest
    relative drift) and the whole training / test loss jumps at the teleport."""
    metrics: dict[str, Any] = {
        "optimizers": list(config.optimizers),
        "dataset": config.dataset,
        "runs": config.runs,
        "epochs": config.epochs,
        "teleport_epoch": config.teleport_epoch,
        "final_epochs": config.final_epochs,
        "max_loss_drift": config.max_loss_drift,
    }
    curves, teleports, events = tables["curves"], tables["teleports"], tables["events"]
    for o in config.optimizers:
        base = final_test_loss(curves, o, "none", config.final_epochs)
        metrics[f"{o}_none_test"] = statistics.fmean(base)
        for arm in ARMS[1:]:
            key, up = f"{o}_{arm}", arm.endswith("up")
            treated = final_test_loss(curves, o, arm, config.final_epochs)
            metrics.update({f"{key}_{k}": v for k, v in paired(treated, base).items()})
            rows = table_rows(teleports, optimizer=o, arm=arm)
            after, before = rows["objective_after"], rows["objective_before"]
            sign = 1.0 if up else -1.0
            metrics[f"{key}_objective_ratio"] = statistics.fmean(_ratios(after, before))
            changes = [sign * (a - b) for a, b in zip(after, before, strict=True)]
            metrics[f"{key}_moved"] = sum(c > 0 for c in changes)
            metrics[f"{key}_wrong_way"] = sum(c < 0 for c in changes)
            metrics[f"{key}_teleports"] = len(after)
            metrics[f"{key}_undone"] = rows["stopped"].count("no_improvement")
            scale = [max(abs(b), 1e-12) for b in rows["loss_before"]]
            batch_change = [
                a - b for a, b in zip(rows["loss_after"], rows["loss_before"], strict=True)
            ]
            metrics[f"{key}_batch_loss_change"] = statistics.fmean(
                c / s for c, s in zip(batch_change, scale, strict=True)
            )
            metrics[f"{key}_batch_drift"] = max(
                d / s for d, s in zip(rows["max_loss_drift"], scale, strict=True)
            )
            event = table_rows(events, optimizer=o, arm=arm)
            which = "phi" if arm.startswith("phi") else "psi"
            probe_ratios = _ratios(event[f"{which}_after"], event[f"{which}_before"])
            metrics[f"{key}_probe_ratio"] = statistics.fmean(probe_ratios)
            for part in ("train", "test"):
                metrics[f"{key}_{part}_jump"] = statistics.fmean(
                    a - b
                    for a, b in zip(event[f"{part}_after"], event[f"{part}_before"], strict=True)
                )
    return metrics


def run_generalization(config: GeneralizationConfig, progress: Progress) -> Result:
    """Train, teleport and train on for every optimizer, run and arm; compare the test losses
    with no teleport's, run by run."""
    check_config(config)
    tables = {
        "curves": empty_table(CURVE_COLUMNS),
        "teleports": empty_table(TELEPORT_COLUMNS),
        "events": empty_table(EVENT_COLUMNS),
    }
    messages: list[str] = []
    with torch_threads(config.threads):
        split = generalization_split(config)
        for name, lr in zip(config.optimizers, config.learning_rates, strict=True):
            for run in progress.track(range(config.runs), description=LABELS[name]):
                run_optimizer(split, name, lr, run, config, tables, messages)
    metrics = summarise(tables, config)
    stops: dict[str, int] = {}
    for reason in tables["teleports"]["stopped"]:
        stops[reason] = stops.get(reason, 0) + 1
    notes = [
        f"{config.dataset}: {config.teleport_batches} teleport batches of "
        f"{config.teleport_batch_size}, one after another, after epoch {config.teleport_epoch} "
        f"of {config.epochs}; {config.action} on both layer pairs (g = exp ξ), lr "
        f"{config.teleport_lr:g}, {config.sharpness_steps} φ steps / {config.curvature_steps} "
        "ψ step per batch with a line search, a teleport that ends worse is undone; "
        "allow_approximate=True (the batches exceed the widths) with the loss guard "
        f"{config.max_loss_drift:g} (relative, on the teleport batch)",
        f"Δ = mean test loss over the last {config.final_epochs} epochs, arm − no teleport, "
        f"per run ({config.runs} runs; a run's arms share its training up to the teleport and "
        f"its mini-batch order after it); optimizer state through the teleport: "
        f"{config.state_policy}",
        f"teleports per stopping reason: {stops}",
        *jump_notes(metrics),
    ]
    counts = warning_counts(messages)
    if counts:
        notes.append(
            f"teleport warnings: {counts} (ApproximateActionWarning: the action is not exact on "
            "a teleport batch; TeleportDriftWarning: every shrunken step broke the loss guard)"
        )
    return Result(metrics, tables, notes)


experiment(
    "teleport-generalization",
    seed_ref="seed 001, Figs 5.7, 5.8 (§5.3)",
    description=(
        "teleport a nearly trained 3-layer LeakyReLU MLP (widths 32, 10, no biases) on "
        "several training batches along the Eq. 4.13 GL actions of both layer pairs to raise "
        "or lower the sharpness φ (Eq. 5.1, 10 steps) or the orbit curvature ψ (Eq. 5.2, "
        "1 step), then train on; test loss of each arm against no teleport (paired over runs), "
        "SGD (Fig 5.7) and AdaGrad (Fig 5.8). The batches exceed the widths, so the action is "
        "approximate (the loss guard bounds the batch loss): the warm restart of the text. "
        "Quick: digits, 2 batches of 200 after epoch 14 of 22, 5 runs"
    ),
    data="digits (quick); CIFAR-10 python files in --data-dir (paper); mnist1d, MNIST and "
    "Fashion-MNIST also accepted",
    quick=GeneralizationConfig(),
    paper=GeneralizationConfig(
        dataset="cifar10",
        learning_rates=(0.02, 0.01),
        epochs=40,
        teleport_epoch=20,
        shuffle=False,
        teleport_batches=5,
        teleport_batch_size=2000,
        directions=100,
        final_epochs=5,
        probe_size=2000,
        probe_directions=100,
        probe_curves=20,
        threads=0,
    ),
    claims=CLAIMS,
    plot=plot_generalization,
)(run_generalization)
