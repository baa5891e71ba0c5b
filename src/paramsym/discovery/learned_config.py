"""Configuration and fit history of learned symmetry discovery (dissertation §6.5,
:class:`~paramsym.discovery.LearnedSymmetry`)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from paramsym.discovery.action_network import _ACTIVATIONS
from paramsym.discovery.learned_losses import TERMS
from paramsym.errors import InvalidArgumentError

MAX_NETWORK_ENTRIES = 100_000_000
"""Largest first layer (inputs × width) an action network may have: the vec(g) input has P²
entries, so the method is for small P (the dissertation's largest model has P = 28)."""

DATA_DEPENDENT_WEIGHTS: dict[str, float] = {
    "gamma_invariance": 1.0,
    "gamma_identity": 10.0,
    "gamma_associativity": 1.0,
    "gamma_norm": 10.0,
    "gamma_orthogonality": 1.0,
    "gamma_sparsity": 0.1,
}
"""The weights of the data-dependent experiments (§6.5.4; γ₃ unstated, 1 here), as keyword
arguments of :class:`LearnedSymmetryConfig`."""


@dataclass(frozen=True)
class LearnedSymmetryConfig:
    """Settings of :class:`LearnedSymmetry` (§6.5; values the text leaves open are marked).

    Attributes:
        generators: k, the number of generators h_i ∈ gl(P) (one in §6.5.3, eight in §6.5.5).
        action: ``"residual"`` (default): a(g, θ, X) = gθ + MLP(vec(g), θ, vec(X)), or
            ``"mlp"``, the text's bare MLP a(g, θ, X) = MLP(vec(g), θ, vec(X)), where the
            learned h is not identifiable (see the module docstring for the measurements).
        hidden: hidden widths of the action MLP ((128, 128, 128) in §6.5.3 and §6.5.5).
        activation: the MLP's activation (unstated; SiLU: smooth, so the JVPs of Thm 6.3.1 and
            6.3.2 exist, and not saturating). One of ``silu, tanh, sigmoid, softplus, gelu,
            elu, leaky_relu, relu``.
        gamma_invariance: γ₁ (10 in §6.5.3, 1 in §6.5.4).
        gamma_identity: γ₂ (1 in §6.5.3, 10 in §6.5.4).
        gamma_associativity: γ₃ (never stated; 1, the weight of the identity axiom it extends).
        gamma_norm: γ₄, the weight of |β − ‖v‖| (1 in §6.5.3, 10 in §6.5.4).
        gamma_orthogonality: γ₅ (1 in both).
        gamma_sparsity: γ₆ (0.1 in both). The defaults are §6.5.3's weights;
            :data:`DATA_DEPENDENT_WEIGHTS` holds §6.5.4's.
        beta: β, the target length of each v_i (unstated; 1: the length of a unit-Frobenius
            linear generator's vector field hθ at θ ~ N(0, I), E‖hθ‖² = ‖h‖_F²).
        lr: Adam learning rate (10⁻³ in §6.5; the optimiser is named only in §6.5.5).
        lr_generators: a separate learning rate for h (``None``: ``lr``).
        schedule: ``"cosine"`` (default; decays the rate to 0 over each :meth:`fit` call,
            removing the oscillation that the |·| of the invariance term leaves in h) or
            ``"constant"`` (unstated in the text).
        epochs: passes over a fixed sample set, or groups of ``steps_per_epoch`` batches from a
            sampler (unstated; 100 × 20 batches = §6.5.5's 2000 steps).
        steps_per_epoch: batches per epoch when samples come from a sampler.
        batch_size: samples (θ, X, Y) per step (unstated; 100, so 2000 samples are 20 steps).
        seed: seeds the initialisation and the sampling (``None``: torch's global generator).
        action_sees_data: whether X is an input of the action (a data-dependent action).
        init_scale: expected ‖h_i‖_F at initialisation (entries N(0, (init_scale/P)²));
            small (0.01) so that the objective rather than the random start picks h.
        grad_clip: clip the gradient norm of each step to this (``None``: no clipping).
        orthogonality: what γ₅'s term makes orthogonal: ``"generators"`` (the text's
            |cos(h_i, h_j)|) or ``"fields"`` (E|cos(v_i, v_j)| of the vector fields, not in the
            text: a learned action can map orthogonal h_i onto one field). Measured on the
            §6.5.4 sigmoid net (3 generators, 320 steps): with ``"generators"`` the three
            fields are one near-constant translation (mean |cos(v_i, v_j)| 0.93) whose median
            |cos(∇ℓ, v)| is 0.12; with ``"fields"`` they are orthogonal (0.004) but 0.19, as
            random directions (0.19): the action had found one approximate symmetry, not three.
    """

    generators: int = 1
    action: Literal["mlp", "residual"] = "residual"
    hidden: tuple[int, ...] = (128, 128, 128)
    activation: str = "silu"
    gamma_invariance: float = 10.0
    gamma_identity: float = 1.0
    gamma_associativity: float = 1.0
    gamma_norm: float = 1.0
    gamma_orthogonality: float = 1.0
    gamma_sparsity: float = 0.1
    beta: float = 1.0
    lr: float = 1e-3
    lr_generators: float | None = None
    schedule: Literal["constant", "cosine"] = "cosine"
    epochs: int = 100
    steps_per_epoch: int = 20
    batch_size: int = 100
    seed: int | None = 0
    action_sees_data: bool = True
    init_scale: float = 0.01
    grad_clip: float | None = None
    orthogonality: Literal["generators", "fields"] = "generators"

    def __post_init__(self) -> None:
        name = "LearnedSymmetryConfig"
        for key in ("generators", "epochs", "steps_per_epoch", "batch_size"):
            value = getattr(self, key)
            if isinstance(value, bool) or int(value) != value or value < 1:
                raise InvalidArgumentError(f"{name}.{key} must be an integer ≥ 1, got {value!r}")
        if any(int(w) != w or w < 1 for w in self.hidden):
            raise InvalidArgumentError(
                f"{name}.hidden must be positive integer widths, got {self.hidden!r}"
            )
        if self.action not in ("mlp", "residual"):
            raise InvalidArgumentError(
                f"{name}.action must be 'mlp' or 'residual', got {self.action!r}"
            )
        if self.orthogonality not in ("generators", "fields"):
            raise InvalidArgumentError(
                f"{name}.orthogonality must be 'generators' or 'fields', got {self.orthogonality!r}"
            )
        if self.schedule not in ("constant", "cosine"):
            raise InvalidArgumentError(
                f"{name}.schedule must be 'constant' or 'cosine', got {self.schedule!r}"
            )
        if self.activation not in _ACTIVATIONS:
            raise InvalidArgumentError(
                f"{name}.activation must be one of {sorted(_ACTIVATIONS)}, got {self.activation!r}"
            )
        for key in self.weight_names():
            value = float(getattr(self, key))
            if not (math.isfinite(value) and value >= 0):
                raise InvalidArgumentError(
                    f"{name}.{key} must be a finite weight ≥ 0 (objective 6.3 uses γ_i > 0; "
                    f"0 switches the term off), got {value!r}"
                )
        for key in ("beta", "lr", "init_scale"):
            value = float(getattr(self, key))
            if not (math.isfinite(value) and value > 0):
                raise InvalidArgumentError(f"{name}.{key} must be finite and > 0, got {value!r}")
        if self.lr_generators is not None and not (
            math.isfinite(self.lr_generators) and self.lr_generators > 0
        ):
            raise InvalidArgumentError(
                f"{name}.lr_generators must be finite and > 0 or None, got {self.lr_generators!r}"
            )
        if self.grad_clip is not None and not self.grad_clip > 0:
            raise InvalidArgumentError(
                f"{name}.grad_clip must be > 0 or None, got {self.grad_clip}"
            )

    @staticmethod
    def weight_names() -> tuple[str, ...]:
        """The names of γ₁…γ₆, in the order of :data:`~paramsym.discovery.learned_losses.TERMS`."""
        return tuple(f"gamma_{term}" for term in TERMS)

    @property
    def weights(self) -> tuple[float, ...]:
        """(γ₁, …, γ₆) in the order of the terms."""
        return tuple(float(getattr(self, key)) for key in self.weight_names())


@dataclass
class FitHistory:
    """Per-epoch means of each term of objective (6.3) and of the weighted total, appended as
    epochs finish (so an interrupted :meth:`LearnedSymmetry.fit` keeps the finished ones)."""

    invariance: list[float] = field(default_factory=list)
    identity: list[float] = field(default_factory=list)
    associativity: list[float] = field(default_factory=list)
    norm: list[float] = field(default_factory=list)
    orthogonality: list[float] = field(default_factory=list)
    sparsity: list[float] = field(default_factory=list)
    total: list[float] = field(default_factory=list)
    steps: int = 0

    @property
    def epochs(self) -> int:
        """The number of finished epochs."""
        return len(self.total)

    def record(self, values: Mapping[str, float]) -> None:
        """Append one epoch's means (keys: the six terms and ``"total"``)."""
        for key in (*TERMS, "total"):
            getattr(self, key).append(float(values[key]))

    def last(self) -> dict[str, float]:
        """The last finished epoch's means (empty before the first)."""
        if not self.total:
            return {}
        return {key: getattr(self, key)[-1] for key in (*TERMS, "total")}

    def to_dict(self) -> dict[str, Any]:
        """Plain numbers, for JSON."""
        return asdict(self)
