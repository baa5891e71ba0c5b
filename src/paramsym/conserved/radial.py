"""The angular-momentum identity of radial networks (Thm 2.5.6, App. A.2.9).

A radial activation σ(z) = f(‖z‖) z commutes with O(h), whose algebra so(h) is antisymmetric:
Prop 2.5.1 gives only Q ≡ 0. What survives is Noether's orthogonality ⟨θ̇, M·θ⟩ = 0 for every
antisymmetric M, which for a hidden layer ``U σ(V x)`` reads

    ν = V V̇ᵀ − V̇ Vᵀ + Uᵀ U̇ − U̇ᵀ U = 0                                   (Eq. 2.13)

along gradient flow (θ̇ = −∇L), at every point: in each plane (k, l) the "angular momenta" of
the rows of U and the columns of V cancel. With biases and several layers (A.2.9) every
parameter the layer's neurons own adds its term; in slot form (R: the slot's neuron-major
matrix) ν = Σ_slots (R Ṙᵀ − Ṙ Rᵀ). The symmetric counterpart Σ_slots p (R Ṙᵀ + Ṙ Rᵀ) is
d/dt of the imbalance VVᵀ − UᵀU, which is *not* zero for a radial network (no conserved
quantity): the tests use it as the negative control. The identity holds for linear networks
too (O(h) ⊂ GL(h)), where the symmetric part vanishes as well.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from paramsym.conserved.base import Batch, LossFn, loss_gradient, slot_rows
from paramsym.core.params import Params, check_finite, resolve_params
from paramsym.errors import InvalidArgumentError, ShapeError
from paramsym.symmetry.base import Symmetry
from paramsym.symmetry.detect import symmetries as find_symmetries
from paramsym.symmetry.gl import MatrixNeuronSymmetry
from paramsym.symmetry.orthogonal import OrthogonalGroup


@dataclass
class AngularMomentum:
    """Both parts of Σ_slots R Ṙᵀ for one hidden layer (h×h tensors).

    Attributes:
        residual: ν = Σ (R Ṙᵀ − Ṙ Rᵀ), antisymmetric; zero along gradient flow (Thm 2.5.6).
        symmetric: Σ p (R Ṙᵀ + Ṙ Rᵀ) = dμ/dt, the rate of the imbalance; nonzero for radial
            networks.
        scale: Σ over slots of 2‖R Ṙᵀ‖_F, the size of the terms ν cancels.
        symmetry: name of the symmetry whose hidden layer this is.
    """

    residual: Tensor
    symmetric: Tensor
    scale: float
    symmetry: str

    @property
    def relative_residual(self) -> float:
        """‖ν‖_F / scale: rounding level when the identity holds."""
        return float(torch.linalg.matrix_norm(self.residual)) / max(self.scale, 1e-300)

    @property
    def relative_symmetric(self) -> float:
        """‖dμ/dt‖_F / scale (order one for a radial network)."""
        return float(torch.linalg.matrix_norm(self.symmetric)) / max(self.scale, 1e-300)


def _default_symmetry(model: nn.Module) -> Symmetry:
    found = [s for s in find_symmetries(model) if isinstance(s, MatrixNeuronSymmetry) and s.dim > 0]
    radial = [s for s in found if isinstance(s, OrthogonalGroup)]
    if radial or found:
        return (radial or found)[0]
    raise InvalidArgumentError(
        f"angular_momentum: {type(model).__name__} has no hidden layer with an O(h) or GL(h) "
        "symmetry (a radial or linear activation between two linear layers); pass symmetry="
    )


def angular_momentum(
    model: nn.Module,
    loss_fn: LossFn | None,
    batch: Batch | None,
    symmetry: Symmetry | None = None,
    params: Mapping[str, Tensor] | None = None,
    *,
    velocity: Mapping[str, Tensor] | None = None,
) -> AngularMomentum:
    """Thm 2.5.6's ν = V V̇ᵀ − V̇ Vᵀ + Uᵀ U̇ − U̇ᵀ U (with biases: every slot) at θ.

    Args:
        model: the network.
        loss_fn, batch: the loss whose gradient flow gives θ̇ = −∇L (unused with ``velocity``).
        symmetry: an O(h) (radial) or GL(h) (linear) symmetry of one hidden layer (default:
            the first O(h) of ``ps.symmetries(model)``, else the first GL(h)).
        params: the point θ (default: the model's parameters).
        velocity: θ̇ as a params dict, instead of −∇L.

    Returns:
        :class:`AngularMomentum` with ν (≈ 0 to rounding), the symmetric part dμ/dt and the
        scale of the terms.
    """
    point = resolve_params(model, params)
    symmetry = symmetry if symmetry is not None else _default_symmetry(model)
    if not isinstance(symmetry, MatrixNeuronSymmetry):
        raise InvalidArgumentError(
            f"angular_momentum: {symmetry.name} is not a matrix group acting on a hidden layer; "
            "Thm 2.5.6 is about O(h) (or GL(h) ⊃ O(h)) acting on V and U"
        )
    if velocity is None:
        if loss_fn is None or batch is None:
            raise InvalidArgumentError(
                "angular_momentum: give loss_fn and batch (θ̇ = −∇L) or velocity="
            )
        check_finite(point, "angular_momentum: params")
        gradient = loss_gradient(model, loss_fn, batch, point)
        rate: Params = {k: -g for k, g in gradient.items()}
    else:
        rate = dict(velocity)
        for name in symmetry.parameter_names:
            if name not in rate or rate[name].shape != point[name].shape:
                raise ShapeError(
                    f"angular_momentum: velocity['{name}'] is missing or not shaped like the "
                    "parameter"
                )
    width = symmetry.width
    residual = point[symmetry.slots[0].name].new_zeros(width, width)
    symmetric = torch.zeros_like(residual)
    scale = 0.0
    for slot in symmetry.slots:
        r, r_dot = slot_rows(point, slot, width), slot_rows(rate, slot, width)
        product = r @ r_dot.T
        residual = residual + (product - product.T)  # exactly antisymmetric
        symmetric = symmetric + slot.power * (product + product.T)
        scale += 2.0 * float(torch.linalg.matrix_norm(product))
    return AngularMomentum(residual, symmetric, scale, symmetry.name)
