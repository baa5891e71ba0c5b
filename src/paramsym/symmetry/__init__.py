"""The catalogue of parameter-space symmetries and their automatic detection."""

from paramsym.symmetry.base import GroupElement, NeuronSymmetry, Slot, Symmetry
from paramsym.symmetry.detect import LINEAR_TYPES, symmetries
from paramsym.symmetry.discrete import NeuronPermutation, SignFlip
from paramsym.symmetry.gl import HiddenGL
from paramsym.symmetry.orthogonal import HiddenOrthogonal
from paramsym.symmetry.product import ProductSymmetry
from paramsym.symmetry.scaling import PositiveScaling
from paramsym.symmetry.translation import SoftmaxTranslation

__all__ = [
    "LINEAR_TYPES",
    "GroupElement",
    "HiddenGL",
    "HiddenOrthogonal",
    "NeuronPermutation",
    "NeuronSymmetry",
    "PositiveScaling",
    "ProductSymmetry",
    "SignFlip",
    "Slot",
    "SoftmaxTranslation",
    "Symmetry",
    "symmetries",
]
