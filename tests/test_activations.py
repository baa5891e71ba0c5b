"""Activation metadata, checked against the functions: every claim holds, every absent
property really fails (so the metadata the symmetry catalogue relies on is tight)."""

import math

import pytest
import torch

import paramsym as ps
from paramsym.nn import activation_spec, available_activations, get_activation

SPECS = [
    get_activation("identity"),
    get_activation("relu"),
    get_activation("leaky_relu", negative_slope=0.2),
    get_activation("tanh"),
    get_activation("sigmoid"),
    get_activation("gelu"),
    get_activation("silu"),
    get_activation("elu", alpha=0.7),
    get_activation("softplus", beta=2.0),
    get_activation("monomial", power=3),
    get_activation("monomial", power=2),
    get_activation("radial"),
]
IDS = [s.describe() for s in SPECS]

Z = torch.linspace(-3.0, 3.0, 601, dtype=torch.float64).reshape(-1, 1).repeat(1, 3)
Z = Z + 0.01 * torch.arange(3, dtype=torch.float64)  # distinct coordinates, avoids exact zeros


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_homogeneity_degree_is_exact_and_tight(spec):
    c = 1.7
    if spec.degree is not None:
        assert torch.allclose(spec(c * Z), c**spec.degree * spec(Z), rtol=1e-12, atol=1e-14)
    else:
        ratio = spec(c * Z) / spec(Z)
        # Not homogeneous: the ratio σ(cz)/σ(z) is not a constant c^α on the grid.
        finite = ratio[torch.isfinite(ratio)]
        assert float(finite.max() - finite.min()) > 1e-3


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_oddness_is_exact_and_tight(spec):
    error = float((spec(-Z) + spec(Z)).abs().max())
    assert (error < 1e-14) == spec.odd


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_inverse_inverts_and_non_injective_ones_have_none(spec):
    inner = Z[(Z.abs() < 2.0).all(dim=1)] if spec.name == "radial" else Z
    if spec.invertible:
        assert torch.allclose(spec.inverse(spec(inner)), inner, rtol=1e-9, atol=1e-9)
    else:
        # Not injective: two different inputs share an output (grid search along axis 0).
        values = spec(Z[:, :1]).flatten()
        gaps = torch.cdist(values[:, None], values[:, None])
        distinct_inputs = torch.cdist(Z[:, :1], Z[:, :1]) > 1e-3
        assert bool(((gaps < 1e-3) & distinct_inputs).any())


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_nonzero_off_zero(spec):
    nonzero_inputs = Z[(Z.abs() > 1e-3).all(dim=1)]
    smallest = float(spec(nonzero_inputs).abs().min())
    assert (smallest > 1e-8) == spec.nonzero_off_zero


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_radial_means_orthogonal_equivariance(spec, generator):
    q, _ = torch.linalg.qr(torch.randn(3, 3, generator=generator, dtype=torch.float64))
    error = float((spec(Z @ q.T) - spec(Z) @ q.T).abs().max())
    assert (error < 1e-12) == (spec.radial or spec.linear)
    assert spec.pointwise == (not spec.radial)


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_module_round_trip(spec):
    module = spec.make_module()
    found = activation_spec(module)
    assert found is not None
    assert found == spec
    assert torch.allclose(module(Z), spec(Z), rtol=1e-14)


def test_custom_radial_function_and_custom_module_registration():
    radial = ps.nn.RadialRescaling(lambda r: torch.exp(-r))
    spec = activation_spec(radial)
    assert spec.radial
    assert spec.inverse is None
    z = torch.randn(4, 3, dtype=torch.float64)
    assert torch.allclose(radial(z), torch.exp(-z.norm(dim=-1, keepdim=True)) * z)

    class Cube(torch.nn.Module):
        paramsym_activation = get_activation("monomial", power=3)

        def forward(self, z):
            return z**3

    assert activation_spec(Cube()).degree == 3.0
    assert activation_spec(torch.nn.Hardswish()) is None


def test_registry_lists_names_and_leaky_relu_edge_slopes():
    assert {"relu", "tanh", "radial", "monomial", "leaky_relu"} <= set(available_activations())
    zero_slope = get_activation("leaky_relu", negative_slope=0.0)
    assert zero_slope.degree == 1.0
    assert not zero_slope.invertible
    assert not zero_slope.nonzero_off_zero
    assert get_activation("leaky_relu", negative_slope=1.0).odd
    assert math.isclose(get_activation("leaky_relu").arguments[0][1], 0.01)
