"""Conserved quantities of gradient flow (dissertation ch. 2, App. A) in float64, against dense
oracles and the dynamics themselves:

* the moment map of every linear symmetry: closed form = generic VJP = dense tangent matrix;
  Q_M = ⟨θ, M·θ⟩ literally; the transposition certificate accepts closed families and rejects
  a shear;
* conservation along gradient flow, integrated with DOP853 at rtol 1e-12 (smooth activations),
  with a quantity that is *not* conserved moving by O(1) as the control;
* the exact GD drift ΔQ = η²Q(∇L) after real steps (also through ReLU kinks), the O(η³) error
  of the Taylor prediction for Eq. 2.17, the tracker;
* Thm 2.5.6 (and the symmetric part as a negative control); init_with_q; the Xavier statistics
  by Monte Carlo (with the erratum E[Q] = (m − h)/2); flat minima and √(Q² + 4); Prop 2.7.3.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest
import scipy.integrate
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch import Tensor, nn

import paramsym as ps
from helpers import randomize_, relative_error
from paramsym.conserved import (
    ConservedTracker,
    ElementwiseQ,
    MomentMap,
    RadialReparameterization,
    angular_momentum,
    conservation_residual,
    conserved_quantities,
    flat_minimum,
    gaussian_moments,
    gd_drift,
    imbalance,
    init_with_q,
    moment_map,
    noether_charge,
    predicted_drift,
    q_init_scales,
    sample_xavier_q,
    scalar_linear_minimum,
    scalar_linear_sharpness,
    spectral_init,
    spectral_rate_bound,
    spectral_sigma,
    xavier_q_statistics,
)
from paramsym.conserved.base import loss_gradient
from paramsym.curvature import loss_function
from paramsym.symmetry import ProductSymmetry, QuadraticOrthogonal, Symmetry

F64 = torch.float64


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def mse(output: Tensor, target: Tensor) -> Tensor:
    return ((output - target) ** 2).mean()


def half_sum_squares(output: Tensor, target: Tensor) -> Tensor:
    return 0.5 * ((output - target) ** 2).sum()


def _mlp(widths, activation, *, bias=True, seed=0, std=0.7, **kw) -> nn.Sequential:
    model = ps.mlp(list(widths), ps.nn.get_activation(activation, **kw), bias=bias, dtype=F64)
    randomize_(model, _gen(seed), std=std)
    return model


def _batch(n: int, inputs: int, outputs: int, seed: int = 1):
    g = _gen(seed)
    return torch.randn(n, inputs, generator=g, dtype=F64), torch.randn(
        n, outputs, generator=g, dtype=F64
    )


def _family_batch(model: nn.Module, n: int = 6, seed: int = 1):
    """A regression batch shaped for ``model`` (sequence inputs for attention)."""
    if isinstance(model, ps.nn.MultiHeadAttention):
        g = _gen(seed)
        shape = (2, 3, model.d_model)
        return torch.randn(shape, generator=g, dtype=F64), torch.randn(
            shape, generator=g, dtype=F64
        )
    if isinstance(model, RadialReparameterization):
        return torch.eye(model.V.shape[0], dtype=F64), torch.randn(
            model.V.shape[0], model.U.shape[0], generator=_gen(seed), dtype=F64
        )
    inputs = next(p for p in model.parameters() if p.ndim == 2).shape[1]
    outputs = model(torch.zeros(1, inputs, dtype=F64)).shape[1]
    return _batch(n, inputs, outputs, seed)


def _continuous(model: nn.Module) -> list[Symmetry]:
    return [s for s in ps.symmetries(model) if s.dim > 0]


# -- models with linear symmetries ----------------------------------------------------------------


def _layernorm_model() -> nn.Sequential:
    model = nn.Sequential(
        nn.Linear(3, 4), nn.LayerNorm(4, eps=0.0, elementwise_affine=False), nn.Tanh(),
        nn.Linear(4, 2),
    ).double()  # fmt: skip
    randomize_(model, _gen(3), std=0.4)
    return model


def _lora_model() -> nn.Sequential:
    model = nn.Sequential(
        ps.nn.LoRALinear(4, 5, rank=2, dtype=F64), nn.Tanh(), nn.Linear(5, 2, dtype=F64)
    )
    randomize_(model, _gen(4))
    return model


def _attention_model() -> nn.Module:
    model = ps.nn.MultiHeadAttention(4, num_heads=2).double()
    randomize_(model, _gen(5))
    return model


LINEAR_FAMILIES: dict[str, Callable[[], nn.Module]] = {
    "GL": lambda: _mlp([3, 4, 3, 2], "identity"),
    "GL_no_bias": lambda: _mlp([3, 5, 2], "identity", bias=False),
    "rescaling_relu": lambda: _mlp([3, 5, 2], "relu"),
    "rescaling_cubic": lambda: _mlp([3, 4, 2], "monomial", power=3, std=0.4),
    "rescaling_square": lambda: _mlp([3, 4, 2], "monomial", power=2, std=0.4),
    "layernorm_scale": _layernorm_model,
    "lora": _lora_model,
    "attention": _attention_model,
    "radial_reparam": lambda: RadialReparameterization(3, 3, 4, dtype=F64, generator=_gen(6)),
}


@pytest.mark.parametrize("family", sorted(LINEAR_FAMILIES))
def test_moment_map_closed_form_generic_and_dense_agree(family):
    model = LINEAR_FAMILIES[family]()
    theta = ps.params_of(model)
    found = [s for s in _continuous(model) if not isinstance(s, ps.HiddenOrthogonal)]
    assert found
    for s in found:
        dense = ps.tangent_matrix(s, theta) @ ps.flatten(theta)  # ⟨θ, A(e_k)θ⟩ for every k
        generic = moment_map(s, theta, method="generic")
        closed = moment_map(s, theta, method="closed_form")
        assert relative_error(generic, dense) <= 1e-13, s.name
        assert relative_error(closed, dense) <= 1e-13, s.name
        xi = torch.randn(s.dim, generator=_gen(7), dtype=F64)
        assert relative_error(noether_charge(s, theta, xi), closed @ xi) <= 1e-12
        assert conservation_residual(s, theta) <= 1e-12, s.name


def test_approximate_symmetries_give_approximate_quantities_and_say_so():
    """BatchNorm with eps > 0 is scale invariant only approximately (norm_scaling, exact=False):
    its row norms are still computed, with a warning; the affine BN → ReLU rescaling is exact."""
    model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.ReLU(), nn.Linear(4, 2)).double()
    randomize_(model, _gen(2))
    theta = ps.params_of(model)
    norm_scaling, rescaling = _continuous(model)
    assert not norm_scaling.exact
    with pytest.warns(ps.conserved.ApproximateConservationWarning, match="eps"):
        q = MomentMap(norm_scaling)
    assert not q.exact
    dense = ps.tangent_matrix(norm_scaling, theta) @ ps.flatten(theta)
    assert relative_error(q(theta), dense) <= 1e-14
    w, b = theta["0.weight"], theta["0.bias"]
    assert relative_error(q(theta), (w * w).sum(1) + b * b) <= 1e-14
    assert MomentMap(rescaling).exact  # no warning: BN's γ, β and the next layer


def test_imbalance_is_the_paper_formula():
    """μ_i = W_iW_iᵀ + b_ib_iᵀ − W_{i+1}ᵀW_{i+1} (A.2.9); diag[VVᵀ − αUᵀU] (Ex. 2.5.4)."""
    linear = _mlp([3, 4, 3, 2], "identity")
    p = ps.params_of(linear)
    got = imbalance(linear)
    for name, (w, b, nxt) in {
        "GL[0->2]": ("0.weight", "0.bias", "2.weight"),
        "GL[2->4]": ("2.weight", "2.bias", "4.weight"),
    }.items():
        expected = p[w] @ p[w].T + torch.outer(p[b], p[b]) - p[nxt].T @ p[nxt]
        assert relative_error(got[name], expected) <= 1e-14
    cubic = _mlp([3, 4, 2], "monomial", power=3, bias=False)
    q = ps.params_of(cubic)
    v, u = q["0.weight"], q["2.weight"]
    expected = torch.diagonal(v @ v.T - 3.0 * u.T @ u)
    assert relative_error(imbalance(cubic)["rescaling[0->2]"], expected) <= 1e-14
    assert imbalance(_mlp([3, 4, 2], "tanh")) == {}  # no linear continuous symmetry


@given(
    activation=st.sampled_from(["identity", "relu", "leaky_relu"]),
    widths=st.lists(st.integers(1, 5), min_size=3, max_size=5),
    bias=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_moment_map_of_products_of_hidden_layers(activation, widths, bias, seed):
    """The multi-layer hidden group ∏ GL(n_i) (or ∏ rescalings): μ is the concatenation."""
    model = _mlp(widths, activation, bias=bias, seed=seed)
    theta = ps.params_of(model)
    product = ProductSymmetry(_continuous(model))
    mu = MomentMap(product)
    dense = ps.tangent_matrix(product, theta) @ ps.flatten(theta)
    assert relative_error(mu(theta), dense) <= 1e-13
    assert relative_error(MomentMap(product, method="generic")(theta), dense) <= 1e-13
    parts = mu.split(mu(theta))
    assert len(parts) == len(product.factors)
    assert float(mu.trace(mu(theta))) == pytest.approx(
        sum(float(p.diagonal().sum()) if p.ndim == 2 else float(p.sum()) for p in parts)
    )


# -- symmetries without (the right) conserved quantities ------------------------------------------


class _PlaneAction(Symmetry):
    """exp(tA) acting linearly on a parameter ``w`` of shape (2,): a user's own family."""

    def __init__(self, generator: Tensor) -> None:
        super().__init__(name="plane", group="R", dim=1)
        self.generator = generator

    @property
    def parameter_names(self):
        return ("w",)

    def identity(self, dtype=None, device=None):
        return torch.zeros(1, dtype=dtype or F64)

    def sample(self, scale=0.1, generator=None, dtype=None, device=None):
        return scale * torch.randn(1, generator=generator, dtype=dtype or F64)

    def exp(self, xi):
        return self.check_xi(xi)

    def compose(self, g1, g2):
        return g1 + g2

    def inverse(self, g):
        return -g

    def check_element(self, g):
        return g

    def act(self, params, g, x=None):
        out = dict(params)
        out["w"] = torch.linalg.matrix_exp(g[0] * self.generator.to(g)) @ params["w"]
        return out


class _Pair(nn.Module):
    """f(x) = combine(w) · x for a parameter w ∈ R²."""

    def __init__(self, combine: Callable[[Tensor], Tensor]) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.tensor([0.8, -1.3], dtype=F64))
        self.combine = combine

    def forward(self, x: Tensor) -> Tensor:
        return self.combine(self.w) * x


def test_generic_family_is_certified_before_use():
    """Scaling (w₁, w₂) ↦ (c w₁, w₂/c) of f = w₁w₂x: symmetric generator, Q = w₁² − w₂²
    conserved. Shear (w₁ + t w₂, w₂) of f = w₂x: Q = w₁w₂ is not conserved (ẇ₁ = 0, ẇ₂ ≠ 0)."""
    scaling = _PlaneAction(torch.tensor([[1.0, 0.0], [0.0, -1.0]], dtype=F64))
    model = _Pair(lambda w: w[0] * w[1])
    theta = ps.params_of(model)
    assert conservation_residual(scaling, theta) <= 1e-14
    w = theta["w"]
    assert float(conserved_quantities(model, scaling)) == pytest.approx(
        float(w[0] ** 2 - w[1] ** 2)
    )
    with pytest.raises(ps.InvalidArgumentError, match="check_params"):
        MomentMap(scaling)  # no proof for a user's family without a point to check it at

    shear = _PlaneAction(torch.tensor([[0.0, 1.0], [0.0, 0.0]], dtype=F64))
    sheared = _Pair(lambda w: w[1])
    assert conservation_residual(shear, ps.params_of(sheared)) > 0.1
    with pytest.raises(ps.InvalidArgumentError, match="not conserved"):
        conserved_quantities(sheared, shear)
    # ... and indeed the flow moves it: dQ/dt = w₁ ẇ₂ ≠ 0
    x, y = torch.ones(1, dtype=F64), torch.tensor([3.0], dtype=F64)
    gradient = loss_gradient(sheared, mse, (x, y), ps.params_of(sheared))
    v = ps.params_of(sheared)["w"]
    assert abs(float(-(gradient["w"] * torch.stack([v[1], v[0]])).sum())) > 0.1


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: ps.symmetries(_mlp([3, 4, 2], "tanh"))[0], "discrete"),
        (lambda: ps.symmetries(_mlp([3, 4, 2], "radial"))[0], "antisymmetric"),
        (lambda: ps.symmetries(_mlp([3, 4, 2], "tanh"), data_dependent=True)[-1], "linear"),
        (lambda: QuadraticOrthogonal("w", torch.tensor([[2.0, 0.3], [0.3, 1.0]])), "antisym"),
        (lambda: ps.symmetry.DistributionSymmetry("0.weight", torch.ones(3)), "distribution"),
    ],
)
def test_symmetries_without_quadratic_conserved_quantities_are_refused(make, match):
    with pytest.raises(ps.InvalidArgumentError, match=match):
        MomentMap(make())


def test_quadratic_orthogonal_generators_are_not_transpose_closed():
    """A^{-1/2} M A^{1/2} with M antisymmetric is not antisymmetric for non-scalar A: its
    ⟨w, A(M)w⟩ is nonzero but not conserved (the certificate's negative control)."""
    s = QuadraticOrthogonal("w", torch.tensor([[2.0, 0.3, 0.0], [0.3, 1.0, 0.2], [0.0, 0.2, 3.0]]))
    theta = {"w": torch.tensor([0.7, -0.4, 1.1], dtype=F64)}
    assert float(torch.linalg.vector_norm(ps.tangent_matrix(s, theta) @ theta["w"])) > 0.1
    assert conservation_residual(s, theta) > 0.01


# -- conservation along gradient flow -------------------------------------------------------------


def gradient_flow(model: nn.Module, loss_fn, batch, t_end: float, params=None):
    """θ(t_end) of θ̇ = −∇L by DOP853 at rtol = atol = 1e-12 (one autograd pass per step)."""
    point = ps.params_of(model) if params is None else params
    loss = loss_function(model, loss_fn, batch)

    def rhs(_t: float, w: np.ndarray) -> np.ndarray:
        leaf = torch.from_numpy(w).requires_grad_(True)
        (g,) = torch.autograd.grad(loss(ps.unflatten(leaf, point)), leaf)
        return -g.numpy()

    solution = scipy.integrate.solve_ivp(
        rhs, (0.0, t_end), ps.flatten(point).numpy(), method="DOP853", rtol=1e-12, atol=1e-12
    )
    assert solution.success
    return ps.unflatten(torch.from_numpy(solution.y[:, -1].copy()), point)


FLOW_FAMILIES = {  # smooth activations: the adaptive integrator chatters at ReLU kinks
    "GL": ("GL", 2.0),
    "rescaling_cubic": ("rescaling_cubic", 0.3),
    "rescaling_square": ("rescaling_square", 0.5),
    "layernorm_scale": ("layernorm_scale", 1.0),
    "lora": ("lora", 2.0),
}


@pytest.mark.parametrize("family", sorted(FLOW_FAMILIES))
def test_moment_map_is_constant_along_gradient_flow(family):
    model = LINEAR_FAMILIES[FLOW_FAMILIES[family][0]]()
    theta = ps.params_of(model)
    batch = _family_batch(model)
    end = gradient_flow(model, mse, batch, FLOW_FAMILIES[family][1])
    assert ps.norm(ps.sub(end, theta)) / ps.norm(theta) > 0.02  # the flow really moved
    for s in _continuous(model):
        q = MomentMap(s)
        change = float(torch.linalg.vector_norm(q(end) - q(theta))) / float(q.magnitude(theta))
        assert change <= 1e-10, s.name
        control = float(ps.norm(end) ** 2 - ps.norm(theta) ** 2)  # ‖θ‖² is not conserved
        assert abs(control) / float(q.magnitude(theta)) > 1e-3


def test_only_the_diagonal_is_conserved_for_homogeneous_activations():
    """Negative control: the off-diagonal of VVᵀ − αUᵀU moves for a cubic activation."""
    model = _mlp([3, 4, 2], "monomial", power=3, bias=False, std=0.4)
    theta = ps.params_of(model)
    end = gradient_flow(model, mse, _batch(6, 3, 2), 0.3)

    def full(p):
        return p["0.weight"] @ p["0.weight"].T - 3.0 * p["2.weight"].T @ p["2.weight"]

    change = full(end) - full(theta)
    assert float(torch.diagonal(change).abs().max()) <= 1e-10 * float(full(theta).abs().max())
    assert float((change - torch.diag(torch.diagonal(change))).abs().max()) > 1e-3


def _whitened(n: int, outputs: int, seed: int = 2):
    x = torch.eye(n, dtype=F64)[torch.randperm(n, generator=_gen(seed))]
    return x, torch.randn(n, outputs, generator=_gen(seed + 1), dtype=F64)


@pytest.mark.parametrize("activation", ["identity", "sigmoid", "tanh"])
def test_elementwise_q_is_constant_along_gradient_flow(activation):
    """Eq. 2.17, per neuron, with X = I (rows shuffled) and two layers after the hidden one."""
    model = nn.Sequential(
        nn.Linear(4, 5, bias=False), ps.nn.get_activation(activation).make_module(),
        nn.Linear(5, 3), nn.Tanh(), nn.Linear(3, 2),
    ).double()  # fmt: skip
    randomize_(model, _gen(8), std=0.5)
    q = ElementwiseQ(model, per_neuron=True)
    x, y = _whitened(4, 2)
    q.check_inputs(x)
    theta = ps.params_of(model)
    end = gradient_flow(model, mse, (x, y), 3.0)
    assert float(ps.norm(ps.sub(end, theta))) > 0.05
    change = float(torch.linalg.vector_norm(q(end) - q(theta))) / float(q.magnitude(theta))
    assert change <= 1e-10
    # the control: the two terms move separately by much more
    moved = float(torch.linalg.vector_norm(q.terms(end)[0] - q.terms(theta)[0]))
    assert moved / float(q.magnitude(theta)) > 1e-3


def test_elementwise_q_needs_whitened_input_and_no_bias():
    model = _mlp([4, 5, 2], "tanh", bias=False)
    q = ElementwiseQ(model)
    with pytest.raises(ps.InvalidArgumentError, match="whitened"):
        q.check_inputs(2.0 * torch.eye(4, dtype=F64))
    with pytest.raises(ps.ShapeError, match="whitened"):
        q.check_inputs(torch.eye(3, dtype=F64))
    with pytest.raises(ps.InvalidArgumentError, match="bias"):
        ElementwiseQ(_mlp([4, 5, 2], "tanh", bias=True))
    with pytest.raises(ps.InvalidArgumentError, match="antiderivative"):
        ElementwiseQ(_mlp([4, 5, 2], "gelu", bias=False))
    # with whitened input it is conserved; with other input the same flow moves it
    x, y = _batch(4, 4, 2)
    end = gradient_flow(model, mse, (x, y), 2.0)
    assert abs(float(q(end) - q(ps.params_of(model)))) > 1e-3


def test_elementwise_q_matches_the_imbalance_for_linear_activations():
    """Q_a = −½ μ_aa for identity and leaky_relu (the paper's sign vs A.2.9's)."""
    for activation in ("identity", "leaky_relu"):
        model = _mlp([4, 5, 2], activation, bias=False)
        theta = ps.params_of(model)
        q = ElementwiseQ(model, per_neuron=True)(theta)
        mu = MomentMap(_continuous(model)[0])(theta)
        mu_diagonal = torch.diagonal(mu) if mu.ndim == 2 else mu
        assert relative_error(q, -0.5 * mu_diagonal) <= 1e-14


# -- drift under gradient descent ------------------------------------------------------------------


def _gd_step(model, loss_fn, batch, lr):
    theta = ps.params_of(model)
    gradient = loss_gradient(model, loss_fn, batch, theta)
    return {k: theta[k] - lr * gradient[k] for k in theta}


@pytest.mark.parametrize("family", sorted(LINEAR_FAMILIES))
def test_one_gd_step_moves_the_moment_map_by_exactly_eta_squared(family):
    model = LINEAR_FAMILIES[family]()
    theta = ps.params_of(model)
    batch = _family_batch(model)
    lr = 0.3
    after = _gd_step(model, mse, batch, lr)
    for s in _continuous(model):
        if isinstance(s, ps.HiddenOrthogonal):
            continue
        q = MomentMap(s)
        drift = gd_drift(model, mse, batch, s, lr)
        assert drift.exact
        measured = q(after) - q(theta)
        assert float(torch.linalg.vector_norm(measured)) > 1e-8  # GD does move it ...
        scale = float(q.magnitude(theta) + q.magnitude(after))  # rounding of Q at θ and θ′
        assert float((measured - drift.change).abs().max()) <= 1e-13 * scale  # ... by η²Q(∇L)
        taylor = gd_drift(model, mse, batch, s, lr, method="taylor")  # forward-over-forward
        assert float((taylor.change - drift.change).abs().max()) <= 1e-13 * scale


def test_gd_drift_of_two_layer_linear_net_is_prop_a41():
    """Δ(UᵀU − VVᵀ) = η²(G_UᵀG_U − G_VG_Vᵀ) (Prop A.4.1, matrix form)."""
    model = _mlp([3, 5, 2], "identity", bias=False)
    batch = _batch(7, 3, 2)
    theta = ps.params_of(model)
    gradient = loss_gradient(model, mse, batch, theta)
    lr = 0.2
    after = _gd_step(model, mse, batch, lr)

    def q(p):
        return p["2.weight"].T @ p["2.weight"] - p["0.weight"] @ p["0.weight"].T

    g_u, g_v = gradient["2.weight"], gradient["0.weight"]
    expected = lr**2 * (g_u.T @ g_u - g_v @ g_v.T)
    assert relative_error(q(after) - q(theta), expected) <= 1e-11


@pytest.mark.parametrize("activation", ["relu", "leaky_relu"])
def test_exact_drift_accounts_for_every_step_through_relu_kinks(activation):
    """Small-step integration of a piecewise-linear net: 400 GD steps of η = 5e-3; the total
    change of the per-neuron Q equals Σ η²Q(∇L_t) to rounding, and is O(η) small."""
    model = _mlp([3, 6, 2], activation, seed=11)
    batch = _batch(8, 3, 2, seed=12)
    symmetry = _continuous(model)[0]
    q = MomentMap(symmetry)
    tracker = ConservedTracker(model, symmetry, every=100, loss_fn=mse, batch=batch, lr=5e-3)
    optimizer = torch.optim.SGD(model.parameters(), lr=5e-3)
    start = {k: t.clone() for k, t in ps.params_of(model).items()}
    q0 = q(start)
    for step in range(401):
        tracker(step)
        if step == 400:
            break
        optimizer.zero_grad()
        mse(model(batch[0]), batch[1]).backward()
        optimizer.step()
    end = ps.params_of(model)
    assert ps.norm(ps.sub(end, start)) / ps.norm(start) > 0.05
    h = tracker.history
    assert h["step"] == [0, 100, 200, 300, 400]
    assert tracker.predicted_exact
    assert h["change"][-1] > 0  # GD is not GF ...
    assert h["change"][-1] / float(q.magnitude(start)) < 5e-3  # ... but close, O(η)
    assert abs(h["change"][-1] - h["predicted_change"][-1]) <= 1e-12 * float(q.magnitude(start))
    assert h["change"][-1] == pytest.approx(float(torch.linalg.vector_norm(q(end) - q0)))
    assert h["loss"][-1] < h["loss"][0]


@pytest.mark.parametrize("activation", ["sigmoid", "tanh"])
def test_elementwise_drift_is_second_order(activation):
    """For non-quadratic Q, ½η²D²Q[∇L, ∇L] leaves an O(η³) error: halving η divides it by ~8."""
    model = _mlp([4, 6, 3], activation, bias=False, seed=13)
    x, y = _whitened(4, 3)
    q = ElementwiseQ(model)
    errors = []
    for lr in (2e-2, 1e-2):
        drift = gd_drift(model, mse, (x, y), q, lr)
        assert not drift.exact
        measured = q(_gd_step(model, mse, (x, y), lr)) - q(ps.params_of(model))
        assert abs(float(drift.change)) > 1e-9
        errors.append(abs(float(measured - drift.change)))
        assert errors[-1] < 0.05 * abs(float(drift.change))
    assert errors[1] / errors[0] < 0.2  # O(η³): 1/8; O(η²) would give 1/4
    with pytest.raises(ps.InvalidArgumentError, match="not a quadratic"):
        gd_drift(model, mse, (x, y), q, 0.1, method="quadratic")


def test_elementwise_drift_for_relu_is_exact_between_kinks():
    """½ max(v, 0)² is quadratic on each side of 0: no entry of V changes sign in a small step,
    so the Taylor prediction is exact to rounding there (still flagged ``exact=False``)."""
    model = _mlp([4, 6, 3], "relu", bias=False, seed=13)
    x, y = _whitened(4, 3)
    q = ElementwiseQ(model)
    drift = gd_drift(model, mse, (x, y), q, 1e-3)
    after = _gd_step(model, mse, (x, y), 1e-3)
    assert torch.equal(after["0.weight"] > 0, ps.params_of(model)["0.weight"] > 0)
    assert not drift.exact
    measured = q(after) - q(ps.params_of(model))
    assert abs(float(measured - drift.change)) <= 1e-13 * float(q.magnitude(after))
    assert abs(float(drift.change)) > 1e-10


def test_tracker_records_the_normalised_change_of_eq_2_17():
    """ΔQ̃ = (Q(t) − Q(0)) / (|½Tr UᵀU| + |Σ∫σ/σ′|) at t = 0 (App. A.4.2)."""
    model = _mlp([4, 5, 2], "tanh", bias=False, seed=14)
    x, y = _whitened(4, 2)
    q = ElementwiseQ(model)
    tracker = ConservedTracker(model, q, every=5, loss_fn=mse, batch=(x, y))
    theta0 = ps.params_of(model)
    q0, norm0 = float(q(theta0)), sum(abs(float(t.sum())) for t in q.terms(theta0))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    for step in range(11):
        assert tracker(step) == (step % 5 == 0)
        optimizer.zero_grad()
        mse(model(x), y).backward()
        optimizer.step()
    h = tracker.history
    assert h["step"] == [0, 5, 10]
    q10 = h["value"][-1]
    assert h["relative_trace_change"][-1] == pytest.approx((q10 - q0) / norm0, rel=1e-12)
    assert h["relative_trace_change"][0] == 0.0
    with pytest.raises(ps.InvalidArgumentError, match="whitened"):
        ConservedTracker(model, q, loss_fn=mse, batch=_batch(4, 4, 2))
    with pytest.raises(ps.InvalidArgumentError, match="loss_fn"):
        ConservedTracker(model, q, lr=0.1)
    strict = ConservedTracker(model, q, loss_fn=mse, batch=(x, y), lr=0.1)
    strict(0)
    with pytest.raises(ps.InvalidArgumentError, match="before every step"):
        strict(2)


# -- radial networks: Thm 2.5.6 --------------------------------------------------------------------


@pytest.mark.parametrize(("widths", "bias"), [((3, 4, 2), False), ((3, 4, 4, 2), True)])
def test_angular_momentum_identity_and_its_symmetric_control(widths, bias):
    model = _mlp(widths, "radial", bias=bias, seed=15)
    batch = _batch(7, widths[0], widths[-1], seed=16)
    theta = ps.params_of(model)
    orthogonal = [s for s in ps.symmetries(model) if isinstance(s, ps.HiddenOrthogonal)]
    assert len(orthogonal) == len(widths) - 2
    velocity = ps.core.randn_like(theta, _gen(17))
    for s in orthogonal:
        result = angular_momentum(model, mse, batch, s)
        assert result.relative_residual <= 1e-14  # VV̇ᵀ − V̇Vᵀ + UᵀU̇ − U̇ᵀU = 0
        assert result.relative_symmetric > 1e-2  # no conserved quantity: μ moves
        # Oracle at an arbitrary velocity, where ν ≠ 0: ⟨θ̇, tangent(θ, E_ij − E_ji)⟩ = −ν_ij
        # (so(h) coordinates, i < j), the Noether pairing the identity sets to zero on GF.
        free = angular_momentum(model, None, None, s, velocity=velocity)
        assert torch.equal(free.residual, -free.residual.T)
        assert free.relative_residual > 1e-2
        rows, cols = torch.triu_indices(s.width, s.width, offset=1)
        for k, (i, j) in enumerate(zip(rows.tolist(), cols.tolist(), strict=True)):
            xi = torch.zeros(s.dim, dtype=F64)
            xi[k] = 1.0
            pairing = ps.inner(velocity, s.tangent(theta, xi))
            assert abs(float(pairing + free.residual[i, j])) <= 1e-13 * free.scale


def test_angular_momentum_of_one_plane_matches_the_explicit_formula():
    """Thm 2.5.6 spelled out for U σ(Vx) without biases, at an arbitrary velocity."""
    model = _mlp([3, 4, 2], "radial", bias=False, seed=17)
    theta = ps.params_of(model)
    velocity = ps.core.randn_like(theta, _gen(18))
    result = angular_momentum(model, None, None, velocity=velocity)
    v, u = theta["0.weight"], theta["2.weight"]
    dv, du = velocity["0.weight"], velocity["2.weight"]
    assert relative_error(result.residual, v @ dv.T - dv @ v.T + u.T @ du - du.T @ u) <= 1e-14
    assert relative_error(result.symmetric, v @ dv.T + dv @ v.T - u.T @ du - du.T @ u) <= 1e-14


def test_angular_momentum_for_a_linear_net_has_both_parts_zero():
    model = _mlp([3, 4, 2], "identity", seed=19)
    result = angular_momentum(model, mse, _batch(6, 3, 2))
    assert result.relative_residual <= 1e-14
    assert result.relative_symmetric <= 1e-14  # GL: the imbalance is conserved as well


# -- initialising with a chosen Q ------------------------------------------------------------------


def _outputs(model: nn.Module, inputs: int) -> Tensor:
    return model(torch.randn(9, inputs, generator=_gen(20), dtype=F64))


@pytest.mark.parametrize(
    ("family", "target"),
    [
        ("GL", -3.0),
        ("GL", [0.5, -1.0, 2.0, 0.0]),
        ("rescaling_relu", 1.5),
        ("rescaling_relu", [1.0, -0.5, 0.25, 2.0, -3.0]),
        ("rescaling_cubic", [0.4, -0.2, 1.0, -2.0]),  # α = 3: powers (1, −3), brentq
        ("rescaling_cubic", -1.0),
        ("layernorm_scale", 7.0),
        ("lora", [0.3, -0.6]),
    ],
)
def test_init_with_q_by_the_group_action_hits_the_target_and_keeps_the_function(family, target):
    model = LINEAR_FAMILIES[family]()
    inputs = next(p for p in model.parameters() if p.ndim == 2).shape[1]
    before = _outputs(model, inputs)
    symmetry = _continuous(model)[0]
    result = init_with_q(model, target, symmetry)
    assert result.exact
    assert result.function_preserved
    assert relative_error(_outputs(model, inputs), before) <= 1e-13
    mu = MomentMap(symmetry)(ps.params_of(model))
    achieved = mu.diagonal() if mu.ndim == 2 else mu
    goal = torch.as_tensor(target, dtype=F64)
    value = achieved.sum() if goal.ndim == 0 else achieved
    assert relative_error(value, goal) <= 1e-12 or float((value - goal).abs().max()) <= 1e-12
    assert result.achieved == pytest.approx(result.target, abs=1e-12)


@pytest.mark.parametrize("activation", ["identity", "relu", "leaky_relu"])
def test_init_with_q_sets_eq_2_17_by_rescaling(activation):
    model = _mlp([4, 5, 2], activation, bias=False, seed=21)
    before = _outputs(model, 4)
    total = init_with_q(model, -1.25, ElementwiseQ(model))
    assert float(ElementwiseQ(model)(ps.params_of(model))) == pytest.approx(-1.25, abs=1e-12)
    per_neuron = ElementwiseQ(model, per_neuron=True)
    target = [0.1, -0.2, 0.3, 0.0, 1.0]
    init_with_q(model, target, per_neuron)
    assert per_neuron(ps.params_of(model)).tolist() == pytest.approx(target, abs=1e-12)
    assert relative_error(_outputs(model, 4), before) <= 1e-13
    assert total.quantity.startswith("elementwise")


def test_init_with_q_refuses_what_it_cannot_do():
    sigmoid = _mlp([4, 5, 2], "sigmoid", bias=False)
    with pytest.raises(ps.InvalidArgumentError, match="variance"):
        init_with_q(sigmoid, 1.0, ElementwiseQ(sigmoid))
    dead = _mlp([3, 4, 2], "relu", bias=False)
    with torch.no_grad():
        dead[0].weight[1].zero_()  # neuron 1 has no incoming weight: μ_1 = −‖U_1‖² < 0
    with pytest.raises(ps.InvalidArgumentError, match="neuron 1"):
        init_with_q(dead, [0.1, 0.5, 0.2, 0.3])
    init_with_q(dead, [0.1, -0.5, 0.2, 0.3])  # a negative value it can reach
    with pytest.raises(ps.ShapeError, match="one value per"):
        init_with_q(_mlp([3, 4, 2], "relu"), [1.0, 2.0])
    with pytest.raises(ps.InvalidArgumentError, match="variance"):
        init_with_q(
            _mlp([3, 4, 2], "relu"),
            1.0,
            method="variance",
            quantity=_continuous(_mlp([3, 4, 2], "relu"))[0],
        )


def test_q_init_scales_closed_form_for_identity():
    """E[Q] = ½mh s_U² − ½hn s_V² with s_U s_V = p: s_V² = (−t + √(t² + hn·mh·p²))/(hn)."""
    m, h, n, p = 5, 50, 10, 0.02
    for target in (-30.0, 0.0, 12.0):
        su, sv = q_init_scales(m, h, n, target, product=p)
        expected = (-target + math.sqrt(target**2 + h * n * m * h * p**2)) / (h * n)
        assert sv**2 == pytest.approx(expected, rel=1e-12)
        assert su * sv == pytest.approx(p, rel=1e-14)


@pytest.mark.parametrize("activation", ["identity", "relu", "sigmoid", "tanh"])
def test_variance_init_hits_the_target_in_expectation(activation):
    m, h, n, target = 5, 20, 10, -2.0
    su, sv = q_init_scales(m, h, n, target, activation)
    draws = sample_xavier_q(m, h, n, 4000, activation, u_std=su, v_std=sv, generator=22)
    stats = xavier_q_statistics(m, h, n, activation, u_std=su, v_std=sv)
    assert stats.mean == pytest.approx(target, abs=1e-10)
    assert abs(float(draws.mean()) - target) <= 4 * stats.std / math.sqrt(4000)
    model = _mlp([n, h, m], activation, bias=False, seed=23)
    result = init_with_q(model, target, method="variance", generator=24)
    assert not result.exact
    assert result.expected == target
    assert (result.u_std, result.v_std) == pytest.approx((su, sv), rel=1e-12)
    assert result.achieved == pytest.approx(float(ElementwiseQ(model)(ps.params_of(model))))
    assert abs(result.achieved - target) <= 5 * stats.std  # one draw, within its spread


# -- Xavier statistics (§2.6, with the erratum) ----------------------------------------------------


def _sample_variance_error(draws: Tensor) -> float:
    """Standard error of the sample variance, from the sample's fourth central moment."""
    centred = draws - draws.mean()
    m2, m4 = float((centred**2).mean()), float((centred**4).mean())
    return math.sqrt((m4 - m2**2) / draws.numel())


@pytest.mark.parametrize(("m", "h", "n"), [(10, 50, 20), (100, 100, 100), (50, 10, 30)])
def test_xavier_mean_and_variance_for_linear_nets(m, h, n):
    """E[Q] = (m − h)/2 and Var[Q] = m/(2h) + h/(2n) (notes 001a: the text's E[Q] = m − h is
    off by the ½ of Eq. 2.14)."""
    stats = xavier_q_statistics(m, h, n)
    assert stats.mean == pytest.approx((m - h) / 2, abs=1e-12)
    assert stats.variance == pytest.approx(m / (2 * h) + h / (2 * n), rel=1e-12)
    samples = min(2000, 10_000_000 // (h * (m + n)))
    draws = sample_xavier_q(m, h, n, samples, generator=25)
    standard_error = stats.std / math.sqrt(samples)
    assert abs(float(draws.mean()) - stats.mean) <= 4 * standard_error
    assert abs(float(draws.var()) - stats.variance) <= 4 * _sample_variance_error(draws)
    if m != h:  # the printed E[Q] = m − h is rejected
        assert abs(float(draws.mean()) - (m - h)) > 20 * standard_error


@pytest.mark.parametrize("activation", ["relu", "leaky_relu", "sigmoid", "tanh"])
def test_xavier_statistics_of_nonlinear_q(activation):
    m = h = n = 30
    stats = xavier_q_statistics(m, h, n, activation)
    draws = sample_xavier_q(m, h, n, 3000, activation, generator=26)
    assert abs(float(draws.mean()) - stats.mean) <= 4 * stats.std / math.sqrt(3000)
    assert abs(float(draws.var()) - stats.variance) <= 4 * _sample_variance_error(draws)


@pytest.mark.parametrize("activation", ["identity", "relu", "sigmoid", "tanh"])
def test_gaussian_moments_of_the_antiderivatives_by_quadrature(activation):
    spec = ps.nn.get_activation(activation)
    function = ps.conserved.closed_form_antiderivative(spec)
    std = 0.7
    nodes, weights = np.polynomial.hermite_e.hermegauss(80)  # ∫ f(x) e^{−x²/2}
    values = function(torch.tensor(std * nodes)).numpy()
    mean = float((weights * values).sum() / math.sqrt(2 * math.pi))
    second = float((weights * values**2).sum() / math.sqrt(2 * math.pi))
    expected_mean, expected_var = gaussian_moments(spec, std)
    assert mean == pytest.approx(expected_mean, rel=1e-10)
    assert second - mean**2 == pytest.approx(expected_var, rel=1e-8)


def test_closed_form_antiderivatives_differentiate_to_sigma_over_sigma_prime():
    v = torch.linspace(-2.0, 2.0, 41, dtype=F64)
    v = v[v != 0]
    for name in ("identity", "leaky_relu", "sigmoid", "tanh", "relu"):
        spec = ps.nn.get_activation(name)
        function = ps.conserved.closed_form_antiderivative(spec)
        derivative = torch.func.vmap(torch.func.grad(function))(v)
        slope = torch.func.vmap(torch.func.grad(spec.function))(v)
        ratio = torch.where(slope != 0, spec.function(v) / slope, torch.zeros_like(v))
        assert relative_error(derivative, ratio) <= 1e-13, name
        assert float(function(torch.zeros((), dtype=F64))) == 0.0


# -- flat minima and sharpness (§2.3, §2.8) --------------------------------------------------------


@pytest.mark.parametrize("q", [-3.0, -1.0, 0.0, 0.5, 2.0])
@pytest.mark.parametrize(("x", "y"), [(1.0, 1.0), (2.0, -1.5)])
def test_one_dimensional_hessian_eigenvalue(q, x, y):
    """At the minimum with U² − V² = Q the Hessian has eigenvalues 0 and X²√(Q² + 4Y²/X²):
    √(Q² + 4) for X = Y = 1, not the 2√(Q² + 4) of Eq. 2.53."""
    u, v = scalar_linear_minimum(q, x, y)
    assert u * v * x == pytest.approx(y, rel=1e-14)
    assert u * u - v * v == pytest.approx(q, abs=1e-13)
    model = ps.mlp([1, 1, 1], "identity", bias=False, dtype=F64)
    params = {
        "0.weight": torch.tensor([[v]], dtype=F64),
        "2.weight": torch.tensor([[u]], dtype=F64),
    }
    batch = (torch.tensor([[x]], dtype=F64), torch.tensor([[y]], dtype=F64))
    eigenvalues = torch.linalg.eigvalsh(ps.hessian(model, half_sum_squares, batch, params))
    assert abs(float(eigenvalues[0])) <= 1e-12
    assert float(eigenvalues[1]) == pytest.approx(scalar_linear_sharpness(q, x, y), rel=1e-12)
    if (x, y) == (1.0, 1.0):
        assert float(eigenvalues[1]) == pytest.approx(math.sqrt(q * q + 4), rel=1e-12)
        assert float(eigenvalues[1]) != pytest.approx(2 * math.sqrt(q * q + 4), rel=1e-3)


def test_gradient_flow_ends_at_the_minimum_its_q_names():
    model = ps.mlp([1, 1, 1], "identity", bias=False, dtype=F64)
    batch = (torch.ones(1, 1, dtype=F64), 2.0 * torch.ones(1, 1, dtype=F64))  # Fig 2.6: Y = 2
    for u0, v0 in [(0.3, 1.5), (1.2, 0.2), (0.5, 0.5)]:
        start = {
            "0.weight": torch.tensor([[v0]], dtype=F64),
            "2.weight": torch.tensor([[u0]], dtype=F64),
        }
        end = gradient_flow(model, half_sum_squares, batch, 40.0, params=start)
        u, v = scalar_linear_minimum(u0 * u0 - v0 * v0, 1.0, 2.0)
        assert float(end["2.weight"]) == pytest.approx(u, rel=1e-8)
        assert float(end["0.weight"]) == pytest.approx(v, rel=1e-8)


def test_hessian_nullity_equals_gl_orbit_dimension_at_a_minimum():
    """Zero-loss minimum of U V X with X = I: nullity = h(n + m) − nm (Prop A.2.9, Fig 2.7a)."""
    n, h, m = 3, 6, 4
    model = ps.mlp([n, h, m], "identity", bias=False, dtype=F64)
    g = _gen(27)
    targets = torch.randn(n, m, generator=g, dtype=F64)
    with torch.no_grad():
        model[0].weight.copy_(torch.randn(h, n, generator=g, dtype=F64))
        w1 = model[0].weight
        # W2 W1 = Yᵀ; the second term (rows ⟂ W1's columns) makes the minimum generic: with
        # it alone, W2's row space would lie in W1's column space, a point where the stabiliser
        # of GL(6) is larger and the orbit only 27-dimensional
        free = torch.randn(m, h, generator=g, dtype=F64)
        eye = torch.eye(h, dtype=F64)
        model[2].weight.copy_(
            targets.T @ torch.linalg.pinv(w1) + free @ (eye - w1 @ torch.linalg.pinv(w1))
        )
    report = flat_minimum(model, half_sum_squares, (torch.eye(n, dtype=F64), targets))
    assert report.loss <= 1e-25
    assert (
        report.orbit_dimension
        == h * (n + m) - n * m
        == ps.orbit_dimension(model, _continuous(model)[0])
    )
    assert report.near_zero == report.orbit_dimension
    assert report.parameters == h * (n + m)
    assert report.nonzero_median > report.threshold
    assert report.to_dict()["symmetries"] == ["GL[0->2]"]


def test_nullity_bounds_the_orbit_dimension_for_relu_minima():
    """ReLU at a zero-loss point: the rescaling orbit (dim h) lies in the Hessian's null space."""
    model = _mlp([3, 5, 2], "relu", bias=True, seed=28)
    x = torch.randn(4, 3, generator=_gen(29), dtype=F64)
    with torch.no_grad():
        targets = model(x)  # the model fits its own outputs: a minimum
    report = flat_minimum(model, half_sum_squares, (x, targets))
    assert report.orbit_dimension == 5
    assert report.near_zero >= report.orbit_dimension


# -- radial reparameterisation with spectral init (Props 2.7.1-2.7.3, Fig 2.5) ---------------------


def test_spectral_lambdas_are_conserved_and_bound_the_convergence():
    m, h, n = 3, 3, 5
    y = torch.randn(m, n, generator=_gen(30), dtype=F64)
    model = RadialReparameterization(m, h, n, dtype=F64)
    lambdas = torch.tensor([0.5, 1.0, 2.0], dtype=F64)
    spectral_init(model, y, lambdas, sigma0=0.2)
    lam = MomentMap(ps.symmetries(model)[0])
    assert relative_error(lam(ps.params_of(model)), lambdas) <= 1e-14
    sigma0 = spectral_sigma(model, y)
    assert relative_error(sigma0, torch.full((3,), 0.2, dtype=F64)) <= 1e-13
    sigma_y = torch.linalg.svdvals(y)
    x = torch.eye(n, dtype=F64)

    def loss_fn(out, target):
        return half_sum_squares(out, target)

    theta = ps.params_of(model)
    for t in (0.3, 1.0):
        end = gradient_flow(model, loss_fn, (x, y.T), t, params=theta)
        assert relative_error(lam(end), lambdas) <= 1e-10
        sigma = spectral_sigma(model, y, end)
        bound = spectral_rate_bound(t, lambdas, sigma0, sigma_y)
        assert bool(((sigma - sigma_y).abs() <= bound + 1e-12).all())
        # the flow stays spectral: X has no components off Y's singular pairs
        phi, _, psi_t = torch.linalg.svd(y, full_matrices=False)
        rotated = phi.T @ model.matrix(end) @ psi_t.T
        assert float((rotated - torch.diag(torch.diagonal(rotated))).abs().max()) <= 1e-10
    # Prop 2.7.2's rate at the start: σ̇ = (1/λ)(σ_Y − σ)(σ² + 1)², from the true gradient
    gradient = loss_gradient(model, loss_fn, (x, y.T), theta)
    rate = torch.func.jvp(
        lambda p: spectral_sigma(model, y, p), (theta,), ({k: -g for k, g in gradient.items()},)
    )[1]
    expected = (sigma_y - sigma0) * (sigma0**2 + 1) ** 2 / lambdas
    assert relative_error(rate, expected) <= 1e-12


def test_radial_reparameterization_lambda_is_conserved_from_any_init():
    """λ_i = ‖U_{:,i}‖² + ‖v_i‖² needs no spectral init: it is the degree −1 rescaling's μ."""
    model = RadialReparameterization(3, 4, 5, dtype=F64, generator=_gen(31))
    y = torch.randn(5, 3, generator=_gen(32), dtype=F64)
    lam = MomentMap(ps.symmetries(model)[0])
    theta = ps.params_of(model)
    end = gradient_flow(model, half_sum_squares, (torch.eye(5, dtype=F64), y), 1.0)
    assert float(ps.norm(ps.sub(end, theta))) > 0.05
    assert relative_error(lam(end), lam(theta)) <= 1e-10
    u, v = theta["U"], theta["V"]
    assert relative_error(lam(theta), (u * u).sum(0) + (v * v).sum(0)) <= 1e-15


# -- bad input -------------------------------------------------------------------------------------


def test_bad_arguments_are_named():
    model = _mlp([3, 4, 2], "identity")
    gl = _continuous(model)[0]
    with pytest.raises(ps.InvalidArgumentError, match="method"):
        MomentMap(gl, method="dense")
    with pytest.raises(ps.InvalidArgumentError, match="method"):
        gd_drift(model, mse, _batch(3, 3, 2), gl, 0.1, method="exact")
    with pytest.raises(ps.NonFiniteError, match=r"0\.weight"):
        MomentMap(gl)({**ps.params_of(model), "0.weight": torch.full((4, 3), math.nan, dtype=F64)})
    with pytest.raises(ps.InvalidArgumentError, match="method"):
        init_with_q(model, 1.0, method="exact")
    with pytest.raises(ps.InvalidArgumentError, match="Symmetry or a ConservedQuantity"):
        predicted_drift("GL", ps.params_of(model), ps.params_of(model), 0.1)
    with pytest.raises(ps.InvalidArgumentError, match="positive"):
        xavier_q_statistics(0, 3, 3)
    with pytest.raises(ps.InvalidArgumentError, match="velocity="):
        angular_momentum(_mlp([3, 4, 2], "radial"), None, None)
    with pytest.raises(ps.InvalidArgumentError, match=r"nn\.Sequential"):
        ElementwiseQ(_attention_model())


def test_conserved_values_in_float32_match_float64():
    model = _mlp([3, 4, 2], "relu")
    symmetry = _continuous(model)[0]
    exact = MomentMap(symmetry)(ps.params_of(model))
    single = MomentMap(symmetry)({k: t.float() for k, t in ps.params_of(model).items()})
    assert single.dtype == torch.float32
    assert relative_error(single.double(), exact) <= 1e-6
