"""Property tests of every symmetry ``ps.symmetries`` finds, in float64 (dissertation §1.2,
Prop. 2.3.9/A.2.11, Prop. A.2.8).

Hypothesis draws architectures (depth, widths, activation, biases, normalisation layers,
dropout, a final softmax) and a generic parameter point; for each symmetry found:

* function (or loss) invariance f(g·θ) = f(θ) to 1e-10 relative error;
* group axioms: e·θ = θ, g1·(g2·θ) = (g1 g2)·θ, g⁻¹·(g·θ) = θ, exp(0) = e;
* the closed-form tangent equals d/dt act(θ, exp(tξ)) by forward-mode autodiff;
* Noether orthogonality ⟨∇L(θ), tangent(θ, ξ)⟩ = 0 at arbitrary θ;
* gradient transport A(g)ᵀ ∇L(g·θ) = ∇L(θ) for actions linear in θ.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from itertools import pairwise

import pytest
import torch
from hypothesis import assume, given
from hypothesis import strategies as st

import paramsym as ps
from helpers import params_relative_error, randomize_, relative_error
from paramsym.symmetry import Symmetry

ACTIVATIONS = [
    ("identity", {}),
    ("relu", {}),
    ("leaky_relu", {"negative_slope": 0.2}),
    ("tanh", {}),
    ("sigmoid", {}),
    ("gelu", {}),
    ("elu", {}),
    ("softplus", {}),
    ("monomial", {"power": 3}),
    ("monomial", {"power": 2}),
    ("radial", {}),
]
NORMS = [None, "batchnorm", "batchnorm_plain", "layernorm", "layernorm_plain", "dropout"]
TOL = 1e-10


@dataclass
class Case:
    model: torch.nn.Sequential
    x: torch.Tensor
    y: torch.Tensor
    loss_fn: object
    symmetries: list[Symmetry]
    seed: int

    @property
    def params(self) -> dict[str, torch.Tensor]:
        return ps.params_of(self.model)

    def output(self, params):
        return ps.functional_call(self.model, params, self.x)

    def loss(self, params):
        return self.loss_fn(self.output(params), self.y)

    def grad(self, params):
        return torch.func.grad(self.loss)(params)


@st.composite
def cases(draw) -> Case:
    name, kwargs = draw(st.sampled_from(ACTIVATIONS))
    norm = draw(st.sampled_from(NORMS))
    smallest = 2 if norm and norm.startswith("layernorm") else 1
    depth = draw(st.integers(1, 3))
    widths = [draw(st.integers(1, 4))]
    widths += [draw(st.integers(smallest, 5)) for _ in range(depth)]
    widths += [draw(st.integers(2, 3))]
    bias = draw(st.booleans())
    softmax = draw(st.booleans())
    norm_after_activation = draw(st.booleans())
    seed = draw(st.integers(0, 2**20))
    spec = ps.nn.get_activation(name, **kwargs)

    layers: list[torch.nn.Module] = []
    for i, (n_in, n_out) in enumerate(pairwise(widths)):
        layers.append(torch.nn.Linear(n_in, n_out, bias=bias))
        if i == len(widths) - 2:
            break
        block = [spec.make_module()]
        if norm in ("batchnorm", "batchnorm_plain"):
            # torch refuses eps = 0 in training mode: BatchNorm scale invariance is approximate.
            block.insert(
                norm_after_activation, torch.nn.BatchNorm1d(n_out, affine=norm == "batchnorm")
            )
        elif norm in ("layernorm", "layernorm_plain"):
            layer = torch.nn.LayerNorm(n_out, eps=0.0, elementwise_affine=norm == "layernorm")
            block.insert(norm_after_activation, layer)
        elif norm == "dropout":
            block.append(torch.nn.Dropout(0.3))
        layers.extend(block)
    if softmax:
        layers.append(torch.nn.Softmax(dim=-1))
    model = torch.nn.Sequential(*layers).double()
    generator = torch.Generator().manual_seed(seed)
    randomize_(model, generator)
    model.train(norm != "dropout")  # batch statistics for BatchNorm, no dropout noise
    x = torch.randn(8, widths[0], generator=generator, dtype=torch.float64)
    if softmax:
        loss_fn, y = torch.nn.MSELoss(), torch.rand(8, widths[-1], generator=generator).double()
        found = ps.symmetries(model)
    else:
        loss_fn = torch.nn.CrossEntropyLoss()
        y = torch.randint(0, widths[-1], (8,), generator=generator)
        found = ps.symmetries(model, loss_fn=loss_fn)
    case = Case(model, x, y, loss_fn, found, seed)
    # LayerNorm(eps=0) of an all-zero hidden vector (e.g. after a ReLU) is 0/0: such a model
    # has no function to preserve.
    assume(bool(torch.isfinite(case.output(case.params)).all()))
    gradient = ps.flatten(case.grad(case.params))
    assume(bool(torch.isfinite(gradient).all()))
    # A saturated softmax (e.g. cubic activations) leaves a gradient of ~1e-12 that is mostly
    # rounding noise; relative identities on it are meaningless.
    assume(float(gradient.norm()) > 1e-6)
    return case


def _exact(case: Case) -> list[Symmetry]:
    """The symmetries claimed exact; only BatchNorm-absorbed scalings are not (eps > 0)."""
    for s in case.symmetries:
        assert s.exact or s.name.startswith("norm_scaling"), s.name
    return [s for s in case.symmetries if s.exact]


def _elements(case: Case, s: Symmetry, count: int = 2):
    generator = torch.Generator().manual_seed(case.seed + 1)
    return [s.sample(scale=0.5, generator=generator, dtype=torch.float64) for _ in range(count)]


@given(cases())
def test_exact_symmetries_preserve_the_function_or_loss(case):
    assert case.symmetries, "every drawn architecture has at least a permutation or translation"
    theta = case.params
    for s in _exact(case):
        (g,) = _elements(case, s, 1)
        moved = s.act(theta, g)
        assert params_relative_error(moved, theta) > 0 or s.discrete
        if s.preserves == "function":
            assert relative_error(case.output(moved), case.output(theta)) <= TOL, s.name
        else:
            assert relative_error(case.loss(moved), case.loss(theta)) <= TOL, s.name


@given(cases())
def test_group_axioms(case):
    theta = case.params
    for s in case.symmetries:
        g1, g2 = _elements(case, s)
        e = s.identity(dtype=torch.float64)
        assert params_relative_error(s.act(theta, e), theta) <= 1e-15, s.name
        two_steps = s.act(s.act(theta, g2), g1)
        assert params_relative_error(s.act(theta, s.compose(g1, g2)), two_steps) <= TOL, s.name
        back = s.act(s.act(theta, g1), s.inverse(g1))
        assert params_relative_error(back, theta) <= TOL, s.name
        exp_zero = s.exp(torch.zeros(s.dim, dtype=torch.float64))
        assert params_relative_error(s.act(theta, exp_zero), theta) <= 1e-15, s.name


@given(cases())
def test_closed_form_tangent_matches_autodiff(case):
    theta = case.params
    for s in case.symmetries:
        xi = torch.randn(
            s.dim, generator=torch.Generator().manual_seed(case.seed), dtype=torch.float64
        )
        closed = s.tangent(theta, xi)
        oracle = Symmetry.tangent(s, theta, xi)  # jvp through act ∘ exp
        assert set(closed) == set(theta)
        if s.dim:
            assert params_relative_error(closed, oracle) <= 1e-12, s.name
        else:
            assert float(ps.norm(closed)) == 0.0


def _element_error(a, b) -> float:
    if isinstance(a, tuple):
        return max(_element_error(p, q) for p, q in zip(a, b, strict=True))
    return relative_error(a, b)


@given(cases())
def test_linear_element_is_the_identity_plus_the_derivative_of_exp(case):
    """The closed-form ``e + ξ`` (seed 001's I + T) equals e + d/dt exp(tξ)|₀ by jvp."""
    for s in case.symmetries:
        if s.dim == 0:
            continue
        xi = torch.randn(
            s.dim, generator=torch.Generator().manual_seed(case.seed), dtype=torch.float64
        )
        oracle = Symmetry.linear_element(s, xi)
        assert _element_error(s.linear_element(xi), oracle) <= 1e-14, s.name


@given(cases())
def test_noether_orthogonality(case):
    """⟨∇L(θ), M·θ⟩ = 0 for every algebra element M (Prop. 2.3.9 / A.2.11)."""
    theta = case.params
    gradient = case.grad(theta)
    for s in _exact(case):
        if s.dim == 0:
            continue
        for k in range(min(s.dim, 6)):
            xi = torch.zeros(s.dim, dtype=torch.float64)
            xi[k] = 1.0
            t = s.tangent(theta, xi)
            scale = float(ps.norm(gradient) * ps.norm(t)) + 1e-300
            assert abs(float(ps.inner(gradient, t))) <= TOL * scale, s.name


@given(cases())
def test_gradient_transport_for_linear_actions(case):
    """A(g)ᵀ ∇L(g·θ) = ∇L(θ) (Prop. A.2.8), with A(g)ᵀ applied by a vector-Jacobian product."""
    theta = case.params
    gradient = case.grad(theta)
    for s in _exact(case):
        if not s.linear:
            continue
        (g,) = _elements(case, s, 1)
        _, pullback = torch.func.vjp(lambda p, g=g, s=s: s.act(p, g), theta)
        (transported,) = pullback(case.grad(s.act(theta, g)))
        assert params_relative_error(transported, gradient) <= 1e-9, s.name


@pytest.mark.parametrize("norm", ["batchnorm", "layernorm"])
def test_normalisation_with_positive_eps_is_flagged_approximate(norm):
    layer = torch.nn.BatchNorm1d(6) if norm == "batchnorm" else torch.nn.LayerNorm(6)
    model = torch.nn.Sequential(
        torch.nn.Linear(3, 6), layer, torch.nn.Tanh(), torch.nn.Linear(6, 2)
    )
    model = model.double().train()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        found = {s.name: s for s in ps.symmetries(model)}
    s = found["norm_scaling[0->1]"]
    assert not s.exact
    assert any("eps" in note for note in s.notes)
    x = torch.randn(16, 3, dtype=torch.float64)
    theta = ps.params_of(model)
    g = torch.full((s.dim,), 30.0, dtype=torch.float64)
    error = relative_error(ps.functional_call(model, s.act(theta, g), x), model(x))
    assert 1e-12 < error < 1e-3  # truly approximate, and a good approximation
