"""Symmetry teleportation: move along loss-preserving orbits to improve an objective.

:func:`teleport` implements the inner loop of the dissertation's Algorithm 1 (ch. 4) for any
set of continuous symmetries of a model, all at once:

1. at the current point θ, evaluate the objective J(θ) (default ‖∇L‖²) and its θ-gradient;
   for ‖∇L‖² that gradient is 2H∇L, one Hessian-vector product (reverse over reverse);
2. pull it back to the Lie algebra of every symmetry s through the action's tangent:
   ∂J(exp(ξ)·θ)/∂ξ at ξ = 0 equals T_sᵀ ∇_θJ with T_s(ξ) = ``s.tangent(θ, ξ)``, which costs a
   pass through the action, not a rebuild of the network;
3. step ξ = ±lr·(that gradient), optionally bounded in norm, and move θ ← s.act(θ, g(ξ)) for
   each symmetry in turn, with g(ξ) = exp(ξ) (default) or the first-order g = I + ξ of the
   paper's regression runs (``parameterization="first_order"``, groups open in their matrix
   space only: GL, scalings);
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

from paramsym.core.backends import differentiable_attention
from paramsym.core.model_checks import check_deterministic, require_module
from paramsym.core.params import Params, check_finite, resolve_params
from paramsym.errors import (
    ApproximateActionWarning,
    InvalidArgumentError,
    InvalidGroupElementError,
    NonFiniteError,
    ParamsymWarning,
)
from paramsym.symmetry.base import GroupElement, Symmetry
from paramsym.teleportation.objectives import (
    Batch,
    LossFn,
    Objective,
    TeleportContext,
    resolve_objective,
)

Parameterization = Literal["exp", "first_order"]
DriftPolicy = Literal["shrink", "warn"]


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
        evaluations: objective evaluations (each about one HVP for ‖∇L‖²).
        seconds: wall-clock time.
        symmetries: names of the symmetries moved along.
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
    lr: float = 1e-2
    parameterization: Parameterization = "exp"
    line_search: bool = False
    max_objective: float | None = None
    max_step_norm: float | None = 1.0
    max_loss_drift: float = 1e-4
    on_drift: DriftPolicy = "shrink"
    max_shrinks: int = 8
    allow_approximate: bool = False
    keep_worse: bool = False
    ascend: bool = True

    def options(self) -> dict[str, Any]:
        return {f: getattr(self, f) for f in self.__dataclass_fields__}


# -- the orbit: symmetries, their elements and tangents ---------------------------------------


def _is_chain(model: nn.Module) -> bool:
    """Whether the module-by-module analysis sees all of ``model`` (an ``nn.Sequential`` or a
    registered block): then no trace is needed to find its symmetries."""
    from paramsym.symmetry.detect import _analyser

    return isinstance(model, nn.Sequential) or _analyser(model) is not None


def default_symmetries(
    model: nn.Module, loss_fn: LossFn | None = None, example_input: Any = None
) -> list[Symmetry]:
    """The continuous symmetries ``ps.symmetries`` finds on ``model`` (on the graph traced on
    ``example_input`` when given; not data-dependent), without those that also move buffers
    (BatchNorm's scale invariance, which is approximate for eps > 0 and would move its
    running statistics, which teleport does not carry) and those that move a frozen parameter
    (``requires_grad=False``: it stays where it is)."""
    from paramsym.symmetry.detect import symmetries

    frozen = frozen_parameters(model)
    found = symmetries(model, example_input=example_input, loss_fn=loss_fn)
    return [
        s
        for s in found
        if s.dim > 0
        and not s.buffer_names
        and (s.moves_frozen or not frozen & set(s.parameter_names))
    ]


def frozen_parameters(model: nn.Module) -> set[str]:
    """Names of the parameters with ``requires_grad=False``."""
    return {name for name, p in model.named_parameters() if not p.requires_grad}


class _Orbit:
    """The continuous symmetries moved along together, with the teleport batch's input."""

    def __init__(
        self,
        symmetries: Sequence[Symmetry],
        x: Any,
        parameterization: Parameterization,
        params: Mapping[str, Tensor],
    ) -> None:
        self.symmetries = list(symmetries)
        self.x = x
        self.parameterization = parameterization
        ref = next(iter(params.values()))
        self.dtype, self.device = ref.dtype, ref.device
        for s in self.symmetries:
            missing = [n for n in s.parameter_names if n not in params]
            if missing:
                raise InvalidArgumentError(
                    f"teleport: symmetry {s.name} acts on parameter '{missing[0]}', which the "
                    "model does not have; pass symmetries found on this model"
                )
        if parameterization == "first_order":
            for s in self.symmetries:
                probe = torch.full((s.dim,), 1e-3, dtype=self.dtype, device=self.device)
                try:
                    s.check_element(self.element(s, probe))
                except InvalidGroupElementError as error:
                    raise InvalidArgumentError(
                        f"teleport: parameterization='first_order' uses g = I + ξ, which is not "
                        f"in {s.group} ({s.name}): {error}. Use parameterization='exp'"
                    ) from error

    def _x(self, s: Symmetry) -> Any:
        return self.x if s.data_dependent else None

    def element(self, s: Symmetry, xi: Tensor) -> GroupElement:
        if self.parameterization == "exp":
            return s.exp(xi)
        return s.linear_element(xi)

    def pullback(
        self, params: Mapping[str, Tensor], cotangent: Mapping[str, Tensor]
    ) -> list[Tensor]:
        """∂J(exp(ξ)·θ)/∂ξ at ξ = 0 for each symmetry: T_sᵀ ∇_θJ through ``s.tangent``."""
        out = []
        for s in self.symmetries:
            xi = torch.zeros(s.dim, dtype=self.dtype, device=self.device, requires_grad=True)
            with torch.enable_grad():
                rate = s.tangent(params, xi, self._x(s))
                pairing = torch.stack(
                    [(rate[k] * cotangent[k]).sum() for k in s.parameter_names]
                ).sum()
                (gradient,) = torch.autograd.grad(pairing, xi, allow_unused=True)
            out.append(torch.zeros_like(xi) if gradient is None else gradient.detach())
        return out

    def rebase(self, params: Mapping[str, Tensor]) -> Params:
        """``act(θ, identity)`` for every data-dependent symmetry: a move that keeps the loss
        on the batch and makes θ a fixed point of the identity.

        The batch actions with a pseudo-inverse (Eqs. 4.13, 4.16) fail the identity axiom when
        the batch has fewer samples than the pseudo-inverse's other side: ``act(θ, I)``
        projects weights onto the data's span. The tangent ``d/dt act(θ, exp tξ)`` describes a
        curve through ``act(θ, I)``, so the ascent gradient is only consistent at such fixed
        points (the projection is idempotent). Group actions are left unchanged.
        """
        current = dict(params)
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore", ApproximateActionWarning)
            for s in self.symmetries:
                if s.data_dependent:
                    identity = s.identity(dtype=self.dtype, device=self.device)
                    current = s.act(current, identity, self.x)
        return current

    def move(
        self, params: Mapping[str, Tensor], xis: Sequence[Tensor]
    ) -> tuple[Params, list[tuple[Symmetry, GroupElement, Params]]]:
        """θ after acting with each g(ξ_s) in turn (then :meth:`rebase`), and each
        (symmetry, g, point after it)."""
        moves = []
        current = dict(params)
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore", ApproximateActionWarning)  # warned once up front
            for s, xi in zip(self.symmetries, xis, strict=True):
                g = self.element(s, xi)
                current = s.act(current, g, self._x(s))
                moves.append((s, g, current))
        return self.rebase(current), moves

    def transport(
        self, covector: Mapping[str, Tensor], moves: Sequence[tuple[Symmetry, GroupElement, Params]]
    ) -> Params:
        """Carry a covector through the moves: m ← J⁻ᵀm as the VJP of θ' ↦ s.act(θ', g⁻¹)."""
        m = dict(covector)
        for s, g, after in moves:
            inverse = s.inverse(g)
            leaves = {k: v.detach().requires_grad_(True) for k, v in after.items()}
            with torch.enable_grad(), warnings.catch_warnings():
                warnings.simplefilter("ignore", ApproximateActionWarning)
                back = s.act(leaves, inverse, self._x(s))
                names = [k for k in s.parameter_names if k in m]
                pulled = torch.autograd.grad(
                    [back[k] for k in names],
                    [leaves[k] for k in names],
                    grad_outputs=[m[k] for k in names],
                    allow_unused=True,
                    materialize_grads=True,
                )
            m.update({k: p.detach() for k, p in zip(names, pulled, strict=True)})
        return m


# -- evaluation --------------------------------------------------------------------------------


@dataclass
class _Point:
    params: Params
    value: float
    loss: float
    gradient: Params  # ∇_θ J
    grad_norm: float


def _evaluate(
    model: nn.Module,
    params: Mapping[str, Tensor],
    loss_fn: LossFn,
    batch: Batch,
    objective: Objective,
    optimizer: torch.optim.Optimizer | None,
    with_grad_norm: bool,
) -> _Point:
    leaves = {k: v.detach().requires_grad_(True) for k, v in params.items()}
    with torch.enable_grad():
        context = TeleportContext(model, leaves, loss_fn, batch, optimizer)
        value = objective(context)
        loss = float(context.loss.detach())
        grad_norm = math.nan
        if with_grad_norm or context.has_gradient:
            grad_norm = math.sqrt(
                sum(float((g.detach() ** 2).sum()) for g in context.gradient.values())
            )
        names = list(leaves)
        if value.requires_grad:
            grads = torch.autograd.grad(
                value, [leaves[k] for k in names], allow_unused=True, materialize_grads=True
            )
        else:
            grads = tuple(torch.zeros_like(leaves[k]) for k in names)
    return _Point(
        {k: v.detach() for k, v in leaves.items()},
        float(value.detach()),
        loss,
        {k: g.detach() for k, g in zip(names, grads, strict=True)},
        grad_norm,
    )


def _check_inputs(
    model: nn.Module,
    batch: Any,
    steps: int,
    lr: float,
    max_loss_drift: float,
    on_drift: str,
    parameterization: str,
    max_shrinks: int,
) -> None:
    require_module(model, "teleport")
    if not isinstance(batch, tuple) or len(batch) != 2:
        raise InvalidArgumentError(
            "teleport: batch must be an (inputs, targets) tuple, e.g. (x, y); use (None, None) "
            "for a landscape with paramsym.landscapes.value_loss"
        )
    if steps < 0 or lr <= 0 or not math.isfinite(lr):
        raise InvalidArgumentError(
            f"teleport: steps must be >= 0 and lr a positive number, got steps={steps}, lr={lr}"
        )
    if max_loss_drift < 0 or max_shrinks < 0:
        raise InvalidArgumentError("teleport: max_loss_drift and max_shrinks must be >= 0")
    if on_drift not in ("shrink", "warn"):
        raise InvalidArgumentError(
            f"teleport: on_drift must be 'shrink' or 'warn', got {on_drift!r}"
        )
    if parameterization not in ("exp", "first_order"):
        raise InvalidArgumentError(
            f"teleport: parameterization must be 'exp' or 'first_order', got {parameterization!r}"
        )
    check_deterministic(model, "teleport")


def _continuous(
    symmetries: Sequence[Symmetry] | None, model: nn.Module, loss_fn: LossFn, x: Any
) -> list[Symmetry]:
    if symmetries is None:
        found = default_symmetries(model, loss_fn, None if _is_chain(model) else x)
        if not found:
            raise InvalidArgumentError(
                "teleport: ps.symmetries found no continuous symmetry teleport can use on this "
                "model (those that move buffers or frozen parameters are left out); pass "
                "symmetries=..., e.g. the data-dependent GL actions of "
                "ps.symmetries(model, data_dependent=True)"
            )
        return found
    chosen = list(symmetries)
    frozen = frozen_parameters(model)
    for s in chosen:
        if not isinstance(s, Symmetry):
            raise InvalidArgumentError(
                f"teleport: symmetries must be Symmetry objects, got {type(s).__name__}"
            )
        if s.buffer_names:
            raise InvalidArgumentError(
                f"teleport: {s.name} also moves the buffers {sorted(s.buffer_names)} (running "
                "statistics), which teleport does not carry; teleport along symmetries that act "
                "on parameters only (the default choice leaves these out)"
            )
        if not s.moves_frozen and frozen & set(s.parameter_names):
            raise InvalidArgumentError(
                f"teleport: {s.name} moves the frozen parameters "
                f"{sorted(frozen & set(s.parameter_names))} (requires_grad=False); teleport "
                "keeps frozen parameters fixed: unfreeze them (requires_grad_(True)) to "
                "teleport along this symmetry (the default choice leaves it out)"
            )
        if s.preserves == "distribution":
            raise InvalidArgumentError(
                f"teleport: {s.name} preserves the loss only in expectation over the data "
                "distribution, not on a batch; teleport along function or loss symmetries"
            )
    continuous = [s for s in chosen if s.dim > 0]
    if not continuous:
        names = ", ".join(s.name for s in chosen) or "none"
        raise InvalidArgumentError(
            f"teleport: no continuous symmetry to move along (got {names}); discrete "
            "symmetries have no Lie algebra to ascend on"
        )
    return continuous


def _check_exactness(
    symmetries: Sequence[Symmetry], params: Mapping[str, Tensor], x: Any, allow: bool
) -> None:
    """Refuse (or, with ``allow``, warn about) data-dependent actions inexact on this batch."""
    for s in symmetries:
        report_fn = getattr(s, "act_with_report", None)
        if not s.data_dependent or report_fn is None:
            continue
        _, report = report_fn(params, s.identity(dtype=next(iter(params.values())).dtype), x)
        if report.exact:
            continue
        what = (
            f"{s.name} is not exact on this batch ({report.batch_size} samples, hidden width "
            f"{report.width}, rank {report.rank}; {s.notes[0] if s.notes else ''})"
        )
        if not allow:
            raise InvalidArgumentError(
                f"teleport: {what}. Use a smaller teleport batch, or pass "
                "allow_approximate=True to move anyway with the loss guard (max_loss_drift)"
            )
        warnings.warn(
            f"teleport: {what}; steps that move the loss by more than max_loss_drift are "
            "shrunk or stopped",
            ApproximateActionWarning,
            stacklevel=3,
        )


# -- the engine --------------------------------------------------------------------------------


def teleport(
    model: nn.Module,
    loss_fn: LossFn,
    batch: Batch,
    symmetries: Sequence[Symmetry] | None = None,
    objective: str | Objective | Callable[..., Tensor] = "grad_norm",
    steps: int = 10,
    lr: float = 1e-2,
    *,
    params: Mapping[str, Tensor] | None = None,
    optimizer: torch.optim.Optimizer | None = None,
    parameterization: Parameterization = "exp",
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
            every continuous symmetry ``ps.symmetries(model, example_input=x, loss_fn=loss_fn)``
            finds on the graph traced on the batch's inputs (nn.Sequential chains and registered
            blocks are analysed without a trace), except those that move buffers.
            Data-dependent actions use the batch's inputs.
        objective: ``"grad_norm"`` (‖∇L‖²), ``"preconditioned_grad_norm"`` (needs
            ``optimizer``), ``"loss_alignment"``, an :class:`Objective`, or a callable
            ``fn(model, params, loss_fn, batch, optimizer) -> scalar`` (maximised).
            ``"sharpness"`` (φ, Eq. 5.1) and ``"curvature"`` (ψ, Eq. 5.2) use their defaults;
            configure them through :class:`~paramsym.teleportation.Sharpness` /
            :class:`~paramsym.teleportation.Curvature` (radii, directions, k, generator).
        steps, lr: ascent steps on the Lie-algebra coordinates and their learning rate.
        params: the starting point (default the model's parameters).
        optimizer: for objectives that read optimizer state.
        parameterization: ``"exp"`` (g = exp ξ) or ``"first_order"`` (g = I + ξ; the paper's
            regression runs, with the exact inverse instead of its I − ξ).
        line_search: halve a step until the objective improves.
        max_objective: stop once the objective reaches this value (the authors' cap).
        max_step_norm: bound ‖ξ‖ of each step (all symmetries together); the default 1 keeps
            each step's group element within a factor e of the identity in every direction.
            Gradient norms grow without bound on non-compact orbits (rescaling, GL), and an
            unbounded ascent step can jump to a point where the next step overflows; ``None``
            leaves only ``lr`` to bound it (the paper's setting).
        max_loss_drift: allowed |L − L_before| on the batch, relative to max(|L_before|, 1e-12).
        on_drift: ``"shrink"`` halves offending steps (then stops); ``"warn"`` accepts them
            with a :class:`TeleportDriftWarning`.
        max_shrinks: halvings per step before the teleport stops.
        allow_approximate: data-dependent actions that are not exact on the batch (e.g. the
            pseudo-inverse action with more samples than hidden units) are refused unless
            this is set; then they warn, and the loss guard bounds what they change.
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
    _check_inputs(model, batch, steps, lr, max_loss_drift, on_drift, parameterization, max_shrinks)
    with differentiable_attention():  # the objectives differentiate ∇L (an HVP) through it
        return _teleport(
            model, loss_fn, batch, symmetries, objective, steps, lr, params, optimizer,
            parameterization, line_search, max_objective, max_step_norm, max_loss_drift,
            on_drift, max_shrinks, allow_approximate, keep_worse, covectors, update_model,
            ascend,
        )  # fmt: skip


def _teleport(
    model: nn.Module,
    loss_fn: LossFn,
    batch: Batch,
    symmetries: Sequence[Symmetry] | None,
    objective: str | Objective | Callable[..., Tensor],
    steps: int,
    lr: float,
    params: Mapping[str, Tensor] | None,
    optimizer: torch.optim.Optimizer | None,
    parameterization: Parameterization,
    line_search: bool,
    max_objective: float | None,
    max_step_norm: float | None,
    max_loss_drift: float,
    on_drift: DriftPolicy,
    max_shrinks: int,
    allow_approximate: bool,
    keep_worse: bool,
    covectors: Sequence[Mapping[str, Tensor]],
    update_model: bool,
    ascend: bool = True,
) -> TeleportResult:
    """The body of :func:`teleport` (arguments as there, already checked)."""
    start = time.perf_counter()
    chosen = _continuous(symmetries, model, loss_fn, batch[0])
    theta = {k: v.detach().clone() for k, v in resolve_params(model, params).items()}
    check_finite(theta, "teleport: params")
    goal = resolve_objective(objective, optimizer=optimizer, model=model)
    orbit = _Orbit(chosen, batch[0], parameterization, theta)
    _check_exactness(chosen, theta, batch[0], allow_approximate)
    goal.start(chosen, theta, batch)  # objectives with random directions draw them once here
    sign = (1.0 if goal.maximize else -1.0) * (1.0 if ascend else -1.0)

    start_point = _evaluate(model, theta, loss_fn, batch, goal, optimizer, with_grad_norm=True)
    evaluations = 1
    if not (math.isfinite(start_point.value) and math.isfinite(start_point.loss)):
        raise NonFiniteError(
            f"teleport: objective {goal.name!r} or the loss is not finite at the starting point "
            f"(objective {start_point.value}, loss {start_point.loss}); the model is unchanged"
        )
    loss_before = start_point.loss
    objective_before, grad_norm_before = start_point.value, start_point.grad_norm
    tolerance = max_loss_drift * max(abs(loss_before), 1e-12)
    carried = [dict(m) for m in covectors]
    history: list[TeleportStep] = []
    shrinks_total, max_drift, stopped = 0, 0.0, "steps"
    current = start_point
    if any(s.data_dependent for s in chosen) and steps > 0:
        rebased = _evaluate(model, orbit.rebase(theta), loss_fn, batch, goal, optimizer, False)
        evaluations += 1
        drift = abs(rebased.loss - loss_before)
        if drift <= tolerance or on_drift == "warn":
            current, max_drift = rebased, drift
        else:
            stopped = "drift"

    for _ in range(steps if stopped == "steps" else 0):
        if max_objective is not None and sign * current.value >= sign * max_objective:
            stopped = "max_objective"
            break
        direction = [sign * g for g in orbit.pullback(current.params, current.gradient)]
        size = math.sqrt(sum(float((d**2).sum()) for d in direction))
        if size == 0.0:
            stopped = "stationary"
            break
        scale = lr
        if max_step_norm is not None and lr * size > max_step_norm:
            scale = max_step_norm / size
        accepted, reason = None, "drift"
        for shrink in range(max_shrinks + 1):
            try:
                candidate, moves = orbit.move(current.params, [scale * d for d in direction])
            except (InvalidGroupElementError, NonFiniteError):
                # the step left the group numerically (e.g. exp of a huge ξ is singular)
                reason, scale, shrinks_total = "non_finite", scale * 0.5, shrinks_total + 1
                continue
            trial = _evaluate(model, candidate, loss_fn, batch, goal, optimizer, False)
            evaluations += 1
            drift = abs(trial.loss - loss_before)
            finite = math.isfinite(trial.value) and math.isfinite(trial.loss)
            if not finite:
                reason = "non_finite"
            elif drift > tolerance and on_drift == "shrink":
                reason = "drift"
            elif line_search and sign * trial.value <= sign * current.value:
                reason = "no_gain"
            else:
                if drift > tolerance:
                    warnings.warn(
                        f"teleport: a step changed the loss by {drift:.3e} (allowed "
                        f"{tolerance:.3e}) and was kept (on_drift='warn')",
                        TeleportDriftWarning,
                        stacklevel=2,
                    )
                accepted = (trial, moves, shrink)
                break
            scale *= 0.5
            shrinks_total += 1
        if accepted is None:
            stopped = reason
            break
        trial, moves, shrink = accepted
        carried = [orbit.transport(m, moves) for m in carried]
        max_drift = max(max_drift, abs(trial.loss - loss_before))
        history.append(TeleportStep(trial.value, trial.loss, scale * size, shrink))
        current = trial

    if stopped in ("drift", "non_finite") and on_drift == "shrink":
        why = "broke the loss guard" if stopped == "drift" else "was not finite or left the group"
        warnings.warn(
            f"teleport: stopped after {len(history)} of {steps} steps because every shrunken "
            f"step {why} (max_loss_drift={max_loss_drift:g}); lower lr or raise max_loss_drift",
            TeleportDriftWarning,
            stacklevel=2,
        )
    final = current
    if not keep_worse and sign * final.value < sign * objective_before:
        final, stopped, carried = start_point, "no_improvement", [dict(m) for m in covectors]
    if math.isnan(final.grad_norm):  # objectives that never needed ∇L
        final = _evaluate(model, current.params, loss_fn, batch, goal, optimizer, True)
    if update_model:
        with torch.no_grad():
            for name, p in model.named_parameters():
                if name in final.params:
                    p.copy_(final.params[name])
    return TeleportResult(
        loss_before=loss_before,
        loss_after=final.loss,
        objective_before=objective_before,
        objective_after=final.value,
        grad_norm_before=grad_norm_before,
        grad_norm_after=final.grad_norm,
        steps=len(history),
        stopped=stopped,
        max_loss_drift=max_drift,
        shrinks=shrinks_total,
        evaluations=evaluations,
        seconds=time.perf_counter() - start,
        objective=goal.name,
        symmetries=[s.name for s in chosen],
        history=history,
        params=final.params,
        covectors=carried,
    )
