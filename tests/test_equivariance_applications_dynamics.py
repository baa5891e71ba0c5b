"""Seed 003 applications, part 2: Noether flow under SGD (Corollary 2), mirrors (Corollary 4) and
symmetry null directions at stationarity (§5.4), against dense float64 oracles and, for the
SGD drift, the exact expectation over every possible batch."""

# ruff: noqa: E741  (O is the mirror's orthonormal basis, as in the paper)

from __future__ import annotations

import itertools
import re

import pytest
import torch
from torch import nn

import paramsym as ps
from helpers import randomize_
from paramsym.conserved.base import loss_gradient
from paramsym.equivariance.mirror import (
    mirror_fixed_point,
    mirror_identities,
    neuron_swap_mirror,
    sign_flip_mirror,
)
from paramsym.equivariance.noether import (
    QuadraticCharge,
    layer_rescaling_generator,
    measure_sgd_drift,
    noether_drift,
)
from paramsym.equivariance.stationarity import generator_matrix, stationary_null_space
from paramsym.errors import FixedPointError

F64 = torch.float64
EXACT = 1e-9
jac = torch.func.jacrev


def norm(t: torch.Tensor) -> float:
    return float(torch.linalg.vector_norm(t))


def flat_loss(model, loss_fn, x, y, point):
    def loss_of(z):
        return loss_fn(torch.func.functional_call(model, ps.unflatten(z, point), (x,)), y)

    return loss_of


# -- Noether flow --------------------------------------------------------------------------------


def relu_problem(n=5, seed=0):
    gen = torch.Generator().manual_seed(seed)
    model = ps.mlp([2, 3, 1], activation="relu", bias=False, seed=seed, dtype=F64)
    randomize_(model, gen)
    x = torch.randn(n, 2, generator=gen, dtype=F64)
    y = torch.randn(n, 1, generator=gen, dtype=F64)
    point = ps.params_of(model)
    return model, nn.MSELoss(), (x, y), layer_rescaling_generator(point, ["0.weight"], ["2.weight"])


def linear_problem(n=5, seed=0):
    """A linear factorisation UV with a symmetric GL generator S: J = (−SV, US) = Aθ, A = Aᵀ."""
    gen = torch.Generator().manual_seed(seed)
    model = nn.Sequential(nn.Linear(3, 2, bias=False), nn.Linear(2, 2, bias=False)).double()
    randomize_(model, gen)
    x = torch.randn(n, 3, generator=gen, dtype=F64)
    y = torch.randn(n, 2, generator=gen, dtype=F64)
    S = torch.tensor([[0.3, 1.0], [1.0, -0.7]], dtype=F64)
    A = generator_matrix(
        lambda p: {"0.weight": -S @ p["0.weight"], "1.weight": p["1.weight"] @ S},
        ps.params_of(model),
    )
    return model, nn.MSELoss(), (x, y), A


PROBLEMS = {"relu_rescaling": relu_problem, "linear_gl": linear_problem}


@pytest.mark.parametrize("problem", sorted(PROBLEMS))
def test_noether_identity_against_dense_per_sample_oracles(problem):
    model, loss_fn, (x, y), A = PROBLEMS[problem]()
    assert torch.equal(A, A.T)
    point = ps.params_of(model)
    theta = ps.flatten(point)
    n = x.shape[0]
    grads, hessians = [], []
    for i in range(n):
        sample = flat_loss(model, loss_fn, x[i : i + 1], y[i : i + 1], point)
        grads.append(jac(sample)(theta))
        hessians.append(jac(jac(sample))(theta))
    G = torch.stack(grads)
    g_bar = G.mean(0)
    sigma = G.T @ G / n - torch.outer(g_bar, g_bar)
    H = torch.stack(hessians).mean(0)
    grad_trace = 2 * sum(h @ g for h, g in zip(hessians, grads, strict=True)) / n - 2 * H @ g_bar
    expected_lhs = float(torch.trace(sigma @ A))
    expected_rhs = -0.5 * float((A @ theta) @ grad_trace)
    scale = abs(expected_lhs) + abs(expected_rhs)
    assert abs(expected_lhs - expected_rhs) <= EXACT * scale  # Corollary 2 on the oracles
    result = noether_drift(model, loss_fn, (x, y), A, lr=0.1, batch_size=2)
    assert result.trace_sigma_dj == pytest.approx(expected_lhs, rel=1e-10)
    assert result.minus_half_j_grad_trace_sigma == pytest.approx(expected_rhs, rel=1e-10)
    assert result.identity_residual <= EXACT
    assert result.symmetry_residual <= EXACT
    assert result.holds(EXACT)
    assert result.charge == pytest.approx(0.5 * float(theta @ A @ theta), rel=1e-12)
    assert result.sigma_squared == pytest.approx(0.1 / 4)
    assert result.sde_drift_rate == pytest.approx(0.025 * expected_lhs, rel=1e-10)
    assert result.gd_drift == pytest.approx(0.5 * 0.01 * float(g_bar @ A @ g_bar), rel=1e-10)
    assert result.finite_population_factor == pytest.approx(3 / 4)
    assert result.noise_drift == pytest.approx(0.01 / 4 * 0.75 * expected_lhs, rel=1e-10)


def _exact_expectation(model, loss_fn, x, y, A, lr, batches) -> float:
    """E[Q(θ − η g_B) − Q(θ)] over the given equally likely batches (index lists)."""
    point = ps.params_of(model)
    charge = QuadraticCharge(A, point)
    changes = []
    for index in batches:
        g = loss_gradient(model, loss_fn, (x[list(index)], y[list(index)]), point)
        moved = {k: point[k] - lr * g[k] for k in point}
        changes.append(float(charge(moved) - charge(point)))
    return sum(changes) / len(changes)


@pytest.mark.parametrize("problem", sorted(PROBLEMS))
@pytest.mark.parametrize(("batch_size", "replacement"), [(1, False), (2, False), (2, True)])
def test_predicted_drift_is_the_exact_expectation_over_all_batches(
    problem, batch_size, replacement
):
    model, loss_fn, (x, y), A = PROBLEMS[problem]()
    n, lr = x.shape[0], 0.1
    if replacement:  # ordered draws with replacement, each of the n^B equally likely
        batches = list(itertools.product(range(n), repeat=batch_size))
    else:  # every set of B distinct samples
        batches = list(itertools.combinations(range(n), batch_size))
    expected = _exact_expectation(model, loss_fn, x, y, A, lr, batches)
    result = noether_drift(
        model, loss_fn, (x, y), A, lr=lr, batch_size=batch_size, replacement=replacement
    )
    assert result.sgd_drift == pytest.approx(expected, rel=1e-10)
    # the GD term is not negligible against the noise term (note 003 §5b)
    assert abs(result.gd_drift) > 0.05 * abs(result.noise_drift)
    assert result.sgd_drift == pytest.approx(result.gd_drift + result.noise_drift)


def test_full_batch_sgd_is_gd_and_gd_drift_is_exact():
    model, loss_fn, (x, y), A = relu_problem()
    result = noether_drift(model, loss_fn, (x, y), A, lr=0.2, batch_size=5)
    assert result.finite_population_factor == 0.0
    expected = _exact_expectation(model, loss_fn, x, y, A, 0.2, [range(5)])
    assert result.gd_drift == pytest.approx(expected, rel=1e-10)
    assert result.sgd_drift == pytest.approx(expected, rel=1e-10)


def test_measured_sgd_drift_matches_the_prediction_and_needs_the_noise_term():
    model, loss_fn, batch, A = relu_problem()
    prediction = noether_drift(model, loss_fn, batch, A, lr=0.1, batch_size=1)
    measured = measure_sgd_drift(model, loss_fn, batch, A, 0.1, 1, steps=3000, generator=0)
    assert measured.restart
    assert measured.mean_predicted == pytest.approx(prediction.sgd_drift, rel=1e-12)
    assert measured.consistent
    assert abs(measured.mean_drift - prediction.sgd_drift) <= measured.drift_half_width
    # GD's drift alone is far outside the interval: the noise term is needed
    assert abs(measured.mean_drift - prediction.gd_drift) > 3 * measured.drift_half_width
    before = ps.flatten(ps.params_of(model)).clone()
    trajectory = measure_sgd_drift(
        model, loss_fn, batch, A, 0.05, 2, steps=400, restart=False, generator=1
    )
    assert not trajectory.restart
    assert trajectory.consistent
    assert torch.equal(ps.flatten(ps.params_of(model)), before)  # the model is not stepped


def test_noether_bad_input_and_a_generator_that_is_not_a_symmetry():
    model, loss_fn, batch, A = relu_problem()
    with pytest.raises(ps.ParamsymError, match="not symmetric"):
        noether_drift(model, loss_fn, batch, A + torch.triu(torch.ones_like(A), 1), 0.1, 1)
    with pytest.raises(ps.ParamsymError, match="reduction='mean'"):
        noether_drift(model, nn.MSELoss(reduction="sum"), batch, A, 0.1, 1)
    with pytest.raises(ps.ParamsymError, match="batch_size"):
        noether_drift(model, loss_fn, batch, A, 0.1, 6)
    with pytest.raises(ps.ShapeError, match="expected \\(9, 9\\)"):
        noether_drift(model, loss_fn, batch, A[:4, :4], 0.1, 1)
    one_layer = layer_rescaling_generator(ps.params_of(model), ["0.weight"], [])
    broken = noether_drift(model, loss_fn, batch, one_layer, 0.1, 1)
    assert broken.symmetry_residual > 1e-2
    assert not broken.holds(1e-3)


# -- mirrors (Corollary 4) -----------------------------------------------------------------------


def tanh_problem(seed=0):
    gen = torch.Generator().manual_seed(seed)
    model = ps.mlp([3, 4, 2], activation="tanh", seed=seed, dtype=F64)
    randomize_(model, gen)
    batch = (torch.randn(6, 3, generator=gen, dtype=F64), torch.randn(6, 2, generator=gen).double())
    return model, nn.MSELoss(), batch


MIRRORS = {
    "swap": lambda p: neuron_swap_mirror(p, ["0.weight", "0.bias"], ["2.weight"], 0, 2),
    "sign_flip": lambda p: sign_flip_mirror(p, ["0.weight", "0.bias"], ["2.weight"], 1),
}


@pytest.mark.parametrize("mirror", sorted(MIRRORS))
def test_corollary_4_at_a_mirror_fixed_point(mirror):
    model, loss_fn, (x, y) = tanh_problem()
    point = ps.params_of(model)
    O = MIRRORS[mirror](point)
    assert O.shape == (ps.flatten(point).numel(), 6)
    assert torch.allclose(O.T @ O, torch.eye(6, dtype=F64), atol=1e-15)
    reflect = torch.eye(O.shape[0], dtype=F64) - 2 * O @ O.T
    loss_of = flat_loss(model, loss_fn, x, y, point)
    theta = ps.flatten(point)
    assert float(loss_of(reflect @ theta)) == pytest.approx(float(loss_of(theta)), rel=1e-13)

    fixed = mirror_fixed_point(point, O)
    flat_fixed = ps.flatten(fixed)
    assert torch.allclose(reflect @ flat_fixed, flat_fixed, atol=1e-15)
    fixed_loss = flat_loss(model, loss_fn, x, y, fixed)
    grad = jac(fixed_loss)(flat_fixed)
    H = jac(jac(fixed_loss))(flat_fixed)
    spectral = float(torch.linalg.matrix_norm(H, ord=2))
    assert norm(O.T @ grad) <= 1e-14 * norm(grad)
    assert norm(O.T @ H @ (torch.eye(O.shape[0], dtype=F64) - O @ O.T)) <= 1e-14 * spectral

    result = mirror_identities(model, loss_fn, (x, y), O, fixed)
    assert result.distance <= 1e-15
    assert result.rank == 6
    assert result.gradient_norm == pytest.approx(norm(grad), rel=1e-12)
    assert result.gradient_residual <= EXACT
    assert result.hessian_residual <= EXACT
    assert result.holds(EXACT)
    assert result.hessian_block_norm == pytest.approx(norm(H @ O), rel=1e-10)
    assert 0.5 * spectral <= result.hessian_norm <= spectral * (1 + 1e-10)
    given_norm = mirror_identities(model, loss_fn, (x, y), O, fixed, hessian_norm=spectral)
    assert given_norm.hessian_norm == spectral


@pytest.mark.parametrize("mirror", sorted(MIRRORS))
def test_off_the_fixed_set_the_mirror_check_refuses_or_reports_large_residuals(mirror):
    model, loss_fn, batch = tanh_problem()
    point = ps.params_of(model)
    O = MIRRORS[mirror](point)
    distance = norm(O.T @ ps.flatten(point))
    with pytest.raises(FixedPointError, match=re.escape(f"‖Oᵀθ‖ = {distance:.3e}") + ".*θ − OOᵀθ"):
        mirror_identities(model, loss_fn, batch, O)
    off = mirror_identities(model, loss_fn, batch, O, check_fixed_point=False)
    assert off.distance == pytest.approx(distance, rel=1e-12)
    assert off.gradient_residual > 1e-2
    assert off.hessian_residual > 1e-3
    assert not off.holds(1e-3)


def test_mirror_needs_orthonormal_columns():
    model, loss_fn, batch = tanh_problem()
    O = MIRRORS["swap"](ps.params_of(model))
    fixed = mirror_fixed_point(ps.params_of(model), O)
    with pytest.raises(ps.ParamsymError, match="not orthonormal"):
        mirror_identities(model, loss_fn, batch, 2 * O, fixed)
    with pytest.raises(ps.ShapeError, match="O has shape"):
        mirror_identities(model, loss_fn, batch, O[:-1], fixed)
    with pytest.raises(ps.ParamsymError, match="i and j must differ"):
        neuron_swap_mirror(ps.params_of(model), ["0.weight"], ["2.weight"], 1, 1)


# -- null directions at stationarity -------------------------------------------------------------


def realisable_uv(i=4, r=2, o=3, n=6, seed=0):
    """f = U V x with V (r×i), U (o×r) full rank, targets the model's own output: L = 0."""
    gen = torch.Generator().manual_seed(seed)
    model = nn.Sequential(nn.Linear(i, r, bias=False), nn.Linear(r, o, bias=False)).double()
    randomize_(model, gen)
    x = torch.randn(n, i, generator=gen, dtype=F64)
    with torch.no_grad():
        y = model(x)
    generators = []
    for a, b in itertools.product(range(r), repeat=2):
        E = torch.zeros(r, r, dtype=F64)
        E[a, b] = 1.0
        generators.append(
            lambda p, E=E: {"0.weight": -E @ p["0.weight"], "1.weight": p["1.weight"] @ E}
        )
    return model, nn.MSELoss(), (x, y), generators


@pytest.mark.parametrize("dense", [True, False])
def test_uv_minimum_has_r_squared_hessian_zeros(dense):
    model, loss_fn, (x, y), generators = realisable_uv()
    point = ps.params_of(model)
    theta = ps.flatten(point)
    H = jac(jac(flat_loss(model, loss_fn, x, y, point)))(theta)
    eigenvalues = torch.linalg.eigvalsh(H)
    spectral = float(eigenvalues.abs().max())
    assert int((eigenvalues.abs() <= 1e-8 * spectral).sum()) == 4  # r² = 4, the oracle
    result = stationary_null_space(model, loss_fn, (x, y), generators, dense=dense)
    assert result.method == ("dense" if dense else "lanczos")
    assert result.gradient_norm == 0.0
    assert result.rank == 4
    assert result.zero_count == 4
    assert result.count_holds
    assert result.converged
    assert result.hessian_norm == pytest.approx(spectral, rel=1e-9)
    assert max(result.null_residuals) <= EXACT
    assert result.holds(EXACT)
    for generator in generators:
        j = ps.flatten(generator(point))
        assert norm(H @ j) <= 1e-13 * spectral * norm(j)


def test_away_from_stationarity_h_g_theta_is_minus_g_transpose_gradient():
    model, loss_fn, (x, y), generators = realisable_uv()
    gen = torch.Generator().manual_seed(5)
    point = {
        k: t + 0.3 * torch.randn(t.shape, generator=gen, dtype=F64)
        for k, t in ps.params_of(model).items()
    }
    theta = ps.flatten(point)
    loss_of = flat_loss(model, loss_fn, x, y, point)
    grad, H = jac(loss_of)(theta), jac(jac(loss_of))(theta)
    matrices = [generator_matrix(g, point) for g in generators]
    for G in matrices:  # the oracle: H Gθ = −Gᵀ∇L
        lhs, rhs = H @ (G @ theta), -G.T @ grad
        assert norm(lhs - rhs) <= EXACT * (norm(lhs) + norm(rhs))
    for given in (matrices, generators):
        result = stationary_null_space(model, loss_fn, (x, y), given, point, dense=True)
        assert result.gradient_norm == pytest.approx(norm(grad), rel=1e-12)
        assert max(result.away_residuals) <= EXACT
        assert max(result.orthogonality_residuals) <= EXACT
        assert min(result.null_residuals) > 1e-2  # HJ ≠ 0 off a stationary point
        assert not result.holds(1e-3)
    # a rescaling generator of a ReLU net, given as a matrix
    relu, relu_loss, relu_batch, A = relu_problem()
    relu_result = stationary_null_space(relu, relu_loss, relu_batch, [A], dense=True)
    assert relu_result.away_residuals[0] <= EXACT


def test_a_generator_that_is_not_a_symmetry_fails_the_identities():
    model, loss_fn, batch, _ = realisable_uv()
    point = {k: t + 0.3 for k, t in ps.params_of(model).items()}
    not_a_symmetry = [lambda p: {"1.weight": p["1.weight"]}]  # scales U alone
    result = stationary_null_space(model, loss_fn, batch, not_a_symmetry, point, dense=True)
    assert result.away_residuals[0] > 1e-2
    assert result.orthogonality_residuals[0] > 1e-2


def test_stationary_null_space_bad_input():
    model, loss_fn, batch, generators = realisable_uv()
    with pytest.raises(ps.ParamsymError, match="max_params"):
        stationary_null_space(model, loss_fn, batch, generators, dense=True, max_params=10)
    with pytest.raises(ps.ShapeError, match="generators\\[0\\] has shape"):
        stationary_null_space(model, loss_fn, batch, [torch.eye(3, dtype=F64)])
    with pytest.raises(ps.ParamsymError, match="at least one generator"):
        stationary_null_space(model, loss_fn, batch, [])
