"""Quantization through parameter-space symmetry (issue 31): fake quantizers, and moves along
the exact symmetries that make a model quantize well while keeping its function.

* :mod:`~paramsym.quantization.quantizer`: :class:`Quantizer`, uniform round-to-nearest fake
  quantization (bits, per tensor or per channel, symmetric or asymmetric, straight-through).
* :mod:`~paramsym.quantization.objectives`: objectives for :func:`paramsym.teleport`
  (:class:`WeightError`, data-free).
* :mod:`~paramsym.quantization.equalization`: :func:`equalize`, Nagel et al.'s cross-layer
  equalization on every exact rescaling the detector finds.
* :mod:`~paramsym.quantization.smoothing`: :func:`smooth`, SmoothQuant's migration of
  activation outliers into the weights, on the same rescalings.
"""

from paramsym.quantization.equalization import (
    EqualizationResult,
    equalizable,
    equalize,
    neuron_ranges,
)
from paramsym.quantization.objectives import WeightError
from paramsym.quantization.quantizer import GRANULARITIES, MAX_BITS, Quantizer
from paramsym.quantization.smoothing import SmoothingResult, activation_ranges, smooth

__all__ = [
    "GRANULARITIES",
    "MAX_BITS",
    "EqualizationResult",
    "Quantizer",
    "SmoothingResult",
    "WeightError",
    "activation_ranges",
    "equalizable",
    "equalize",
    "neuron_ranges",
    "smooth",
]
