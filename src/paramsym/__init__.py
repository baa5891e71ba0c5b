"""paramsym: parameter-space symmetries of neural networks, in PyTorch.

The public API (see DESIGN.md and the README)::

    import paramsym as ps
    model = ps.mlp([784, 512, 512, 10], activation="leaky_relu")
    syms = ps.symmetries(model)            # the catalogue, found from the layers
    g = syms[0].sample(scale=0.1)
    new_params = syms[0].act(ps.params_of(model), g)
    ps.hvp(model, loss_fn, (x, y), v)      # curvature primitives
"""

from paramsym import nn
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
    NeuronPermutation,
    PositiveScaling,
    ProductSymmetry,
    SignFlip,
    Slot,
    SoftmaxTranslation,
    Symmetry,
    symmetries,
)

__version__ = "0.1.0"

__all__ = [
    "AutodiffError",
    "EigenResult",
    "HessianOperator",
    "HiddenGL",
    "HiddenOrthogonal",
    "InvalidArgumentError",
    "InvalidGroupElementError",
    "MissingParameterError",
    "NTKLinear",
    "NeuronPermutation",
    "NonFiniteError",
    "NotConvergedWarning",
    "Params",
    "ParamsymError",
    "ParamsymWarning",
    "PositiveScaling",
    "ProductSymmetry",
    "ShapeError",
    "SignFlip",
    "Slot",
    "SoftmaxTranslation",
    "Symmetry",
    "TraceEstimate",
    "UnanalysedModuleWarning",
    "UnsupportedModuleError",
    "__version__",
    "add",
    "axpy",
    "flatten",
    "functional_call",
    "hessian",
    "hutchinson_trace",
    "hvp",
    "inner",
    "mlp",
    "nn",
    "norm",
    "orbit_dimension",
    "params_of",
    "scale",
    "sub",
    "symmetries",
    "tangent_matrix",
    "top_eigenvalues",
    "unflatten",
    "zeros_like",
]
