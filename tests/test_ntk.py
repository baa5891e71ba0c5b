"""Empirical NTK, alignment, functional dimension, linear regions and bounds vs dense oracles."""

from __future__ import annotations

import warnings

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch import nn

import paramsym as ps
from helpers import randomize_, reduce_kernel
from paramsym.tangent_kernel import (
    NTKTracker,
    StructuredFallbackWarning,
    kernel_matrix,
    null_directions,
    parameter_jacobian,
)

METHODS = ["jacobian", "vp", "structured"]
MODES = ["full", "trace", "diagonal"]


def dense_kernel(model, x1, x2):
    """The oracle: Θ = J(x1) J(x2)ᵀ from torch.func.jacrev on the flattened parameters."""
    params = ps.params_of(model)
    flat = ps.flatten(params)

    def outputs(z, x):
        return torch.func.functional_call(model, ps.unflatten(z, params), (x,)).reshape(
            x.shape[0], -1
        )

    j1 = torch.func.jacrev(outputs)(flat, x1)
    j2 = torch.func.jacrev(outputs)(flat, x2)
    return torch.einsum("aoq,bpq->abop", j1, j2)


def close(a, b, tol=1e-10):
    return float((a - b).abs().max()) <= tol * float(b.abs().max())


@given(
    st.sampled_from(["relu", "tanh", "gelu", "identity"]),
    st.booleans(),
    st.sampled_from(["standard", "ntk"]),
    st.integers(1, 4),
    st.integers(1, 5),
    st.integers(0, 999),
)
def test_every_method_and_mode_matches_the_dense_kernel(
    activation, bias, parameterization, outputs, tile, seed
):
    generator = torch.Generator().manual_seed(seed)
    model = ps.mlp(
        [3, 6, 5, outputs], activation, bias=bias, parameterization=parameterization
    ).double()
    randomize_(model, generator)
    x1 = torch.randn(7, 3, generator=generator, dtype=torch.float64)
    x2 = torch.randn(4, 3, generator=generator, dtype=torch.float64)
    reference = dense_kernel(model, x1, x2)
    for method in METHODS:
        for mode in MODES:
            kernel = ps.ntk(model, x1, x2, mode=mode, method=method, batch_size=tile)
            assert close(kernel, reduce_kernel(reference, mode)), (method, mode)
    same = ps.ntk(model, x1, method="structured")
    assert close(same, dense_kernel(model, x1, x1))
    assert torch.allclose(same, same.permute(1, 0, 3, 2))  # Θ(x, x′) = Θ(x′, x)ᵀ


def test_convolutions_sequences_and_fallback_layers():
    torch.manual_seed(0)
    conv = nn.Sequential(
        nn.Conv2d(2, 3, 3, padding=1, stride=2), nn.Tanh(), nn.Flatten(), nn.Linear(27, 4)
    ).double()
    x, y = (
        torch.randn(5, 2, 5, 5, dtype=torch.float64),
        torch.randn(3, 2, 5, 5, dtype=torch.float64),
    )
    reference = dense_kernel(conv, x, y)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # every parameter is in a supported layer: no fallback
        for mode in MODES:
            assert close(
                ps.ntk(conv, x, y, mode=mode, method="structured"), reduce_kernel(reference, mode)
            )
    sequence = nn.Sequential(
        nn.Linear(3, 4), nn.LayerNorm(4), nn.GELU(), nn.Flatten(), nn.Linear(24, 2)
    ).double()
    x, y = torch.randn(4, 6, 3, dtype=torch.float64), torch.randn(3, 6, 3, dtype=torch.float64)
    with pytest.warns(
        StructuredFallbackWarning, match=r"2 parameter tensor\(s\) of \['1'\]"
    ) as record:
        kernel = ps.ntk(sequence, x, y, method="structured")
    assert len(record) == 1  # said once
    assert close(kernel, dense_kernel(sequence, x, y))


def test_transformer_with_token_inputs():
    model = ps.nn.TinyTransformer(11, d_model=8, num_heads=2, num_layers=1, d_ff=8).double().eval()
    generator = torch.Generator().manual_seed(0)
    t1, t2 = (
        torch.randint(0, 11, (3, 5), generator=generator),
        torch.randint(0, 11, (2, 5), generator=generator),
    )
    reference = dense_kernel(model, t1, t2)
    for method in METHODS:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", StructuredFallbackWarning)  # embeddings, LayerNorms
            assert close(
                ps.ntk(model, t1, t2, mode="trace", method=method),
                reduce_kernel(reference, "trace"),
            )


def test_tiles_and_memory_budget_give_the_same_kernel():
    model = ps.mlp([4, 16, 16, 3], "relu", seed=0).double()
    x = torch.randn(40, 4, dtype=torch.float64)
    whole = ps.ntk(model, x, method="jacobian")
    for method in METHODS:
        tiled = ps.ntk(model, x, method=method, memory_budget=20_000)  # forces many small tiles
        assert close(tiled, whole)


@pytest.mark.parametrize("n", [60, 110])  # 600 and 1100 Gram rows: one and two levels of blocks
def test_symmetric_gram_blocks_match_the_dense_kernel(n):
    """With x2 = x1 the structured path multiplies only the Gram blocks on and above the
    diagonal (kernel._gram) once O·n reaches its block size; the mirrored result is exact."""
    model = ps.mlp([3, 8, 10], "tanh", seed=1).double()
    x = torch.randn(n, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(n))
    reference = dense_kernel(model, x, x)
    for mode in MODES:
        assert close(
            ps.ntk(model, x, mode=mode, method="structured"), reduce_kernel(reference, mode)
        )


def test_auto_method_rule():
    from paramsym.tangent_kernel import choose_method

    mlp = ps.mlp([3, 8, 2])
    assert choose_method(mlp, ps.params_of(mlp), 2) == "structured"
    norm_heavy = nn.Sequential(nn.Linear(2, 2), nn.LayerNorm(2), nn.GRU(2, 8))
    assert choose_method(norm_heavy, ps.params_of(norm_heavy), 2) == "jacobian"
    assert choose_method(norm_heavy, ps.params_of(norm_heavy), 2, budget=8) == "vp"
    embedding_heavy = nn.Sequential(nn.Embedding(100, 2), nn.LayerNorm(2))  # embeddings count
    assert choose_method(embedding_heavy, ps.params_of(embedding_heavy), 2) == "structured"


# -- alignment -------------------------------------------------------------------------------------


def _per_sample_derivative(loss, outputs, targets):
    """f = C′(F(x), y) per sample, written out by hand (the independent oracle)."""
    if loss == "mse":  # nn.MSELoss averages over n·O entries: C = ‖F − y‖²/O
        return 2.0 * (outputs - targets) / outputs.shape[1]
    probabilities = torch.softmax(outputs, dim=1)
    return probabilities - nn.functional.one_hot(targets, outputs.shape[1]).to(outputs.dtype)


@pytest.mark.parametrize("loss", ["mse", "cross_entropy"])
def test_prop_5_1_gradient_norm_identity(loss):
    """‖∇L‖² = ‖f‖²·A / |X|² exactly for a mean loss (seed 000 Prop 5.1, η = 1)."""
    generator = torch.Generator().manual_seed(1)
    model = ps.mlp([4, 9, 3], "tanh").double()
    randomize_(model, generator)
    x = torch.randn(6, 4, generator=generator, dtype=torch.float64)
    if loss == "mse":
        loss_fn, y = nn.MSELoss(), torch.randn(6, 3, generator=generator, dtype=torch.float64)
    else:
        loss_fn, y = nn.CrossEntropyLoss(), torch.randint(0, 3, (6,), generator=generator)
    with torch.no_grad():
        f = _per_sample_derivative(loss, model(x), y)
    theta = kernel_matrix(ps.ntk(model, x))
    vector = f.reshape(-1)
    from_kernel = float(vector @ theta @ vector / (vector @ vector))
    assert ps.loss_alignment(model, loss_fn, (x, y)) == pytest.approx(from_kernel, rel=1e-12)
    gradient = torch.func.grad(lambda p: loss_fn(ps.functional_call(model, p, x), y))(
        ps.params_of(model)
    )
    assert float(ps.norm(gradient) ** 2) == pytest.approx(
        float(vector @ vector) * from_kernel / 36, rel=1e-12
    )
    eigenvalues = torch.linalg.eigvalsh(theta)
    assert float(eigenvalues[0]) - 1e-12 <= from_kernel <= float(eigenvalues[-1]) + 1e-12


def test_alignment_moves_like_the_gradient_norm_along_an_orbit():
    """f is invariant on the orbit, so A(g1θ)/A(g2θ) = ‖∇L(g1θ)‖²/‖∇L(g2θ)‖² (seed 000 §5)."""
    generator = torch.Generator().manual_seed(2)
    model = ps.mlp([3, 6, 2], "relu").double()
    randomize_(model, generator)
    x, y = (
        torch.randn(8, 3, generator=generator, dtype=torch.float64),
        torch.randn(8, 2, generator=generator, dtype=torch.float64),
    )
    loss_fn = nn.MSELoss()
    rescaling = ps.symmetries(model)[0]
    theta = ps.params_of(model)
    points = [
        rescaling.act(theta, rescaling.sample(1.0, generator, torch.float64)) for _ in range(2)
    ]
    alignments = [ps.loss_alignment(model, loss_fn, (x, y), p) for p in points]
    norms = [
        float(
            ps.norm(torch.func.grad(lambda q: loss_fn(ps.functional_call(model, q, x), y))(p)) ** 2
        )
        for p in points
    ]
    assert alignments[0] / alignments[1] == pytest.approx(norms[0] / norms[1], rel=1e-10)
    assert abs(alignments[0] / alignments[1] - 1) > 1e-3  # the orbit really changes A


def test_kernel_alignment_definitions():
    generator = torch.Generator().manual_seed(3)
    features = torch.randn(10, 4, generator=generator, dtype=torch.float64)
    kernel = features @ features.T
    y = torch.randn(10, generator=generator, dtype=torch.float64)
    target = torch.outer(y, y)
    uncentered = float((kernel * target).sum() / (kernel.norm() * target.norm()))
    assert ps.kernel_alignment(kernel, y, centered=False) == pytest.approx(uncentered, rel=1e-12)
    h = torch.eye(10, dtype=torch.float64) - 1 / 10
    kc, lc = h @ kernel @ h, h @ target @ h
    assert ps.kernel_alignment(kernel, y) == pytest.approx(
        float((kc * lc).sum() / (kc.norm() * lc.norm())), rel=1e-12
    )
    assert ps.kernel_alignment(7.0 * kernel, y) == pytest.approx(
        ps.kernel_alignment(kernel, y), rel=1e-12
    )
    assert ps.kernel_alignment(target, y, centered=False) == pytest.approx(1.0)
    model = ps.mlp([2, 5, 3], "tanh", seed=0).double()
    x = torch.randn(6, 2, dtype=torch.float64)
    labels = torch.tensor([0, 1, 2, 0, 1, 2])
    value = ps.kernel_alignment(ps.ntk(model, x), labels)
    assert -1.0 <= value <= 1.0
    with pytest.raises(ps.ShapeError, match="targets"):
        ps.kernel_alignment(ps.ntk(model, x), torch.zeros(5, 3))


# -- functional dimension, regions, bounds --------------------------------------------------------


def he_init_(model, generator):
    """Seed 004's He variant: weights and biases N(0, 2/fan_in)."""
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.Linear):
                std = (2 / module.in_features) ** 0.5
                module.weight.copy_(
                    std
                    * torch.randn(
                        module.weight.shape, generator=generator, dtype=module.weight.dtype
                    )
                )
                module.bias.copy_(
                    std
                    * torch.randn(module.bias.shape, generator=generator, dtype=module.bias.dtype)
                )


def deep_narrow(seed, inputs=1, outputs=1):
    generator = torch.Generator().manual_seed(seed)
    model = ps.mlp([inputs, 10, 10, 10, 10, outputs], "relu").double()
    he_init_(model, generator)
    x = torch.rand(60, inputs, generator=generator, dtype=torch.float64)
    return model, x


@given(st.integers(0, 10_000), st.integers(1, 2), st.integers(1, 2))
def test_functional_dimension_is_the_rank_of_the_dense_jacobian(seed, inputs, outputs):
    model, x = deep_narrow(seed, inputs, outputs)
    jacobian = parameter_jacobian(model, x)
    flat = ps.flatten(ps.params_of(model))
    dense = torch.func.jacrev(
        lambda z: torch.func.functional_call(
            model, ps.unflatten(z, ps.params_of(model)), (x,)
        ).reshape(-1)
    )(flat)
    assert torch.allclose(jacobian, dense, rtol=1e-12, atol=1e-13)
    fd = ps.functional_dimension(model, x)
    assert fd.rank == int(torch.linalg.matrix_rank(dense))
    assert fd.shape == (60 * outputs, flat.numel())
    with pytest.warns(
        ps.ParamsymWarning, match="Gram matrix resolves"
    ):  # it cannot reach 1e-13·σ_max
        gram = ps.functional_dimension(model, x, method="gram")
    assert gram.approximate
    # The Gram path counts singular values above its floor t = √(N·eps)·σ_max; eigvalsh's error
    # on σ² stays well below t², so every σ > 2t is counted and none below t/2.
    singular = torch.linalg.svdvals(dense)
    floor = gram.tolerance
    assert int((singular > 2 * floor).sum()) <= gram.rank <= int((singular > floor / 2).sum())
    assert gram.rank <= fd.rank


def test_float32_reproduces_the_paper_and_the_gram_pitfall():
    model, x = deep_narrow(0)
    fd32 = ps.functional_dimension(model, x, dtype=torch.float32)
    j32 = parameter_jacobian(model, x, dtype=torch.float32)
    assert fd32.rank == int(torch.linalg.matrix_rank(j32))  # seed 004's rule exactly
    assert fd32.dtype == "torch.float32"
    k32 = j32 @ j32.T
    assert int(torch.linalg.matrix_rank(k32)) < fd32.rank  # rank of K in float32 undercounts
    # ... and squaring J's tolerance on K in float64 overcounts (notes 004 §5.2 is wrong there):
    j64 = parameter_jacobian(model, x)
    singular = torch.linalg.svdvals(j64)
    tol = max(j64.shape) * torch.finfo(torch.float64).eps * singular[0]
    squared_rule = int((torch.linalg.eigvalsh(j64 @ j64.T) > tol**2).sum())
    assert squared_rule > ps.functional_dimension(model, x).rank


def test_gram_path_reports_its_resolution():
    model, x = deep_narrow(1)
    with pytest.warns(ps.ParamsymWarning, match="resolves singular values down to"):
        result = ps.functional_dimension(model, x, method="gram", tol=1e-14)
    assert result.approximate


@given(st.integers(0, 10_000), st.sampled_from([nn.ReLU, lambda: nn.LeakyReLU(0.2)]))
def test_null_directions_are_annihilated_and_every_bound_holds(seed, activation):
    generator = torch.Generator().manual_seed(seed)
    model = ps.mlp([2, 6, 5, 6, 1], activation()).double()
    he_init_(model, generator)
    x = torch.rand(30, 2, generator=generator, dtype=torch.float64)
    jacobian = parameter_jacobian(model, x)
    directions = null_directions(model, x)
    scale = float(jacobian.abs().max() * directions.abs().max())
    assert float((jacobian @ directions).abs().max()) <= 1e-12 * scale
    bounds = ps.fd_bounds(model, x)
    rank = ps.functional_dimension(model, x).rank
    for name in ("trivial", "hidden_rescaling", "regions", "generators"):
        assert rank <= getattr(bounds, name), name
    assert bounds.hidden_rescaling == ps.flatten(ps.params_of(model)).numel() - 17


def test_linear_regions_count_distinct_patterns_and_bound_fd_in_1d():
    model, x = deep_narrow(4)
    regions = ps.linear_regions(model, x)
    manual = {tuple(row.tolist()) for row in regions.patterns}
    assert regions.count == len(manual)
    assert regions.neurons == 40
    assert ps.functional_dimension(model, x).rank <= 2 * regions.count  # Prop 4.6, n0 = 1
    with pytest.raises(ps.InvalidArgumentError, match="ReLU or LeakyReLU"):
        ps.linear_regions(ps.mlp([1, 3, 1], "tanh"), x.float())


def test_tracker_records_on_schedule():
    model, x = deep_narrow(5)
    y = torch.sin(6 * x)
    tracker = NTKTracker(model, x, every=2, loss_fn=nn.MSELoss(), targets=y, eigenvalues=3)
    recorded = [tracker(epoch) for epoch in range(5)]
    assert recorded == [True, False, True, False, True]
    assert tracker.history["epoch"] == [0, 2, 4]
    assert len(tracker.history["top_eigenvalues"][0]) == 3
    assert tracker.history["functional_dimension"][0] == ps.functional_dimension(model, x).rank
    assert len(tracker.history["linear_regions"]) == 3
    assert len(tracker.history["loss_alignment"]) == 3


# -- bad input -------------------------------------------------------------------------------------


def test_ntk_input_errors():
    model = ps.mlp([3, 4, 2], "relu").double()
    x = torch.randn(5, 3, dtype=torch.float64)
    with pytest.raises(ps.InvalidArgumentError, match=r"dtype torch\.int64"):
        ps.ntk(model, torch.ones(5, 3, dtype=torch.int64))
    with pytest.raises(ps.ShapeError, match="differ after the batch axis"):
        ps.ntk(model, x, torch.randn(4, 2, dtype=torch.float64))
    with pytest.raises(ps.ShapeError, match="cannot evaluate x1"):
        ps.ntk(model, torch.randn(5, 7, dtype=torch.float64))
    with pytest.raises(ps.InvalidArgumentError, match="mode"):
        ps.ntk(model, x, mode="sum")
    with pytest.raises(ps.InvalidArgumentError, match="method"):
        ps.ntk(model, x, method="fast")
    batchnorm = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Linear(4, 1)).train()
    with pytest.raises(ps.InvalidArgumentError, match="BatchNorm '1' is in training mode"):
        ps.ntk(batchnorm, x.float())
    with pytest.warns(StructuredFallbackWarning):  # eval-mode BatchNorm: affine, via Jacobians
        assert ps.ntk(batchnorm.eval(), x.float()).shape == (5, 5, 1, 1)
