"""Quantization through parameter-space symmetry (issue 31): fake quantizers, and moves along
the exact symmetries that make a model quantize well while keeping its function.

* :mod:`~paramsym.quantization.quantizer`: :class:`Quantizer`, uniform round-to-nearest fake
  quantization (bits, per tensor or per channel, symmetric or asymmetric, straight-through).
* :mod:`~paramsym.quantization.simulate`: simulated low-precision inference, fake-quantized
  weights and inputs of every linear map (:func:`quantized_call`, :func:`fake_quantize`).
* :mod:`~paramsym.quantization.objectives`: objectives for :func:`paramsym.teleport`
  (:class:`WeightError`, data-free; :class:`ActivationOutliers` and :class:`QuantizedLoss`,
  on a calibration batch).
* :mod:`~paramsym.quantization.equalization`: :func:`equalize`, Nagel et al.'s cross-layer
  equalization on every exact rescaling the detector finds.
* :mod:`~paramsym.quantization.smoothing`: :func:`smooth`, SmoothQuant's migration of
  activation outliers into the weights, on the same rescalings.
* :mod:`~paramsym.quantization.rotation`: :func:`rotate`, QuaRot's randomized Hadamard
  rotations of the residual stream and the heads' value–output maps, on the folded model.
* :mod:`~paramsym.quantization.learned_rotation`: :func:`learn_rotation`, SpinQuant's
  rotations trained (Cayley) on the quantized loss.
"""

from paramsym.quantization.equalization import (
    EqualizationResult,
    equalizable,
    equalize,
    neuron_ranges,
)
from paramsym.quantization.learned_rotation import (
    LearnedRotation,
    LearnedRotationConfig,
    cayley,
    learn_rotation,
)
from paramsym.quantization.objectives import (
    OUTLIER_MEASURES,
    ActivationOutliers,
    QuantizedLoss,
    WeightError,
    outlier_measure,
)
from paramsym.quantization.quantizer import GRANULARITIES, MAX_BITS, Quantizer
from paramsym.quantization.rotation import (
    ROTATIONS,
    RotationResult,
    hadamard,
    random_rotation,
    rotate,
)
from paramsym.quantization.simulate import fake_quantize, quantized_call, readers
from paramsym.quantization.smoothing import SmoothingResult, activation_ranges, smooth

__all__ = [
    "GRANULARITIES",
    "MAX_BITS",
    "OUTLIER_MEASURES",
    "ROTATIONS",
    "ActivationOutliers",
    "EqualizationResult",
    "LearnedRotation",
    "LearnedRotationConfig",
    "QuantizedLoss",
    "Quantizer",
    "RotationResult",
    "SmoothingResult",
    "WeightError",
    "activation_ranges",
    "cayley",
    "equalizable",
    "equalize",
    "fake_quantize",
    "hadamard",
    "learn_rotation",
    "neuron_ranges",
    "outlier_measure",
    "quantized_call",
    "random_rotation",
    "readers",
    "rotate",
    "smooth",
]
