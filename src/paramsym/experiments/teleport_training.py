"""Seed 001 (dissertation) ch. 4-5: symmetry teleportation inside training loops.

* ``teleport-mnist`` (Fig 4.6): SGD and AdaGrad on an MLP classifier, with and without one
  teleport right after the first epoch (4 mini-batches, one after another, 10 ascent steps
  each, on the pseudo-inverse action of Eq. 4.16 between every pair of layers).
* ``teleport-schedules`` (Fig 4.8): SGD with (a) one teleport at different epochs, (b) four
  single-batch teleports spaced by different intervals, (c) one teleport on different numbers
  of mini-batches.
* ``teleport-optimizers`` (Figs 5.9-5.11): (a) momentum on the ch. 4 regression with the three
  ways of treating the momentum buffer (``state_policy`` "transform", "keep", "reset"), (b)
  AdaGrad on the same regression teleported to maximise ‖∇L‖² or the AdaGrad-preconditioned
  ‖∇L‖²_A (Eq. 5.7), (c) AdaGrad, momentum, RMSProp and Adam on an MLP classifier with and
  without one teleport at the first epoch, against epochs and wall-clock time.

Every training loop drives :class:`paramsym.Teleporter` around a ``torch.optim`` optimizer;
the no-teleport baselines run the same loop with ``Schedule.never()``. Within a run the arms
share the initialisation, the mini-batch order and the teleport batches.

Choices where the dissertation is silent (notes 001b §6, §9), also in each experiment's
description and notes:

* MLPs without biases (the authors' code, notes §9 item 14), LeakyReLU slope 0.1, PyTorch's
  default ``nn.Linear`` initialisation, mean cross-entropy;
* the training loss of a curve is the loss on the *whole* training set after each epoch
  (epoch 0: at initialisation), the validation loss likewise; the gradient norm is the mean over
  an epoch's steps of the squared mini-batch gradient norm ‖∇L‖² (= −dL/dt of SGD);
* the teleport ascends the Lie-algebra coordinates with the paper's lr and step count only
  (``max_step_norm=None``), one fresh step at a time (g = exp ξ for the classifiers, the
  paper's first-order g = I + T for the regression), stops once ‖∇L‖² on the batch exceeds
  100 (the authors' code) and keeps the library's loss guard on the teleport batch
  (``max_loss_drift``);
* wall-clock time counts optimizer steps and teleports, not the evaluations.

Data: scikit-learn's digits in the quick presets (an epoch there is 68 steps of 20, against
2400 on MNIST, so the quick presets use larger optimizer learning rates; see each config); the
paper presets read MNIST from ``--data-dir``.
"""

from __future__ import annotations

import contextlib
import math
import statistics
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import scipy.stats
import torch
from torch import Tensor, nn

import paramsym as ps
import paramsym.data
from paramsym.errors import ApproximateActionWarning, InvalidArgumentError, ParamsymWarning
from paramsym.experiments.registry import Claim, Progress, Result, experiment
from paramsym.experiments.threads import torch_threads
from paramsym.symmetry.base import Symmetry
from paramsym.teleportation import StatePolicy, TeleportEvent

COLOURS = {"no teleport": "tab:blue", "teleport": "tab:orange"}

# -- data, models, optimizers (shared) -----------------------------------------------------------


@dataclass(frozen=True)
class Split:
    """A classification data set: training part and the part the curves call validation."""

    name: str
    x_train: Tensor
    y_train: Tensor
    x_val: Tensor
    y_val: Tensor

    @property
    def inputs(self) -> int:
        return int(self.x_train.shape[1])


def load_split(dataset: str, data_dir: str | None, seed: int, *, holdout: str) -> Split:
    """Flattened float32 inputs in [0, 1] and int64 labels.

    ``dataset``: ``"digits"`` (scikit-learn, 1347 train / 450 test, split by ``seed``),
    ``"mnist1d"`` (4000 / 1000) or ``"mnist"`` (IDX files in ``data_dir``). For MNIST,
    ``holdout="validation"`` splits the 60 000 training images 48 000 / 12 000 at random
    (dissertation §4.6.1), ``holdout="test"`` trains on 50 000 of them and validates on the
    official 10 000 test images (§5.4.2, as the authors' code does).
    """
    if dataset == "digits":
        data = paramsym.data.digits(seed=seed)
    elif dataset == "mnist1d":
        data = paramsym.data.mnist1d(seed=seed)
    elif dataset == "mnist":
        data = paramsym.data.load("mnist", data_dir=data_dir)
    else:
        raise InvalidArgumentError(
            f"teleport experiments: dataset must be 'digits', 'mnist1d' or 'mnist', got {dataset!r}"
        )
    x, y = data.train
    x = x.reshape(x.shape[0], -1).float()
    x_test = data.x_test.reshape(data.x_test.shape[0], -1).float()
    if dataset != "mnist":
        return Split(dataset, x, y, x_test, data.y_test)
    order = torch.randperm(x.shape[0], generator=torch.Generator().manual_seed(seed))
    if holdout == "validation":
        train, val = order[:48_000], order[48_000:60_000]
        return Split(dataset, x[train], y[train], x[val], y[val])
    return Split(dataset, x[order[:50_000]], y[order[:50_000]], x_test, data.y_test)


def image_split(
    dataset: str, data_dir: str | None, seed: int, *, holdout: str
) -> tuple[Split, int, int]:
    """:func:`load_split` with the inputs shaped for a CNN with one input channel: digits as
    ``(n, 1, 8, 8)``, MNIST as ``(n, 1, 28, 28)``, MNIST-1D as ``(n, 1, 40)``; also returns the
    number of spatial dimensions (2 or 1) and the side (or length) of an input."""
    split = load_split(dataset, data_dir, seed, holdout=holdout)
    if dataset == "mnist1d":
        dims, size = 1, split.inputs
        shape: tuple[int, ...] = (1, size)
    else:
        dims, size = 2, math.isqrt(split.inputs)
        shape = (1, size, size)
    shaped = Split(
        split.name,
        split.x_train.reshape(-1, *shape),
        split.y_train,
        split.x_val.reshape(-1, *shape),
        split.y_val,
    )
    return shaped, dims, size


def classifier(inputs: int, hidden: Sequence[int], slope: float, seed: int) -> nn.Sequential:
    """``inputs``-hidden…-10 MLP, LeakyReLU(slope), no biases, PyTorch's default init."""
    return ps.mlp([inputs, *hidden, 10], nn.LeakyReLU(slope), bias=False, seed=seed)


def layer_pair_actions(model: nn.Module, family: str) -> list[Symmetry]:
    """The data-dependent GL actions of ``family`` (``"pinv_GL"``: Eq. 4.16, ``"inverse_GL"``:
    Eq. 4.13) on every pair of adjacent layers of ``model``."""
    found = [
        s for s in ps.symmetries(model, data_dependent=True) if s.name.startswith(f"{family}[")
    ]
    pairs = sum(isinstance(m, nn.Linear) for m in model.modules()) - 1
    if len(found) != pairs:
        raise InvalidArgumentError(
            f"teleport experiments: expected {pairs} {family} actions on the model, found "
            f"{[s.name for s in found]}"
        )
    return found


OPTIMIZERS: dict[str, Callable[..., torch.optim.Optimizer]] = {
    "sgd": lambda params, lr: torch.optim.SGD(params, lr=lr),
    "momentum": lambda params, lr: torch.optim.SGD(params, lr=lr, momentum=0.9),
    "adagrad": lambda params, lr: torch.optim.Adagrad(params, lr=lr),
    "rmsprop": lambda params, lr: torch.optim.RMSprop(params, lr=lr),
    "adam": lambda params, lr: torch.optim.Adam(params, lr=lr),
}
"""torch.optim defaults except momentum 0.9 (the authors' code); AdaGrad's ε = 1e-10 and
zero initial accumulator match the authors' regression code."""

LABELS = {
    "sgd": "SGD",
    "momentum": "momentum",
    "adagrad": "AdaGrad",
    "rmsprop": "RMSProp",
    "adam": "Adam",
}


def make_optimizer(name: str, model: nn.Module, lr: float) -> torch.optim.Optimizer:
    if name not in OPTIMIZERS:
        raise InvalidArgumentError(
            f"teleport experiments: unknown optimizer {name!r}; use one of {sorted(OPTIMIZERS)}"
        )
    return OPTIMIZERS[name](model.parameters(), lr)


def run_seeds(seed: int, run: int) -> tuple[int, torch.Generator, torch.Generator]:
    """Run ``run``'s initialisation seed, mini-batch order and teleport-batch generators
    (shared by every arm of the run, so arms differ only by their teleports)."""
    base = seed * 1000 + run
    return (
        base,
        torch.Generator().manual_seed(base + 1_000_000),
        torch.Generator().manual_seed(base + 2_000_000),
    )


@contextlib.contextmanager
def recorded_warnings(into: list[str]) -> Iterator[None]:
    """Collect the paramsym warnings raised inside (an action not exact on a teleport batch, an
    ascent stopped by the loss guard or a non-finite step) into ``into`` as ``"Category:
    message"`` strings; the experiments count them in their notes. Other warnings pass on."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
    for w in caught:
        if issubclass(w.category, ParamsymWarning):
            into.append(f"{w.category.__name__}: {w.message}")
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)


def warning_counts(messages: Sequence[str]) -> dict[str, int]:
    """How many of each warning category ``recorded_warnings`` collected."""
    counts: dict[str, int] = {}
    for message in messages:
        category = message.split(":", 1)[0]
        counts[category] = counts.get(category, 0) + 1
    return counts


def batch_sampler(split: Split, size: int, generator: torch.Generator) -> Callable[[], Any]:
    """A callable drawing a random training mini-batch ``(x, y)`` of ``size`` (for
    :class:`~paramsym.Teleporter`'s ``data``)."""

    def draw() -> tuple[Tensor, Tensor]:
        index = torch.randperm(split.x_train.shape[0], generator=generator)[:size]
        return split.x_train[index], split.y_train[index]

    return draw


def teleport_config(
    steps: int, lr: float, *, max_objective: float = math.inf, max_loss_drift: float = 1e-4
) -> ps.TeleportConfig:
    """The paper's ascent on ‖∇L‖²: ``steps`` steps at ``lr``, no bound on a step's size
    (``max_step_norm=None``); the ascent stops once ‖∇L‖² on the teleport batch exceeds
    ``max_objective`` (the authors' code stops at 100; ``inf``: never). Batches on which the
    action is not exact are allowed, with the loss guard ``max_loss_drift`` (relative)."""
    return ps.TeleportConfig(
        steps=steps,
        lr=lr,
        max_step_norm=None,
        max_objective=max_objective if math.isfinite(max_objective) else None,
        allow_approximate=True,
        max_loss_drift=max_loss_drift,
        keep_worse=True,  # Algorithm 1 applies every teleport, even one that lowers ‖∇L‖
    )


def teleporter(
    model: nn.Module,
    loss_fn: Callable[[Tensor, Tensor], Tensor],
    optimizer: torch.optim.Optimizer,
    symmetries: Sequence[Symmetry],
    *,
    schedule: ps.Schedule,
    data: Callable[[], Any],
    batches: int = 1,
    state_policy: StatePolicy = "keep",
    config: ps.TeleportConfig,
) -> ps.Teleporter:
    """A :class:`~paramsym.Teleporter`; the warning that ``"transform"`` carries momentum
    through a data-dependent action is expected here (the experiment notes say so)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ApproximateActionWarning)
        return ps.Teleporter(
            model,
            loss_fn,
            optimizer,
            schedule=schedule,
            data=data,
            batches_per_teleport=batches,
            state_policy=state_policy,
            symmetries=symmetries,
            config=config,
        )


# -- classification training (Figs 4.6, 4.8, 5.10, 5.11) -----------------------------------------


@dataclass
class Curve:
    """One classification run.

    Attributes:
        train_loss, val_loss, seconds: per epoch 0…E (0: at initialisation; ``seconds`` is the
            cumulative wall-clock time of optimizer steps and teleports).
        grad_norm_sq: per epoch 1…E, the mean squared mini-batch gradient norm.
        epoch_seconds: per epoch 1…E, the time of its optimizer steps (teleports excluded).
        events: one dict per teleport event (epoch, seconds, losses on the whole training set
            before and after, gradient-norm gain on each teleport batch, stopping reasons).
        warnings: paramsym warnings raised by the teleports (see :func:`recorded_warnings`).
    """

    train_loss: list[float] = field(default_factory=list)
    val_loss: list[float] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)
    grad_norm_sq: list[float] = field(default_factory=list)
    epoch_seconds: list[float] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def mean_loss(
    model: nn.Module, loss_fn: Callable[[Tensor, Tensor], Tensor], x: Tensor, y: Tensor
) -> float:
    """Mean loss over ``(x, y)``, evaluated in chunks."""
    chunk = 8192
    with torch.no_grad():
        total = sum(
            float(loss_fn(model(x[i : i + chunk]), y[i : i + chunk])) * len(y[i : i + chunk])
            for i in range(0, x.shape[0], chunk)
        )
    return total / x.shape[0]


def squared_grad_norm(model: nn.Module) -> float:
    """‖∇L‖² of the gradients currently in ``model``'s ``.grad`` fields."""
    return sum(float(p.grad.pow(2).sum()) for p in model.parameters() if p.grad is not None)


def _event_record(event: TeleportEvent, epoch: int, before: float, after: float) -> dict[str, Any]:
    gains = [r.grad_norm_after / r.grad_norm_before for r in event.results]
    return {
        "epoch": epoch,
        "seconds": event.seconds,
        "train_loss_before": before,
        "train_loss_after": after,
        "grad_norm_gain": gains,
        "batch_loss_drift": max(r.max_loss_drift for r in event.results),
        "stopped": [r.stopped for r in event.results],
    }


def train_classifier(
    model: nn.Module,
    tele: ps.Teleporter,
    split: Split,
    *,
    epochs: int,
    batch_size: int,
    order: torch.Generator,
) -> Curve:
    """Train with ``tele`` wrapping the optimizer (it teleports inside ``zero_grad`` when its
    schedule is due; step k is "after k optimizer steps"). The whole-training-set loss right
    before and after each teleport is recorded (outside the clock)."""
    loss_fn = tele.loss_fn
    curve = Curve(
        [mean_loss(model, loss_fn, split.x_train, split.y_train)],
        [mean_loss(model, loss_fn, split.x_val, split.y_val)],
        [0.0],
    )
    clock = 0.0
    n = split.x_train.shape[0]
    for epoch in range(1, epochs + 1):
        permutation = torch.randperm(n, generator=order)
        squared, steps, stepping = 0.0, 0, 0.0
        for start in range(0, n, batch_size):
            if tele.schedule.due(tele.step_count):
                before = mean_loss(model, loss_fn, split.x_train, split.y_train)
                with recorded_warnings(curve.warnings):
                    event = tele.maybe_teleport()
                if event is not None:
                    clock += event.seconds
                    after = mean_loss(model, loss_fn, split.x_train, split.y_train)
                    curve.events.append(_event_record(event, epoch - 1, before, after))
            index = permutation[start : start + batch_size]
            tick = time.perf_counter()
            tele.zero_grad()
            loss_fn(model(split.x_train[index]), split.y_train[index]).backward()
            tele.step()
            stepping += time.perf_counter() - tick
            squared += squared_grad_norm(model)
            steps += 1
        clock += stepping
        curve.epoch_seconds.append(stepping)
        curve.grad_norm_sq.append(squared / steps)
        curve.seconds.append(clock)
        curve.train_loss.append(mean_loss(model, loss_fn, split.x_train, split.y_train))
        curve.val_loss.append(mean_loss(model, loss_fn, split.x_val, split.y_val))
        if not math.isfinite(curve.train_loss[-1]):  # diverged: the rest of the curve is NaN
            missing = epochs - epoch
            curve.train_loss += [math.nan] * missing
            curve.val_loss += [math.nan] * missing
            curve.seconds += [clock] * missing
            curve.grad_norm_sq += [math.nan] * missing
            break
    return curve


@dataclass(frozen=True)
class Arm:
    """One training configuration of a comparison: optimizer, teleport epochs and batches."""

    label: str
    optimizer: str
    lr: float
    teleport_epochs: tuple[int, ...] = ()
    batches: int = 1
    state_policy: StatePolicy = "keep"


@dataclass(frozen=True)
class ClassifierSetup:
    """What the classification runs of one experiment share."""

    hidden: tuple[int, ...]
    slope: float
    epochs: int
    batch_size: int
    teleport_steps: int
    teleport_lr: float
    teleport_batch_size: int
    max_objective: float = 100.0
    max_loss_drift: float = 1e-4


def run_arm(split: Split, setup: ClassifierSetup, arm: Arm, seed: int, run: int) -> Curve:
    """Train run ``run`` of ``arm`` (teleports at the start of each of ``arm.teleport_epochs``:
    epoch 0 is before training, epoch 1 right after the first epoch)."""
    init, order, teleport_batches = run_seeds(seed, run)
    model = classifier(split.inputs, setup.hidden, setup.slope, init)
    optimizer = make_optimizer(arm.optimizer, model, arm.lr)
    steps_per_epoch = math.ceil(split.x_train.shape[0] / setup.batch_size)
    schedule = (
        ps.Schedule.epochs(arm.teleport_epochs, steps_per_epoch=steps_per_epoch)
        if arm.teleport_epochs
        else ps.Schedule.never()
    )
    tele = teleporter(
        model,
        nn.CrossEntropyLoss(),
        optimizer,
        layer_pair_actions(model, "pinv_GL"),
        schedule=schedule,
        data=batch_sampler(split, setup.teleport_batch_size, teleport_batches),
        batches=arm.batches,
        state_policy=arm.state_policy,
        config=teleport_config(
            setup.teleport_steps,
            setup.teleport_lr,
            max_objective=setup.max_objective,
            max_loss_drift=setup.max_loss_drift,
        ),
    )
    return train_classifier(
        model, tele, split, epochs=setup.epochs, batch_size=setup.batch_size, order=order
    )


def curve_table(curves: Sequence[tuple[str, int, Curve]]) -> dict[str, dict[str, list[Any]]]:
    """Long-format tables ``curves`` (per epoch 0…E) and ``gradients`` (per epoch 1…E)."""
    per_epoch: dict[str, list[Any]] = {
        k: [] for k in ("arm", "run", "epoch", "train_loss", "val_loss", "seconds")
    }
    gradients: dict[str, list[Any]] = {k: [] for k in ("arm", "run", "epoch", "grad_norm_sq")}
    for label, run, curve in curves:
        for epoch, row in enumerate(
            zip(curve.train_loss, curve.val_loss, curve.seconds, strict=True)
        ):
            for key, value in zip(per_epoch, (label, run, epoch, *row), strict=True):
                per_epoch[key].append(value)
        for epoch, value in enumerate(curve.grad_norm_sq, start=1):
            for key, item in zip(gradients, (label, run, epoch, value), strict=True):
                gradients[key].append(item)
    return {"curves": per_epoch, "gradients": gradients}


def log_area(losses: Sequence[float], first: int = 1, last: int | None = None) -> float:
    """Mean of log10(loss) over epochs ``first``…``last`` (default: to the end): the area
    under a log-scale training curve, lower when training is faster."""
    chosen = losses[first : None if last is None else last + 1]
    if not all(math.isfinite(v) for v in chosen):
        return math.inf  # diverged
    return statistics.fmean(math.log10(max(v, 1e-30)) for v in chosen)


def log_ratio(treated: Sequence[float], baseline: Sequence[float], first: int, last: int) -> float:
    """Mean over epochs ``first``…``last`` of log10(treated / baseline) (< 0: treated lower)."""
    return log_area(treated, first, last) - log_area(baseline, first, last)


def _mean_std(values: Sequence[float]) -> tuple[float, float]:
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else 0.0)


def _pm(values: Sequence[float], digits: int = 3) -> str:
    mean, std = _mean_std(values)
    return f"{mean:.{digits}f} ± {std:.{digits}f}" if len(values) > 1 else f"{mean:.{digits}f}"


def teleport_notes(curves: Sequence[Curve]) -> list[str]:
    """Why the teleports' ascents stopped, and the warnings they raised, over ``curves``."""
    stops: dict[str, int] = {}
    for reason in (r for c in curves for e in c.events for r in e["stopped"]):
        stops[reason] = stops.get(reason, 0) + 1
    counts = warning_counts([w for c in curves for w in c.warnings])
    notes = [f"teleport ascents per stopping reason: {stops}"]
    if counts:
        notes.append(
            f"teleport warnings: {counts} (ApproximateActionWarning: the action is not exact on "
            "a teleport batch; TeleportDriftWarning: an ascent stopped early because every "
            "shrunken step broke the loss guard or was not finite)"
        )
    return notes


def teleport_cost(curves: Sequence[Curve]) -> tuple[float, float, float]:
    """(mean teleport-event seconds, mean epoch seconds, their ratio), measured in the same
    run: the epochs of the curves that teleported, without their teleports."""
    events = [e["seconds"] for c in curves for e in c.events]
    epochs = [s for c in curves if c.events for s in c.epoch_seconds]
    if not events or not epochs:
        return math.nan, math.nan, math.nan
    event, epoch = statistics.fmean(events), statistics.fmean(epochs)
    return event, epoch, event / epoch


# -- plotting helpers -----------------------------------------------------------------------------


def log_bands(table: Mapping[str, list[Any]], value: str, x: str = "epoch") -> dict[str, Any]:
    """``{arm: (xs, centre, lower, upper)}`` over runs from a long-format table, for log axes:
    the geometric mean and ±1 standard deviation of log10(value) (diverged runs give gaps)."""
    out: dict[str, Any] = {}
    for arm in dict.fromkeys(table["arm"]):
        rows = [i for i, a in enumerate(table["arm"]) if a == arm]
        runs = sorted({table["run"][i] for i in rows})
        values, xs = (
            np.array([[float(table[c][i]) for i in rows if table["run"][i] == r] for r in runs])
            for c in (value, x)
        )
        with np.errstate(divide="ignore", invalid="ignore"):
            logs = np.log10(np.where(values > 0, values, np.nan))
        mean, std = logs.mean(axis=0), logs.std(axis=0)
        out[arm] = (xs.mean(axis=0), 10**mean, 10 ** (mean - std), 10 ** (mean + std))
    return out


def plot_band(axes: Any, xs: Any, centre: Any, lower: Any, upper: Any, **style: Any) -> None:
    """One of :func:`log_bands`'s arms: the centre line and, where it has width, the band."""
    axes.plot(xs, centre, **style)
    if np.nanmax(upper - lower, initial=0.0) > 0:
        axes.fill_between(xs, lower, upper, color=style.get("color"), alpha=0.2)


def plot_losses(
    axes: Any,
    table: Mapping[str, list[Any]],
    arms: Sequence[str],
    colours: Mapping[str, str],
    x: str = "epoch",
    labels: Mapping[str, str] | None = None,
) -> None:
    """Training loss solid, validation loss dashed (geometric mean ± std over runs), log y."""
    train = log_bands(table, "train_loss", x)
    val = log_bands(table, "val_loss", x)
    for arm in arms:
        name = (labels or {}).get(arm, arm)
        plot_band(axes, *train[arm], color=colours[arm], label=f"{name} (train)")
        plot_band(axes, *val[arm], color=colours[arm], linestyle="--", label=f"{name} (val)")
    axes.set_yscale("log")
    axes.set_xlabel("epoch" if x == "epoch" else "wall-clock time (s)")
    axes.set_ylabel("loss")


def _palette(labels: Sequence[str]) -> dict[str, str]:
    cycle = plt.get_cmap("viridis")
    count = max(len(labels) - 1, 1)
    return {label: cycle(i / count) for i, label in enumerate(labels)}  # type: ignore[misc]


# -- teleport-mnist (Fig 4.6) ---------------------------------------------------------------------


@dataclass(frozen=True)
class TeleportMnistConfig:
    """Settings of ``teleport-mnist`` (dissertation §4.6.1, Fig 4.6).

    Attributes:
        seed: base seed; run r uses ``seed·1000 + r`` (init, batch order, teleport batches).
        dataset, data_dir: ``"digits"`` (quick) or ``"mnist"`` (48 000 / 12 000 split).
        hidden, slope: hidden widths (paper: 512, 512) and the LeakyReLU slope (0.1, chosen).
        epochs, batch_size: paper 80 and 20.
        sgd_lr: paper 2e-3. On digits an epoch has 68 steps instead of 2400, so the quick
            preset uses 5e-2 (about the same lr × steps per epoch).
        adagrad_lr: not stated in the paper; 1e-2 (the authors' ch. 5 MNIST AdaGrad lr).
        teleport_epoch: teleport at the start of this epoch (1: right after the first epoch).
        teleport_batches, teleport_batch_size, teleport_steps, teleport_lr: 4 mini-batches of
            20, one after another, 10 ascent steps each at 1e-3 (paper).
        max_objective: the ascent on a batch stops once ‖∇L‖² exceeds it (the authors' code:
            100; ``inf`` for none).
        runs: runs per arm (mean ± std in the figure and claims).
        threads: torch intra-op threads during the run (0: unchanged).
    """

    seed: int = 0
    dataset: str = "digits"
    data_dir: str | None = None
    hidden: tuple[int, ...] = (64, 64)
    slope: float = 0.1
    epochs: int = 15
    batch_size: int = 20
    sgd_lr: float = 5e-2
    adagrad_lr: float = 1e-2
    teleport_epoch: int = 1
    teleport_batches: int = 4
    teleport_batch_size: int = 20
    teleport_steps: int = 10
    teleport_lr: float = 1e-3
    max_objective: float = 100.0
    runs: int = 5
    threads: int = 1


def _mnist_setup(config: Any) -> ClassifierSetup:
    return ClassifierSetup(
        hidden=tuple(config.hidden),
        slope=config.slope,
        epochs=config.epochs,
        batch_size=config.batch_size,
        teleport_steps=config.teleport_steps,
        teleport_lr=config.teleport_lr,
        teleport_batch_size=config.teleport_batch_size,
        max_objective=config.max_objective,
        max_loss_drift=getattr(config, "max_loss_drift", 1e-4),
    )


def run_teleport_mnist(config: TeleportMnistConfig, progress: Progress) -> Result:
    """Fig 4.6: SGD and AdaGrad, each with and without one teleport (4 batches)."""
    with torch_threads(config.threads):
        split = load_split(config.dataset, config.data_dir, config.seed, holdout="validation")
        setup = _mnist_setup(config)
        arms = []
        for name, lr in (("sgd", config.sgd_lr), ("adagrad", config.adagrad_lr)):
            arms.append(Arm(f"{LABELS[name]}", name, lr))
            arms.append(
                Arm(
                    f"{LABELS[name]} + teleport",
                    name,
                    lr,
                    (config.teleport_epoch,),
                    config.teleport_batches,
                )
            )
        jobs = [(arm, run) for run in range(config.runs) for arm in arms]
        curves = [
            (arm.label, run, run_arm(split, setup, arm, config.seed, run))
            for arm, run in progress.track(jobs, total=len(jobs), description="teleport-mnist")
        ]
    return _summarise_pairs(curves, [("SGD", "sgd"), ("AdaGrad", "adagrad")], config, split)


def _summarise_pairs(
    curves: Sequence[tuple[str, int, Curve]],
    pairs: Sequence[tuple[str, str]],
    config: Any,
    split: Split,
    early_epochs: int | None = None,
) -> Result:
    """Metrics for "optimizer" vs "optimizer + teleport" pairs: per run the mean log10 ratio
    of training losses over the epochs after the (first) teleport (and over the first
    ``early_epochs``), final losses, best validation losses and their epochs, and the cost."""
    by = {(label, run): curve for label, run, curve in curves}
    runs = sorted({run for _, run, _ in curves})
    first = max(int(getattr(config, "teleport_epoch", 0)), 0) + 1
    metrics: dict[str, Any] = {
        "dataset": split.name,
        "train_size": int(split.x_train.shape[0]),
        "val_size": int(split.x_val.shape[0]),
    }
    for label, key in pairs:
        base = [by[(label, r)] for r in runs]
        tele = [by[(f"{label} + teleport", r)] for r in runs]
        last = len(base[0].train_loss) - 1
        ratios = [
            log_ratio(t.train_loss, b.train_loss, first, last)
            for t, b in zip(tele, base, strict=True)
        ]
        metrics[f"{key}_train_log_ratio"] = statistics.fmean(ratios)
        metrics[f"{key}_train_log_ratio_per_run"] = ratios
        if early_epochs:
            early = [
                log_ratio(t.train_loss, b.train_loss, 1, min(early_epochs, last))
                for t, b in zip(tele, base, strict=True)
            ]
            metrics[f"{key}_early_log_ratio"] = statistics.fmean(early)
            metrics[f"{key}_early_log_ratio_per_run"] = early
        for arm, group in (("base", base), ("teleport", tele)):
            metrics[f"{key}_{arm}_final_train"] = statistics.fmean(c.train_loss[-1] for c in group)
            metrics[f"{key}_{arm}_final_val"] = statistics.fmean(c.val_loss[-1] for c in group)
            metrics[f"{key}_{arm}_best_val"] = statistics.fmean(
                float(np.nanmin(c.val_loss)) for c in group
            )
            metrics[f"{key}_{arm}_best_val_epoch"] = statistics.fmean(
                int(np.nanargmin(c.val_loss)) for c in group
            )
        events = [e for c in tele for e in c.events]
        metrics[f"{key}_grad_norm_gain"] = statistics.fmean(
            g for e in events for g in e["grad_norm_gain"]
        )
        metrics[f"{key}_train_loss_jump"] = statistics.fmean(
            e["train_loss_after"] / e["train_loss_before"] for e in events
        )
    event, epoch, ratio = teleport_cost([c for _, _, c in curves])
    metrics.update(
        {
            "teleport_seconds": event,
            "epoch_seconds": epoch,
            "teleport_over_epoch": ratio,
            "steps_per_epoch": math.ceil(split.x_train.shape[0] / config.batch_size),
        }
    )
    notes = [
        f"runs: {len(runs)}; training loss on the whole training set after each epoch",
        *teleport_notes([c for _, _, c in curves]),
        "the pseudo-inverse action (Eq. 4.16) with fewer teleport samples than hidden units "
        "keeps the loss on the teleport batch but, like the authors' code, projects the "
        "outgoing weights onto the span of that batch's hidden activations (the identity "
        "element is a projection there); train_loss_jump is the whole-training-set loss "
        "after / before each teleport",
    ]
    return Result(metrics, curve_table(curves), notes)


def _pair_claim(key: str, label: str) -> Callable[[Result], tuple[str, bool]]:
    def check(result: Result) -> tuple[str, bool]:
        m = result.metrics
        per_run = m[f"{key}_train_log_ratio_per_run"]
        return (
            f"mean log10(L_teleport / L) after the teleport = {_pm(per_run)} over "
            f"{len(per_run)} runs; final training loss {m[f'{key}_teleport_final_train']:.4f} "
            f"with vs {m[f'{key}_base_final_train']:.4f} without; gradient-norm gain on the "
            f"teleport batches ×{m[f'{key}_grad_norm_gain']:.3f}, training-set loss ×"
            f"{m[f'{key}_train_loss_jump']:.3f} at the teleport",
            m[f"{key}_train_log_ratio"] < 0,
        )

    check.__name__ = f"{key}_faster"
    return check


def _cost_claim(result: Result) -> tuple[str, bool]:
    m = result.metrics
    steps = m["teleport_seconds"] / (m["epoch_seconds"] / m["steps_per_epoch"])
    return (
        f"teleport {m['teleport_seconds']:.3f} s vs epoch {m['epoch_seconds']:.3f} s: ratio "
        f"{m['teleport_over_epoch']:.2f} (a teleport costs {steps:.0f} optimizer steps; "
        f"an epoch here has {m['steps_per_epoch']})",
        m["teleport_over_epoch"] < 1,
    )


def _validation_claim(result: Result) -> tuple[str, bool]:
    m = result.metrics
    parts, holds = [], True
    for key, label in (("sgd", "SGD"), ("adagrad", "AdaGrad")):
        ratio = m[f"{key}_teleport_best_val"] / m[f"{key}_base_best_val"]
        holds = holds and ratio > 0.95
        parts.append(
            f"{label}: best val {m[f'{key}_teleport_best_val']:.4f} (epoch "
            f"{m[f'{key}_teleport_best_val_epoch']:.1f}) with vs {m[f'{key}_base_best_val']:.4f} "
            f"(epoch {m[f'{key}_base_best_val_epoch']:.1f}) without, ratio {ratio:.3f}"
        )
    return "; ".join(parts), holds


def plot_teleport_mnist(result: Result) -> dict[str, Any]:
    """Fig 4.6: (a, b) training (solid) and validation (dashed) loss, (c, d) gradient norm."""
    figure, axes = plt.subplots(2, 2, figsize=(11, 8.5))
    table, gradients = result.series["curves"], result.series["gradients"]
    for column, name in enumerate(("SGD", "AdaGrad")):
        arms = [name, f"{name} + teleport"]
        colours = dict(zip(arms, (COLOURS["no teleport"], COLOURS["teleport"]), strict=True))
        plot_losses(axes[0, column], table, arms, colours)
        axes[0, column].set_title(f"({'ab'[column]}) {name}: loss")
        axes[0, column].legend(fontsize=8)
        grads = log_bands(gradients, "grad_norm_sq")
        for arm in arms:
            plot_band(axes[1, column], *grads[arm], color=colours[arm], label=arm)
        axes[1, column].set_yscale("log")
        axes[1, column].set_xlabel("epoch")
        axes[1, column].set_ylabel("mean ‖∇L‖² of the epoch's mini-batches")
        axes[1, column].set_title(f"({'cd'[column]}) {name}: gradient norm")
        axes[1, column].legend(fontsize=8)
    figure.suptitle(f"teleport after the first epoch ({result.metrics['dataset']}), Fig 4.6")
    figure.tight_layout()
    return {"teleport_mnist.png": figure}


experiment(
    "teleport-mnist",
    seed_ref="seed 001, §4.6.1, Fig 4.6",
    description=(
        "MLP classifier (LeakyReLU 0.1, no biases) trained with SGD and AdaGrad, with and "
        "without one teleport right after the first epoch on 4 mini-batches of 20, one after "
        "another, 10 ascent steps each at lr 1e-3 on the pseudo-inverse GL action (Eq. 4.16) "
        "between every pair of layers, ‖∇L‖² objective, AdaGrad state kept. Chosen where the "
        "paper is silent: AdaGrad lr 1e-2, no biases, losses on the whole training set after "
        "each epoch; quick: digits, 64-64 hidden, SGD lr 5e-2 (68 steps per epoch), 15 "
        "epochs, 5 runs"
    ),
    data="digits (quick); MNIST IDX files in --data-dir (paper)",
    presets={
        "quick": TeleportMnistConfig(),
        "paper": TeleportMnistConfig(
            dataset="mnist",
            hidden=(512, 512),
            epochs=80,
            sgd_lr=2e-3,
            runs=1,
            threads=0,
        ),
    },
    claims=[
        Claim(
            "SGD: the training loss decreases faster with teleportation",
            "seed 001, Fig 4.6a",
            "training loss with teleport below SGD alone after the teleport (mean log ratio < 0)",
            _pair_claim("sgd", "SGD"),
        ),
        Claim(
            "AdaGrad with teleportation trains faster than AdaGrad",
            "seed 001, Fig 4.6b (issue: teleport + AdaGrad beats AdaGrad on MNIST-like data)",
            "training loss with teleport below AdaGrad alone after the teleport",
            _pair_claim("adagrad", "AdaGrad"),
        ),
        Claim(
            "one teleport costs less than one epoch",
            "seed 001, §4.6.4, §5.4.2",
            "teleport wall-clock / epoch wall-clock < 1 (same run)",
            _cost_claim,
        ),
        Claim(
            "the effect on validation loss is limited (detrimental for AdaGrad)",
            "seed 001, §4.6.1 (Fig 4.6 dashed lines)",
            "teleport does not lower the best validation loss by more than 5%",
            _validation_claim,
        ),
    ],
    plot=plot_teleport_mnist,
)(run_teleport_mnist)


# -- teleport-schedules (Fig 4.8) -----------------------------------------------------------------


@dataclass(frozen=True)
class SchedulesConfig:
    """Settings of ``teleport-schedules`` (dissertation §4.6.3, Fig 4.8): SGD, batch 20, 10
    ascent steps per teleport batch; the legends' lists are not in the text (chosen here).

    Attributes:
        seed, dataset, data_dir, hidden, slope, batch_size, runs, threads: as in
            ``teleport-mnist``.
        epochs: not stated (the paper's MNIST runs: 80); quick 18.
        lr: SGD lr (paper 2e-3; quick 5e-2 on digits, see ``teleport-mnist``).
        teleport_lr, teleport_steps, teleport_batch_size: 1e-3 (as Fig 4.6), 10, 20.
        max_objective: ‖∇L‖² cap of the ascent (the authors' code: 100).
        once_epochs: (a) teleport once, on ``once_batches`` batches, at the start of each listed
            epoch (0: before training, 1: right after the first epoch).
        intervals: (b) 4 single-batch teleports at epochs 1, 1 + k, 1 + 2k, 1 + 3k for each k.
        batch_counts: (c) one teleport right after the first epoch on this many batches.
    """

    seed: int = 0
    dataset: str = "digits"
    data_dir: str | None = None
    hidden: tuple[int, ...] = (32, 32)
    slope: float = 0.1
    epochs: int = 18
    batch_size: int = 20
    lr: float = 5e-2
    teleport_lr: float = 1e-3
    teleport_steps: int = 10
    teleport_batch_size: int = 20
    max_objective: float = 100.0
    once_epochs: tuple[int, ...] = (0, 1, 2, 4, 8)
    once_batches: int = 4
    intervals: tuple[int, ...] = (1, 2, 3, 4, 5)
    interval_teleports: int = 4
    batch_counts: tuple[int, ...] = (1, 2, 4, 8)
    runs: int = 2
    threads: int = 1


def schedule_arms(config: SchedulesConfig) -> dict[str, list[Arm]]:
    """The arms of the three panels (labels are the paper's legend style: epoch lists)."""

    def arm(label: str, epochs: Sequence[int], batches: int) -> Arm:
        return Arm(label, "sgd", config.lr, tuple(epochs), batches)

    spaced = {k: [1 + i * k for i in range(config.interval_teleports)] for k in config.intervals}
    for k, epochs in spaced.items():
        if epochs[-1] >= config.epochs:
            raise InvalidArgumentError(
                f"teleport-schedules: interval {k} teleports at epoch {epochs[-1]}, past the "
                f"{config.epochs} epochs; raise epochs or lower the intervals"
            )
    return {
        "a": [arm(f"{[e]}", [e], config.once_batches) for e in config.once_epochs],
        "b": [arm(f"{epochs}", epochs, 1) for epochs in spaced.values()],
        "c": [arm(f"{n} batch{'es' if n > 1 else ''}", [1], n) for n in config.batch_counts],
    }


def run_schedules(config: SchedulesConfig, progress: Progress) -> Result:
    """Fig 4.8 (a)-(c); identical arms (same teleport epochs and batches) are trained once."""
    with torch_threads(config.threads):
        split = load_split(config.dataset, config.data_dir, config.seed, holdout="validation")
        setup = _mnist_setup(config)
        panels = schedule_arms(config)
        baseline = Arm("no teleport", "sgd", config.lr)
        unique: dict[tuple[tuple[int, ...], int], Arm] = {(baseline.teleport_epochs, 1): baseline}
        for arms in panels.values():
            for arm in arms:
                unique.setdefault((arm.teleport_epochs, arm.batches), arm)
        jobs = [(key, run) for run in range(config.runs) for key in unique]
        trained = {
            (key, run): run_arm(split, setup, unique[key], config.seed, run)
            for key, run in progress.track(jobs, total=len(jobs), description="schedules")
        }
    curves = [("no teleport", r, trained[((), 1), r]) for r in range(config.runs)]
    metrics: dict[str, Any] = {"dataset": split.name, "panels": {}}
    for panel, arms in panels.items():
        metrics["panels"][panel] = [a.label for a in arms]
        for arm in arms:
            for r in range(config.runs):
                curves.append(
                    (f"{panel}: {arm.label}", r, trained[(arm.teleport_epochs, arm.batches), r])
                )
    areas: dict[str, float] = {}
    gaps: dict[str, float] = {}
    gains: dict[str, float] = {}
    for label in dict.fromkeys(label for label, _, _ in curves):
        group = [c for name, _, c in curves if name == label]
        areas[label] = statistics.fmean(log_area(c.train_loss) for c in group)
        gaps[label] = statistics.fmean(c.val_loss[-1] - c.train_loss[-1] for c in group)
        events = [g for c in group for e in c.events for g in e["grad_norm_gain"]]
        if events:
            gains[label] = max(events)
    metrics["log_area"] = areas
    metrics["final_gap"] = gaps
    metrics["max_grad_norm_gain"] = gains
    metrics["diverged"] = [label for label, area in areas.items() if not math.isfinite(area)]
    metrics["once_epochs"] = list(config.once_epochs)
    metrics["intervals"] = list(config.intervals)
    metrics["batch_counts"] = list(config.batch_counts)
    event, epoch, ratio = teleport_cost([c for _, _, c in curves])
    metrics.update(
        {"teleport_seconds": event, "epoch_seconds": epoch, "teleport_over_epoch": ratio}
    )
    notes = [
        "log_area: mean over epochs 1…E of log10(training loss on the whole training set), "
        "lower = faster training (inf: diverged); final_gap: validation minus training loss at "
        "the end; max_grad_norm_gain: largest ‖∇L‖ after / before over the teleport batches",
        f"runs per arm: {config.runs}; identical arms shared between panels",
        *teleport_notes([c for _, _, c in curves]),
    ]
    return Result(metrics, curve_table(curves), notes)


def _panel_values(result: Result, panel: str, table: str = "log_area") -> list[float]:
    return [result.metrics[table][f"{panel}: {label}"] for label in result.metrics["panels"][panel]]


def _spearman(xs: Sequence[float], ys: Sequence[float]) -> float:
    # rounded: a rank correlation is a ratio of small integers, and ρ = 0.8 must not compare
    # as 0.7999999999999999 against the 0.8 thresholds below
    return round(float(scipy.stats.spearmanr(xs, ys).statistic), 12) if len(xs) > 2 else math.nan


def _listing(labels: Sequence[Any], values: Sequence[float]) -> str:
    return ", ".join(f"{label}: {value:.3f}" for label, value in zip(labels, values, strict=True))


def _before_training_worst(result: Result) -> tuple[str, bool]:
    epochs, areas = result.metrics["once_epochs"], _panel_values(result, "a")
    base = result.metrics["log_area"]["no teleport"]
    if 0 not in epochs:
        return "no teleport before training in this config", False
    at_zero = areas[epochs.index(0)]
    others = [a for e, a in zip(epochs, areas, strict=True) if e != 0]
    return (
        f"log-area per teleport epoch {_listing(epochs, areas)} (no teleport {base:.3f})",
        at_zero > max(others),
    )


def _earlier_stronger(result: Result) -> tuple[str, bool]:
    epochs, areas = result.metrics["once_epochs"], _panel_values(result, "a")
    kept = [(e, a) for e, a in zip(epochs, areas, strict=True) if e >= 1]
    rho = _spearman([e for e, _ in kept], [a for _, a in kept])
    return f"Spearman ρ(teleport epoch ≥ 1, log-area) = {rho:.2f}", rho >= 0.8


def _intervals_claim(result: Result) -> tuple[str, bool]:
    intervals, areas = result.metrics["intervals"], _panel_values(result, "b")
    rho = _spearman(intervals, areas)
    return (
        f"log-area per interval {_listing(intervals, areas)}; Spearman ρ = {rho:.2f}",
        rho >= 0.8,
    )


def _batches_faster(result: Result) -> tuple[str, bool]:
    counts, areas = result.metrics["batch_counts"], _panel_values(result, "c")
    rho = _spearman(counts, areas)
    return (
        f"log-area per number of batches {_listing(counts, areas)}; Spearman ρ = {rho:.2f}",
        rho <= -0.8,
    )


def _batches_overfit(result: Result) -> tuple[str, bool]:
    counts, gaps = result.metrics["batch_counts"], _panel_values(result, "c", "final_gap")
    rho = _spearman(counts, gaps)
    return (
        f"final val − train loss per number of batches {_listing(counts, gaps)}; "
        f"Spearman ρ = {rho:.2f}",
        rho >= 0.8,
    )


def plot_schedules(result: Result) -> dict[str, Any]:
    """Fig 4.8: training (solid) and validation (dashed) loss per schedule, three panels."""
    figure, axes = plt.subplots(1, 3, figsize=(17, 5.2), sharey=True)
    titles = {
        "a": "(a) one teleport (4 batches) at epoch",
        "b": "(b) 4 single-batch teleports at epochs",
        "c": "(c) one teleport after epoch 1 on n batches",
    }
    table = result.series["curves"]
    for ax, (panel, labels) in zip(axes, result.metrics["panels"].items(), strict=True):
        arms = ["no teleport", *(f"{panel}: {label}" for label in labels)]
        colours = {"no teleport": "black", **_palette(arms[1:])}
        names = {arm: arm.split(": ", 1)[-1] for arm in arms}
        plot_losses(ax, table, arms, colours, labels=names)
        ax.set_title(titles[panel])
        ax.legend(fontsize=7, ncol=2)
    figure.suptitle(f"teleportation schedules with SGD ({result.metrics['dataset']}), Fig 4.8")
    figure.tight_layout()
    return {"teleport_schedules.png": figure}


experiment(
    "teleport-schedules",
    seed_ref="seed 001, §4.6.3, Fig 4.8",
    description=(
        "SGD (batch 20) on an MLP classifier with teleports (pseudo-inverse action, 10 ascent "
        "steps at lr 1e-3 per batch of 20): (a) once on 4 batches at epoch 0 (before training), "
        "1, 2, 4, 8; (b) 4 single-batch teleports at epochs 1 + i·k, k = 1…5; (c) once after "
        "the first epoch on 1, 2, 4, 8 batches. Legends, epochs and the interval unit (epochs) "
        "are not in the text: chosen here; quick: digits, 32-32 hidden, SGD lr 5e-2, 18 epochs"
    ),
    data="digits (quick); MNIST IDX files in --data-dir (paper)",
    presets={
        "quick": SchedulesConfig(),
        "paper": SchedulesConfig(
            dataset="mnist",
            hidden=(512, 512),
            epochs=40,
            lr=2e-3,
            batch_counts=(1, 2, 4, 8, 16),
            threads=0,
        ),
    },
    claims=[
        Claim(
            "teleporting before training has the worst performance",
            "seed 001, Fig 4.8a",
            "largest training log-area among the single teleports of (a)",
            _before_training_worst,
        ),
        Claim(
            "after epoch 0, the effect of a teleport is stronger when applied earlier",
            "seed 001, Fig 4.8a",
            "training log-area increases with the teleport epoch (Spearman ρ ≥ 0.8)",
            _earlier_stronger,
        ),
        Claim(
            "smaller intervals between teleports accelerate convergence more",
            "seed 001, Fig 4.8b",
            "training log-area increases with the interval (Spearman ρ ≥ 0.8)",
            _intervals_claim,
        ),
        Claim(
            "more teleport mini-batches give a faster decrease of the training loss",
            "seed 001, Fig 4.8c",
            "training log-area decreases with the number of batches (Spearman ρ ≤ −0.8)",
            _batches_faster,
        ),
        Claim(
            "more teleport mini-batches overfit more",
            "seed 001, Fig 4.8c",
            "final validation − training loss increases with the number of batches (ρ ≥ 0.8)",
            _batches_overfit,
        ),
    ],
    plot=plot_schedules,
)(run_schedules)


# -- teleport-optimizers (Figs 5.9-5.11) ----------------------------------------------------------


def half_squared_error(output: Tensor, target: Tensor) -> Tensor:
    """0.5 ‖Y − f(X)‖²_F, the authors' regression loss (the text writes ‖·‖₂; notes §9 item 6)."""
    return 0.5 * (output - target).pow(2).sum()


def regression_problem(seed: int, widths: Sequence[int] = (5, 6, 7, 8), samples: int = 4) -> Any:
    """The ch. 4 regression (§4.6.1): f = W₃σ(W₂σ(W₁X)), LeakyReLU(0.1), no biases; W₁ 6×5,
    W₂ 7×6, W₃ 8×7, X 5×4, Y 8×4 (rows are samples here), every entry U[0, 1], float64."""
    generator = torch.Generator().manual_seed(seed)
    model = ps.mlp(list(widths), nn.LeakyReLU(0.1), bias=False, seed=seed, dtype=torch.float64)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.rand(p.shape, generator=generator, dtype=torch.float64))
    data = paramsym.data.uniform_regression(
        n_samples=samples,
        in_features=widths[0],
        out_features=widths[-1],
        seed=seed,
        dtype=torch.float64,
    )
    return model, data.train


@dataclass
class Trajectory:
    """Per optimizer step of a full-batch regression run: loss and ‖∇L‖² before the step."""

    loss: list[float] = field(default_factory=list)
    grad_norm_sq: list[float] = field(default_factory=list)
    teleport: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


def train_regression(model: nn.Module, tele: ps.Teleporter, batch: Any, steps: int) -> Trajectory:
    """Full-batch training with ``tele`` wrapping the optimizer (it teleports when due)."""
    x, y = batch
    out = Trajectory()
    for _ in range(steps):
        with recorded_warnings(out.warnings):
            tele.zero_grad()
        loss = tele.loss_fn(model(x), y)
        loss.backward()
        out.loss.append(float(loss.detach()))
        out.grad_norm_sq.append(squared_grad_norm(model))
        tele.step()
    if tele.history:
        result = tele.history[0].results[0]
        out.teleport = {
            "grad_norm_gain": result.grad_norm_after / result.grad_norm_before,
            "loss_drift": result.max_loss_drift,
            "steps": result.steps,
            "stopped": result.stopped,
        }
    return out


@dataclass(frozen=True)
class RegressionArm:
    """A regression run's optimizer and teleport (``teleport_steps = 0``: no ascent, only the
    state policy; ``teleport=False``: never)."""

    label: str
    optimizer: str
    lr: float
    teleport: bool = True
    state_policy: StatePolicy = "keep"
    objective: str = "grad_norm"
    teleport_lr: float = 1e-7
    teleport_steps: int = 8


@dataclass(frozen=True)
class OptimizersConfig:
    """Settings of ``teleport-optimizers`` (dissertation §5.4, Figs 5.9-5.11).

    Regression (Fig 5.9; the ch. 4 problem, 5 runs, 300 steps, one teleport at step 5 with
    the exact action of Eq. 4.13 on both layer pairs, as the authors' regression code):

    Attributes:
        regression_runs, regression_steps, teleport_step: 5, 300, 5.
        momentum_lr: momentum SGD (β = 0.9) lr, not stated; 1e-4 (the ch. 4 GD lr).
        momentum_teleport_lr, momentum_teleport_steps: not stated; the ch. 4 GD teleport
            (8 steps at 1e-7).
        adagrad_lr: 1e-1 (ch. 4). adagrad_teleport_steps: not stated; 2 (the ch. 4 AdaGrad
            teleport). grad_norm_teleport_lr, preconditioned_teleport_lr: 1.2e-5 and 7.5e-3
            (paper: the largest that do not diverge).

    Classifier (Figs 5.10, 5.11):

    Attributes:
        dataset, data_dir: ``"digits"`` or ``"mnist"`` (50 000 train, official 10 000 test).
        hidden: 16, 10 (paper). epochs: 40 in the authors' code; quick 10. batch_size: 20.
        optimizers, learning_rates: text: AdaGrad 1e-4, others 5e-2; the authors' code:
            AdaGrad 1e-2, momentum 1e-3, RMSProp 1e-4, Adam 1e-4 (used in the paper preset,
            notes §9 item 9); quick: ten times those (digits has 68 steps per epoch, not 2500),
            AdaGrad 1e-1.
        teleport_epoch: 0 ("at the first epoch"; the authors' code: epoch 0, AdaGrad epoch 2).
        teleport_batches, teleport_batch_size, teleport_steps, teleport_lr: 8 × 200, 10, 5e-2.
        max_objective: ‖∇L‖² cap of the ascent (the authors' code: 100).
        max_loss_drift: relative loss change allowed per ascent step on the teleport batch;
            200 samples > 16 hidden units makes the action approximate, and the authors' code
            has no guard: 1e-2 here.
        runs, threads, seed, slope: as in ``teleport-mnist``; the state policy is "reset" (the
            authors' code re-creates the optimizer after teleporting).
    """

    seed: int = 0
    regression_runs: int = 5
    regression_steps: int = 300
    teleport_step: int = 5
    momentum_lr: float = 1e-4
    momentum_teleport_lr: float = 1e-7
    momentum_teleport_steps: int = 8
    adagrad_lr: float = 1e-1
    adagrad_teleport_steps: int = 2
    grad_norm_teleport_lr: float = 1.2e-5
    preconditioned_teleport_lr: float = 7.5e-3
    dataset: str = "digits"
    data_dir: str | None = None
    hidden: tuple[int, ...] = (16, 10)
    slope: float = 0.1
    epochs: int = 10
    batch_size: int = 20
    optimizers: tuple[str, ...] = ("adagrad", "momentum", "rmsprop", "adam")
    learning_rates: tuple[float, ...] = (1e-1, 1e-2, 1e-3, 1e-3)
    teleport_epoch: int = 0
    teleport_batches: int = 8
    teleport_batch_size: int = 200
    teleport_steps: int = 10
    teleport_lr: float = 5e-2
    max_objective: float = 100.0
    max_loss_drift: float = 1e-2
    early_epochs: int = 3
    runs: int = 3
    threads: int = 1


def regression_arms(config: OptimizersConfig) -> dict[str, list[RegressionArm]]:
    """Fig 5.9 (a) momentum policies (and a reset-only control), (b) AdaGrad objectives."""
    momentum = RegressionArm(
        "no teleport",
        "momentum",
        config.momentum_lr,
        teleport=False,
        teleport_lr=config.momentum_teleport_lr,
        teleport_steps=config.momentum_teleport_steps,
    )
    adagrad = RegressionArm(
        "no teleport",
        "adagrad",
        config.adagrad_lr,
        teleport=False,
        teleport_steps=config.adagrad_teleport_steps,
    )
    return {
        "momentum": [
            momentum,
            *(
                replace(momentum, label=policy, teleport=True, state_policy=policy)
                for policy in ("transform", "keep", "reset")
            ),
            replace(
                momentum,
                label="reset only (control)",
                teleport=True,
                state_policy="reset",
                teleport_steps=0,
            ),
        ],
        "adagrad": [
            adagrad,
            replace(
                adagrad, label="‖∇L‖₂²", teleport=True, teleport_lr=config.grad_norm_teleport_lr
            ),
            replace(
                adagrad,
                label="‖∇L‖²_A",
                teleport=True,
                objective="preconditioned_grad_norm",
                teleport_lr=config.preconditioned_teleport_lr,
            ),
        ],
    }


def run_regression_arm(arm: RegressionArm, seed: int, steps: int, at: int) -> Trajectory:
    """One regression run of ``arm`` (the problem drawn from ``seed``): teleport before step
    ``at`` with the first-order group element I + T (§4.6.1) on the exact action (4.13)."""
    model, batch = regression_problem(seed)
    optimizer = make_optimizer(arm.optimizer, model, arm.lr)
    tele = teleporter(
        model,
        half_squared_error,
        optimizer,
        layer_pair_actions(model, "inverse_GL"),
        schedule=ps.Schedule.at([at]) if arm.teleport else ps.Schedule.never(),
        data=lambda: batch,
        state_policy=arm.state_policy,
        config=ps.TeleportConfig(
            objective=arm.objective,
            steps=arm.teleport_steps,
            lr=arm.teleport_lr,
            parameterization="first_order",
            max_step_norm=None,
            allow_approximate=True,
            keep_worse=True,  # Algorithm 1 applies every teleport
        ),
    )
    return train_regression(model, tele, batch, steps)


def classifier_arms(config: OptimizersConfig) -> list[Arm]:
    if len(config.optimizers) != len(config.learning_rates):
        raise InvalidArgumentError(
            "teleport-optimizers: optimizers and learning_rates must have the same length"
        )
    arms = []
    for name, lr in zip(config.optimizers, config.learning_rates, strict=True):
        arms.append(Arm(LABELS[name], name, lr))
        arms.append(
            Arm(
                f"{LABELS[name]} + teleport",
                name,
                lr,
                (config.teleport_epoch,),
                config.teleport_batches,
                "reset",
            )
        )
    return arms


def run_optimizers(config: OptimizersConfig, progress: Progress) -> Result:
    """Fig 5.9 (regression: momentum policies, AdaGrad objectives) and Figs 5.10-5.11."""
    with torch_threads(config.threads):
        split = load_split(config.dataset, config.data_dir, config.seed, holdout="test")
        panels = regression_arms(config)
        jobs = [
            (p, a, r)
            for p, arms in panels.items()
            for a in arms
            for r in range(config.regression_runs)
        ]
        trajectories = {
            (panel, arm.label, run): run_regression_arm(
                arm, config.seed * 1000 + run, config.regression_steps, config.teleport_step
            )
            for panel, arm, run in progress.track(jobs, total=len(jobs), description="regression")
        }
        setup = _mnist_setup(config)
        arms = classifier_arms(config)
        runs = [(arm, run) for run in range(config.runs) for arm in arms]
        curves = [
            (arm.label, run, run_arm(split, setup, arm, config.seed, run))
            for arm, run in progress.track(runs, total=len(runs), description="optimizers")
        ]
    pairs = [(LABELS[name], name) for name in config.optimizers]
    result = _summarise_pairs(curves, pairs, config, split, early_epochs=config.early_epochs)
    result.metrics.update(_regression_metrics(trajectories, panels, config.teleport_step))
    result.series["regression"] = _regression_table(trajectories)
    result.metrics["regression_teleport_step"] = config.teleport_step
    result.notes += [
        "regression: the momentum buffer is transported as a covector (J⁻ᵀm) through the "
        "data-dependent action (Eq. 4.13) for 'transform', exact on the regression's 4 samples; "
        "'reset only (control)' resets the momentum at the same step without teleporting",
        "regression log-area: mean over the steps after the teleport of log10(loss)",
        f"regression teleport warnings: "
        f"{warning_counts([w for t in trajectories.values() for w in t.warnings])}",
        f"classifier: one teleport at epoch {config.teleport_epoch} on "
        f"{config.teleport_batches} batches of {config.teleport_batch_size}, optimizer state "
        "reset afterwards (the authors' code re-creates the optimizer)",
    ]
    return result


def _regression_metrics(
    trajectories: Mapping[tuple[str, str, int], Trajectory],
    panels: Mapping[str, Sequence[RegressionArm]],
    at: int,
) -> dict[str, Any]:
    metrics: dict[str, Any] = {}
    for panel, arms in panels.items():
        for arm in arms:
            runs = [
                t for (p, label, _), t in trajectories.items() if p == panel and label == arm.label
            ]
            key = f"{panel}[{arm.label}]"
            areas = [log_area(t.loss, at + 1) for t in runs]
            metrics[f"{key}_log_area"] = statistics.fmean(areas)
            metrics[f"{key}_log_area_per_run"] = areas
            metrics[f"{key}_final_loss"] = statistics.fmean(t.loss[-1] for t in runs)
            if arm.teleport and arm.teleport_steps > 0:
                metrics[f"{key}_grad_norm_gain"] = statistics.fmean(
                    t.teleport["grad_norm_gain"] for t in runs
                )
    return metrics


def _regression_table(
    trajectories: Mapping[tuple[str, str, int], Trajectory],
) -> dict[str, list[Any]]:
    table: dict[str, list[Any]] = {
        k: [] for k in ("panel", "arm", "run", "step", "loss", "grad_norm_sq")
    }
    for (panel, label, run), t in trajectories.items():
        for step, (loss, grad) in enumerate(zip(t.loss, t.grad_norm_sq, strict=True)):
            for key, value in zip(table, (panel, label, run, step, loss, grad), strict=True):
                table[key].append(value)
    return table


def _momentum_claim(result: Result) -> tuple[str, bool]:
    m = result.metrics
    base = m["momentum[no teleport]_log_area"]
    policies = {p: m[f"momentum[{p}]_log_area"] for p in ("transform", "keep", "reset")}
    control = m["momentum[reset only (control)]_log_area"]
    return (
        f"log-area after the teleport: none {base:.3f}, "
        + ", ".join(f"{p} {v:.3f}" for p, v in policies.items())
        + f" (reset without teleport {control:.3f})",
        all(v < base for v in policies.values()),
    )


def _momentum_similar(result: Result) -> tuple[str, bool]:
    m = result.metrics
    base = m["momentum[no teleport]_log_area"]
    values = [m[f"momentum[{p}]_log_area"] for p in ("transform", "keep", "reset")]
    spread, gain = max(values) - min(values), base - statistics.fmean(values)
    return (
        f"spread between policies {spread:.3f} vs mean improvement {gain:.3f} (log10 units); "
        f"final losses "
        + ", ".join(
            f"{p} {m[f'momentum[{p}]_final_loss']:.3g}" for p in ("transform", "keep", "reset")
        ),
        gain > 0 and spread < 0.5 * gain,
    )


def _adagrad_objective_claim(result: Result) -> tuple[str, bool]:
    m = result.metrics
    plain, precond = m["adagrad[‖∇L‖₂²]_log_area_per_run"], m["adagrad[‖∇L‖²_A]_log_area_per_run"]
    wins = sum(a < b for a, b in zip(precond, plain, strict=True))
    return (
        f"log-area: none {m['adagrad[no teleport]_log_area']:.3f}, ‖∇L‖₂² {_pm(plain)}, "
        f"‖∇L‖²_A {_pm(precond)}; ‖∇L‖²_A lower in {wins}/{len(plain)} runs; final loss "
        f"{m['adagrad[‖∇L‖₂²]_final_loss']:.3g} vs {m['adagrad[‖∇L‖²_A]_final_loss']:.3g}",
        statistics.fmean(precond) < statistics.fmean(plain),
    )


def _helps_adagrad(result: Result) -> tuple[str, bool]:
    m = result.metrics
    return (
        f"AdaGrad mean log10(L_teleport / L) over all epochs after the teleport = "
        f"{_pm(m['adagrad_train_log_ratio_per_run'])}; final training loss "
        f"{m['adagrad_teleport_final_train']:.4f} vs {m['adagrad_base_final_train']:.4f}",
        m["adagrad_train_log_ratio"] < 0,
    )


def _helps_early(result: Result) -> tuple[str, bool]:
    m = result.metrics
    keys = [k for k in ("momentum", "rmsprop", "adam") if f"{k}_early_log_ratio" in m]
    parts = [f"{LABELS[k]} {_pm(m[f'{k}_early_log_ratio_per_run'])}" for k in keys]
    return (
        "mean log10(L_teleport / L) over the early epochs: " + ", ".join(parts),
        bool(keys) and all(m[f"{k}_early_log_ratio"] < 0 for k in keys),
    )


def plot_optimizers(result: Result) -> dict[str, Any]:
    """Fig 5.9 (regression), Fig 5.10 (loss vs epoch) and Fig 5.11 (loss vs wall-clock)."""
    figures = {"momentum_adagrad_regression.png": _plot_regression(result)}
    optimizers = [
        arm for arm in dict.fromkeys(result.series["curves"]["arm"]) if "teleport" not in arm
    ]
    for filename, x in (("optimizers_epochs.png", "epoch"), ("optimizers_time.png", "seconds")):
        figure, axes = plt.subplots(1, len(optimizers), figsize=(4.6 * len(optimizers), 4.2))
        for ax, name in zip(np.atleast_1d(axes), optimizers, strict=True):
            arms = [name, f"{name} + teleport"]
            colours = dict(zip(arms, (COLOURS["no teleport"], COLOURS["teleport"]), strict=True))
            _plot_optimizer_panel(ax, result.series["curves"], arms, colours, x)
            ax.set_title(name)
        figure.suptitle(
            f"one teleport at the first epoch ({result.metrics['dataset']}), "
            + ("Fig 5.10" if x == "epoch" else "Fig 5.11")
        )
        figure.tight_layout()
        figures[filename] = figure
    return figures


def _plot_optimizer_panel(
    ax: Any, table: Mapping[str, list[Any]], arms: Sequence[str], colours: Mapping[str, str], x: str
) -> None:
    """Test loss solid with a ±1 std band, training loss dashed (Fig 5.10's convention)."""
    val, train = log_bands(table, "val_loss", x), log_bands(table, "train_loss", x)
    for arm in arms:
        plot_band(ax, *val[arm], color=colours[arm], label=f"{arm} (test)")
        xs, centre, _, _ = train[arm]
        ax.plot(xs, centre, color=colours[arm], linestyle="--", label=f"{arm} (train)")
    ax.set_yscale("log")
    ax.set_xlabel("epoch" if x == "epoch" else "wall-clock time (s)")
    ax.set_ylabel("loss")
    ax.legend(fontsize=7)


def _plot_regression(result: Result) -> Any:
    table = result.series["regression"]
    figure, axes = plt.subplots(1, 2, figsize=(12, 4.6))
    for ax, panel, title in zip(
        axes,
        ("momentum", "adagrad"),
        ("(a) momentum: what happens to the buffer", "(b) AdaGrad: teleport objective"),
        strict=True,
    ):
        rows = [i for i, p in enumerate(table["panel"]) if p == panel]
        sub = {
            "arm": [table["arm"][i] for i in rows],
            "run": [table["run"][i] for i in rows],
            "step": [table["step"][i] for i in rows],
            "loss": [table["loss"][i] for i in rows],
        }
        groups = log_bands(sub, "loss", "step")
        colours = {"no teleport": "black", **_palette(list(groups)[1:])}
        for arm, band in groups.items():
            style = ":" if "control" in arm else "-"
            plot_band(ax, *band, color=colours[arm], linestyle=style, label=arm)
        ax.set_yscale("log")
        ax.set_xlabel("step")
        ax.set_ylabel("loss")
        ax.set_title(title)
        ax.legend(fontsize=8)
    figure.suptitle(
        f"teleport once at step {result.metrics['regression_teleport_step']} on the ch. 4 "
        "regression (geometric mean ± std over runs), Fig 5.9"
    )
    figure.tight_layout()
    return figure


experiment(
    "teleport-optimizers",
    seed_ref="seed 001, §5.4, Figs 5.9-5.11",
    description=(
        "(a) momentum (β 0.9, lr 1e-4: not stated) on the ch. 4 regression (U[0,1], "
        "LeakyReLU 0.1, 0.5‖·‖²), one teleport at step 5 (Eq. 4.13 action, 8 steps at 1e-7: "
        "not stated), buffer transformed / kept / reset; (b) AdaGrad lr 1e-1 teleported with "
        "‖∇L‖² (lr 1.2e-5) or ‖∇L‖²_A (7.5e-3), 2 steps (not stated); (c) AdaGrad, momentum, "
        "RMSProp, Adam on a 16-10 MLP classifier with one teleport at the first epoch on 8 "
        "batches of 200 (10 steps at 5e-2, optimizer state reset), vs epochs and wall-clock. "
        "Optimizer lrs: the authors' code (paper preset), ten times larger on digits (quick)"
    ),
    data="regression generated; digits (quick) or MNIST IDX files in --data-dir (paper)",
    presets={
        "quick": OptimizersConfig(),
        "paper": OptimizersConfig(
            dataset="mnist",
            epochs=40,
            learning_rates=(1e-2, 1e-3, 1e-4, 1e-4),
            early_epochs=10,
            runs=5,
            threads=0,
        ),
    },
    claims=[
        Claim(
            "momentum: teleporting improves convergence whatever is done with the buffer",
            "seed 001, §5.4.1, Fig 5.9a",
            "log-area of transform, keep and reset all below no teleport (5 runs)",
            _momentum_claim,
        ),
        Claim(
            "momentum: the three buffer policies give similar curves",
            "seed 001, §5.4.1, Fig 5.9a",
            "spread between policies < half their mean improvement",
            _momentum_similar,
        ),
        Claim(
            "AdaGrad: maximising ‖∇L‖_A has a slight advantage over ‖∇L‖₂",
            "seed 001, §5.4.1, Fig 5.9b",
            "mean log-area with ‖∇L‖²_A below ‖∇L‖₂² (5 runs)",
            _adagrad_objective_claim,
        ),
        Claim(
            "teleportation improves AdaGrad on MNIST",
            "seed 001, §5.4.2, Fig 5.10",
            "training loss with teleport below AdaGrad alone (mean log ratio < 0)",
            _helps_adagrad,
        ),
        Claim(
            "momentum, RMSProp and Adam improve only in the early epochs",
            "seed 001, §5.4.2, Fig 5.10 (first 10 of 40 epochs)",
            "mean log ratio over the early epochs < 0 for all three",
            _helps_early,
        ),
        Claim(
            "loss vs wall-clock looks like loss vs epoch: a teleport costs less than an epoch",
            "seed 001, §5.4.2, Fig 5.11",
            "teleport wall-clock / epoch wall-clock < 1 (same run)",
            _cost_claim,
        ),
    ],
    plot=plot_optimizers,
)(run_optimizers)
