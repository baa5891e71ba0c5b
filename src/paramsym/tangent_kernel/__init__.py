"""Empirical NTK, kernel and loss alignment, functional dimension and linear regions.

Modules: ``kernel`` (:func:`ntk`, the method enum and the ``"auto"`` rule), ``structured``
(per-layer factorisation for Linear, Conv1d/2d/3d including grouped and depthwise, Embedding),
``generic`` (Jacobian contraction, NTK-vector products), ``outputs`` (the ``output=`` selector
for models returning tuples or ``ModelOutput``), ``dimension``, ``alignment``, ``regions``,
``tracking``.
"""

from paramsym.tangent_kernel.alignment import kernel_alignment, loss_alignment
from paramsym.tangent_kernel.completeness import AuditReport, audit
from paramsym.tangent_kernel.dimension import (
    FunctionalDimension,
    RankResolutionWarning,
    functional_dimension,
    parameter_jacobian,
)
from paramsym.tangent_kernel.kernel import (
    DEFAULT_MEMORY_BUDGET,
    StructuredFallbackWarning,
    choose_method,
    kernel_matrix,
    ntk,
)
from paramsym.tangent_kernel.local_completeness import LocalAuditReport, UnitAudit, local_audit
from paramsym.tangent_kernel.outputs import OutputSelector
from paramsym.tangent_kernel.regions import (
    FDBounds,
    LinearRegions,
    fd_bounds,
    linear_regions,
    null_directions,
    preactivations,
)
from paramsym.tangent_kernel.tracking import NTKTracker

__all__ = [
    "DEFAULT_MEMORY_BUDGET",
    "AuditReport",
    "FDBounds",
    "FunctionalDimension",
    "LinearRegions",
    "LocalAuditReport",
    "NTKTracker",
    "OutputSelector",
    "RankResolutionWarning",
    "StructuredFallbackWarning",
    "UnitAudit",
    "audit",
    "choose_method",
    "fd_bounds",
    "functional_dimension",
    "kernel_alignment",
    "kernel_matrix",
    "linear_regions",
    "local_audit",
    "loss_alignment",
    "ntk",
    "null_directions",
    "parameter_jacobian",
    "preactivations",
]
