"""Exact linear symmetry discovery (issue 21 part 1): the null space of ⟨∇ℓ, Aθ⟩ = 0.

The zoo's dimensions come from the catalogue and from hand derivations:

* bias-free linear 3-4-2 net: GL(4), 16 (every ansatz that contains it);
* ReLU MLP: one positive rescaling per hidden neuron, Σ h_l;
* tanh / sigmoid MLP: no continuous symmetry (only sign flips and permutations);
* an asymmetric net (Lim et al. 2024, W-Asym: fixed random entries in every row): none;
* a fixed batch X of k < n inputs (data-dependent, Def. 1.3.4): the linear generators that keep
  the loss on X are the data-independent ones plus those that move the first layer within
  {ΔW : ΔW X = 0, Δb = 0} (for [W b]: {Δ : Δ [X; 1] = 0}). Under the layer pairs that is the
  right multiplication W₁ ↦ W₁N with N X = 0: n(n − rank X) more; under gl(P), every linear map
  from R^P into that subspace: P · h(n + 1 − rank[X; 1]) more.
"""

from __future__ import annotations

import json
import math

import pytest
import torch
from torch import nn

import paramsym as ps
from paramsym.discovery import (
    BasisAnsatz,
    FullAnsatz,
    LayerPairAnsatz,
    compare_to_catalogue,
    decide,
    discover_symmetries,
    lie_closure,
)
from paramsym.errors import AmbiguousDimensionWarning

MSE = nn.MSELoss()


pytestmark = pytest.mark.usefixtures("one_thread")


def gaussian_batches(inputs: int, outputs: int, size: int = 16):
    """A callable drawing fresh float64 (x, y) batches from the discovery's generator."""

    def draw(generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.randn(size, inputs, generator=generator, dtype=torch.float64)
        return x, torch.randn(size, outputs, generator=generator, dtype=torch.float64)

    return draw


def mlp(widths, activation, bias=True):
    return ps.mlp(widths, activation, bias=bias, seed=0, dtype=torch.float64)


class AsymLinear(nn.Module):
    """W-Asym layer (Lim et al. 2024): some weights fixed to random values (a buffer), the
    rest trainable, W = F + S w with a fixed 0/1 selection S; every row has a fixed entry."""

    def __init__(self, inputs: int, outputs: int, seed: int) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        fixed = torch.zeros(outputs, inputs, dtype=torch.bool)
        fixed[torch.arange(outputs), torch.randint(0, inputs, (outputs,), generator=g)] = True
        free = (~fixed).flatten().nonzero().flatten()
        select = torch.zeros(outputs * inputs, free.numel(), dtype=torch.float64)
        select[free, torch.arange(free.numel())] = 1.0
        values = torch.randn(outputs, inputs, generator=g, dtype=torch.float64) * fixed
        self.register_buffer("fixed", values)
        self.register_buffer("select", select)
        self.shape = (outputs, inputs)
        self.weight = nn.Parameter(torch.empty(free.numel(), dtype=torch.float64))
        self.bias = nn.Parameter(torch.empty(outputs, dtype=torch.float64))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        bound = 1 / math.sqrt(self.shape[1])
        with torch.no_grad():
            self.weight.uniform_(-bound, bound)
            self.bias.uniform_(-bound, bound)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.fixed + (self.select @ self.weight).reshape(self.shape)
        return x @ w.T + self.bias


def catalogue_in_span(result, model) -> float:
    """Largest relative residual of a catalogued continuous tangent outside the discovered span."""
    comparison = compare_to_catalogue(result, model)
    return max((o.residual for o in comparison.symmetries), default=0.0)


# -- the zoo, default settings -------------------------------------------------------------------


def test_linear_net_full_ansatz_finds_gl4_with_the_sample_count_of_note_10():
    model = mlp([3, 4, 2], "identity", bias=False)
    result = discover_symmetries(model, MSE, gaussian_batches(3, 2), "full")
    assert result.determined
    assert result.dim == 16 == 4 * 4
    assert result.unknowns == 20 * 20
    assert result.rank_per_sample == 6  # one θ adds 6 independent rows (notes 001c §10)
    assert result.samples * result.rank_per_sample >= 2 * result.unknowns
    assert result.dims_by_samples[result.samples // 2] == 16
    assert result.gap > 1e6
    comparison = compare_to_catalogue(result, model)
    assert comparison.dim_catalogue == comparison.dim_discovered == comparison.dim_common == 16
    assert max(o.residual for o in comparison.symmetries) <= 1e-8
    assert comparison.closure is not None
    assert comparison.closure.closed
    # a generator is a matrix and a tangent field, and the two agree
    theta = ps.params_of(model)
    generator = result.generators[0]
    field = ps.flatten(generator.tangent_field(theta))
    torch.testing.assert_close(field, generator.matrix @ ps.flatten(theta))


@pytest.mark.parametrize("bias", [False, True])
def test_linear_net_layer_pairs_find_the_gl_dimension(bias):
    model = mlp([3, 4, 2], "identity", bias=bias)
    result = discover_symmetries(model, MSE, gaussian_batches(3, 2), "layer_pairs")
    assert result.determined
    assert result.dim == 16
    assert catalogue_in_span(result, model) <= 1e-8
    # the GL generator found is N = −M on the pair (W₁ ↦ MW₁, W₂ ↦ W₂N), up to the ansatz's
    # redundant directions (M = cI on a layer and N = −cI on the same layer) without biases
    for generator in result.generators:
        blocks = generator.blocks
        gap = blocks["right[2]"] + blocks["left[0]"]
        torch.testing.assert_close(
            gap, gap.diagonal().mean() * torch.eye(4, dtype=gap.dtype), atol=1e-10, rtol=0
        )
        if bias:
            assert float(gap.abs().max()) <= 1e-10


def test_relu_mlp_finds_one_rescaling_per_hidden_neuron():
    model = mlp([3, 5, 4, 2], "relu")
    result = discover_symmetries(model, MSE, gaussian_batches(3, 2))
    assert result.determined
    assert result.dim == 5 + 4
    comparison = compare_to_catalogue(result, model)
    assert comparison.dim_catalogue == comparison.dim_common == 9
    assert max(o.residual for o in comparison.symmetries) <= 1e-8
    assert comparison.catalogue_misses == 0
    assert comparison.discovery_misses == 0
    for generator in result.generators:  # diagonal M = −N on one pair, zero elsewhere
        for name, block in generator.blocks.items():
            off_diagonal = block - torch.diag(torch.diagonal(block))
            assert float(off_diagonal.abs().max()) <= 1e-9, name


@pytest.mark.parametrize("activation", ["tanh", "sigmoid"])
def test_tanh_and_sigmoid_mlps_have_no_continuous_symmetry(activation):
    model = mlp([3, 5, 4, 2], activation)
    result = discover_symmetries(model, MSE, gaussian_batches(3, 2))
    assert result.determined
    assert result.dim == 0
    assert result.singular_values[-1] > 1e3 * result.rtol


def test_relu_full_ansatz_finds_only_the_rescalings():
    model = mlp([3, 4, 2], "relu")
    result = discover_symmetries(model, MSE, gaussian_batches(3, 2), "full")
    assert result.determined
    assert result.dim == 4
    assert catalogue_in_span(result, model) <= 1e-8


def test_asymmetric_network_has_no_linear_symmetry():
    model = nn.Sequential(AsymLinear(3, 4, seed=1), nn.ReLU(), AsymLinear(4, 2, seed=2))
    result = discover_symmetries(model, MSE, gaussian_batches(3, 2), "full")
    assert result.determined
    assert result.dim == 0
    # the same architecture without the fixed entries has the 4 rescalings
    free = mlp([3, 4, 2], "relu")
    assert discover_symmetries(free, MSE, gaussian_batches(3, 2), "full").dim == 4


def test_softmax_cross_entropy_adds_the_output_translation_within_the_ansatz():
    model = mlp([3, 4, 3], "relu")

    def labelled(generator):
        x = torch.randn(16, 3, generator=generator, dtype=torch.float64)
        return x, torch.randint(0, 3, (16,), generator=generator)

    loss = nn.CrossEntropyLoss()
    result = discover_symmetries(model, loss, labelled)
    # 4 rescalings and the output block's M = 1uᵀ (all logits shift by uᵀz): 3
    assert result.determined
    assert result.dim == 4 + 3
    comparison = compare_to_catalogue(result, model, loss_fn=loss)
    assert comparison.orbit_catalogue_misses == 0  # inside the catalogue's orbits at each θ
    assert comparison.discovery_misses_in_ansatz == 0  # the rest of the translation is not linear


def test_a_constant_field_is_not_in_a_large_discovered_span():
    """Under gl(P) with cross-entropy every logit may shift by the same amount
    u(θ)ᵀa + v(θ) (a the 4 hidden activations, u and v linear in θ): 4 rescalings and
    (4 + 1)·P more (P = 31). The catalogue's translation has a constant field,
    which no linear generator has; with only a few kept points (k·P ≤ dim) every field would
    match some combination, so the result keeps more than dim / P of them."""
    model = mlp([3, 4, 3], "relu")

    def labelled(generator):
        x = torch.randn(16, 3, generator=generator, dtype=torch.float64)
        return x, torch.randint(0, 3, (16,), generator=generator)

    loss = nn.CrossEntropyLoss()
    result = discover_symmetries(model, loss, labelled, "full")
    assert result.dim == 4 + 5 * 31
    assert len(result.points) * 31 > result.dim
    comparison = compare_to_catalogue(result, model, loss_fn=loss)
    by_name = {s.name.split("[")[0]: s for s in comparison.symmetries}
    assert by_name["rescaling"].residual <= 1e-8
    assert by_name["translation"].residual > 0.1


# -- the two solvers agree ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("widths", "activation", "bias", "dim"),
    [
        ([3, 4, 2], "identity", True, 16),
        ([3, 5, 4, 2], "relu", True, 9),
        ([3, 5, 2], "tanh", True, 0),
    ],
)
def test_unitwise_solver_agrees_with_the_dense_solver(widths, activation, bias, dim):
    model = mlp(widths, activation, bias)
    dense = discover_symmetries(model, MSE, gaussian_batches(widths[0], widths[-1]), solver="dense")
    unitwise = discover_symmetries(
        model, MSE, gaussian_batches(widths[0], widths[-1]), solver="unitwise"
    )
    assert dense.solver == "dense"
    assert unitwise.solver == "unitwise"
    assert dense.dim == unitwise.dim == dim
    if dim:
        theta = unitwise.points[0]
        fields = [
            torch.stack([ps.flatten(g.tangent_field(theta)) for g in r.generators], dim=1)
            for r in (dense, unitwise)
        ]
        q = [torch.linalg.qr(f).Q for f in fields]
        cosines = torch.linalg.svdvals(q[0].T @ q[1])
        assert float(cosines.min()) >= 1 - 1e-10


# -- sample counts (notes 001c §10) ---------------------------------------------------------------


def test_too_few_samples_are_detected_not_reported_as_a_wrong_dimension():
    model = mlp([3, 4, 2], "identity", bias=False)
    batches = gaussian_batches(3, 2, size=4)
    kwargs = {"per_example": False, "batches_per_sample": 16}
    with pytest.warns(AmbiguousDimensionWarning, match="unstable"):
        few = discover_symmetries(model, MSE, batches, "full", samples=60, **kwargs)
    assert few.dim_estimate == 40  # the clean gap and the wrong dimension of the note ...
    assert few.gap > 1e6
    assert not few.determined
    assert few.dim is None
    assert few.status == "unstable"
    assert few.dims_by_samples == {30: 220, 60: 40}  # ... caught by halving the samples
    enough = discover_symmetries(model, MSE, batches, "full", **kwargs)
    assert enough.determined
    assert enough.dim == 16
    assert enough.samples >= 3 * 400 / 6


# -- data-dependent symmetries (Def. 1.3.4) -------------------------------------------------------


@pytest.mark.parametrize("k", [2, 6])
def test_data_dependent_discovery_finds_the_directions_the_batch_cannot_see(k):
    n = 5
    model = mlp([n, 4, 1], "sigmoid")
    g = torch.Generator().manual_seed(3)
    batch = (torch.randn(k, n, generator=g, dtype=torch.float64), torch.randn(k, 1, generator=g))
    extra = n * (n - min(k, n))  # W₁ ↦ W₁N with N X = 0; none once the batch spans the inputs
    fixed = discover_symmetries(model, MSE, batch, data_dependent=True)
    assert fixed.determined
    assert fixed.dim == extra
    fixed_unitwise = discover_symmetries(model, MSE, batch, data_dependent=True, solver="unitwise")
    assert fixed_unitwise.dim == extra
    fresh = discover_symmetries(model, MSE, gaussian_batches(n, 1))
    assert fresh.determined
    assert fresh.dim == 0
    # every discovered direction keeps W₁X: the tangent of W₁ annihilates the batch
    x = batch[0]
    for generator in fixed.generators:
        rate = generator.tangent_field(fixed.points[1])["0.weight"]
        assert float((rate @ x.T).abs().max()) <= 1e-10 * float(rate.abs().max())
    # the pseudo-inverse action (nonlinear in θ) is outside every linear ansatz
    comparison = compare_to_catalogue(fixed, model)
    pinv = [o for o in comparison.symmetries if o.name.startswith("pinv_GL")]
    assert pinv
    assert pinv[0].residual > 1e-3
    assert any(name.startswith("nonlinear_GL") for name in comparison.skipped) == (k > 1)


def test_data_dependent_full_ansatz_matches_the_derivation():
    n, h, k = 3, 3, 1
    model = mlp([n, h, 1], "sigmoid")
    g = torch.Generator().manual_seed(4)
    batch = (torch.randn(k, n, generator=g, dtype=torch.float64), torch.randn(k, 1, generator=g))
    result = discover_symmetries(model, MSE, batch, "full", data_dependent=True)
    p = sum(t.numel() for t in model.parameters())
    assert result.determined
    assert result.dim == p * h * (n + 1 - k)


# -- ansätze, results, closure --------------------------------------------------------------------


@pytest.mark.parametrize("theta", ["gaussian", "callable"])
def test_parameter_draws_around_a_point_or_from_a_callable(theta):
    model = mlp([3, 5, 4, 2], "relu")
    center = ps.params_of(model)

    def draw(generator):
        return {
            k: v + 0.5 * torch.randn(v.shape, generator=generator, dtype=v.dtype)
            for k, v in center.items()
        }

    spec = draw if theta == "callable" else "gaussian"
    result = discover_symmetries(model, MSE, gaussian_batches(3, 2), theta=spec, theta_scale=0.5)
    assert result.determined
    assert result.dim == 9
    assert catalogue_in_span(result, model) <= 1e-8


def test_user_basis_of_matrices():
    model = mlp([2, 2, 1], "relu", bias=False)  # W₁ (2×2) then W₂ (1×2): P = 6
    rescale = torch.zeros(6, 6, dtype=torch.float64)
    rescale[0, 0] = rescale[1, 1] = 1.0  # row 0 of W₁ up ...
    rescale[4, 4] = -1.0  # ... column 0 of W₂ down
    other = torch.randn(6, 6, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    result = discover_symmetries(model, MSE, gaussian_batches(2, 1), [rescale, other, 2 * rescale])
    assert result.determined
    assert result.dim == 1
    assert "1 redundant" in " ".join(result.notes)
    torch.testing.assert_close(
        result.generators[0].matrix.abs() / result.generators[0].matrix.abs().max(),
        rescale.abs(),
        atol=1e-10,
        rtol=0,
    )
    maps = [lambda p: {"0.weight": p["0.weight"], "2.weight": -p["2.weight"]}]
    assert discover_symmetries(model, MSE, gaussian_batches(2, 1), maps).dim == 1


def test_layer_pair_ansatz_rows_fields_matrices_and_brackets_agree():
    model = mlp([3, 4, 2], "tanh", bias=False)
    names = [n for n, _ in model.named_parameters()]
    ansatz = LayerPairAnsatz(model, names, input_block=True, output_block=True)
    assert ansatz.redundancy().shape[0] == 2  # both weights have a left and a right block
    g = torch.Generator().manual_seed(0)
    c1, c2 = (torch.randn(ansatz.size, generator=g, dtype=torch.float64) for _ in range(2))
    theta = torch.randn(ansatz.numel, generator=g, dtype=torch.float64)
    grads = torch.randn(3, ansatz.numel, generator=g, dtype=torch.float64)
    a1, a2 = ansatz.matrix(c1), ansatz.matrix(c2)
    torch.testing.assert_close(ansatz.field(c1, theta), a1 @ theta)
    torch.testing.assert_close(ansatz.rows(theta, grads) @ c1, grads @ (a1 @ theta))
    torch.testing.assert_close(ansatz.matrix(ansatz.bracket(c1, c2)), a1 @ a2 - a2 @ a1)
    for direction in ansatz.redundancy():
        assert float(ansatz.matrix(direction).abs().max()) <= 1e-12
    full = FullAnsatz(names, [t.shape for t in model.parameters()])
    torch.testing.assert_close(full.rows(theta, grads) @ a1.reshape(-1), grads @ (a1 @ theta))


def test_result_to_dict_is_json_and_generators_close_under_brackets():
    model = mlp([3, 4, 2], "identity", bias=True)
    result = discover_symmetries(model, MSE, gaussian_batches(3, 2))
    data = json.loads(json.dumps(result.to_dict()))
    assert data["dim"] == 16
    assert data["determined"]
    assert len(data["singular_values"]) == 45
    closure = lie_closure(result)
    assert closure is not None
    assert closure.closed
    assert closure.pairs == 120
    assert closure.max_residual <= 1e-10


def test_a_non_closed_span_is_reported():
    model = mlp([3, 4, 2], "identity", bias=True)
    result = discover_symmetries(model, MSE, gaussian_batches(3, 2))
    # two generic elements of gl(4) do not span a subalgebra: keep two random directions
    g = torch.Generator().manual_seed(5)
    mix = torch.randn(16, 2, generator=g, dtype=torch.float64)
    result.coefficients = torch.linalg.qr(result.coefficients @ mix).Q
    result.dim_estimate = 2
    closure = lie_closure(result)
    assert closure is not None
    assert not closure.closed
    assert closure.max_residual > 1e-3


def test_decide_counts_zeros_and_flags_the_band():
    values = torch.tensor([1.0, 1e-2, 1e-14, 1e-15], dtype=torch.float64)
    clean = decide(values, 1e-8, 1e3)
    assert clean.dim == 2
    assert not clean.ambiguous
    assert clean.gap == pytest.approx(1e12)
    unclear = decide(torch.tensor([1.0, 1e-7, 1e-14]), 1e-8, 1e3)
    assert unclear.dim == 1
    assert unclear.ambiguous


# -- bad input ---------------------------------------------------------------------------------


def test_ansatz_too_large_is_refused_with_the_memory_it_needs():
    model = mlp([20, 20, 10], "relu")  # P = 630: gl(630) has 396,900 unknowns
    with pytest.raises(ps.InvalidArgumentError, match=r"396900 unknowns.*GiB") as error:
        discover_symmetries(model, MSE, gaussian_batches(20, 10), "full")
    assert isinstance(error.value, ValueError)
    assert "max_memory" in str(error.value)


def test_all_zero_batch_is_an_error():
    model = mlp([3, 4, 2], "relu")
    zero = (torch.zeros(8, 3, dtype=torch.float64), torch.randn(8, 2, dtype=torch.float64))
    with pytest.raises(ps.InvalidArgumentError, match="all zero"):
        discover_symmetries(model, MSE, zero)
    with pytest.raises(ps.InvalidArgumentError, match="all zero"):
        discover_symmetries(model, MSE, lambda: zero)


def test_model_without_parameters_is_an_error():
    with pytest.raises(ps.InvalidArgumentError, match="no trainable parameters"):
        discover_symmetries(nn.Sequential(nn.ReLU()), MSE, gaussian_batches(3, 3))


def test_layer_pairs_refuse_non_linear_parameters_and_unitwise_non_chains():
    """The MLP class refuses a conv (``ansatz="layer_pairs"`` then reads the pairs off the
    traced graph: tests/test_discovery_channels.py)."""
    conv = nn.Sequential(nn.Conv1d(1, 2, 3), nn.Flatten(), nn.Linear(2, 1)).double()
    with pytest.raises(ps.InvalidArgumentError, match=r"'0.weight'.*nn.Linear"):
        LayerPairAnsatz(conv)

    class Skip(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b = nn.Linear(3, 3).double(), nn.Linear(3, 2).double()

        def forward(self, x):
            return self.b(torch.relu(self.a(x)) + x)

    with pytest.raises(ps.InvalidArgumentError, match=r"not an nn\.Sequential"):
        discover_symmetries(Skip(), MSE, gaussian_batches(3, 2), solver="unitwise")


def test_ambiguous_gap_is_reported_never_rounded():
    class NearlyRelu(nn.Module):  # relu + εz²: the rescalings hold up to ε
        def forward(self, z):
            return torch.relu(z) + 1e-6 * z * z

    model = nn.Sequential(nn.Linear(3, 4), NearlyRelu(), nn.Linear(4, 2)).double()
    with pytest.warns(AmbiguousDimensionWarning, match="ambiguous"):
        result = discover_symmetries(model, MSE, gaussian_batches(3, 2))
    assert result.status == "ambiguous"
    assert result.dim is None
    assert not result.determined
    assert result.singular_values[-1] < 1e3 * result.rtol  # the rescalings, broken at 1e-6
    assert "min_gap" in result.reason


def test_bad_arguments():
    model = mlp([3, 4, 2], "relu")
    with pytest.raises(ps.InvalidArgumentError, match="samples"):
        discover_symmetries(model, MSE, gaussian_batches(3, 2), samples=1)
    with pytest.raises(ps.InvalidArgumentError, match="unknown name"):
        discover_symmetries(model, MSE, gaussian_batches(3, 2), "diagonal")  # type: ignore[arg-type]
    with pytest.raises(ps.ShapeError, match=r"\(26, 26\)"):
        discover_symmetries(model, MSE, gaussian_batches(3, 2), [torch.eye(5)])
    with pytest.raises(ps.InvalidArgumentError, match="theta"):
        discover_symmetries(model, MSE, gaussian_batches(3, 2), theta="uniform")  # type: ignore[arg-type]
    names = [n for n, _ in model.named_parameters()]
    assert BasisAnsatz(names, [p.shape for p in model.parameters()], [torch.eye(26)]).size == 1
