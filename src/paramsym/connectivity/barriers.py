"""Unbounded interpolation barriers from rescaling (dissertation Prop. 3.3.3, 3.3.6, Fig. 3.2).

For ``L(W) = ‖Y − W_l σ(W_{l−1} f(W_{l−2}, …, W_1, X))‖²`` with σ positively homogeneous of
degree k (σ(cz) = c^k σ(z) for c > 0: ReLU, LeakyReLU, the identity with k = 1; z^p with
k = p), every minimum W has a partner W' = (…, m W_{l−1}, m^{−k} W_l) on the same connected
component (joined by the rescaling orbit). Along the chord the two factors interpolate
separately, so

    L((1 − α) W + α W') = (1 − c(α))² ‖Y‖²,   c(α) = (1 − α + α m^{−k}) (1 − α + α m)^k   (B.5)

which at α = ½ grows without bound in m: linear mode connectivity fails inside one component.

paramsym builds W' by acting with the uniform element m of the last hidden layer's rescaling
symmetry as :func:`paramsym.symmetries` finds it (:class:`~paramsym.PositiveScaling`, or
:class:`~paramsym.HiddenGL` with g = m I for a linear activation). That symmetry also scales
the hidden layer's bias, which keeps (B.5) exact. With an output bias b_l, which the rescaling
leaves alone, the same computation gives ``(1 − c(α))² ‖Y − b_l‖²``: pass ``‖Y − b_l‖²`` as
``target_norm_sq``. The loss must be the *sum* of squares, as in (3.3).

Notes on the text: the proof needs c > 0 only (the statement says c ∈ R); its choice of m and
the ‖Y‖²₂ in (B.8) have typos (any large m works); Prop. 3.3.6 lists W' with its first and last
layers swapped (notes 001a §4).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import scipy.optimize
import torch
from torch import Tensor, nn

from paramsym.core.params import Params, resolve_params
from paramsym.errors import InvalidArgumentError, UnsupportedModuleError
from paramsym.symmetry.base import Symmetry
from paramsym.symmetry.detect import symmetries as detect_symmetries
from paramsym.symmetry.gl import HiddenGL
from paramsym.symmetry.scaling import PositiveScaling


def _check_scale(scale: float, degree: float, what: str) -> None:
    if not (scale > 0 and math.isfinite(scale)):
        raise InvalidArgumentError(f"{what}: the scale m must be finite and > 0, got {scale}")
    if not (degree > 0 and math.isfinite(degree)):
        raise InvalidArgumentError(f"{what}: the degree k must be finite and > 0, got {degree}")


def rescaling_factor(alpha: float, scale: float, degree: float) -> float:
    """c(α) = (1 − α + α m^{−k}) (1 − α + α m)^k of (B.5): the chord's output is c(α) times
    the minimum's (scalable) output."""
    _check_scale(scale, degree, "rescaling_factor")
    return (1 - alpha + alpha * scale**-degree) * (1 - alpha + alpha * scale) ** degree


def rescaling_barrier(alpha: float, scale: float, degree: float, target_norm_sq: float) -> float:
    """The loss (1 − c(α))² ‖Y‖² on the chord between W and its rescaled partner (Eq. B.5).

    Args:
        alpha: the chord position in [0, 1].
        scale: m > 0.
        degree: the homogeneity degree k > 0 of σ.
        target_norm_sq: ‖Y‖² (‖Y − b_l‖² with an output bias b_l).

    >>> rescaling_barrier(0.5, 2.0, 1.0, 1.0)  # (1 − (3/4)(3/2))² = 1/64
    0.015625
    """
    return (1.0 - rescaling_factor(alpha, scale, degree)) ** 2 * target_norm_sq


def max_rescaling_barrier(
    scale: float, degree: float, target_norm_sq: float
) -> tuple[float, float]:
    """(α*, the largest loss on the chord) from the closed form (B.5), maximised over α ∈ [0, 1]
    with ``scipy.optimize.minimize_scalar`` (bounded). For k = 1 the maximum is at α = ½."""
    _check_scale(scale, degree, "max_rescaling_barrier")
    result = scipy.optimize.minimize_scalar(
        lambda a: -rescaling_barrier(a, scale, degree, target_norm_sq),
        bounds=(0.0, 1.0),
        method="bounded",
        options={"xatol": 1e-12},
    )
    alpha = float(result.x)
    return alpha, rescaling_barrier(alpha, scale, degree, target_norm_sq)


@dataclass
class RescalingPair:
    """A minimum and its rescaled partner (Prop. 3.3.3), built by :func:`rescaling_pair`.

    Attributes:
        params_a: W.
        params_b: W' = (…, m W_{l−1}, m^{−k} W_l): the same function.
        scale: m.
        degree: k.
        symmetry: name of the rescaling symmetry used.
    """

    params_a: Params = field(repr=False)
    params_b: Params = field(repr=False)
    scale: float
    degree: float
    symmetry: str

    def factor(self, alpha: float) -> float:
        """c(α)."""
        return rescaling_factor(alpha, self.scale, self.degree)

    def barrier(self, alpha: float, target_norm_sq: float) -> float:
        """The closed-form loss (B.5) at α."""
        return rescaling_barrier(alpha, self.scale, self.degree, target_norm_sq)

    def to_dict(self) -> dict[str, Any]:
        return {"scale": self.scale, "degree": self.degree, "symmetry": self.symmetry}


def _rescaling_symmetries(model: nn.Module) -> list[Symmetry]:
    return [
        s
        for s in detect_symmetries(model)
        if isinstance(s, HiddenGL)
        or (isinstance(s, PositiveScaling) and s.per_neuron and any(sl.power < 0 for sl in s.slots))
    ]


def rescaling_pair(
    model: nn.Module,
    scale: float,
    params: Mapping[str, Tensor] | None = None,
    *,
    symmetry: Symmetry | str | None = None,
) -> RescalingPair:
    """W and W' = (…, m W_{l−1}, m^{−k} W_l) for the last hidden layer (Prop. 3.3.3).

    Args:
        model: a network whose last hidden layer has a homogeneous (or linear) activation.
        scale: m > 0.
        params: W (default: the model's parameters).
        symmetry: the rescaling symmetry to use, or its name (default: the last
            :class:`~paramsym.PositiveScaling` or :class:`~paramsym.HiddenGL` that
            :func:`paramsym.symmetries` finds, which acts on the last two layers).

    >>> import torch, paramsym as ps
    >>> model = ps.mlp([3, 4, 2], activation="leaky_relu", seed=0)
    >>> pair = rescaling_pair(model, 10.0)
    >>> ratio = pair.params_b["2.weight"] / pair.params_a["2.weight"]
    >>> pair.symmetry, pair.degree, round(float(ratio[0, 0]), 6)
    ('rescaling[0->2]', 1.0, 0.1)
    """
    candidates = _rescaling_symmetries(model)
    chosen: Symmetry | None
    if symmetry is None:
        chosen = candidates[-1] if candidates else None
        if chosen is None:
            raise UnsupportedModuleError(
                f"rescaling_pair: paramsym found no rescaling symmetry in {type(model).__name__}; "
                "Prop. 3.3.3 needs a positively homogeneous (or linear) activation between the "
                "last two layers"
            )
    elif isinstance(symmetry, str):
        chosen = next((s for s in candidates if s.name == symmetry), None)
        if chosen is None:
            raise InvalidArgumentError(
                f"rescaling_pair: no rescaling symmetry named {symmetry!r}; found "
                f"{[s.name for s in candidates]}"
            )
    else:
        chosen = symmetry
    point = resolve_params(model, params)
    reference = point[chosen.parameter_names[0]]
    if isinstance(chosen, PositiveScaling) and chosen.per_neuron:
        degree = chosen.degree
        element = torch.full((chosen.width,), float(scale), dtype=reference.dtype)
    elif isinstance(chosen, HiddenGL):
        degree = 1.0
        element = float(scale) * torch.eye(chosen.width, dtype=reference.dtype)
    else:
        raise InvalidArgumentError(
            f"rescaling_pair: {chosen.name} is not a per-neuron rescaling (PositiveScaling) or a "
            "hidden GL symmetry"
        )
    _check_scale(float(scale), degree, "rescaling_pair")
    moved = chosen.act(point, element.to(reference.device))
    return RescalingPair(
        params_a=point, params_b=moved, scale=float(scale), degree=degree, symmetry=chosen.name
    )
