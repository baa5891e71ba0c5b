"""SymO, the symmetry-based second-order optimizer (seed 002 §3.4, Algorithm 1), for MLPs of any
depth, with or without biases, for any activation that has one of the three groups.

One step, with g the gradient in ``.grad`` (any loss, full batch or mini-batch):

1. per block type τ, the single-gradient factors ``S_τ S_τᵀ / dim τ`` with ``S_τ = Q_τᵀ g``
   (Eqs. 37–39 as corrected in notes 002 §2.5) enter an EMA with rate ``beta_h`` (Eqs. 192–194),
   bias-corrected by 1/(1 − β_hᵗ), t = 1 at the first step;
2. the factors of Σ̂^{power} (−1/2 by default) are computed block by block — the surrogate of
   Eq. 202 split into its diagonal blocks — with the damping choices of
   :class:`~paramsym.symo.factors.InverseRootConfig`;
3. θ ← θ − α_t Σ̂^{−1/2} g in Kronecker form (Eq. 206), α_t = ``lr · lr_decay^(t−1)``
   (Eq. 53; the exponent is 0 at the first step, as in the authors' code).

The P × P matrix is never formed: per step the cost is one pass over the gradient to stack it,
products of size ``n_τ × n_τ × D_τ``, and an eigendecomposition of each ``n_τ × n_τ`` factor,
independent of the hidden widths (n_τ ≤ d_0 + d_L + 1 for odd activations).

**Damping.** Λ̂ is singular early on (one gradient has rank ≤ d_1 per type). By default the
inverse root is a pseudo-inverse (eigenvalues ≤ n·eps·λ_max are dropped), which is what the
authors' code does (``pinv(sqrtm(Λ))``, ε = 0); ``damping`` adds εI, ``eigenvalue_floor``
raises small eigenvalues, ``pinv_rcond`` moves the cutoff. With ``beta_h = 0`` (or at the first
step) and the pseudo-inverse, the update of a 2-layer odd net is √d_1 times the polar factor of
the stacked gradient [G_1ᵀ; G_2] (notes 002 §2.7, tested).

**State.** Every entry is a plain tensor in the state of the first parameter: ``step``,
``second_moment.<type>``, ``inverse_root.<type>`` and, with ``center=True``, ``mean``; so
``state_dict()``/``load_state_dict()`` round-trip, and ``ps.Teleporter`` can keep or reset it
(``state_policy="transform"`` does not apply: these are not per-coordinate moments).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor, nn

from paramsym.core.params import Params, check_finite
from paramsym.errors import InvalidArgumentError
from paramsym.symo.closure import evaluate_closure
from paramsym.symo.estimation import centered
from paramsym.symo.factors import Factors, InverseRootConfig
from paramsym.symo.layout import GroupChoice
from paramsym.symo.structure import CurvatureStructure


class SymO(torch.optim.Optimizer):
    """The symmetry-based optimizer (module docstring): θ ← θ − α_t Σ̂^{−1/2} ∇L.

    Args:
        model: an MLP (``nn.Sequential`` of ``nn.Linear`` layers and one activation module
            between consecutive layers; see :meth:`~paramsym.symo.MLPLayout.from_model`). Its
            parameters are the ones optimized.
        lr: α_0.
        lr_decay: β of the schedule α_t = α_0 β^t (1 = constant).
        beta_h: EMA rate of the factors (Eqs. 192–194), in [0, 1).
        damping: ε added to the curvature, Σ̂ + εI.
        power: the exponent of Σ̂ (−1/2 in the paper; −1 gives a Newton-like step).
        eigenvalue_floor: eigenvalues of Σ̂ + εI below this are raised to it.
        pinv_rcond: the relative pseudo-inverse cutoff (``None``: n·eps of the dtype).
        center: precondition with the covariance E ggᵀ − μμᵀ (μ the invariant part of the
            running mean gradient) instead of the second moment. Off by default, as in the paper's
            runs; only the trivial block (e.g. the last bias) changes.
        inverse_every: recompute Σ̂^{power} every this many steps (1 = every step, the
            paper); the factors are updated every step.
        group: ``"auto"`` or the group per hidden layer (see
            :class:`~paramsym.symo.CurvatureStructure`).
        structure: a prebuilt structure for ``model`` (overrides ``group``).

    >>> import torch, paramsym as ps
    >>> model = ps.mlp([4, 8, 3], "tanh", bias=False, seed=0)
    >>> from paramsym.symo import SymO
    >>> opt = SymO(model, lr=0.05, lr_decay=0.95, beta_h=0.95)
    >>> x, y = torch.randn(32, 4), torch.randn(32, 3)
    >>> for _ in range(3):
    ...     opt.zero_grad()
    ...     loss = torch.nn.functional.mse_loss(model(x), y)
    ...     loss.backward()
    ...     opt.step()
    >>> sorted(opt.state_dict()["state"][0])
    ['inverse_root.def1', 'second_moment.def1', 'step']
    """

    def __init__(
        self,
        model: nn.Module,
        lr: float = 0.05,
        lr_decay: float = 1.0,
        beta_h: float = 0.95,
        damping: float = 0.0,
        *,
        power: float = -0.5,
        eigenvalue_floor: float = 0.0,
        pinv_rcond: float | None = None,
        center: bool = False,
        inverse_every: int = 1,
        group: GroupChoice | Sequence[GroupChoice] = "auto",
        structure: CurvatureStructure | None = None,
    ) -> None:
        if not isinstance(model, nn.Module):
            raise InvalidArgumentError(
                f"SymO: the first argument is the model (an nn.Module), got "
                f"{type(model).__name__}; SymO needs the layer structure, not only parameters"
            )
        _check_hyperparameters(lr, lr_decay, beta_h, inverse_every)
        InverseRootConfig(power, damping, eigenvalue_floor, pinv_rcond)  # validates
        self.structure = structure or CurvatureStructure.from_model(model, group)
        named = dict(model.named_parameters())
        self._names = self.structure.layout.parameter_names
        missing = [n for n in self._names if n not in named]
        if missing or len(named) != len(self._names):
            raise InvalidArgumentError(
                f"SymO: the structure's parameters {list(self._names)} do not match the model's "
                f"{list(named)}"
            )
        params = [named[n] for n in self._names]
        defaults: dict[str, Any] = {
            "lr": lr,
            "lr_decay": lr_decay,
            "beta_h": beta_h,
            "damping": damping,
            "power": power,
            "eigenvalue_floor": eigenvalue_floor,
            "pinv_rcond": pinv_rcond,
            "center": center,
            "inverse_every": inverse_every,
        }
        super().__init__(params, defaults)

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        if getattr(self, "param_groups", None):
            raise InvalidArgumentError(
                "SymO: all of the model's parameters form one group (the curvature couples "
                "layers); add_param_group is not supported"
            )
        super().add_param_group(param_group)

    # -- reading the state -----------------------------------------------------------------
    @property
    def _state(self) -> dict[str, Any]:
        return self.state[self.param_groups[0]["params"][0]]

    @property
    def steps_taken(self) -> int:
        """How many steps were taken (t after the last step)."""
        step = self._state.get("step")
        return 0 if step is None else int(step)

    def learning_rate(self) -> float:
        """α_t of the next step: ``lr · lr_decay^t`` with t = steps taken so far."""
        group = self.param_groups[0]
        return float(group["lr"] * group["lr_decay"] ** self.steps_taken)

    def curvature(self) -> Factors:
        """The current bias-corrected curvature estimate Σ̂ (factors)."""
        if self.steps_taken == 0:
            raise InvalidArgumentError("SymO.curvature: no step has been taken yet")
        group = self.param_groups[0]
        state = self._state
        correction = 1.0 - group["beta_h"] ** self.steps_taken
        second = Factors(
            self.structure,
            {k: state[f"second_moment.{k}"] / correction for k in self.structure.keys},
        )
        if group["center"] and "mean" in state:
            return centered(second, state["mean"] / correction)
        return second

    def preconditioner(self) -> Factors:
        """The factors of the Σ̂^{power} used by the last step."""
        if self.steps_taken == 0:
            raise InvalidArgumentError("SymO.preconditioner: no step has been taken yet")
        state = self._state
        return Factors(self.structure, {k: state[f"inverse_root.{k}"] for k in self.structure.keys})

    # -- the step --------------------------------------------------------------------------
    @torch.no_grad()
    def step(self, closure: Callable[[], Tensor] | None = None) -> Tensor | None:  # type: ignore[override]
        """One SymO update from the gradients in ``.grad`` (after ``closure()`` if given,
        which must zero the gradients, compute the loss, call ``backward`` and return it)."""
        loss = evaluate_closure(closure)
        group = self.param_groups[0]
        grads = self._gradients(group["params"])
        structure = self.structure
        state = self._state
        step = self.steps_taken + 1
        beta = float(group["beta_h"])

        coords = structure.coordinates(grads)
        for t in structure.types:
            s = coords[t.key]
            estimate = s @ s.T / t.dim
            key = f"second_moment.{t.key}"
            if key in state:
                state[key].mul_(beta).add_(estimate, alpha=1.0 - beta)
            else:
                state[key] = estimate * (1.0 - beta)
        if group["center"] and structure.mean_dimension:
            mean = coords["trivial"][:, 0]
            if "mean" in state:
                state["mean"].mul_(beta).add_(mean, alpha=1.0 - beta)
            else:
                state["mean"] = mean * (1.0 - beta)
        state["step"] = torch.tensor(float(step))

        first_key = f"inverse_root.{structure.types[0].key}"
        if (step - 1) % int(group["inverse_every"]) == 0 or first_key not in state:
            config = InverseRootConfig(
                group["power"], group["damping"], group["eigenvalue_floor"], group["pinv_rcond"]
            )
            root = self.curvature().inverse_root(config)
            for key, block in root.blocks.items():
                state[f"inverse_root.{key}"] = block

        direction = structure.assemble(
            {t.key: state[f"inverse_root.{t.key}"] @ coords[t.key] for t in structure.types}
        )
        lr = float(group["lr"] * group["lr_decay"] ** (step - 1))
        for name, p in zip(self._names, group["params"], strict=True):
            p.add_(direction[name], alpha=-lr)
        return loss

    def _gradients(self, params: list[Tensor]) -> Params:
        grads: Params = {}
        for name, p in zip(self._names, params, strict=True):
            if p.grad is None:
                raise InvalidArgumentError(
                    f"SymO.step: parameter '{name}' has no gradient; call loss.backward() (or "
                    "pass a closure) before step(), and do not freeze single layers"
                )
            if p.grad.is_sparse:
                raise InvalidArgumentError(f"SymO.step: parameter '{name}' has a sparse gradient")
            grads[name] = p.grad
        check_finite(grads, "SymO.step: gradients")
        return grads


def _check_hyperparameters(lr: float, lr_decay: float, beta_h: float, inverse_every: int) -> None:
    if not lr > 0:
        raise InvalidArgumentError(f"SymO: lr must be > 0, got {lr}")
    if not 0 < lr_decay <= 1:
        raise InvalidArgumentError(f"SymO: lr_decay must be in (0, 1], got {lr_decay}")
    if not 0 <= beta_h < 1:
        raise InvalidArgumentError(f"SymO: beta_h must be in [0, 1), got {beta_h}")
    if int(inverse_every) != inverse_every or inverse_every < 1:
        raise InvalidArgumentError(
            f"SymO: inverse_every must be an integer >= 1, got {inverse_every}"
        )
