"""Shared pieces of the learned-discovery experiments of §6.5 (``discovery-rescaling``,
``discovery-data-dependent``, ``discovery-curves``): the target networks, the fixed sets of
random (θ, X, Y) samples, the training call, and the measurements on a trained
:class:`~paramsym.discovery.LearnedSymmetry`.

Conventions (notes 001c §9.6, §9.7). Every network is bias-free, as the text lists only
weights; the flattened θ is PyTorch's ``named_parameters`` order, each weight row-major in
PyTorch's (out, in) layout, so θ = (vec W₁, vec W₂, …) with W₁ the first layer. One sample is
(θ, x, y) with θ ~ N(0, I_P), one data point x ~ N(0, I_n) and its label y ~ N(0, 1) (the text
says only "randomly generated"; §6.5.5 states standard normal data). The loss is the
per-point squared error (f(x) − y)² of §6.5.3.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from paramsym.discovery import (
    DATA_DEPENDENT_WEIGHTS,
    LearnedSymmetry,
    LearnedSymmetryConfig,
    flat_loss,
)
from paramsym.discovery.learned_losses import FlatLoss, Samples
from paramsym.errors import InvalidArgumentError

F64 = torch.float64

NETWORKS = ("linear", "sigmoid", "tanh")
"""The targets: the p = 2 linear net of §6.5.3 (Fig 6.3), the sigmoid 3-3-1 net (Fig 6.4) and
the tanh 2-2-2-1 net (Fig 6.5) of §6.5.4."""


def make_network(name: str, seed: int = 0) -> nn.Module:
    """The bias-free target network ``name`` (one of :data:`NETWORKS`) in float64.

    * ``linear``: x ↦ w₂ w₁ x, m = h = n = 1 (P = 2);
    * ``sigmoid``: x ↦ W₂ σ(W₁ x), W₁ ∈ R^{3×3}, W₂ ∈ R^{1×3} (P = 12);
    * ``tanh``: x ↦ W₃ tanh(W₂ tanh(W₁ x)), W₁, W₂ ∈ R^{2×2}, W₃ ∈ R^{1×2} (P = 10).

    The weights are placeholders (every sample brings its own θ); ``seed`` only fixes them.
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        if name == "linear":
            layers: list[nn.Module] = [nn.Linear(1, 1, bias=False), nn.Linear(1, 1, bias=False)]
        elif name == "sigmoid":
            layers = [nn.Linear(3, 3, bias=False), nn.Sigmoid(), nn.Linear(3, 1, bias=False)]
        elif name == "tanh":
            layers = [
                nn.Linear(2, 2, bias=False),
                nn.Tanh(),
                nn.Linear(2, 2, bias=False),
                nn.Tanh(),
                nn.Linear(2, 1, bias=False),
            ]
        else:
            raise InvalidArgumentError(f"unknown network {name!r}; choose one of {NETWORKS}")
        return nn.Sequential(*layers).to(F64)


def input_dim(model: nn.Module) -> int:
    """n, the number of inputs of the first linear layer."""
    first = next(m for m in model.modules() if isinstance(m, nn.Linear))
    return int(first.in_features)


def block_sizes(model: nn.Module) -> dict[str, int]:
    """``{"W1": entries, "W2": …}``: the weight matrices in flattening order."""
    sizes = [p.numel() for p in model.parameters() if p.requires_grad]
    return {f"W{i + 1}": size for i, size in enumerate(sizes)}


def squared_error(model: nn.Module) -> FlatLoss:
    """The per-point loss (f(x) − y)² as a function of the flattened θ."""
    return flat_loss(model, nn.MSELoss())


def sample_set(num_params: int, n_inputs: int, count: int, seed: int) -> Samples:
    """``count`` samples θ ~ N(0, I_P), x ~ N(0, I_n) (one point, shape (1, n)), y ~ N(0, 1)
    (shape (1, 1)), drawn from a generator seeded by ``seed``."""
    generator = torch.Generator().manual_seed(seed)
    theta = torch.randn(count, num_params, generator=generator, dtype=F64)
    x = torch.randn(count, 1, n_inputs, generator=generator, dtype=F64)
    y = torch.randn(count, 1, 1, generator=generator, dtype=F64)
    return theta, x, y


def data_dependent_config(
    *,
    generators: int,
    hidden: tuple[int, ...],
    lr: float,
    epochs: int,
    batch_size: int,
    seed: int,
    sees_data: bool = True,
) -> LearnedSymmetryConfig:
    """The :class:`LearnedSymmetryConfig` of §6.5.4: :data:`DATA_DEPENDENT_WEIGHTS`
    (γ₁ = 1, γ₂ = γ₄ = 10, γ₅ = 1, γ₆ = 0.1, γ₃ = 1), the residual action, and an action that
    sees the data (``sees_data=False``: the data-blind control)."""
    return LearnedSymmetryConfig(
        generators=generators,
        hidden=hidden,
        lr=lr,
        epochs=epochs,
        batch_size=batch_size,
        seed=seed,
        action_sees_data=sees_data,
        **DATA_DEPENDENT_WEIGHTS,  # type: ignore[arg-type]
    )


@dataclass
class Trained:
    """A fitted learned symmetry with what it was trained on."""

    symmetry: LearnedSymmetry
    loss: FlatLoss
    sizes: dict[str, int]
    seconds: float


def train(model: nn.Module, config: LearnedSymmetryConfig, samples: int, seed: int) -> Trained:
    """Fit a :class:`LearnedSymmetry` (float64) of ``model``'s squared error on a fixed set of
    ``samples`` random samples (the text's "2000 / 10000 training samples")."""
    loss = squared_error(model)
    symmetry = LearnedSymmetry(loss, data_dim=input_dim(model), config=config, dtype=F64)
    data = sample_set(loss.num_params, input_dim(model), samples, seed)
    start = time.perf_counter()
    symmetry.fit(data)
    return Trained(symmetry, loss, block_sizes(model), time.perf_counter() - start)


# -- measurements ----------------------------------------------------------------------------
def loss_gradients(loss: FlatLoss, theta: Tensor, x: Tensor, y: Tensor) -> Tensor:
    """∇_θ ℓ(θ_b; x_b, y_b) for each sample (one point each): (B, P)."""

    def one(t: Tensor, a: Tensor, b: Tensor) -> Tensor:
        return loss(t, a, b).sum()

    return torch.vmap(torch.func.grad(one))(theta, x, y)


def tangent_field(loss: FlatLoss, theta: Tensor, x: Tensor, y: Tensor, u: Tensor) -> Tensor:
    """A fixed direction u projected onto the tangent space of the per-point loss's level set
    at one sample: u − ⟨u, ∇ℓ⟩∇ℓ/‖∇ℓ‖², (P,). It keeps the loss to first order exactly and
    depends on the data through ∇ℓ: the data dependence that exact invariance asks of a
    vector field that moves along u."""
    grad = torch.func.grad(lambda t: loss(t, x, y).sum())(theta)
    return u - (u @ grad) * grad / (grad @ grad)


def relative_data_sensitivity(field: Tensor, jacobian: Tensor, x: Tensor) -> float:
    """‖∂v/∂X‖_F ‖X‖ / ‖v‖: the relative change of a vector field per relative change of the
    data (dimension-free; ≈ 1 when v changes on the scale of X)."""
    return float(
        torch.linalg.norm(jacobian) * torch.linalg.norm(x) / torch.linalg.vector_norm(field)
    )


def tangent_field_sensitivity(
    loss: FlatLoss, theta: Tensor, x: Tensor, y: Tensor, u: Tensor
) -> float:
    """:func:`relative_data_sensitivity` of :func:`tangent_field`."""
    field = tangent_field(loss, theta, x, y, u)
    jacobian = torch.func.jacrev(lambda d: tangent_field(loss, theta, d, y, u))(x)
    return relative_data_sensitivity(field, jacobian, x)


def gradient_cosines(grads: Tensor, v: Tensor) -> Tensor:
    """|⟨∇ℓ, v⟩| / (‖∇ℓ‖ ‖v‖) for vector fields v (m, B, P) against gradients (B, P): (m, B),
    the speed-free form of the invariance term (0: the flow keeps the loss to first order)."""
    dots = (v * grads.unsqueeze(0)).sum(-1).abs()
    norms = torch.linalg.vector_norm(v, dim=-1) * torch.linalg.vector_norm(grads, dim=-1)
    return dots / norms.clamp_min(1e-300)


def block_shares(matrix: Tensor, sizes: dict[str, int]) -> Tensor:
    """‖M[r, c]‖_F² / ‖M‖_F² for each pair of weight-matrix blocks (rows r, columns c):
    (nb, nb), summing to 1. For h_i, block (r, c) says how much W_r's change depends on W_c."""
    edges = [0]
    for size in sizes.values():
        edges.append(edges[-1] + size)
    total = float((matrix**2).sum())
    out = torch.zeros(len(sizes), len(sizes), dtype=F64)
    for r in range(len(sizes)):
        for c in range(len(sizes)):
            block = matrix[edges[r] : edges[r + 1], edges[c] : edges[c + 1]]
            out[r, c] = float((block**2).sum()) / max(total, 1e-300)
    return out


def uniform_shares(sizes: dict[str, int]) -> Tensor:
    """The block shares expected of a matrix with i.i.d. entries: n_r n_c / P²."""
    n = torch.tensor(list(sizes.values()), dtype=F64)
    return torch.outer(n, n) / float(n.sum()) ** 2


def field_jacobians(symmetry: LearnedSymmetry, theta: Tensor, x: Tensor) -> Tensor:
    """∂v_i/∂θ at one sample (θ (P,), x): (k, P, P). For a linear action v = hθ this is h; for
    the learned action it is the identifiable counterpart of h (notes §9.15): how the vector
    field's W_r component changes with W_c."""
    return torch.func.jacrev(lambda t: symmetry.infinitesimal_action(t, x))(theta).detach()


def curve_variation(
    symmetry: LearnedSymmetry, h: Tensor, theta: Tensor, x: Tensor, y: Tensor, t: Tensor
) -> Tensor:
    """|L(γ(t)) − L(θ)| along γ(t) = a_X(exp(t h), θ) for one sample: shape (T,). The
    reference is the loss at θ itself, so a drift of a(I, θ, X) from θ counts too."""
    along = symmetry.loss_along_curve(t, h, theta, x, y)
    start = symmetry.loss(theta, x, y).mean()
    return (along - start).abs()


def cosine(a: Tensor, b: Tensor) -> float:
    """Cosine of two matrices under the Frobenius inner product."""
    return float((a * b).sum() / (torch.linalg.norm(a) * torch.linalg.norm(b)).clamp_min(1e-300))


def quantiles(
    values: Tensor | list[float], qs: tuple[float, ...] = (0.25, 0.5, 0.75)
) -> list[float]:
    """Quantiles of a flat set of finite values."""
    data = torch.as_tensor(values, dtype=F64).reshape(-1)
    return [float(torch.quantile(data, q)) for q in qs]


def fmt(value: float) -> str:
    """Three significant digits, or 'nan'."""
    return "nan" if math.isnan(value) else f"{value:.3g}"
