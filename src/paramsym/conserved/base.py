"""The :class:`ConservedQuantity` interface and helpers shared by the conserved-quantity modules.

A conserved quantity of gradient flow (GF, θ̇ = −∇L) is a function Q of the parameters with
dQ(θ(t))/dt = 0, equivalently ⟨∇Q, ∇L⟩ = 0 at every θ (dissertation §2.5, App. A.2.7). paramsym
has two kinds:

* :class:`~paramsym.conserved.MomentMap`: the quadratic quantities Q_M(θ) = ⟨θ, M·θ⟩ of a
  linear symmetry (Prop 2.5.1), all of them at once;
* :class:`~paramsym.conserved.ElementwiseQ`: the non-quadratic quantity of a two-layer net
  with an elementwise activation and whitened input (Eq. 2.17).

Both evaluate on a params dict and return a tensor (a matrix, a vector or a scalar), and both
give the normaliser of App. A.4.2 (:meth:`ConservedQuantity.magnitude`), so the tracker and
the drift prediction treat them alike.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import Tensor, nn

from paramsym.core.params import Params
from paramsym.curvature import loss_function
from paramsym.symmetry.base import Slot

LossFn = Callable[[Tensor, Tensor], Tensor]
Batch = tuple[Any, Tensor]


class ConservedQuantity(abc.ABC):
    """A function Q(θ) constant along the gradient flow of the losses a model's symmetry keeps.

    Attributes:
        name: readable name, e.g. ``"moment[GL[0->2]]"``.
        quadratic: whether Q is a quadratic form of θ whose cross terms vanish along the
            gradient (true for moment maps): then one gradient-descent step of size η changes Q
            by exactly ``η² Q(∇L)`` (App. A.4; see :func:`~paramsym.conserved.gd_drift`).
    """

    name: str
    quadratic: bool = False

    @abc.abstractmethod
    def __call__(self, params: Mapping[str, Tensor]) -> Tensor:
        """Q(θ): a tensor whose shape depends on the quantity (see each class)."""

    @abc.abstractmethod
    def magnitude(self, params: Mapping[str, Tensor]) -> Tensor:
        """The normaliser of App. A.4.2, a 0-d tensor: the sum over the terms Q is a difference
        of (one per parameter tensor, e.g. ½‖U‖² and Σ∫σ/σ′ for Eq. 2.17) of their norms."""

    def trace(self, value: Tensor) -> Tensor:
        """A scalar summary of a value of Q: the trace of a square matrix, the sum of a vector,
        the value itself for a scalar. For the imbalance μ of a linear layer this is
        ‖W_i‖² + ‖b_i‖² − ‖W_{i+1}‖² (= −2 × the Q of Eq. 2.14 for a two-layer net)."""
        if value.ndim == 2 and value.shape[0] == value.shape[1]:
            return torch.diagonal(value).sum()
        return value.sum()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"


def slot_rows(params: Mapping[str, Tensor], slot: Slot, width: int) -> Tensor:
    """The entries of one slot as a ``(width, rest)`` matrix: row k holds everything neuron k
    owns in that parameter (a row of an incoming weight, a bias entry, a column of an outgoing
    weight, or a block of rows when the slot has ``block > 1``)."""
    t = params[slot.name]
    if slot.offset is not None:
        t = t.narrow(slot.axis, slot.offset, slot.length(width))
    t = torch.movedim(t, slot.axis, 0)
    return t.reshape(width, -1)


def loss_gradient(
    model: nn.Module, loss_fn: LossFn, batch: Batch, params: Mapping[str, Tensor]
) -> Params:
    """∇L(θ) as a params dict, by one ``torch.autograd`` backward pass (per call about half the
    cost of ``torch.func.grad`` on the small models the tracker and tests step through)."""
    leaves = {k: t.detach().requires_grad_(True) for k, t in params.items()}
    with torch.enable_grad():
        loss = loss_function(model, loss_fn, batch)(leaves)
        grads = torch.autograd.grad(
            loss, list(leaves.values()), allow_unused=True, materialize_grads=True
        )
    return {k: g.detach() for k, g in zip(leaves, grads, strict=True)}
