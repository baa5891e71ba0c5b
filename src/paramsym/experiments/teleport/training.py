"""Teleportation inside training loops: shared data, models and training (seed 001, ch. 4-5).

Data splits, bias-free MLP classifiers, their layer-pair GL actions, optimizers, the
:class:`paramsym.Teleporter` configuration and the classification training loop with its
curves and summaries, shared by ``teleport-mnist`` (Fig 4.6), ``teleport-schedules``
(Fig 4.8) and ``teleport-optimizers`` (Figs 5.9-5.11), and by ``teleport-cnn`` and
``cnn-matching``. Every training loop drives :class:`paramsym.Teleporter` around a
``torch.optim`` optimizer; the no-teleport baselines run the same loop with
``Schedule.never()``. Within a run the arms share the initialisation, the mini-batch order and
the teleport batches.

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
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

import paramsym as ps
import paramsym.data
from paramsym.core.tables import append_row
from paramsym.errors import ApproximateActionWarning, InvalidArgumentError, ParamsymWarning
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
    ``"mnist1d"`` (4000 / 1000), or ``"mnist"``, ``"fashion_mnist"``, ``"cifar10"`` (files in
    ``data_dir``). For (Fashion-)MNIST, ``holdout="validation"`` splits the 60 000 training
    images 48 000 / 12 000 at random (dissertation §4.6.1), ``holdout="test"`` trains on 50 000
    of them and validates on the official 10 000 test images (§5.4.2, as the authors' code
    does); CIFAR-10 keeps its 50 000 / 10 000 split.
    """
    if dataset == "digits":
        data = paramsym.data.digits(seed=seed)
    elif dataset == "mnist1d":
        data = paramsym.data.mnist1d(seed=seed)
    elif dataset in ("mnist", "fashion_mnist", "cifar10"):
        data = paramsym.data.load(dataset, data_dir=data_dir)
    else:
        raise InvalidArgumentError(
            "teleport experiments: dataset must be 'digits', 'mnist1d', 'mnist', "
            f"'fashion_mnist' or 'cifar10', got {dataset!r}"
        )
    x, y = data.train
    x = x.reshape(x.shape[0], -1).float()
    x_test = data.x_test.reshape(data.x_test.shape[0], -1).float()
    if dataset not in ("mnist", "fashion_mnist"):
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
            append_row(per_epoch, label, run, epoch, *row)
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
