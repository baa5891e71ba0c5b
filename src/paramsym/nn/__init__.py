"""Models and activations: the MLP builder, the NTK-parameterised layer, attention, LoRA and RBF
blocks, a small transformer, the activation registry, and the test-model zoo
(:mod:`paramsym.nn.zoo`: CNNs, ResNets, GPT-style and Hugging Face transformers, LSTMs)."""

from paramsym.nn import zoo
from paramsym.nn.activations import (
    ActivationSpec,
    Monomial,
    RadialRescaling,
    activation_spec,
    available_activations,
    get_activation,
)
from paramsym.nn.attention import MultiHeadAttention, TinyTransformer, TransformerBlock
from paramsym.nn.builders import mlp
from paramsym.nn.layers import NTKLinear
from paramsym.nn.lowrank import LoRALinear
from paramsym.nn.rbf import RBFNetwork

__all__ = [
    "ActivationSpec",
    "LoRALinear",
    "Monomial",
    "MultiHeadAttention",
    "NTKLinear",
    "RBFNetwork",
    "RadialRescaling",
    "TinyTransformer",
    "TransformerBlock",
    "activation_spec",
    "available_activations",
    "get_activation",
    "mlp",
    "zoo",
]
