"""The structure of global curvature (seed 002 §2–3, Lemma 2.4, Theorems 3.1–3.2, App. L) in
float64, against dense oracles that do not use the closed forms:

* the numerical commutant (null space of Σ_G (G⊗G − I)ᵀ(G⊗G − I) over group generators) and
  the exact group average over every element of a small finite group;
* dense matrices, ``torch.linalg.eigh`` and ``ps.hessian``.

Covered: loss invariance, gradient equivariance and Hessian congruence for the three groups
(and their failure where the activation breaks them), the commutant dimensions of notes 002
(15, 24, 16, 20, 38, 66/81/92, i.e. the corrected Theorem 3.2), the Reynolds projection, closure
under products and matrix functions, the surrogate's width independence and spectrum, the
Kronecker matvec, the literal Theorem 3.1 / 3.2 block formulas, and the model checks.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch import nn

import paramsym as ps
from helpers import randomize_, relative_error
from paramsym.symo import (
    CurvatureStructure,
    Factors,
    InverseRootConfig,
    MLPLayout,
    act,
    dense_action,
    group_elements,
    numerical_commutant,
    random_element,
    reynolds_projection,
)

F64 = torch.float64
TOL = 1e-12


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# (widths, group, bias, expected number of symmetric factors) — notes 002 §2.3–2.4
COMMUTANT_CASES = [
    ([3, 4, 2], "signed_permutation", False, 15),
    ([3, 4, 2], "signed_permutation", True, 24),
    ([2, 3, 3, 2], "signed_permutation", True, 16),
    ([3, 2, 3, 2], "signed_permutation", True, 20),
    ([3, 3, 3, 2], "permutation", False, 38),
    ([2, 3, 3, 2], "permutation", True, 66),
    ([3, 3, 3, 2], "permutation", True, 81),
    ([2, 3, 4, 3], "permutation", True, 92),
]
# Theorem 3.2 as printed (Σ_1L with d_0 + d_L unknowns, no b_1–W_L block), permutation group:
# notes 002 §2.4
PAPER_THEOREM_3_2 = {
    (3, 3, 3, 2, False): 37,
    (2, 3, 3, 2, True): 64,
    (3, 3, 3, 2, True): 78,
    (2, 3, 4, 3, True): 88,
}


@pytest.mark.parametrize(("widths", "group", "bias", "expected"), COMMUTANT_CASES)
def test_commutant_dimension_matches_factor_count(widths, group, bias, expected):
    s = CurvatureStructure.from_widths(widths, group, bias=bias)
    assert s.num_factors == expected
    assert numerical_commutant(s, symmetric=True).shape[0] == expected
    assert numerical_commutant(s).shape[0] == s.commutant_dimension  # all matrices
    paper = PAPER_THEOREM_3_2.get((*widths, bias)) if group == "permutation" else None
    if paper is not None:  # errata 1-2: the printed Theorem 3.2 misses invariant directions
        assert paper < expected


@pytest.mark.parametrize(
    ("widths", "groups", "bias"),
    [
        ([2, 2, 2], "orthogonal", True),
        ([2, 2, 2, 2], "orthogonal", False),
        ([2, 3, 2, 2], ("signed_permutation", "permutation"), True),
        ([2, 1, 3, 2], "permutation", True),  # a width-1 permutation layer (no "std" piece)
        ([3, 1, 2], "signed_permutation", (False, True)),
    ],
)
def test_commutant_of_other_groups_and_mixed_layers(widths, groups, bias):
    s = CurvatureStructure.from_widths(widths, groups, bias=bias)
    basis = numerical_commutant(s)
    assert numerical_commutant(s, symmetric=True).shape[0] == s.num_factors
    assert basis.shape[0] == s.commutant_dimension
    structured = Factors.random(s, _gen(0), symmetric=False).to_dense()
    # the structured space is inside the commutant, and has its dimension: they are equal
    assert relative_error(reynolds_projection(basis, structured), structured) < TOL


@st.composite
def finite_structures(draw) -> CurvatureStructure:
    """Depth 1–3 hidden layers, widths 1–3, biases per layer, a finite group per layer."""
    hidden = draw(st.integers(1, 3))
    widths = [draw(st.integers(1, 3)) for _ in range(hidden + 2)]
    bias = tuple(draw(st.booleans()) for _ in range(hidden + 1))
    groups = tuple(
        draw(st.sampled_from(["signed_permutation", "permutation"])) for _ in range(hidden)
    )
    return CurvatureStructure.from_widths(widths, groups, bias=bias)


@given(finite_structures(), st.integers(0, 2**31 - 1))
def test_structure_properties_on_random_architectures(structure, seed):
    """For any architecture: the factor counts are the numerical commutant's dimensions, the
    structured matrices are invariant, Q is orthogonal, and matvec and Σ^{−1/2} match dense."""
    assert numerical_commutant(structure, symmetric=True).shape[0] == structure.num_factors
    assert numerical_commutant(structure).shape[0] == structure.commutant_dimension
    f = Factors.random(structure, _gen(seed))
    dense = f.to_dense()
    g = dense_action(structure, random_element(structure, _gen(seed + 1)))
    assert relative_error(g @ dense @ g.T, dense) < TOL
    v = torch.randn(3, structure.num_params, generator=_gen(seed + 2), dtype=F64)
    assert relative_error(structure.flatten(f.matvec(structure.unflatten(v))), v @ dense) < TOL
    coords = structure.coordinates(structure.unflatten(v))
    assert relative_error(structure.flatten(structure.assemble(coords)), v) < TOL
    vals, vecs = torch.linalg.eigh(dense)
    oracle = vecs @ torch.diag(vals.rsqrt()) @ vecs.T
    assert relative_error(f.inv_sqrt().to_dense(), oracle) < 1e-11


def test_orbit_and_nullspace_commutants_agree():
    """The two numerical oracles (pair orbits of signed permutations, and the eigenvector null
    space of Σ (G⊗G − I)ᵀ(G⊗G − I)) span the same space."""
    s = CurvatureStructure.from_widths([2, 2, 2], "signed_permutation", bias=True)
    orbits, null = numerical_commutant(s), numerical_commutant(s, method="nullspace")
    assert orbits.shape == null.shape
    x = torch.randn(s.num_params, s.num_params, generator=_gen(30), dtype=F64)
    assert relative_error(reynolds_projection(orbits, x), reynolds_projection(null, x)) < TOL
    sym = numerical_commutant(s, symmetric=True, method="nullspace")
    assert sym.shape[0] == numerical_commutant(s, symmetric=True).shape[0] == s.num_factors


def _small_structures() -> list[CurvatureStructure]:
    return [
        CurvatureStructure.from_widths([3, 4, 2], "signed_permutation", bias=False),
        CurvatureStructure.from_widths([2, 3, 3, 2], "signed_permutation", bias=True),
        CurvatureStructure.from_widths([2, 3, 2], "permutation", bias=True),
        CurvatureStructure.from_widths([2, 3, 3, 2], "permutation", bias=False),
        CurvatureStructure.from_widths([2, 2, 2], "orthogonal", bias=True),
    ]


@pytest.mark.parametrize("structure", _small_structures(), ids=repr)
def test_reynolds_projection_equals_numerical_projection(structure):
    x = torch.randn(structure.num_params, structure.num_params, generator=_gen(1), dtype=F64)
    ours = Factors.from_dense(structure, x).to_dense()
    oracle = reynolds_projection(numerical_commutant(structure), x)
    assert relative_error(ours, oracle) < TOL
    f = Factors.random(structure, _gen(2), symmetric=False)  # a projection fixes its range
    assert relative_error(Factors.from_dense(structure, f.to_dense()).flat(), f.flat()) < TOL


def test_reynolds_projection_is_the_exact_group_average():
    s = CurvatureStructure.from_widths([2, 3, 2], "signed_permutation", bias=True)  # 48 elements
    x = torch.randn(s.num_params, s.num_params, generator=_gen(3), dtype=F64)
    total = torch.zeros_like(x)
    count = 0
    for element in group_elements(s):
        g = dense_action(s, element)
        total += g @ x @ g.T
        count += 1
    assert count == 48
    assert relative_error(Factors.from_dense(s, x).to_dense(), total / count) < TOL


@pytest.mark.parametrize("structure", _small_structures(), ids=repr)
def test_structured_matrices_commute_with_random_group_elements(structure):
    dense = Factors.random(structure, _gen(4)).to_dense()
    for seed in range(3):
        g = dense_action(structure, random_element(structure, _gen(seed)))
        assert relative_error(g @ g.T, torch.eye(len(g), dtype=F64)) < TOL
        assert relative_error(g @ dense @ g.T, dense) < TOL


@pytest.mark.parametrize("structure", _small_structures(), ids=repr)
def test_closure_under_products_and_matrix_functions(structure):
    a = Factors.random(structure, _gen(5))
    b = Factors.random(structure, _gen(6))
    da, db = a.to_dense(), b.to_dense()
    assert relative_error(a.matmul(b).to_dense(), da @ db) < TOL
    assert relative_error(a.add(b, alpha=-2.0).to_dense(), da - 2 * db) < TOL
    vals, vecs = torch.linalg.eigh(da)
    oracles = {
        "inverse": vecs @ torch.diag(1 / vals) @ vecs.T,
        "sqrt": vecs @ torch.diag(vals.sqrt()) @ vecs.T,
        "inv_sqrt": vecs @ torch.diag(vals.rsqrt()) @ vecs.T,
    }
    for name, oracle in oracles.items():
        ours = getattr(a, name)().to_dense()
        assert relative_error(ours, oracle) < 1e-11, name
    for method in ("blocks", "surrogate"):
        assert (
            relative_error(a.apply(torch.rsqrt, method=method).to_dense(), oracles["inv_sqrt"])
            < 1e-11
        )
    assert relative_error(a.spectrum(), vals) < TOL


@pytest.mark.parametrize(
    ("widths", "group", "bias", "other_hidden"),
    [
        ([3, 4, 2], "signed_permutation", False, [[1], [2], [7]]),
        ([2, 3, 3, 2], "signed_permutation", True, [[1, 1], [2, 4], [5, 2]]),
        ([2, 3, 2], "permutation", True, [[2], [3], [6]]),
        ([2, 3, 3, 2], "permutation", True, [[2, 2], [3, 4], [4, 2]]),
    ],
)
def test_surrogate_factors_do_not_depend_on_the_width(widths, group, bias, other_hidden):
    """Eq. 200: f(Σ) has the same factors at every hidden width ≥ 1 (odd) or ≥ 2 (ReLU);
    spec(Σ) = spec(Λ) as sets (Figs. 11–13)."""
    s = CurvatureStructure.from_widths(widths, group, bias=bias)
    factors = Factors.random(s, _gen(7))
    surrogate = factors.surrogate()
    assert surrogate.shape == (s.surrogate_size, s.surrogate_size)
    vals, vecs = torch.linalg.eigh(surrogate)
    from_surrogate = Factors.from_surrogate(s, vecs @ torch.diag(vals.rsqrt()) @ vecs.T)
    for hidden in other_hidden:
        t = s.with_hidden_widths(hidden)
        assert t.same_factors(s)
        dense = Factors(t, factors.blocks).to_dense()
        v, u = torch.linalg.eigh(dense)
        isr = Factors.from_dense(t, u @ torch.diag(v.rsqrt()) @ u.T)
        assert relative_error(isr.flat(), from_surrogate.flat()) < 1e-11
        # same eigenvalues, with repeats in the full matrix
        distinct = torch.unique_consecutive(v.round(decimals=9))
        assert torch.allclose(distinct, torch.unique_consecutive(vals.round(decimals=9)))


@pytest.mark.parametrize("structure", _small_structures(), ids=repr)
def test_kronecker_matvec_equals_dense_product(structure):
    f = Factors.random(structure, _gen(8), symmetric=False)
    dense = f.to_dense()
    v = torch.randn(5, structure.num_params, generator=_gen(9), dtype=F64)
    out = structure.flatten(f.matvec(structure.unflatten(v)))
    assert relative_error(out, v @ dense.T) < TOL
    one = structure.flatten(f.matvec(structure.unflatten(v[0])))
    assert relative_error(one, dense @ v[0]) < TOL


def test_coordinates_are_an_orthogonal_decomposition():
    """Q = [Q_τ] is orthogonal: coordinates preserve norms and assemble inverts them."""
    s = CurvatureStructure.from_widths([3, 4, 3, 2], "permutation", bias=True)
    v = s.unflatten(torch.randn(s.num_params, generator=_gen(10), dtype=F64))
    coords = s.coordinates(v)
    total = sum(float((c**2).sum()) for c in coords.values())
    assert abs(total - float(s.flatten(v).square().sum())) < 1e-12 * total
    assert relative_error(s.flatten(s.assemble(coords)), s.flatten(v)) < TOL


# -- the paper's closed forms, literally ------------------------------------------------------


def _commutation(m: int, n: int) -> torch.Tensor:
    """K with K vec(A) = vec(Aᵀ) for A of shape (m, n), column-major vec (Magnus & Neudecker)."""
    k = torch.zeros(m * n, m * n, dtype=F64)
    for i in range(m):
        for j in range(n):
            k[i * n + j, j * m + i] = 1.0
    return k


def test_theorem_3_1_two_layers_without_bias():
    """Eq. 183/201 built from Kronecker products and the commutation matrix equals the
    structured matrix with M = [[Φ_1, Ψ_1], [Ψ_1ᵀ, Φ_2]] (Eq. 202), in the paper's Vec order."""
    d0, d1, d2 = 3, 4, 2
    s = CurvatureStructure.from_widths([d0, d1, d2], "signed_permutation", bias=False)
    g = _gen(11)
    a = torch.randn(d0 + d2, d0 + d2, generator=g, dtype=F64)
    lam = a @ a.T
    phi1, psi1, phi2 = lam[:d0, :d0], lam[:d0, d0:], lam[d0:, d0:]
    eye = torch.eye(d1, dtype=F64)
    sigma12 = torch.kron(psi1, eye) @ _commutation(d2, d1)
    paper = torch.cat(
        [
            torch.cat([torch.kron(phi1, eye), sigma12], 1),
            torch.cat([sigma12.T, torch.kron(eye, phi2)], 1),
        ]
    )
    perm = s.paper_order()
    ours = Factors(s, {"def1": lam}).to_dense()[perm][:, perm]
    assert relative_error(ours, paper) < TOL
    f = Factors(s, {"def1": lam})
    assert torch.equal(f.block("def1", "0.weight", "0.weight"), phi1)
    assert torch.equal(f.block("def1", "0.weight", "2.weight"), psi1)
    assert torch.equal(f.block("def1", "2.weight", "2.weight"), phi2)


def test_theorem_3_2_normalised_blocks_and_errata():
    """ReLU: Σ_11 = Φ^(1)⊗I + (1/d_1)Φ^(2)⊗11ᵀ (Eq. 125, column-major) with Φ^(1) = M_std1 and
    Φ^(1) + Φ^(2) = M_trivial; and the two blocks Theorem 3.2 gets wrong for L = 3 are
    invariant: a general Σ_1L = Ω/√(d_1 d_2) (erratum 1) and a nonzero b_1–W_3 block
    (erratum 2)."""
    d0, d1, d2, d3 = 3, 3, 4, 2
    s = CurvatureStructure.from_widths([d0, d1, d2, d3], "permutation", bias=True)
    f = Factors.random(s, _gen(12))
    phi_1 = f.block("std1", "0.weight", "0.weight")
    phi_2 = f.block("trivial", "0.weight", "0.weight") - phi_1
    ones = torch.ones(d1, d1, dtype=F64)
    expected = torch.kron(phi_1, torch.eye(d1, dtype=F64)) + torch.kron(phi_2, ones) / d1
    perm = s.paper_order()
    dense = f.to_dense()[perm][:, perm]
    assert relative_error(dense[: d0 * d1, : d0 * d1], expected) < TOL

    basis = numerical_commutant(s)
    omega = torch.randn(d0, d3, generator=_gen(13), dtype=F64)  # rank 2: not ω1[j] + ω2[m]
    blocks = {k: torch.zeros_like(b) for k, b in f.blocks.items()}
    r0, r1 = s.type("trivial").span("0.weight")
    c0, c1 = s.type("trivial").span("4.weight")
    blocks["trivial"][r0:r1, c0:c1] = omega
    blocks["trivial"][c0:c1, r0:r1] = omega.T
    sigma_1l = Factors(s, blocks).to_dense()
    assert relative_error(reynolds_projection(basis, sigma_1l), sigma_1l) < TOL
    w1, wl = s.block_boundaries()[0], s.block_boundaries()[4]
    block = sigma_1l[w1[1] : w1[2], wl[1] : wl[2]].reshape(d1, d0, d3, d2)
    # entries Ω[j, m] / √(d_1 d_2): equal over the hidden indices i (of W_1) and k (of W_3)
    assert relative_error(block, omega[None, :, :, None].expand_as(block) / (d1 * d2) ** 0.5) < TOL
    centred = omega - omega.mean(0, keepdim=True) - omega.mean(1, keepdim=True) + omega.mean()
    assert float(centred.abs().max()) > 0.1  # not of the printed additive form ω1[j] + ω2[m]

    blocks = {k: torch.zeros_like(b) for k, b in f.blocks.items()}
    b0, _ = s.type("trivial").span("0.bias")
    blocks["trivial"][b0, c0:c1] = 1.0
    blocks["trivial"][c0:c1, b0] = 1.0
    b1_wl = Factors(s, blocks).to_dense()
    assert float(b1_wl.abs().max()) > 0
    assert relative_error(reynolds_projection(basis, b1_wl), b1_wl) < TOL


def test_paper_order_is_column_major_vec():
    s = CurvatureStructure.from_widths([2, 3, 2], "permutation", bias=True)
    params = s.unflatten(torch.arange(s.num_params, dtype=F64))
    paper = torch.cat(
        [
            params["0.weight"].T.reshape(-1),
            params["0.bias"],
            params["2.weight"].T.reshape(-1),
            params["2.bias"],
        ]
    )
    assert torch.equal(s.flatten(params)[s.paper_order()], paper)


# -- symmetries of the loss, the gradient and the Hessian --------------------------------------


def _net(activation: str, widths=(3, 4, 3, 2), bias=True, seed=0):
    model = ps.mlp(list(widths), activation, bias=bias, dtype=F64)
    randomize_(model, _gen(seed))
    x = torch.randn(7, widths[0], generator=_gen(seed + 1), dtype=F64)
    y = torch.randn(7, widths[-1], generator=_gen(seed + 2), dtype=F64)
    return model, (x, y)


GROUP_CASES = [
    ("relu", "permutation"),
    ("gelu", "permutation"),
    ("tanh", "permutation"),
    ("tanh", "signed_permutation"),
    ("identity", "signed_permutation"),
    ("identity", "orthogonal"),
]


@pytest.mark.parametrize(("activation", "group"), GROUP_CASES)
def test_loss_invariance_gradient_equivariance_hessian_congruence(activation, group):
    model, batch = _net(activation)
    s = CurvatureStructure.from_model(model, group)
    loss_fn = nn.MSELoss()
    theta = ps.params_of(model)
    element = random_element(s, _gen(20))
    moved = act(s, theta, element)
    g = dense_action(s, element)

    def loss(p):
        return loss_fn(ps.functional_call(model, p, batch[0]), batch[1])

    assert abs(float(loss(moved) - loss(theta))) < 1e-12 * float(loss(theta))
    grad, grad_moved = torch.func.grad(loss)(theta), torch.func.grad(loss)(moved)
    assert relative_error(s.flatten(grad_moved), g @ s.flatten(grad)) < TOL  # Eq. 82
    h, h_moved = ps.hessian(model, loss_fn, batch), ps.hessian(model, loss_fn, batch, moved)
    assert relative_error(h_moved, g @ h @ g.T) < 1e-11  # Eq. 94


@pytest.mark.parametrize(
    ("activation", "wrong_group"), [("relu", "signed_permutation"), ("tanh", "orthogonal")]
)
def test_larger_groups_break_the_loss(activation, wrong_group):
    """Sign flips are not a symmetry of ReLU nets, rotations not of tanh nets."""
    model, batch = _net(activation)
    s = CurvatureStructure.from_model(model)
    theta = ps.params_of(model)
    moved = act(s, theta, random_element(s, _gen(21), group=wrong_group))
    out, out_moved = model(batch[0]), ps.functional_call(model, moved, batch[0])
    assert relative_error(out_moved, out) > 1e-3
    with pytest.raises(ps.InvalidArgumentError, match="not a symmetry"):
        CurvatureStructure.from_model(model, wrong_group)


def test_action_agrees_with_the_symmetry_catalogue():
    model, _ = _net("tanh", widths=(3, 4, 2))
    s = CurvatureStructure.from_model(model)
    theta = ps.params_of(model)
    perm, signs = torch.tensor([2, 0, 3, 1]), torch.tensor([1.0, -1.0, -1.0, 1.0], dtype=F64)
    found = {type(sym).__name__: sym for sym in ps.symmetries(model)}
    catalogue = found["SignFlip"].act(found["NeuronPermutation"].act(theta, perm), signs)
    matrix = signs[:, None] * torch.eye(4, dtype=F64)[perm]
    ours = act(s, theta, (matrix,))
    assert all(torch.allclose(ours[k], catalogue[k], atol=0, rtol=0) for k in theta)


# -- reading models ----------------------------------------------------------------------------


def test_layout_from_models():
    model = ps.mlp([4, 5, 6, 3], "relu", bias=True, seed=0)
    layout = MLPLayout.from_model(model)
    assert layout.widths == (4, 5, 6, 3)
    assert layout.groups == ("permutation", "permutation")
    assert layout.parameter_names == tuple(n for n, _ in model.named_parameters())
    mixed = nn.Sequential(
        nn.Flatten(),
        nn.Linear(4, 5),
        nn.Tanh(),
        ps.NTKLinear(5, 3, bias=False),
        nn.ReLU(),
        nn.Sequential(nn.Linear(3, 2)),
        nn.LogSoftmax(dim=-1),
    )
    layout = MLPLayout.from_model(mixed)
    assert layout.groups == ("signed_permutation", "permutation")
    assert layout.bias_names == ("1.bias", None, "5.0.bias")
    linear = nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 2))  # no activation: the identity
    assert MLPLayout.from_model(linear).groups == ("orthogonal",)
    radial = ps.mlp([3, 4, 2], "radial")
    assert MLPLayout.from_model(radial).groups == ("orthogonal",)
    assert MLPLayout.from_model(model, "permutation").groups == ("permutation",) * 2


@pytest.mark.parametrize(
    ("model", "message"),
    [
        (nn.Linear(3, 2), "must be an nn.Sequential"),
        (nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Linear(4, 2)), "BatchNorm1d"),
        (nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.ReLU(), nn.Linear(4, 2)), "at most one"),
        (nn.Sequential(nn.Linear(3, 4), nn.PReLU(), nn.Linear(4, 2)), "PReLU"),
        (nn.Sequential(nn.Conv1d(1, 2, 3)), "no nn.Linear"),
        (nn.Sequential(nn.Tanh(), nn.Linear(3, 2)), "before the first Linear"),
        (nn.Sequential(nn.Linear(3, 4), nn.Linear(5, 2)), "expects 5 inputs"),
        (nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2), nn.Linear(2, 2)), None),
    ],
)
def test_unsupported_models_are_named(model, message):
    if message is None:  # a valid MLP (identity activation at the end)
        MLPLayout.from_model(model)
        return
    with pytest.raises(ps.UnsupportedModuleError, match=message):
        MLPLayout.from_model(model)


def test_bad_arguments():
    s = CurvatureStructure.from_widths([3, 4, 2], "permutation", bias=True)
    good = {name: torch.zeros(s.layout.shape(name)) for name in s.layout.parameter_names}
    with pytest.raises(ps.ShapeError, match=r"0\.weight"):
        s.coordinates({**good, "0.weight": torch.zeros(4, 2)})
    with pytest.raises(ps.MissingParameterError, match=r"2\.bias"):
        s.flatten({k: v for k, v in good.items() if k != "2.bias"})
    with pytest.raises(ps.ShapeError, match="trivial"):
        Factors(s, {"trivial": torch.zeros(2, 2), "std1": torch.zeros(5, 5)})
    with pytest.raises(ps.InvalidArgumentError, match="symmetric"):
        Factors.random(s, _gen(0), symmetric=False).inv_sqrt()
    with pytest.raises(ps.InvalidArgumentError, match="damping"):
        InverseRootConfig(damping=-1.0)
    with pytest.raises(ps.InvalidArgumentError, match="max_params"):
        Factors.identity(s).to_dense(max_params=10)
    with pytest.raises(ps.InvalidArgumentError, match="group must be"):
        CurvatureStructure.from_model(ps.mlp([3, 4, 2], "relu"), "rotation")  # type: ignore[arg-type]
