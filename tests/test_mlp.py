"""The MLP builder and the NTK parameterisation."""

import math

import pytest
import torch

import paramsym as ps


def test_standard_mlp_layout():
    model = ps.mlp([4, 8, 8, 3], activation="relu", seed=0)
    assert [type(m).__name__ for m in model] == ["Linear", "ReLU", "Linear", "ReLU", "Linear"]
    assert model(torch.randn(2, 4)).shape == (2, 3)
    assert ps.mlp([4, 3]) is not None  # no hidden layer: one linear map


def test_seed_makes_initialisation_reproducible_without_touching_global_state():
    torch.manual_seed(7)
    before = torch.rand(1)
    torch.manual_seed(7)
    a = ps.mlp([3, 5, 2], seed=11)
    b = ps.mlp([3, 5, 2], seed=11)
    after = torch.rand(1)
    assert torch.equal(before, after)
    for pa, pb in zip(a.parameters(), b.parameters(), strict=True):
        assert torch.equal(pa, pb)


@pytest.mark.parametrize("bias", [True, False])
def test_ntk_parameterisation_forward(bias):
    model = ps.mlp(
        [5, 7, 2], activation="tanh", bias=bias, parameterization="ntk", seed=0, dtype=torch.float64
    )
    first, last = model[0], model[2]
    assert isinstance(first, ps.NTKLinear)
    x = torch.randn(3, 5, dtype=torch.float64)
    # Seed 000 Eq. 33 with the fan-in fix: 1/sqrt(n_0) in the first layer, 1/sqrt(n_1) next.
    h = x @ first.weight.T / math.sqrt(5) + (first.bias if bias else 0)
    out = torch.tanh(h) @ last.weight.T / math.sqrt(7) + (last.bias if bias else 0)
    assert torch.allclose(model(x), out, rtol=1e-14)


def test_ntk_parameters_are_order_one():
    model = ps.mlp([200, 300, 10], parameterization="ntk", seed=0)
    std = torch.cat([p.detach().flatten() for p in model.parameters()]).std()
    assert 0.9 < float(std) < 1.1


def test_activation_given_as_module_or_spec():
    a = ps.mlp([2, 3, 1], activation=torch.nn.LeakyReLU(0.3))
    assert a[1].negative_slope == 0.3
    b = ps.mlp([2, 3, 1], activation=ps.nn.get_activation("monomial", power=2))
    assert isinstance(b[1], ps.nn.Monomial)
