"""Symmetry teleportation (dissertation ch. 4-5, seed 000): objectives, the engine, optimizer
integration, the generalized per-weight scaling, and a symmetry-free level-set baseline."""

from paramsym.teleportation.engine import (
    TeleportConfig,
    TeleportDriftWarning,
    TeleportResult,
    TeleportStep,
    default_symmetries,
    teleport,
)
from paramsym.teleportation.generalized import (
    GeneralizedScaling,
    ScaledModel,
    ScalingFit,
    fit_scales,
)
from paramsym.teleportation.levelset import LevelSetResult, level_set_teleport
from paramsym.teleportation.objectives import (
    FunctionObjective,
    GradNorm,
    LossAlignment,
    Objective,
    PreconditionedGradNorm,
    TeleportContext,
    resolve_objective,
)
from paramsym.teleportation.schedule import Schedule
from paramsym.teleportation.teleporter import (
    FIRST_MOMENTS,
    SECOND_MOMENTS,
    StatePolicy,
    Teleporter,
    TeleportEvent,
)
from paramsym.teleportation.theory import (
    gradient_hessian_cosine,
    lie_bracket_identity,
    newton_cosine,
)

__all__ = [
    "FIRST_MOMENTS",
    "SECOND_MOMENTS",
    "FunctionObjective",
    "GeneralizedScaling",
    "GradNorm",
    "LevelSetResult",
    "LossAlignment",
    "Objective",
    "PreconditionedGradNorm",
    "ScaledModel",
    "ScalingFit",
    "Schedule",
    "StatePolicy",
    "TeleportConfig",
    "TeleportContext",
    "TeleportDriftWarning",
    "TeleportEvent",
    "TeleportResult",
    "TeleportStep",
    "Teleporter",
    "default_symmetries",
    "fit_scales",
    "gradient_hessian_cosine",
    "level_set_teleport",
    "lie_bracket_identity",
    "newton_cosine",
    "resolve_objective",
    "teleport",
]
