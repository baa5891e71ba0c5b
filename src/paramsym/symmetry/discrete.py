"""Discrete symmetries of a hidden layer: neuron permutations and sign flips.

* **Permutations** S_h (Ex. 1.2.9): for any pointwise (or radial) activation, reordering the
  hidden neurons, ``(W_A, b_A, W_B) ↦ (P W_A, P b_A, W_B Pᵀ)``, preserves the function. An
  element is an index tensor ``p`` of shape ``(h,)`` with ``(P W)[k] = W[p[k]]``, so
  ``compose(p1, p2) = p2[p1]`` (the matrix product P1 P2).
* **Sign flips** (Z_2)^h (Ex. 1.2.5): for an odd activation, ``diag(s)`` with s ∈ {±1}^h.
  Table 1.1 writes the group as Z_2^n; it acts on the h hidden neurons (notes 001a §9.5).

Both are zero-dimensional: no Lie algebra and no flat directions (§2.3.3); ``tangent`` is zero.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from paramsym.errors import InvalidGroupElementError, ShapeError
from paramsym.symmetry.base import (
    FamilyNeuronSymmetry,
    GroupElement,
    Slot,
    scale_along,
)


class _DiscreteNeuronSymmetry(FamilyNeuronSymmetry):
    """A finite group on one hidden layer: no Lie algebra."""

    @staticmethod
    def _algebra_dimension(width: int) -> int:
        return 0

    def exp(self, xi: Tensor) -> GroupElement:
        self.check_xi(xi)
        return self.identity(dtype=xi.dtype, device=xi.device)


class NeuronPermutation(_DiscreteNeuronSymmetry):
    """S_h: permutations of the hidden neurons (any pointwise or radial activation).

    ``incoming`` slots (default axis 0) and ``outgoing`` slots (default axis 1) are both
    re-indexed by ``p``; per-neuron parameters of normalisation layers in between are
    incoming slots too.

    >>> import torch
    >>> s = NeuronPermutation(3, incoming=["0.weight"], outgoing=["2.weight"])
    >>> p1, p2 = torch.tensor([1, 2, 0]), torch.tensor([2, 1, 0])
    >>> s.compose(p1, p2), s.inverse(p1)
    (tensor([1, 0, 2]), tensor([2, 0, 1]))
    """

    family = "permutation"
    group_symbol = "S_{}"

    @property
    def order(self) -> int:
        """h! permutations."""
        return math.factorial(self.width)

    def _identity(self, dtype: torch.dtype) -> Tensor:
        return torch.arange(self.width)

    def _sample(
        self, scale: float, generator: torch.Generator | None, dtype: torch.dtype
    ) -> Tensor:
        """A uniformly random permutation (``scale`` and ``dtype`` are ignored)."""
        return torch.randperm(self.width, generator=generator)

    def compose(self, g1: GroupElement, g2: GroupElement) -> Tensor:
        p1, p2 = self.check_element(g1), self.check_element(g2)
        return p2[p1]

    def inverse(self, g: GroupElement) -> Tensor:
        return torch.argsort(self.check_element(g))

    def check_element(self, g: GroupElement) -> Tensor:
        p = self._element_tensor(g, (self.width,), "a permutation")
        if p.dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.bool):
            raise ShapeError(f"{self.name}: a permutation must be an integer index tensor")
        if not torch.equal(torch.sort(p).values.cpu(), torch.arange(self.width)):
            raise InvalidGroupElementError(
                f"{self.name}: {p.tolist()} is not a permutation of 0..{self.width - 1}"
            )
        return p

    def as_matrix(self, g: GroupElement) -> Tensor:
        """The permutation matrix P with ``P[k, p[k]] = 1`` (so ``P @ W == W[p]``)."""
        p = self.check_element(g)
        return torch.eye(self.width, dtype=torch.get_default_dtype())[p.cpu()]

    def _prepare(self, g: GroupElement, dtype: torch.dtype, device: torch.device) -> Any:
        return self.check_element(g).to(device)

    def _transform(self, t: Tensor, slot: Slot, prepared: Any) -> Tensor:
        # Incoming: P T along the axis. Outgoing: T P⁻¹ = T Pᵀ, which re-indexes the same way.
        return t.index_select(slot.axis, prepared)


class SignFlip(_DiscreteNeuronSymmetry):
    """(Z_2)^h: flipping the signs of hidden neurons (odd activations: tanh, identity, z³, ...).

    Elements are tensors of shape ``(h,)`` with entries ±1. Per-neuron biases of
    normalisation layers in between are incoming slots (BatchNorm's shift flips with the sign).
    """

    family = "sign_flip"
    group_symbol = "(Z_2)^{}"

    @property
    def order(self) -> int:
        """2^h sign vectors."""
        return 2**self.width

    def _identity(self, dtype: torch.dtype) -> Tensor:
        return torch.ones(self.width, dtype=dtype)

    def _sample(
        self, scale: float, generator: torch.Generator | None, dtype: torch.dtype
    ) -> Tensor:
        """Independent fair signs (``scale`` is ignored)."""
        bits = torch.randint(0, 2, (self.width,), generator=generator)
        return (2.0 * bits - 1.0).to(dtype)

    def compose(self, g1: GroupElement, g2: GroupElement) -> Tensor:
        return self.check_element(g1) * self.check_element(g2)

    def inverse(self, g: GroupElement) -> Tensor:
        return self.check_element(g)

    def check_element(self, g: GroupElement) -> Tensor:
        s = self._element_tensor(g, (self.width,), "a sign vector")
        if not bool((s.abs() == 1).all()):
            raise InvalidGroupElementError(f"{self.name}: sign flips must be ±1, got {s.tolist()}")
        return s

    def _prepare(self, g: GroupElement, dtype: torch.dtype, device: torch.device) -> Any:
        return self.check_element(g).to(dtype=dtype, device=device)

    def _transform(self, t: Tensor, slot: Slot, prepared: Any) -> Tensor:
        return scale_along(t, slot.axis, prepared)  # s⁻¹ = s
