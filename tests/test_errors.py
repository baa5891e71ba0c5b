"""Bad input raises a ParamsymError subclass naming the module, argument or parameter."""

import math

import pytest
import torch
from torch import nn

import paramsym as ps


@pytest.fixture
def relu_net():
    return ps.mlp([3, 4, 2], activation="relu", seed=0, dtype=torch.float64)


def check(error, cls, *fragments):
    assert isinstance(error.value, ps.ParamsymError)
    assert isinstance(error.value, cls)
    for fragment in fragments:
        assert fragment in str(error.value), str(error.value)


def test_unsupported_module_warns_by_default_and_raises_when_strict():
    model = nn.Sequential(nn.Linear(2, 3), nn.Conv1d(1, 1, 1), nn.Linear(3, 1))
    with pytest.warns(ps.UnanalysedModuleWarning, match=r"'1' \(Conv1d\)"):
        ps.symmetries(model)
    with pytest.raises(ps.UnsupportedModuleError) as error:
        ps.symmetries(model, strict=True)
    check(error, TypeError, "'1' (Conv1d)")


def test_symmetries_of_something_that_is_not_a_module():
    with pytest.raises(ps.InvalidArgumentError) as error:
        ps.symmetries("mlp")
    check(error, ValueError, "torch.nn.Module", "str")


def test_non_invertible_gl_element():
    model = ps.mlp([3, 4, 2], activation="identity", dtype=torch.float64)
    gl = ps.symmetries(model)[0]
    theta = ps.params_of(model)
    with pytest.raises(ps.InvalidGroupElementError) as error:
        gl.act(theta, torch.zeros(4, 4, dtype=torch.float64))
    check(error, ValueError, "GL[0->2]", "singular")
    low_rank = torch.randn(4, 3, dtype=torch.float64) @ torch.randn(3, 4, dtype=torch.float64)
    with pytest.raises(ps.InvalidGroupElementError, match="singular"):
        gl.act(theta, low_rank)
    with pytest.raises(ps.InvalidGroupElementError):
        gl.inverse(torch.full((4, 4), math.nan, dtype=torch.float64))


def test_wrongly_shaped_group_elements():
    model = ps.mlp([3, 4, 2], activation="identity", dtype=torch.float64)
    gl, permutation, _ = ps.symmetries(model)
    with pytest.raises(ps.ShapeError) as error:
        gl.act(ps.params_of(model), torch.eye(5, dtype=torch.float64))
    check(error, ValueError, "GL[0->2]", "(4, 4)", "(5, 5)")
    with pytest.raises(ps.ShapeError, match="integer index tensor"):
        permutation.check_element(torch.tensor([0.0, 1.0, 2.0, 3.0]))
    with pytest.raises(ps.InvalidGroupElementError, match="not a permutation"):
        permutation.check_element(torch.tensor([0, 0, 1, 2]))
    with pytest.raises(ps.ShapeError, match=r"shape \(16,\)"):
        gl.exp(torch.zeros(15, dtype=torch.float64))
    product = ps.ProductSymmetry([gl])
    with pytest.raises(ps.ShapeError, match="tuple of 1"):
        product.act(ps.params_of(model), torch.eye(4))


def test_negative_scale_for_relu_rescaling(relu_net):
    rescaling = ps.symmetries(relu_net)[0]
    scales = torch.tensor([1.0, -0.5, 2.0, 1.0], dtype=torch.float64)
    with pytest.raises(ps.InvalidGroupElementError) as error:
        rescaling.act(ps.params_of(relu_net), scales)
    check(error, ValueError, "rescaling[0->2]", "positive", "-0.5")


def test_non_orthogonal_element_for_radial_layer():
    model = ps.mlp([3, 4, 2], activation="radial", dtype=torch.float64)
    orthogonal = ps.symmetries(model)[0]
    with pytest.raises(ps.InvalidGroupElementError) as error:
        orthogonal.act(ps.params_of(model), 2 * torch.eye(4, dtype=torch.float64))
    check(error, ValueError, "orthogonal[0->2]", "not orthogonal")


def test_invalid_sign_flip():
    model = ps.mlp([3, 4, 2], activation="tanh", dtype=torch.float64)
    sign = ps.symmetries(model)[1]
    with pytest.raises(ps.InvalidGroupElementError, match="±1"):
        sign.act(ps.params_of(model), torch.tensor([1.0, 0.5, -1.0, 1.0], dtype=torch.float64))


def test_nan_parameters(relu_net):
    theta = ps.params_of(relu_net)
    theta["2.weight"] = theta["2.weight"].clone()
    theta["2.weight"][0, 0] = math.nan
    rescaling = ps.symmetries(relu_net)[0]
    with pytest.raises(ps.NonFiniteError) as error:
        rescaling.act(theta, rescaling.identity(dtype=torch.float64))
    check(error, ValueError, "'2.weight'", "rescaling[0->2]")
    batch = (torch.randn(4, 3, dtype=torch.float64), torch.randn(4, 2, dtype=torch.float64))
    with pytest.raises(ps.NonFiniteError, match=r"'2\.weight'"):
        ps.hvp(relu_net, nn.MSELoss(), batch, ps.zeros_like(theta), params=theta)
    with pytest.raises(ps.NonFiniteError, match=r"'2\.weight'"):
        ps.top_eigenvalues(relu_net, nn.MSELoss(), batch, params=theta)
    with torch.no_grad():
        relu_net[0].bias[1] = math.inf
    with pytest.raises(ps.NonFiniteError) as error:
        ps.symmetries(relu_net)
    check(error, ValueError, "'0.bias'")


def test_finite_check_is_exact_when_the_sum_overflows():
    from paramsym.core.params import check_finite

    huge = torch.full((4,), 3e38)  # finite entries whose float32 sum is inf
    check_finite({"w": huge}, "test")
    for bad in (math.inf, -math.inf, math.nan):
        with pytest.raises(ps.NonFiniteError, match="1 NaN or infinite"):
            check_finite({"w": torch.cat([huge, torch.tensor([bad])])}, "test")
    with pytest.raises(ps.NonFiniteError, match="2 NaN or infinite"):
        check_finite({"w": torch.tensor([math.inf, -math.inf, 1.0])}, "test")  # sum is NaN


def test_missing_parameter_and_wrong_parameter_shape(relu_net):
    rescaling = ps.symmetries(relu_net)[0]
    theta = ps.params_of(relu_net)
    del theta["0.bias"]
    with pytest.raises(ps.MissingParameterError) as error:
        rescaling.act(theta, rescaling.identity(dtype=torch.float64))
    check(error, ValueError, "'0.bias'", "rescaling[0->2]")
    other = ps.params_of(ps.mlp([3, 5, 2], activation="relu", dtype=torch.float64))
    with pytest.raises(ps.ShapeError, match=r"'0\.weight' has shape"):
        rescaling.tangent(other, torch.zeros(4, dtype=torch.float64))


def test_mlp_arguments():
    with pytest.raises(ps.InvalidArgumentError, match="widths"):
        ps.mlp([3])
    with pytest.raises(ps.InvalidArgumentError, match="widths"):
        ps.mlp([3, 0, 2])
    with pytest.raises(ps.InvalidArgumentError) as error:
        ps.mlp([3, 2], activation="swish")
    check(error, ValueError, "'swish'", "relu")
    with pytest.raises(ps.InvalidArgumentError, match="parameterization"):
        ps.mlp([3, 2], parameterization="mup")
    with pytest.raises(ps.InvalidArgumentError, match="Hardswish"):
        ps.mlp([3, 4, 2], activation=nn.Hardswish())
    with pytest.raises(ps.InvalidArgumentError, match="power"):
        ps.nn.Monomial(0)


def test_curvature_arguments(relu_net):
    batch = (torch.randn(4, 3, dtype=torch.float64), torch.randn(4, 2, dtype=torch.float64))
    theta = ps.params_of(relu_net)
    with pytest.raises(ps.InvalidArgumentError, match=r"\(inputs, targets\)"):
        ps.hvp(relu_net, nn.MSELoss(), batch[0], theta)
    with pytest.raises(ps.InvalidArgumentError, match="scalar"):
        ps.hvp(relu_net, nn.MSELoss(reduction="none"), batch, theta)
    bad = dict(theta, **{"0.weight": torch.zeros(2, 2, dtype=torch.float64)})
    with pytest.raises(ps.ShapeError, match=r"v\['0\.weight'\]"):
        ps.hvp(relu_net, nn.MSELoss(), batch, bad)
    with pytest.raises(ps.InvalidArgumentError, match="method"):
        ps.hvp(relu_net, nn.MSELoss(), batch, theta, method="finite_differences")
    with pytest.raises(ps.InvalidArgumentError, match="max_params"):
        ps.hessian(relu_net, nn.MSELoss(), batch, max_params=10)
    with pytest.raises(ps.InvalidArgumentError, match="which"):
        ps.top_eigenvalues(relu_net, nn.MSELoss(), batch, which="top")
    with pytest.raises(ps.InvalidArgumentError, match="k must be"):
        ps.top_eigenvalues(relu_net, nn.MSELoss(), batch, k=0)
    with pytest.raises(ps.InvalidArgumentError, match="num_samples"):
        ps.hutchinson_trace(relu_net, nn.MSELoss(), batch, num_samples=1)
    gl = ps.symmetries(ps.mlp([3, 4, 2], activation="identity"))[0]
    with pytest.raises(ps.InvalidArgumentError, match="max_entries"):
        ps.tangent_matrix(gl, theta, max_entries=10)
