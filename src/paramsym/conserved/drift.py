"""Conserved quantities under gradient *descent*: the exact one-step drift and a tracker.

Gradient flow conserves Q; a step θ′ = θ − η∇L of gradient descent does not (App. A.4). For a
quadratic Q whose cross term vanishes along the gradient, in particular every moment map
Q_M(θ) = ⟨θ, Mθ⟩ of a linear symmetry with M symmetric,

    Q(θ − η∇L) − Q(θ) = −2η⟨θ, M∇L⟩ + η²⟨∇L, M∇L⟩ = η² Q(∇L)              [derived]

exactly, because ⟨θ, M∇L⟩ = ⟨Mθ, ∇L⟩ = 0 (Noether orthogonality, Prop 2.3.9). For two-layer
linear nets this is Prop A.4.1, Δ(UᵀU − VVᵀ) = η²(G_UᵀG_U − G_VG_Vᵀ); here it holds for every
linear symmetry of the catalogue and every entry of μ at once. For other conserved quantities
(Eq. 2.17 with sigmoid, tanh, relu) the first-order term still vanishes, so
ΔQ = ½η² D²Q(θ)[∇L, ∇L] + O(η³): :func:`predicted_drift` says which case it computed.

:class:`ConservedTracker` records Q during training and its change normalised as in App. A.4.2
(Fig A.1): ΔQ̃ = (Q(t) − Q(0)) / (|f₁(θ₀)| + |f₂(θ₀)|), with f₁, f₂ the terms Q is a difference
of (:meth:`~paramsym.conserved.ConservedQuantity.magnitude`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor, nn

from paramsym.conserved.base import Batch, ConservedQuantity, LossFn, loss_gradient
from paramsym.conserved.elementwise import ElementwiseQ
from paramsym.conserved.moment import as_quantity
from paramsym.core.params import Params, axpy, check_finite, params_of, resolve_params
from paramsym.core.tables import empty_table
from paramsym.curvature import loss_function
from paramsym.errors import InvalidArgumentError
from paramsym.symmetry.base import Symmetry

DriftMethod = Literal["auto", "quadratic", "taylor"]


@dataclass
class DriftPrediction:
    """The change of Q that one gradient-descent step makes.

    Attributes:
        change: Q(θ − η∇L) − Q(θ), shaped like Q.
        exact: ``True`` for η²Q(∇L) of a quadratic quantity (exact); ``False`` for the
            second-order Taylor term ½η²D²Q[∇L, ∇L], whose error is O(η³).
        lr: η.
    """

    change: Tensor
    exact: bool
    lr: float


def _second_derivative_along(
    quantity: ConservedQuantity, params: Mapping[str, Tensor], direction: Mapping[str, Tensor]
) -> Tensor:
    """d²/dt² Q(θ + t v) at t = 0, by forward-over-forward ``torch.func.jvp``."""
    point, step = dict(params), dict(direction)

    def along(t: Tensor) -> Tensor:
        return quantity(axpy(t, step, point))

    def rate(t: Tensor) -> Tensor:
        return torch.func.jvp(along, (t,), (torch.ones_like(t),))[1]

    zero = torch.zeros((), dtype=next(iter(point.values())).dtype)
    return torch.func.jvp(rate, (zero,), (torch.ones_like(zero),))[1]


def predicted_drift(
    quantity: Symmetry | ConservedQuantity,
    params: Mapping[str, Tensor],
    gradient: Mapping[str, Tensor],
    lr: float,
    *,
    method: DriftMethod = "auto",
) -> DriftPrediction:
    """Q(θ − η g) − Q(θ) for a gradient g = ∇L(θ) (see the module docstring).

    Args:
        quantity: a :class:`ConservedQuantity`, or a linear symmetry (its moment map).
        params: θ.
        gradient: ∇L(θ), a params dict.
        lr: η.
        method: ``"quadratic"`` (η²Q(g); only for quadratic quantities, exact), ``"taylor"``
            (½η² d²/dt² Q(θ − t g), approximate for non-quadratic Q, exact for quadratic ones)
            or ``"auto"`` (the first when it applies).
    """
    if method not in ("auto", "quadratic", "taylor"):
        raise InvalidArgumentError(
            f"predicted_drift: method must be 'auto', 'quadratic' or 'taylor', got {method!r}"
        )
    q = as_quantity(quantity, params)
    check_finite(gradient, "predicted_drift: gradient")
    if method == "quadratic" and not q.quadratic:
        raise InvalidArgumentError(
            f"predicted_drift: {q.name} is not a quadratic form, so η²Q(∇L) is not its drift; "
            "use method='taylor' (second order in η)"
        )
    if method != "taylor" and q.quadratic:
        return DriftPrediction(lr * lr * q(gradient), True, float(lr))
    second = _second_derivative_along(q, params, gradient)
    return DriftPrediction(0.5 * lr * lr * second, q.quadratic, float(lr))


def gd_drift(
    model: nn.Module,
    loss_fn: LossFn,
    batch: Batch,
    quantity: Symmetry | ConservedQuantity,
    lr: float,
    params: Mapping[str, Tensor] | None = None,
    *,
    method: DriftMethod = "auto",
) -> DriftPrediction:
    """The change of a conserved quantity in one step of gradient descent with step ``lr``.

    For the moment map of a linear symmetry (and Eq. 2.17 with identity or leaky_relu) this is
    exactly ``η² Q(∇L)`` (App. A.4, generalised); otherwise the O(η²) term, flagged
    ``exact=False``. See :func:`predicted_drift`.

    >>> import torch, paramsym as ps
    >>> model = ps.mlp([3, 4, 2], activation="identity", seed=0, dtype=torch.float64)
    >>> gl = ps.symmetries(model)[0]
    >>> x, y = torch.randn(5, 3, dtype=torch.float64), torch.randn(5, 2, dtype=torch.float64)
    >>> loss_fn = torch.nn.MSELoss()
    >>> from paramsym.conserved import conserved_quantities
    >>> before = conserved_quantities(model, gl)
    >>> drift = gd_drift(model, loss_fn, (x, y), gl, lr=0.1)
    >>> loss_fn(model(x), y).backward()
    >>> with torch.no_grad():
    ...     for p in model.parameters():
    ...         p -= 0.1 * p.grad
    >>> after = conserved_quantities(model, gl)
    >>> drift.exact, torch.allclose(after - before, drift.change, atol=1e-14)
    (True, True)
    """
    point = resolve_params(model, params)
    check_finite(point, "gd_drift: params")
    gradient = loss_gradient(model, loss_fn, batch, point)
    return predicted_drift(quantity, point, gradient, lr, method=method)


class ConservedTracker:
    """A training callback recording a conserved quantity and how far GD moved it (Fig A.1).

    Call it with the step (or epoch) number before every update, and once at the start::

        tracker = ConservedTracker(model, ps.conserved.ElementwiseQ(model), every=10,
                                   loss_fn=loss_fn, batch=(x, y))
        for step in range(steps + 1):
            tracker(step)
            ...one optimizer step...
        tracker.history["relative_trace_change"]   # ΔQ̃ of App. A.4.2

    Args:
        model: the network being trained (read at each call).
        quantity: a :class:`ConservedQuantity` or a linear symmetry (its moment map).
        every: record at steps divisible by ``every``.
        loss_fn, batch: also record the loss on this batch; with ``lr``, the training batch of
            full-batch gradient descent.
        lr: predict the drift of plain gradient descent with this step size, one step at a
            time (:func:`predicted_drift`; needs a call before every step, whatever ``every``,
            and ``loss_fn``/``batch`` equal to the training loss). ``predicted_exact`` says
            whether the prediction is exact (quadratic Q) or second order.

    ``history`` has lists keyed ``step``, ``value`` (Q, as nested lists), ``trace`` (its scalar
    summary), ``change`` (‖Q − Q₀‖_F), ``relative_change`` (that over the magnitude at the first
    call), ``relative_trace_change`` (signed ΔQ̃), and ``loss``, ``predicted_change``,
    ``predicted_relative_trace_change`` when asked for.
    """

    def __init__(
        self,
        model: nn.Module,
        quantity: Symmetry | ConservedQuantity,
        *,
        every: int = 1,
        loss_fn: LossFn | None = None,
        batch: Batch | None = None,
        lr: float | None = None,
    ) -> None:
        if every < 1:
            raise InvalidArgumentError(f"ConservedTracker: every must be >= 1, got {every}")
        if (loss_fn is None) != (batch is None):
            raise InvalidArgumentError("ConservedTracker: give both loss_fn and batch, or neither")
        if lr is not None and loss_fn is None:
            raise InvalidArgumentError(
                "ConservedTracker: predicting the drift (lr=...) needs loss_fn and batch, the "
                "full-batch training loss"
            )
        self.model, self.every = model, every
        self.quantity = as_quantity(quantity, params_of(model))
        self.loss_fn, self.batch, self.lr = loss_fn, batch, lr
        if isinstance(self.quantity, ElementwiseQ) and batch is not None:
            self.quantity.check_inputs(batch[0])
        self.history = empty_table("step value trace change relative_change relative_trace_change")
        if loss_fn is not None:
            self.history["loss"] = []
        if lr is not None:
            self.history["predicted_change"] = []
            self.history["predicted_relative_trace_change"] = []
        self.predicted_exact = self.quantity.quadratic
        self._initial: Tensor | None = None
        self._magnitude = 1.0
        self._predicted: Tensor | None = None
        self._last_step: int | None = None

    def _loss(self, params: Params) -> Tensor:
        assert self.loss_fn is not None
        assert self.batch is not None
        return loss_function(self.model, self.loss_fn, self.batch)(params)

    def __call__(self, step: int) -> bool:
        """Record at this step if it is due; return whether it recorded."""
        if self.lr is not None and self._last_step is not None and step != self._last_step + 1:
            raise InvalidArgumentError(
                f"ConservedTracker: with lr given it must be called before every step "
                f"(got step {step} after {self._last_step})"
            )
        self._last_step = step
        due = step % self.every == 0
        if not due and self.lr is None:
            return False
        params = params_of(self.model)
        with torch.no_grad():
            value = self.quantity(params).detach()
        if self._initial is None:
            self._initial = value
            self._magnitude = max(float(self.quantity.magnitude(params)), 1e-300)
            self._predicted = torch.zeros_like(value)
        if due:
            self._record(step, params, value)
        if self.lr is not None:
            assert self._predicted is not None
            assert self.loss_fn is not None
            assert self.batch is not None
            gradient = loss_gradient(self.model, self.loss_fn, self.batch, params)
            increment = predicted_drift(self.quantity, params, gradient, self.lr).change
            self._predicted = self._predicted + increment.detach()
        return due

    def _record(self, step: int, params: Params, value: Tensor) -> None:
        assert self._initial is not None
        assert self._predicted is not None
        change = value - self._initial
        trace_change = float(self.quantity.trace(change)) / self._magnitude
        h = self.history
        h["step"].append(step)
        h["value"].append(value.tolist())
        h["trace"].append(float(self.quantity.trace(value)))
        h["change"].append(float(torch.linalg.vector_norm(change)))
        h["relative_change"].append(h["change"][-1] / self._magnitude)
        h["relative_trace_change"].append(trace_change)
        if self.loss_fn is not None:
            with torch.no_grad():
                h["loss"].append(float(self._loss(params)))
        if self.lr is not None:
            h["predicted_change"].append(float(torch.linalg.vector_norm(self._predicted)))
            h["predicted_relative_trace_change"].append(
                float(self.quantity.trace(self._predicted)) / self._magnitude
            )
