"""paramsym: parameter-space symmetries of neural networks, in PyTorch.

The public API (see DESIGN.md and the README)::

    import paramsym as ps
    model = ps.mlp([784, 512, 512, 10], activation="leaky_relu")
    syms = ps.symmetries(model)            # the catalogue, found from the layers
    g = syms[0].sample(scale=0.1)
    new_params = syms[0].act(ps.params_of(model), g)
    ps.hvp(model, loss_fn, (x, y), v)      # curvature primitives
"""

from paramsym import landscapes, nn
from paramsym.core import (
    Params,
    add,
    axpy,
    flatten,
    functional_call,
    inner,
    norm,
    params_of,
    scale,
    sub,
    unflatten,
    zeros_like,
)
from paramsym.curvature import (
    EigenResult,
    HessianOperator,
    TraceEstimate,
    hessian,
    hutchinson_trace,
    hvp,
    orbit_dimension,
    tangent_matrix,
    top_eigenvalues,
)
from paramsym.errors import (
    ApproximateActionWarning,
    AutodiffError,
    InvalidArgumentError,
    InvalidGroupElementError,
    MissingParameterError,
    NonFiniteError,
    NotConvergedWarning,
    ParamsymError,
    ParamsymWarning,
    ShapeError,
    UnanalysedModuleWarning,
    UnsupportedModuleError,
)
from paramsym.nn import NTKLinear, mlp
from paramsym.symmetry import (
    HiddenGL,
    HiddenOrthogonal,
    InverseActivationGL,
    NeuronPermutation,
    NonlinearGL,
    PositiveScaling,
    ProductSymmetry,
    PseudoInverseGL,
    SignFlip,
    Slot,
    SoftmaxTranslation,
    Symmetry,
    register_block,
    symmetries,
)
from paramsym.tangent_kernel import (
    NTKTracker,
    fd_bounds,
    functional_dimension,
    kernel_alignment,
    linear_regions,
    loss_alignment,
    ntk,
)
from paramsym.teleportation import (
    ScaledModel,
    Schedule,
    TeleportConfig,
    Teleporter,
    TeleportResult,
    level_set_teleport,
    teleport,
)

__version__ = "0.1.0"

__all__ = [
    "ApproximateActionWarning",
    "AutodiffError",
    "EigenResult",
    "HessianOperator",
    "HiddenGL",
    "HiddenOrthogonal",
    "InvalidArgumentError",
    "InvalidGroupElementError",
    "InverseActivationGL",
    "MissingParameterError",
    "NTKLinear",
    "NTKTracker",
    "NeuronPermutation",
    "NonFiniteError",
    "NonlinearGL",
    "NotConvergedWarning",
    "Params",
    "ParamsymError",
    "ParamsymWarning",
    "PositiveScaling",
    "ProductSymmetry",
    "PseudoInverseGL",
    "ScaledModel",
    "Schedule",
    "ShapeError",
    "SignFlip",
    "Slot",
    "SoftmaxTranslation",
    "Symmetry",
    "TeleportConfig",
    "TeleportResult",
    "Teleporter",
    "TraceEstimate",
    "UnanalysedModuleWarning",
    "UnsupportedModuleError",
    "__version__",
    "add",
    "axpy",
    "fd_bounds",
    "flatten",
    "functional_call",
    "functional_dimension",
    "hessian",
    "hutchinson_trace",
    "hvp",
    "inner",
    "kernel_alignment",
    "landscapes",
    "level_set_teleport",
    "linear_regions",
    "loss_alignment",
    "mlp",
    "nn",
    "norm",
    "ntk",
    "orbit_dimension",
    "params_of",
    "register_block",
    "scale",
    "sub",
    "symmetries",
    "tangent_matrix",
    "teleport",
    "top_eigenvalues",
    "unflatten",
    "zeros_like",
]
