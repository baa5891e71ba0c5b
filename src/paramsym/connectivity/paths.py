"""Paths in parameter space, the loss along them, and the linear-interpolation barrier.

A *path* is a callable ``t ↦ θ(t)`` from a 0-d tensor to a params dict, differentiable in t:
the chord :func:`linear_path`, the symmetry-induced curves of
:func:`~paramsym.connectivity.symmetry_path` (dissertation Eqs. 3.4-3.6) and the zero-loss
curves of :func:`~paramsym.connectivity.minimum_path` (Prop. 3.2.1). :func:`losses_along`
evaluates any loss or metric along any path; :func:`linear_interpolation` measures the chord
between two networks and its *barrier* (the height of the loss above the straight line between
the end losses, Frankle et al. 2020 and Entezari et al. 2022, the dissertation's [41]):

    B = max_α [ L((1 − α) θ_A + α θ_B) − ((1 − α) L(θ_A) + α L(θ_B)) ].

Between two minima of equal loss (Prop. 3.3.3, Fig. 3.2) this is the loss rise along the chord.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import Tensor, nn

from paramsym.core.params import Params, check_same_keys, functional_call, params_of
from paramsym.errors import InvalidArgumentError, NonFiniteError, ShapeError

Path = Callable[[Tensor], Params]
"""``t ↦ θ(t)``: a 0-d tensor to a params dict, differentiable in ``t``."""

LossFn = Callable[[Tensor, Tensor], Tensor]
Batch = tuple[Any, Any]
Batches = Batch | Iterable[Batch]
"""One ``(inputs, targets)`` batch, or an iterable of them (a list, a DataLoader)."""

Grid = int | Sequence[float] | Tensor
"""Where to evaluate a path: a number n of evenly spaced points on [0, 1] (ends included), or
the points themselves."""


def as_params(model_or_params: nn.Module | Mapping[str, Tensor], what: str) -> Params:
    """A params dict from a module (its detached parameters) or a dict (copied)."""
    if isinstance(model_or_params, nn.Module):
        return params_of(model_or_params)
    if isinstance(model_or_params, Mapping):
        return dict(model_or_params)
    raise InvalidArgumentError(
        f"{what}: expected an nn.Module or a params dict, got {type(model_or_params).__name__}"
    )


def check_same_shapes(a: Mapping[str, Tensor], b: Mapping[str, Tensor], what: str) -> None:
    """Raise unless ``a`` and ``b`` have the same keys and, key by key, the same shapes."""
    check_same_keys(a, b, what)
    for name in a:
        if a[name].shape != b[name].shape:
            raise ShapeError(
                f"{what}: parameter '{name}' has shape {tuple(a[name].shape)} in the first "
                f"network and {tuple(b[name].shape)} in the second; the two networks must have "
                "the same architecture"
            )


def grid(points: Grid) -> Tensor:
    """The evaluation points as a 1-d float64 CPU tensor.

    float64 whatever the parameters' dtype: a 0-d ``t`` does not promote the parameters it
    multiplies (float32 stays float32), and α = 0.1 stays 0.1 to double precision, which the
    closed-form checks need.
    """
    if isinstance(points, int):
        if points < 2:
            raise InvalidArgumentError(f"a grid needs at least 2 points, got {points}")
        return torch.linspace(0.0, 1.0, points, dtype=torch.float64)
    if isinstance(points, Tensor):
        ts = points.detach().to(device="cpu", dtype=torch.float64).reshape(-1)
    else:  # a list of floats: straight to float64 (not through torch's float32 default)
        ts = torch.tensor([float(p) for p in points], dtype=torch.float64)
    if ts.numel() == 0 or not bool(torch.isfinite(ts).all()):
        raise InvalidArgumentError(
            "the evaluation points must be a non-empty set of finite numbers"
        )
    return ts


def linear_path(params_a: Mapping[str, Tensor], params_b: Mapping[str, Tensor]) -> Path:
    """The chord ``t ↦ (1 − t) θ_A + t θ_B`` (every tensor of the two dicts, same keys/shapes).

    >>> import torch
    >>> path = linear_path({"w": torch.zeros(2)}, {"w": torch.ones(2)})
    >>> path(torch.tensor(0.25))["w"]
    tensor([0.2500, 0.2500])
    """
    a, b = dict(params_a), dict(params_b)
    check_same_shapes(a, b, "linear_path")
    difference = {k: b[k] - a[k] for k in a}

    def path(t: Tensor) -> Params:
        return {k: a[k] + t * difference[k] for k in a}

    return path


def _batches(batches: Batches) -> list[Batch]:
    if isinstance(batches, (tuple, list)) and len(batches) == 2 and isinstance(batches[0], Tensor):
        return [(batches[0], batches[1])]  # one (inputs, targets) batch
    out = list(batches)
    if not out:
        raise InvalidArgumentError("losses_along: no batches given")
    for b in out:
        if not isinstance(b, (tuple, list)) or len(b) != 2:
            raise InvalidArgumentError(
                "losses_along: batches must be (inputs, targets) tuples or an iterable of them"
            )
    return [(b[0], b[1]) for b in out]


def _size(inputs: Any) -> int:
    first = inputs[0] if isinstance(inputs, (tuple, list)) else inputs
    return int(first.shape[0]) if isinstance(first, Tensor) and first.ndim else 1


def losses_along(
    model: nn.Module, loss_fn: LossFn, batches: Batches, path: Path, ts: Grid = 25
) -> Tensor:
    """``loss_fn(model(x; θ(t)), y)`` at each point ``t`` of ``ts``, shape ``(len(ts),)``.

    With several batches the loss is averaged weighted by batch size (the data-set mean of a
    ``reduction="mean"`` loss). ``loss_fn`` may be any scalar metric of (outputs, targets).
    Evaluated without gradients. Raises :class:`~paramsym.errors.NonFiniteError` naming the
    point where the loss is NaN.
    """
    data = _batches(batches)
    points = grid(ts)
    sizes = [_size(x) for x, _ in data]
    total = float(sum(sizes))
    losses = []
    with torch.no_grad():
        for t in points:
            params = path(t)
            value = torch.zeros((), dtype=torch.float64)
            for (x, y), n in zip(data, sizes, strict=True):
                loss = loss_fn(functional_call(model, params, x), y)
                if not isinstance(loss, Tensor) or loss.numel() != 1:
                    raise InvalidArgumentError(
                        "losses_along: loss_fn must return a scalar tensor; use reduction='mean'"
                    )
                value = value + loss.detach().reshape(()).to("cpu", torch.float64) * (n / total)
            if bool(torch.isnan(value)):
                raise NonFiniteError(f"losses_along: the loss is NaN at t = {float(t):.6g}")
            losses.append(value)
    return torch.stack(losses)


@dataclass
class InterpolationResult:
    """Loss along the chord between two networks (:func:`linear_interpolation`).

    Attributes:
        alphas: interpolation weights α (θ = (1 − α) θ_A + α θ_B).
        losses: loss at each α.
        barrier: max over α of ``L(α) − ((1 − α) L(0) + α L(1))``, on the grid (a lower estimate
            of the true maximum; use a finer grid to tighten it). Uses the losses at the first
            and last grid points as the end losses.
        barrier_alpha: the α where that maximum is reached.
        max_loss: the largest loss on the grid.
    """

    alphas: list[float]
    losses: list[float]
    barrier: float
    barrier_alpha: float
    max_loss: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def barrier_of(alphas: Tensor, losses: Tensor) -> tuple[float, float]:
    """(barrier, α at the barrier) of losses on a sorted grid ``alphas`` from its ends."""
    a0, a1 = alphas[0], alphas[-1]
    weight = (alphas - a0) / (a1 - a0)
    baseline = (1 - weight) * losses[0] + weight * losses[-1]
    excess = losses - baseline
    index = int(torch.argmax(excess))
    return float(excess[index]), float(alphas[index])


def linear_interpolation(
    model: nn.Module,
    loss_fn: LossFn,
    batches: Batches,
    params_a: nn.Module | Mapping[str, Tensor],
    params_b: nn.Module | Mapping[str, Tensor],
    alphas: Grid = 25,
) -> InterpolationResult:
    """The loss along ``(1 − α) θ_A + α θ_B`` and its barrier (module docstring).

    Args:
        model: the architecture, evaluated with :func:`~paramsym.functional_call`.
        loss_fn: ``loss_fn(outputs, targets) -> scalar`` (a loss or any lower-is-better metric).
        batches: one ``(x, y)`` batch or an iterable of batches.
        params_a, params_b: the two networks (modules of the same architecture, or params
            dicts with the same keys and shapes).
        alphas: number of evenly spaced α in [0, 1], or the α themselves (sorted, with the two
            ends: the barrier is measured against the losses at the first and last α).

    >>> import torch, paramsym as ps
    >>> model = ps.mlp([2, 3, 1], activation="identity", seed=0)
    >>> a = ps.params_of(model)
    >>> x = torch.randn(8, 2)
    >>> r = linear_interpolation(model, torch.nn.MSELoss(), (x, model(x).detach()), a, a, 5)
    >>> r.barrier == 0.0
    True
    """
    a = as_params(params_a, "linear_interpolation(params_a)")
    b = as_params(params_b, "linear_interpolation(params_b)")
    check_same_shapes(a, b, "linear_interpolation")
    points = grid(alphas)
    if points.numel() < 2 or not bool((points[1:] > points[:-1]).all()):
        raise InvalidArgumentError(
            "linear_interpolation: alphas must be at least two increasing values, e.g. 25"
        )
    losses = losses_along(model, loss_fn, batches, linear_path(a, b), points)
    barrier, at = barrier_of(points, losses)
    return InterpolationResult(
        alphas=[float(t) for t in points],
        losses=[float(v) for v in losses],
        barrier=barrier,
        barrier_alpha=at,
        max_loss=float(losses.max()),
    )
