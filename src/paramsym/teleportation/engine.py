"""Symmetry teleportation: move along loss-preserving orbits to improve an objective.

:func:`teleport` implements the inner loop of the dissertation's Algorithm 1 (ch. 4) for any
set of continuous symmetries of a model, all at once:

1. at the current point θ, evaluate the objective J(θ) (default ‖∇L‖²) and its θ-gradient;
   for ‖∇L‖² that gradient is 2H∇L, one Hessian-vector product (reverse over reverse);
2. pull it back to the Lie algebra of every symmetry s through the action's tangent:
   ∂J(exp(ξ)·θ)/∂ξ at ξ = 0 equals T_sᵀ ∇_θJ with T_s(ξ) = ``s.tangent(θ, ξ)``, which costs a
   pass through the action, not a rebuild of the network. For objectives of ∇L alone on
   exact, data-free actions that are affine (or absorbed translations, which shift parameters
   by amounts read off others), steps 1-2 need no network pass at all: ∇L is
   transported along the orbit from one gradient (:mod:`~paramsym.teleportation.ascent`);
3. step in that direction, and move θ ← s.act(θ, g(ξ)) for each symmetry in turn, with
   g(ξ) = exp(ξ) (default) or the first-order g = I + ξ of the paper's regression runs
   (``parameterization="first_order"``, groups open in their matrix space only: GL,
   scalings). By default each step is a trust-region step of fixed size ‖ξ‖ = ``step_norm``
   (0.1: the group element stays within a factor e^0.1 of the identity in every direction);
   with ``lr`` it is the paper's raw gradient step ξ = ±lr·(direction), bounded by
   ``max_step_norm``;
4. check the move: the loss on the teleport batch must stay within ``max_loss_drift`` of its
   value before the teleport, the objective must be finite and, with ``line_search``, must
   improve. A failed check halves the step (up to ``max_shrinks`` times) and then stops the
   teleport at the last good point. Each step starts again from ξ = 0 at the new point, so the
   group element is the product of the steps' exponentials (the authors' composition of
   fresh I + T steps, with exact inverses).

The result reports the objective, loss and gradient norm before and after, the loss drift,
and every step; the model is changed only when the teleport finished without error.

Covectors such as momentum buffers can be carried along (``covectors=``): each move
θ' = s.act(θ, g) maps a covector m to J⁻ᵀm, computed as the pullback (VJP) of the inverse
move θ' ↦ s.act(θ', g⁻¹) at θ'. This is exact for group actions (dissertation Prop 4.5.1:
∇L(g·θ) = J⁻ᵀ∇L(θ)); for data-dependent actions that are not invertible off the batch it is the
transport of the batch-restricted action, and :class:`~paramsym.teleportation.Teleporter` says so.
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import torch
from torch import Tensor, nn

from paramsym.core.model_checks import check_deterministic, require_module
from paramsym.core.params import Params, check_finite, resolve_params
from paramsym.errors import (
    InvalidArgumentError,
    InvalidGroupElementError,
    NonFiniteError,
    ParamsymWarning,
)
from paramsym.symmetry.base import Symmetry
from paramsym.teleportation.ascent import (
    METHODS,
    AscentPath,
    HessianAscent,
    Method,
    Point,
    TransportAscent,
    choose_method,
)
from paramsym.teleportation.objective_names import resolve_objective
from paramsym.teleportation.objectives import Batch, LossFn, Objective
from paramsym.teleportation.orbit import Orbit, Parameterization
from paramsym.teleportation.scaling_transport import ScalingTransportAscent, scalings_only
from paramsym.teleportation.selection import (
    check_exactness,
    continuous_symmetries,
    frozen_parameters,
)

DriftPolicy = Literal["shrink", "warn"]

DEFAULT_STEP_NORM = 0.1
"""‖ξ‖ of each default (trust-region) ascent step, all symmetries together: ten steps move the
group element at most a factor e from the identity in any direction. Measured on a [5, 12, 12,
3] ReLU MLP with 8 samples, ten steps of ‖ξ‖ = 0.1 / 0.2 / 0.3 raise ‖∇L‖² by ×1.8-2.2 / ×8-12 /
×50-100 (×1.36 / ×9.7 in the issue's run), and of ‖ξ‖ = 1 by ×4.7e6, to a point from which GD
diverges; 0.1 gains substantially and keeps the points from which the README's optimizers
converge (tested)."""


class TeleportDriftWarning(ParamsymWarning):
    """A teleport changed the loss on its batch by more than ``max_loss_drift``
    (``on_drift="warn"``), or stopped early because every shrunken step did."""


@dataclass
class TeleportStep:
    """One accepted ascent step: objective and loss after it, and the size of its ξ."""

    objective: float
    loss: float
    step_norm: float
    shrinks: int


@dataclass
class TeleportResult:
    """What one :func:`teleport` did (plain numbers; ``to_dict`` for JSON).

    Attributes:
        loss_before, loss_after: loss on the teleport batch.
        objective_before, objective_after: the objective (its ``name`` in ``objective``).
        grad_norm_before, grad_norm_after: ‖∇L‖ on the teleport batch (not squared).
        steps: accepted ascent steps; ``history`` has one :class:`TeleportStep` each.
        stopped: why it ended: ``"steps"``, ``"max_objective"``, ``"stationary"`` (zero
            algebra gradient), ``"drift"`` (every shrunken step broke the loss guard),
            ``"no_gain"`` (line search found no improvement), ``"non_finite"``, or
            ``"no_improvement"`` (the end point was worse than the start and was undone; see
            ``keep_worse``).
        max_loss_drift: largest |L − L_before| over accepted points (absolute).
        shrinks: step halvings over the whole teleport.
        evaluations: passes through the network: objective evaluations with the Hessian
            method (each about one HVP for ‖∇L‖²); the one gradient and the end point's loss
            check with the transport method.
        seconds: wall-clock time.
        symmetries: names of the symmetries moved along.
        approximate: those of them that are not exact (moved along only when asked for,
            with ``allow_approximate=True`` or in ``symmetries=``; the loss change they cause
            is ``max_loss_drift``, bounded by the guard).
        method: how the objective was followed, ``"hessian"`` or ``"transport"``
            (see :mod:`~paramsym.teleportation.ascent`).
        params: the final parameters (detached).
        covectors: the ``covectors`` argument transported to the final point.
    """

    loss_before: float
    loss_after: float
    objective_before: float
    objective_after: float
    grad_norm_before: float
    grad_norm_after: float
    steps: int
    stopped: str
    max_loss_drift: float
    shrinks: int
    evaluations: int
    seconds: float
    objective: str
    symmetries: list[str]
    method: str = "hessian"
    approximate: list[str] = field(default_factory=list)
    history: list[TeleportStep] = field(default_factory=list)
    params: Params = field(default_factory=dict, repr=False)
    covectors: list[Params] = field(default_factory=list, repr=False)

    @property
    def gain(self) -> float:
        """objective_after / objective_before."""
        return self.objective_after / self.objective_before if self.objective_before else math.nan

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out.pop("params")
        out.pop("covectors")
        return out


@dataclass(frozen=True)
class TeleportConfig:
    """The options of :func:`teleport`, as one frozen value (used by
    :class:`~paramsym.teleportation.Teleporter` and the experiments); see :func:`teleport`."""

    objective: str | Objective | Callable[..., Tensor] = "grad_norm"
    steps: int = 10
    lr: float | None = None
    step_norm: float | None = None
    parameterization: Parameterization = "exp"
    method: Method = "auto"
    line_search: bool = False
    max_objective: float | None = None
    max_step_norm: float | None = 1.0
    max_loss_drift: float = 1e-4
    on_drift: DriftPolicy = "shrink"
    max_shrinks: int = 8
    allow_approximate: bool = False
    keep_worse: bool = False
    ascend: bool = True

    def __post_init__(self) -> None:
        if self.steps < 0:
            raise InvalidArgumentError(f"teleport: steps must be >= 0, got {self.steps}")
        if self.lr is not None and self.step_norm is not None:
            raise InvalidArgumentError(
                "teleport: pass lr (the paper's raw gradient steps, bounded by max_step_norm) "
                "or step_norm (trust-region steps of fixed ‖ξ‖, the default), not both"
            )
        for name in ("lr", "step_norm", "max_step_norm"):
            value = getattr(self, name)
            if value is not None and not (value > 0 and math.isfinite(value)):
                raise InvalidArgumentError(
                    f"teleport: {name} must be a positive number, got {value}"
                )
        if self.max_loss_drift < 0 or self.max_shrinks < 0:
            raise InvalidArgumentError("teleport: max_loss_drift and max_shrinks must be >= 0")
        choices = {
            "on_drift": (self.on_drift, ("shrink", "warn")),
            "parameterization": (self.parameterization, ("exp", "first_order")),
            "method": (self.method, METHODS),
        }
        for name, (value, allowed) in choices.items():
            if value not in allowed:
                raise InvalidArgumentError(
                    f"teleport: {name} must be one of {', '.join(map(repr, allowed))}, got "
                    f"{value!r}"
                )

    @property
    def trust_radius(self) -> float | None:
        """‖ξ‖ of every step (trust-region steps), or ``None`` for raw ``lr`` steps."""
        if self.lr is not None:
            return None
        return DEFAULT_STEP_NORM if self.step_norm is None else self.step_norm

    def step_scale(self, direction_norm: float) -> float:
        """The factor that turns a direction of norm ``direction_norm`` into the step ξ."""
        radius = self.trust_radius
        if radius is not None:
            return radius / direction_norm
        assert self.lr is not None
        if self.max_step_norm is not None and self.lr * direction_norm > self.max_step_norm:
            return self.max_step_norm / direction_norm
        return self.lr

    def options(self) -> dict[str, Any]:
        return {f: getattr(self, f) for f in self.__dataclass_fields__}


# -- the engine --------------------------------------------------------------------------------


def teleport(
    model: nn.Module,
    loss_fn: LossFn,
    batch: Batch,
    symmetries: Sequence[Symmetry] | None = None,
    objective: str | Objective | Callable[..., Tensor] = "grad_norm",
    steps: int = 10,
    lr: float | None = None,
    *,
    step_norm: float | None = None,
    params: Mapping[str, Tensor] | None = None,
    optimizer: torch.optim.Optimizer | None = None,
    parameterization: Parameterization = "exp",
    method: Method = "auto",
    line_search: bool = False,
    max_objective: float | None = None,
    max_step_norm: float | None = 1.0,
    max_loss_drift: float = 1e-4,
    on_drift: DriftPolicy = "shrink",
    max_shrinks: int = 8,
    allow_approximate: bool = False,
    keep_worse: bool = False,
    covectors: Sequence[Mapping[str, Tensor]] = (),
    update_model: bool = True,
    ascend: bool = True,
) -> TeleportResult:
    """Teleport ``model`` along its symmetries to improve ``objective`` on ``batch``.

    Args:
        model, loss_fn, batch: the loss L(θ) = loss_fn(model(x; θ), y) with batch ``(x, y)``.
        symmetries: the symmetries to move along together (discrete ones are skipped); default
            every exact continuous symmetry ``ps.symmetries(model, example_input=x,
            loss_fn=loss_fn)`` finds on the graph traced on the batch's inputs (``nn.Sequential``
            chains too: one detector for every analysis), except those that move buffers
            (:func:`~paramsym.teleportation.default_symmetries`).
            Data-dependent actions use the batch's inputs.
        objective: ``"grad_norm"`` (‖∇L‖²), ``"preconditioned_grad_norm"`` (needs
            ``optimizer``), ``"loss_alignment"``, an :class:`Objective`, or a callable
            ``fn(model, params, loss_fn, batch, optimizer) -> scalar`` (maximised).
            ``"sharpness"`` (φ, Eq. 5.1) and ``"curvature"`` (ψ, Eq. 5.2) use their defaults;
            configure them through :class:`~paramsym.teleportation.Sharpness` /
            :class:`~paramsym.teleportation.Curvature` (radii, directions, k, generator).
        steps: ascent steps on the Lie-algebra coordinates.
        lr: the paper's raw gradient-ascent rate: each step is ξ = ±lr·∂J/∂ξ, bounded by
            ``max_step_norm``. Its right value depends on the problem's scale (the
            dissertation uses 1e-7 to 1e-1); leave it out for the scale-free default.
        step_norm: without ``lr``, every step is a trust-region step: ξ of norm ``step_norm``
            (all symmetries together) along ∂J/∂ξ, halved by the checks below. Default
            :data:`DEFAULT_STEP_NORM` (0.1), so the ten default steps move the group element
            at most a factor e from the identity, and raise ‖∇L‖² by a factor of about 1.5-2
            on small MLPs whatever the loss's scale.
        params: the starting point (default the model's parameters).
        optimizer: for objectives that read optimizer state.
        parameterization: ``"exp"`` (g = exp ξ) or ``"first_order"`` (g = I + ξ; the paper's
            regression runs, with the exact inverse instead of its I − ξ).
        method: ``"auto"`` (default) transports ∇L along the orbit where that is exact (an
            objective of ∇L alone, such as ‖∇L‖², on exact, affine data-free symmetries or
            absorbed translations (:func:`~paramsym.teleportation.transport_obstacle`): one
            gradient per teleport) and otherwise differentiates the objective at every step
            (``"hessian"``: one HVP per step for ‖∇L‖²); ``"transport"`` insists on the former
            and says why it does not apply. See :mod:`~paramsym.teleportation.ascent`.
        line_search: halve a step until the objective improves.
        max_objective: stop once the objective reaches this value (the authors' cap).
        max_step_norm: with ``lr``, bound ‖ξ‖ of each step (all symmetries together); the
            default 1 keeps each step's group element within a factor e of the identity in
            every direction. Gradient norms grow without bound on non-compact orbits
            (rescaling, GL), and an unbounded ascent step can jump to a point where the next
            step overflows; ``None`` leaves only ``lr`` to bound it (the paper's setting).
        max_loss_drift: allowed |L − L_before| on the batch, relative to max(|L_before|, 1e-12).
            The transport method checks it once, at the end point (the loss is invariant
            along its orbits), and undoes the teleport with a warning if it broke.
        on_drift: ``"shrink"`` halves offending steps (then stops); ``"warn"`` accepts them
            with a :class:`TeleportDriftWarning`.
        max_shrinks: halvings per step before the teleport stops.
        allow_approximate: the default choice of symmetries includes the approximate ones
            (e.g. a LayerNorm's input scale invariance, exact only for eps = 0), and
            data-dependent actions that are not exact on the batch (e.g. the pseudo-inverse
            action with more samples than hidden units) are accepted with a warning instead
            of refused. The loss guard bounds what they change; the result names them
            (``approximate``) and reports the drift (``max_loss_drift``).
        keep_worse: keep an end point whose objective is worse than the start's. By default
            such a teleport is undone (``stopped="no_improvement"``, parameters and covectors
            unchanged). Ascent steps never lower the objective on their own with a line search,
            but the first move of a pseudo-inverse action can: for fewer samples than hidden
            units it projects U onto the span of σ(H) (the re-base), which can lower ‖∇L‖ by
            more than the steps regain. The paper's Algorithm 1 applies every teleport
            (``keep_worse=True``).
        covectors: params dicts (e.g. momentum buffers) to transport as covectors.
        update_model: write the final parameters into ``model`` (in place).
        ascend: move the objective in its own direction (``True``, the default for every
            objective: up for all built-ins, as Algorithm 1 does for ‖∇L‖²) or against it
            (``False``: minimise, Algorithm 2's "−η for decreasing curvature"). An objective
            that minimises itself (``FunctionObjective(maximize=False)``) is maximised by
            ``ascend=False``. The "no improvement" undo and ``max_objective`` follow the
            chosen direction.

    Returns:
        A :class:`TeleportResult`. The model is changed only after the teleport succeeded.

    >>> import torch, paramsym as ps
    >>> f = ps.landscapes.Booth([5.0, -5.0])  # L = 144 here; max ‖∇L‖ on its level set is 72
    >>> r = ps.teleport(f, ps.landscapes.value_loss, (None, None), steps=20, lr=1e-3,
    ...                 line_search=True)
    >>> round(r.grad_norm_before, 2), round(r.grad_norm_after, 2), round(r.loss_after, 3)
    (53.67, 72.0, 144.0)
    """
    config = TeleportConfig(
        objective=objective, steps=steps, lr=lr, step_norm=step_norm,
        parameterization=parameterization, method=method, line_search=line_search,
        max_objective=max_objective, max_step_norm=max_step_norm,
        max_loss_drift=max_loss_drift, on_drift=on_drift, max_shrinks=max_shrinks,
        allow_approximate=allow_approximate, keep_worse=keep_worse, ascend=ascend,
    )  # fmt: skip
    return run_teleport(
        model, loss_fn, batch, config, symmetries, params=params, optimizer=optimizer,
        covectors=covectors, update_model=update_model,
    )  # fmt: skip


def run_teleport(
    model: nn.Module,
    loss_fn: LossFn,
    batch: Batch,
    config: TeleportConfig,
    symmetries: Sequence[Symmetry] | None = None,
    *,
    params: Mapping[str, Tensor] | None = None,
    optimizer: torch.optim.Optimizer | None = None,
    covectors: Sequence[Mapping[str, Tensor]] = (),
    update_model: bool = True,
) -> TeleportResult:
    """:func:`teleport` with its options as one :class:`TeleportConfig`."""
    require_module(model, "teleport")
    if not isinstance(batch, tuple) or len(batch) != 2:
        raise InvalidArgumentError(
            "teleport: batch must be an (inputs, targets) tuple, e.g. (x, y); use (None, None) "
            "for a landscape with paramsym.landscapes.value_loss"
        )
    check_deterministic(model, "teleport")
    # the Hessian path differentiates ∇L through attention inside its own evaluations
    # (HessianAscent.evaluate); the transport takes first-order gradients only
    return _Teleport(model, loss_fn, batch, config, symmetries, params, optimizer, covectors).run(
        update_model
    )


class _Teleport:
    """One teleport: the chosen symmetries, the ascent path and the step loop."""

    def __init__(
        self,
        model: nn.Module,
        loss_fn: LossFn,
        batch: Batch,
        config: TeleportConfig,
        symmetries: Sequence[Symmetry] | None,
        params: Mapping[str, Tensor] | None,
        optimizer: torch.optim.Optimizer | None,
        covectors: Sequence[Mapping[str, Tensor]],
    ) -> None:
        self.started = time.perf_counter()
        self.model, self.batch, self.config = model, batch, config
        self.goal = resolve_objective(config.objective, optimizer=optimizer, model=model)
        self.chosen = continuous_symmetries(
            symmetries, model, loss_fn, batch[0], config.allow_approximate,
            function_only=self.goal.keeps_function,
        )  # fmt: skip
        # actions return new tensors, so θ may share storage with the model until the end
        self.theta = {k: v.detach() for k, v in resolve_params(model, params).items()}
        check_finite(self.theta, "teleport: params")
        self.orbit = Orbit(self.chosen, batch[0], config.parameterization, self.theta)
        check_exactness(self.chosen, self.theta, batch[0], config.allow_approximate)
        self.goal.start(self.chosen, self.theta, batch)  # objectives with random directions
        frozen = frozen_parameters(model)
        self.method = choose_method(config.method, self.chosen, self.goal, frozen)
        self.path: AscentPath
        if self.method == "transport":
            trained = [k for k in self.theta if k not in frozen]
            fast = scalings_only(self.chosen, self.goal)
            kind = ScalingTransportAscent if fast else TransportAscent
            self.path = kind(model, loss_fn, batch, self.goal, self.orbit, trained)
        else:
            self.path = HessianAscent(model, loss_fn, batch, self.goal, optimizer, self.orbit)
        self.sign = (1.0 if self.goal.maximize else -1.0) * (1.0 if config.ascend else -1.0)
        self.covectors = [dict(m) for m in covectors]
        self.history: list[TeleportStep] = []
        self.shrinks, self.max_drift, self.stopped = 0, 0.0, "steps"

    def _better(self, a: float, b: float) -> bool:
        """Whether objective value ``a`` is strictly better than ``b`` in the asked direction."""
        return self.sign * a > self.sign * b

    def run(self, update_model: bool) -> TeleportResult:
        config = self.config
        start = self.path.start(self.theta, self.covectors)
        if not (math.isfinite(start.value) and math.isfinite(start.loss)):
            raise NonFiniteError(
                f"teleport: objective {self.goal.name!r} or the loss is not finite at the "
                f"starting point (objective {start.value}, loss {start.loss}); the model is "
                "unchanged"
            )
        self.loss_before = start.loss
        self.tolerance = config.max_loss_drift * max(abs(start.loss), 1e-12)
        current = self._rebased(start) if config.steps > 0 else start
        for _ in range(config.steps if self.stopped == "steps" else 0):
            if config.max_objective is not None and not self._better(
                config.max_objective, current.value
            ):
                self.stopped = "max_objective"
                break
            moved = self._step(current)
            if moved is None:
                break
            current = moved
        self._warn_if_stopped_by_guard()
        final = self._checked_end(self.path.finish(current))
        if not config.keep_worse and self._better(start.value, final.value):
            final, self.stopped = self.path.finish(start), "no_improvement"
        if update_model:
            with torch.no_grad():
                for name, p in self.model.named_parameters():
                    if name in final.params:
                        p.copy_(final.params[name])
        return TeleportResult(
            loss_before=self.loss_before,
            loss_after=final.loss,
            objective_before=start.value,
            objective_after=final.value,
            grad_norm_before=start.grad_norm,
            grad_norm_after=final.grad_norm,
            steps=len(self.history),
            stopped=self.stopped,
            max_loss_drift=self.max_drift,
            shrinks=self.shrinks,
            evaluations=self.path.evaluations,
            seconds=time.perf_counter() - self.started,
            objective=self.goal.name,
            symmetries=[s.name for s in self.chosen],
            method=self.method,
            approximate=[s.name for s in self.chosen if not s.exact],
            history=self.history,
            params=final.params,
            covectors=final.covectors,
        )

    def _rebased(self, start: Point) -> Point:
        """The start evaluated through the actions (its ascent rates), moved by ``act(θ, I)``
        of the data-dependent actions (see :meth:`Orbit.rebase`) if that keeps the loss."""
        if not isinstance(self.path, HessianAscent):
            return start
        rebased = self.path.rebased(start)
        drift = abs(rebased.loss - self.loss_before)
        if drift <= self.tolerance or self.config.on_drift == "warn":
            self.max_drift = drift
            return rebased
        self.stopped = "drift"
        return start

    def _step(self, current: Point) -> Point | None:
        """One ascent step with its checks and halvings; ``None`` (and ``stopped`` set) when
        the teleport ends here."""
        config = self.config
        direction = [self.sign * d for d in self.path.direction(current)]
        size = math.sqrt(sum(float((d**2).sum()) for d in direction))
        if size == 0.0:
            self.stopped = "stationary"
            return None
        scale, reason = config.step_scale(size), "drift"
        for shrink in range(config.max_shrinks + 1):
            try:
                trial = self.path.advance(current, [scale * d for d in direction])
            except (InvalidGroupElementError, NonFiniteError):
                # the step left the group numerically (e.g. exp of a huge ξ is singular)
                reason, scale, self.shrinks = "non_finite", scale * 0.5, self.shrinks + 1
                continue
            drift = abs(trial.loss - self.loss_before)
            if not (math.isfinite(trial.value) and math.isfinite(trial.loss)):
                reason = "non_finite"
            elif drift > self.tolerance and config.on_drift == "shrink":
                reason = "drift"
            elif config.line_search and not self._better(trial.value, current.value):
                reason = "no_gain"
            else:
                if drift > self.tolerance:
                    _warn_drift(drift, self.tolerance)
                trial = self.path.accept(trial)
                self.max_drift = max(self.max_drift, drift)
                self.history.append(TeleportStep(trial.value, trial.loss, scale * size, shrink))
                return trial
            scale *= 0.5
            self.shrinks += 1
        self.stopped = reason
        return None

    def _checked_end(self, current: Point) -> Point:
        """The transport method's one loss check, at the end point (see ``max_loss_drift``)."""
        if not isinstance(self.path, TransportAscent) or not self.history:
            return current
        loss = self.path.loss(current.params)
        drift = abs(loss - self.loss_before)
        current.loss, self.max_drift = loss, drift
        if drift <= self.tolerance or not math.isfinite(loss):
            return current
        if self.config.on_drift == "warn":
            _warn_drift(drift, self.tolerance)
            return current
        warnings.warn(
            f"teleport: the end point changed the loss by {drift:.3e} (allowed "
            f"{self.tolerance:.3e}; rounding far along the orbit), so the teleport was undone; "
            "take fewer or smaller steps, or raise max_loss_drift",
            TeleportDriftWarning,
            stacklevel=4,
        )
        self.stopped = "drift"
        return self.path.finish(self.path.start(self.theta, self.covectors))

    def _warn_if_stopped_by_guard(self) -> None:
        if self.stopped in ("drift", "non_finite") and self.config.on_drift == "shrink":
            why = (
                "broke the loss guard"
                if self.stopped == "drift"
                else "was not finite or left the group"
            )
            warnings.warn(
                f"teleport: stopped after {len(self.history)} of {self.config.steps} steps "
                f"because every shrunken step {why} (max_loss_drift="
                f"{self.config.max_loss_drift:g}); take smaller steps or raise max_loss_drift",
                TeleportDriftWarning,
                stacklevel=4,
            )


def _warn_drift(drift: float, tolerance: float) -> None:
    warnings.warn(
        f"teleport: a step changed the loss by {drift:.3e} (allowed {tolerance:.3e}) and was "
        "kept (on_drift='warn')",
        TeleportDriftWarning,
        stacklevel=5,
    )
