"""Teleporting inside a training loop, with any ``torch.optim`` optimizer (dissertation §4.6,
§5.4; the integrated loop of notes 001b §2.6).

:class:`Teleporter` holds the schedule, where teleport batches come from, how many of them one
teleport uses (each with its own ascent, one after the other), and what happens to the
optimizer's state after the parameters moved:

``"keep"``
    leave every buffer as it is (the dissertation's AdaGrad runs keep the accumulator).
``"reset"``
    clear the optimizer's state for the model's parameters, as re-creating the optimizer
    does (the authors' §5.4.2 code); Adam's bias correction restarts.
``"transform"``
    move first moments (SGD/RMSprop ``momentum_buffer``, Adam ``exp_avg``, RMSprop
    ``grad_avg``) as covectors, m ↦ J⁻ᵀm, like the gradient itself (Prop 4.5.1). This is exact
    for group actions (rescalings, GL on linear layers, the test-function rotations); for
    data-dependent actions it transports through the batch-restricted action, an
    approximation off the batch (a warning says so). **Second moments** (Adam/RMSprop
    ``exp_avg_sq``, ``square_avg``, Adagrad ``sum``) are kept: they are averages of squared
    gradient *coordinates*, which a mixing action does not map to squared coordinates, so
    no transport is exact for them; keeping them is what the dissertation's AdaGrad runs do.

Use it as a callback (``tele(step)`` or ``tele.maybe_teleport()`` before computing a step's
gradient) or as a wrapper around the optimizer, whose ``zero_grad`` teleports when due and
whose ``step`` counts optimizer steps::

    tele = Teleporter(model, loss_fn, torch.optim.SGD(model.parameters(), lr=0.1),
                      schedule=Schedule.every(100), data=loader, batches_per_teleport=4)
    for x, y in loader:
        tele.zero_grad()              # teleports first when the schedule says so
        loss_fn(model(x), y).backward()
        tele.step()
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from torch import Tensor, nn

from paramsym.errors import ApproximateActionWarning, InvalidArgumentError
from paramsym.symmetry.base import Symmetry
from paramsym.teleportation.engine import TeleportConfig, TeleportResult, run_teleport
from paramsym.teleportation.objectives import Batch, LossFn
from paramsym.teleportation.schedule import Schedule
from paramsym.teleportation.selection import default_symmetries

StatePolicy = Literal["keep", "reset", "transform"]

FIRST_MOMENTS = frozenset({"momentum_buffer", "exp_avg", "grad_avg"})
"""Optimizer state entries that are running sums of gradients (covectors)."""
SECOND_MOMENTS = frozenset({"exp_avg_sq", "max_exp_avg_sq", "square_avg", "sum", "acc_delta"})
"""Optimizer state entries that are running sums of squared gradient coordinates."""


@dataclass
class TeleportEvent:
    """One scheduled teleport: the optimizer step it preceded, one result per batch, and its
    wall-clock time."""

    step: int
    results: list[TeleportResult] = field(default_factory=list)
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "seconds": self.seconds,
            "results": [r.to_dict() for r in self.results],
        }


class Teleporter:
    """Teleport ``model`` on schedule while an optimizer trains it (see the module docstring).

    Args:
        model, loss_fn: what is trained; teleports keep ``loss_fn`` on their batch.
        optimizer: the optimizer whose state ``state_policy`` manages (and whose preconditioner
            ``objective="preconditioned_grad_norm"`` reads); ``None`` for a bare callback.
        schedule: when to teleport (:class:`~paramsym.teleportation.Schedule`).
        data: where teleport batches come from: an iterable of ``(x, y)`` batches (re-iterated
            when exhausted, e.g. a ``DataLoader``) or a callable returning one batch.
        batches_per_teleport: batches per teleport, each with its own ascent.
        state_policy: ``"keep"``, ``"reset"`` or ``"transform"``.
        symmetries: default: the continuous symmetries ``ps.symmetries`` finds.
        config: the ascent's options (:class:`~paramsym.teleportation.TeleportConfig`).
    """

    def __init__(
        self,
        model: nn.Module,
        loss_fn: LossFn,
        optimizer: torch.optim.Optimizer | None = None,
        *,
        schedule: Schedule,
        data: Iterable[Batch] | Callable[[], Batch],
        batches_per_teleport: int = 1,
        state_policy: StatePolicy = "keep",
        symmetries: Sequence[Symmetry] | None = None,
        config: TeleportConfig | None = None,
    ) -> None:
        if state_policy not in ("keep", "reset", "transform"):
            raise InvalidArgumentError(
                f"Teleporter: state_policy must be 'keep', 'reset' or 'transform', got "
                f"{state_policy!r}"
            )
        if state_policy != "keep" and optimizer is None:
            raise InvalidArgumentError(
                f"Teleporter: state_policy={state_policy!r} needs the optimizer"
            )
        if batches_per_teleport < 1:
            raise InvalidArgumentError(
                f"Teleporter: batches_per_teleport must be >= 1, got {batches_per_teleport}"
            )
        if not (callable(data) or isinstance(data, Iterable)):
            raise InvalidArgumentError(
                "Teleporter: data must be an iterable of (x, y) batches or a callable returning "
                f"one, got {type(data).__name__}"
            )
        self.model, self.loss_fn, self.optimizer = model, loss_fn, optimizer
        self.schedule, self.data = schedule, data
        self.batches_per_teleport = int(batches_per_teleport)
        self.state_policy: StatePolicy = state_policy
        # without explicit symmetries they are found on the first teleport batch (the trace
        # of a custom forward needs an input)
        self._symmetries = list(symmetries) if symmetries is not None else None
        self.config = config or TeleportConfig()
        self.step_count = 0
        self.history: list[TeleportEvent] = []
        self._iterator: Iterator[Batch] | None = None
        self._last_teleported: int | None = None
        if state_policy == "transform" and any(s.data_dependent for s in self._symmetries or ()):
            warnings.warn(
                "Teleporter: state_policy='transform' moves momentum through data-dependent "
                "actions, which are exact only on the teleport batch; the transported momentum "
                "is an approximation (use 'keep' or 'reset' for the paper's choices)",
                ApproximateActionWarning,
                stacklevel=2,
            )

    def symmetries_for(self, batch: Batch) -> list[Symmetry]:
        """The symmetries teleports move along: those given, or the defaults of
        :func:`~paramsym.teleportation.engine.default_symmetries` found on ``batch``."""
        if self._symmetries is None:
            self._symmetries = default_symmetries(
                self.model,
                self.loss_fn,
                batch[0],
                allow_approximate=self.config.allow_approximate,
            )
        return self._symmetries

    # -- the optimizer wrapper -------------------------------------------------------------
    @property
    def param_groups(self) -> list[dict[str, Any]]:
        return self._optimizer().param_groups

    @property
    def state(self) -> Any:
        return self._optimizer().state

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Teleport if due at the current step, then clear the gradients."""
        self.maybe_teleport()
        self._optimizer().zero_grad(set_to_none=set_to_none)

    def step(self, closure: Callable[[], Tensor] | None = None) -> Tensor | None:
        """One optimizer step; counts it for the schedule."""
        loss = self._optimizer().step(closure)  # type: ignore[arg-type]
        self.step_count += 1
        return loss

    def _optimizer(self) -> torch.optim.Optimizer:
        if self.optimizer is None:
            raise InvalidArgumentError(
                "Teleporter: no optimizer was given; use it as a callback (tele(step))"
            )
        return self.optimizer

    # -- the callback ----------------------------------------------------------------------
    def __call__(self, step: int | None = None) -> TeleportEvent | None:
        return self.maybe_teleport(step)

    def maybe_teleport(self, step: int | None = None) -> TeleportEvent | None:
        """Teleport if the schedule is due at ``step`` (default: optimizer steps taken so far)
        and it has not teleported at that step yet."""
        k = self.step_count if step is None else int(step)
        if k == self._last_teleported or not self.schedule.due(k):
            return None
        return self.teleport_now(k)

    def teleport_now(self, step: int | None = None) -> TeleportEvent:
        """Teleport on ``batches_per_teleport`` batches, then apply the state policy."""
        k = self.step_count if step is None else int(step)
        start = time.perf_counter()
        event = TeleportEvent(k)
        for _ in range(self.batches_per_teleport):
            batch = self._next_batch()
            covectors, layout = self._first_moments()
            result = run_teleport(
                self.model,
                self.loss_fn,
                batch,
                self.config,
                self.symmetries_for(batch),
                optimizer=self.optimizer,
                covectors=covectors,
            )
            self._restore_first_moments(result.covectors, layout)
            event.results.append(result)
        if self.state_policy == "reset":
            self._reset_state()
        event.seconds = time.perf_counter() - start
        self.history.append(event)
        self._last_teleported = k
        return event

    # -- data ------------------------------------------------------------------------------
    def _next_batch(self) -> Batch:
        if callable(self.data) and not isinstance(self.data, Iterable):
            return self.data()
        assert isinstance(self.data, Iterable)
        for _ in range(2):
            if self._iterator is None:
                self._iterator = iter(self.data)
            try:
                return next(self._iterator)
            except StopIteration:
                self._iterator = None
        raise InvalidArgumentError("Teleporter: data yields no batches")

    # -- optimizer state -------------------------------------------------------------------
    def _named_state(self) -> list[tuple[str, dict[str, Any]]]:
        optimizer = self._optimizer()
        names = {id(p): n for n, p in self.model.named_parameters()}
        return [
            (names[id(p)], optimizer.state[p])
            for group in optimizer.param_groups
            for p in group["params"]
            if id(p) in names and p in optimizer.state
        ]

    def _first_moments(self) -> tuple[list[dict[str, Tensor]], list[str]]:
        """The first-moment buffers as covectors (one params dict per state key)."""
        if self.state_policy != "transform":
            return [], []
        by_key: dict[str, dict[str, Tensor]] = {}
        for name, state in self._named_state():
            for key, value in state.items():
                if not isinstance(value, Tensor) or value.ndim == 0:
                    continue
                if key in FIRST_MOMENTS:
                    by_key.setdefault(key, {})[name] = value
                elif key not in SECOND_MOMENTS:
                    raise InvalidArgumentError(
                        f"Teleporter: state_policy='transform' does not know how the "
                        f"{type(self.optimizer).__name__} state entry '{key}' of parameter "
                        f"'{name}' transforms; use state_policy='keep' or 'reset'"
                    )
        layout = sorted(by_key)
        return [by_key[k] for k in layout], layout

    def _restore_first_moments(self, moved: Sequence[dict[str, Tensor]], layout: list[str]) -> None:
        if not layout:
            return
        states = dict(self._named_state())
        with torch.no_grad():
            for key, covector in zip(layout, moved, strict=True):
                for name, value in covector.items():
                    states[name][key].copy_(value)

    def _reset_state(self) -> None:
        optimizer = self._optimizer()
        names = {id(p) for p in self.model.parameters()}
        for group in optimizer.param_groups:
            for p in group["params"]:
                if id(p) in names:
                    optimizer.state.pop(p, None)
