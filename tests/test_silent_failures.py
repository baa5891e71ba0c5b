"""Issue 13: no silent wrong answers. One regression test per row of the issue's table, written
the way the issue's user wrote the model: each asserts the correct result or the named error.
Every exact symmetry returned is acted on and must leave the output unchanged to 1e-10."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F  # noqa: N812
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

import paramsym as ps
from helpers import assert_exact_symmetries, randomize_statistics_
from paramsym.nn.zoo import ZOO, available_zoo


@pytest.fixture(autouse=True, scope="module")
def _float64():
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(previous)


def L(n_in: int, n_out: int) -> nn.Linear:  # noqa: N802  (the issue's shorthand)
    return nn.Linear(n_in, n_out)


class Wrapped(nn.Module):
    """A container with its own forward around one module."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(x)


def exact_ones_keep_the_output(model: nn.Module, x: torch.Tensor) -> list[ps.Symmetry]:
    """``ps.symmetries(model)`` without an example input; every exact one checked on ``x``."""
    found = ps.symmetries(model)
    assert_exact_symmetries(model, x, found)
    return found


def test_one_activation_object_reused_in_a_sequential():
    torch.manual_seed(0)
    act = nn.ReLU()
    model = nn.Sequential(L(4, 8), act, L(8, 8), act, L(8, 3))
    found = exact_ones_keep_the_output(model, torch.randn(5, 4))
    names = [s.name for s in found]
    assert not any(name.startswith("GL") for name in names)  # a ReLU between: no GL(8)
    assert "rescaling[2->4]" in names
    assert "permutation[2->4]" in names


def test_one_linear_used_twice_shares_its_permutation_and_keeps_the_model():
    torch.manual_seed(1)
    shared = L(8, 8)
    model = nn.Sequential(L(4, 8), nn.ReLU(), shared, nn.ReLU(), shared, nn.ReLU(), L(8, 3))
    weight = shared.weight
    x = torch.randn(5, 4)
    found = exact_ones_keep_the_output(model, x)
    # one element for both uses: the shared map becomes D W D⁻¹ (ReLU commutes with D > 0)
    assert [s.name for s in found] == ["rescaling[0,2->2,6]", "permutation[0,2->2,6]"]
    assert shared.weight is weight  # the analyses gave the module its own parameter back
    ps.functional_call(model, {k: 2 * v for k, v in ps.params_of(model).items()}, x)
    assert shared.weight is weight
    model(x)


def test_batchnorm_in_eval_mode_moves_its_running_statistics():
    torch.manual_seed(2)
    model = nn.Sequential(L(4, 8), nn.BatchNorm1d(8), nn.ReLU(), L(8, 3)).eval()
    randomize_statistics_(model, torch.Generator().manual_seed(2))
    found = exact_ones_keep_the_output(model, torch.randn(5, 4))
    permutation = next(s for s in found if s.name.startswith("permutation"))
    assert set(permutation.buffer_names) == {"1.running_mean", "1.running_var"}


def test_a_wrapper_in_a_chain_is_an_error_with_strict():
    model = nn.Sequential(L(4, 8), Wrapped(nn.ReLU()), L(8, 3))
    with pytest.raises(ps.UnsupportedModuleError, match=r"'1' \(Wrapped\)"):
        ps.symmetries(model, strict=True)
    with pytest.warns(ps.UnanalysedModuleWarning, match="Wrapped"):
        assert ps.symmetries(model) == []


def test_weight_norm_names_only_parameters_the_model_has():
    model = nn.Sequential(L(4, 8), nn.ReLU(), nn.utils.parametrizations.weight_norm(L(8, 3)))
    parameters = {name for name, _ in model.named_parameters()}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ps.UnanalysedModuleWarning)
        found = exact_ones_keep_the_output(model, torch.randn(5, 4))
    assert all(set(s.parameter_names) <= parameters for s in found)


def test_a_chain_that_cannot_be_read_without_an_input_asks_for_one():
    shared = nn.Conv1d(3, 3, 1)
    model = nn.Sequential(shared, nn.ReLU(), shared)
    with pytest.raises(ps.InvalidArgumentError, match=r"same object.*example_input"):
        ps.symmetries(model)
    x = torch.randn(2, 3, 5)
    assert_exact_symmetries(model, x, ps.symmetries(model, example_input=x))


def test_tied_autoencoder_ntk_default_method_is_right():
    class Tied(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.enc = L(6, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return F.linear(torch.relu(self.enc(x)), self.enc.weight.T)

    torch.manual_seed(3)
    model, x = Tied(), torch.randn(5, 6)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ps.ParamsymWarning)
        default = ps.ntk(model, x, mode="trace")
    reference = ps.ntk(model, x, mode="trace", method="jacobian")
    assert torch.allclose(default, reference, rtol=1e-12, atol=1e-12)


ACTIVATIONS = {"relu": nn.ReLU, "tanh": nn.Tanh, "identity": nn.Identity, "gelu": nn.GELU}


@st.composite
def sequentials(draw):
    """Sequentials written the usual ways: hidden widths, activation objects reused or not, a
    square Linear used twice, BatchNorm in eval mode with non-default statistics, a wrapper, a
    Flatten on (batch, features) inputs, a softmax over the last axis."""
    widths = draw(st.lists(st.integers(2, 5), min_size=1, max_size=3))
    activation = ACTIVATIONS[draw(st.sampled_from(sorted(ACTIVATIONS)))]
    reuse_activation = draw(st.booleans())
    shared_activation = activation()
    modules: list[nn.Module] = [nn.Flatten()] if draw(st.booleans()) else []
    previous = 3
    for width in widths:
        modules.append(L(previous, width))
        if draw(st.booleans()):
            modules.append(nn.BatchNorm1d(width))
        act = shared_activation if reuse_activation else activation()
        modules.append(Wrapped(act) if draw(st.booleans()) and not reuse_activation else act)
        if draw(st.booleans()):  # one square Linear used twice
            square = L(width, width)
            modules += [square, act, square, act]
        previous = width
    modules.append(L(previous, 2))
    if draw(st.booleans()):
        modules.append(nn.Softmax(dim=-1))
    return nn.Sequential(*modules).eval()


@settings(max_examples=40, deadline=None)
@given(model=sequentials(), seed=st.integers(0, 2**16))
def test_every_exact_symmetry_of_a_drawn_sequential_keeps_its_output(model, seed):
    generator = torch.Generator().manual_seed(seed)
    randomize_statistics_(model, generator)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ps.UnanalysedModuleWarning)
        found = ps.symmetries(model)
    assert_exact_symmetries(model, torch.randn(6, 3, generator=generator), found)


def test_functional_dimension_of_a_float32_model_with_batchnorm_runs_in_float64():
    torch.manual_seed(4)
    model = nn.Sequential(L(4, 8), nn.BatchNorm1d(8), nn.ReLU(), L(8, 2)).float().eval()
    randomize_statistics_(model, torch.Generator().manual_seed(4))
    x = torch.randn(10, 4, dtype=torch.float32)
    result = ps.functional_dimension(model, x)
    assert result.dtype == "torch.float64"
    reference = ps.functional_dimension(model.double(), x.double())
    assert result.rank == reference.rank
    assert len(result.singular_values) == 20  # 10 samples × 2 outputs


def _dropout_net() -> nn.Module:
    return nn.Sequential(L(4, 8), nn.Dropout(0.5), nn.ReLU(), L(8, 2))


@pytest.mark.parametrize(
    "call",
    [
        lambda m, b: ps.ntk(m, b[0], mode="trace"),
        lambda m, b: ps.functional_dimension(m, b[0]),
        lambda m, b: ps.hvp(m, nn.MSELoss(), b, ps.params_of(m)),
        lambda m, b: ps.top_eigenvalues(m, nn.MSELoss(), b),
        lambda m, b: ps.teleport(m, nn.MSELoss(), b, steps=1),
    ],
    ids=["ntk", "functional_dimension", "hvp", "top_eigenvalues", "teleport"],
)
def test_train_mode_dropout_is_refused_naming_the_module(call):
    torch.manual_seed(5)
    model = _dropout_net().train()
    batch = (torch.randn(10, 4), torch.randn(10, 2))
    with pytest.raises(ps.InvalidArgumentError, match=r"dropout '1' is in training mode.*eval"):
        call(model, batch)
    call(model.eval(), batch)  # the same call in evaluation mode runs


def test_second_order_tools_run_attention_on_the_cpu():
    torch.manual_seed(6)
    layer = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True).eval()
    x = torch.randn(3, 4, 8)
    batch = (x, torch.zeros(3, 4, 8))
    v = {k: torch.randn_like(t) for k, t in ps.params_of(layer).items()}
    product = ps.hvp(layer, nn.MSELoss(), batch, v)
    dense = ps.hessian(layer, nn.MSELoss(), batch, max_params=20_000)
    assert torch.allclose(ps.flatten(product), dense @ ps.flatten(v), rtol=1e-9, atol=1e-11)
    top = ps.top_eigenvalues(layer, nn.MSELoss(), batch, k=1, tol=1e-8)
    assert top.eigenvalues[0] == pytest.approx(float(torch.linalg.eigvalsh(dense)[-1]), rel=1e-6)


def test_ntk_of_a_transformer_layer_whose_out_proj_forward_is_never_called():
    torch.manual_seed(7)
    layer = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True).eval()
    x = torch.randn(3, 4, 8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ps.ParamsymWarning)
        default = ps.ntk(layer, x, mode="trace")
    assert torch.allclose(default, ps.ntk(layer, x, mode="trace", method="jacobian"), rtol=1e-10)


@pytest.mark.parametrize(
    "call",
    [
        lambda f: ps.symmetries(f),
        lambda f: ps.ntk(f, torch.randn(3, 2)),
        lambda f: ps.functional_dimension(f, torch.randn(3, 2)),
        lambda f: ps.hvp(f, nn.MSELoss(), (torch.randn(3, 2), torch.randn(3, 2)), {}),
        lambda f: ps.teleport(f, nn.MSELoss(), (torch.randn(3, 2), torch.randn(3, 2))),
        lambda f: ps.weight_matching(f, f),
        lambda f: ps.permutation_spec(f),
    ],
    ids=["symmetries", "ntk", "functional_dimension", "hvp", "teleport", "weight_matching", "spec"],
)
def test_a_function_instead_of_a_module_gets_one_message_everywhere(call):
    with pytest.raises(
        ps.InvalidArgumentError, match=r"expected a torch\.nn\.Module, got function"
    ):
        call(lambda x: 2 * x)


def test_frozen_parameters_stay_frozen():
    torch.manual_seed(8)
    model = nn.Sequential(L(4, 8), nn.ReLU(), L(8, 8), nn.ReLU(), L(8, 2))
    model[0].weight.requires_grad_(False)
    frozen = model[0].weight.detach().clone()
    batch = (torch.randn(16, 4), torch.randn(16, 2))
    ps.teleport(model, nn.MSELoss(), batch, steps=3)
    assert torch.equal(model[0].weight, frozen)
    with pytest.raises(ps.InvalidArgumentError, match=r"frozen parameters \['0.weight'\]"):
        ps.teleport(model, nn.MSELoss(), batch, symmetries=ps.symmetries(model)[:1])
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert ps.HessianOperator(model, nn.MSELoss(), batch).shape == (trainable, trainable)
    every = ps.HessianOperator(model, nn.MSELoss(), batch, ps.params_of(model))
    assert every.shape[0] == trainable + frozen.numel()  # the option to include them


def test_verification_downgrades_what_the_analysis_gets_wrong(monkeypatch):
    """With the use-count guard removed, the chain reading claims GL(8) across a reused ReLU;
    the numerical verification catches it."""
    from paramsym.symmetry import detect

    monkeypatch.setattr(detect, "chain_hazards", lambda model: [])
    torch.manual_seed(9)
    act = nn.ReLU()
    model = nn.Sequential(L(4, 8), act, L(8, 8), act, L(8, 3))
    unchecked = {s.name: s for s in ps.symmetries(model, verify=False)}
    assert unchecked["GL[2->4]"].exact  # what the unguarded analysis claims
    with pytest.warns(ps.SymmetryVerificationWarning, match=r"GL\[2->4\]"):
        found = {s.name: s for s in ps.symmetries(model)}
    assert not found["GL[2->4]"].exact
    assert any(note.startswith("verification:") for note in found["GL[2->4]"].notes)
    assert_exact_symmetries(model, torch.randn(5, 4), list(found.values()))


@pytest.mark.parametrize(
    "call",
    [
        lambda m, x: ps.ntk(m, x, mode="trace"),
        lambda m, x: ps.hvp(m, nn.MSELoss(), (x, torch.zeros(3, 2)), ps.params_of(m)),
    ],
    ids=["ntk", "hvp"],
)
def test_float64_input_on_a_float32_model_names_the_input_and_the_fix(call):
    model = nn.Sequential(L(4, 8), nn.ReLU(), L(8, 2)).float()
    with pytest.raises(ps.InvalidArgumentError, match=r"torch\.float64 but the model's parameters"):
        call(model, torch.randn(3, 4, dtype=torch.float64))


def test_flatten_over_positions_is_not_read_as_features():
    """Linear on (batch, 6, 4) inputs, then Flatten: the next layer sees 6 × 8 features, not
    the 8 hidden units, so no symmetry acting on 8 columns may be claimed."""
    torch.manual_seed(10)
    model = nn.Sequential(L(4, 8), nn.ReLU(), nn.Flatten(), L(48, 3))
    assert ps.symmetries(model) == []
    x = torch.randn(5, 6, 4)
    assert_exact_symmetries(model, x, ps.symmetries(model, example_input=x))


def test_softmax_over_dim_1_is_checked_on_the_given_input():
    torch.manual_seed(11)
    model = nn.Sequential(L(4, 8), nn.ReLU(), L(8, 3), nn.Softmax(dim=1))
    x = torch.randn(5, 6, 4)  # (batch, positions, features): dim 1 is not the features
    found = ps.symmetries(model, example_input=x)
    assert not any(s.name.startswith("translation") for s in found)
    assert_exact_symmetries(model, x, found)
    (translation,) = [s for s in ps.symmetries(model) if s.name.startswith("translation")]
    assert any("example_input" in note for note in translation.notes)  # the assumption, said


@pytest.mark.skipif("hf-bert-hidden" not in available_zoo(), reason="needs transformers")
def test_hessian_products_through_hugging_face_attention_on_the_cpu():
    entry = ZOO["hf-bert-hidden"]
    model, ids = entry.build(), entry.example_input(torch.Generator().manual_seed(0))

    def loss(out, _):
        return out.pow(2).mean()

    batch = (ids, None)
    params = ps.params_of(model)
    generator = torch.Generator().manual_seed(1)
    u, v = ({k: torch.randn(t.shape, generator=generator) for k, t in params.items()} for _ in "uv")
    hu, hv = ps.hvp(model, loss, batch, u), ps.hvp(model, loss, batch, v)
    left, right = float(ps.inner(u, hv)), float(ps.inner(hu, v))  # H is symmetric
    assert left == pytest.approx(right, rel=1e-9)
    assert abs(left) > 0


def test_tied_weights_in_a_chain_name_only_parameters_the_model_has():
    torch.manual_seed(12)
    first, second = L(8, 8), L(8, 8)
    second.weight = first.weight  # tied, different biases
    model = nn.Sequential(L(4, 8), nn.ReLU(), first, nn.ReLU(), second, nn.ReLU(), L(8, 3))
    parameters = {name for name, _ in model.named_parameters()}
    found = exact_ones_keep_the_output(model, torch.randn(5, 4))
    assert found
    assert all(set(s.parameter_names) <= parameters for s in found)
    state = {**ps.params_of(model), **dict(model.named_buffers())}
    for s in found:
        s.act(state, s.identity())  # every one acts on the model's own params dict


@pytest.mark.parametrize("reuse", ["module", "weight", "none"])
def test_structured_ntk_of_a_sequential_is_exact_whether_or_not_it_reuses_a_layer(reuse):
    """Plain Sequentials skip the structured path's probe (their structure guarantees it);
    one that reuses a layer or ties a weight must not."""
    from paramsym.tangent_kernel.structured import statically_verified

    torch.manual_seed(13)
    first, second = L(8, 8), L(8, 8)
    if reuse == "module":
        second = first
    elif reuse == "weight":
        second.weight = first.weight
    model = nn.Sequential(L(4, 8), nn.ReLU(), first, nn.Tanh(), second, nn.ReLU(), L(8, 2))
    assert statically_verified(model) == (reuse == "none")
    x = torch.randn(6, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ps.ParamsymWarning)
        structured = ps.ntk(model, x, method="structured")
    reference = ps.ntk(model, x, method="jacobian")
    assert torch.allclose(structured, reference, rtol=1e-11, atol=1e-12)
