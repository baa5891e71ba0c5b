"""The catalogue of parameter-space symmetries and their automatic detection."""

from paramsym.symmetry import attention_blocks as _blocks  # noqa: F401  (registers analysers)
from paramsym.symmetry import lowrank as _lowrank  # noqa: F401
from paramsym.symmetry import rbf as _rbf  # noqa: F401
from paramsym.symmetry.absorption import (
    BiasAbsorption,
    NormReaderTranslation,
    ParameterTranslation,
    Part,
    Reader,
)
from paramsym.symmetry.attention import HeadPermutation, QueryKeyGL, ValueOutputGL
from paramsym.symmetry.base import GroupElement, NeuronSymmetry, Slot, Symmetry
from paramsym.symmetry.batchnorm_eval import BatchNormScaling, BatchNormShift
from paramsym.symmetry.chain import LINEAR_TYPES
from paramsym.symmetry.change_of_variables import ChangeOfVariablesRotation, QuadraticOrthogonal
from paramsym.symmetry.detect import BlockContext, register_block, symmetries
from paramsym.symmetry.discrete import NeuronPermutation, SignFlip
from paramsym.symmetry.embedding_norm import EmbeddingNormAffine
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
from paramsym.symmetry.norm_rotation import NormRotation
from paramsym.symmetry.norm_weights import NormRowShift, NormShiftIntoWeights
from paramsym.symmetry.offset_scaling import OffsetNormScaling
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
from paramsym.symmetry.shear import StreamShear
from paramsym.symmetry.subspace import SubspaceReaderTranslation
from paramsym.symmetry.translation import SoftmaxTranslation, StreamTranslation
from paramsym.symmetry.unread import UnreadTranslation
from paramsym.symmetry.untying import UntieReport, untie

__all__ = [
    "LINEAR_TYPES",
    "ActionReport",
    "BatchNormScaling",
    "BatchNormShift",
    "BiasAbsorption",
    "BlockContext",
    "ChangeOfVariablesRotation",
    "DistributionSymmetry",
    "EmbeddingNormAffine",
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
    "NormReaderTranslation",
    "NormRotation",
    "NormRowShift",
    "NormShiftIntoWeights",
    "OffsetNormScaling",
    "OutputRotation",
    "ParameterTranslation",
    "Part",
    "PositiveScaling",
    "ProductSymmetry",
    "PseudoInverseGL",
    "QuadraticOrthogonal",
    "QueryKeyGL",
    "RBFPermutation",
    "Reader",
    "RotaryQueryKey",
    "SignFlip",
    "Slot",
    "SoftmaxTranslation",
    "StreamShear",
    "StreamTranslation",
    "SubspaceReaderTranslation",
    "Symmetry",
    "UnreadTranslation",
    "UntieReport",
    "ValueOutputGL",
    "fold_norms",
    "householder_frame",
    "register_block",
    "spectral_contrastive_loss",
    "symmetries",
    "untie",
]
