"""Symmetry-induced curves, their curvature, and the chord bound (dissertation §3.4).

* :func:`symmetry_path`: γ(t) = exp(t log g)·w (Eq. 3.5), or γ_M(t) = exp(tM)·w for an algebra
  element M (Eq. 3.4). For an exact symmetry the loss is constant along γ, which joins w to
  g·w. With the data-dependent pseudo-inverse map of Eq. 3.6,
  ``g·(U, V) = (U σ(VX) σ(gVX)⁺, gV)`` (:class:`~paramsym.PseudoInverseGL`), γ is defined the
  same way but the loss may change along it: the output change of the map is bounded by
  Prop. 3.4.1, measured by :func:`layer_output_change`.
* :func:`group_log`: the algebra coordinates of log g. torch has no matrix logarithm;
  paramsym uses ``scipy.linalg.logm`` (Schur-Padé, principal branch) and checks that the
  result is real and that exp(log g) = g. A real logarithm exists only in the identity
  component (det g > 0) and, for the principal one, without negative real eigenvalues.
* :func:`curve_geometry`: speed, curvature κ = ‖γ''_⊥‖/‖γ'‖² (equal to ‖T'‖/‖γ'‖ of §3.4.2),
  length and chord of any differentiable path, with γ' and γ'' by nested forward-mode autodiff
  (``torch.func.jvp``): exact derivatives, no finite differences.
* :func:`chord_bound`: Thm 3.4.2. If a curve on the level set L⁻¹(c) joins w₁ to w₂ with
  curvature ≤ κ_max, every point of the chord is within
  ``d_max = (1/κ_max)(1 − √(1 − (κ_max‖w₂ − w₁‖/2)²))`` of the level set (the sagitta of a
  circle of radius 1/κ_max), and ``|L − c| ≤ C_L d_max``; first order ``κ_max‖w₂ − w₁‖²/8``.

**[ERRATUM] Thm 3.4.2 needs a short curve.** The sagitta comparison holds for curves that turn
by at most a half circle, length ≤ π/κ_max (the proof compares with one circular arc and says
nothing of longer curves). Without it the bound is false: the major arc of a circle of radius R
(length > πR, κ = 1/R) has chord ℓ < 2R, and the chord's midpoint is ℓ/2 from the arc (the
nearest curve points are the ends), more than ``d_max = R − √(R² − ℓ²/4)``. The tests check
both sides; :func:`chord_bound` refuses a ``curve_length`` above π/κ_max. The sufficiency of
length ≤ π/κ_max was checked numerically on random planar curves of bounded curvature.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import scipy.linalg
import torch
from torch import Tensor

from paramsym.connectivity.paths import Grid, Path, grid
from paramsym.core.params import Params, flatten
from paramsym.errors import (
    ApproximateActionWarning,
    InvalidArgumentError,
    InvalidGroupElementError,
    ShapeError,
)
from paramsym.symmetry.base import GroupElement, Symmetry
from paramsym.symmetry.nonlinear import DataDependentGL
from paramsym.symmetry.product import ProductSymmetry
from paramsym.symmetry.scaling import PositiveScaling
from paramsym.symmetry.translation import SoftmaxTranslation


def _real_logm(g: Tensor, name: str) -> Tensor:
    """The principal real logarithm of a square matrix (``scipy.linalg.logm``), or an error."""
    matrix = g.detach().to("cpu", torch.float64).numpy()
    sign, _ = np.linalg.slogdet(matrix)
    if sign <= 0:
        raise InvalidGroupElementError(
            f"{name}: g has det ≤ 0, so it is not in the identity component and no curve "
            "exp(t log g) reaches it; compose it with an odd permutation first (Prop. 3.3.2) "
            "or use g = exp(M)"
        )
    log = np.asarray(scipy.linalg.logm(matrix))
    if np.iscomplexobj(log):
        scale = max(1.0, float(np.abs(log.real).max()))
        if float(np.abs(log.imag).max()) > 1e-8 * scale:
            raise InvalidGroupElementError(
                f"{name}: g has no real principal logarithm (it has negative real eigenvalues); "
                "the curve exp(t log g) is not defined. Use g = exp(M) with M small"
            )
        log = log.real
    return torch.as_tensor(log, dtype=torch.float64)


def _log_coordinates(symmetry: Symmetry, g: GroupElement) -> Tensor:
    """Algebra coordinates (float64) of log g, before the round-trip check."""
    if isinstance(symmetry, ProductSymmetry):
        if not isinstance(g, tuple) or len(g) != len(symmetry.factors):
            raise ShapeError(
                f"group_log: an element of {symmetry.name} is a tuple of "
                f"{len(symmetry.factors)} elements, one per factor"
            )
        return torch.cat(
            [
                _log_coordinates(factor, part)
                for factor, part in zip(symmetry.factors, g, strict=True)
            ]
        )
    element = symmetry.check_element(g)
    if not isinstance(element, Tensor):
        raise InvalidArgumentError(f"group_log: {symmetry.name} has non-tensor elements")
    if isinstance(symmetry, PositiveScaling):
        return torch.log(element.detach().to("cpu", torch.float64))
    if isinstance(symmetry, SoftmaxTranslation):
        return element.detach().to("cpu", torch.float64)
    if element.ndim == 2 and element.shape[0] == element.shape[1]:
        log = _real_logm(element, symmetry.name)
        # exp(ξ) = matrix_exp(A ξ) with A linear: A is the Jacobian of exp at 0.
        zero = torch.zeros(symmetry.dim, dtype=torch.float64)
        basis = torch.func.jacfwd(symmetry.exp)(zero).reshape(-1, symmetry.dim)
        solution = torch.linalg.lstsq(basis, log.reshape(-1, 1)).solution
        return solution.reshape(-1)
    raise InvalidArgumentError(
        f"group_log: no logarithm is known for {type(symmetry).__name__} ({symmetry.name}); "
        "pass the algebra element instead (symmetry_path(..., xi=...))"
    )


def _max_difference(a: GroupElement, b: GroupElement) -> float:
    if isinstance(a, tuple) and isinstance(b, tuple):
        return max((_max_difference(p, q) for p, q in zip(a, b, strict=True)), default=0.0)
    if isinstance(a, Tensor) and isinstance(b, Tensor):
        scale = max(1.0, float(b.abs().max()))
        return float((a.to(b.dtype) - b).abs().max()) / scale
    return math.inf


def group_log(symmetry: Symmetry, g: GroupElement) -> Tensor:
    """Algebra coordinates ξ with ``symmetry.exp(ξ) == g``, shape ``(symmetry.dim,)``.

    Matrix groups (GL, O(h), the data-dependent GL actions) use the principal real logarithm
    of ``scipy.linalg.logm``; positive scalings use the entrywise log; translations are their
    own coordinates; products work factor by factor. Raises
    :class:`~paramsym.errors.InvalidGroupElementError` when g has no real logarithm (det g ≤ 0,
    or negative real eigenvalues) or when exp(ξ) does not give back g.

    >>> import torch, paramsym as ps
    >>> s = ps.HiddenGL(3, incoming=["0.weight"], outgoing=["2.weight"])
    >>> xi = 0.3 * torch.randn(9, dtype=torch.float64)
    >>> torch.allclose(group_log(s, s.exp(xi)), xi)
    True
    """
    if symmetry.dim == 0:
        raise InvalidArgumentError(
            f"group_log: {symmetry.name} is a discrete group ({symmetry.group}); it has no Lie "
            "algebra and no curves exp(t log g)"
        )
    xi = _log_coordinates(symmetry, g)
    reference = _first_tensor(g)
    xi = xi.to(dtype=reference.dtype if reference.is_floating_point() else torch.float64)
    tolerance = 1e4 * torch.finfo(xi.dtype).eps
    error = _max_difference(symmetry.exp(xi), g)
    if not error <= tolerance:
        raise InvalidGroupElementError(
            f"group_log: exp(log g) differs from g by {error:.2e} (relative, max entry) for "
            f"{symmetry.name}; g is not of the form exp(ξ) in this symmetry's algebra"
        )
    return xi


def _first_tensor(g: GroupElement) -> Tensor:
    while isinstance(g, tuple):
        g = g[0]
    return g


Rate = tuple[str, Any]
"""How exp(tξ) moves: ("matrix", M) with d/dt exp(tξ) = M exp(tξ); ("scaling", ξ) entrywise;
("translation", ξ); ("product", [rates of the factors])."""


def _rate(symmetry: Symmetry, xi: Tensor) -> Rate | None:
    """The generator of t ↦ exp(tξ) in the element's own form, or ``None`` if unknown."""
    if isinstance(symmetry, ProductSymmetry):
        parts = torch.split(xi, [f.dim for f in symmetry.factors])
        rates = [_rate(f, part) for f, part in zip(symmetry.factors, parts, strict=True)]
        return None if any(r is None for r in rates) else ("product", rates)
    if isinstance(symmetry, PositiveScaling):
        return ("scaling", xi)
    if isinstance(symmetry, SoftmaxTranslation):
        return ("translation", xi)
    identity = symmetry.identity(dtype=xi.dtype, device=xi.device)
    if isinstance(identity, Tensor) and identity.ndim == 2:
        # exp(ξ) = matrix_exp(A ξ) with A linear, so d/ds exp(sξ) at s = 0 is the generator A ξ
        generator = torch.func.jvp(symmetry.exp, (torch.zeros_like(xi),), (xi,))[1]
        return ("matrix", generator)
    return None


def _element_jet(
    symmetry: Symmetry, rate: Rate, xi: Tensor, t: Tensor
) -> tuple[GroupElement, GroupElement, GroupElement]:
    """(g, g', g'') of g(t) = exp(tξ), in closed form from the generator (no autodiff through
    the matrix exponential, whose nested forward mode is slow in torch)."""
    kind, value = rate
    if kind == "product":
        assert isinstance(symmetry, ProductSymmetry)
        parts = torch.split(xi, [f.dim for f in symmetry.factors])
        jets = [
            _element_jet(f, r, part, t)
            for f, r, part in zip(symmetry.factors, value, parts, strict=True)
        ]
        return tuple(j[0] for j in jets), tuple(j[1] for j in jets), tuple(j[2] for j in jets)
    g = symmetry.exp(t * xi)
    assert isinstance(g, Tensor)
    if kind == "matrix":
        first = value @ g
        return g, first, value @ first
    if kind == "scaling":
        return g, value * g, value * value * g
    return g, value, torch.zeros_like(value)  # translation: exp(tξ) = tξ


class SymmetryPath:
    """γ(t) = exp(t ξ)·w for a symmetry (Eqs. 3.4-3.6), a :data:`~paramsym.connectivity.Path`.

    Attributes:
        symmetry: the symmetry acting.
        params: the start w = γ(0).
        xi: algebra coordinates ξ (log g for the curve from w to g·w).
        x: the batch of a data-dependent action (Eq. 3.6), else ``None``.
        exact: whether the action preserves the function exactly (``symmetry.exact``). For the
            pseudo-inverse map it is ``False``: the map is exact on the batch only where σ(gH)
            has full column rank, and evaluating γ does not warn at each point; measure the
            loss along γ with :func:`~paramsym.connectivity.losses_along`.

    :meth:`jet` gives γ, γ' and γ'' with the element's derivatives in closed form (g' = M g for
    a matrix group) and forward-mode autodiff through ``act`` only; :func:`curve_derivatives`
    uses it (tested against nested autodiff through the whole path).
    """

    def __init__(
        self,
        symmetry: Symmetry,
        params: Mapping[str, Tensor],
        xi: Tensor,
        x: Tensor | None = None,
    ) -> None:
        self.symmetry = symmetry
        self.params = dict(params)
        self.xi = symmetry.check_xi(xi)
        self.x = x
        self.exact = symmetry.exact
        self._rate: Rate | None = None
        self._rate_known = False

    def element(self, t: Tensor | float) -> GroupElement:
        """exp(t ξ)."""
        t = torch.as_tensor(t, dtype=torch.float64)
        return self.symmetry.exp(t * self.xi)

    def _act(self, g: GroupElement) -> Params:
        if self.exact:
            return self.symmetry.act(self.params, g, self.x)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ApproximateActionWarning)
            return self.symmetry.act(self.params, g, self.x)

    def __call__(self, t: Tensor) -> Params:
        return self._act(self.element(t))

    def jet(self, t: Tensor | float) -> tuple[Tensor, Tensor, Tensor] | None:
        """(γ(t), γ'(t), γ''(t)) as flat vectors, or ``None`` for a family whose exp paramsym
        cannot differentiate in closed form (then use nested autodiff through the path)."""
        if not self._rate_known:
            self._rate, self._rate_known = _rate(self.symmetry, self.xi), True
        if self._rate is None:
            return None
        t = torch.as_tensor(t, dtype=torch.float64)
        g, rate, acceleration = _element_jet(self.symmetry, self._rate, self.xi, t)

        def position(h: GroupElement) -> Tensor:
            return flatten(self._act(h))

        def position_and_velocity(h: GroupElement) -> tuple[Tensor, Tensor]:
            out = torch.func.jvp(position, (h,), (rate,))
            return out[0], out[1]

        # γ'' = D²act[g', g'] + D act[g''] (the chain rule through g(t))
        out = torch.func.jvp(position_and_velocity, (g,), (rate,))
        (point, velocity), (_, curvature_term) = out[0], out[1]
        extra = torch.func.jvp(position, (g,), (acceleration,))[1]
        return point, velocity, curvature_term + extra

    def __repr__(self) -> str:
        return f"SymmetryPath({self.symmetry.name}, |ξ| = {float(self.xi.norm()):.3g})"


def symmetry_path(
    symmetry: Symmetry,
    params: Mapping[str, Tensor],
    *,
    g: GroupElement | None = None,
    xi: Tensor | None = None,
    x: Tensor | None = None,
) -> SymmetryPath:
    """The curve γ(t) = exp(t log g)·w from w = ``params`` (t = 0) to g·w (t = 1), Eq. 3.5, or
    γ_M(t) = exp(t M)·w with M given by its coordinates ``xi`` (Eq. 3.4). Give exactly one of
    ``g`` and ``xi``; ``x`` is the batch of a data-dependent action (Eq. 3.6).

    >>> import torch, paramsym as ps
    >>> model = ps.mlp([3, 4, 2], activation="identity", dtype=torch.float64, seed=0)
    >>> s = ps.symmetries(model)[0]                         # GL(4) on the hidden layer
    >>> g = s.sample(scale=0.5, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    >>> gamma = symmetry_path(s, ps.params_of(model), g=g)
    >>> end = s.act(ps.params_of(model), g)
    >>> all(torch.allclose(gamma(torch.tensor(1.0))[k], end[k]) for k in end)
    True
    """
    if (g is None) == (xi is None):
        raise InvalidArgumentError("symmetry_path: give exactly one of g (a group element) or xi")
    if symmetry.dim == 0:
        raise InvalidArgumentError(
            f"symmetry_path: {symmetry.name} is a discrete group ({symmetry.group}); it induces "
            "no curves. Use weight_matching or apply_permutations for permutations"
        )
    if symmetry.data_dependent and x is None:
        raise InvalidArgumentError(
            f"symmetry_path: {symmetry.name} is data-dependent; pass the batch, x=..."
        )
    reference = next(iter(params.values()), None)
    if reference is None:
        raise InvalidArgumentError("symmetry_path: params is empty")
    coordinates = group_log(symmetry, g) if g is not None else xi
    assert coordinates is not None
    coordinates = coordinates.to(dtype=reference.dtype, device=reference.device)
    return SymmetryPath(symmetry, params, coordinates, x)


def curve_derivatives(path: Path, t: Tensor | float) -> tuple[Tensor, Tensor, Tensor]:
    """(γ(t), γ'(t), γ''(t)) as flat vectors of shape ``(P,)``.

    Paths with a ``jet(t)`` method (:class:`SymmetryPath`) give their own; any other path is
    differentiated by nested ``torch.func.jvp`` (forward over forward) in t.
    """
    jet = getattr(path, "jet", None)
    if callable(jet):
        known = jet(t)
        if known is not None:
            return known
    return nested_derivatives(path, t)


def nested_derivatives(path: Path, t: Tensor | float) -> tuple[Tensor, Tensor, Tensor]:
    """(γ(t), γ'(t), γ''(t)) by nested ``torch.func.jvp`` through the whole path (the generic
    method, and the oracle of :meth:`SymmetryPath.jet`)."""
    t = torch.as_tensor(t, dtype=torch.float64)
    one = torch.ones_like(t)

    def position(s: Tensor) -> Tensor:
        return flatten(path(s))

    def position_and_velocity(s: Tensor) -> tuple[Tensor, Tensor]:
        out = torch.func.jvp(position, (s,), (one,))
        return out[0], out[1]

    out = torch.func.jvp(position_and_velocity, (t,), (one,))
    (point, velocity), (_, acceleration) = out[0], out[1]
    return point, velocity, acceleration


def curvature_from_derivatives(velocity: Tensor, acceleration: Tensor) -> Tensor:
    """κ = ‖γ'' − (γ''·γ̂')γ̂'‖/‖γ'‖², which equals √(‖γ'‖²‖γ''‖² − (γ'·γ'')²)/‖γ'‖³."""
    speed_sq = velocity @ velocity
    if float(speed_sq) == 0.0:
        raise InvalidArgumentError(
            "curvature: the path has zero velocity here (not a regular curve); its curvature is "
            "undefined"
        )
    normal = acceleration - (acceleration @ velocity / speed_sq) * velocity
    return torch.linalg.vector_norm(normal) / speed_sq


@dataclass
class CurveGeometry:
    """Differential geometry of a path sampled at ``ts`` (:func:`curve_geometry`).

    Attributes:
        ts: the sample points.
        speed: ‖γ'(t)‖ at each t.
        curvature: κ(t) at each t.
        kappa_max: the largest sampled curvature (a lower estimate of the supremum over the
            interval; sample finely where κ varies).
        length: ∫‖γ'‖ dt over [ts[0], ts[-1]] by the trapezoidal rule (approximate).
        chord_length: ‖γ(ts[-1]) − γ(ts[0])‖.
    """

    ts: list[float]
    speed: list[float]
    curvature: list[float]
    kappa_max: float
    length: float
    chord_length: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def chord_bound(self, lipschitz: float | None = None) -> ChordBound:
        """Thm 3.4.2 with the sampled κ_max, this chord and this curve length."""
        return chord_bound(
            self.kappa_max, self.chord_length, lipschitz=lipschitz, curve_length=self.length
        )


def curve_geometry(path: Path, ts: Grid = 33) -> CurveGeometry:
    """Speed, curvature, length and chord of ``path`` on the points ``ts`` (see the class).

    >>> import math, torch
    >>> def circle(t):  # radius 2
    ...     return {"w": 2.0 * torch.stack([torch.cos(t), torch.sin(t)])}
    >>> geometry = curve_geometry(circle, torch.linspace(0.0, 1.0, 5, dtype=torch.float64))
    >>> [round(k, 12) for k in geometry.curvature]
    [0.5, 0.5, 0.5, 0.5, 0.5]
    """
    points = grid(ts)
    speeds, curvatures = [], []
    first = last = None
    for t in points:
        point, velocity, acceleration = curve_derivatives(path, t)
        first = point if first is None else first
        last = point
        speeds.append(float(torch.linalg.vector_norm(velocity)))
        curvatures.append(float(curvature_from_derivatives(velocity, acceleration)))
    assert first is not None
    assert last is not None
    steps = (points[1:] - points[:-1]).tolist()
    length = sum(0.5 * h * (a + b) for h, a, b in zip(steps, speeds[:-1], speeds[1:], strict=True))
    return CurveGeometry(
        ts=points.tolist(),
        speed=speeds,
        curvature=curvatures,
        kappa_max=max(curvatures),
        length=float(length),
        chord_length=float(torch.linalg.vector_norm(last - first)),
    )


@dataclass
class ChordBound:
    """Thm 3.4.2's bound on the chord (:func:`chord_bound`).

    Attributes:
        kappa_max: the curvature bound κ_max.
        chord_length: ‖w₂ − w₁‖.
        d_max: the largest possible distance from a chord point to the level set.
        first_order: κ_max‖w₂ − w₁‖²/8, d_max to first order.
        loss_bound: C_L · d_max, the largest possible |L(w) − c| on the chord (``None`` without
            a Lipschitz constant).
        length_checked: whether the curve length was given and checked against π/κ_max (the
            condition the theorem omits, see the module docstring).
    """

    kappa_max: float
    chord_length: float
    d_max: float
    first_order: float
    loss_bound: float | None
    length_checked: bool

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def chord_bound(
    kappa_max: float,
    chord_length: float,
    *,
    lipschitz: float | None = None,
    curve_length: float | None = None,
) -> ChordBound:
    """Thm 3.4.2: ``d_max = (1/κ)(1 − √(1 − (κℓ/2)²))``, computed as
    ``κ(ℓ/2)² / (1 + √(1 − (κℓ/2)²))`` (no cancellation; 0 for κ = 0, a straight curve).

    Raises :class:`~paramsym.errors.InvalidArgumentError` when κℓ > 2 (no circle of curvature κ
    has a chord that long) or when ``curve_length`` exceeds π/κ (the bound can fail: module
    docstring).

    >>> round(chord_bound(0.5, 2.0).d_max, 12)  # radius 2, chord 2: 2 − √3
    0.267949192431
    """
    if not (kappa_max >= 0 and math.isfinite(kappa_max)):
        raise InvalidArgumentError(
            f"chord_bound: kappa_max must be finite and >= 0, got {kappa_max}"
        )
    if not (chord_length >= 0 and math.isfinite(chord_length)):
        raise InvalidArgumentError(
            f"chord_bound: chord_length must be finite and >= 0, got {chord_length}"
        )
    half = 0.5 * kappa_max * chord_length
    if half > 1.0:
        raise InvalidArgumentError(
            f"chord_bound: κ_max·‖w₂ − w₁‖ = {2 * half:.4g} > 2; Thm 3.4.2 needs κ_max‖w₂ − w₁‖ "
            "≤ 2 (a curve of curvature ≤ κ_max joining points that far apart is longer than a "
            "half circle, where the sagitta argument fails)"
        )
    if curve_length is not None and kappa_max * curve_length > math.pi * (1 + 1e-12):
        raise InvalidArgumentError(
            f"chord_bound: the curve is longer than π/κ_max (κ_max·length = "
            f"{kappa_max * curve_length:.4g} > π); Thm 3.4.2's bound then need not hold (a "
            "circle's major arc violates it), so it is not reported. Split the curve into "
            "pieces of length ≤ π/κ_max"
        )
    d_max = kappa_max * (0.5 * chord_length) ** 2 / (1.0 + math.sqrt(max(0.0, 1.0 - half * half)))
    if lipschitz is not None and not (lipschitz >= 0 and math.isfinite(lipschitz)):
        raise InvalidArgumentError(
            f"chord_bound: lipschitz must be finite and >= 0, got {lipschitz}"
        )
    return ChordBound(
        kappa_max=float(kappa_max),
        chord_length=float(chord_length),
        d_max=float(d_max),
        first_order=float(kappa_max * chord_length**2 / 8.0),
        loss_bound=None if lipschitz is None else float(lipschitz * d_max),
        length_checked=curve_length is not None,
    )


def chord_distance(path: Path, chord_points: Grid = 65, curve_points: Grid = 257) -> float:
    """max over chord points w of min over curve points ‖w − γ(t)‖: how far the chord from
    γ(first t) to γ(last t) strays from the curve, on the given samples (approximate: each
    point's distance is measured to the sampled curve only). Since the curve lies on its level
    set, this bounds the chord's distance to the level set from above, up to sampling."""
    curve_ts = grid(curve_points)
    with torch.no_grad():
        curve = torch.stack([flatten(path(t)) for t in curve_ts])
    weights = grid(chord_points).to(curve.dtype)
    start, end = curve[0], curve[-1]
    chord = start + weights[:, None] * (end - start)
    # direct differences, not the ‖a‖² + ‖b‖² − 2ab expansion (which cancels for close points)
    distances = torch.cdist(
        chord.double(), curve.double(), compute_mode="donot_use_mm_for_euclid_dist"
    )
    return float(distances.min(dim=1).values.max())


@dataclass
class OutputChange:
    """How much a data-dependent action changed a hidden layer's output on a batch.

    Attributes:
        output_norm: ‖U σ(VX + b)‖_F, the layer's contribution before the action.
        change_norm: ‖U σ(VX + b) − U' σ(V'X + b')‖_F.
        ratio: change_norm / output_norm; Prop. 3.4.1 says ≤ 1 for the pseudo-inverse map.
    """

    output_norm: float
    change_norm: float

    @property
    def ratio(self) -> float:
        return self.change_norm / self.output_norm if self.output_norm > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ratio": self.ratio}


def layer_output_change(
    symmetry: DataDependentGL, params: Mapping[str, Tensor], g: Tensor, x: Tensor
) -> OutputChange:
    """``‖Uσ(VX)‖`` and ``‖Uσ(VX) − U'σ(V'X)‖`` for (U', V') = g·(U, V) (Prop. 3.4.1, Fig. 3.3a).

    ``symmetry`` is a data-dependent GL action (:class:`~paramsym.PseudoInverseGL` for Eq. 3.6)
    found by ``ps.symmetries(model, data_dependent=True)``; ``x`` the network input batch.
    Rows are samples, so the layer's output is ``σ(H) Uᵀ`` with ``H = [h, 1][V b]ᵀ``.
    """
    if not isinstance(symmetry, DataDependentGL):
        raise InvalidArgumentError(
            f"layer_output_change: expected a data-dependent GL action (e.g. PseudoInverseGL), "
            f"got {type(symmetry).__name__}"
        )
    if not isinstance(x, Tensor):
        raise ShapeError("layer_output_change: x must be the input batch, a tensor")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ApproximateActionWarning)
        moved = symmetry.act(params, g, x)
    pair = symmetry.pair

    def output(p: Mapping[str, Tensor]) -> Tensor:
        hidden = pair.activation(pair.inputs(p, x) @ pair.incoming(p).T)
        return hidden @ p[pair.outgoing_weight].T

    with torch.no_grad():
        before, after = output(params), output(moved)
        return OutputChange(
            output_norm=float(torch.linalg.norm(before)),
            change_norm=float(torch.linalg.norm(before - after)),
        )
