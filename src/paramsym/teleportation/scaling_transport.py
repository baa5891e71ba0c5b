"""Gradient transport along positive scalings in log-scale coordinates: teleports that cost
one gradient.

For the neuron rescalings of ReLU-type networks (and other :class:`PositiveScaling` actions),
g·θ multiplies each slot along its neuron axis by c^p, so the transported gradient
∇L(g·θ) = A_g⁻ᵀ∇L(θ) multiplies it by c^{−p}, and a diagonal quadratic objective
f(v) = Σ w ⊙ v² (‖∇L‖², or a diagonal preconditioner's ‖∇L‖²_A) on the whole orbit is

    J(u) = Σ_tensors Σ_entries (w ⊙ v₀²) · exp(−2 Σ_slots p · u_s[neuron]),   u_s = log c_s,

a contraction of the squared gradient at the start with one exponential per tensor axis: for
a weight matrix whose rows and columns both scale, e_rᵀ M e_c. The groups commute, so a
teleport's whole state is the accumulated log-scales u, and every step costs a few
matrix-vector products of the size of the parameters (summed over the axes no slot touches
once, up front), with no pass through the network and no action applied. The parameters and
covectors are moved once, at the end. Equal to the general transport path and to the Hessian
path (tested).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from functools import cached_property

import torch
from torch import Tensor

from paramsym.core.params import Params
from paramsym.symmetry.base import Symmetry
from paramsym.symmetry.scaling import PositiveScaling
from paramsym.teleportation.ascent import Point, TransportAscent, norm
from paramsym.teleportation.objectives import GradNorm, Objective


def scalings_only(symmetries: Sequence[Symmetry], objective: Objective) -> bool:
    """Whether the log-scale path applies: every symmetry a :class:`PositiveScaling` whose
    slots cover whole axes one entry per neuron, or a translation (which leaves every
    gradient unchanged, so the objective has zero rate along it and it is not moved), and a
    diagonal quadratic objective."""
    if objective.diagonal_weights() is None:
        return False
    return all(
        s.translation
        or (
            isinstance(s, PositiveScaling)
            and all(slot.offset is None and slot.block == 1 for slot in s.slots)
        )
        for s in symmetries
    )


class _Contraction:
    """Σ M ⊙ exp(c + Σ_axes ℓ_axis) for one parameter and its derivatives in the log-factors:
    M is summed over the untouched axes up front; each touched axis has the summed
    log-factors ℓ of the slots on it, and c collects common scales (a scalar). With a = e^ℓ,
    two touched axes give aᵀ M b and the rates a ⊙ (M b), b ⊙ (Mᵀ a): two matrix-vector
    products."""

    def __init__(self, squared: Tensor, axes: Sequence[int]) -> None:
        self.axes = sorted(set(axes))
        if len(self.axes) > 2:
            raise NotImplementedError("a parameter scaled along more than two axes")
        others = [a for a in range(squared.ndim) if a not in self.axes]
        self.reduced = squared.sum(dim=others) if others else squared

    def __call__(
        self, logs: Mapping[int, Tensor], common: Tensor
    ) -> tuple[Tensor, dict[int, Tensor], Tensor]:
        """(value, ∂value/∂ℓ per axis, ∂value/∂c)."""
        scale = torch.exp(common)
        if not self.axes:
            value = self.reduced.sum() * scale
            return value, {}, value
        if len(self.axes) == 1:
            (axis,) = self.axes
            weighted = self.reduced * torch.exp(logs[axis]) * scale
            value = weighted.sum()
            return value, {axis: weighted}, value
        rows, columns = (torch.exp(logs[a]) for a in self.axes)
        by_columns = self.reduced @ columns
        value = rows @ by_columns * scale
        rates = {
            self.axes[0]: rows * by_columns * scale,
            self.axes[1]: columns * (rows @ self.reduced) * scale,
        }
        return value, rates, value


class ScalingTransportAscent(TransportAscent):
    """The transport path for positive scalings (module docstring): one gradient, then a few
    matrix-vector products per step."""

    @cached_property
    def scalings(self) -> list[PositiveScaling]:
        """The orbit's positive scalings (the translations it may hold never move)."""
        return [s for s in self.orbit.symmetries if isinstance(s, PositiveScaling)]

    def start(self, params: Mapping[str, Tensor], covectors: Sequence[Params]) -> Point:
        theta = {k: v.detach() for k, v in params.items()}
        for s in self.scalings:  # once: the steps never act on θ
            s.check_params(theta, buffers=False)
        _, gradient = self.loss_and_gradient(theta)
        self.theta, self.gradient = theta, gradient
        squared = self.objective.squared_entries(gradient)
        assert squared is not None
        axes: dict[str, list[int]] = {}
        for s in self.scalings:
            if s.per_neuron:
                for slot in s.slots:
                    axes.setdefault(slot.name, []).append(slot.axis)
        self.untouched = sum(
            (float(m.sum()) for k, m in squared.items() if not self._touches(k)), 0.0
        )
        self.contractions = {
            k: _Contraction(m, axes.get(k, [])) for k, m in squared.items() if self._touches(k)
        }
        ref = next(iter(theta.values()))
        zeros = [torch.zeros(s.dim, dtype=ref.dtype, device=ref.device) for s in self.scalings]
        point = self._at(zeros, covectors)
        point.grad_norm = self._grad_norm(point.value, gradient)
        return point

    def _grad_norm(self, value: float, gradient: Mapping[str, Tensor]) -> float:
        """‖∇L‖: √J for ‖∇L‖² itself, else the norm of the (transported) gradient."""
        if isinstance(self.objective, GradNorm):
            return math.sqrt(max(value, 0.0))
        return norm(gradient)

    def _touches(self, name: str) -> bool:
        return any(name in s.parameter_names for s in self.scalings)

    def _value_and_rates(self, log_scales: Sequence[Tensor]) -> tuple[Tensor, list[Tensor]]:
        """J(u) (module docstring) and ∂J/∂u_s for every scaling s, in closed form."""
        logs: dict[str, dict[int, Tensor]] = {}
        commons: dict[str, Tensor] = {}
        for s, u in zip(self.scalings, log_scales, strict=True):
            for slot in s.slots:
                if slot.name not in self.contractions:
                    continue
                term = -2.0 * slot.power * u
                if s.per_neuron:
                    per_axis = logs.setdefault(slot.name, {})
                    per_axis[slot.axis] = per_axis.get(slot.axis, 0.0) + term
                else:
                    commons[slot.name] = commons.get(slot.name, 0.0) + term[0]
        ref = next(iter(self.theta.values()))
        zero = torch.zeros((), dtype=ref.dtype, device=ref.device)
        value = torch.full_like(zero, self.untouched)
        by_axis: dict[str, dict[int, Tensor]] = {}
        by_common: dict[str, Tensor] = {}
        for name, contraction in self.contractions.items():
            part, by_axis[name], by_common[name] = contraction(
                logs.get(name, {}), commons.get(name, zero)
            )
            value = value + part
        rates = []
        for s in self.scalings:
            rate = torch.zeros(s.dim, dtype=zero.dtype, device=zero.device)
            for slot in s.slots:
                if slot.name not in self.contractions:
                    continue
                if s.per_neuron:
                    rate = rate - 2.0 * slot.power * by_axis[slot.name][slot.axis]
                else:
                    rate = rate - 2.0 * slot.power * by_common[slot.name]
            rates.append(rate)
        return value, rates

    def _at(self, log_scales: Sequence[Tensor], covectors: Sequence[Params]) -> Point:
        """J and ∂J/∂u (kept in ``gradient`` by symmetry name) at the log-scales ``u``."""
        value, rates = self._value_and_rates(log_scales)
        by_scaling: dict[Symmetry, Tensor] = dict(zip(self.scalings, rates, strict=True))
        ascent = [  # aligned with the orbit's symmetries; translations have zero rate
            by_scaling.get(s, torch.zeros(s.dim, dtype=value.dtype, device=value.device))
            for s in self.orbit.symmetries
        ]
        return Point(
            self.theta,
            float(value),
            self.loss_before,
            {},
            math.nan,
            covectors=list(covectors),
            log_scales=list(log_scales),
            ascent=ascent,
        )

    def direction(self, point: Point) -> list[Tensor]:
        return point.ascent

    def advance(self, point: Point, xis: Sequence[Tensor]) -> Point:
        """Add log g(ξ) to the log-scales: ξ itself for ``exp``, log(1 + ξ) for the first-order
        element (which must stay positive)."""
        by_symmetry = dict(zip(self.orbit.symmetries, xis, strict=True))
        if self.orbit.parameterization == "exp":
            steps = [by_symmetry[s] for s in self.scalings]
        else:
            steps = [
                torch.log(s.check_element(self.orbit.element(s, by_symmetry[s])))
                for s in self.scalings
            ]
        moved = [u + step for u, step in zip(point.log_scales, steps, strict=True)]
        return self._at(moved, point.covectors)

    def accept(self, point: Point) -> Point:
        return point

    def finish(self, point: Point) -> Point:
        """Move θ by the accumulated scales c = e^u, once, and ∇L and the covectors by c⁻¹
        (a scaling's gradient transport A_c⁻ᵀ is its own action by the inverse)."""
        moved = any(bool(u.any()) for u in point.log_scales)
        if not moved:  # the start
            return point
        inverse = [torch.exp(-u) for u in point.log_scales]
        if isinstance(self.objective, GradNorm):
            grad_norm = self._grad_norm(point.value, {})
        else:
            grad_norm = norm(self._act(self.gradient, inverse))
        return Point(
            self._act(self.theta, [torch.exp(u) for u in point.log_scales]),
            point.value,
            point.loss,
            point.gradient,
            grad_norm,
            covectors=[self._act(m, inverse) for m in point.covectors],
            log_scales=point.log_scales,
        )

    def _act(self, tensors: Mapping[str, Tensor], scales: Sequence[Tensor]) -> Params:
        """``tensors`` (all of θ, or a covector over some names) moved by every scaling."""
        out = dict(tensors)
        with torch.no_grad():
            for s, c in zip(self.scalings, scales, strict=True):
                if any(k not in out for k in s.parameter_names):
                    present = {
                        k: out.get(k, torch.zeros_like(self.theta[k])) for k in s.parameter_names
                    }
                    moved = s.act_unchecked(present, c)
                    out.update({k: moved[k] for k in s.parameter_names if k in tensors})
                else:
                    out = s.act_unchecked(out, c)
        return out
