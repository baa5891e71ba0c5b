"""The tiny transformer of ``discovery-transformer`` (dissertation §6.5.5, Fig 6.7): its flat
per-sequence loss against the module, the known GL(2) query-key and GL(4) feed-forward
generators as exact symmetries (float64), and the projection helpers against dense oracles."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from paramsym.core.params import unflatten
from paramsym.discovery import flat_loss
from paramsym.discovery.compare import orthonormal_basis
from paramsym.experiments.discovery.transformer_model import (
    NAMES,
    TinyTransformer,
    block_sizes,
    cosines,
    inside_fraction,
    known_generators,
    make_sampler,
    tangent_spaces,
    theta_std,
)
from paramsym.experiments.threads import torch_threads

F64 = torch.float64


@pytest.fixture(autouse=True)
def _one_thread():
    with torch_threads(1):
        yield


def draw(seed: int = 0, batch: int = 8) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    model = TinyTransformer()
    theta, x, y = make_sampler(model, batch, 2)(1, torch.Generator().manual_seed(seed))
    return theta[0], x[0], y[0]


def test_shapes_and_flattening_order() -> None:
    model = TinyTransformer()
    assert block_sizes(model) == {"W_Q": 4, "W_K": 4, "W_V": 4, "W1": 8, "W2": 8}
    assert tuple(block_sizes(model)) == NAMES
    assert sum(block_sizes(model).values()) == 28
    std = theta_std(model)
    assert torch.allclose(std[:12], torch.full((12,), 2**-0.5))
    assert torch.allclose(std[12:20], torch.full((8,), 2**-0.5))
    assert torch.allclose(std[20:], torch.full((8,), 0.5))
    assert model(torch.randn(3, 2, 2, dtype=F64)).shape == (3, 2, 2)


def test_module_matches_attention_written_out() -> None:
    model = TinyTransformer()
    x = torch.randn(5, 2, 2, dtype=F64)
    p = dict(model.named_parameters())
    out = torch.empty(5, 2, 2, dtype=F64)
    for b in range(5):
        q, k, v = x[b] @ p["W_Q"], x[b] @ p["W_K"], x[b] @ p["W_V"]
        for t in range(2):
            s = torch.stack([q[t] @ k[j] for j in range(2)]) / math.sqrt(2)
            w = torch.exp(s) / torch.exp(s).sum()
            z = x[b, t] + w[0] * v[0] + w[1] * v[1]
            out[b, t] = z @ p["W1"] @ p["W2"]
    assert torch.allclose(model(x), out, atol=1e-13, rtol=0)


def test_flat_loss_equals_module_loss_per_sequence() -> None:
    model = TinyTransformer()
    loss = flat_loss(model, nn.MSELoss())
    theta, x, y = draw(1)
    with torch.no_grad():
        for name, value in unflatten(theta, loss.like).items():
            getattr(model, name).copy_(value)
        expected = ((model(x) - y) ** 2).mean(dim=(1, 2))
    got = loss(theta, x, y)
    assert got.shape == (8,)
    assert torch.allclose(got, expected, atol=1e-13, rtol=1e-13)


def test_known_generators_are_exact_symmetries() -> None:
    model = TinyTransformer()
    loss = flat_loss(model, nn.MSELoss())
    known = known_generators()
    assert known.shape == (20, 28, 28)
    for seed in range(3):
        theta, x, y = draw(seed)
        for g in known:
            rate = torch.func.jvp(lambda t, x=x, y=y: loss(t, x, y), (theta,), (g @ theta,))[1]
            assert rate.abs().max() <= 1e-12
            moved = torch.linalg.matrix_exp(0.5 * g) @ theta  # a finite group element
            assert torch.allclose(loss(moved, x, y), loss(theta, x, y), atol=1e-11, rtol=1e-12)
        random = torch.randn(28, dtype=F64, generator=torch.Generator().manual_seed(seed))
        rate = torch.func.jvp(lambda t, x=x, y=y: loss(t, x, y), (theta,), (random,))[1]
        assert rate.abs().max() > 1e-2  # a random direction is no symmetry


def test_known_generators_match_matrix_actions() -> None:
    """m ∈ gl(2): (W_Q m, −W_K mᵀ); n ∈ gl(4): (W1 n, −n W2), written with matrices."""
    theta, _, _ = draw(2)
    like = {n: p.detach() for n, p in TinyTransformer().named_parameters()}
    w = unflatten(theta, like)
    known = known_generators()
    zero = {n: torch.zeros_like(t) for n, t in w.items()}
    for j in range(20):
        if j < 4:
            m = torch.zeros(2, 2, dtype=F64)
            m.view(-1)[j] = 1.0
            expected = {**zero, "W_Q": w["W_Q"] @ m, "W_K": -w["W_K"] @ m.T}
        else:
            n = torch.zeros(4, 4, dtype=F64)
            n.view(-1)[j - 4] = 1.0
            expected = {**zero, "W1": w["W1"] @ n, "W2": -n @ w["W2"]}
        field = unflatten(known[j] @ theta, like)
        for name in like:
            assert torch.allclose(field[name], expected[name], atol=1e-15)
    # 20 independent matrices, orbits of dimension 4 + 12 = 16 at a generic θ
    assert torch.linalg.matrix_rank(known.reshape(20, -1)) == 20
    assert tangent_spaces(known, theta.unsqueeze(0))[0].shape == (28, 16)


def test_projection_helpers_against_dense_oracle() -> None:
    gen = torch.Generator().manual_seed(3)
    span = torch.randn(28, 6, generator=gen, dtype=F64)
    span = torch.cat([span, span[:, :2] @ torch.randn(2, 3, generator=gen, dtype=F64)], 1)
    q = orthonormal_basis(span)
    assert q.shape == (28, 6)
    vectors = torch.randn(28, 5, generator=gen, dtype=F64)
    oracle = span @ torch.linalg.pinv(span) @ vectors  # the orthogonal projection
    expected = oracle.norm(dim=0) / vectors.norm(dim=0)
    assert torch.allclose(inside_fraction(q, vectors), expected, atol=1e-12)
    assert torch.allclose(inside_fraction(q, span), torch.ones(9, dtype=F64), atol=1e-12)
    # principal-angle cosines: σ(Q1ᵀ Q2); a shared direction has cosine 1
    other = torch.cat([span[:, :1], torch.randn(28, 3, generator=gen, dtype=F64)], 1)
    q2 = orthonormal_basis(other)
    oracle_cos = torch.linalg.svdvals(q.T @ q2)
    assert torch.allclose(cosines(q, q2), oracle_cos, atol=1e-12)
    assert abs(float(cosines(q, q2)[0]) - 1.0) < 1e-12


def test_tangent_spaces_equal_output_null_space() -> None:
    """At B = 8 the null space of θ ↦ f(X) is exactly the known orbit's tangent space."""
    model = TinyTransformer()
    loss = flat_loss(model, nn.MSELoss())
    theta, x, _ = draw(4)
    jac = torch.func.jacfwd(
        lambda t: torch.func.functional_call(model, loss.unflatten(t), (x,)).reshape(-1)
    )(theta)
    s = torch.linalg.svdvals(jac)
    assert int((s > s[0] * 1e-10).sum()) == 12
    q = tangent_spaces(known_generators(), theta.unsqueeze(0))[0]
    assert (jac @ q).abs().max() <= 1e-12
