"""Models and activations: the MLP builder, the NTK-parameterised layer, the activation registry."""

from paramsym.nn.activations import (
    ActivationSpec,
    Monomial,
    RadialRescaling,
    activation_spec,
    available_activations,
    get_activation,
)
from paramsym.nn.layers import NTKLinear
from paramsym.nn.mlp import mlp

__all__ = [
    "ActivationSpec",
    "Monomial",
    "NTKLinear",
    "RadialRescaling",
    "activation_spec",
    "available_activations",
    "get_activation",
    "mlp",
]
