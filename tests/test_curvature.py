"""Curvature primitives against dense oracles, in float64."""

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import paramsym as ps
from helpers import randomize_, relative_error
from paramsym.curvature import lanczos


def mse(output, target):
    """MSE from elementary operations (forward-over-reverse cannot differentiate nn.MSELoss)."""
    return ((output - target) ** 2).mean()


def small_problem(activation="tanh", loss="mse", seed=0, widths=(3, 5, 4, 2)):
    generator = torch.Generator().manual_seed(seed)
    model = ps.mlp(list(widths), activation=activation, seed=seed, dtype=torch.float64)
    randomize_(model, generator)
    x = torch.randn(7, widths[0], generator=generator, dtype=torch.float64)
    if loss == "mse":
        return (
            model,
            torch.nn.MSELoss(),
            (x, torch.randn(7, widths[-1], generator=generator).double()),
        )
    return (
        model,
        torch.nn.CrossEntropyLoss(),
        (x, torch.randint(0, widths[-1], (7,), generator=generator)),
    )


@pytest.mark.parametrize("activation", ["tanh", "relu", "gelu", "identity"])
@pytest.mark.parametrize("loss", ["mse", "cross_entropy"])
def test_hvp_matches_dense_hessian(activation, loss):
    model, loss_fn, batch = small_problem(activation, loss)
    dense = ps.hessian(model, loss_fn, batch)
    params = ps.params_of(model)
    assert dense.shape == (ps.flatten(params).numel(),) * 2
    assert torch.allclose(dense, dense.T, atol=1e-12)
    v = ps.core.randn_like(params, torch.Generator().manual_seed(1))
    expected = dense @ ps.flatten(v)
    assert relative_error(ps.flatten(ps.hvp(model, loss_fn, batch, v)), expected) <= 1e-12
    functional_loss = mse if loss == "mse" else loss_fn
    forward = ps.hvp(model, functional_loss, batch, v, method="forward_over_reverse")
    assert relative_error(ps.flatten(forward), expected) <= 1e-12


def test_forward_over_reverse_with_nn_mseloss_is_either_right_or_explained():
    """pytorch/pytorch#123996: while it is open, the error is translated into an explanation."""
    model, loss_fn, batch = small_problem()
    v = ps.core.randn_like(ps.params_of(model), torch.Generator().manual_seed(2))
    expected = ps.hessian(model, loss_fn, batch) @ ps.flatten(v)
    try:
        product = ps.hvp(model, loss_fn, batch, v, method="forward_over_reverse")
    except ps.AutodiffError as err:
        message = str(err)
    else:
        assert relative_error(ps.flatten(product), expected) <= 1e-12
        return
    assert "123996" in message
    assert "reverse_over_reverse" in message


@pytest.mark.parametrize("activation", ["tanh", "relu"])
def test_dense_hessian_matches_torch_func_hessian(activation):
    """An independent implementation (forward-over-reverse through vmap) as the oracle."""
    model, loss_fn, batch = small_problem(activation, "cross_entropy")
    params = ps.params_of(model)

    def loss(z):
        return loss_fn(ps.functional_call(model, ps.unflatten(z, params), batch[0]), batch[1])

    oracle = torch.func.hessian(loss)(ps.flatten(params))
    assert torch.allclose(ps.hessian(model, loss_fn, batch), oracle, rtol=1e-12, atol=1e-13)


def test_hvp_at_explicit_params_and_hessian_of_a_loss_affine_in_some_parameters():
    model, loss_fn, batch = small_problem("relu")
    other = ps.core.randn_like(ps.params_of(model), torch.Generator().manual_seed(3))
    v = ps.core.randn_like(other, torch.Generator().manual_seed(4))
    dense = ps.hessian(model, loss_fn, batch, params=other)
    assert (
        relative_error(
            ps.flatten(ps.hvp(model, loss_fn, batch, v, params=other)), dense @ ps.flatten(v)
        )
        <= 1e-12
    )
    # L = Σ y ⊙ f with f = W x + b is linear in θ: zero Hessian, and no second-order graph.
    linear = torch.nn.Linear(3, 2).double()
    x, y = torch.randn(4, 3, dtype=torch.float64), torch.randn(4, 2, dtype=torch.float64)
    operator = ps.HessianOperator(linear, lambda f, t: (f * t).sum(), (x, y))
    assert float(operator.matvec(torch.ones(8, dtype=torch.float64)).abs().max()) == 0.0


def test_hessian_operator_dense_scipy_and_counts():
    model, loss_fn, batch = small_problem("tanh", "cross_entropy")
    operator = ps.HessianOperator(model, loss_fn, batch)
    dense = ps.hessian(model, loss_fn, batch)
    assert torch.allclose(operator.to_dense(), dense, atol=1e-12)
    assert operator.num_matvecs == dense.shape[0]
    block = torch.randn(dense.shape[0], 3, dtype=torch.float64)
    assert torch.allclose(operator @ block, dense @ block, atol=1e-12)
    scipy_op = operator.to_scipy()
    v = block[:, 0].numpy()
    assert torch.allclose(torch.from_numpy(scipy_op @ v), dense @ block[:, 0], atol=1e-12)
    assert torch.allclose(operator.loss, loss_fn(model(batch[0]), batch[1]))
    expected_grad = torch.func.grad(
        lambda p: loss_fn(ps.functional_call(model, p, batch[0]), batch[1])
    )(ps.params_of(model))
    assert relative_error(ps.flatten(operator.gradient), ps.flatten(expected_grad)) <= 1e-13


def test_training_mode_batchnorm_against_finite_differences():
    """torch.func.hessian is wrong here (see ps.hessian); the library's paths must not be."""
    torch.manual_seed(0)  # weights and batch: the test must not depend on the tests before it
    model = (
        torch.nn.Sequential(
            torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4), torch.nn.Tanh(), torch.nn.Linear(4, 1)
        )
        .double()
        .train()
    )
    before = model[1].running_mean.clone()
    batch = (torch.randn(6, 3, dtype=torch.float64), torch.randn(6, 1, dtype=torch.float64))
    params = ps.params_of(model)
    v = ps.core.randn_like(params, torch.Generator().manual_seed(5))
    gradient = torch.func.grad(lambda p: mse(ps.functional_call(model, p, batch[0]), batch[1]))
    step = 1e-5
    finite_difference = (
        ps.flatten(gradient(ps.axpy(step, v, params)))
        - ps.flatten(gradient(ps.axpy(-step, v, params)))
    ) / (2 * step)
    assert (
        relative_error(ps.flatten(ps.hvp(model, torch.nn.MSELoss(), batch, v)), finite_difference)
        <= 1e-7
    )
    assert (
        relative_error(
            ps.hessian(model, torch.nn.MSELoss(), batch) @ ps.flatten(v), finite_difference
        )
        <= 1e-7
    )
    forward = ps.hvp(model, mse, batch, v, method="forward_over_reverse")
    assert relative_error(ps.flatten(forward), finite_difference) <= 1e-7
    assert torch.equal(model[1].running_mean, before)  # analyses leave the model's state alone


def _spectrum_matrix(eigenvalues, seed=0):
    q, _ = torch.linalg.qr(
        torch.randn(
            len(eigenvalues),
            len(eigenvalues),
            generator=torch.Generator().manual_seed(seed),
            dtype=torch.float64,
        )
    )
    return q @ torch.diag(torch.tensor(eigenvalues, dtype=torch.float64)) @ q.T


@pytest.mark.parametrize(
    ("which", "expected"),
    [
        ("largest", [9.0, 7.5, 7.0]),
        ("smallest", [-8.0, -2.0, -1.0]),
        ("magnitude", [9.0, -8.0, 7.5]),
    ],
)
def test_lanczos_on_a_known_spectrum(which, expected):
    spectrum = [9.0, 7.5, 7.0, -8.0, -2.0, -1.0] + [0.1 * i for i in range(1, 35)]
    a = _spectrum_matrix(spectrum)
    result = lanczos(
        lambda v: a @ v,
        a.shape[0],
        k=3,
        which=which,
        tol=1e-10,
        dtype=torch.float64,
        return_eigenvectors=True,
    )
    assert result.converged
    assert result.eigenvalues == pytest.approx(expected, rel=1e-9)
    for value, residual, vector in zip(
        result.eigenvalues, result.residuals, result.eigenvectors, strict=True
    ):
        assert (
            float(torch.linalg.vector_norm(a @ vector - value * vector)) <= residual * 1.01 + 1e-12
        )
    assert result.num_hvps <= a.shape[0]


def test_lanczos_restarts_after_an_invariant_subspace():
    a = _spectrum_matrix([5.0, 3.0] + [0.0] * 18, seed=1)  # rank 2: Krylov space closes fast
    result = lanczos(lambda v: a @ v, 20, k=3, which="largest", tol=1e-10, dtype=torch.float64)
    assert result.converged
    assert result.eigenvalues == pytest.approx([5.0, 3.0, 0.0], abs=1e-9)


def test_lanczos_reports_non_convergence():
    a = _spectrum_matrix([1.0 + 1e-3 * i for i in range(60)])
    with pytest.warns(ps.NotConvergedWarning, match="approximate"):
        result = lanczos(lambda v: a @ v, 60, k=1, tol=1e-14, max_iter=4, dtype=torch.float64)
    assert not result.converged
    assert result.num_hvps == 4


@given(st.integers(0, 10_000), st.sampled_from(["tanh", "relu", "sigmoid"]))
def test_top_eigenvalues_match_eigvalsh(seed, activation):
    model, loss_fn, batch = small_problem(activation, "cross_entropy", seed=seed)
    exact = torch.linalg.eigvalsh(ps.hessian(model, loss_fn, batch))
    top = ps.top_eigenvalues(model, loss_fn, batch, k=2, tol=1e-10)
    assert top.eigenvalues == pytest.approx(
        [float(exact[-1]), float(exact[-2])], rel=1e-8, abs=1e-10
    )
    bottom = ps.top_eigenvalues(model, loss_fn, batch, k=1, which="smallest", tol=1e-10)
    assert bottom.eigenvalues[0] == pytest.approx(float(exact[0]), rel=1e-8, abs=1e-10)
    assert top.num_hvps >= 2


def test_hutchinson_trace_is_unbiased_with_the_right_error_bar():
    model, loss_fn, batch = small_problem("tanh", "mse", widths=(3, 6, 2))
    dense = ps.hessian(model, loss_fn, batch)
    result = ps.hutchinson_trace(model, loss_fn, batch, num_samples=2000, generator=0)
    assert result.approximate
    assert result.num_hvps == 2000
    exact = float(torch.trace(dense))
    assert abs(result.estimate - exact) <= 4 * result.stderr
    # Rademacher variance 2(‖H‖_F² − Σ H_ii²) per probe (Hutchinson 1989).
    predicted = math.sqrt(
        2 * (float((dense**2).sum()) - float((torch.diag(dense) ** 2).sum())) / 2000
    )
    assert result.stderr == pytest.approx(predicted, rel=0.15)
    gaussian = ps.hutchinson_trace(
        model, loss_fn, batch, num_samples=2000, distribution="gaussian", generator=1
    )
    assert abs(gaussian.estimate - exact) <= 4 * gaussian.stderr


# -- orbit dimensions (Prop. A.2.9; notes 001a §6.10 errata) --------------------------------


def _two_layer(activation, n, h, m, bias, seed):
    model = ps.mlp([n, h, m], activation=activation, bias=bias, seed=seed, dtype=torch.float64)
    randomize_(model, torch.Generator().manual_seed(seed))
    return model, ps.symmetries(model)[0]


@given(st.integers(1, 6), st.integers(1, 7), st.integers(1, 6), st.booleans(), st.integers(0, 999))
def test_orbit_dimension_gl(n, h, m, bias, seed):
    model, gl = _two_layer("identity", n, h, m, bias, seed)
    n_eff = n + bias  # a bias is one more input column of W_A (derived)
    assert ps.orbit_dimension(model, gl) == h * h - max(0, h - n_eff) * max(0, h - m)


@given(st.integers(1, 5), st.integers(1, 7), st.integers(1, 5), st.booleans(), st.integers(0, 999))
def test_orbit_dimension_rescaling_is_h_at_generic_points(n, h, m, bias, seed):
    """Thm 2.3.8 claims min(h, max(n, m)); that holds only at (U0, V0) (erratum)."""
    model, rescaling = _two_layer("relu", n, h, m, bias, seed)
    assert ps.orbit_dimension(model, rescaling) == h


@given(st.integers(1, 4), st.integers(1, 8), st.integers(1, 4), st.booleans(), st.integers(0, 999))
def test_orbit_dimension_orthogonal(n, h, m, bias, seed):
    """C(h,2) − C(max(0, h−m−n), 2) at generic points (erratum to Thm 2.3.8 / Cor A.2.10)."""
    model, orthogonal = _two_layer("radial", n, h, m, bias, seed)
    free = max(0, h - m - (n + bias))
    assert ps.orbit_dimension(model, orthogonal) == math.comb(h, 2) - math.comb(free, 2)


def test_orbit_dimension_of_discrete_groups_is_zero():
    model, _ = _two_layer("tanh", 3, 4, 2, True, 0)
    assert all(ps.orbit_dimension(model, s) == 0 for s in ps.symmetries(model))


def test_fig_2_7_hessian_nullity_at_a_linear_minimum():
    """U ∈ R^{10×50}, V ∈ R^{5×50}, X = I: at a zero-loss minimum at least 700 of the 750
    Hessian eigenvalues are ~0, the GL(50) orbit dimension h(n+m) − nm = 700 (Fig 2.7)."""
    model = ps.mlp([5, 50, 10], activation="identity", bias=False, seed=0, dtype=torch.float64)
    x = torch.eye(5, dtype=torch.float64)
    with torch.no_grad():
        y = model(x)  # the current point is a zero-loss minimum
    loss_fn = lambda f, t: ((f - t) ** 2).sum()  # noqa: E731
    eigenvalues = torch.linalg.eigvalsh(ps.hessian(model, loss_fn, (x, y)))
    assert eigenvalues.numel() == 750
    assert int((eigenvalues.abs() <= 1e-3).sum()) >= 700
    gl = ps.symmetries(model)[0]
    assert ps.orbit_dimension(model, gl) == 700
