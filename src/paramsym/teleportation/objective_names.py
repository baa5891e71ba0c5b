"""Teleport objectives by name: :func:`resolve_objective` turns ``"grad_norm"``,
``"preconditioned_grad_norm"``, ``"loss_alignment"``, ``"sharpness"``, ``"curvature"``, an
:class:`~paramsym.teleportation.Objective` or a callable into the objective the engine runs.

It sits above the modules that define them: the base and the gradient-norm objectives
(:mod:`paramsym.teleportation.objectives`), sharpness (:mod:`paramsym.teleportation.flatness`)
and orbit curvature (:mod:`paramsym.teleportation.orbit_geometry`).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn

from paramsym.errors import InvalidArgumentError
from paramsym.teleportation.flatness import Sharpness
from paramsym.teleportation.objectives import (
    FunctionObjective,
    GradNorm,
    LossAlignment,
    Objective,
    PreconditionedGradNorm,
)
from paramsym.teleportation.orbit_geometry import Curvature


def resolve_objective(
    objective: str | Objective | Callable[..., Tensor],
    *,
    optimizer: torch.optim.Optimizer | None = None,
    model: nn.Module | None = None,
) -> Objective:
    """An :class:`Objective` from a name, an instance or a callable (the names are listed in
    :mod:`paramsym.teleportation.objectives`)."""
    if isinstance(objective, Objective):
        return objective
    if isinstance(objective, str):
        if objective == "grad_norm":
            return GradNorm()
        if objective == "loss_alignment":
            return LossAlignment()
        if objective in ("sharpness", "curvature"):
            return Sharpness() if objective == "sharpness" else Curvature()
        if objective == "preconditioned_grad_norm":
            if optimizer is None or model is None:
                raise InvalidArgumentError(
                    "teleport: objective='preconditioned_grad_norm' reads the optimizer's "
                    "state; pass optimizer=..., or a PreconditionedGradNorm(diagonal)"
                )
            return PreconditionedGradNorm.from_optimizer(optimizer, model)
        raise InvalidArgumentError(
            f"teleport: unknown objective {objective!r}; use 'grad_norm', "
            "'preconditioned_grad_norm', 'loss_alignment', 'sharpness', 'curvature', an "
            "Objective or a callable"
        )
    if callable(objective):
        return FunctionObjective(objective)
    raise InvalidArgumentError(
        f"teleport: objective must be a name, an Objective or a callable, got "
        f"{type(objective).__name__}"
    )
