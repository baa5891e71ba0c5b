"""``ps.symmetries``: what it finds on each architecture, and what it reports it cannot see."""

from collections import OrderedDict

import pytest
import torch
from torch import nn

import paramsym as ps


def names(model, **kwargs):
    return [s.name for s in ps.symmetries(model, **kwargs)]


@pytest.mark.parametrize(
    ("activation", "expected_first_layer"),
    [
        ("relu", ["rescaling[0->2]", "permutation[0->2]"]),
        ("leaky_relu", ["rescaling[0->2]", "permutation[0->2]"]),
        ("identity", ["GL[0->2]", "permutation[0->2]", "sign_flip[0->2]"]),
        ("tanh", ["permutation[0->2]", "sign_flip[0->2]"]),
        ("sigmoid", ["permutation[0->2]"]),
        ("gelu", ["permutation[0->2]"]),
        ("radial", ["orthogonal[0->2]", "permutation[0->2]", "sign_flip[0->2]"]),
    ],
)
def test_catalogue_per_activation(activation, expected_first_layer):
    found = names(ps.mlp([4, 5, 5, 3], activation=activation))
    second = [n.replace("0->2", "2->4") for n in expected_first_layer]
    assert found == expected_first_layer + second


def test_issue_acceptance_example_prints_both_hidden_layers():
    text = repr(ps.symmetries(ps.mlp([4, 8, 8, 3], activation="relu")))
    for layer in ("0->2", "2->4"):
        assert f"rescaling[{layer}]" in text
        assert f"permutation[{layer}]" in text
    assert "(R>0)^8" in text
    assert "S_8" in text


def test_homogeneity_degree_is_carried_to_the_outgoing_weight():
    s = ps.symmetries(ps.mlp([2, 3, 1], activation=ps.nn.Monomial(3)))[0]
    assert s.name == "rescaling[0->2]"
    assert s.degree == 3.0
    assert [(slot.name, slot.axis, slot.power) for slot in s.slots] == [
        ("0.weight", 0, 1.0),
        ("0.bias", 0, 1.0),
        ("2.weight", 1, -3.0),
    ]


def test_ntk_parameterisation_has_the_same_symmetries():
    assert names(ps.mlp([3, 4, 2], "relu", parameterization="ntk")) == names(
        ps.mlp([3, 4, 2], "relu")
    )


def test_symmetries_use_the_models_own_parameter_names():
    model = nn.Sequential(OrderedDict(fc1=nn.Linear(3, 4), act=nn.ReLU(), fc2=nn.Linear(4, 2)))
    s = ps.symmetries(model)[0]
    assert s.name == "rescaling[fc1->fc2]"
    assert s.parameter_names == ("fc1.weight", "fc1.bias", "fc2.weight")
    nested = nn.Sequential(
        nn.Sequential(nn.Linear(3, 4), nn.Tanh()), nn.Sequential(nn.Linear(4, 2))
    )
    assert names(nested) == ["permutation[0.0->1.0]", "sign_flip[0.0->1.0]"]


def test_two_linear_layers_in_a_row_have_gl_and_deep_linear_nets_one_gl_per_layer():
    model = nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 4), nn.Dropout(0.1), nn.Linear(4, 2))
    found = [s for s in ps.symmetries(model) if s.dim]
    assert [s.name for s in found] == ["GL[0->1]", "GL[1->3]"]
    assert any("Dropout" in note for note in found[1].notes)


def test_normalisation_layers():
    model = nn.Sequential(
        nn.Linear(3, 5),
        nn.BatchNorm1d(5),
        nn.ReLU(),
        nn.Linear(5, 4),
        nn.LayerNorm(4),
        nn.Tanh(),
        nn.Linear(4, 2),
        nn.Softmax(dim=-1),
    )
    found = {s.name: s for s in ps.symmetries(model)}
    assert list(found) == [
        "norm_scaling[0->1]",  # BN absorbs any positive row scaling of layer 0
        "rescaling[1->3]",  # BN's affine output through the ReLU
        "permutation[0->3]",  # permutes layer 0 rows, BN's γ and β, layer 3 columns
        "norm_scaling[3->4]",  # LayerNorm absorbs one common scale of layer 3
        "permutation[3->6]",
        "sign_flip[4->6]",  # LayerNorm's γ, β flip with tanh's sign
        "translation[6]",  # softmax output
    ]
    assert found["norm_scaling[0->1]"].per_neuron  # BatchNorm: one scale per feature
    assert not found["norm_scaling[3->4]"].per_neuron  # LayerNorm: one common scale
    assert found["permutation[0->3]"].parameter_names == (
        "0.weight",
        "0.bias",
        "1.weight",
        "1.bias",
        "3.weight",
    )
    assert found["translation[6]"].preserves == "function"


def test_batchnorm_at_the_end_and_relu_before_batchnorm():
    end = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4))
    assert names(end) == ["norm_scaling[0->1]"]  # a permutation would reach the output
    relu_first = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.BatchNorm1d(4), nn.Linear(4, 2))
    assert names(relu_first) == [
        "norm_scaling[0->2]",  # through the ReLU, absorbed by BN
        "rescaling[2->3]",  # BN's affine output straight into the linear layer
        "permutation[0->3]",
        "sign_flip[2->3]",  # BN's γ and β flip, no activation in between
    ]


def test_translation_as_loss_symmetry_needs_a_softmax_loss():
    model = ps.mlp([3, 4, 5], "tanh")
    assert "translation[2]" not in names(model)
    assert "translation[2]" not in names(model, loss_fn=nn.MSELoss())
    t = ps.symmetries(model, loss_fn=nn.CrossEntropyLoss())[-1]
    assert (t.name, t.preserves, t.dim, t.linear) == ("translation[2]", "loss", 5, False)
    assert "translation[2]" in names(model, loss_fn=torch.nn.functional.cross_entropy)


def test_custom_activation_module_is_recognised():
    class Cube(nn.Module):
        paramsym_activation = ps.nn.get_activation("monomial", power=3)

        def forward(self, z):
            return z**3

    model = nn.Sequential(nn.Linear(2, 3), Cube(), nn.Linear(3, 1))
    assert names(model) == ["rescaling[0->2]", "permutation[0->2]", "sign_flip[0->2]"]


def test_unknown_module_is_reported_and_its_hidden_layer_skipped():
    model = nn.Sequential(
        nn.Linear(3, 4), nn.Hardswish(), nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2)
    )
    with pytest.warns(ps.UnanalysedModuleWarning, match=r"'1' \(Hardswish\)"):
        found = names(model)
    assert found == ["rescaling[2->4]", "permutation[2->4]"]
    with pytest.raises(ps.UnsupportedModuleError, match=r"'1' \(Hardswish\)"):
        ps.symmetries(model, strict=True)


def test_non_sequential_model_analyses_its_sequential_parts_and_says_so():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 4))
            self.head = nn.Linear(4, 2)

        def forward(self, x):
            return self.head(torch.relu(self.body(x)))

    with pytest.warns(ps.UnanalysedModuleWarning) as record:
        found = names(Net())
    message = str(record[0].message)
    for fragment in ("'Net' (the model)", "'head' (Linear)", "outside any analysed block"):
        assert fragment in message
    assert found == ["rescaling[body.0->body.2]", "permutation[body.0->body.2]"]
    with pytest.raises(ps.UnsupportedModuleError):
        ps.symmetries(Net(), strict=True)


def test_product_of_the_hidden_gl_groups_is_the_multilayer_action():
    """g·(W, b) = (g_i W_i g_{i-1}⁻¹, g_i b_i) (Table 1.1 row 17)."""
    model = ps.mlp([3, 4, 5, 2], activation="identity", seed=0, dtype=torch.float64)
    product = ps.ProductSymmetry([s for s in ps.symmetries(model) if s.dim])
    assert (product.group, product.dim) == ("GL(4) × GL(5)", 16 + 25)
    g1, g2 = product.sample(
        scale=0.5, generator=torch.Generator().manual_seed(0), dtype=torch.float64
    )
    theta = ps.params_of(model)
    moved = product.act(theta, (g1, g2))
    assert torch.allclose(
        moved["2.weight"], g2 @ theta["2.weight"] @ torch.linalg.inv(g1), rtol=1e-12
    )
    assert torch.allclose(moved["2.bias"], g2 @ theta["2.bias"], rtol=1e-12)
    assert torch.allclose(moved["4.weight"], theta["4.weight"] @ torch.linalg.inv(g2), rtol=1e-12)
    x = torch.randn(6, 3, dtype=torch.float64)
    assert torch.allclose(ps.functional_call(model, moved, x), model(x), rtol=1e-10)
    xi = torch.randn(product.dim, dtype=torch.float64)
    total = ps.add(
        product.factors[0].tangent(theta, xi[:16]), product.factors[1].tangent(theta, xi[16:])
    )
    assert torch.allclose(ps.flatten(product.tangent(theta, xi)), ps.flatten(total))


def test_product_refuses_non_commuting_factors():
    rescaling, permutation = ps.symmetries(ps.mlp([3, 4, 2], "relu"))
    with pytest.raises(ps.InvalidArgumentError, match="not a direct product"):
        ps.ProductSymmetry([rescaling, permutation])
