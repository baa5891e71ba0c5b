"""The optimizers SymO is compared with in seed 002 (Figs. 5–6, Table 2), as the authors ran
them (notes 002 §3.2): GD, Adam, and simplified K-FAC and Shampoo.

* **GD** is ``torch.optim.SGD`` without momentum; **Adam** is ``torch.optim.Adam``.
* :class:`SimpleKFAC` (Martens & Grosse 2015, simplified as in the authors' notebook): per
  linear layer, A = aᵀa/N from the layer inputs a (N × d_in, with a column of ones when the
  layer has a bias) and G = gᵀg/N from the gradients g of the *mean* loss with respect to the
  layer outputs (so G carries 1/N²); both are averaged with momentum 0.9 (the first step uses
  the raw values), damped by the *same* λ, inverted every step, and the update is
  ΔW = (G + λI)^{−1} ∇W (A + λI)^{−1}, followed by a plain step with rate α.
* :class:`SimpleShampoo` (Gupta et al. 2018, simplified): per matrix parameter, running *sums*
  L += ∇W ∇Wᵀ and R += ∇Wᵀ ∇W starting from εI, update W ← W − α L^{−1/4} ∇W R^{−1/4}; no decay,
  grafting or momentum. Vectors (biases) use full-matrix AdaGrad L^{−1/2} g (Shampoo's rule
  for order-1 tensors, exponent 1/(2k) with k = 1).

:data:`TABLE2` has the paper's hyperparameters and :func:`make_optimizer` builds any of the
five optimizers for a model.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, cast

import torch
from torch import Tensor, nn

from paramsym.errors import InvalidArgumentError, UnsupportedModuleError
from paramsym.symmetry.chain import LINEAR_TYPES
from paramsym.symo.closure import evaluate_closure
from paramsym.symo.optimizer import SymO

TABLE2: dict[str, dict[str, dict[str, float]]] = {
    "linear": {
        "gd": {"lr": 0.8},
        "adam": {"lr": 0.01},
        "kfac": {"lr": 1e-5, "damping": 1.3e-4, "momentum": 0.9},
        "shampoo": {"lr": 0.8, "epsilon": 1e-10},
        "symo": {"lr": 0.05, "lr_decay": 0.95, "beta_h": 0.95},
    },
    "tanh": {
        "gd": {"lr": 0.8},
        "adam": {"lr": 0.01},
        "kfac": {"lr": 0.006, "damping": 0.017, "momentum": 0.9},
        "shampoo": {"lr": 0.8, "epsilon": 1e-8},
        "symo": {"lr": 0.09, "lr_decay": 0.91, "beta_h": 0.95},
    },
}
"""Table 2 of seed 002: ``TABLE2[activation][optimizer]`` (Adam also uses β = (0.9, 0.999))."""


def _symmetric_power(matrix: Tensor, power: float) -> Tensor:
    """``matrix^power`` for a symmetric positive (semi)definite matrix, by eigendecomposition
    with eigenvalues clipped at the smallest positive normal number."""
    vals, vecs = torch.linalg.eigh((matrix + matrix.T) / 2)
    return (vecs * vals.clamp_min(torch.finfo(vals.dtype).tiny) ** power) @ vecs.T


class SimpleKFAC(torch.optim.Optimizer):
    """K-FAC as in the authors' notebook (module docstring): hooks on every ``nn.Linear`` of
    ``model`` record the layer inputs and output gradients of the last forward/backward.

    Args:
        model: a model whose parameters all belong to ``nn.Linear`` layers.
        lr: α. damping: λ, added to both factors. momentum: the factors' EMA rate (0.9).
    """

    def __init__(self, model: nn.Module, lr: float, damping: float, momentum: float = 0.9) -> None:
        if not lr > 0 or not damping >= 0 or not 0 <= momentum < 1:
            raise InvalidArgumentError(
                f"SimpleKFAC: need lr > 0, damping >= 0, 0 <= momentum < 1; got {lr}, "
                f"{damping}, {momentum}"
            )
        self.layers: list[nn.Linear] = [
            cast(nn.Linear, m) for m in model.modules() if isinstance(m, LINEAR_TYPES)
        ]
        owned = {id(p) for m in self.layers for p in m.parameters()}
        others = [n for n, p in model.named_parameters() if id(p) not in owned]
        if others or not self.layers:
            raise UnsupportedModuleError(
                f"SimpleKFAC: every parameter must belong to an nn.Linear layer; not: {others}"
                if others
                else "SimpleKFAC: the model has no nn.Linear layer"
            )
        params = [p for m in self.layers for p in m.parameters()]
        super().__init__(params, {"lr": lr, "damping": damping, "momentum": momentum})
        self._inputs: dict[int, Tensor] = {}
        self._output_grads: dict[int, Tensor] = {}
        self._handles = [
            layer.register_forward_hook(self._record(i)) for i, layer in enumerate(self.layers)
        ]

    def _record(self, i: int) -> Callable[..., None]:
        """Forward hook: keep the layer input, and hook the output for its gradient."""

        def hook(module: nn.Module, inputs: tuple[Tensor, ...], output: Tensor) -> None:
            if not (torch.is_grad_enabled() and output.requires_grad):
                return  # an evaluation pass (e.g. a test loss): not a training step
            self._inputs[i] = inputs[0].detach()

            def save(grad: Tensor) -> None:
                self._output_grads[i] = grad.detach()

            output.register_hook(save)

        return hook

    def remove_hooks(self) -> None:
        """Detach the optimizer from the model (it cannot step afterwards)."""
        for h in self._handles:
            h.remove()
        self._handles = []

    @torch.no_grad()
    def step(self, closure: Callable[[], Tensor] | None = None) -> Tensor | None:  # type: ignore[override]
        loss = evaluate_closure(closure)
        group = self.param_groups[0]
        lr, damping, momentum = group["lr"], group["damping"], group["momentum"]
        for i, layer in enumerate(self.layers):
            if i not in self._inputs or i not in self._output_grads:
                raise InvalidArgumentError(
                    f"SimpleKFAC.step: layer {i} ({layer}) saw no forward/backward pass; run "
                    "the model and loss.backward() before step()"
                )
            weight, bias = layer.weight, layer.bias
            if weight.grad is None:
                raise InvalidArgumentError(f"SimpleKFAC.step: layer {i} has no gradient")
            a = self._inputs[i].reshape(-1, weight.shape[1])
            g = self._output_grads[i].reshape(-1, weight.shape[0])
            grad = weight.grad
            if bias is not None:
                a = torch.cat([a, torch.ones_like(a[:, :1])], dim=1)
                if bias.grad is None:
                    raise InvalidArgumentError(f"SimpleKFAC.step: layer {i} has no bias gradient")
                grad = torch.cat([grad, bias.grad[:, None]], dim=1)
            n = a.shape[0]
            a_factor, g_factor = a.T @ a / n, g.T @ g / n
            state = self.state[weight]
            if "A" in state:
                state["A"].mul_(momentum).add_(a_factor, alpha=1 - momentum)
                state["G"].mul_(momentum).add_(g_factor, alpha=1 - momentum)
            else:
                state["A"], state["G"] = a_factor, g_factor
            eye_a = torch.eye(a.shape[1], dtype=a.dtype, device=a.device)
            eye_g = torch.eye(g.shape[1], dtype=g.dtype, device=g.device)
            update = torch.linalg.solve(state["G"] + damping * eye_g, grad)
            update = torch.linalg.solve(state["A"] + damping * eye_a, update.T).T
            weight.add_(update[:, : weight.shape[1]], alpha=-lr)
            if bias is not None:
                bias.add_(update[:, -1], alpha=-lr)
        return loss


class SimpleShampoo(torch.optim.Optimizer):
    """Shampoo with running-sum statistics initialised to εI and exponent 1/4 per side
    (module docstring).

    Args:
        params: the parameters (matrices and vectors).
        lr: α. epsilon: ε of the initial statistics εI.
    """

    def __init__(self, params: Any, lr: float, epsilon: float) -> None:
        if not lr > 0 or not epsilon > 0:
            raise InvalidArgumentError(
                f"SimpleShampoo: need lr > 0 and epsilon > 0, got {lr} and {epsilon}"
            )
        super().__init__(params, {"lr": lr, "epsilon": epsilon})

    @torch.no_grad()
    def step(self, closure: Callable[[], Tensor] | None = None) -> Tensor | None:  # type: ignore[override]
        loss = evaluate_closure(closure)
        for group in self.param_groups:
            lr, eps = group["lr"], group["epsilon"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                g = p.grad
                if g.ndim not in (1, 2):
                    raise InvalidArgumentError(
                        f"SimpleShampoo: only vectors and matrices are supported, got a "
                        f"parameter of shape {tuple(p.shape)}"
                    )
                state = self.state[p]
                if not state:
                    state["L"] = eps * torch.eye(p.shape[0], dtype=p.dtype, device=p.device)
                    if g.ndim == 2:
                        state["R"] = eps * torch.eye(p.shape[1], dtype=p.dtype, device=p.device)
                if g.ndim == 1:
                    state["L"].add_(torch.outer(g, g))
                    p.sub_(_symmetric_power(state["L"], -0.5) @ g, alpha=lr)
                    continue
                state["L"].add_(g @ g.T)
                state["R"].add_(g.T @ g)
                update = (
                    _symmetric_power(state["L"], -0.25) @ g @ _symmetric_power(state["R"], -0.25)
                )
                p.sub_(update, alpha=lr)
        return loss


OPTIMIZERS = ("gd", "adam", "kfac", "shampoo", "symo")


def make_optimizer(
    name: str,
    model: nn.Module,
    hyperparameters: Mapping[str, float] | None = None,
    **overrides: Any,
) -> torch.optim.Optimizer:
    """Build one of the five optimizers of Figs. 5–6 for ``model``.

    Args:
        name: ``"gd"``, ``"adam"``, ``"kfac"``, ``"shampoo"`` or ``"symo"``.
        hyperparameters: e.g. ``TABLE2["tanh"]["kfac"]``.
        overrides: single hyperparameters on top (``lr=...``).

    >>> import paramsym as ps
    >>> model = ps.mlp([5, 4, 3], "tanh", bias=False, seed=0)
    >>> type(make_optimizer("kfac", model, TABLE2["tanh"]["kfac"])).__name__
    'SimpleKFAC'
    """
    options = {**(hyperparameters or {}), **overrides}
    try:
        if name == "gd":
            return torch.optim.SGD(model.parameters(), lr=options["lr"])
        if name == "adam":
            return torch.optim.Adam(
                model.parameters(), lr=options["lr"], betas=options.get("betas", (0.9, 0.999))
            )
        if name == "kfac":
            return SimpleKFAC(model, **options)
        if name == "shampoo":
            return SimpleShampoo(model.parameters(), **options)
        if name == "symo":
            return SymO(model, **options)
    except (KeyError, TypeError) as err:
        raise InvalidArgumentError(
            f"make_optimizer({name!r}): bad hyperparameters {options}: {err}"
        ) from err
    raise InvalidArgumentError(
        f"make_optimizer: unknown optimizer {name!r}; use one of {OPTIMIZERS}"
    )
