"""What a teleport maximises (or minimises) along a symmetry orbit.

An objective is evaluated on a :class:`TeleportContext`: the model, the parameters (leaves that
require grad), the loss and the teleport batch, and optionally an optimizer whose state defines
a preconditioner. It returns a differentiable scalar; the engine differentiates it once more
with respect to the parameters (for the gradient norm that is one Hessian-vector product) and
pulls the result back to the Lie algebra through the action's tangent.

Built in (dissertation ch. 4-5, seed 000):

``"grad_norm"`` (:class:`GradNorm`)
    ‖∇L(θ)‖², the rate −dL/dt of gradient flow (Algorithm 1, Eq. 4.17 with η = I).
``"preconditioned_grad_norm"`` (:class:`PreconditionedGradNorm`)
    ‖∇L‖²_A = ∇Lᵀ A ∇L for a symmetric positive (semi-)definite A: a diagonal given as a params
    dict, a callable ``v ↦ A v``, or the diagonal of an AdaGrad/RMSProp/Adam optimizer's own
    update (Eq. 5.7, see :meth:`PreconditionedGradNorm.from_optimizer`).
``"loss_alignment"`` (:class:`LossAlignment`)
    Seed 000's A = η‖∇L‖²/‖∂L/∂F‖² (Eq. 28 with Prop 5.1). On a function-preserving orbit
    ∂L/∂F is constant, so it ranks points exactly like ‖∇L‖².
``"sharpness"`` (:class:`~paramsym.teleportation.Sharpness`)
    φ(θ, T, D) of Eq. 5.1, the mean loss along random unit directions (fixed per teleport).
``"curvature"`` (:class:`~paramsym.teleportation.Curvature`)
    ψ(θ, k) of Eq. 5.2, the mean curvature of k random orbit curves (fixed per teleport).
A callable ``fn(model, params, loss_fn, batch, optimizer) -> Tensor`` (:class:`FunctionObjective`)
    Anything differentiable in ``params``.

The engine assumes nothing beyond differentiability. Every built-in objective is maximised by
default; ``teleport(..., ascend=False)`` minimises it (Algorithm 2's descent). Names are turned
into objectives by :func:`~paramsym.teleportation.resolve_objective`
(:mod:`paramsym.teleportation.objective_names`).
"""

from __future__ import annotations

import abc
import math
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

from paramsym.core.params import Params, functional_call
from paramsym.errors import InvalidArgumentError, MissingParameterError

if TYPE_CHECKING:
    from paramsym.symmetry.base import Symmetry

LossFn = Callable[[Tensor, Tensor], Tensor]
Batch = tuple[Any, Any]
Preconditioner = Mapping[str, Tensor] | Callable[[Mapping[str, Tensor]], Mapping[str, Tensor]]


class TeleportContext:
    """One evaluation point: lazily computes the model's outputs, the loss and its gradient,
    all with their graphs kept, so an objective can use them and still be differentiated.

    Attributes:
        model, loss_fn, batch: as given to :func:`~paramsym.teleportation.teleport`.
        params: leaves requiring grad (name → tensor).
        optimizer: the optimizer whose state an objective may read, or ``None``.
        trained: the names ∇L is taken over: the model's parameters with ``requires_grad``
            (a frozen parameter, such as the scales of a
            :class:`~paramsym.teleportation.ScaledModel`, is moved by symmetries but not trained).
    """

    def __init__(
        self,
        model: nn.Module,
        params: Mapping[str, Tensor],
        loss_fn: LossFn,
        batch: Batch,
        optimizer: torch.optim.Optimizer | None = None,
    ) -> None:
        self.model, self.params, self.loss_fn = model, dict(params), loss_fn
        self.batch, self.optimizer = batch, optimizer
        frozen = {n for n, p in model.named_parameters() if not p.requires_grad}
        self.trained = [k for k in self.params if k not in frozen]
        self._outputs: Tensor | None = None
        self._loss: Tensor | None = None
        self._gradient: Params | None = None

    @property
    def outputs(self) -> Tensor:
        if self._outputs is None:
            self._outputs = functional_call(self.model, self.params, self.batch[0])
        return self._outputs

    @property
    def loss(self) -> Tensor:
        if self._loss is None:
            self._loss = scalar_loss(self.loss_fn(self.outputs, self.batch[1]))
        return self._loss

    @property
    def has_gradient(self) -> bool:
        """Whether ∇L was already computed (by the objective)."""
        return self._gradient is not None

    @property
    def gradient(self) -> Params:
        """∇L(θ) over the trained parameters, with its graph (differentiable again)."""
        if self._gradient is None:
            names = self.trained
            grads = torch.autograd.grad(
                self.loss,
                [self.params[k] for k in names],
                create_graph=True,
                allow_unused=True,
                materialize_grads=True,
            )
            self._gradient = dict(zip(names, grads, strict=True))
        return self._gradient


def scalar_loss(loss: Tensor) -> Tensor:
    """``loss`` as a 0-d tensor; a loss_fn that returns more than one number is refused."""
    if loss.numel() != 1:
        raise InvalidArgumentError(
            f"teleport: loss_fn must return a scalar, got shape {tuple(loss.shape)}"
        )
    return loss.reshape(())


def loss_value(
    model: nn.Module, params: Mapping[str, Tensor], loss_fn: LossFn, batch: Batch
) -> Tensor:
    """L(θ) = loss_fn(model(x; θ), y) on ``batch = (x, y)``, as a 0-d tensor."""
    return scalar_loss(loss_fn(functional_call(model, dict(params), batch[0]), batch[1]))


class Objective(abc.ABC):
    """A differentiable scalar of a :class:`TeleportContext` and the direction to move it.

    Attributes:
        name: readable name for results and logs.
        maximize: ascend (``True``) or descend.
    """

    name: str = "objective"
    maximize: bool = True
    gradient_only: bool = False
    keeps_function: bool = False
    """Whether a teleport for this objective must keep the model's function, not only its
    loss: the objective reads the weights or activations (a quantization error), so the
    default symmetries leave out those that keep only the loss (the logits' softmax
    translation)."""
    """Whether the value is a function of ∇L alone (:meth:`of_gradient`): then a teleport along
    exact, affine (or absorbed-translation), data-free symmetries can transport ∇L instead of
    recomputing it (``teleport(..., method="transport")``)."""

    @abc.abstractmethod
    def __call__(self, context: TeleportContext) -> Tensor:
        """The objective's value, differentiable in ``context.params``."""

    def start(
        self, symmetries: Sequence[Symmetry], params: Mapping[str, Tensor], batch: Batch
    ) -> None:
        """Called once at the start of each teleport, before any evaluation: objectives that
        draw random directions (:class:`~paramsym.teleportation.Sharpness`,
        :class:`~paramsym.teleportation.Curvature`) draw them here and hold them through the
        teleport's steps. The default does nothing."""
        return None

    def of_gradient(self, gradient: Mapping[str, Tensor]) -> Tensor:
        """The value as a differentiable function of ∇L (name → tensor), for objectives with
        :attr:`gradient_only`; the others raise."""
        raise NotImplementedError(f"objective {self.name!r} is not a function of ∇L alone")

    def diagonal_weights(self) -> float | Mapping[str, Tensor] | None:
        """w when the value is the diagonal quadratic form Σ w ⊙ v² of v = ∇L: one weight
        for every entry (a float) or a tensor per parameter; ``None`` (the default) for any
        other objective. Gradient transport then needs no autograd for J and ∇J = 2 w ⊙ v,
        and updates J tensor by tensor."""
        return None

    def squared_entries(self, gradient: Mapping[str, Tensor]) -> Params | None:
        """``w ⊙ v²`` per parameter when the value is a diagonal quadratic form
        Σ w ⊙ v² of v = ∇L (:meth:`diagonal_weights`; so that scaling v entrywise by F gives
        Σ (w ⊙ v²) ⊙ F²), else ``None``."""
        weights = self.diagonal_weights()
        if weights is None:
            return None
        if isinstance(weights, float):
            return {k: weights * g * g for k, g in gradient.items()}
        if any(k not in weights for k in gradient):
            return None  # of_gradient names the missing entry
        return {k: weights[k] * g * g for k, g in gradient.items()}


class GradNorm(Objective):
    """‖∇L(θ)‖² on the teleport batch (dissertation Algorithm 1; its θ-gradient is 2H∇L)."""

    name = "grad_norm"
    gradient_only = True

    def __call__(self, context: TeleportContext) -> Tensor:
        return self.of_gradient(context.gradient)

    def of_gradient(self, gradient: Mapping[str, Tensor]) -> Tensor:
        return sum((g * g).sum() for g in gradient.values())  # type: ignore[return-value]

    def diagonal_weights(self) -> float:
        return 1.0


class PreconditionedGradNorm(Objective):
    """‖∇L‖²_A = ∇Lᵀ A ∇L, the rate −dL/dt of the flow θ' = −A∇L (Eqs. 4.17, 5.7).

    Args:
        preconditioner: a params dict of positive weights (A diagonal), or a callable
            ``v ↦ A v`` on params dicts (A symmetric positive semi-definite; not checked).
            A is held fixed during a teleport (it is not differentiated).
    """

    name = "preconditioned_grad_norm"
    gradient_only = True

    def __init__(self, preconditioner: Preconditioner) -> None:
        self.preconditioner = preconditioner

    def __call__(self, context: TeleportContext) -> Tensor:
        return self.of_gradient(context.gradient)

    def of_gradient(self, gradient: Mapping[str, Tensor]) -> Tensor:
        if callable(self.preconditioner):
            product = self.preconditioner(gradient)
        else:
            missing = [k for k in gradient if k not in self.preconditioner]
            if missing:
                raise MissingParameterError(
                    f"PreconditionedGradNorm: no preconditioner entry for parameter "
                    f"'{missing[0]}'; give one positive tensor per parameter"
                )
            product = {k: self.preconditioner[k].detach() * g for k, g in gradient.items()}
        return sum((gradient[k] * product[k]).sum() for k in gradient)  # type: ignore[return-value]

    def diagonal_weights(self) -> Mapping[str, Tensor] | None:
        if callable(self.preconditioner):
            return None
        return {k: a.detach() for k, a in self.preconditioner.items()}

    @classmethod
    def from_optimizer(
        cls, optimizer: torch.optim.Optimizer, model: nn.Module
    ) -> PreconditionedGradNorm:
        """The diagonal that the optimizer's next step applies to the gradient.

        ``Adagrad``: 1/(√G + ε) with G the sum of squared gradients; ``RMSprop``: 1/(√v + ε);
        ``Adam``/``AdamW``: 1/(√v̂ + ε) with v̂ the bias-corrected second moment (momentum
        ignored). This is the A of Eq. 5.7 with the optimizer's own ε placement, so
        ‖∇L‖²_A is −dL/dt of that optimizer's flow up to the learning rate.
        """
        names = {id(p): n for n, p in model.named_parameters()}
        diagonal: dict[str, Tensor] = {}
        for group in optimizer.param_groups:
            eps = float(group.get("eps", 1e-10))
            for p in group["params"]:
                if id(p) not in names:
                    continue
                state = optimizer.state.get(p, {})
                diagonal[names[id(p)]] = _inverse_root(optimizer, state, eps, names[id(p)])
        missing = [n for n, p in model.named_parameters() if p.requires_grad and n not in diagonal]
        if missing:
            raise MissingParameterError(
                f"PreconditionedGradNorm.from_optimizer: parameter '{missing[0]}' is not in "
                f"the {type(optimizer).__name__}; build the optimizer on model.parameters()"
            )
        return cls(diagonal)


def _inverse_root(
    optimizer: torch.optim.Optimizer, state: Mapping[str, Any], eps: float, name: str
) -> Tensor:
    kind = type(optimizer).__name__
    if isinstance(optimizer, torch.optim.Adagrad):
        second = state.get("sum")
    elif isinstance(optimizer, torch.optim.RMSprop):
        second = state.get("square_avg")
    elif isinstance(optimizer, (torch.optim.Adam, torch.optim.AdamW)):
        second = state.get("exp_avg_sq")
        if second is not None:
            step = float(state["step"])
            beta2 = optimizer.param_groups[0]["betas"][1]
            second = second / (1.0 - beta2**step)
    else:
        raise InvalidArgumentError(
            f"PreconditionedGradNorm.from_optimizer: {kind} has no diagonal preconditioner "
            "paramsym knows; use Adagrad, RMSprop, Adam or AdamW, or pass the diagonal yourself"
        )
    if second is None:
        raise InvalidArgumentError(
            f"PreconditionedGradNorm.from_optimizer: the {kind} has no state for parameter "
            f"'{name}' yet; take at least one optimizer step before teleporting with its "
            "preconditioner"
        )
    return 1.0 / (second.detach().sqrt() + eps)


class LossAlignment(Objective):
    """Seed 000's modified alignment A = fᵀΘf/‖f‖² = η‖∇L‖²/‖∂L/∂F‖² (Eq. 28, Prop 5.1).

    With a mean loss, ‖∇L‖² = ‖f‖²A/(η|X|²), f = ∂C/∂F per sample; f is invariant on a
    function-preserving orbit, so A and ‖∇L‖² rise in the same ratio there.
    """

    name = "loss_alignment"

    def __init__(self, learning_rate: float = 1.0) -> None:
        if not learning_rate > 0:
            raise InvalidArgumentError(
                f"LossAlignment: learning_rate must be > 0, got {learning_rate}"
            )
        self.learning_rate = float(learning_rate)

    def __call__(self, context: TeleportContext) -> Tensor:
        (to_outputs,) = torch.autograd.grad(context.loss, context.outputs, create_graph=True)
        squared = sum((g * g).sum() for g in context.gradient.values())
        return self.learning_rate * squared / (to_outputs * to_outputs).sum()


class FunctionObjective(Objective):
    """A user callable ``fn(model, params, loss_fn, batch, optimizer) -> scalar Tensor``."""

    def __init__(
        self, function: Callable[..., Tensor], *, maximize: bool = True, name: str | None = None
    ) -> None:
        self.function = function
        self.maximize = bool(maximize)
        self.name = name or str(getattr(function, "__name__", "objective"))

    def __call__(self, context: TeleportContext) -> Tensor:
        value = self.function(
            context.model, context.params, context.loss_fn, context.batch, context.optimizer
        )
        if not isinstance(value, Tensor) or value.numel() != 1:
            raise InvalidArgumentError(
                f"teleport: objective {self.name!r} must return a scalar tensor, got "
                f"{type(value).__name__}"
                + (f" of shape {tuple(value.shape)}" if isinstance(value, Tensor) else "")
            )
        return value.reshape(())


def is_finite(value: Tensor) -> bool:
    """Whether a scalar tensor is finite (NaN/inf objectives are refused by the engine)."""
    return math.isfinite(float(value.detach()))
