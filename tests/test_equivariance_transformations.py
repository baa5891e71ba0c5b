"""The transformation objects of seed 003 (``ps.Equivariance``, the built-ins,
``ps.DiscreteSymmetry``) in float64: each built-in satisfies f(T(θ, g)) = S(f(θ), g) on its
model, ``from_symmetry`` reproduces the catalogue's action and tangent, fixed-point projections
are fixed and idempotent (cyclic groups included), and bad input raises named errors."""

# ruff: noqa: E741  (O is the mirror's orthonormal basis, as in the paper)
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F  # noqa: N812
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

import paramsym as ps
from paramsym.equivariance.forward import KinkDetector


@pytest.fixture(autouse=True, scope="module")
def _float64():
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(previous)


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.detach(), b.detach()
    scale = max(float(torch.linalg.vector_norm(b)), 1e-300)
    return float(torch.linalg.vector_norm(a - b)) / scale


def equivariance_residual(model, eq, x, g) -> float:
    params = ps.params_of(model)
    moved = ps.functional_call(model, eq.apply(params, g), x)
    return rel(moved, eq.apply_output(model(x), g))


def inputs(n_in: int, n: int = 6, seed: int = 0) -> torch.Tensor:
    return torch.randn(n, n_in, generator=torch.Generator().manual_seed(seed))


# -- Equivariance --------------------------------------------------------------------------------


def test_equivariance_fields_and_validation():
    eq = ps.Equivariance(lambda p, g: p, dim=2, name="id")
    assert eq.symmetry
    assert eq.exact
    assert eq.notes == ()
    assert torch.equal(eq.identity_element(torch.float64), torch.zeros(2))
    custom = ps.Equivariance(lambda p, g: p, dim=1, identity=torch.ones(1))
    assert torch.equal(custom.identity_element(), torch.ones(1))
    g = custom.sample(0.1, torch.Generator().manual_seed(0))
    assert g.shape == (1,)
    assert float((g - 1).abs()) < 0.5
    with pytest.raises(ps.InvalidArgumentError, match="callable"):
        ps.Equivariance("T", dim=1)
    with pytest.raises(ps.InvalidArgumentError, match="output_transform"):
        ps.Equivariance(lambda p, g: p, output_transform=3, dim=1)
    with pytest.raises(ps.InvalidArgumentError, match="positive int"):
        ps.Equivariance(lambda p, g: p, dim=0)
    with pytest.raises(ps.ShapeError, match=r"\(2,\)"):
        ps.Equivariance(lambda p, g: p, dim=2, identity=torch.zeros(3))


def test_apply_passes_untouched_entries_through_and_checks_what_t_returns():
    params = {"a": torch.ones(2), "b": torch.zeros(3)}
    eq = ps.Equivariance(lambda p, g: {"a": g.exp() * p["a"]}, dim=1)
    out = eq.apply(params, torch.tensor([math.log(2.0)]))
    assert torch.allclose(out["a"], torch.full((2,), 2.0))
    assert out["b"] is params["b"]
    with pytest.raises(ps.MissingParameterError, match="'c'"):
        ps.Equivariance(lambda p, g: {"c": p["a"]}, dim=1).apply(params, torch.zeros(1))
    with pytest.raises(ps.ShapeError, match="'a'"):
        ps.Equivariance(lambda p, g: {"a": torch.ones(3)}, dim=1).apply(params, torch.zeros(1))
    with pytest.raises(ps.InvalidArgumentError, match="params dict"):
        ps.Equivariance(lambda p, g: [1], dim=1).apply(params, torch.zeros(1))
    bad_s = ps.Equivariance(lambda p, g: p, lambda y, g: y.sum(), dim=1)
    with pytest.raises(ps.ShapeError, match="output_transform"):
        bad_s.apply_output(torch.ones(4, 2), torch.zeros(1))


def test_from_symmetry_reproduces_the_catalogue_action_and_tangent():
    model = ps.mlp([3, 4, 3, 2], activation="leaky_relu", seed=0)
    params = ps.params_of(model)
    gen = torch.Generator().manual_seed(1)
    continuous = [s for s in ps.symmetries(model) if s.dim > 0]
    assert continuous
    for sym in continuous:
        eq = ps.Equivariance.from_symmetry(sym)
        assert eq.dim == sym.dim
        assert eq.symmetry
        assert eq.name == sym.name
        xi = 0.2 * torch.randn(sym.dim, generator=gen)
        expected = sym.act(params, sym.exp(xi))
        assert rel(ps.flatten(eq.apply(params, xi)), ps.flatten(expected)) < 1e-15
        # twice at the same g (the cached group element) and at another g
        assert rel(ps.flatten(eq.apply(params, xi)), ps.flatten(expected)) < 1e-15
        other = sym.act(params, sym.exp(-xi))
        assert rel(ps.flatten(eq.apply(params, -xi)), ps.flatten(other)) < 1e-15
        # J at g₀ = ∂_g T(θ, 0) = the catalogue's tangent
        _, J = torch.func.jvp(
            lambda h, eq=eq: ps.flatten(eq.apply(params, h)), (torch.zeros(sym.dim),), (xi,)
        )
        assert rel(J, ps.flatten(sym.tangent(params, xi))) < 1e-12
        assert equivariance_residual(model, eq, inputs(3), xi) < 1e-13


def test_from_symmetry_refuses_what_is_not_a_continuous_function_symmetry():
    model = ps.mlp([3, 4, 2], activation="relu", seed=0)
    permutation = next(s for s in ps.symmetries(model) if s.dim == 0)
    with pytest.raises(ps.InvalidArgumentError, match="discrete"):
        ps.Equivariance.from_symmetry(permutation)
    loss_only = ps.SoftmaxTranslation("2.weight", "2.bias", 4)
    with pytest.raises(ps.InvalidArgumentError, match="softmax_translation"):
        ps.Equivariance.from_symmetry(loss_only)
    with pytest.raises(ps.InvalidArgumentError, match="Symmetry"):
        ps.Equivariance.from_symmetry("rescaling")


def test_from_symmetry_of_a_data_dependent_symmetry_needs_x():
    model = ps.mlp([3, 4, 2], activation="tanh", seed=0)
    x = inputs(3, n=1)  # the nonlinear GL acts at one input
    found = ps.symmetries(model, example_input=x, data_dependent=True)
    sym = next(s for s in found if s.name == "nonlinear_GL[0->2]")
    with pytest.raises(ps.InvalidArgumentError, match="x=x"):
        ps.Equivariance.from_symmetry(sym)
    eq = ps.Equivariance.from_symmetry(sym, x=x)
    assert eq.data_dependent
    xi = 0.1 * torch.randn(sym.dim, generator=torch.Generator().manual_seed(0))
    expected = sym.act(ps.params_of(model), sym.exp(xi), x)
    assert rel(ps.flatten(eq.apply(ps.params_of(model), xi)), ps.flatten(expected)) < 1e-15


# -- built-ins -------------------------------------------------------------------------------------


@settings(max_examples=10)
@given(
    widths=st.lists(st.integers(1, 5), min_size=1, max_size=3),
    bias=st.booleans(),
    activation=st.sampled_from(["relu", "leaky_relu", "identity"]),
    seed=st.integers(0, 1000),
    g=st.floats(-1.0, 1.0),
)
def test_homogeneity_builtins_are_equivariances(widths, bias, activation, seed, g):
    model = ps.mlp([3, *widths, 2], activation=activation, bias=bias, seed=seed)
    x = inputs(3, seed=seed)
    eq = ps.equivariance.homogeneity(model)
    assert eq.name == f"homogeneity(m={len(widths) + 1})"
    assert equivariance_residual(model, eq, x, torch.tensor([g])) < 1e-12
    layers = ps.equivariance.layer_homogeneity(model)
    gen = torch.Generator().manual_seed(seed)
    assert equivariance_residual(model, layers, x, torch.randn(layers.dim, generator=gen)) < 1e-12
    # a subset of the layers (the biases above them scale along)
    first = ps.equivariance.layer_homogeneity(model, ["0"])
    assert first.dim == 1
    assert equivariance_residual(model, first, x, torch.tensor([g])) < 1e-12


def test_homogeneity_fails_where_the_net_is_not_homogeneous():
    tanh = ps.mlp([3, 4, 2], activation="tanh", seed=0)
    eq = ps.equivariance.homogeneity(tanh)
    assert equivariance_residual(tanh, eq, inputs(3), torch.tensor([0.3])) > 1e-3
    with pytest.raises(ps.InvalidArgumentError, match="choose from"):
        ps.equivariance.layer_homogeneity(tanh, ["1"])
    with pytest.raises(ps.InvalidArgumentError, match="no trainable"):
        ps.equivariance.homogeneity(nn.ReLU())


def test_last_layer_gl_and_softmax_translation_are_equivariances():
    model = ps.mlp([3, 5, 4], activation="tanh", seed=3)
    x = inputs(3)
    gl = ps.equivariance.last_layer_gl(model)
    assert gl.dim == 16
    assert gl.name == "last_layer_GL(4)[2]"
    G = 0.3 * torch.randn(16, generator=torch.Generator().manual_seed(0))
    assert equivariance_residual(model, gl, x, G) < 1e-13
    moved = gl.apply(ps.params_of(model), G)
    M = torch.eye(4) + G.reshape(4, 4)
    assert torch.allclose(moved["2.weight"], M @ model[2].weight)
    assert torch.allclose(moved["2.bias"], M @ model[2].bias)
    shift = ps.equivariance.softmax_translation(model)
    assert equivariance_residual(model, shift, x, torch.tensor([0.8])) < 1e-15
    logits = model(x).detach()
    moved_logits = shift.apply_output(logits, torch.tensor([0.8]))
    assert torch.allclose(moved_logits.softmax(-1), logits.softmax(-1))
    assert not torch.allclose(moved_logits, logits)
    targets = torch.tensor([0, 1, 2, 3, 0, 1])
    assert abs(float(F.cross_entropy(moved_logits, targets) - F.cross_entropy(logits, targets))) < (
        1e-14
    )


def test_last_layer_builtins_name_what_is_missing():
    no_bias = ps.mlp([3, 4, 2], activation="tanh", bias=False, seed=0)
    with pytest.raises(ps.InvalidArgumentError, match="no bias"):
        ps.equivariance.softmax_translation(no_bias)
    with pytest.raises(ps.InvalidArgumentError, match=r"not\ an\ nn\.Linear"):
        ps.equivariance.last_layer_gl(no_bias, layer="1")
    with pytest.raises(ps.InvalidArgumentError, match=r"no\ nn\.Linear"):
        ps.equivariance.last_layer_gl(nn.Sequential(nn.Conv1d(1, 1, 1)))
    gl = ps.equivariance.last_layer_gl(no_bias, layer="0")  # any named Linear
    assert gl.dim == 16


def test_normalization_scale():
    model = nn.Sequential(nn.Linear(3, 4), nn.LayerNorm(4, eps=0.0), nn.Tanh(), nn.Linear(4, 2))
    eq = ps.equivariance.normalization_scale(model, "1")
    assert eq.exact
    assert eq.name == "normalization_scale[0->1]"
    x = inputs(3)
    assert equivariance_residual(model, eq, x, torch.tensor([0.7])) < 1e-14
    explicit = ps.equivariance.normalization_scale(model, "1", weights=["0.weight"])
    assert equivariance_residual(model, explicit, x, torch.tensor([0.7])) > 1e-3  # bias left out
    default_eps = nn.Sequential(nn.Linear(3, 4), nn.LayerNorm(4), nn.Linear(4, 2))
    approximate = ps.equivariance.normalization_scale(default_eps, "1")
    assert not approximate.exact
    assert "eps=1e-05" in " ".join(approximate.notes)
    assert 1e-10 < equivariance_residual(default_eps, approximate, x, torch.tensor([0.7])) < 1e-3
    with pytest.raises(ps.InvalidArgumentError, match="not a normalisation layer"):
        ps.equivariance.normalization_scale(model, "2")
    with pytest.raises(ps.InvalidArgumentError, match="precedes"):
        ps.equivariance.normalization_scale(nn.Sequential(nn.LayerNorm(3), nn.Linear(3, 2)), "0")


# -- DiscreteSymmetry -----------------------------------------------------------------------------


def test_orders_of_the_constructors():
    assert ps.DiscreteSymmetry.permutation([1, 0, 3, 4, 2]).order == 6  # cycles 2
    assert 3
    assert ps.DiscreteSymmetry.permutation([0, 1, 2]).order == 1
    assert ps.DiscreteSymmetry.sign_flip(torch.tensor([1.0, -1.0])).order == 2
    assert ps.DiscreteSymmetry.sign_flip(torch.ones(3)).order == 1
    O = torch.linalg.qr(torch.randn(5, 2, generator=torch.Generator().manual_seed(0))).Q
    assert ps.DiscreteSymmetry.mirror(O).order == 2
    cycle = torch.eye(3)[[1, 2, 0]]
    assert ps.DiscreteSymmetry(cycle).order == 3


@settings(max_examples=20)
@given(perm=st.permutations(list(range(7))), seed=st.integers(0, 1000))
def test_permutation_projection_is_the_group_average(perm, seed):
    sym = ps.DiscreteSymmetry.permutation(perm)
    z = torch.randn(7, generator=torch.Generator().manual_seed(seed))
    params = {"w": z}
    fixed = sym.project(params)
    assert sym.distance(fixed) < 1e-15
    average, current = torch.zeros(7), z
    for _ in range(sym.order):
        average, current = average + current, current[torch.tensor(perm)]
    assert torch.allclose(fixed["w"], average / sym.order, atol=1e-14)
    assert torch.allclose(sym.project(fixed)["w"], fixed["w"], atol=1e-15)  # idempotent
    matrix = ps.DiscreteSymmetry(torch.eye(7)[list(perm)])
    assert torch.allclose(matrix.project(params)["w"], fixed["w"], atol=1e-14)


def test_group_average_of_a_function_and_of_a_matrix_of_order_four():
    rotation = torch.tensor([[0.0, -1.0], [1.0, 0.0]])  # a quarter turn: order 4, fixed set {0}
    by_matrix = ps.DiscreteSymmetry(rotation)
    assert by_matrix.order == 4
    by_function = ps.DiscreteSymmetry(lambda p: {"w": rotation @ p["w"]}, linear=True)
    params = {"w": torch.tensor([1.0, 2.0])}
    assert torch.allclose(by_matrix.project(params)["w"], torch.zeros(2), atol=1e-15)
    assert torch.allclose(by_function.project(params)["w"], torch.zeros(2), atol=1e-15)
    assert by_function.order == 4  # found by iterating T on the point


def test_mirror_projection_and_reflection():
    O = torch.linalg.qr(torch.randn(6, 2, generator=torch.Generator().manual_seed(1))).Q
    sym = ps.DiscreteSymmetry.mirror(O)
    params = {
        "a": torch.randn(2, 2, generator=torch.Generator().manual_seed(2)),
        "b": torch.randn(2, generator=torch.Generator().manual_seed(3)),
    }
    z = ps.flatten(params)
    assert rel(ps.flatten(sym.apply(params)), z - 2 * O @ (O.T @ z)) < 1e-15
    fixed = sym.project(params)
    assert float((O.T @ ps.flatten(fixed)).abs().max()) < 1e-15
    assert sym.distance(fixed) < 1e-15
    with pytest.raises(ps.InvalidArgumentError, match="orthonormal"):
        ps.DiscreteSymmetry.mirror(2 * O)


def test_discrete_symmetry_bad_input():
    with pytest.raises(ps.ShapeError, match="square"):
        ps.DiscreteSymmetry(torch.ones(2, 3))
    with pytest.raises(ps.InvalidArgumentError, match="permutation"):
        ps.DiscreteSymmetry(torch.eye(3, dtype=torch.long))
    angle = 1.0  # radians: an irrational turn, of infinite order
    c, s = math.cos(angle), math.sin(angle)
    with pytest.raises(ps.InvalidArgumentError, match="finite order"):
        ps.DiscreteSymmetry(torch.tensor([[c, -s], [s, c]]))
    with pytest.raises(ps.InvalidArgumentError, match=r"permutation\ of\ 0\.\.2"):
        ps.DiscreteSymmetry.permutation([0, 0, 1])
    with pytest.raises(ps.InvalidArgumentError, match=r"\+1 or -1"):
        ps.DiscreteSymmetry.sign_flip(torch.tensor([1.0, 0.5]))
    with pytest.raises(ps.InvalidArgumentError, match="order"):
        ps.DiscreteSymmetry(lambda p: p, order=0)
    with pytest.raises(ps.InvalidArgumentError, match="matrix"):
        ps.DiscreteSymmetry("swap")
    with pytest.raises(ps.ShapeError, match="3 parameters"):
        ps.DiscreteSymmetry.permutation([1, 2, 0]).apply({"w": torch.ones(4)})
    with pytest.raises(ps.ShapeError, match=r"\(2, 2\)"):
        ps.DiscreteSymmetry(torch.eye(2)).apply({"w": torch.ones(3)})


def test_nonlinear_transform_needs_a_projector():
    def phi(a):
        return torch.stack([a[0], a[1] + 0.5 * a[0] ** 2, a[2] + 0.3 * torch.sin(a[0] * a[1])])

    def phi_inverse(u):
        a1 = u[1] - 0.5 * u[0] ** 2
        return torch.stack([u[0], a1, u[2] - 0.3 * torch.sin(u[0] * a1)])

    cycle = torch.tensor([1, 2, 0])
    sym = ps.DiscreteSymmetry(lambda p: {"a": phi_inverse(phi(p["a"])[cycle])}, name="bent")
    params = {"a": torch.tensor([0.3, -0.2, 0.5])}
    with pytest.raises(ps.FixedPointError, match="fixed_point_projector"):
        sym.project(params)
    assert sym.order == 3  # found by iterating T
    never = ps.DiscreteSymmetry(lambda p: {"a": p["a"] + 1.0}, max_order=5)
    with pytest.raises(ps.InvalidArgumentError, match="max_order=5"):
        never.project(params)


def test_discrete_from_symmetry_uses_the_catalogue_element():
    model = ps.mlp([3, 4, 2], activation="tanh", seed=0)
    syms = {s.name: s for s in ps.symmetries(model)}
    flip = ps.DiscreteSymmetry.from_symmetry(
        syms["sign_flip[0->2]"], torch.tensor([1.0, -1.0, 1.0, 1.0])
    )
    params = ps.params_of(model)
    fixed = flip.project(params)
    assert float(fixed["0.weight"][1].abs().max()) == 0.0
    assert float(fixed["2.weight"][:, 1].abs().max()) == 0.0
    assert torch.equal(fixed["0.weight"][0], params["0.weight"][0])
    with pytest.raises(ps.InvalidArgumentError, match="Symmetry"):
        ps.DiscreteSymmetry.from_symmetry("swap", None)


# -- the kink detector ----------------------------------------------------------------------------


class FunctionalNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(2, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = self.fc(x)
        return F.relu(z) + F.hardtanh(z, -0.5, 0.5) + F.relu6(z)


def test_kink_detector_sees_modules_and_functions():
    net = FunctionalNet()
    with torch.no_grad():
        net.fc.weight.zero_()
        net.fc.bias.copy_(torch.tensor([0.0, 0.5, 0.3]))
    with KinkDetector() as detector:
        net(torch.randn(4, 2))
    # relu and relu6 at 0 (entry 0), hardtanh at its own corner 0.5 (entry 1): 4 samples each
    assert detector.hits == 12
    assert {w.split(" ")[0] for w in detector.where} == {"relu", "hardtanh", "relu6"}
    with KinkDetector() as quiet:
        ps.mlp([2, 3, 1], activation="relu", seed=0)(torch.randn(4, 2))
    assert quiet.hits == 0


def test_a_non_finite_output_is_a_named_error():
    """At the fixed point of a channel swap inside a 2-channel GroupNorm group with eps = 0 the
    group's variance is 0 and f is NaN: a named error, not inf residuals."""
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Linear(3, 4), nn.GroupNorm(2, 4, eps=0.0), nn.Tanh(), nn.Linear(4, 2)
    ).double()
    x = torch.randn(6, 3, dtype=torch.float64)
    batch = (x, torch.randn(6, 2, dtype=torch.float64))
    swaps = [s for s in ps.symmetries(model, example_input=x) if s.family == "permutation"]
    flip = ps.DiscreteSymmetry.from_symmetry(swaps[0], torch.tensor([1, 0]))
    point = flip.project(ps.params_of(model))
    with pytest.raises(ps.NonFiniteError, match="NaN or infinite entries"):
        ps.check_identities(model, nn.MSELoss(), batch, flip, params=point)
