"""Symmetry teleportation (dissertation ch. 4-5, seed 000): objectives, the engine, optimizer
integration, sharpness and orbit curvature (ch. 5), the generalized per-weight scaling, and a
symmetry-free level-set baseline."""

from paramsym.teleportation.ascent import transport_obstacle
from paramsym.teleportation.engine import (
    DEFAULT_STEP_NORM,
    TeleportConfig,
    TeleportDriftWarning,
    TeleportResult,
    TeleportStep,
    run_teleport,
    teleport,
)
from paramsym.teleportation.flatness import (
    TEXT_RADII,
    Sharpness,
    sharpness,
    sharpness_directions,
)
from paramsym.teleportation.generalized import (
    GeneralizedScaling,
    ScaledModel,
    ScalingFit,
    fit_scales,
)
from paramsym.teleportation.learned import (
    METHODS,
    LearnedStep,
    LearnedTeleportConfig,
    LearnedTeleporter,
    MetaState,
)
from paramsym.teleportation.learned_tasks import (
    LearnedRun,
    MetaTask,
    MetaTrainResult,
    batch_actions,
    regression_task,
    steps_to_threshold,
)
from paramsym.teleportation.levelset import LevelSetResult, level_set_teleport
from paramsym.teleportation.objective_names import resolve_objective
from paramsym.teleportation.objectives import (
    FunctionObjective,
    GradNorm,
    LossAlignment,
    Objective,
    PreconditionedGradNorm,
    TeleportContext,
)
from paramsym.teleportation.orbit_geometry import (
    Curvature,
    mean_orbit_curvature,
    orbit_curvature,
    random_algebra_elements,
)
from paramsym.teleportation.schedule import Schedule
from paramsym.teleportation.selection import default_symmetries
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
    "DEFAULT_STEP_NORM",
    "FIRST_MOMENTS",
    "METHODS",
    "SECOND_MOMENTS",
    "TEXT_RADII",
    "Curvature",
    "FunctionObjective",
    "GeneralizedScaling",
    "GradNorm",
    "LearnedRun",
    "LearnedStep",
    "LearnedTeleportConfig",
    "LearnedTeleporter",
    "LevelSetResult",
    "LossAlignment",
    "MetaState",
    "MetaTask",
    "MetaTrainResult",
    "Objective",
    "PreconditionedGradNorm",
    "ScaledModel",
    "ScalingFit",
    "Schedule",
    "Sharpness",
    "StatePolicy",
    "TeleportConfig",
    "TeleportContext",
    "TeleportDriftWarning",
    "TeleportEvent",
    "TeleportResult",
    "TeleportStep",
    "Teleporter",
    "batch_actions",
    "default_symmetries",
    "fit_scales",
    "gradient_hessian_cosine",
    "level_set_teleport",
    "lie_bracket_identity",
    "mean_orbit_curvature",
    "newton_cosine",
    "orbit_curvature",
    "random_algebra_elements",
    "regression_task",
    "resolve_objective",
    "run_teleport",
    "sharpness",
    "sharpness_directions",
    "steps_to_threshold",
    "teleport",
    "transport_obstacle",
]
