"""Seed 000's "generalized symmetry" (App. C, Eqs. 44-48) and its one-shot teleport (App. E).

Wrap a network F as F̃(c, θ') = F(c ⊙ θ') with one frozen scale per weight entry
(:class:`ScaledModel`). Then every positive c acts as a symmetry of F̃,
``(c, θ') ↦ (c ⊙ s, θ' / s)`` (Eq. 47; :class:`GeneralizedScaling`), even where F itself has
no such symmetry. Training θ' with SGD is SGD on θ = c ⊙ θ' with per-entry learning rate η c²
(notes 000 §2, derived), so c > 1 means faster training along those entries.

:func:`fit_scales` is the procedure seed 000 ran (App. E, notes 000 Algo 1): starting from the
current point θ₀ = c ⊙ θ', maximise J(c) = ‖∇_{θ'} L̃‖ − λ‖c − 1‖² (the gradient *norm*, not
squared; λ = 0.1) by Adam (lr 0.01) with gradient clipping, keeping c in [ε, c_max]
(c_max = 10), then set θ' = θ₀ / c. Because c ⊙ θ' = θ₀ is fixed, ∇_{θ'} L̃ = c ⊙ ∇_θ L(θ₀),
so J has the closed form ‖c ⊙ g‖ − λ‖c − 1‖² and needs one gradient g (tested against
autograd through the wrapped model). The paper leaves the number of steps, the clipping
threshold and the teleport data open: they are arguments here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import Tensor, nn

from paramsym.core.params import Params, check_finite, functional_call
from paramsym.errors import (
    InvalidArgumentError,
    InvalidGroupElementError,
    MissingParameterError,
    ShapeError,
)
from paramsym.symmetry.base import GroupElement, Region, Symmetry
from paramsym.symmetry.scaling import PositiveVectorGroup
from paramsym.teleportation.objectives import Batch, LossFn


def _scale_key(name: str) -> str:
    return name.replace(".", "__")


class ScaledModel(nn.Module):
    """F̃(c, θ') = F(c ⊙ θ') (seed 000 Eq. 47): ``base`` holds θ', ``scales`` holds c.

    The scales are parameters with ``requires_grad=False``: optimizers skip them, teleports
    move them. ``which="weights"`` scales every parameter with two or more dimensions (the
    paper's per-weight c of an MLP without biases); ``"all"`` scales every parameter.

    >>> import torch, paramsym as ps
    >>> net = ps.mlp([3, 4, 2], "relu", bias=False, seed=0)
    >>> scaled = ScaledModel(net)
    >>> x = torch.randn(5, 3)
    >>> bool(torch.allclose(scaled(x), net(x)))
    True
    """

    def __init__(self, model: nn.Module, *, which: str = "weights") -> None:
        super().__init__()
        if which not in ("weights", "all"):
            raise InvalidArgumentError(
                f"ScaledModel: which must be 'weights' or 'all', got {which!r}"
            )
        self.base = model
        self.scales = nn.ParameterDict()
        self.scaled_names: list[str] = []
        for name, p in model.named_parameters():
            if which == "all" or p.ndim >= 2:
                self.scales[_scale_key(name)] = nn.Parameter(
                    torch.ones_like(p), requires_grad=False
                )
                self.scaled_names.append(name)
        if not self.scaled_names:
            raise InvalidArgumentError("ScaledModel: the model has no parameters to scale")

    def effective_params(self) -> Params:
        """θ = c ⊙ θ', keyed like the base model's parameters (detached)."""
        out = {}
        for name, p in self.base.named_parameters():
            key = _scale_key(name)
            out[name] = (self.scales[key] * p if key in self.scales else p).detach()
        return out

    def forward(self, *args: Any) -> Tensor:
        effective = {
            name: self.scales[_scale_key(name)] * p if name in self.scaled_names else p
            for name, p in self.base.named_parameters()
        }
        return functional_call(self.base, effective, args)

    def paramsym_symmetries(self, prefix: str) -> list[Symmetry]:
        """The generalized scaling (the base model's own symmetries are not reported: most do
        not commute with a fixed per-entry c)."""
        return [GeneralizedScaling(self, prefix=prefix)]


class GeneralizedScaling(PositiveVectorGroup, Symmetry):
    """The per-entry positive scaling ``(c, θ') ↦ (c ⊙ s, θ' / s)`` of a :class:`ScaledModel`
    (seed 000 Eq. 47), a function symmetry of F̃ for every s > 0.

    Elements are positive vectors s of length ``dim`` (all scaled entries, in the order of
    ``ScaledModel.scaled_names``); ``exp(ξ) = e^ξ``. The scales are frozen parameters that
    this symmetry is built to move (:attr:`moves_frozen`).
    """

    moves_frozen = True

    def __init__(self, model: ScaledModel, *, prefix: str = "") -> None:
        if not isinstance(model, ScaledModel):
            raise InvalidArgumentError(
                f"GeneralizedScaling acts on a ScaledModel, got {type(model).__name__}; wrap "
                "the network with ScaledModel(network) first"
            )
        self.pairs = [
            (f"{prefix}scales.{_scale_key(n)}", f"{prefix}base.{n}") for n in model.scaled_names
        ]
        self.shapes = [model.scales[_scale_key(n)].shape for n in model.scaled_names]
        self.sizes = [int(math.prod(shape)) for shape in self.shapes]
        super().__init__(
            name=f"generalized_scaling[{prefix.rstrip('.') or 'model'}]",
            group=f"(R>0)^{sum(self.sizes)}",
            dim=sum(self.sizes),
            linear=True,
            notes=("a symmetry of the wrapped model F(c ⊙ θ'), not of F itself (seed 000 App C)",),
        )

    @property
    def parameter_names(self) -> tuple[str, ...]:
        return tuple(name for pair in self.pairs for name in pair)

    @property
    def touched_regions(self) -> frozenset[Region]:
        return frozenset((name, 0, 0, None) for name in self.parameter_names)

    def check_element(self, g: GroupElement) -> Tensor:
        g = self._element_tensor(g, (self.dim,), "an element")
        if not bool((g > 0).all()):
            raise InvalidGroupElementError(f"{self.name}: scales must be positive")
        return g

    def _split(self, vector: Tensor) -> list[Tensor]:
        parts = torch.split(vector, self.sizes)
        return [p.reshape(shape) for p, shape in zip(parts, self.shapes, strict=True)]

    def _check(self, params: Mapping[str, Tensor]) -> None:
        for name in self.parameter_names:
            if name not in params:
                raise MissingParameterError(
                    f"{self.name} acts on '{name}', which is not in params; pass the "
                    "parameters of the ScaledModel (ps.params_of(scaled_model))"
                )
        for (c_name, t_name), shape in zip(self.pairs, self.shapes, strict=True):
            if params[c_name].shape != shape or params[t_name].shape != shape:
                raise ShapeError(f"{self.name}: '{c_name}' and '{t_name}' must have shape {shape}")
        check_finite(((n, params[n]) for n in self.parameter_names), self.name)

    def act(self, params: Mapping[str, Tensor], g: GroupElement, x: Tensor | None = None) -> Params:
        self._check(params)
        ref = params[self.pairs[0][0]]
        s = self.check_element(g).to(dtype=ref.dtype, device=ref.device)
        out = dict(params)
        for (c_name, t_name), part in zip(self.pairs, self._split(s), strict=True):
            out[c_name] = params[c_name] * part
            out[t_name] = params[t_name] / part
        return out

    def tangent(self, params: Mapping[str, Tensor], xi: Tensor, x: Tensor | None = None) -> Params:
        self._check(params)
        ref = params[self.pairs[0][0]]
        rates = self._split(self.check_xi(xi).to(dtype=ref.dtype, device=ref.device))
        out = {k: torch.zeros_like(t) for k, t in params.items()}
        for (c_name, t_name), rate in zip(self.pairs, rates, strict=True):
            out[c_name] = params[c_name] * rate
            out[t_name] = -params[t_name] * rate
        return out


@dataclass
class ScalingFit:
    """What :func:`fit_scales` did (plain numbers).

    Attributes:
        objective_before, objective_after: J(c) = ‖∇_{θ'} L̃‖ − λ‖c − 1‖².
        grad_norm_before, grad_norm_after: ‖∇_{θ'} L̃‖ on the batch.
        scale_mean, scale_min, scale_max: of c after the fit.
        max_relative_deviation: max |c − 1| (seed 000 reports < 5%).
        steps: Adam steps taken.
    """

    objective_before: float
    objective_after: float
    grad_norm_before: float
    grad_norm_after: float
    scale_mean: float
    scale_min: float
    scale_max: float
    max_relative_deviation: float
    steps: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def fit_scales(
    model: ScaledModel,
    loss_fn: LossFn,
    batch: Batch,
    *,
    steps: int = 100,
    lr: float = 0.01,
    penalty: float = 0.1,
    max_grad_norm: float | None = 1.0,
    bounds: tuple[float, float] = (1e-3, 10.0),
) -> ScalingFit:
    """Seed 000 App. E: choose the scales c by Adam ascent on ‖c ⊙ g‖ − λ‖c − 1‖², keeping
    F̃ unchanged (θ' = θ₀ / c); updates ``model`` in place.

    Args:
        steps, lr: Adam steps on c and their learning rate (the paper: lr 0.01, steps unstated).
        penalty: λ (the paper: 0.1).
        max_grad_norm: gradient clipping on c (the paper clips; the threshold is unstated).
        bounds: (ε, c_max): c is clamped into this box after each step (the paper: [0, 10],
            with ε > 0 so that c stays invertible).
    """
    if not isinstance(model, ScaledModel):
        raise InvalidArgumentError("fit_scales: model must be a ScaledModel")
    low, high = bounds
    if not 0 < low < 1 < high or steps < 0 or lr <= 0 or penalty < 0:
        raise InvalidArgumentError(
            f"fit_scales: need 0 < ε < 1 < c_max, steps >= 0, lr > 0 and penalty >= 0; got "
            f"bounds={bounds}, steps={steps}, lr={lr}, penalty={penalty}"
        )
    theta0 = model.effective_params()
    check_finite(theta0, "fit_scales: parameters")
    leaves = {k: v.clone().requires_grad_(True) for k, v in theta0.items()}
    with torch.enable_grad():
        loss = loss_fn(functional_call(model.base, leaves, batch[0]), batch[1])
        grads = torch.autograd.grad(loss, list(leaves.values()), allow_unused=True)
    g = {
        k: torch.zeros_like(v) if d is None else d
        for (k, v), d in zip(leaves.items(), grads, strict=True)
    }
    fixed = sum(float((g[n] ** 2).sum()) for n in g if n not in model.scaled_names)

    scales = [
        model.scales[_scale_key(n)].detach().clone().requires_grad_(True)
        for n in model.scaled_names
    ]
    targets = [g[n] for n in model.scaled_names]

    def objective() -> Tensor:
        norm_sq = sum(((c * t) ** 2).sum() for c, t in zip(scales, targets, strict=True)) + fixed
        spread = sum(((c - 1.0) ** 2).sum() for c in scales)
        return torch.sqrt(norm_sq) - penalty * spread

    def grad_norm() -> float:
        with torch.no_grad():
            return math.sqrt(
                sum(float(((c * t) ** 2).sum()) for c, t in zip(scales, targets, strict=True))
                + fixed
            )

    with torch.no_grad():
        before, norm_before = float(objective()), grad_norm()
    optimizer = torch.optim.Adam(scales, lr=lr, maximize=True)
    for _ in range(steps):
        optimizer.zero_grad()
        with torch.enable_grad():
            objective().backward()
        if max_grad_norm is not None:
            torch.nn.utils.clip_grad_norm_(scales, max_grad_norm)
        optimizer.step()
        with torch.no_grad():
            for c in scales:
                c.clamp_(low, high)
    with torch.no_grad():
        after, norm_after = float(objective()), grad_norm()
        for name, c in zip(model.scaled_names, scales, strict=True):
            model.scales[_scale_key(name)].copy_(c)
        for name, p in model.base.named_parameters():
            key = _scale_key(name)
            p.copy_(theta0[name] / model.scales[key] if key in model.scales else theta0[name])
    flat = torch.cat([c.detach().reshape(-1) for c in scales])
    return ScalingFit(
        objective_before=before,
        objective_after=after,
        grad_norm_before=norm_before,
        grad_norm_after=norm_after,
        scale_mean=float(flat.mean()),
        scale_min=float(flat.min()),
        scale_max=float(flat.max()),
        max_relative_deviation=float((flat - 1).abs().max()),
        steps=steps,
    )
