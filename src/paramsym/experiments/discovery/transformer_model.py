"""The tiny transformer of ``discovery-transformer`` (dissertation §6.5.5, Fig 6.7), its
parameter sampler, the generators of its known symmetry algebras (GL(2) query-key and GL(4)
feed-forward) and the span measures the experiment reports."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from paramsym.discovery.compare import orthonormal_basis, principal_angles
from paramsym.discovery.learned_losses import Sampler, Samples
from paramsym.errors import InvalidArgumentError

F64 = torch.float64
NAMES = ("W_Q", "W_K", "W_V", "W1", "W2")
"""The parameters in flattening order."""


class TinyTransformer(nn.Module):
    """One single-head self-attention block with a residual connection and a linear
    feed-forward map, no biases or layer norm (§6.5.5): f(X) = (X + Attn(X)) W1 W2 with
    Attn(X) = softmax(X W_Q (X W_K)ᵀ / √d) X W_V. Input (n, T, d), output (n, T, d)."""

    def __init__(
        self, d_model: int = 2, d_ff: int = 4, theta_init: str = "fan_in", dtype: torch.dtype = F64
    ) -> None:
        super().__init__()
        if theta_init not in ("fan_in", "standard"):
            raise InvalidArgumentError(
                f"TinyTransformer: theta_init must be 'fan_in' or 'standard', got {theta_init!r}"
            )
        self.d_model, self.theta_init = d_model, theta_init
        self.W_Q = nn.Parameter(torch.empty(d_model, d_model, dtype=dtype))
        self.W_K = nn.Parameter(torch.empty(d_model, d_model, dtype=dtype))
        self.W_V = nn.Parameter(torch.empty(d_model, d_model, dtype=dtype))
        self.W1 = nn.Parameter(torch.empty(d_model, d_ff, dtype=dtype))
        self.W2 = nn.Parameter(torch.empty(d_ff, d_model, dtype=dtype))
        self.reset_parameters()  # parameters registered in the order of NAMES

    def reset_parameters(self) -> None:
        """Each weight N(0, 1/rows) (``fan_in``: rows are the inputs of x ↦ xW) or N(0, 1)."""
        with torch.no_grad():
            for weight in self.parameters():
                weight.normal_(0.0, self.std(weight.shape[0]))

    def std(self, rows: int) -> float:
        """The initial standard deviation of a weight with ``rows`` rows."""
        return rows**-0.5 if self.theta_init == "fan_in" else 1.0

    def forward(self, x: Tensor) -> Tensor:
        q, k, v = x @ self.W_Q, x @ self.W_K, x @ self.W_V
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_model)
        z = x + torch.softmax(scores, dim=-1) @ v
        return z @ self.W1 @ self.W2


def block_sizes(model: TinyTransformer) -> dict[str, int]:
    """Entries of each weight, in flattening order (the heat maps' blocks)."""
    return {name: p.numel() for name, p in model.named_parameters()}


def theta_std(model: TinyTransformer) -> Tensor:
    """The initial standard deviation of each flattened entry of θ, shape (P,)."""
    return torch.cat([torch.full((p.numel(),), model.std(p.shape[0])) for p in model.parameters()])


def make_sampler(model: TinyTransformer, batch: int, seq_len: int) -> Sampler:
    """Fresh θ (the model's initial distribution), X, Y ~ N(0, 1) of shape (batch, T, d)."""
    std = theta_std(model).to(F64)
    d = model.d_model

    def sample(count: int, generator: torch.Generator) -> Samples:
        theta = torch.randn(count, std.numel(), generator=generator, dtype=F64) * std
        x = torch.randn(count, batch, seq_len, d, generator=generator, dtype=F64)
        y = torch.randn(count, batch, seq_len, d, generator=generator, dtype=F64)
        return theta, x, y

    return sample


def known_generators(d_model: int = 2, d_ff: int = 4) -> Tensor:
    """The GL(d) query–key and GL(d_ff) feed-forward algebras as (d² + d_ff², P, P) matrices on
    the flattened θ: for each unit matrix m = E_ab ∈ gl(d), (W_Q, W_K) ↦ (W_Q m, −W_K mᵀ); for
    each n = E_ab ∈ gl(d_ff), (W1, W2) ↦ (W1 n, −n W2). Row-major vec: vec(W m) = (I ⊗ mᵀ) vec W,
    vec(W mᵀ) = (I ⊗ m) vec W, vec(n W) = (n ⊗ I) vec W."""
    dd, df = d_model * d_model, d_model * d_ff
    P = 3 * dd + 2 * df
    eye = torch.eye(d_model, dtype=F64)
    out = []
    # (size of m, start of (W_Q | W1), start of (W_K | W2), entries of each of the two blocks)
    for size, one, two, n in ((d_model, 0, dd, dd), (d_ff, 3 * dd, 3 * dd + df, df)):
        for unit in torch.eye(size * size, dtype=F64):
            m = unit.reshape(size, size)
            g = torch.zeros(P, P, dtype=F64)
            g[one : one + n, one : one + n] = torch.kron(eye, m.T.contiguous())
            second = torch.kron(eye, m) if size == d_model else torch.kron(m, eye)
            g[two : two + n, two : two + n] = -second
            out.append(g)
    return torch.stack(out)


def inside_fraction(basis: Tensor, vectors: Tensor) -> Tensor:
    """‖Π v‖ / ‖v‖ for each column v of ``vectors`` (n, k), Π the orthogonal projection onto
    the span of the orthonormal ``basis`` (n, r)."""
    return (basis.T @ vectors).norm(dim=0) / vectors.norm(dim=0).clamp_min(1e-300)


def tangent_spaces(generators: Tensor, theta: Tensor) -> list[Tensor]:
    """For each θ_s (rows of ``theta``, (S, P)), an orthonormal basis of span{G_j θ_s}."""
    fields = torch.einsum("jpq,sq->spj", generators, theta)
    return [orthonormal_basis(f) for f in fields]


def cosines(q1: Tensor, q2: Tensor) -> Tensor:
    """Cosines of the principal angles between two orthonormal bases, descending."""
    return torch.cos(principal_angles(q1, q2))
