"""Data-dependent nonlinear GL(h) actions (dissertation §2.4, App. A.3; Eqs. 2.54, 4.13, 4.16)."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import paramsym as ps
from helpers import params_relative_error, randomize_, relative_error
from paramsym.symmetry import householder_frame

NONZERO_OFF_ZERO = ["tanh", "sigmoid", "leaky_relu", "gelu", "silu", "elu", "softplus"]
INVERTIBLE = ["tanh", "sigmoid", "leaky_relu", "elu", "softplus"]


def network(activation, widths, seed, bias=True, parameterization="standard"):
    model = ps.mlp(
        widths,
        activation=activation,
        bias=bias,
        seed=seed,
        dtype=torch.float64,
        parameterization=parameterization,
    )
    randomize_(model, torch.Generator().manual_seed(seed), std=0.6)
    return model


def find(model, family, layer="0->2"):
    for s in ps.symmetries(model, data_dependent=True):
        if s.name == f"{family}[{layer}]":
            return s
    raise AssertionError(f"{family}[{layer}] not found")


def element(s, seed, scale=0.4):
    return s.sample(scale=scale, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def inputs(k, n, seed):
    return torch.randn(k, n, generator=torch.Generator().manual_seed(seed + 7), dtype=torch.float64)


# -- R_z -----------------------------------------------------------------------------------------


@given(st.integers(1, 9), st.integers(0, 10_000))
def test_householder_frame_has_first_column_z_and_is_a_scaled_orthogonal_matrix(h, seed):
    z = torch.randn(h, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    r = householder_frame(z)
    assert torch.allclose(r[:, 0], z, atol=1e-13)
    assert torch.allclose(r.T @ r, (z @ z) * torch.eye(h, dtype=torch.float64), atol=1e-12)
    assert torch.allclose(
        torch.linalg.solve(r, z), torch.eye(h, dtype=torch.float64)[0], atol=1e-12
    )


def test_householder_frame_is_stable_near_e1_and_exact_at_e1():
    z = torch.tensor([1.0, 1e-9, -2e-9], dtype=torch.float64)
    r = householder_frame(z)
    assert torch.allclose(r[:, 0], z, atol=1e-15)
    assert torch.allclose(r.T @ r, (z @ z) * torch.eye(3, dtype=torch.float64), atol=1e-14)
    e1 = torch.tensor([3.0, 0.0, 0.0], dtype=torch.float64)
    assert torch.equal(householder_frame(e1), 3.0 * torch.eye(3, dtype=torch.float64))


# -- the single-input action (Thm 2.4.1) -------------------------------------------------------


@given(st.sampled_from(NONZERO_OFF_ZERO), st.integers(2, 6), st.integers(1, 5), st.integers(0, 999))
def test_single_input_action_is_exact_at_its_input_only(activation, h, n, seed):
    model = network(activation, [n, h, 3], seed)
    s = find(model, "nonlinear_GL")
    theta, x = ps.params_of(model), inputs(1, n, seed)
    moved, report = s.act_with_report(theta, element(s, seed), x)
    assert report.exact
    assert report.relative_change <= 1e-12
    assert relative_error(ps.functional_call(model, moved, x), model(x)) <= 1e-12
    others = inputs(16, n, seed + 1)
    assert relative_error(ps.functional_call(model, moved, others), model(others)) > 1e-6


@given(st.sampled_from(NONZERO_OFF_ZERO), st.integers(2, 5), st.integers(0, 999))
def test_single_input_action_is_a_group_action(activation, h, seed):
    model = network(activation, [3, h, 2], seed)
    s = find(model, "nonlinear_GL")
    theta, x = ps.params_of(model), inputs(1, 3, seed)
    g1, g2 = element(s, seed), element(s, seed + 1)
    two_steps = s.act(s.act(theta, g2, x), g1, x)
    assert params_relative_error(s.act(theta, s.compose(g1, g2), x), two_steps) <= 1e-11
    assert params_relative_error(s.act(theta, s.identity(dtype=torch.float64), x), theta) <= 1e-14
    back = s.act(s.act(theta, g1, x), s.inverse(g1), x)
    assert params_relative_error(back, theta) <= 1e-11


def test_single_input_tangent_matches_finite_differences_and_keeps_the_output():
    model = network("tanh", [3, 4, 2], 0)
    s = find(model, "nonlinear_GL")
    theta, x = ps.params_of(model), inputs(1, 3, 0)
    xi = torch.randn(s.dim, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    t = 1e-6
    difference = ps.scale(
        1 / (2 * t), ps.sub(s.act(theta, s.exp(t * xi), x), s.act(theta, s.exp(-t * xi), x))
    )
    tangent = s.tangent(theta, xi, x)
    assert params_relative_error(tangent, difference) <= 1e-7
    # The output at x does not move to first order along the tangent.
    output_rate = torch.func.jvp(lambda p: ps.functional_call(model, p, x), (theta,), (tangent,))[1]
    assert float(output_rate.abs().max()) <= 1e-12 * float(ps.norm(tangent))


@pytest.mark.parametrize(
    ("activation", "lipschitz"), [("tanh", 1.0), ("sigmoid", 0.25), ("leaky_relu", 1.0)]
)
@pytest.mark.parametrize("seed", range(5))
def test_lipschitz_bound_of_prop_2_4_2(activation, lipschitz, seed):
    """Lip(U R_{σ(Vx)} R_{σ(gVx)}⁻¹ σ(gV ·)) ≤ η ‖U‖ ‖V‖ |σ(Vx)| ‖g‖ / |σ(gVx)|."""
    model = network(activation, [4, 5, 3], seed, bias=False)
    s = find(model, "nonlinear_GL")
    theta, x = ps.params_of(model), inputs(1, 4, seed)
    g = element(s, seed, scale=0.8)
    moved = s.act(theta, g, x)
    u, v = theta["2.weight"], theta["0.weight"]
    sigma = ps.nn.get_activation(activation)
    at_x, at_gx = sigma(v @ x[0]), sigma(g @ v @ x[0])
    spectral = lambda m: float(torch.linalg.matrix_norm(m, ord=2))  # noqa: E731
    bound = (
        lipschitz
        * spectral(u)
        * spectral(v)
        * float(at_x.norm())
        * spectral(g)
        / float(at_gx.norm())
    )
    a, b = inputs(4000, 4, seed + 10), inputs(4000, 4, seed + 20)
    b = a + 0.05 * (b - a)  # nearby pairs probe the local slope
    f = lambda z: ps.functional_call(model, moved, z)  # noqa: E731
    ratios = (f(a) - f(b)).norm(dim=1) / (a - b).norm(dim=1)
    assert float(ratios.max()) <= bound


def test_single_input_action_needs_one_input_and_a_nonzero_activation():
    model = network("tanh", [3, 4, 2], 0)
    s = find(model, "nonlinear_GL")
    theta = ps.params_of(model)
    with pytest.raises(ps.ShapeError, match="one input"):
        s.act(theta, s.identity(dtype=torch.float64), inputs(2, 3, 0))
    with pytest.raises(ps.InvalidArgumentError, match="input batch"):
        s.act(theta, s.identity(dtype=torch.float64))
    bias_free = network("tanh", [3, 4, 2], 0, bias=False)
    s = find(bias_free, "nonlinear_GL")
    with pytest.raises(ps.InvalidArgumentError, match="zero at this input"):
        s.act(
            ps.params_of(bias_free),
            s.identity(dtype=torch.float64),
            torch.zeros(3, dtype=torch.float64),
        )


def test_multilayer_action_is_the_product_of_the_per_layer_actions():
    """Prop A.3.5, re-derived (notes 001a §9.9): W_i ↦ g_i W_i R_{σ(Z_{i−1})}
    R⁻¹_{σ(g_{i−1}Z_{i−1})}, b_i ↦ g_i b_i, so that Z_i(g·θ) = g_i Z_i(θ) at x."""
    model = network("tanh", [3, 5, 4, 2], 1)
    first, second = find(model, "nonlinear_GL", "0->2"), find(model, "nonlinear_GL", "2->4")
    product = ps.ProductSymmetry([first, second])
    theta, x = ps.params_of(model), inputs(1, 3, 1)
    g1, g2 = element(first, 1), element(second, 2)
    moved = product.act(theta, (g1, g2), x)

    sigma = torch.tanh
    z1 = theta["0.weight"] @ x[0] + theta["0.bias"]
    z2 = theta["2.weight"] @ sigma(z1) + theta["2.bias"]

    def swap(a, b):  # R_a R_b⁻¹
        return householder_frame(a) @ torch.linalg.inv(householder_frame(b))

    expected = {
        "0.weight": g1 @ theta["0.weight"],
        "0.bias": g1 @ theta["0.bias"],
        "2.weight": g2 @ theta["2.weight"] @ swap(sigma(z1), sigma(g1 @ z1)),
        "2.bias": g2 @ theta["2.bias"],
        "4.weight": theta["4.weight"] @ swap(sigma(z2), sigma(g2 @ z2)),
        "4.bias": theta["4.bias"],
    }
    assert params_relative_error(moved, expected) <= 1e-12
    new_z1 = moved["0.weight"] @ x[0] + moved["0.bias"]
    new_z2 = moved["2.weight"] @ sigma(new_z1) + moved["2.bias"]
    assert torch.allclose(new_z2, g2 @ z2, atol=1e-12)
    assert relative_error(ps.functional_call(model, moved, x), model(x)) <= 1e-12


def test_deep_layer_uses_the_activations_of_the_layers_before_it():
    model = network("sigmoid", [3, 4, 6, 2], 4, parameterization="ntk")
    s = find(model, "nonlinear_GL", "2->4")
    theta, x = ps.params_of(model), inputs(1, 3, 4)
    moved = s.act(theta, element(s, 4), x)
    assert relative_error(ps.functional_call(model, moved, x), model(x)) <= 1e-12


# -- the pseudo-inverse batch action (Eqs. 2.54, 3.6, 4.16) ----------------------------------


@given(st.sampled_from(NONZERO_OFF_ZERO), st.integers(3, 7), st.integers(0, 999), st.data())
def test_pseudo_inverse_action_is_exact_when_k_at_most_h(activation, h, seed, data):
    k = data.draw(st.integers(1, h))
    model = network(activation, [4, h, 3], seed)
    s = find(model, "pinv_GL")
    theta, x = ps.params_of(model), inputs(k, 4, seed)
    moved, report = s.act_with_report(theta, element(s, seed), x)
    assert report.exact
    assert report.rank == k
    assert relative_error(ps.functional_call(model, moved, x), model(x)) <= 1e-10


@given(st.sampled_from(NONZERO_OFF_ZERO), st.integers(2, 5), st.integers(0, 999))
def test_pseudo_inverse_action_reports_and_bounds_its_change_when_k_exceeds_h(activation, h, seed):
    """Not exact for k > h: it says so, and Prop 3.4.1 ‖Uσ(VX) − U′σ(V′X)‖ ≤ ‖Uσ(VX)‖ holds."""
    model = network(activation, [4, h, 3], seed)
    s = find(model, "pinv_GL")
    theta, x = ps.params_of(model), inputs(h + 3, 4, seed)
    with pytest.warns(ps.ApproximateActionWarning, match="not exact") as record:
        moved = s.act(theta, element(s, seed, scale=1.0), x)
    _, report = s.act_with_report(theta, element(s, seed, scale=1.0), x)
    assert not report.exact
    assert f"{report.relative_change:.3e}" in str(record[0].message)
    sigma = ps.nn.get_activation(activation)
    before = sigma(x @ theta["0.weight"].T + theta["0.bias"]) @ theta["2.weight"].T
    after = sigma(x @ moved["0.weight"].T + moved["0.bias"]) @ moved["2.weight"].T
    assert float((before - after).norm()) <= float(before.norm()) * (1 + 1e-12)
    assert report.relative_change == pytest.approx(
        float((before - after).norm() / before.norm()), rel=1e-9
    )


def test_pseudo_inverse_action_composes_when_exact():
    model = network("tanh", [4, 6, 2], 3)
    s = find(model, "pinv_GL")
    theta, x = ps.params_of(model), inputs(4, 4, 3)
    g1, g2 = element(s, 1), element(s, 2)
    two_steps = s.act(s.act(theta, g2, x), g1, x)
    assert params_relative_error(s.act(theta, s.compose(g1, g2), x), two_steps) <= 1e-10


def test_example_a_3_7_activations_do_not_preserve_full_rank():
    """Ex. A.3.7: det Z ≠ 0 but det σ(Z) = 0, so a full-rank batch can lose rank under σ and
    the pseudo-inverse action is then not exact even with k = h."""
    s_slope = 0.3
    cases = {
        "sigmoid": torch.logit(torch.tensor([[0.2, 0.4], [0.4, 0.8]], dtype=torch.float64)),
        "tanh": torch.atanh(torch.tensor([[0.2, 0.4], [0.4, 0.8]], dtype=torch.float64)),
        "leaky_relu": torch.tensor([[s_slope, -1.0], [-1.0, s_slope]], dtype=torch.float64),
    }
    expected_det = {"sigmoid": -2.0862, "tanh": 0.0432, "leaky_relu": s_slope**2 - 1}
    for name, z in cases.items():
        sigma = (
            ps.nn.get_activation(name, negative_slope=s_slope)
            if name == "leaky_relu"
            else ps.nn.get_activation(name)
        )
        assert float(torch.linalg.det(z)) == pytest.approx(expected_det[name], abs=1e-4)
        assert abs(float(torch.linalg.det(sigma(z)))) <= 1e-15
        # A 2-2-1 network with V = I on X = I has H = I; g = Z makes σ(gH) singular.
        model = torch.nn.Sequential(
            torch.nn.Linear(2, 2, bias=False),
            sigma.make_module(),
            torch.nn.Linear(2, 1, bias=False),
        ).double()
        with torch.no_grad():
            model[0].weight.copy_(torch.eye(2))
        pinv = find(model, "pinv_GL")
        _, report = pinv.act_with_report(
            ps.params_of(model), z.T.contiguous(), torch.eye(2, dtype=torch.float64)
        )
        assert not report.exact
        assert report.rank == 1


# -- the inverse-activation batch action (Eq. 4.13) -------------------------------------------


@given(st.sampled_from(INVERTIBLE), st.integers(2, 6), st.integers(0, 999), st.data())
def test_inverse_activation_action_is_exact_when_k_at_most_n_plus_one(activation, h, seed, data):
    n = 4
    k = data.draw(st.integers(1, n + 1))
    model = network(activation, [n, h, 3], seed)
    s = find(model, "inverse_GL")
    theta, x, g = ps.params_of(model), inputs(k, n, seed), element(s, seed, scale=0.05)
    sigma = ps.nn.get_activation(activation)
    target = sigma(x @ theta["0.weight"].T + theta["0.bias"]) @ g.T
    if not bool(torch.isfinite(sigma.inverse(target)).all()):  # g σ(H) outside σ's image
        with pytest.raises(ps.InvalidGroupElementError, match="image"):
            s.act(theta, g, x)
        return
    moved, report = s.act_with_report(theta, g, x)
    assert report.exact
    assert relative_error(ps.functional_call(model, moved, x), model(x)) <= 1e-9


def test_inverse_activation_action_is_a_group_action_for_square_inputs():
    model = network("leaky_relu", [3, 5, 2], 2)
    s = find(model, "inverse_GL")
    theta, x = ps.params_of(model), inputs(4, 3, 2)  # k = n + 1: [X 1] square
    g1, g2 = element(s, 1), element(s, 2)
    assert params_relative_error(s.act(theta, s.identity(dtype=torch.float64), x), theta) <= 1e-12
    two_steps = s.act(s.act(theta, g2, x), g1, x)
    assert params_relative_error(s.act(theta, s.compose(g1, g2), x), two_steps) <= 1e-10


def test_inverse_activation_action_reports_inexact_batches_and_leaving_the_image():
    leaky = network("leaky_relu", [3, 5, 2], 5)  # image R: only the batch size matters
    s = find(leaky, "inverse_GL")
    with pytest.warns(ps.ApproximateActionWarning, match="k=9 samples"):
        s.act(ps.params_of(leaky), element(s, 5, scale=0.05), inputs(9, 3, 5))
    bounded = network("tanh", [3, 5, 2], 5)
    s = find(bounded, "inverse_GL")
    with pytest.raises(ps.InvalidGroupElementError, match="image of tanh"):
        s.act(ps.params_of(bounded), 3.0 * torch.eye(5, dtype=torch.float64), inputs(3, 3, 5))


# -- detection -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("activation", "families"),
    [
        ("tanh", ["nonlinear_GL", "pinv_GL", "inverse_GL"]),
        ("leaky_relu", ["nonlinear_GL", "pinv_GL", "inverse_GL"]),
        ("sigmoid", ["nonlinear_GL", "pinv_GL", "inverse_GL"]),
        ("gelu", ["nonlinear_GL", "pinv_GL"]),
        ("relu", []),  # zero on a half-line and not injective
        ("identity", []),  # the exact GL(h) covers it
        ("radial", []),  # not pointwise
    ],
)
def test_data_dependent_actions_are_offered_only_when_asked_and_applicable(activation, families):
    model = ps.mlp([3, 4, 2], activation=activation)
    assert not any(s.data_dependent for s in ps.symmetries(model))
    found = [s for s in ps.symmetries(model, data_dependent=True) if s.data_dependent]
    assert [s.name for s in found] == [f"{f}[0->2]" for f in families]
    assert all(s.dim == 16 and not s.linear for s in found)
    assert [s.exact for s in found] == [f == "nonlinear_GL" for f in families]


def test_data_dependent_actions_need_the_model_input():
    """In a block whose input is not the model's input, the actions are not offered."""

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.body = ps.mlp([3, 4, 2], activation="tanh")

        def forward(self, x):
            return self.body(2 * x)

    found = ps.symmetries(Net(), data_dependent=True)
    assert not any(s.data_dependent for s in found)
    assert math.isfinite(len(found))


@given(
    st.sampled_from(["pinv_GL", "inverse_GL"]),
    st.sampled_from(INVERTIBLE),
    st.sampled_from(["0->2", "2->4"]),
    st.integers(1, 9),
    st.booleans(),
    st.integers(0, 10_000),
)
def test_closed_form_tangents_match_the_jvp_of_the_action(family, activation, layer, k, bias, seed):
    """The closed-form tangents (pseudo-inverse derivative at constant rank) equal forward-mode
    autodiff through the action, for batches smaller, equal to and larger than the width."""
    model = network(activation, [3, 5, 4, 2], seed, bias=bias)
    s = find(model, family, layer)
    theta = ps.params_of(model)
    x = inputs(k, 3, seed)
    xi = torch.randn(s.dim, generator=torch.Generator().manual_seed(seed + 1), dtype=torch.float64)
    closed, oracle = s.tangent(theta, xi, x), s.jvp_tangent(theta, xi, x)
    assert params_relative_error(closed, oracle) <= 1e-9
