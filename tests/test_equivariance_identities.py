"""Seed 003's identities (Theorems 1-2) by ``ps.check_identities``, in float64, against the dense
index-form oracle of ``tests/oracles/equivariance_dense.py``: every identity to ≤ 1e-9 relative
at g₀ and at random g, for k = 1 and k > 1, with T and S linear and nonlinear; negative controls
and bad input."""

# ruff: noqa: E741, N802  (O is the mirror's basis; T, L as in the paper)
from __future__ import annotations

import math
import warnings

import pytest
import torch
import torch.nn.functional as F  # noqa: N812
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

import paramsym as ps
from oracles.equivariance_dense import dense_hessian, dense_theorem1
from paramsym.equivariance import sides as sides_module
from paramsym.equivariance.result import THEOREM1

TOL = 1e-9


@pytest.fixture(autouse=True, scope="module")
def _float64():
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(previous)


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    scale = max(float(torch.linalg.vector_norm(b)), float(torch.linalg.vector_norm(a)), 1e-300)
    return float(torch.linalg.vector_norm(a - b)) / scale


def assert_matches_oracle(model, loss_fn, batch, eq, g, *, atol_rel=1e-8, **kwargs):
    """Every identity holds to TOL, and both sides agree with the dense index-form oracle."""
    result = ps.check_identities(model, loss_fn, batch, eq, g=g, operator_norms=True, **kwargs)
    assert result.checked == THEOREM1
    assert result.holds(TOL), result.residuals
    dense = dense_theorem1(model, loss_fn, batch, eq, g)
    for name in THEOREM1:
        oracle_residual = float(torch.linalg.vector_norm(dense.lhs[name] - dense.rhs[name]))
        assert oracle_residual <= 1e-9 * result.scales[name] + 1e-300, (name, oracle_residual)
        for side, ours, theirs in (("lhs", result.lhs, dense.lhs), ("rhs", result.rhs, dense.rhs)):
            difference = float(torch.linalg.vector_norm(ours[name] - theirs[name]))
            assert difference <= atol_rel * result.scales[name] + 1e-300, (name, side, difference)
    assert rel(result.terms["J"], dense.J.T) < 1e-10
    return result


def random_g(k: int, seed: int, scale: float = 0.3) -> torch.Tensor:
    return scale * torch.randn(k, generator=torch.Generator().manual_seed(seed))


def regression_batch(n_in: int, n_out: int, n: int = 6, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(n, n_in, generator=gen), torch.randn(n, n_out, generator=gen)


# -- models with T or S nonlinear -------------------------------------------------------------


class SinhScaled(nn.Module):
    """y = exp(sinh(a) · h(x)) with h a one-hidden-layer ReLU net: T(a) = asinh(sinh(a)e^g)
    (nonlinear in θ) with S(y) = y^{e^g} = exp(e^g log y) (nonlinear in y)."""

    def __init__(self) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(3)
        self.a = nn.Parameter(torch.tensor([0.4]))
        self.fc1 = nn.Linear(3, 4)
        self.fc2 = nn.Linear(4, 1)
        with torch.no_grad():
            for p in (*self.fc1.parameters(), *self.fc2.parameters()):
                p.copy_(0.5 * torch.randn(p.shape, generator=gen))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc2(torch.relu(self.fc1(x)))
        return torch.exp(torch.sinh(self.a) * h)


def sinh_equivariance(k: int) -> ps.Equivariance:
    """k = 1: the nonlinear (T, S) above; k = 2: also the rescaling of hidden neuron 0."""

    def transform(p, g):
        out = {"a": torch.asinh(torch.sinh(p["a"]) * g[0].exp())}
        if k == 2:
            c = g[1].exp()
            scale_in = torch.ones(4, dtype=g.dtype).index_put((torch.tensor([0]),), c)
            out["fc1.weight"] = scale_in[:, None] * p["fc1.weight"]
            out["fc1.bias"] = scale_in * p["fc1.bias"]
            out["fc2.weight"] = p["fc2.weight"] / scale_in
        return out

    def output_transform(y, g):
        return torch.exp(g[0].exp() * torch.log(y))

    return ps.Equivariance(transform, output_transform, dim=k, name=f"sinh-scale(k={k})")


@pytest.mark.parametrize("k", [1, 2])
@pytest.mark.parametrize("where", ["g0", "random"])
def test_nonlinear_transform_and_nonlinear_output_transform(k, where):
    model = SinhScaled()
    x, _ = regression_batch(3, 1)
    batch = (x, torch.full((6, 1), 1.3))
    g = torch.zeros(k) if where == "g0" else random_g(k, 11)
    result = assert_matches_oracle(model, nn.MSELoss(), batch, sinh_equivariance(k), g)
    assert result.solver == ("identity" if where == "g0" else "direct")
    # the parameter-side term of item 2a is genuinely non-zero here (T nonlinear in θ)
    assert float(torch.linalg.vector_norm(result.terms["item2a_parameter"])) > 1e-3


@pytest.mark.parametrize("solver", ["direct", "gmres"])
def test_solvers_agree_at_random_g(solver):
    model = SinhScaled()
    x, _ = regression_batch(3, 1)
    batch = (x, torch.full((6, 1), 1.3))
    g = random_g(2, 5)
    result = assert_matches_oracle(
        model, nn.MSELoss(), batch, sinh_equivariance(2), g, solver=solver
    )
    assert result.solver == solver


def test_explicit_solvers_at_g0_match_the_identity_fast_path():
    model = SinhScaled()
    x, _ = regression_batch(3, 1)
    batch = (x, torch.full((6, 1), 1.3))
    eq = sinh_equivariance(2)
    fast = ps.check_identities(model, nn.MSELoss(), batch, eq)
    for solver in ("direct", "gmres"):
        slow = ps.check_identities(model, nn.MSELoss(), batch, eq, solver=solver)
        assert slow.holds(TOL)
        for name in THEOREM1:
            assert float(torch.linalg.vector_norm(slow.rhs[name] - fast.rhs[name])) <= (
                1e-10 * fast.scales[name]
            )


# -- homogeneity, rescaling, last layer --------------------------------------------------------


@settings(max_examples=8)
@given(
    widths=st.lists(st.integers(2, 4), min_size=1, max_size=2),
    n_in=st.integers(2, 3),
    n_out=st.integers(1, 2),
    seed=st.integers(0, 10_000),
    g=st.floats(-0.5, 0.5),
    bias=st.booleans(),
)
def test_homogeneity_of_relu_nets_matches_the_oracle(widths, n_in, n_out, seed, g, bias):
    model = ps.mlp([n_in, *widths, n_out], activation="relu", bias=bias, seed=seed)
    batch = regression_batch(n_in, n_out, seed=seed)
    eq = ps.equivariance.homogeneity(model)
    result = assert_matches_oracle(model, nn.MSELoss(), batch, eq, torch.tensor([g]))
    if not bias:
        # J = θ: item 1 is the Euler relation ⟨∇L, θ⟩ = m⟨∇ℓ, f⟩
        assert rel(result.terms["J"][0], ps.flatten(ps.params_of(model))) < 1e-12


@settings(max_examples=6)
@given(
    widths=st.lists(st.integers(2, 4), min_size=1, max_size=2),
    seed=st.integers(0, 10_000),
    bias=st.booleans(),
)
def test_layer_homogeneity_at_random_g_matches_the_oracle(widths, seed, bias):
    model = ps.mlp([3, *widths, 2], activation="relu", bias=bias, seed=seed)
    batch = regression_batch(3, 2, seed=seed)
    eq = ps.equivariance.layer_homogeneity(model)
    assert eq.dim == len(widths) + 1
    assert_matches_oracle(model, nn.MSELoss(), batch, eq, random_g(eq.dim, seed))


@pytest.mark.parametrize("where", ["g0", "random"])
def test_rescaling_of_a_relu_net_from_the_catalogue(where):
    model = ps.mlp([3, 4, 3, 2], activation="relu", seed=1)
    batch = regression_batch(3, 2)
    syms = [s for s in ps.symmetries(model) if s.dim > 0]
    assert syms
    for sym in syms:
        eq = ps.Equivariance.from_symmetry(sym)
        g = torch.zeros(sym.dim) if where == "g0" else random_g(sym.dim, 2)
        result = assert_matches_oracle(model, nn.MSELoss(), batch, eq, g)
        # a symmetry: item 1 reads Jᵀ∇L = 0 with both sides ~ 0 and still a tiny residual
        assert float(result.lhs["item1"].abs().max()) < 1e-12
        assert result.scales["item1"] > 1e-3


def test_a_data_dependent_nonlinear_catalogue_symmetry():
    model = ps.mlp([3, 4, 2], activation="tanh", seed=0)
    batch = regression_batch(3, 2, n=1)  # the nonlinear GL of a tanh layer acts at one input
    found = ps.symmetries(model, example_input=batch[0], data_dependent=True)
    sym = next(s for s in found if s.name == "nonlinear_GL[0->2]")
    eq = ps.Equivariance.from_symmetry(sym, x=batch[0])
    for g in (torch.zeros(16), random_g(16, 9, scale=0.05)):
        result = assert_matches_oracle(model, nn.MSELoss(), batch, eq, g)
        assert float(torch.linalg.vector_norm(result.terms["item2a_parameter"])) > 1e-3


@pytest.mark.parametrize("where", ["g0", "random"])
def test_last_layer_gl_with_cross_entropy(where):
    model = ps.mlp([3, 5, 3], activation="tanh", seed=4)
    gen = torch.Generator().manual_seed(4)
    batch = (torch.randn(7, 3, generator=gen), torch.randint(0, 3, (7,), generator=gen))
    eq = ps.equivariance.last_layer_gl(model)
    assert eq.dim == 9
    g = torch.zeros(9) if where == "g0" else random_g(9, 3, scale=0.2)
    result = assert_matches_oracle(model, nn.CrossEntropyLoss(), batch, eq, g)
    if where == "g0":
        # eq. (7): (EW, 0)ᵀ H (EW, 0) = (Ef)ᵀ ∇²ℓ (Ef), the diagonal of item 2b's Gauss-Newton
        # term, and for softmax cross-entropy the mean over samples of Var_p(Ef)
        logits = model(batch[0]).detach()
        p = logits.softmax(-1)
        for index in (0, 4, 7):
            E = torch.zeros(9)
            E[index] = 1.0
            Ef = logits @ E.reshape(3, 3).T
            variance = (p * Ef**2).sum(-1) - (p * Ef).sum(-1) ** 2
            value = result.terms["item2b_gauss_newton"][index, index]
            assert abs(float(value) - float(variance.mean())) < 1e-12
            assert abs(float(result.lhs["item2b_gg"][index, index]) - float(value)) < 1e-12


def test_softmax_translation_is_an_equivariance_with_an_invariant_loss():
    model = ps.mlp([3, 4, 3], activation="tanh", seed=2)
    gen = torch.Generator().manual_seed(2)
    batch = (torch.randn(5, 3, generator=gen), torch.randint(0, 3, (5,), generator=gen))
    eq = ps.equivariance.softmax_translation(model)
    for g in (torch.zeros(1), torch.tensor([0.7])):
        result = assert_matches_oracle(model, nn.CrossEntropyLoss(), batch, eq, g)
        # ℓ∘S = ℓ: Kᵀ∇ℓ = 0 and ⟨∇_b L, 1⟩ = 0; a translation: HJ = 0
        assert float(result.rhs["item1"].abs().max()) < 1e-14
        assert float(result.lhs["item2a"].abs().max()) < 1e-14


# -- catalogue symmetries on zoo models ---------------------------------------------------------


def _zoo_point(name: str):
    from paramsym.nn.zoo import zoo_model

    entry = zoo_model(name)
    model = entry.build().double()
    x = entry.example_input(torch.Generator().manual_seed(0))
    x = x.double() if x.is_floating_point() else x
    return model, x


def test_catalogue_symmetries_of_a_cnn():
    model, x = _zoo_point("cnn")
    target = torch.randint(0, 3, (x.shape[0],), generator=torch.Generator().manual_seed(1))
    syms = [s for s in ps.symmetries(model, example_input=x) if s.dim > 0]
    assert [s.name for s in syms] == ["rescaling[conv1->conv2]", "rescaling[conv2->fc]"]
    for sym, g in ((syms[0], None), (syms[1], random_g(syms[1].dim, 7, scale=0.1))):
        result = ps.check_identities(model, nn.CrossEntropyLoss(), (x, target), sym, g=g)
        assert result.checked == THEOREM1
        assert result.holds(TOL), (sym.name, result.residuals)


def _gpt_problem():
    model, x = _zoo_point("gpt")
    target = torch.randint(0, 32, x.shape, generator=torch.Generator().manual_seed(1))

    def loss_fn(logits, t):
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), t.reshape(-1))

    syms = {s.name: s for s in ps.symmetries(model, example_input=x) if s.dim > 0}
    return model, loss_fn, (x, target), syms


def _generators(eq: ps.Equivariance, chosen: list[int]) -> ps.Equivariance:
    """The same transformation restricted to some generators: g = Σ_i h_i e_{chosen[i]}."""

    def embed(h):
        return torch.zeros(eq.dim, dtype=h.dtype).index_put((torch.tensor(chosen),), h)

    return ps.Equivariance(
        lambda p, h: eq.transform(p, embed(h)), dim=len(chosen), name=f"{eq.name}{chosen}"
    )


def test_catalogue_symmetries_of_an_attention_model():
    model, loss_fn, batch, syms = _gpt_problem()
    # GL(8) of one head's query-key and value-output maps (three of the 64 generators), at g₀
    # and at a random g (there J = A⁻¹B by matrix-free GMRES, P = 7872); a LayerNorm-fed
    # rescaling
    for name, chosen, g in (
        ("attention_QK[h.0.attn.head0]", [0, 9, 42], None),
        ("attention_VO[h.1.attn.head1]", [3, 17, 63], random_g(3, 3, scale=0.1)),
        ("rescaling[h.0.ln_2->h.0.mlp.fc]", [0, 5, 15], random_g(3, 4, scale=0.1)),
    ):
        eq = _generators(ps.Equivariance.from_symmetry(syms[name]), chosen)
        result = ps.check_identities(model, loss_fn, batch, eq, g=g)
        assert result.solver == ("identity" if g is None else "gmres")
        assert result.holds(TOL), (name, result.residuals)


def test_every_generator_of_an_attention_gl():
    model, loss_fn, batch, syms = _gpt_problem()
    for name in ("attention_QK[h.0.attn.head0]", "attention_VO[h.1.attn.head1]"):
        for g in (None, random_g(64, 3, scale=0.05)):
            result = ps.check_identities(
                model, loss_fn, batch, syms[name], g=g, identities=("item1", "item2a")
            )
            assert result.holds(TOL), (name, result.residuals)


# -- normalisation layers ----------------------------------------------------------------------


def _norm_net(eps: float, kind: str) -> nn.Module:
    torch.manual_seed(5)
    norm = {
        "layer": lambda: nn.LayerNorm(4, eps=eps),
        "group": lambda: nn.GroupNorm(2, 4, eps=eps),
        "batch": lambda: nn.BatchNorm1d(4, eps=eps),
    }[kind]()
    model = nn.Sequential(nn.Linear(3, 4), norm, nn.Tanh(), nn.Linear(4, 2))
    with torch.no_grad():
        model[1].weight.add_(0.3 * torch.randn(4))
        model[1].bias.add_(0.3 * torch.randn(4))
    return model.train() if kind == "batch" else model.eval()


@pytest.mark.parametrize("kind", ["layer", "group"])
def test_normalization_scale_is_exact_with_eps_zero(kind):
    model = _norm_net(0.0, kind)
    batch = regression_batch(3, 2, n=8)
    eq = ps.equivariance.normalization_scale(model, "1")
    assert eq.exact
    assert eq.symmetry
    assert eq.name == "normalization_scale[0->1]"
    for g in (torch.zeros(1), torch.tensor([0.4])):
        assert_matches_oracle(model, nn.MSELoss(), batch, eq, g)


@pytest.mark.parametrize("kind", ["layer", "batch"])
def test_normalization_scale_with_default_eps_is_labelled_approximate(kind):
    # (torch refuses eps = 0 for BatchNorm in training mode: it is always approximate there)
    model = _norm_net(1e-5, kind)
    batch = regression_batch(3, 2, n=8)
    eq = ps.equivariance.normalization_scale(model, "1")
    assert not eq.exact
    assert any("approximate" in note for note in eq.notes)
    with pytest.warns(ps.ApproximateEquivarianceWarning, match="labelled approximate"):
        result = ps.check_identities(model, nn.MSELoss(), batch, eq, g=[0.4])
    assert not result.exact
    assert 1e-12 < result.sanity["g"] < 1e-3
    assert result.residuals["item1"] > TOL  # reported, and honestly not exact


def test_batchnorm_in_eval_mode_is_refused():
    model = _norm_net(1e-5, "batch").eval()
    with pytest.raises(ps.InvalidArgumentError, match="evaluation mode"):
        ps.equivariance.normalization_scale(model, "1")


# -- Theorem 2: discrete symmetries at fixed points ---------------------------------------------


def _assert_theorem2_dense(model, loss_fn, batch, params, R_dense, result, correction=None):
    grad, H = dense_hessian(model, loss_fn, batch, params)
    assert rel(result.lhs["thm2_item1"], R_dense.T @ grad) < 1e-10
    V = result.terms["probes"]
    expected = (R_dense.T @ H @ R_dense @ V.T).T
    if correction is not None:
        expected = expected + (correction @ V.T).T
    assert rel(result.lhs["thm2_item2"], expected) < 1e-10
    assert rel(result.rhs["thm2_item2"], (H @ V.T).T) < 1e-10


def _three_cycle_net():
    model = ps.mlp([2, 3, 2], activation="tanh", seed=7)
    sym = next(s for s in ps.symmetries(model) if s.name.startswith("permutation"))
    return model, sym


def test_three_cycle_permutation_by_three_constructions():
    model, sym = _three_cycle_net()
    cycle = torch.tensor([1, 2, 0])
    params = ps.params_of(model)
    by_catalogue = ps.DiscreteSymmetry.from_symmetry(sym, cycle)
    basis = torch.eye(ps.flatten(params).numel())
    R = torch.stack(
        [ps.flatten(by_catalogue.apply(ps.unflatten(col, params))) for col in basis.T], dim=1
    )
    by_matrix = ps.DiscreteSymmetry(R, name="3-cycle matrix")
    indices = R.argmax(dim=1)
    by_indices = ps.DiscreteSymmetry.permutation(indices)
    assert by_matrix.order == by_indices.order == 3
    assert not torch.allclose(R @ R, torch.eye(R.shape[0]))  # not an involution
    batch = regression_batch(2, 2)
    for transformation in (by_catalogue, by_matrix, by_indices):
        point = transformation.project(params)
        assert transformation.distance(point) < 1e-14
        assert rel(ps.flatten(point), ps.flatten(by_indices.project(params))) < 1e-14
        result = ps.check_identities(model, nn.MSELoss(), batch, transformation, params=point)
        assert result.theorem == 2
        assert result.holds(TOL), result.residuals
        assert float(torch.linalg.vector_norm(result.rhs["thm2_item1"])) > 1e-3  # not stationary
        _assert_theorem2_dense(model, nn.MSELoss(), batch, point, R, result)


class TriangularCycle(nn.Module):
    """f(θ) = w · Σ_i tanh(u_i x + 0.5) with u = φ(a), φ triangular and invertible:
    T = φ⁻¹ ∘ (3-cycle) ∘ φ is a nonlinear symmetry of order 3 with ∂²T ≠ 0."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Parameter(torch.tensor([0.3, -0.2, 0.5]))
        self.w = nn.Parameter(torch.tensor([0.8]))

    @staticmethod
    def phi(a: torch.Tensor) -> torch.Tensor:
        return torch.stack([a[0], a[1] + 0.5 * a[0] ** 2, a[2] + 0.3 * torch.sin(a[0] * a[1])])

    @staticmethod
    def phi_inverse(u: torch.Tensor) -> torch.Tensor:
        a0 = u[0]
        a1 = u[1] - 0.5 * a0**2
        return torch.stack([a0, a1, u[2] - 0.3 * torch.sin(a0 * a1)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        u = self.phi(self.a)
        return self.w * torch.tanh(x * u + 0.5).sum(-1, keepdim=True)


def test_nonlinear_three_cycle_needs_the_second_derivative_correction():
    model = TriangularCycle()
    cycle = torch.tensor([1, 2, 0])

    def transform(p):
        return {"a": model.phi_inverse(model.phi(p["a"])[cycle])}

    def projector(p):
        return {"a": model.phi_inverse(model.phi(p["a"]).mean().expand(3))}

    sym = ps.DiscreteSymmetry(transform, fixed_point_projector=projector, name="nonlinear cycle")
    params = sym.project(ps.params_of(model))
    gen = torch.Generator().manual_seed(0)
    batch = (torch.randn(8, 1, generator=gen), torch.randn(8, 1, generator=gen))
    result = ps.check_identities(model, nn.MSELoss(), batch, sym, params=params, probes=3)
    assert result.holds(TOL), result.residuals
    assert sym.order is None  # given a projector, the order is never needed
    # the dense oracle, with the correction Σ_p ∂_pL ∇²T_p entering with +
    z0 = ps.flatten(params)

    def T(z):
        return ps.flatten(sym.apply(ps.unflatten(z, params)))

    grad, _ = dense_hessian(model, nn.MSELoss(), batch, params)
    R = torch.func.jacfwd(T)(z0)
    correction = torch.einsum("p,pqs->qs", grad, torch.func.jacfwd(torch.func.jacfwd(T))(z0))
    assert float(torch.linalg.matrix_norm(correction)) > 1e-2
    _assert_theorem2_dense(model, nn.MSELoss(), batch, params, R, result, correction)
    # without the correction, or with it subtracted, the identity fails by far
    lhs, rhs = result.lhs["thm2_item2"], result.rhs["thm2_item2"]
    term = result.terms["thm2_item2_correction"]
    scale = result.scales["thm2_item2"]
    assert float(torch.linalg.vector_norm(lhs - term - rhs)) / scale > 1e-2
    assert float(torch.linalg.vector_norm(lhs - 2 * term - rhs)) / scale > 1e-2


def test_mirror_sign_flip_of_a_tanh_neuron():
    model = ps.mlp([3, 4, 2], activation="tanh", seed=8)
    params = ps.params_of(model)
    size = ps.flatten(params).numel()
    marker = {k: torch.zeros_like(t) for k, t in params.items()}
    marker["0.weight"][1] = 1.0
    marker["0.bias"][1] = 1.0
    marker["2.weight"][:, 1] = 1.0
    coords = torch.nonzero(ps.flatten(marker)).reshape(-1)
    O = torch.zeros(size, coords.numel())
    O[coords, torch.arange(coords.numel())] = 1.0
    mirror = ps.DiscreteSymmetry.mirror(O)
    flip = ps.DiscreteSymmetry.sign_flip(1 - 2 * ps.flatten(marker))
    point = mirror.project(params)
    assert float(ps.flatten(point)[coords].abs().max()) == 0.0
    batch = regression_batch(3, 2)
    R = torch.eye(size) - 2 * O @ O.T
    for transformation in (mirror, flip):
        result = ps.check_identities(model, nn.MSELoss(), batch, transformation, params=point)
        assert result.holds(TOL), result.residuals
        _assert_theorem2_dense(model, nn.MSELoss(), batch, point, R, result)
    # Corollary 4: Oᵀ∇L = 0 at the fixed point
    assert float((O.T @ result.rhs["thm2_item1"]).abs().max()) < 1e-14


# -- negative controls ---------------------------------------------------------------------------


def test_rescaling_on_a_tanh_net_fails_the_sanity_check_at_random_g():
    relu = ps.mlp([3, 4, 2], activation="relu", seed=0)
    tanh = ps.mlp([3, 4, 2], activation="tanh", seed=0)
    sym = next(s for s in ps.symmetries(relu) if s.name.startswith("rescaling"))
    eq = ps.Equivariance.from_symmetry(sym)
    batch = regression_batch(3, 2)
    with pytest.raises(ps.EquivarianceError, match=r"at random g") as error:
        ps.check_identities(tanh, nn.MSELoss(), batch, eq)
    assert "g0" not in str(error.value)  # vacuous at g₀, caught at the random g
    assert isinstance(error.value, ps.ParamsymError)
    value = float(str(error.value).split("relative size ")[1].split(" ")[0])
    assert value > 1e-4


def test_a_wrong_output_transform_fails_the_sanity_check():
    model = ps.mlp([3, 4, 2], activation="relu", bias=False, seed=0)
    right = ps.equivariance.homogeneity(model)
    wrong = ps.Equivariance(right.transform, lambda y, g: (3 * g[0]).exp() * y, dim=1)
    batch = regression_batch(3, 2)
    with pytest.raises(ps.EquivarianceError, match="not an equivariance"):
        ps.check_identities(model, nn.MSELoss(), batch, wrong)
    wrong_degree = ps.equivariance.homogeneity(model, degree=1)
    with pytest.raises(ps.EquivarianceError, match=r"\d\.\d\de-\d\d at random g"):
        ps.check_identities(model, nn.MSELoss(), batch, wrong_degree, g=[0.2])


def test_sign_flip_on_a_relu_net_is_not_a_symmetry():
    model = ps.mlp([3, 4, 2], activation="relu", seed=0)
    params = ps.params_of(model)
    marker = {k: torch.ones_like(t) for k, t in params.items()}
    marker["0.weight"][0] = -1.0  # neuron 0 in and out: the tanh mirror, not a ReLU symmetry
    marker["0.bias"][0] = -1.0
    marker["2.weight"][:, 0] = -1.0
    flip = ps.DiscreteSymmetry.sign_flip(ps.flatten(marker))
    # its fixed point zeroes neuron 0, whose ReLU then sits on its kink: a warning too
    with (
        pytest.raises(ps.EquivarianceError, match="not a symmetry"),
        pytest.warns(ps.NonSmoothWarning),
    ):
        ps.check_identities(
            model, nn.MSELoss(), regression_batch(3, 2), flip, params=flip.project(params)
        )


@pytest.mark.parametrize("where", ["g0", "random"])
@pytest.mark.parametrize("planted", ["parameter", "output"])
def test_a_planted_sign_error_in_one_term_is_caught(monkeypatch, planted, where):
    model = SinhScaled()
    x, _ = regression_batch(3, 1)
    batch = (x, torch.full((6, 1), 1.3))
    g = torch.zeros(1) if where == "g0" else random_g(1, 11)
    eq = sinh_equivariance(1)
    assert ps.check_identities(model, nn.MSELoss(), batch, eq, g=g).holds(TOL)
    original = sides_module.Side.term
    calls = {"n": 0}

    def flipped(self, j):
        calls["n"] += 1
        value = original(self, j)
        is_parameter_side = self.sign > 0
        return -value if is_parameter_side == (planted == "parameter") else value

    monkeypatch.setattr(sides_module.Side, "term", flipped)
    result = ps.check_identities(model, nn.MSELoss(), batch, eq, g=g)
    assert calls["n"] == 2  # one parameter-side and one output-side term (k = 1)
    assert result.residuals["item2a"] > 1e-3
    assert result.residuals["item1"] <= TOL  # the other identities are untouched


# -- bad input -----------------------------------------------------------------------------------


def _linear_scaling(model: nn.Module, m: int) -> ps.Equivariance:
    """T = gθ, S = g^m y with g₀ = 1: A = g I is singular at g = 0."""
    return ps.Equivariance(
        lambda p, g: {k: g[0] * t for k, t in p.items()},
        lambda y, g: g[0] ** m * y,
        dim=1,
        identity=torch.ones(1),
        name="linear scaling",
    )


@pytest.mark.parametrize("solver", ["auto", "direct", "gmres"])
def test_singular_parameter_jacobian_is_not_a_good_position(solver):
    model = ps.mlp([3, 4, 2], activation="relu", bias=False, seed=0)
    eq = _linear_scaling(model, 2)
    batch = regression_batch(3, 2)
    assert ps.check_identities(model, nn.MSELoss(), batch, eq, g=[0.7], solver=solver).holds(TOL)
    with pytest.raises(ps.NotAGoodPositionError, match=r"A = ∂_θT\(θ, g\)"):
        ps.check_identities(model, nn.MSELoss(), batch, eq, g=[0.0], solver=solver)


class Duplicated(nn.Module):
    """Returns its output twice, side by side."""

    def __init__(self) -> None:
        super().__init__()
        self.net = ps.mlp([3, 4, 1], activation="relu", bias=False, seed=0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.net(x)
        return torch.cat([y, y], dim=-1)


def test_singular_output_jacobian_is_not_a_good_position():
    model = Duplicated()
    # S reads only the first copy: C = ∂_yS is singular at every g, A is invertible
    eq = ps.Equivariance(
        lambda p, g: {k: g[0].exp() * t for k, t in p.items()},
        lambda y, g: (2 * g[0]).exp() * y[..., :1].expand_as(y),
        dim=1,
        name="duplicated",
    )
    batch = regression_batch(3, 2)
    for solver in ("direct", "gmres"):
        with pytest.raises(ps.NotAGoodPositionError, match=r"C = ∂_yS"):
            ps.check_identities(model, nn.MSELoss(), batch, eq, g=[0.3], solver=solver)


def test_discrete_check_off_the_fixed_set():
    model, sym = _three_cycle_net()
    cycle = ps.DiscreteSymmetry.from_symmetry(sym, torch.tensor([1, 2, 0]))
    with pytest.raises(ps.FixedPointError, match=r"project") as error:
        ps.check_identities(model, nn.MSELoss(), regression_batch(2, 2), cycle)
    distance = float(str(error.value).split("= ")[1].split(" ")[0])
    assert math.isclose(distance, cycle.distance(ps.params_of(model)), rel_tol=1e-2)


def test_relu_net_at_a_kink_warns():
    model = ps.mlp([3, 4, 2], activation="relu", seed=0)
    with torch.no_grad():
        model[0].weight[2] = 0.0
        model[0].bias[2] = 0.0  # neuron 2's pre-activation is exactly 0 on every input
    eq = ps.equivariance.homogeneity(model)
    with pytest.warns(ps.NonSmoothWarning, match="kink"):
        ps.check_identities(model, nn.MSELoss(), regression_batch(3, 2), eq)
    with warnings.catch_warnings():  # sanity=False skips the kink watch with the sanity check
        warnings.simplefilter("error")
        ps.check_identities(model, nn.MSELoss(), regression_batch(3, 2), eq, sanity=False)


def test_a_wrong_closed_form_tangent_is_caught_by_the_sanity_check():
    model = ps.mlp([3, 4, 2], activation="relu", bias=False, seed=0)
    right = ps.equivariance.homogeneity(model)
    wrong = ps.Equivariance(
        right.transform,
        right.output_transform,
        dim=1,
        tangent=lambda p, xi: {k: 2 * xi[0] * t for k, t in p.items()},
    )
    with pytest.raises(ps.EquivarianceError, match="closed-form tangent disagrees"):
        ps.check_identities(model, nn.MSELoss(), regression_batch(3, 2), wrong)
    with pytest.raises(ps.InvalidArgumentError, match="tangent must be callable"):
        ps.Equivariance(right.transform, dim=1, tangent="J")


def test_bad_arguments_are_named():
    model = ps.mlp([3, 4, 2], activation="relu", bias=False, seed=0)
    eq = ps.equivariance.homogeneity(model)
    batch = regression_batch(3, 2)
    with pytest.raises(ps.ShapeError, match=r"shape \(1,\)"):
        ps.check_identities(model, nn.MSELoss(), batch, eq, g=torch.zeros(2))
    with pytest.raises(ps.InvalidArgumentError, match="unknown identity"):
        ps.check_identities(model, nn.MSELoss(), batch, eq, identities=("item3",))
    with pytest.raises(ps.InvalidArgumentError, match="solver"):
        ps.check_identities(model, nn.MSELoss(), batch, eq, solver="cg")
    with pytest.raises(ps.InvalidArgumentError, match=r"nn\.Module"):
        ps.check_identities(lambda x: x, nn.MSELoss(), batch, eq)
    dropout = nn.Sequential(nn.Linear(3, 2), nn.Dropout(0.5)).train()
    with pytest.raises(ps.InvalidArgumentError, match="dropout"):
        ps.check_identities(dropout, nn.MSELoss(), batch, eq)
    perm = next(s for s in ps.symmetries(model) if s.dim == 0)
    with pytest.raises(ps.InvalidArgumentError, match=r"DiscreteSymmetry\.from_symmetry"):
        ps.check_identities(model, nn.MSELoss(), batch, perm)


@pytest.mark.parametrize("where", ["g0", "random"])
def test_fused_item_2a_folds_the_output_term_into_the_hessian_product(where):
    model = SinhScaled()
    x, _ = regression_batch(3, 1)
    batch = (x, torch.full((6, 1), 1.3))
    g = torch.zeros(2) if where == "g0" else random_g(2, 11)
    eq = sinh_equivariance(2)
    kwargs = {"g": g, "identities": ("item1", "item2a")}
    plain = ps.check_identities(model, nn.MSELoss(), batch, eq, **kwargs)
    fused = ps.check_identities(model, nn.MSELoss(), batch, eq, fused=True, **kwargs)
    assert plain.holds(TOL)
    assert fused.holds(TOL)
    expected = plain.lhs["item2a"] - plain.terms["item2a_output"]
    assert rel(fused.lhs["item2a"], expected) < 1e-12
    assert rel(fused.rhs["item2a"], plain.terms["item2a_parameter"]) < 1e-12
    assert "item2a_output" not in fused.terms
    # with items 2b it needs HJ alone: fused is ignored
    full = ps.check_identities(model, nn.MSELoss(), batch, eq, g=g, fused=True)
    assert rel(full.lhs["item2a"], plain.lhs["item2a"]) < 1e-12


def test_frozen_parameters_stay_fixed():
    model = ps.mlp([3, 5, 4, 2], activation="relu", bias=False, seed=0)
    model[0].weight.requires_grad_(False)  # one trainable weight left per remaining layer
    model[2].weight.requires_grad_(False)
    batch = regression_batch(3, 2)
    eq = ps.equivariance.homogeneity(model)  # degree 1 in the trainable weight
    assert eq.name == "homogeneity(m=1)"
    params = {k: t.detach() for k, t in model.named_parameters() if t.requires_grad}
    for g in (torch.zeros(1), torch.tensor([0.3])):
        result = ps.check_identities(model, nn.MSELoss(), batch, eq, g=g)
        assert result.holds(TOL), result.residuals
        assert result.lhs["item2a"].shape == (1, ps.flatten(params).numel())
        dense = dense_theorem1(model, nn.MSELoss(), batch, eq, g, params=params)
        assert rel(result.rhs["item2a"], dense.rhs["item2a"]) < 1e-10


def test_only_the_identities_asked_for_are_computed():
    model = ps.mlp([3, 4, 2], activation="relu", bias=False, seed=0)
    eq = ps.equivariance.homogeneity(model)
    batch = regression_batch(3, 2)
    result = ps.check_identities(
        model, nn.MSELoss(), batch, eq, identities=("item1", "item2a"), sanity=False
    )
    assert result.checked == ("item1", "item2a")
    assert set(result.residuals) == {"item1", "item2a"}
    assert result.sanity == {}
    assert result.holds(TOL)
    assert result.to_dict()["checked"] == ["item1", "item2a"]
    both = ps.check_identities(model, nn.MSELoss(), batch, eq, identities="item2b")
    assert both.checked == ("item2b_gg", "item2b_mixed", "consistency")
