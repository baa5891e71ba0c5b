"""The catalogue of parameter-space symmetries and their automatic detection."""

from paramsym.symmetry import attention_blocks as _blocks  # noqa: F401  (registers analysers)
from paramsym.symmetry import lowrank as _lowrank  # noqa: F401
from paramsym.symmetry import rbf as _rbf  # noqa: F401
from paramsym.symmetry.attention import HeadPermutation, QueryKeyGL, ValueOutputGL
from paramsym.symmetry.base import GroupElement, NeuronSymmetry, Slot, Symmetry
from paramsym.symmetry.chain import LINEAR_TYPES
from paramsym.symmetry.change_of_variables import ChangeOfVariablesRotation, QuadraticOrthogonal
from paramsym.symmetry.detect import BlockContext, register_block, symmetries
from paramsym.symmetry.discrete import NeuronPermutation, SignFlip
from paramsym.symmetry.fold import FoldedNorm, FoldReport, fold_norms
from paramsym.symmetry.gl import HiddenGL
from paramsym.symmetry.lowrank import LowRankGL
from paramsym.symmetry.nonlinear import (
    ActionReport,
    InverseActivationGL,
    LayerPair,
    NonlinearGL,
    PseudoInverseGL,
    householder_frame,
)
from paramsym.symmetry.orthogonal import HiddenOrthogonal
from paramsym.symmetry.product import ProductSymmetry
from paramsym.symmetry.rbf import RBFPermutation
from paramsym.symmetry.relaxed import (
    DistributionSymmetry,
    OutputRotation,
    spectral_contrastive_loss,
)
from paramsym.symmetry.rotary import RotaryQueryKey
from paramsym.symmetry.scaling import PositiveScaling
from paramsym.symmetry.translation import SoftmaxTranslation, StreamTranslation

__all__ = [
    "LINEAR_TYPES",
    "ActionReport",
    "BlockContext",
    "ChangeOfVariablesRotation",
    "DistributionSymmetry",
    "FoldReport",
    "FoldedNorm",
    "GroupElement",
    "HeadPermutation",
    "HiddenGL",
    "HiddenOrthogonal",
    "InverseActivationGL",
    "LayerPair",
    "LowRankGL",
    "NeuronPermutation",
    "NeuronSymmetry",
    "NonlinearGL",
    "OutputRotation",
    "PositiveScaling",
    "ProductSymmetry",
    "PseudoInverseGL",
    "QuadraticOrthogonal",
    "QueryKeyGL",
    "RBFPermutation",
    "RotaryQueryKey",
    "SignFlip",
    "Slot",
    "SoftmaxTranslation",
    "StreamTranslation",
    "Symmetry",
    "ValueOutputGL",
    "fold_norms",
    "householder_frame",
    "register_block",
    "spectral_contrastive_loss",
    "symmetries",
]
