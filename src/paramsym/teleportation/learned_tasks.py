"""Tasks, results and layer-pair actions of learned teleportation (dissertation §5.5,
Algorithm 3, Fig 5.12); the meta-optimiser itself is :mod:`paramsym.teleportation.learned`."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

import torch
from torch import Tensor, nn

from paramsym.core.params import Params
from paramsym.errors import InvalidArgumentError
from paramsym.symmetry.base import Symmetry
from paramsym.symmetry.nonlinear import DataDependentGL, InverseActivationGL, PseudoInverseGL

Batch = tuple[Tensor, Tensor]

_BATCH_ACTIONS = (InverseActivationGL, PseudoInverseGL)


@dataclass
class MetaTask:
    """One training or test trajectory: the starting parameters and the batch (X, Y)."""

    params: Params
    batch: Batch


@dataclass
class LearnedRun:
    """A trajectory of the learned optimiser: ``losses[t]`` = L(w_t), t = 0..steps."""

    losses: list[float]
    params: Params

    def to_dict(self) -> dict[str, Any]:
        return {"losses": list(self.losses)}


@dataclass
class MetaTrainResult:
    """Meta-training history: the meta-loss of every truncation window (Σ L(w_i) over the
    window), the last loss of every training trajectory, and the number of Adam updates."""

    meta_losses: list[float]
    final_losses: list[float]
    updates: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def steps_to_threshold(losses: Sequence[float], threshold: float) -> int | None:
    """The first step t with ``losses[t] ≤ threshold`` (``None`` if never): the convergence
    measure for Fig 5.12 comparisons."""
    return next((t for t, v in enumerate(losses) if v <= threshold), None)


def regression_task(
    model: nn.Module,
    batch_size: int,
    *,
    generator: torch.Generator | None = None,
    dtype: torch.dtype | None = None,
) -> MetaTask:
    """A random task of the §5.5 setup: X, Y with i.i.d. N(0, 1) entries (rows are samples)
    and weights drawn as PyTorch initialises ``nn.Linear`` (U(±1/√fan_in)); the text says only
    "random X, Y and randomly initialized W's". ``model`` fixes the shapes (its first and last
    parameters' fan-in and fan-out)."""
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    if not named or batch_size < 1:
        raise InvalidArgumentError(
            "regression_task: needs a model with trainable parameters and batch_size ≥ 1"
        )
    dtype = dtype or named[0][1].dtype
    weights = [p for _, p in named if p.ndim == 2]
    if not weights:
        raise InvalidArgumentError("regression_task: the model has no 2-D weight matrix")
    n_in, n_out = weights[0].shape[1], weights[-1].shape[0]
    params: Params = {}
    fan_in = n_in
    for name, p in named:
        if p.ndim == 2:
            fan_in = p.shape[1]
        bound = 1.0 / math.sqrt(fan_in)
        params[name] = (torch.rand(p.shape, generator=generator, dtype=dtype) * 2 - 1) * bound
    x = torch.randn(batch_size, n_in, generator=generator, dtype=dtype)
    y = torch.randn(batch_size, n_out, generator=generator, dtype=dtype)
    return MetaTask(params, (x, y))


def batch_actions(
    model: nn.Module,
    symmetries: Sequence[Symmetry] | None = None,
    action: Literal["auto", "inverse", "pinv"] = "auto",
) -> list[DataDependentGL]:
    """The batch actions (one per hidden layer pair) that learned teleportation moves along.

    From ``symmetries`` (default: ``ps.symmetries(model, data_dependent=True)``), keep the
    batch GL actions (Eq. 4.13 :class:`~paramsym.symmetry.InverseActivationGL`, Eq. 4.16
    :class:`~paramsym.symmetry.PseudoInverseGL`) and pick one per layer pair by ``action``.
    Raises :class:`~paramsym.errors.InvalidArgumentError` when none is left.
    """
    if symmetries is None:
        from paramsym.symmetry.detect import symmetries as find_symmetries

        symmetries = find_symmetries(model, data_dependent=True)
    names = {n for n, p in model.named_parameters() if p.requires_grad}
    by_site: dict[str, dict[type, DataDependentGL]] = {}
    for s in symmetries:
        if not isinstance(s, _BATCH_ACTIONS):
            continue
        missing = [n for n in s.parameter_names if n not in names]
        if missing:
            raise InvalidArgumentError(
                f"LearnedTeleporter: {s.name} acts on '{missing[0]}', which is not a trainable "
                "parameter of the model; pass symmetries found on this model"
            )
        by_site.setdefault(s.site, {})[type(s)] = s
    preference = {
        "auto": (InverseActivationGL, PseudoInverseGL),
        "inverse": (InverseActivationGL,),
        "pinv": (PseudoInverseGL,),
    }[action]
    chosen = [
        next(found[t] for t in preference if t in found)
        for found in by_site.values()
        if any(t in found for t in preference)
    ]
    if not chosen:
        raise InvalidArgumentError(
            f"LearnedTeleporter: {type(model).__name__} has no layer pair with a data-dependent "
            f"batch action ({' or '.join(t.__name__ for t in preference)}). Learned "
            "teleportation needs hidden layers U σ(V h + b) in an nn.Sequential chain "
            "(e.g. ps.mlp) or symmetries=[...] naming such actions; use teleport=False to "
            "learn the update only"
        )
    return chosen
