"""How a teleport evaluates its objective, and the ascent direction, at a point of the orbit.

Two methods (``teleport(..., method=...)``; ``"auto"`` takes the transport where it applies):

``"hessian"`` (every objective, every continuous symmetry)
    At each point θ the objective J(θ) and ∇_θJ by reverse over reverse: for ‖∇L‖² one
    gradient with its graph and one more backward pass, 2H∇L. The direction in each Lie
    algebra is the pullback ``T_sᵀ ∇_θJ`` through the action's tangent.
``"transport"`` (objectives of ∇L alone, on exact, linear, data-free actions)
    When θ ↦ g·θ is a linear (or affine) map A_g θ + b_g of the parameters and
    L(g·θ) = L(θ) for every θ (rescalings, permutations, GL of linear layers, the softmax's
    translation: the catalogue's data-free symmetries),
    differentiating gives ∇L(g·θ) = A_g⁻ᵀ ∇L(θ) exactly (dissertation Prop 4.5.1). One gradient
    v = ∇L(θ₀) at the start then gives the gradient at every point of the orbit by transport,
    a VJP through the action (no pass through the network), and J = f(v). The ascent
    direction needs no Hessian either: with A_{exp ξ} = I + B_ξ + O(ξ²) and c = ∇f(v),

        ∂/∂ξ f(A_{exp ξ}⁻ᵀ v) at ξ = 0  =  −∂/∂ξ ⟨B_ξ c, v⟩,

    and B_ξ c is the action's tangent at the "point" c (linear actions only), so the direction
    is the pullback of the cotangent −v at c (notes 001b §7). The loss is invariant along the
    whole orbit, so it is checked once, at the end (one forward pass), instead of after every
    step. For f = ‖∇L‖² this equals the Hessian path's direction, ⟨B_ξ θ, 2Hv⟩ = −2⟨B_ξ v, v⟩
    (differentiate ∇L(A_g θ) = A_g⁻ᵀ∇L(θ) at g = e), tested to 1e-12.

    The absorbed translations (:mod:`paramsym.symmetry.absorption`) are not affine in θ but
    shift the parameters they move by amounts that depend on parameters they read and leave
    fixed, θ ↦ θ + Σ_k t_k e_k(θ_r): ∇L keeps its components on the moved parameters and
    changes on the read ones by −Σ_k t_k (De_k)ᵀ v_m, exactly, and the rate of f(∇L) along t_k
    is −⟨De_k(θ_r)[c_r], v_m⟩ (:mod:`~paramsym.teleportation.read_shifts`). Their transport
    depends on the read values, so where another action of the orbit moves those, the path
    moves θ along with ∇L at every step.
"""

from __future__ import annotations

import abc
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import torch
from torch import Tensor, nn

from paramsym.core.backends import differentiable_attention
from paramsym.core.params import Params
from paramsym.errors import InvalidArgumentError
from paramsym.symmetry.base import GroupElement, Symmetry
from paramsym.teleportation.gradient_factors import (
    FactoredTensors,
    Factors,
    checked,
    recorded_factors,
    two_sided,
)
from paramsym.teleportation.gram_surrogate import gram_surrogates, squared_norm
from paramsym.teleportation.objectives import (
    Batch,
    GradNorm,
    LossFn,
    Objective,
    TeleportContext,
    loss_value,
)
from paramsym.teleportation.orbit import Move, Orbit, Unit
from paramsym.teleportation.read_shifts import read_shift_rate, shifts_by_reads

Method = Literal["auto", "hessian", "transport"]
METHODS: tuple[str, ...] = ("auto", "hessian", "transport")


@dataclass
class Point:
    """One point of the orbit as an ascent path sees it.

    Attributes:
        params: the parameters (detached). The scalings path leaves them at the start until
            :meth:`AscentPath.finish` and tracks the accumulated log-scales instead.
        value: the objective J.
        loss: the loss on the teleport batch (the transport paths carry the starting loss,
            exact by invariance, until the end point's check).
        gradient: what the direction is built from: ∇_θJ (Hessian path) or ∇f(v) (transport).
        grad_norm: ‖∇L‖ (NaN where the Hessian path's objective never needed it).
        loss_gradient: ∇L, transported (transport paths only).
        covectors: the teleport's ``covectors``, transported to this point.
        moves: the moves from the previous point (covectors follow them on acceptance).
        log_scales: accumulated log-scales per symmetry (scalings path only).
        ascent: ∂J(g(ξ)·θ)/∂ξ at ξ = 0 per symmetry, where the path computes it with the
            point (Hessian and scalings paths).
        trail: the elements of every accepted step since the start (transport path, which
            leaves ``params`` at the start and moves them once, in :meth:`AscentPath.finish`,
            unless it moves them with every step: :attr:`TransportAscent.tracked`).
        parts: J's terms tensor by tensor (transport path, diagonal quadratic objectives).
        factors: the transported ∇L of the tensors moved along both axes, as two factors
            (transport path for J = w‖∇L‖², :mod:`~paramsym.teleportation.gradient_factors`;
            ``loss_gradient`` lacks them).
    """

    params: Params
    value: float
    loss: float
    gradient: Params
    grad_norm: float
    loss_gradient: Params | None = None
    covectors: list[Params] = field(default_factory=list)
    moves: list[Move] = field(default_factory=list)
    log_scales: list[Tensor] = field(default_factory=list)
    ascent: list[Tensor] = field(default_factory=list)
    trail: list[list[tuple[Unit, GroupElement]]] = field(default_factory=list)
    parts: dict[str, float] = field(default_factory=dict)
    factors: dict[str, Factors] = field(default_factory=dict)


def transport_obstacle(
    symmetries: Sequence[Symmetry], objective: Objective, frozen: set[str]
) -> str | None:
    """Why gradient transport does not apply, in words, or ``None`` when it does.

    It applies to an objective of ∇L alone on exact, data-free symmetries whose action is
    affine in θ (∇L(g·θ) = A_g⁻ᵀ∇L(θ)) or shifts the parameters it moves by amounts that
    depend only on the group element and on parameters it reads and leaves fixed
    (θ ↦ θ + b(g, θ_reads), :func:`~paramsym.teleportation.read_shifts.shifts_by_reads`: the
    absorbed translations), along which ∇L transports exactly through the Jacobian
    I + ∂b/∂θ_reads."""
    if not objective.gradient_only:
        return f"the objective {objective.name!r} is not a function of ∇L alone"
    for s in symmetries:
        if s.data_dependent:
            return f"{s.name} depends on the data"
        if not (s.affine or shifts_by_reads(s)):
            return (
                f"{s.name} is neither affine in the parameters nor a shift by parameters it reads"
            )
        if not s.exact:
            return f"{s.name} is approximate"
        if frozen & set(s.parameter_names):
            return f"{s.name} moves frozen parameters, over which ∇L is not taken"
    return None


def choose_method(
    method: str, symmetries: Sequence[Symmetry], objective: Objective, frozen: set[str]
) -> Literal["hessian", "transport"]:
    """The method ``"auto"`` resolves to, or the one asked for after checking it applies."""
    if method not in METHODS:
        raise InvalidArgumentError(
            f"teleport: method must be one of {', '.join(map(repr, METHODS))}, got {method!r}"
        )
    obstacle = transport_obstacle(symmetries, objective, frozen)
    if method == "transport" and obstacle is not None:
        raise InvalidArgumentError(
            f"teleport: method='transport' needs an objective of ∇L alone on exact, affine (or "
            f"absorbed-translation), data-free symmetries, but {obstacle}; use "
            "method='hessian' (or 'auto')"
        )
    if method == "hessian" or obstacle is not None:
        return "hessian"
    return "transport"


class AscentPath(abc.ABC):
    """How a teleport evaluates points of the orbit. The engine calls :meth:`start` once,
    then per step :meth:`direction`, :meth:`advance` (per trial) and :meth:`accept`, and
    :meth:`finish` on the end point.

    Attributes:
        evaluations: passes through the network so far.
    """

    name: str

    def __init__(self, orbit: Orbit) -> None:
        self.orbit = orbit
        self.evaluations = 0

    @abc.abstractmethod
    def start(self, params: Mapping[str, Tensor], covectors: Sequence[Params]) -> Point:
        """The starting point."""

    def direction(self, point: Point) -> list[Tensor]:
        """∂J(exp(ξ)·θ)/∂ξ at ξ = 0 for each symmetry (by default the rates stored with the
        point)."""
        return point.ascent

    def advance(self, point: Point, xis: Sequence[Tensor]) -> Point:
        """The trial point g(ξ)·θ; raises InvalidGroupElementError or NonFiniteError when the
        step leaves the group numerically."""
        params, moves = self.orbit.move(point.params, xis)
        trial = self.at(params, moves, point)
        trial.covectors, trial.moves = point.covectors, moves
        return trial

    def at(self, params: Params, moves: Sequence[Move], previous: Point) -> Point:
        """The point ``params``, reached from ``previous`` by ``moves``."""
        raise NotImplementedError

    def accept(self, point: Point) -> Point:
        """``point`` with the covectors carried along its moves."""
        point.covectors = [self.orbit.transport(m, point.moves) for m in point.covectors]
        point.moves = []
        return point

    def finish(self, point: Point) -> Point:
        """The end point, complete (parameters and ‖∇L‖ filled in)."""
        return point


class HessianAscent(AscentPath):
    """The general path: at every point, the objective and its algebra gradient by reverse
    over reverse through the actions (module docstring)."""

    name = "hessian"

    def __init__(
        self,
        model: nn.Module,
        loss_fn: LossFn,
        batch: Batch,
        objective: Objective,
        optimizer: torch.optim.Optimizer | None,
        orbit: Orbit,
    ) -> None:
        super().__init__(orbit)
        self.model, self.loss_fn, self.batch = model, loss_fn, batch
        self.objective, self.optimizer = objective, optimizer

    def evaluate(
        self, params: Mapping[str, Tensor], with_grad_norm: bool = False, ascent: bool = True
    ) -> Point:
        """J and L at q(0) and the ascent rates ∂J(q(ξ))/∂ξ at ξ = 0, with q(ξ) the point
        moved by g(ξ_s) through every action in turn (q(0) = ``params`` for group actions; the
        batch-fixed point ``act(θ, I)`` for data-dependent ones, see :meth:`Orbit.rebase`):
        one backward pass from J to ξ, through ∇L (reverse over reverse: 2H∇L for ‖∇L‖²) and
        on through the actions, which costs no further pass through the network. With
        ``ascent=False``, J and L at ``params`` itself and no rates."""
        self.evaluations += 1
        base = {k: v.detach() for k, v in params.items()}
        with torch.enable_grad(), differentiable_attention(self.model):
            xis, moved = self.orbit.through_actions(base) if ascent else ([], base)
            # the point q(ξ) as independent coordinates: p + (q − stop_gradient(q)) equals q,
            # its ∇L is taken with respect to p (a moved tensor may depend on another through
            # a data-dependent action's features), and ∂/∂ξ still flows through q
            leaves = {k: v.detach().requires_grad_(True) for k, v in moved.items()}
            point = {
                k: leaves[k] + (v - v.detach()) if v.requires_grad else leaves[k]
                for k, v in moved.items()
            }
            context = TeleportContext(self.model, point, self.loss_fn, self.batch, self.optimizer)
            value = self.objective(context)
            loss = float(context.loss.detach())
            grad_norm = math.nan
            if with_grad_norm or context.has_gradient:
                grad_norm = norm(context.gradient)
            rates = [torch.zeros_like(xi) for xi in xis]
            if xis and value.requires_grad:
                rates = list(
                    torch.autograd.grad(value, xis, allow_unused=True, materialize_grads=True)
                )
        return Point(
            {k: v.detach() for k, v in moved.items()},
            float(value.detach()),
            loss,
            {},
            grad_norm,
            ascent=[r.detach() for r in rates],
        )

    def start(self, params: Mapping[str, Tensor], covectors: Sequence[Params]) -> Point:
        """J and L at θ itself (the "before" of the result); the rates come with the first
        evaluation through the actions (:meth:`rebased`)."""
        point = self.evaluate(params, with_grad_norm=True, ascent=False)
        point.covectors = list(covectors)
        return point

    def rebased(self, point: Point) -> Point:
        """``point`` evaluated through the actions: moved to ``act(θ, I)`` by data-dependent
        actions, with its ascent rates."""
        done = self.evaluate(point.params, with_grad_norm=not math.isnan(point.grad_norm))
        done.covectors = point.covectors
        return done

    def at(self, params: Params, moves: Sequence[Move], previous: Point) -> Point:
        return self.evaluate(params)

    def finish(self, point: Point) -> Point:
        """The end point with ‖∇L‖ filled in (objectives that never needed ∇L)."""
        if math.isnan(point.grad_norm):
            done = self.evaluate(point.params, with_grad_norm=True, ascent=False)
            done.covectors = point.covectors
            return done
        return point


class TransportAscent(AscentPath):
    """The transport path (see the module docstring): one gradient per teleport, then work of
    the size of the moved tensors per step, and θ moved once, at the end (any exact, linear
    or affine, data-free symmetry).

    Each step carries ∇L through the step's elements (:meth:`Orbit.transport`) and keeps the
    elements (:attr:`Point.trail`); :meth:`finish` moves θ along them
    (:meth:`Orbit.replay`). For a diagonal quadratic objective J = Σ w ⊙ v²
    (:meth:`~paramsym.teleportation.Objective.diagonal_weights`: ‖∇L‖², a diagonal
    preconditioner) J is kept tensor by tensor and only the moved tensors' terms are
    recomputed, and ∇J = 2 w ⊙ v needs no autograd. Translations leave ∇L unchanged, so no
    such objective changes along them: their rate is zero and they are never moved.

    The absorbed translations (:mod:`~paramsym.teleportation.read_shifts`) change ∇L on the
    tensors they read; their rate is computed apart (:func:`read_shift_rate`), the tensors
    they move and read are kept whole (no Gram surrogate, no factors), and where another
    action of the orbit moves what they read (:attr:`tracked`), θ moves with every step, so
    that their transport and rates see the read values of the current point.
    """

    name = "transport"

    def __init__(
        self,
        model: nn.Module,
        loss_fn: LossFn,
        batch: Batch,
        objective: Objective,
        orbit: Orbit,
        trained: Sequence[str],
    ) -> None:
        super().__init__(orbit)
        self.model, self.loss_fn, self.batch = model, loss_fn, batch
        self.objective, self.trained = objective, list(trained)
        self.loss_before = math.nan
        weights = objective.diagonal_weights()
        if isinstance(weights, Mapping) and any(k not in weights for k in self.trained):
            weights = None  # of_gradient names the missing entry
        self.weights = weights
        self.moving = [i for i, s in enumerate(orbit.symmetries) if not s.translation]
        symmetries = orbit.symmetries
        self.shifting = [i for i in self.moving if shifts_by_reads(symmetries[i])]
        self.plain = [i for i in self.moving if i not in self.shifting]
        moved = {n for i in self.moving for n in symmetries[i].parameter_names}
        read = {n for i in self.shifting for n in symmetries[i].reads}
        self.tracked = bool(read & moved)
        """Whether θ moves with every step (an absorbed translation's reads are moved by the
        orbit); otherwise it stays at the start until :meth:`finish`."""
        self.constants: dict[str, float] = {}  # of the Gram surrogates (gram_surrogate.py)
        self.factored: FactoredTensors | None = None  # gradient_factors.py

    def _point(
        self,
        loss_gradient: Params,
        previous: Mapping[str, float] | None = None,
        changed: Sequence[str] = (),
        factors: Mapping[str, Factors] | None = None,
    ) -> Point:
        """J = f(v) for the transported gradient v (with the ``factors`` of its two-sided
        tensors), and c = ∇f(v) where it needs autograd. For a diagonal quadratic f, the
        terms of the tensors not ``changed`` since ``previous`` are kept."""
        factors = dict(factors or {})
        if self.weights is not None:
            parts = dict(previous or {})
            for k in changed if previous is not None else [*loss_gradient, *factors]:
                if k in factors:  # one weight (factors are kept for J = w‖v‖² only)
                    assert isinstance(self.weights, float)
                    parts[k] = self.weights * factors[k].squared_norm()
                    continue
                flat = loss_gradient[k].reshape(-1)
                if isinstance(self.weights, float):
                    parts[k] = self.weights * (
                        float(torch.dot(flat, flat)) + self.constants.get(k, 0.0)
                    )
                else:
                    parts[k] = float(torch.dot(self.weights[k].reshape(-1) * flat, flat))
            value = math.fsum(parts.values())
            return Point(
                self.theta,
                value,
                self.loss_before,
                {},
                math.nan,
                loss_gradient,
                parts=parts,
                factors=factors,
            )
        leaves = {k: v.detach().requires_grad_(True) for k, v in loss_gradient.items()}
        with torch.enable_grad():
            value_t = self.objective.of_gradient(leaves)
            names = list(leaves)
            grads = torch.autograd.grad(
                value_t, [leaves[k] for k in names], allow_unused=True, materialize_grads=True
            )
        cotangent = {k: g.detach() for k, g in zip(names, grads, strict=True)}
        cotangent.update(
            {k: torch.zeros_like(t) for k, t in self.theta.items() if k not in cotangent}
        )
        return Point(
            self.theta,
            float(value_t.detach()),
            self.loss_before,
            cotangent,
            math.nan,
            loss_gradient,
        )

    def loss_and_gradient(self, params: Mapping[str, Tensor]) -> tuple[float, Params]:
        """L and ∇L over the trained parameters: the teleport's one gradient."""
        self.evaluations += 1
        leaves = {k: v.detach().requires_grad_(True) for k, v in params.items()}
        with torch.enable_grad():
            loss = loss_value(self.model, leaves, self.loss_fn, self.batch)
            grads = torch.autograd.grad(
                loss, [leaves[k] for k in self.trained], allow_unused=True, materialize_grads=True
            )
        self.loss_before = float(loss.detach())
        return self.loss_before, {k: g.detach() for k, g in zip(self.trained, grads, strict=True)}

    def start(self, params: Mapping[str, Tensor], covectors: Sequence[Params]) -> Point:
        self.theta = {k: v.detach() for k, v in params.items()}
        if not isinstance(self.weights, float):
            _, gradient = self.loss_and_gradient(self.theta)
            point = self._point(gradient)
        else:  # J = w‖v‖²: the steps read only Grams of v, or its factors
            moving = set(self.moving)
            units = [
                unit
                for unit, members in zip(self.orbit.units, self.orbit.members, strict=True)
                if moving.intersection(members)
            ]
            shapes = {k: t.shape for k, t in self.theta.items()}
            with recorded_factors(self.model, two_sided(units, shapes)) as recorded:
                _, gradient = self.loss_and_gradient(self.theta)
            factors = checked(recorded, gradient)
            self.factored = FactoredTensors(self.orbit, list(factors)) if factors else None
            ordinary = {k: v for k, v in gradient.items() if k not in factors}
            gradient, self.constants = gram_surrogates(units, ordinary)
            point = self._point(gradient, factors=factors)
        point.grad_norm = self._gradient_norm(point)
        point.covectors = list(covectors)
        return point

    def _gradient_norm(self, point: Point) -> float:
        """‖∇L‖ at ``point``: √J for ‖∇L‖² itself, else the norm of the transported ∇L."""
        if isinstance(self.objective, GradNorm):
            return math.sqrt(max(point.value, 0.0))
        assert point.loss_gradient is not None
        return math.sqrt(
            squared_norm(point.loss_gradient, self.constants)
            + math.fsum(f.squared_norm() for f in point.factors.values())
        )

    def advance(self, point: Point, xis: Sequence[Tensor]) -> Point:
        """∇L carried through the step's elements (θ stays, see :meth:`finish`, unless
        :attr:`tracked`)."""
        assert point.loss_gradient is not None
        elements = self.orbit.elements(xis, skip_zero=True)
        params = point.params
        if self.tracked:
            params, moves = self.orbit.apply(point.params, elements)
        else:
            moves = [(unit, g, self.theta) for unit, g in elements]
        gradient = self.orbit.transport(point.loss_gradient, moves)
        factors = point.factors
        if self.factored is not None and factors:
            factors = self.factored.transport(factors, elements)
        changed = list(
            dict.fromkeys(
                n
                for unit, _ in elements
                for n in (*unit.parameter_names, *getattr(unit, "reads", ()))
            )
        )
        trial = self._point(
            gradient,
            point.parts,
            [k for k in changed if k in gradient or k in factors],
            factors,
        )
        trial.params = params
        trial.trail = [*point.trail, elements]
        trial.covectors, trial.moves = point.covectors, moves
        return trial

    def direction(self, point: Point) -> list[Tensor]:
        """−∂⟨B_ξ c, v⟩/∂ξ: the pullback of −v at the "point" c = ∇f(v), where the tangent
        is B_ξ c; for an affine action the tangent at c is B_ξ c + b_ξ, and the pullback at
        the zero point (b_ξ alone) is subtracted. The pullback is linear in the point and in
        the covector, so for c = 2w ⊙ v with one weight w it is 2w times v's pullback at v,
        and the (small) rates are negated rather than a P-sized −v built. Translations have
        rate zero (class docstring); the absorbed translations' rate is
        −⟨De_k(θ_r)[c_r], v_m⟩ at the point (:func:`read_shift_rate`)."""
        v = point.loss_gradient  # over the trained parameters, which hold every moved one
        assert v is not None
        if isinstance(self.weights, float):
            at, factor = v, 2.0 * self.weights
        elif self.weights is not None:
            moved = {n for i in self.plain for n in self.orbit.symmetries[i].parameter_names}
            at, factor = {k: 2.0 * self.weights[k] * v[k] for k in moved if k in v}, 1.0
        else:
            at, factor = point.gradient, 1.0
        rates = self.orbit.pullback(at, v, only=self.plain)
        by_index = dict(zip(self.plain, rates, strict=True))
        if self.factored is not None and point.factors:  # only for J = w‖v‖² (start)
            for i, rate in self.factored.rates(point.factors, self.plain).items():
                by_index[i] = by_index[i] + rate.to(by_index[i].dtype)
        shifts = {i: self._shift_rate(point, i) for i in self.shifting}
        affine = [i for i in self.plain if not self.orbit.symmetries[i].linear]
        if affine:
            moved = {n for i in affine for n in self.orbit.symmetries[i].parameter_names}
            zeros = {k: torch.zeros_like(t) for k, t in self.theta.items() if k in moved}
            offsets = self.orbit.pullback(zeros, v, only=affine)
            for i, offset in zip(affine, offsets, strict=True):
                by_index[i] = by_index[i] - offset / factor
        return [
            -factor * by_index[i]
            if i in by_index
            else shifts[i]
            if i in shifts
            else torch.zeros(s.dim, dtype=self.orbit.dtype, device=self.orbit.device)
            for i, s in enumerate(self.orbit.symmetries)
        ]

    def _shift_rate(self, point: Point, index: int) -> Tensor:
        """The rate of the absorbed translation at ``index`` (:func:`read_shift_rate`), with
        c = ∇f(v) on the tensors it reads: 2w ⊙ v for a diagonal quadratic objective (for one
        weight, 2w times the rate at c = v: the rate is linear in c), autograd's otherwise."""
        v = point.loss_gradient
        assert v is not None
        s = self.orbit.symmetries[index]
        reads = [k for k in s.reads if k in v]
        if isinstance(self.weights, float):
            rate = 2.0 * self.weights * read_shift_rate(s, point.params, v, v)
        elif self.weights is not None:
            c = {k: 2.0 * self.weights[k] * v[k] for k in reads}
            rate = read_shift_rate(s, point.params, v, c)
        else:
            c = {k: point.gradient[k] for k in reads if k in point.gradient}
            rate = read_shift_rate(s, point.params, v, c)
        return rate.to(self.orbit.dtype)

    def finish(self, point: Point) -> Point:
        """The end point: θ moved along the whole trail, once (or with every step, where
        :attr:`tracked`), and ‖∇L‖ filled in."""
        if not point.trail:
            done = point
        else:
            params = point.params if self.tracked else self.orbit.replay(self.theta, point.trail)
            done = Point(
                params,
                point.value,
                point.loss,
                point.gradient,
                point.grad_norm,
                point.loss_gradient,
                covectors=point.covectors,
                parts=point.parts,
                factors=point.factors,
            )
        if math.isnan(done.grad_norm):
            done.grad_norm = self._gradient_norm(done)
        return done

    def loss(self, params: Mapping[str, Tensor]) -> float:
        """L at ``params`` (one forward pass), to check the end point."""
        self.evaluations += 1
        with torch.no_grad():
            return float(loss_value(self.model, params, self.loss_fn, self.batch))


def norm(tensors: Mapping[str, Tensor]) -> float:
    """The Euclidean norm of a params dict."""
    return math.sqrt(sum(float((t.detach() ** 2).sum()) for t in tensors.values()))
