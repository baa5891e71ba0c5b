"""Learning to teleport (dissertation §5.5, Algorithm 3, Fig 5.12).

A meta-optimiser in the style of learning-to-learn (Andrychowicz et al. 2016, the
dissertation's [9]) that learns, from the gradient ∇_t, both a local update f_t and a group
element g_t, and moves the parameters by (§5.5)

    [f_t, h1_{t+1}] = m₁(∇_t, h1_t; φ₁),   [g_t, h2_{t+1}] = m₂(∇_t, h2_t; φ₂),
    w_{t+1} = g_t · (w_t + f_t).

g_t acts through a data-dependent *batch action* of GL(h) on each hidden layer pair
``U σ(V h + b)`` (:class:`~paramsym.symmetry.InverseActivationGL`, Eq. 4.13, or
:class:`~paramsym.symmetry.PseudoInverseGL`, Eq. 4.16), which keeps the loss on the batch
exactly (to rounding) where the action is exact on it. The meta-optimiser is trained by
truncated back-propagation through unrolled steps: every ``unroll`` steps, the accumulated loss
Σ_{i=t−t_unroll}^{t} L(w_i) is back-propagated into φ₁, φ₂ and the unroll is cut (Algorithm 3).

Methods of Fig 5.12 (:data:`METHODS`): ``"LSTM(update,tele)"`` (the proposal),
``"LSTM(update)"`` (g_t = I), ``"LSTM(lr,tele)"`` (a learned scalar step size η_t with
f_t = −η_t ∇_t, plus g_t) and ``"GD"`` (f_t = −η∇_t, η = 3·10⁻⁴ in the text).

Choices against the text and the authors' public code (notes 001b §4, §9.12):

- m₂ is one 2-layer LSTM per layer pair, fed the concatenated flattened gradients of the
  pair's parameters; a linear head gives T ∈ gl(h), rescaled to ‖T‖_F = 0.01 (authors' code).
  g_t = I + T (``group_map="first_order"``, the authors' first-order element) or exp(T); unlike
  the authors' code (which uses I − T for g⁻¹), the action uses the exact inverse, so g_t
  really is a group element and the batch loss is kept.
- m₁ is coordinate-wise by default (one small LSTM shared by all coordinates, Andrychowicz et
  al.), so it does not depend on the model's size; ``update_input="full"`` is the authors'
  LSTM on the whole flattened gradient. Raw gradients are the input (text and code);
  ``preprocess="log_sign"`` is Andrychowicz et al.'s (log|∇|/p, sign ∇) encoding.
- Meta learning rates: the text gives 10⁻⁴ for m₁ and 10⁻³ for m₂; the code swaps them. The
  defaults follow the text. The gradient fed to the LSTMs is detached (no second derivatives,
  as in Andrychowicz et al.) unless ``second_order=True``.
- LSTM(lr, tele): a hidden-size-20 LSTM on the full gradient whose head maps to η_t in
  [10⁻⁷, 5·10⁻³] (the code's clamp range) through a log-space sigmoid, so η_t stays trainable
  at the ends of the range.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any, Literal, cast

import torch
from torch import Tensor, nn

from paramsym.core.params import Params, functional_call
from paramsym.errors import InvalidArgumentError, NonFiniteError
from paramsym.symmetry.base import Symmetry
from paramsym.symmetry.nonlinear import DataDependentGL
from paramsym.teleportation.learned_tasks import (
    Batch,
    LearnedRun,
    MetaTask,
    MetaTrainResult,
    batch_actions,
)

UpdateRule = Literal["lstm", "lr", "gd"]
LossFn = Callable[[Tensor, Tensor], Tensor]
LSTMState = tuple[Tensor, Tensor] | None

METHODS: dict[str, tuple[UpdateRule, bool]] = {
    "LSTM(update,tele)": ("lstm", True),
    "LSTM(update)": ("lstm", False),
    "LSTM(lr,tele)": ("lr", True),
    "GD": ("gd", False),
}
"""The four methods of Fig 5.12 as ``(update, teleport)`` arguments of
:class:`LearnedTeleporter`."""


@dataclass(frozen=True)
class LearnedTeleportConfig:
    """Architecture and training settings of :class:`LearnedTeleporter` (§5.5 defaults).

    Attributes:
        hidden: hidden size of the update and teleport LSTMs (300 in §5.5).
        layers: LSTM layers (2 in §5.5).
        lr_hidden: hidden size of the step-size LSTM of LSTM(lr, tele) (20, authors' code).
        update_input: ``"coordinatewise"`` (one LSTM shared by all coordinates) or ``"full"``
            (one LSTM on the whole flattened gradient, the authors' code).
        update_scale: f_t = update_scale · head output (0.1 in Andrychowicz et al.).
        update_clamp: |f_t| is clamped to this (10⁷ in the authors' code).
        preprocess: gradient encoding, ``"none"`` (text and code) or ``"log_sign"``.
        teleport_norm: ‖T‖_F of the teleport generator (0.01, authors' code).
        group_map: T ↦ g, ``"first_order"`` (I + T) or ``"exp"`` (exp T).
        action: the batch action per layer pair: ``"auto"`` (Eq. 4.13 where σ is invertible,
            else Eq. 4.16), ``"inverse"`` (Eq. 4.13) or ``"pinv"`` (Eq. 4.16).
        gd_lr: the GD step size (3·10⁻⁴ in §5.5).
        lr_range: the range of the learned step size of LSTM(lr, tele).
        meta_lr_update: Adam learning rate of m₁ (and of the step-size LSTM), 10⁻⁴ in the text.
        meta_lr_teleport: Adam learning rate of m₂, 10⁻³ in the text.
        meta_grad_clip: clip the meta-gradient's norm to this (``None``: no clipping).
        second_order: back-propagate through the gradients fed to the LSTMs.
        seed: seed of the LSTMs' initialisation (``None``: the global generator).
    """

    hidden: int = 300
    layers: int = 2
    lr_hidden: int = 20
    update_input: Literal["coordinatewise", "full"] = "coordinatewise"
    update_scale: float = 0.1
    update_clamp: float = 1e7
    preprocess: Literal["none", "log_sign"] = "none"
    teleport_norm: float = 0.01
    group_map: Literal["first_order", "exp"] = "first_order"
    action: Literal["auto", "inverse", "pinv"] = "auto"
    gd_lr: float = 3e-4
    lr_range: tuple[float, float] = (1e-7, 5e-3)
    meta_lr_update: float = 1e-4
    meta_lr_teleport: float = 1e-3
    meta_grad_clip: float | None = None
    second_order: bool = False
    seed: int | None = 0

    def __post_init__(self) -> None:
        for name in ("hidden", "layers", "lr_hidden"):
            if int(getattr(self, name)) < 1:
                raise InvalidArgumentError(f"LearnedTeleportConfig.{name} must be ≥ 1")
        for name in ("update_scale", "update_clamp", "teleport_norm", "gd_lr"):
            if not float(getattr(self, name)) > 0:
                raise InvalidArgumentError(f"LearnedTeleportConfig.{name} must be > 0")
        for name in ("meta_lr_update", "meta_lr_teleport"):
            if not float(getattr(self, name)) > 0:
                raise InvalidArgumentError(f"LearnedTeleportConfig.{name} must be > 0")
        lo, hi = self.lr_range
        if not 0 < lo < hi:
            raise InvalidArgumentError(
                f"LearnedTeleportConfig.lr_range must satisfy 0 < low < high, got {self.lr_range}"
            )
        choices = {
            "update_input": ("coordinatewise", "full"),
            "preprocess": ("none", "log_sign"),
            "group_map": ("first_order", "exp"),
            "action": ("auto", "inverse", "pinv"),
        }
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                raise InvalidArgumentError(
                    f"LearnedTeleportConfig.{name} must be one of {allowed}, "
                    f"got {getattr(self, name)!r}"
                )


@dataclass
class MetaState:
    """The LSTMs' hidden states (``None``: zeros, at the start of a trajectory)."""

    update: LSTMState = None
    lr: LSTMState = None
    teleport: dict[str, LSTMState] = field(default_factory=dict)

    def detach(self) -> MetaState:
        """The same state cut from the graph (the truncation of Algorithm 3)."""

        def cut(s: LSTMState) -> LSTMState:
            return None if s is None else (s[0].detach(), s[1].detach())

        return MetaState(
            cut(self.update), cut(self.lr), {k: cut(v) for k, v in self.teleport.items()}
        )


@dataclass
class LearnedStep:
    """One step w ← g·(w + f): the new parameters and state, the loss L(w) at the input
    parameters, the update f (by parameter name), the moved point w + f before the teleport,
    and the group element g of each layer pair (by site; empty without teleport)."""

    params: Params
    state: MetaState
    loss: Tensor
    update: Params
    moved: Params
    elements: dict[str, Tensor]


def _lstm_step(lstm: nn.LSTM, inputs: Tensor, state: LSTMState) -> tuple[Tensor, LSTMState]:
    """One time step of ``lstm`` on ``inputs`` of shape (batch, features)."""
    out, new = lstm(inputs.unsqueeze(0), state)
    return out[0], new


class LearnedTeleporter(nn.Module):
    """A learned optimiser w ← g·(w + f) (Algorithm 3, §5.5) bound to one model's layout.

    Args:
        model: the network (its parameter names and shapes; not moved or registered here).
        loss_fn: ``loss_fn(output, target) -> scalar`` (§5.5: ‖Y − W₂σ(W₁X)‖; the authors'
            code uses 0.5‖·‖_F²).
        update: ``"lstm"`` (learned f_t, m₁), ``"lr"`` (f_t = −η_t∇_t with a learned η_t) or
            ``"gd"`` (f_t = −η∇_t with ``config.gd_lr``).
        teleport: learn g_t (m₂) per layer pair; ``False`` means g_t = I.
        symmetries: the batch actions to use (default: found on ``model``, see
            :func:`batch_actions`).
        config: :class:`LearnedTeleportConfig`.

    The trainable state (``state_dict``) holds the LSTMs and heads only; a state dict saved
    from one teleporter loads into another built with the same model layout and arguments.
    :meth:`from_method` builds the four methods of Fig 5.12 by name.
    """

    def __init__(
        self,
        model: nn.Module,
        loss_fn: LossFn,
        *,
        update: UpdateRule = "lstm",
        teleport: bool = True,
        symmetries: Sequence[Symmetry] | None = None,
        config: LearnedTeleportConfig | None = None,
    ) -> None:
        super().__init__()
        if not isinstance(model, nn.Module):
            raise InvalidArgumentError(
                f"LearnedTeleporter: model must be an nn.Module, got {type(model).__name__}"
            )
        if update not in ("lstm", "lr", "gd"):
            raise InvalidArgumentError(
                f"LearnedTeleporter: update must be 'lstm', 'lr' or 'gd', got {update!r}"
            )
        if not callable(loss_fn):
            raise InvalidArgumentError("LearnedTeleporter: loss_fn must be callable")
        self.config = config or LearnedTeleportConfig()
        self.update_rule: UpdateRule = update
        self.teleports = bool(teleport)
        object.__setattr__(self, "_model", model)  # not a submodule: not in state_dict
        self.loss_fn = loss_fn
        self.shapes = {n: p.shape for n, p in model.named_parameters() if p.requires_grad}
        if not self.shapes:
            raise InvalidArgumentError("LearnedTeleporter: the model has no trainable parameter")
        self.dim = sum(math.prod(s) for s in self.shapes.values())
        self.actions = batch_actions(model, symmetries, self.config.action) if teleport else []
        self.sites = [a.site for a in self.actions]
        cfg = self.config
        k = 2 if cfg.preprocess == "log_sign" else 1
        dtype = next(iter(model.parameters())).dtype
        rng = torch.random.fork_rng(devices=[]) if cfg.seed is not None else nullcontext()
        with rng:
            if cfg.seed is not None:
                torch.manual_seed(cfg.seed)
            if update == "lstm":
                width = k if cfg.update_input == "coordinatewise" else k * self.dim
                out = 1 if cfg.update_input == "coordinatewise" else self.dim
                self.update_lstm = nn.LSTM(width, cfg.hidden, cfg.layers)
                self.update_head = nn.Linear(cfg.hidden, out)
            elif update == "lr":
                self.lr_lstm = nn.LSTM(k * self.dim, cfg.lr_hidden, cfg.layers)
                self.lr_head = nn.Linear(cfg.lr_hidden, 1)
            self.teleport_lstms = nn.ModuleDict()
            self.teleport_heads = nn.ModuleDict()
            for i, a in enumerate(self.actions):
                size = sum(math.prod(self.shapes[n]) for n in a.parameter_names)
                self.teleport_lstms[f"pair{i}"] = nn.LSTM(k * size, cfg.hidden, cfg.layers)
                self.teleport_heads[f"pair{i}"] = nn.Linear(cfg.hidden, a.width * a.width)
        self.to(dtype)

    @classmethod
    def from_method(
        cls, model: nn.Module, loss_fn: LossFn, method: str, **kwargs: Any
    ) -> LearnedTeleporter:
        """One of the methods of Fig 5.12 by name (keys of :data:`METHODS`)."""
        if method not in METHODS:
            raise InvalidArgumentError(
                f"LearnedTeleporter.from_method: unknown method {method!r}; one of {list(METHODS)}"
            )
        update, teleport = METHODS[method]
        return cls(model, loss_fn, update=update, teleport=teleport, **kwargs)

    @property
    def model(self) -> nn.Module:
        """The network whose parameters this optimiser moves (held outside ``state_dict``)."""
        model: nn.Module = self.__dict__["_model"]
        return model

    # -- pieces ----------------------------------------------------------------------------
    def loss(self, params: Mapping[str, Tensor], batch: Batch) -> Tensor:
        """L(w) on ``batch``."""
        x, y = batch
        return self.loss_fn(functional_call(self.model, params, x), y)

    def _encode(self, grad: Tensor) -> Tensor:
        """Gradient entries → LSTM features, shape (n, 1) or (n, 2) (log_sign, p = 10)."""
        grad = grad.to(self._dtype())
        if self.config.preprocess == "none":
            return grad.unsqueeze(1)
        p = 10.0
        big = grad.abs() >= math.exp(-p)
        log = torch.where(big, grad.abs().clamp_min(1e-300).log() / p, -torch.ones_like(grad))
        sign = torch.where(big, grad.sign(), math.exp(p) * grad)
        return torch.stack([log, sign], dim=1)

    def _dtype(self) -> torch.dtype:
        first = next(iter(self.parameters()), None)
        return torch.get_default_dtype() if first is None else first.dtype

    def _flat(self, grads: Mapping[str, Tensor], names: Sequence[str]) -> Tensor:
        return torch.cat([grads[n].reshape(-1) for n in names])

    def _split(self, flat: Tensor) -> Params:
        out, i = {}, 0
        for n, shape in self.shapes.items():
            size = math.prod(shape)
            out[n] = flat[i : i + size].reshape(shape)
            i += size
        return out

    def _update(
        self, grads: Mapping[str, Tensor], state: MetaState
    ) -> tuple[Params, LSTMState, LSTMState]:
        """f_t (by name) and the new update / step-size LSTM states."""
        cfg = self.config
        flat = self._flat(grads, list(self.shapes))
        ref = flat
        if self.update_rule == "gd":
            return self._split(-cfg.gd_lr * flat), None, None
        features = self._encode(flat)
        if self.update_rule == "lr":
            out, lr_state = _lstm_step(self.lr_lstm, features.reshape(1, -1), state.lr)
            lo, hi = (math.log(v) for v in cfg.lr_range)
            eta = torch.exp(lo + (hi - lo) * torch.sigmoid(self.lr_head(out)[0, 0]))
            return self._split(-eta.to(ref.dtype) * flat), None, lr_state
        if cfg.update_input == "coordinatewise":
            out, upd_state = _lstm_step(self.update_lstm, features, state.update)
            f = self.update_head(out)[:, 0]
        else:
            out, upd_state = _lstm_step(self.update_lstm, features.reshape(1, -1), state.update)
            f = self.update_head(out)[0]
        f = (cfg.update_scale * f).clamp(-cfg.update_clamp, cfg.update_clamp)
        return self._split(f.to(ref.dtype)), upd_state, None

    def _element(
        self, i: int, action: DataDependentGL, grads: Mapping[str, Tensor], state: LSTMState
    ) -> tuple[Tensor, LSTMState]:
        """g_t of layer pair ``i``: T from the head, ‖T‖_F = teleport_norm, g = I + T or e^T."""
        cfg = self.config
        features = self._encode(self._flat(grads, action.parameter_names)).reshape(1, -1)
        lstm = cast(nn.LSTM, self.teleport_lstms[f"pair{i}"])
        out, new = _lstm_step(lstm, features, state)
        raw = self.teleport_heads[f"pair{i}"](out)[0]
        ref = grads[action.pair.incoming_weight]
        raw = raw.to(ref.dtype)
        t = (cfg.teleport_norm * raw / torch.linalg.vector_norm(raw).clamp_min(1e-30)).reshape(
            action.width, action.width
        )
        eye = torch.eye(action.width, dtype=t.dtype, device=t.device)
        return (eye + t if cfg.group_map == "first_order" else torch.linalg.matrix_exp(t)), new

    def initial_state(self) -> MetaState:
        """The state at the start of a trajectory (zero hidden states)."""
        return MetaState()

    # -- the optimiser ---------------------------------------------------------------------
    def step(
        self, params: Mapping[str, Tensor], batch: Batch, state: MetaState | None = None
    ) -> LearnedStep:
        """One step of Algorithm 3: ∇_t at ``params``, f_t and g_t from the LSTMs, and
        w ← g_t·(w + f_t) through the batch action on ``batch``. Differentiable in the
        LSTMs' parameters (and in ``params`` where they carry a graph) under grad mode."""
        state = state or self.initial_state()
        names = list(self.shapes)
        missing = [n for n in names if n not in params]
        if missing:
            raise InvalidArgumentError(f"LearnedTeleporter.step: params lacks '{missing[0]}'")
        with torch.enable_grad():
            tracked = dict(params)
            for n in names:
                if not tracked[n].requires_grad:
                    tracked[n] = tracked[n].detach().requires_grad_(True)
            loss = self.loss(tracked, batch)
            raw = torch.autograd.grad(
                loss,
                [tracked[n] for n in names],
                retain_graph=True,
                create_graph=self.config.second_order,
                allow_unused=True,
            )
        grads = {
            n: torch.zeros_like(tracked[n]) if g is None else g
            for n, g in zip(names, raw, strict=True)
        }
        if not self.config.second_order:
            grads = {n: g.detach() for n, g in grads.items()}
        f, upd_state, lr_state = self._update(grads, state)
        moved = dict(tracked)
        for n in names:
            moved[n] = tracked[n] + f[n]
        new, elements, tele_states = dict(moved), {}, {}
        for i, action in enumerate(self.actions):
            g, tele_states[action.site] = self._element(
                i, action, grads, state.teleport.get(action.site)
            )
            new = action.act(new, g, x=batch[0])
            elements[action.site] = g
        return LearnedStep(
            params=new,
            state=MetaState(upd_state, lr_state, tele_states),
            loss=loss,
            update=f,
            moved=moved,
            elements=elements,
        )

    def run(self, params: Mapping[str, Tensor], batch: Batch, steps: int) -> LearnedRun:
        """Apply the (trained) optimiser for ``steps`` steps without meta-gradients;
        ``losses[t]`` = L(w_t), t = 0..steps."""
        if steps < 0:
            raise InvalidArgumentError(f"LearnedTeleporter.run: steps must be ≥ 0, got {steps}")
        state, losses = self.initial_state(), []
        current = {n: t.detach() for n, t in params.items()}
        with torch.no_grad():
            for _ in range(steps):
                out = self.step(current, batch, state)
                losses.append(float(out.loss))
                current = {n: t.detach() for n, t in out.params.items()}
                state = out.state.detach()
            losses.append(float(self.loss(current, batch)))
        return LearnedRun(losses, current)

    def meta_train(
        self,
        tasks: Sequence[MetaTask] | Callable[[int], MetaTask],
        *,
        num_tasks: int | None = None,
        steps: int = 100,
        unroll: int = 10,
        epochs: int = 1,
    ) -> MetaTrainResult:
        """Train the LSTMs by Algorithm 3 with truncated back-propagation through time.

        For each task (``tasks[i]``, or ``tasks(i)`` for i < ``num_tasks`` from a sampler),
        run ``steps`` steps; every ``unroll`` steps (and at the end) back-propagate the
        accumulated loss Σ L(w_i) over the window's new points into φ₁, φ₂ (one Adam step,
        with ``config.meta_lr_update`` / ``meta_lr_teleport``) and cut the graph. GD has
        nothing to learn: the result is then empty.
        """
        if steps < 1 or unroll < 1 or epochs < 1:
            raise InvalidArgumentError(
                f"meta_train: steps, unroll and epochs must be ≥ 1, got {steps}, {unroll}, {epochs}"
            )
        if callable(tasks):
            if num_tasks is None or num_tasks < 1:
                raise InvalidArgumentError("meta_train: a task sampler needs num_tasks ≥ 1")
            count, get = num_tasks, tasks
        else:
            if len(tasks) == 0:
                raise InvalidArgumentError("meta_train: no tasks")
            count, get = len(tasks), tasks.__getitem__
        result = MetaTrainResult([], [], 0)
        teleport_params = [
            p for m in (self.teleport_lstms, self.teleport_heads) for p in m.parameters()
        ]
        tele_ids = {id(p) for p in teleport_params}
        update_params = [p for p in self.parameters() if id(p) not in tele_ids]
        groups = [
            {"params": ps_, "lr": lr}
            for ps_, lr in (
                (update_params, self.config.meta_lr_update),
                (teleport_params, self.config.meta_lr_teleport),
            )
            if ps_
        ]
        if not groups:
            return result
        optimizer = torch.optim.Adam(groups)
        for _ in range(epochs):
            for i in range(count):
                task = get(i)
                params = {n: t.detach() for n, t in task.params.items()}
                state, window, fresh = self.initial_state(), [], True
                for t in range(1, steps + 1):
                    out = self.step(params, task.batch, state)
                    if not fresh:  # L at a window's (detached) start is a constant
                        window.append(out.loss)
                    fresh = False
                    params, state = out.params, out.state
                    if t % unroll == 0 or t == steps:
                        window.append(self.loss(params, task.batch))
                        meta = torch.stack(window).sum()
                        if not bool(torch.isfinite(meta)):
                            raise NonFiniteError(
                                f"meta_train: the meta-loss became {float(meta.detach())} on task "
                                f"{i} at step {t}; lower config.update_scale or the meta lrs"
                            )
                        optimizer.zero_grad()
                        meta.backward()
                        if self.config.meta_grad_clip is not None:
                            nn.utils.clip_grad_norm_(self.parameters(), self.config.meta_grad_clip)
                        optimizer.step()
                        result.meta_losses.append(float(meta.detach()))
                        result.updates += 1
                        params = {n: p.detach() for n, p in params.items()}
                        state, window, fresh = state.detach(), [], True
                result.final_losses.append(float(self.loss(params, task.batch)))
        return result
