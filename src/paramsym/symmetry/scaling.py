"""Positive scalings: rescaling of homogeneous activations and normalisation-layer invariance.

* **Rescaling** (Ex. 1.2.4, 2.3.5, A.2.5; seed 000 Eq. 5). For a pointwise activation with
  σ(cz) = c^α σ(z) for c > 0 (ReLU, LeakyReLU: α = 1; z^p: α = p), every c ∈ (R>0)^h gives
  ``(W_A, b_A, W_B) ↦ (diag(c) W_A, c ⊙ b_A, W_B diag(c)^{−α})``. Through several homogeneous
  activations in a row the exponents multiply.
* **Normalisation invariance** (Ex. 1.2.7). BatchNorm standardises each feature over the
  batch, so scaling the rows (and bias) of the weight feeding it by any c > 0 changes nothing;
  LayerNorm standardises each sample over features, so one common scale c > 0 of the whole
  weight and bias changes nothing. Both are exact only when the layer's ``eps`` is 0:
  with ``eps > 0``, ``(cz − cμ)/sqrt(c²σ² + eps)`` differs from ``(z − μ)/sqrt(σ² + eps)``,
  and the symmetry is marked ``exact=False``.

Group (R>0)^h (or R>0 for one common scale), Lie algebra R^h of diagonal generators with
coordinates ξ = log c; infinitesimal action: slot T with power p gets ``p · ξ ⊙ T`` along the
neuron axis.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from paramsym.core.linalg import sum_of_squares
from paramsym.errors import InvalidGroupElementError
from paramsym.symmetry.base import (
    GroupElement,
    NeuronSymmetry,
    Region,
    Slot,
    SlotLike,
    scale_along,
)


class PositiveVectorGroup:
    """Group operations of (R>0)^dim under the entrywise product, with the Lie algebra R^dim
    and exp(ξ) = e^ξ: identity, sampling, exp, the first-order element, product and inverse.
    Mixed into :class:`PositiveScaling` and the seed-000 ``GeneralizedScaling``; needs ``dim``,
    ``check_element`` and ``check_xi`` from the class it is mixed into."""

    dim: int

    if TYPE_CHECKING:  # provided by the classes this is mixed into

        def check_element(self, g: GroupElement) -> Tensor: ...

        def check_xi(self, xi: Tensor) -> Tensor: ...

    def _identity(self, dtype: torch.dtype) -> Tensor:
        return torch.ones(self.dim, dtype=dtype)

    def _sample(
        self, scale: float, generator: torch.Generator | None, dtype: torch.dtype
    ) -> Tensor:
        """``exp(ξ)`` with ξ i.i.d. N(0, scale²): log-normal scales around 1."""
        return torch.exp(scale * torch.randn(self.dim, generator=generator, dtype=dtype))

    def exp(self, xi: Tensor) -> Tensor:
        return torch.exp(self.check_xi(xi))

    def linear_element(self, xi: Tensor) -> Tensor:
        return 1.0 + self.check_xi(xi)

    def compose(self, g1: GroupElement, g2: GroupElement) -> Tensor:
        return self.check_element(g1) * self.check_element(g2)

    def inverse(self, g: GroupElement) -> Tensor:
        return 1.0 / self.check_element(g)


class PositiveScaling(PositiveVectorGroup, NeuronSymmetry):
    """Multiplication of slots by powers of positive scales, one per neuron (or one in all).

    Args:
        width: hidden width h.
        incoming: slots multiplied by ``c`` (default axis 0, power +1): the weight and bias
            feeding the activation (or the normalisation layer).
        outgoing: slots multiplied by ``c^{−degree}`` (default axis 1): the next weight.
            Empty for normalisation invariance, where nothing downstream changes.
        degree: homogeneity degree α of the activation between (default 1).
        per_neuron: ``True`` for (R>0)^h, ``False`` for one common scale (LayerNorm).
        family: name prefix, ``"rescaling"`` or ``"norm_scaling"``.
        site: label used in the name.

    Elements are tensors of shape ``(h,)`` (or ``(1,)``) with positive entries; a negative or
    zero scale raises :class:`~paramsym.errors.InvalidGroupElementError` (ReLU-type
    activations are only *positively* homogeneous; odd activations have sign flips instead).

    >>> import torch, paramsym as ps
    >>> s = PositiveScaling(4, incoming=["0.weight", "0.bias"], outgoing=["2.weight"])
    >>> s
    PositiveScaling('rescaling[0->2]', group=(R>0)^4, dim=4)
    >>> s.compose(torch.tensor([1., 2., 3., 4.]), s.inverse(torch.tensor([1., 2., 3., 4.])))
    tensor([1., 1., 1., 1.])
    """

    def __init__(
        self,
        width: int,
        incoming: Sequence[SlotLike],
        outgoing: Sequence[SlotLike] = (),
        *,
        degree: float = 1.0,
        per_neuron: bool = True,
        family: str = "rescaling",
        site: str | None = None,
        exact: bool = True,
        notes: Sequence[str] = (),
    ) -> None:
        super().__init__(
            width,
            incoming,
            outgoing,
            family=family,
            group=f"(R>0)^{width}" if per_neuron else "R>0",
            dim=width if per_neuron else 1,
            outgoing_power=-float(degree),
            site=site,
            exact=exact,
            notes=notes,
        )
        self.degree = float(degree)
        self.per_neuron = per_neuron

    @property
    def touched_regions(self) -> frozenset[Region]:
        if self.per_neuron:
            return super().touched_regions
        # One common scale multiplies whole tensors. It commutes with every linear action but
        # not with a translation, so claim both axes of each tensor: products stay safe.
        return frozenset((s.name, axis, 0, None) for s in self.slots for axis in (0, 1))

    def check_element(self, g: GroupElement) -> Tensor:
        g = self._element_tensor(g, (self.dim,), "a scale vector")
        if not bool(torch.isfinite(g).all()):
            raise InvalidGroupElementError(f"{self.name}: scales must be finite")
        if not bool((g > 0).all()):
            raise InvalidGroupElementError(
                f"{self.name}: scales must be positive, got minimum {float(g.min()):.4g}. "
                "Positive homogeneity σ(cz) = c^α σ(z) (ReLU, LeakyReLU) and normalisation "
                "invariance hold only for c > 0; odd activations have a separate sign-flip "
                "symmetry"
            )
        return g

    def _prepare(self, g: GroupElement, dtype: torch.dtype, device: torch.device) -> Any:
        return self.check_element(g).to(dtype=dtype, device=device)

    def _transform(self, t: Tensor, slot: Slot, prepared: Any) -> Tensor:
        factors = prepared**slot.power
        return scale_along(t, slot.axis, factors) if self.per_neuron else t * factors[0]

    def _transform_transpose(self, t: Tensor, slot: Slot, prepared: Any) -> Tensor:
        return self._transform(t, slot, prepared)  # a diagonal map is its own transpose

    def _transform_in_place(
        self, region: Tensor, slot: Slot, prepared: Any, transpose: bool
    ) -> None:
        factors = prepared**slot.power  # diagonal: its own transpose; the same products
        if self.per_neuron:
            shape = [1] * region.ndim
            shape[slot.axis] = factors.numel()
            region.mul_(factors.reshape(shape))
        else:
            region.mul_(factors[0])

    def _algebra(self, xi: Tensor) -> Tensor:
        return xi

    def _algebra_adjoint(self, m: Tensor) -> Tensor:
        return m

    def _pairing(self, t: Tensor, c: Tensor, slot: Slot) -> Tensor:
        # Σ over the other axes of t ⊙ c; for c = t (‖∇L‖² by transport) one reduction pass
        others = [a for a in range(t.ndim) if a != slot.axis or not self.per_neuron]
        if others == []:  # a bias: nothing to sum over
            total = t * c
        elif c is t:
            total = sum_of_squares(t, others)
        else:
            total = (t * c).sum(dim=others)
        return slot.power * (total if self.per_neuron else total.reshape(1))

    def _differential(self, t: Tensor, slot: Slot, generator: Tensor) -> Tensor:
        rates = slot.power * generator
        return scale_along(t, slot.axis, rates) if self.per_neuron else t * rates[0]
