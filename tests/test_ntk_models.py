"""The NTK and the functional dimension on models written the usual way (the test zoo,
grouped and depthwise convolutions, embeddings, recurrent nets, tuple and ModelOutput returns),
each against dense oracles in float64."""

from __future__ import annotations

import importlib.util
import warnings

import pytest
import torch
from torch import nn

import paramsym as ps
from helpers import reduce_kernel
from paramsym.nn.zoo import ZOO
from paramsym.tangent_kernel import StructuredFallbackWarning, choose_method, parameter_jacobian

pytestmark = pytest.mark.filterwarnings(
    "ignore:There is a performance drop:UserWarning"  # functorch's note on SDPA under vmap
)

MODES = ["full", "trace", "diagonal"]
TOL = 1e-10


def dense_jacobian(model, x, output=None):
    """``(n, O, P)`` from ``torch.func.jacrev`` of the whole batch's outputs with respect to the
    flattened parameters (no vmap over samples, no structure)."""
    params = ps.params_of(model)

    def outputs(z):
        raw = torch.func.functional_call(model, ps.unflatten(z, params), (x,))
        chosen = raw if output is None else output(raw)
        return chosen.reshape(x.shape[0], -1)

    return torch.func.jacrev(outputs)(ps.flatten(params))


def dense_kernel(model, x1, x2, output=None):
    """The oracle: Θ = J(x1) J(x2)ᵀ with dense Jacobians."""
    j1 = dense_jacobian(model, x1, output)
    j2 = j1 if x2 is x1 else dense_jacobian(model, x2, output)
    return torch.einsum("aoq,bpq->abop", j1, j2)


def relative(a, b):
    return float((a - b).abs().max() / b.abs().max())


def zoo_inputs(name, length=None):
    """The zoo entry's model in float64 and two small batches (3 and 2 samples), sequences cut
    to ``length`` when given."""
    entry = ZOO[name]
    model = entry.build().double()

    def draw(seed):
        x = entry.example_input(torch.Generator().manual_seed(seed))[:, :length]
        return x.double() if x.is_floating_point() else x

    x1 = torch.cat([draw(0), draw(1)])[:3]
    return model, x1, draw(2)


def assert_matches_oracle(model, x1, x2, methods=("auto", "structured"), output=None, **kwargs):
    """Every method in ``methods`` and every mode equals ``method="jacobian"``, which equals the
    dense oracle; also for x2 = x1 (the symmetric path)."""
    select = None if output is None else (lambda raw: raw[output])
    j1, j2 = dense_jacobian(model, x1, select), dense_jacobian(model, x2, select)
    reference = torch.einsum("aoq,bpq->abop", j1, j2)
    reference_same = torch.einsum("aoq,bpq->abop", j1, j1)
    jacobian = ps.ntk(model, x1, x2, method="jacobian", output=output)
    assert relative(jacobian, reference) <= TOL
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", StructuredFallbackWarning)  # see fallback_modules
        for method in methods:
            for mode in MODES:
                kernel = ps.ntk(model, x1, x2, mode=mode, method=method, output=output, **kwargs)
                assert relative(kernel, reduce_kernel(reference, mode)) <= TOL, (method, mode)
            same = ps.ntk(model, x1, method=method, output=output, **kwargs)
            assert relative(same, reference_same) <= TOL, method
            mirrored = same.permute(1, 0, 3, 2)
            assert float((same - mirrored).abs().max()) <= 1e-12 * float(same.abs().max())


def fallback_modules(model, x, output=None):
    """Run method="structured" and return the StructuredFallbackWarning messages."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", StructuredFallbackWarning)
        ps.ntk(model, x, mode="trace", method="structured", output=output)
    return [str(w.message) for w in caught if issubclass(w.category, StructuredFallbackWarning)]


# -- the zoo ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["cnn", "cnn1d-tanh", "resnet-block", "residual-mlp"])
def test_zoo_models_match_the_dense_kernel(name):
    model, x1, x2 = zoo_inputs(name)
    assert_matches_oracle(model, x1, x2)
    assert_matches_oracle(model, x1, x2, methods=("structured",), batch_size=1)  # tiled


def test_all_convolutions_and_linears_are_structured_without_fallback():
    """cnn, cnn1d-tanh and the residual MLP have only Conv/Linear parameters: no fallback."""
    for name in ["cnn", "cnn1d-tanh", "residual-mlp"]:
        model, x1, _ = zoo_inputs(name)
        assert fallback_modules(model, x1) == [], name
        assert choose_method(model, ps.params_of(model), 3, x=x1) == "structured"


def test_batchnorm_in_eval_mode_falls_back_for_its_affine_parameters_only():
    model, x1, x2 = zoo_inputs("cnn-bn")
    assert not model.training
    assert_matches_oracle(model, x1, x2)
    (message,) = fallback_modules(model, x1)
    assert "4 parameter tensor(s) of ['bn1', 'bn2']" in message
    model.train()
    with pytest.raises(ps.InvalidArgumentError, match="BatchNorm 'bn1' is in training mode"):
        ps.ntk(model, x1)


def test_gpt_embeddings_attention_and_positions():
    """wte (token ids) and every Linear are structured; wpe is applied to arange(T), which has
    no batch axis, so it is refused (with the reason) and its part comes from Jacobians."""
    model, x1, x2 = zoo_inputs("gpt", length=4)  # 4 positions × 32 logits = 128 outputs
    assert_matches_oracle(model, x1, x2)
    (message,) = fallback_modules(model, x1)
    assert "'wpe' gets an input without a leading batch axis" in message
    assert "'wte'" not in message
    assert "lm_head" not in message
    assert choose_method(model, ps.params_of(model), 128, x=x1) == "structured"


@pytest.mark.parametrize("name", ["lstm", "gru"])
def test_recurrent_classifiers(name):
    """nn.LSTM / nn.GRU cannot run under vmap over samples; the Jacobian path loops instead, and
    "auto" picks it (the recurrent weights are most of the parameters)."""
    model, x1, x2 = zoo_inputs(name)
    assert choose_method(model, ps.params_of(model), 3, x=x1) == "jacobian"
    assert_matches_oracle(model, x1, x2, methods=("auto", "structured", "vp"))
    (message,) = fallback_modules(model, x1)
    assert "4 parameter tensor(s) of ['rnn']" in message


def test_bare_lstm_needs_output_and_works_with_it():
    model, x1, x2 = zoo_inputs("lstm-raw")
    for call in (
        lambda: ps.ntk(model, x1),
        lambda: ps.functional_dimension(model, x1),
        lambda: ps.loss_alignment(model, nn.MSELoss(), (x1, torch.zeros(3, 5, 8))),
    ):
        with pytest.raises(ps.InvalidArgumentError) as error:
            call()
        message = str(error.value)
        assert "LSTM returned a tuple of 2" in message
        for hint in ("output=0", "output='last_hidden_state'", "output=callable"):
            assert hint in message
    assert_matches_oracle(model, x1, x2, methods=("auto", "structured", "vp"), output=0)
    h_n = ps.ntk(model, x1, x2, output=lambda raw: raw[1][0][-1])  # last layer's final state
    last_step = ps.ntk(model, x1, x2, output=lambda raw: raw[0][:, -1])
    assert relative(h_n, last_step) <= TOL  # the same tensor, selected two ways
    with pytest.raises(ps.ShapeError, match=r"shape \(1, 2, 8\) for a batch of 2"):
        ps.ntk(model, x2, output=lambda raw: raw[1][0])  # (layers, batch, hidden)


@pytest.mark.skipif(importlib.util.find_spec("transformers") is None, reason="no transformers")
def test_hugging_face_model_output_by_name_and_index():
    entry = ZOO["hf-bert"]
    model = entry.build().double()
    x = entry.example_input(torch.Generator().manual_seed(0))[:, :4]
    with pytest.raises(ps.InvalidArgumentError, match=r"BertModel returned a Base.*keys"):
        ps.ntk(model, x)
    with pytest.raises(ps.InvalidArgumentError, match="names no field"):
        ps.ntk(model, x, output="hidden_states")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", StructuredFallbackWarning)  # LayerNorms, positions
        by_name = ps.ntk(model, x, output="last_hidden_state")
        pooled = ps.ntk(model, x, output="pooler_output")
    messages = [str(w.message) for w in caught if w.category is StructuredFallbackWarning]
    assert len(messages) == 2
    assert "'embeddings.position_embeddings' gets an input without" in messages[0]
    reference = dense_kernel(model, x, x, lambda raw: raw.last_hidden_state)
    assert relative(by_name, reference) <= TOL
    assert relative(ps.ntk(model, x, output=0, method="jacobian"), reference) <= TOL
    assert relative(pooled, dense_kernel(model, x, x, lambda raw: raw.pooler_output)) <= TOL


# -- convolutions ---------------------------------------------------------------------------------


def test_grouped_convolution_net():
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(4, 6, 3, padding=1, groups=2),
        nn.Tanh(),
        nn.Conv2d(6, 6, 3, stride=2, groups=3),
        nn.GELU(),
        nn.Flatten(),
        nn.Linear(6 * 2 * 2, 3),
    ).double()
    x1 = torch.randn(3, 4, 6, 6, dtype=torch.float64)
    x2 = torch.randn(2, 4, 6, 6, dtype=torch.float64)
    assert_matches_oracle(model, x1, x2)
    assert fallback_modules(model, x1) == []


def test_depthwise_separable_convolution_net():
    torch.manual_seed(1)
    model = nn.Sequential(
        nn.Conv2d(3, 3, 3, padding=1, groups=3, bias=False),  # depthwise
        nn.ReLU(),
        nn.Conv2d(3, 8, 1),  # pointwise
        nn.Tanh(),
        nn.Conv2d(8, 8, 3, padding="same", dilation=2, groups=8),  # depthwise, dilated
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(8, 2),
    ).double()
    x1 = torch.randn(3, 3, 5, 5, dtype=torch.float64)
    x2 = torch.randn(2, 3, 5, 5, dtype=torch.float64)
    assert_matches_oracle(model, x1, x2)
    assert fallback_modules(model, x1) == []


@pytest.mark.parametrize(
    "conv",
    [
        lambda: nn.Conv1d(2, 4, 4, padding="same", dilation=2, padding_mode="circular"),
        lambda: nn.Conv1d(2, 4, 3, stride=2, padding=2, padding_mode="reflect", groups=2),
        lambda: nn.Conv2d(2, 4, (2, 3), stride=(2, 1), padding=(1, 2), padding_mode="replicate"),
        lambda: nn.Conv3d(2, 4, (2, 3, 1), stride=(1, 2, 1), padding=(1, 0, 1), dilation=(2, 1, 1)),
        lambda: nn.Conv3d(2, 2, 3, padding="same", groups=2, padding_mode="reflect"),
    ],
    ids=["1d-same-circular", "1d-grouped-reflect", "2d-replicate", "3d-dilated", "3d-depthwise"],
)
def test_convolution_geometries(conv):
    torch.manual_seed(2)
    layer = conv().double()
    spatial = (5,) * (layer.weight.ndim - 2)
    with torch.no_grad():
        features = layer(torch.zeros(1, 2, *spatial, dtype=torch.float64)).numel()
    model = nn.Sequential(layer, nn.Tanh(), nn.Flatten(), nn.Linear(features, 2)).double()
    x1 = torch.randn(3, 2, *spatial, dtype=torch.float64)
    x2 = torch.randn(2, 2, *spatial, dtype=torch.float64)
    assert_matches_oracle(model, x1, x2, methods=("structured",))
    assert fallback_modules(model, x1) == []


# -- embeddings ------------------------------------------------------------------------------------


def test_embedding_kernel_is_the_co_occurrence_of_token_ids():
    """For f = Embedding(ids) flattened, Θ[i, j, (t, d), (s, e)] = 1[id_it = id_js ≠ pad]·1[d = e]
    (torch gives the padding row no gradient)."""
    model = nn.Sequential(nn.Embedding(6, 3, padding_idx=0), nn.Flatten()).double()
    ids1 = torch.tensor([[1, 2, 0, 1], [3, 3, 5, 0], [0, 0, 0, 0]])
    ids2 = torch.tensor([[2, 1, 1, 4], [5, 0, 3, 2]])
    same = (ids1[:, None, :, None] == ids2[None, :, None, :]) & (ids1 != 0)[:, None, :, None]
    expected = torch.einsum("ijts,de->ijtdse", same.double(), torch.eye(3, dtype=torch.float64))
    expected = expected.reshape(3, 2, 12, 12)
    for method in ["structured", "jacobian"]:
        kernel = ps.ntk(model, ids1, ids2, method=method)
        assert torch.equal(kernel, expected), method


def test_embedding_models_match_the_dense_kernel():
    class Bag(nn.Module):
        def __init__(self):
            super().__init__()
            self.tokens = nn.Embedding(9, 4, padding_idx=2)
            self.mix = nn.Linear(4, 4)
            self.head = nn.Linear(4, 3)

        def forward(self, ids):
            return self.head(torch.tanh(self.mix(self.tokens(ids))).mean(1))

    torch.manual_seed(3)
    model = Bag().double()
    x1 = torch.randint(0, 9, (3, 5), generator=torch.Generator().manual_seed(0))
    x2 = torch.randint(0, 9, (2, 5), generator=torch.Generator().manual_seed(1))
    x1[0, :2] = 2  # padding tokens
    assert_matches_oracle(model, x1, x2)
    assert fallback_modules(model, x1) == []


# -- honesty: layers that look structured but are not ----------------------------------------------


def test_layers_that_fail_the_checks_fall_back_and_say_why():
    class Tricky(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(7, 4)
            self.twice = nn.Linear(4, 4)
            self.attention = nn.MultiheadAttention(4, 2, batch_first=True)
            self.head = nn.Linear(4, 2)

        def forward(self, ids):
            h = self.embed(ids)
            h = torch.tanh(self.twice(torch.tanh(self.twice(h))))  # one module, two calls
            h = h + self.attention(h, h, h)[0]  # out_proj's weight is used through F.*
            logits = h @ self.embed.weight.T  # the embedding's weight used again (tying)
            return torch.cat([self.head(h).flatten(1), logits.flatten(1)], dim=1)

    torch.manual_seed(4)
    model = Tricky().double().eval()
    x1 = torch.randint(0, 7, (3, 4), generator=torch.Generator().manual_seed(0))
    x2 = torch.randint(0, 7, (2, 4), generator=torch.Generator().manual_seed(1))
    (message,) = fallback_modules(model, x1)
    assert "'twice' is called 2 times in one forward" in message
    assert "'attention.out_proj' is called 0 times" in message
    assert "'embed' has a weight gradient that the layer's input and output do not" in message
    assert "'head'" not in message
    assert_matches_oracle(model, x1, x2)


def test_a_subclass_with_its_own_forward_is_not_trusted():
    class Scaled(nn.Linear):
        def forward(self, x):
            return nn.functional.linear(x, 2.0 * self.weight, self.bias)

    torch.manual_seed(5)
    model = nn.Sequential(Scaled(3, 4), nn.Tanh(), nn.Linear(4, 2)).double()
    x = torch.randn(3, 3, dtype=torch.float64)
    (message,) = fallback_modules(model, x)
    assert "'0' has its own forward (Scaled.forward" in message
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", StructuredFallbackWarning)
        kernel = ps.ntk(model, x, method="structured")
    assert relative(kernel, dense_kernel(model, x, x)) <= TOL


# -- functional dimension and the output= argument ------------------------------------------------


def test_functional_dimension_of_a_cnn_is_the_rank_of_the_dense_jacobian():
    model, x, _ = zoo_inputs("cnn1d-tanh")
    params = ps.params_of(model)
    dense = torch.func.jacrev(
        lambda z: torch.func.functional_call(model, ps.unflatten(z, params), (x,)).reshape(-1)
    )(ps.flatten(params))
    assert torch.allclose(parameter_jacobian(model, x), dense, rtol=1e-12, atol=1e-14)
    fd = ps.functional_dimension(model, x)
    assert fd.rank == int(torch.linalg.matrix_rank(dense)) == 9  # 3 samples × 3 outputs
    assert fd.shape == (9, dense.shape[1])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ps.ParamsymWarning)  # the Gram path's resolution note
        gram = ps.functional_dimension(model, x, method="gram")
    assert gram.rank == fd.rank


def test_functional_dimension_with_output_selection():
    model, x, _ = zoo_inputs("lstm-raw")
    fd = ps.functional_dimension(model, x[:2], output=0)
    params = ps.params_of(model)
    dense = torch.func.jacrev(
        lambda z: torch.func.functional_call(model, ps.unflatten(z, params), (x[:2],))[0].reshape(
            -1
        )
    )(ps.flatten(params))
    assert fd.rank == int(torch.linalg.matrix_rank(dense))
    assert fd.shape == (2 * 5 * 8, 448)


def test_loss_alignment_with_output_selection():
    model, x, _ = zoo_inputs("lstm-raw")
    y = torch.randn(3, 5, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    loss_fn = nn.MSELoss()
    value = ps.loss_alignment(model, loss_fn, (x, y), output=0)
    with torch.no_grad():
        f = 2.0 * (model(x)[0] - y).reshape(-1) / (5 * 8)  # per-sample C′ of the mean loss
    theta = ps.tangent_kernel.kernel_matrix(ps.ntk(model, x, output=0))
    assert value == pytest.approx(float(f @ theta @ f / (f @ f)), rel=1e-10)


def test_output_argument_errors():
    mlp = ps.mlp([3, 4, 2], "tanh").double()
    x = torch.randn(3, 3, dtype=torch.float64)
    with pytest.raises(ps.InvalidArgumentError, match="would index its batch axis"):
        ps.ntk(mlp, x, output=0)
    with pytest.raises(ps.InvalidArgumentError, match="output must be None, an int, a str"):
        ps.ntk(mlp, x, output=1.5)
    with pytest.raises(ps.InvalidArgumentError, match="output must be None"):
        ps.functional_dimension(mlp, x, output=True)
    assert ps.ntk(mlp, x, output=lambda y: y[:, :1]).shape == (3, 3, 1, 1)  # callables may
    lstm, xs, _ = zoo_inputs("lstm-raw")
    with pytest.raises(ps.InvalidArgumentError, match="output=5 does not index LSTM's output"):
        ps.ntk(lstm, xs, output=5)
    with pytest.raises(ps.InvalidArgumentError, match="output='logits' names no field"):
        ps.ntk(lstm, xs, output="logits")
    with pytest.raises(ps.InvalidArgumentError, match=r"output=1 selected a tuple of 2"):
        ps.ntk(lstm, xs, output=1)


def test_float32_models_keep_their_structured_layers():
    """Verification tolerates float32 rounding (token-id inputs included): nothing is refused
    but the positional embedding, and the kernel agrees with the Jacobian path to float32."""
    entry = ZOO["gpt"]
    model = entry.build()  # float32
    x = entry.example_input(torch.Generator().manual_seed(0))[:, :4]
    (message,) = fallback_modules(model, x)
    assert message.count("' has a weight gradient") == 0
    assert "'wpe' gets an input without a leading batch axis" in message
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", StructuredFallbackWarning)
        kernel = ps.ntk(model, x, mode="trace", method="structured")
    assert relative(kernel, ps.ntk(model, x, mode="trace", method="jacobian")) <= 1e-5
    cnn = ZOO["cnn"].build()
    images = ZOO["cnn"].example_input(torch.Generator().manual_seed(0))
    assert fallback_modules(cnn, images) == []


def test_tracker_passes_output_through():
    model, x, _ = zoo_inputs("lstm-raw")
    y = torch.randn(3, 5, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    tracker = ps.NTKTracker(model, x, every=1, loss_fn=nn.MSELoss(), targets=y, output=0)
    assert tracker(0)
    assert tracker.history["functional_dimension"] == [
        ps.functional_dimension(model, x, output=0).rank
    ]
    assert tracker.history["loss_alignment"] == [
        pytest.approx(ps.loss_alignment(model, nn.MSELoss(), (x, y), output=0), rel=1e-12)
    ]
