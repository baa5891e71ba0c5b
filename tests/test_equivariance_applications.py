"""Seed 003 applications, part 1: homogeneous nets (Euler, eqs. 3-4, sharpness bound, Cor. 1) and
the last-layer curvature (eq. 7), each against dense float64 oracles (``torch.func.jacrev`` on
the flattened parameters; reverse over reverse, so ``nn.MSELoss`` works too)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F  # noqa: N812
from hypothesis import assume, given
from hypothesis import strategies as st
from torch import nn

import paramsym as ps
from helpers import randomize_
from paramsym.equivariance.homogeneous_nets import (
    euler_relation,
    homogeneity_degree,
    homogeneity_hessian,
)
from paramsym.equivariance.homogeneous_spectrum import eigen_alignment, sharpness_bound
from paramsym.equivariance.last_layer import (
    last_layer_curvature,
    last_linear_layer,
    top_versus_rest_sharpness,
)
from paramsym.errors import EquivarianceError

F64 = torch.float64
EXACT = 1e-9  # float64 identities: every residual at most this


def dense(model: nn.Module, loss_fn, batch, point=None) -> SimpleNamespace:
    """Dense oracles at θ: ∇L, H, F (N×P), f (N), ∇ℓ, ∇²ℓ (N×N), with N = n·d."""
    point = dict(point) if point is not None else ps.params_of(model)
    x, y = batch
    flat = ps.flatten(point).detach()

    def f_of(z):
        return torch.func.functional_call(model, ps.unflatten(z, point), (x,))

    def loss_of(z):
        return loss_fn(f_of(z), y)

    out = f_of(flat).detach()

    def ell(v):
        return loss_fn(v.reshape(out.shape), y)

    jac = torch.func.jacrev
    return SimpleNamespace(
        theta=flat,
        f=out.reshape(-1),
        grad=jac(loss_of)(flat),
        H=jac(jac(loss_of))(flat),
        F=jac(f_of)(flat).reshape(-1, flat.numel()),
        g_ell=jac(ell)(out.reshape(-1)),
        H_ell=jac(jac(ell))(out.reshape(-1)),
    )


def norm(t: torch.Tensor) -> float:
    return float(torch.linalg.vector_norm(t))


def assert_close(value: float, expected: float, scale: float, rtol: float = 1e-10) -> None:
    """|value − expected| ≤ rtol·scale, with scale the identity's magnitude (not the value's)."""
    assert abs(value - expected) <= rtol * scale, (value, expected, scale)


def margin_loss(kind: str):
    if kind == "logistic":
        return lambda out, z: F.softplus(-z * out).mean()
    return lambda out, z: torch.exp(-z * out).mean()


def homogeneous_problem(widths, activation, loss, n, seed):
    gen = torch.Generator().manual_seed(seed)
    if loss == "cross_entropy":
        widths = [*widths[:-1], max(widths[-1], 2)]
    model = ps.mlp(widths, activation=activation, bias=False, seed=seed, dtype=F64)
    randomize_(model, gen, std=0.9)
    x = torch.randn(n, widths[0], generator=gen, dtype=F64)
    d = widths[-1]
    if loss == "mse":
        return model, nn.MSELoss(), (x, torch.randn(n, d, generator=gen, dtype=F64))
    if loss == "cross_entropy":
        return model, nn.CrossEntropyLoss(), (x, torch.randint(0, d, (n,), generator=gen))
    signs = torch.randint(0, 2, (n, d), generator=gen).to(F64) * 2 - 1
    return model, margin_loss(loss), (x, signs)


# -- the degree ----------------------------------------------------------------------------------


def test_homogeneity_degree_of_bias_free_sequentials():
    assert homogeneity_degree(ps.mlp([3, 4, 4, 4, 2], activation="relu", bias=False)) == 4
    assert homogeneity_degree(ps.mlp([3, 2], bias=False)) == 1
    cnn = nn.Sequential(
        nn.Conv2d(1, 2, 3, bias=False),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Sequential(nn.Flatten(), nn.Linear(2, 3, bias=False)),
    )
    assert homogeneity_degree(cnn) == 2
    model = ps.mlp([3, 4, 2], activation="relu", bias=False)
    model[0].weight.requires_grad_(False)  # a frozen layer does not scale with θ
    assert homogeneity_degree(model) == 1


@pytest.mark.parametrize(
    ("model", "match"),
    [
        (ps.mlp([3, 4, 2], activation="relu", bias=True), "layer '0'.*has a bias.*degree="),
        (ps.mlp([3, 4, 2], activation="tanh", bias=False), "module '1' \\(Tanh\\).*degree="),
        (nn.Linear(3, 2, bias=False), "cannot read the degree of a Linear.*degree=m"),
    ],
)
def test_homogeneity_degree_says_what_to_pass_otherwise(model, match):
    with pytest.raises(ps.ParamsymError, match=match):
        homogeneity_degree(model)


# -- Euler, eq. (3), eq. (4) on hypothesis-drawn homogeneous nets ---------------------------------


@given(
    widths=st.lists(st.integers(1, 4), min_size=2, max_size=4),
    activation=st.sampled_from(["relu", "identity", "leaky_relu"]),
    loss=st.sampled_from(["mse", "logistic", "exponential", "cross_entropy"]),
    n=st.integers(1, 5),
    seed=st.integers(0, 10_000),
)
def test_euler_and_eqs_3_4_against_dense_oracles(widths, activation, loss, n, seed):
    model, loss_fn, batch = homogeneous_problem(widths, activation, loss, n, seed)
    o = dense(model, loss_fn, batch)
    assume(norm(o.grad) > 1e-8)  # a ReLU net with every unit dead: nothing to check
    m = len(widths) - 1

    euler = euler_relation(model, loss_fn, batch)
    assert euler.degree == m
    scale = norm(o.grad) * norm(o.theta) + m * norm(o.g_ell) * norm(o.f)
    assert_close(euler.lhs, float(o.grad @ o.theta), scale)
    assert_close(euler.rhs, m * float(o.g_ell @ o.f), scale)
    assert euler.residual <= EXACT
    assert euler.holds(EXACT)

    # eq. (3) on the oracles themselves, then the library's matrix-free numbers
    h_theta = o.H @ o.theta
    gn_f = o.F.T @ (o.H_ell @ o.f)
    rhs3 = (m - 1) * o.grad + m * gn_f
    assert norm(h_theta - rhs3) <= EXACT * (norm(h_theta) + (m - 1) * norm(o.grad) + m * norm(gn_f))
    result = homogeneity_hessian(model, loss_fn, batch)
    assert result.holds(EXACT), result.residuals
    assert set(result.residuals) == {
        "action_residual",
        "gauss_newton_residual",
        "model_euler_residual",
        "quadratic_residual",
    }
    assert_close(result.action_norm, norm(h_theta), norm(h_theta) + norm(rhs3))
    quad_scale = norm(o.theta) * norm(h_theta) + m * m * norm(o.f) * norm(o.H_ell @ o.f)
    quad_scale += m * (m - 1) * norm(o.g_ell) * norm(o.f)
    assert_close(result.quadratic_lhs, float(o.theta @ h_theta), quad_scale)
    expected4 = m * m * float(o.f @ o.H_ell @ o.f) + m * (m - 1) * float(o.g_ell @ o.f)
    assert_close(result.quadratic_rhs, expected4, quad_scale)


def test_a_wrong_degree_or_a_non_homogeneous_net_is_caught():
    model, loss_fn, batch = homogeneous_problem([3, 5, 4, 2], "relu", "mse", 6, seed=3)
    right = homogeneity_hessian(model, loss_fn, batch)
    assert right.degree == 3
    assert right.holds(EXACT)
    wrong = homogeneity_hessian(model, loss_fn, batch, degree=4)
    # ‖Fθ − 4f‖ / (‖Fθ‖ + 4‖f‖) with Fθ = 3f: exactly 1/7
    assert wrong.model_euler_residual == pytest.approx(1 / 7, rel=1e-12)
    assert wrong.action_residual > 1e-2
    assert wrong.quadratic_residual > 1e-2
    assert euler_relation(model, loss_fn, batch, degree=4).residual > 1e-2
    tanh = ps.mlp([3, 5, 2], activation="tanh", bias=False, seed=0, dtype=F64)
    randomize_(tanh, torch.Generator().manual_seed(0))
    forced = homogeneity_hessian(tanh, loss_fn, (batch[0], batch[1]), degree=2)
    assert forced.model_euler_residual > 1e-2
    assert not forced.holds(1e-3)


# -- the sharpness lower bound -------------------------------------------------------------------


@pytest.mark.parametrize("loss", ["exponential", "mse", "cross_entropy"])
def test_sharpness_bound_is_below_lambda_max(loss):
    model, loss_fn, batch = homogeneous_problem([3, 6, 5, 2], "relu", loss, 8, seed=11)
    o = dense(model, loss_fn, batch)
    eigenvalues = torch.linalg.eigvalsh(o.H)
    result = sharpness_bound(model, loss_fn, batch, tol=1e-10, lr=0.1)
    theta_sq = float(o.theta @ o.theta)
    rayleigh = float(o.theta @ o.H @ o.theta) / theta_sq
    assert result.bound == pytest.approx(rayleigh, rel=1e-10, abs=1e-14)
    assert result.rayleigh_quotient == pytest.approx(rayleigh, rel=1e-10, abs=1e-14)
    assert result.formula_residual <= EXACT
    assert result.lambda_max == pytest.approx(float(eigenvalues[-1]), rel=1e-8)
    assert result.bound <= float(eigenvalues[-1])
    assert result.bound_holds
    assert result.gap == pytest.approx(result.lambda_max - result.bound)
    assert result.two_over_lr == pytest.approx(20.0)
    if loss == "exponential":
        # note 003 §5.1: (1/(n‖θ‖²)) Σ_i e^{−q_i}(m²q_i² − m(m−1)q_i) with margins q = z·f,
        # n the number of margins the mean runs over (here 8 samples × 2 outputs)
        m = 3
        q = (batch[1] * model(batch[0])).detach().reshape(-1)
        weights = torch.exp(-q) * (m * m * q * q - m * (m - 1) * q)
        closed = float(weights.sum()) / (q.numel() * theta_sq)
        assert result.bound == pytest.approx(closed, rel=1e-12)


# -- Corollary 1 ---------------------------------------------------------------------------------


def test_corollary_1_per_eigenpair_and_the_gradient_energy():
    model, loss_fn, batch = homogeneous_problem([3, 6, 4, 1], "relu", "mse", 12, seed=0)
    o = dense(model, loss_fn, batch)
    eigenvalues, vectors = torch.linalg.eigh(o.H)
    k, m = 3, 3
    result = eigen_alignment(model, loss_fn, batch, k=k, tol=1e-12)
    assert result.eigenvalues == pytest.approx(eigenvalues.flip(0)[:k].tolist(), rel=1e-9)
    assert len(result.pair_residuals) == k
    assert max(result.pair_residuals) <= EXACT
    assert result.holds(EXACT)
    top = vectors[:, -k:]
    fraction = float(((top.T @ o.grad) ** 2).sum()) / float(o.grad @ o.grad)
    assert result.gradient_fraction == pytest.approx(fraction, rel=1e-9)
    # the oracle's own Corollary 1 on the dense eigenpairs
    gn_f = o.F.T @ (o.H_ell @ o.f)
    for lam, v in zip(eigenvalues[-k:], top.T, strict=True):
        lhs = (m - 1) * float(o.grad @ v)
        rhs = float(lam) * float(o.theta @ v) - m * float(gn_f @ v)
        scale = (m - 1) * norm(o.grad) + abs(float(lam)) * norm(o.theta) + m * norm(gn_f)
        assert abs(lhs - rhs) <= EXACT * scale
    # 12 samples of a scalar output: ∇L = c·Hθ is not a theorem here, and indeed fails
    h_theta = o.H @ o.theta
    cosine = float(o.grad @ h_theta) / (norm(o.grad) * norm(h_theta))
    assert result.gradient_hessian_theta_cosine == pytest.approx(cosine, abs=1e-12)
    assert abs(cosine) < 0.95  # 0.867 here (note 003 §5b measured 0.889 on its own net)
    assert result.output_size == 12
    assert not result.collinearity_applicable
    assert result.collinearity_c is None
    assert result.collinearity_residual is None
    assert "not applicable" in result.collinearity_note
    assert "collinearity_residual" not in result.residuals


@pytest.mark.parametrize("loss", ["mse", "logistic", "exponential"])
def test_collinearity_when_the_stacked_output_is_one_scalar(loss):
    model, loss_fn, batch = homogeneous_problem([3, 5, 4, 1], "relu", loss, 1, seed=2)
    o = dense(model, loss_fn, batch)
    m = 3
    d1, d2, f = float(o.g_ell[0]), float(o.H_ell[0, 0]), float(o.f[0])
    c = d1 / ((m - 1) * d1 + m * f * d2)
    assert c == pytest.approx(1 / ((m - 1) + m * f * d2 / d1), rel=1e-12)
    h_theta = o.H @ o.theta
    assert norm(o.grad - c * h_theta) <= EXACT * (norm(o.grad) + abs(c) * norm(h_theta))
    result = eigen_alignment(model, loss_fn, batch, k=2, tol=1e-12)
    assert result.collinearity_applicable
    assert result.collinearity_c == pytest.approx(c, rel=1e-10)
    assert result.collinearity_residual <= EXACT
    assert abs(result.gradient_hessian_theta_cosine) == pytest.approx(1.0, abs=1e-12)
    assert result.holds(EXACT)


def test_gradient_not_in_the_column_space_counterexample():
    """Note 003 §8.3: f = θ₁θ₂, ℓ = ½(f − 1)², at f = 1/3: H is singular with col(H) = θ^⊥
    and ∇L has a component along θ, so ∇L ∉ col(H); Corollary 1 still holds per eigenpair."""
    model = nn.Sequential(nn.Linear(1, 1, bias=False), nn.Linear(1, 1, bias=False)).double()
    with torch.no_grad():
        model[0].weight.fill_(1.0)
        model[1].weight.fill_(1.0 / 3.0)
    batch = (torch.ones(1, 1, dtype=F64), torch.ones(1, 1, dtype=F64))

    def loss_fn(out, y):
        return 0.5 * ((out - y) ** 2).sum()

    o = dense(model, loss_fn, batch)
    eigenvalues, vectors = torch.linalg.eigh(o.H)
    assert abs(float(eigenvalues[0])) <= 1e-14
    column_space = vectors[:, eigenvalues.abs() > 1e-12]
    outside = o.grad - column_space @ (column_space.T @ o.grad)
    assert norm(outside) / norm(o.grad) == pytest.approx(0.6, rel=1e-9)
    result = eigen_alignment(model, loss_fn, batch, k=2, tol=1e-12)
    assert result.collinearity_applicable
    assert result.collinearity_c is None
    assert "undefined" in result.collinearity_note
    assert max(result.pair_residuals) <= EXACT


# -- last layer, eq. (7) -------------------------------------------------------------------------


def _last_layer_problem(activation, bias, loss, seed=0, n=6, d=4):
    gen = torch.Generator().manual_seed(seed)
    model = ps.mlp([3, 5, d], activation=activation, bias=bias, seed=seed, dtype=F64)
    randomize_(model, gen)
    x = torch.randn(n, 3, generator=gen, dtype=F64)
    if loss == "mse":
        return model, nn.MSELoss(), (x, torch.randn(n, d, generator=gen, dtype=F64))
    reduction = "sum" if loss == "ce_sum" else "mean"
    return model, nn.CrossEntropyLoss(reduction=reduction), (x, torch.randint(0, d, (n,)))


def _variance_oracle(logits: torch.Tensor, E: torch.Tensor, reduction: str) -> float:
    values = []
    for row in logits:
        p = torch.softmax(row, dim=0)
        z = E @ row
        values.append(float((p * z * z).sum() - (p * z).sum() ** 2))
    total = sum(values)
    return total / len(values) if reduction == "mean" else total


def _last_layer_direction(point, E, name="2"):
    direction = {k: torch.zeros_like(t) for k, t in point.items()}
    direction[f"{name}.weight"] = E @ point[f"{name}.weight"]
    if f"{name}.bias" in point:
        direction[f"{name}.bias"] = E @ point[f"{name}.bias"]
    return ps.flatten(direction)


@pytest.mark.parametrize("activation", ["tanh", "relu"])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("loss", ["ce_mean", "ce_sum", "mse"])
def test_eq_7_and_its_companions_against_dense_oracles(activation, bias, loss):
    model, loss_fn, batch = _last_layer_problem(activation, bias, loss, seed=7)
    point = ps.params_of(model)
    o = dense(model, loss_fn, batch)
    E = torch.randn(4, 4, generator=torch.Generator().manual_seed(1), dtype=F64)
    result = last_layer_curvature(model, loss_fn, batch, E)
    assert result.layer == "2"
    j = _last_layer_direction(point, E)
    h_j = o.H @ j
    e_f = (o.f.reshape(-1, 4) @ E.T).reshape(-1)
    scale = norm(j) * norm(h_j) + norm(e_f) * norm(o.H_ell @ e_f)
    assert_close(result.sharpness, float(j @ h_j), scale)
    assert_close(result.output_sharpness, float(e_f @ o.H_ell @ e_f), scale)
    assert abs(float(j @ h_j) - float(e_f @ o.H_ell @ e_f)) <= EXACT * scale  # eq. (7), oracle
    assert result.direction_norm == pytest.approx(norm(j), rel=1e-12)
    # item 2a: H J = Fᵀ∇²ℓ(Ef) + Fᵀ(Eᵀ∇ℓ) − (Eᵀ∇_W L, Eᵀ∇_b L, 0), on the oracles
    grads = ps.unflatten(o.grad, point)
    layer_term = {k: torch.zeros_like(t) for k, t in point.items()}
    for key in ("2.weight", "2.bias"):
        if key in point:
            layer_term[key] = E.T @ grads[key]
    covector = (o.g_ell.reshape(-1, 4) @ E).reshape(-1)
    rhs = o.F.T @ (o.H_ell @ e_f) + o.F.T @ covector - ps.flatten(layer_term)
    assert norm(h_j - rhs) <= EXACT * (norm(h_j) + norm(rhs))
    assert result.action_residual <= EXACT
    assert result.first_order_residual <= EXACT
    assert result.curvature_residual <= EXACT
    if loss == "mse":
        assert result.variance_form is None
        assert result.variance_residual is None
    else:
        reduction = "sum" if loss == "ce_sum" else "mean"
        logits = o.f.reshape(-1, 4)
        expected = _variance_oracle(logits, E, reduction)
        assert result.variance_form == pytest.approx(expected, rel=1e-12)
        assert result.variance_form == pytest.approx(float(j @ h_j), rel=1e-9)
        assert result.variance_residual <= EXACT
    assert result.holds(EXACT)


def test_the_variance_form_carries_the_mean_reduction_factor():
    model, loss_fn, batch = _last_layer_problem("tanh", True, "ce_mean", n=9)
    E = torch.randn(4, 4, generator=torch.Generator().manual_seed(3), dtype=F64)
    mean = last_layer_curvature(model, loss_fn, batch, E)
    total = last_layer_curvature(model, nn.CrossEntropyLoss(reduction="sum"), batch, E)
    assert total.variance_form == pytest.approx(9 * mean.variance_form, rel=1e-12)
    assert total.sharpness == pytest.approx(9 * mean.sharpness, rel=1e-10)


def test_last_layer_refuses_a_layer_that_does_not_produce_the_output():
    model = ps.mlp([3, 4, 4], activation="tanh", seed=0, dtype=F64)
    batch = (torch.randn(5, 3, dtype=F64), torch.randint(0, 4, (5,)))
    E = torch.eye(4, dtype=F64)
    assert last_linear_layer(model) == "2"
    with pytest.raises(EquivarianceError, match="layer '0' does not produce the output"):
        last_layer_curvature(model, nn.CrossEntropyLoss(), batch, E, layer="0")
    squashed = nn.Sequential(*model, nn.Tanh())
    with pytest.raises(EquivarianceError, match="does not produce the output"):
        last_layer_curvature(squashed, nn.CrossEntropyLoss(), batch, E)
    with pytest.raises(ps.ParamsymError, match=r"not a linear module.*\['0', '2'\]"):
        last_linear_layer(model, "1")
    with pytest.raises(ps.ShapeError, match="E has shape"):
        last_layer_curvature(model, nn.CrossEntropyLoss(), batch, torch.eye(3, dtype=F64))


@pytest.mark.parametrize("scale", [1.0, 4.0])
def test_top_versus_rest_is_eq_7_along_the_defined_generators(scale):
    model, loss_fn, batch = _last_layer_problem("tanh", True, "ce_mean", seed=4, n=8, d=5)
    with torch.no_grad():
        model[2].weight.mul_(scale)  # a more concentrated softmax for scale 4
        model[2].bias.mul_(scale)
    result = top_versus_rest_sharpness(model, loss_fn, batch)
    logits = model(batch[0]).detach()
    c = int(torch.bincount(logits.argmax(1), minlength=5).argmax())
    assert result.top_class == c
    e_c = torch.eye(5, dtype=F64)[c]
    rest = 1 - e_c
    generators = {
        "top": torch.outer(e_c, e_c),
        "rest": torch.diag(rest) - torch.outer(rest, rest) / 4,
    }
    z = logits @ generators["rest"].T  # class c untouched, the rest centred
    assert torch.all(z[:, c] == 0)
    assert torch.allclose(z.sum(1), torch.zeros(8, dtype=F64), atol=1e-12)
    for key, E in generators.items():
        exact = last_layer_curvature(model, loss_fn, batch, E)  # by a Hessian-vector product
        expected = exact.sharpness / exact.direction_norm**2
        assert getattr(result, f"{key}_sharpness") == pytest.approx(expected, rel=1e-10)
        assert getattr(result, f"{key}_curvature") == pytest.approx(exact.sharpness, rel=1e-10)
    assert result.ratio == pytest.approx(result.top_sharpness / result.rest_sharpness)
    probabilities = torch.softmax(logits, 1)[:, c]
    assert result.mean_top_probability == pytest.approx(float(probabilities.mean()), rel=1e-12)
    assert not math.isnan(result.ratio)


def test_top_versus_rest_needs_three_classes():
    model, loss_fn, batch = _last_layer_problem("tanh", True, "ce_mean", d=2)
    with pytest.raises(ps.ParamsymError, match="at least 3 classes"):
        top_versus_rest_sharpness(model, loss_fn, batch)
