"""A symmetry-free baseline: level-set teleportation (Mishkin, Bietti and Gower 2024).

Maximise ½‖∇L(θ)‖² subject to L(θ) = L(θ₀) over *all* parameters, not along a group orbit,
by sequential linear programming with one Hessian-vector product per step. paramsym's version
of the method the paper describes (our implementation, from its description):

* at θ_k, with g = ∇L(θ_k) and q = H g = ∇(½‖g‖²) (one HVP, reverse over reverse), take the
  ascent step θ_k + η q and project it onto the linearised level set
  {θ : L(θ_k) + gᵀ(θ − θ_k) = L(θ₀)}:
  θ_{k+1} = θ_k + η q + ((L(θ₀) − L(θ_k) − η gᵀq) / ‖g‖²) g;
* with ``normalized=True`` (default) the step maximises log ½‖g‖², i.e. η is divided by
  ½‖g‖², which makes the step size scale-free;
* the linearisation leaves a second-order constraint error; up to ``restorations`` Newton
  steps along the gradient, θ ← θ + ((L(θ₀) − L(θ))/‖∇L(θ)‖²) ∇L(θ) (one gradient each),
  bring the trial point back to the level set before it is judged;
* backtracking line search: halve η until the objective increases and the level-set residual
  |L − L(θ₀)| stays within ``constraint_tol``; after an accepted step η grows by 1.25;
* stop when the KKT residual ‖q − (gᵀq/‖g‖²) g‖ / ‖q‖ (the objective's gradient off the
  constraint normal) and the constraint residual are below their tolerances.

Unlike a symmetry teleport, the constraint holds only to first order per step (the line search
keeps the residual within ``constraint_tol``), and it needs no knowledge of the model.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import Tensor, nn

from paramsym.core.params import Params, check_finite, functional_call, resolve_params
from paramsym.errors import InvalidArgumentError
from paramsym.teleportation.objectives import Batch, LossFn


@dataclass
class LevelSetResult:
    """What :func:`level_set_teleport` did (plain numbers).

    Attributes:
        loss_before, loss_after, grad_norm_before, grad_norm_after: on the batch (norm, not
            squared).
        steps: accepted steps; ``hvps``: Hessian-vector products (one per trial point);
            ``gradients``: extra gradient evaluations of the restoration steps.
        kkt_residual: relative residual at the end; ``stopped``: ``"kkt"``, ``"steps"`` or
            ``"line_search"``.
    """

    loss_before: float
    loss_after: float
    grad_norm_before: float
    grad_norm_after: float
    steps: int
    hvps: int
    gradients: int
    kkt_residual: float
    stopped: str
    seconds: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class _State:
    params: Params
    loss: float
    grad: Tensor  # flat ∇L
    hvp: Tensor  # flat H ∇L

    @property
    def objective(self) -> float:
        return 0.5 * float(self.grad @ self.grad)


def _state(model: nn.Module, loss_fn: LossFn, batch: Batch, params: Mapping[str, Tensor]) -> _State:
    leaves = {k: v.detach().requires_grad_(True) for k, v in params.items()}
    with torch.enable_grad():
        loss = loss_fn(functional_call(model, leaves, batch[0]), batch[1])
        grads = torch.autograd.grad(loss, list(leaves.values()), create_graph=True)
        half_norm = 0.5 * torch.stack([(g * g).sum() for g in grads]).sum()
        hvps = torch.autograd.grad(half_norm, list(leaves.values()))
    return _State(
        {k: v.detach() for k, v in leaves.items()},
        float(loss.detach()),
        torch.cat([g.detach().reshape(-1) for g in grads]),
        torch.cat([h.reshape(-1) for h in hvps]),
    )


def _loss_and_gradient(
    model: nn.Module, loss_fn: LossFn, batch: Batch, params: Mapping[str, Tensor]
) -> tuple[float, Tensor]:
    leaves = {k: v.detach().requires_grad_(True) for k, v in params.items()}
    with torch.enable_grad():
        loss = loss_fn(functional_call(model, leaves, batch[0]), batch[1])
        grads = torch.autograd.grad(loss, list(leaves.values()))
    return float(loss.detach()), torch.cat([g.reshape(-1) for g in grads])


def _unflatten_like(vector: Tensor, like: Mapping[str, Tensor]) -> Params:
    out, offset = {}, 0
    for k, t in like.items():
        out[k] = vector[offset : offset + t.numel()].reshape(t.shape)
        offset += t.numel()
    return out


def level_set_teleport(
    model: nn.Module,
    loss_fn: LossFn,
    batch: Batch,
    *,
    steps: int = 50,
    lr: float = 1.0,
    params: Mapping[str, Tensor] | None = None,
    normalized: bool = True,
    constraint_tol: float = 1e-4,
    kkt_tol: float = 1e-4,
    max_backtracks: int = 30,
    restorations: int = 3,
    update_model: bool = True,
) -> LevelSetResult:
    """Maximise ½‖∇L‖² on the level set of L through θ₀ (see the module docstring).

    Args:
        steps: most accepted steps; lr: the initial step size η.
        constraint_tol: allowed |L − L(θ₀)| relative to max(|L(θ₀)|, 1e-12).
        kkt_tol: stop when the relative KKT residual falls below it.
        max_backtracks: halvings of η per step before stopping.
        restorations: most Newton steps back onto the level set per trial point.
    """
    if steps < 0 or not lr > 0 or constraint_tol <= 0 or max_backtracks < 0:
        raise InvalidArgumentError(
            "level_set_teleport: need steps >= 0, lr > 0, constraint_tol > 0, "
            f"max_backtracks >= 0; got steps={steps}, lr={lr}, constraint_tol={constraint_tol}"
        )
    if not isinstance(batch, tuple) or len(batch) != 2:
        raise InvalidArgumentError("level_set_teleport: batch must be an (inputs, targets) tuple")
    start = time.perf_counter()
    theta = {k: v.detach().clone() for k, v in resolve_params(model, params).items()}
    check_finite(theta, "level_set_teleport: params")
    current = _state(model, loss_fn, batch, theta)
    hvps, gradients = 1, 0
    target, tolerance = current.loss, constraint_tol * max(abs(current.loss), 1e-12)
    first = current
    eta, accepted, stopped = lr, 0, "steps"
    residual = math.nan
    for _ in range(steps):
        g, q = current.grad, current.hvp
        g_sq = float(g @ g)
        if g_sq == 0.0:
            stopped = "kkt"
            break
        residual = float(torch.linalg.vector_norm(q - (float(g @ q) / g_sq) * g)) / max(
            float(torch.linalg.vector_norm(q)), 1e-300
        )
        if residual <= kkt_tol and abs(current.loss - target) <= tolerance:
            stopped = "kkt"
            break
        flat = torch.cat([t.reshape(-1) for t in current.params.values()])
        for _ in range(max_backtracks + 1):
            step = eta / current.objective if normalized else eta
            moved = flat + step * q
            moved = moved + ((target - current.loss - step * float(g @ q)) / g_sq) * g
            for _ in range(restorations):
                loss, grad = _loss_and_gradient(
                    model, loss_fn, batch, _unflatten_like(moved, current.params)
                )
                gradients += 1
                grad_sq = float(grad @ grad)
                if abs(loss - target) <= tolerance or not math.isfinite(loss) or grad_sq == 0:
                    break
                moved = moved + ((target - loss) / grad_sq) * grad
            trial = _state(model, loss_fn, batch, _unflatten_like(moved, current.params))
            hvps += 1
            if (
                math.isfinite(trial.objective)
                and trial.objective > current.objective
                and abs(trial.loss - target) <= tolerance
            ):
                current, accepted, eta = trial, accepted + 1, eta * 1.25
                break
            eta *= 0.5
        else:
            stopped = "line_search"
            break
    if update_model:
        with torch.no_grad():
            for name, p in model.named_parameters():
                if name in current.params:
                    p.copy_(current.params[name])
    return LevelSetResult(
        loss_before=first.loss,
        loss_after=current.loss,
        grad_norm_before=math.sqrt(2 * first.objective),
        grad_norm_after=math.sqrt(2 * current.objective),
        steps=accepted,
        hvps=hvps,
        gradients=gradients,
        kkt_residual=residual,
        stopped=stopped,
        seconds=time.perf_counter() - start,
    )
