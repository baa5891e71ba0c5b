"""Attention symmetries (dissertation Ex. 1.2.11-1.2.12).

In head i, the scores depend on W^Q_i and W^K_i only through ``q·k``, and the output on W^V_i
and W^O_i only through ``W^O_i W^V_i``. In PyTorch's row-major convention (q = W^Q x + b^Q):

* **query-key GL(d_k)** per head: ``(W^Q_i, b^Q_i) ↦ g (W^Q_i, b^Q_i)``,
  ``(W^K_i, b^K_i) ↦ g⁻ᵀ (W^K_i, b^K_i)``, so ``(g q)·(g⁻ᵀ k) = q·k``. (The paper writes
  ``(W^Q g⁻¹, W^K gᵀ)`` for its column-vector convention; it is the same group.)
* **value-output GL(d_v)** per head: ``(W^V_i, b^V_i) ↦ g (W^V_i, b^V_i)``, ``W^O_i ↦ W^O_i g⁻¹``
  (softmax rows sum to 1, so the value bias moves with g as well).
* **head permutations** S_h: heads reordered together with their rows of the Q, K, V
  projections and their columns of the output projection.

All are exact for any input, with or without a causal mask. Detection finds them on the traced
graph (:mod:`paramsym.symmetry.graph`) and, in the module-by-module walk, with the block
analysers of :mod:`paramsym.symmetry.attention_blocks`.
"""

from __future__ import annotations

from paramsym.symmetry.discrete import NeuronPermutation
from paramsym.symmetry.gl import HiddenGL


class QueryKeyGL(HiddenGL):
    """GL(d_k) of one attention head: queries by g, keys by g⁻ᵀ (rows of the projections)."""

    family = "attention_QK"


class ValueOutputGL(HiddenGL):
    """GL(d_v) of one attention head: values by g, the output projection's columns by g⁻¹."""

    family = "attention_VO"


class HeadPermutation(NeuronPermutation):
    """S_h: permutations of whole attention heads (blocks of rows and columns)."""

    family = "head_permutation"
