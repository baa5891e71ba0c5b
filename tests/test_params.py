"""The params-dict algebra against dense vector arithmetic."""

import pytest
import torch

import paramsym as ps
from paramsym.core import randn_like


def _params(generator):
    model = ps.mlp([3, 4, 2], activation="tanh", seed=0, dtype=torch.float64)
    return (
        model,
        randn_like(ps.params_of(model), generator),
        randn_like(ps.params_of(model), generator),
    )


def test_flatten_unflatten_round_trip(generator):
    model, a, _ = _params(generator)
    flat = ps.flatten(a)
    assert flat.shape == (sum(p.numel() for p in model.parameters()),)
    back = ps.unflatten(flat, a)
    assert list(back) == list(a)
    for k in a:
        assert torch.equal(back[k], a[k])


def test_vector_operations_match_flat_vectors(generator):
    _, a, b = _params(generator)
    fa, fb = ps.flatten(a), ps.flatten(b)
    assert torch.allclose(ps.inner(a, b), fa @ fb, rtol=1e-14)
    assert torch.allclose(ps.norm(a), torch.linalg.vector_norm(fa), rtol=1e-14)
    assert torch.allclose(ps.flatten(ps.axpy(2.5, a, b)), 2.5 * fa + fb, rtol=1e-14)
    assert torch.allclose(ps.flatten(ps.sub(a, b)), fa - fb, rtol=1e-14)
    assert torch.allclose(ps.flatten(ps.add(a, b)), fa + fb, rtol=1e-14)
    assert torch.allclose(ps.flatten(ps.scale(-3.0, a)), -3.0 * fa, rtol=1e-14)
    assert float(ps.norm(ps.zeros_like(a))) == 0.0


def test_functional_call_matches_module(generator):
    model, a, _ = _params(generator)
    x = torch.randn(5, 3, generator=generator, dtype=torch.float64)
    assert torch.equal(ps.functional_call(model, ps.params_of(model), x), model(x))
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(a[name])
    assert torch.allclose(ps.functional_call(model, a, x), model(x), rtol=1e-14)


def test_params_of_shares_storage_but_not_graph():
    model = torch.nn.Linear(2, 2)
    p = ps.params_of(model)
    assert not p["weight"].requires_grad
    assert p["weight"].data_ptr() == model.weight.data_ptr()


def test_matrix_exp_is_accurate_where_torch_single_matrix_path_is_not():
    """pytorch#196592: the single-matrix path errs by ~1e-10 near norm 0.05 in float64."""
    import numpy as np
    import scipy.linalg

    from paramsym.core.linalg import matrix_exp

    worst = 0.0
    for n in (1, 2, 5, 16):
        for norm in np.logspace(-6, 1.2, 40):
            b = torch.randn(n, n, dtype=torch.float64, generator=torch.Generator().manual_seed(n))
            m = float(norm) * b / torch.linalg.matrix_norm(b, 1)
            reference = torch.from_numpy(scipy.linalg.expm(m.numpy()))
            error = (matrix_exp(m) - reference).abs().max() / reference.abs().max()
            worst = max(worst, float(error))
    assert worst <= 1e-12
    rotation = torch.tensor([[0.0, 0.049], [-0.049, 0.0]], dtype=torch.float64)
    exact = torch.tensor([[np.cos(0.049), np.sin(0.049)], [-np.sin(0.049), np.cos(0.049)]])
    assert float((matrix_exp(rotation) - exact).abs().max()) <= 1e-15


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_small_exp_pair_is_both_exponentials_to_the_dtypes_precision(dtype):
    """exp(M) and exp(−M) from one Taylor series against scipy's expm, and their product the
    identity, up to the largest norm it takes; a larger norm is refused."""
    import numpy as np
    import scipy.linalg

    from paramsym.core.linalg import SMALL_EXP_NORM, small_exp_pair

    eps = torch.finfo(dtype).eps
    generator = torch.Generator().manual_seed(0)
    for n in (1, 3, 64):
        for norm in (1e-8, 1e-3, 0.05, 0.999 * SMALL_EXP_NORM):
            b = torch.randn(4, n, n, dtype=torch.float64, generator=generator)
            m = (norm * b / torch.linalg.matrix_norm(b, 1, keepdim=True)).to(dtype)
            plus, minus = small_exp_pair(m)
            for sign, result in ((1, plus), (-1, minus)):
                reference = np.stack([scipy.linalg.expm(sign * a) for a in m.double().numpy()])
                error = (result.double() - torch.from_numpy(reference)).abs().max()
                assert float(error) <= 8 * eps, (n, norm, sign)
            identity = torch.eye(n, dtype=dtype).expand_as(m)
            assert float((plus @ minus - identity).abs().max()) <= 8 * eps
    with pytest.raises(ValueError, match="1-norm"):
        small_exp_pair(torch.eye(3, dtype=dtype))


def test_svd_falls_back_to_gesvd_where_gesdd_fails_to_converge(monkeypatch):
    """torch's CPU SVD (gesdd) can stop with "failed to converge" on large matrices with many
    repeated singular values; paramsym.core.linalg.svd then uses LAPACK's gesvd, which gives
    the same decomposition (checked here by forcing the failure)."""
    from paramsym.core import linalg

    g = torch.Generator().manual_seed(0)
    a = torch.randn(7, 5, generator=g, dtype=torch.float64)
    reference = torch.linalg.svd(a, full_matrices=False)

    def fails(*args, **kwargs):
        raise torch.linalg.LinAlgError("linalg.svd: The algorithm failed to converge")

    monkeypatch.setattr(torch.linalg, "svd", fails)
    for full in (False, True):
        u, s, vh = linalg.svd(a, full_matrices=full)
        assert u.dtype == s.dtype == vh.dtype == torch.float64
        assert u.shape == ((7, 7) if full else (7, 5))
        torch.testing.assert_close(s, reference.S, rtol=1e-12, atol=0.0)
        torch.testing.assert_close(u[:, :5] * s @ vh, a, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(u.T @ u, torch.eye(u.shape[1], dtype=torch.float64))


@pytest.mark.parametrize("dims", [[0], [1], [2], [0, 2], [1, 2], [0, 1], [-1]])
@pytest.mark.parametrize("layout", ["contiguous", "transposed", "narrowed"])
def test_sum_of_squares_in_every_layout(dims, layout):
    """core.linalg.sum_of_squares (the rescalings' rates) against the squares summed in
    float64, whichever way the layout picks (vector_norm, or blocks of the outermost axis)."""
    from paramsym.core.linalg import CHUNK, sum_of_squares

    base = torch.randn(CHUNK // 256, 40, 9, generator=torch.Generator().manual_seed(0))
    t = {
        "contiguous": base,
        "transposed": base.transpose(0, 2),
        "narrowed": base[:, 3:30],
    }[layout]
    got = sum_of_squares(t, dims)
    want = (t.double() ** 2).sum(dim=dims)
    assert got.dtype == t.dtype
    assert got.shape == want.shape
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=0)
