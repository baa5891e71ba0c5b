"""Detection on the traced graph: CNNs, ResNets, residual MLPs and transformers written the
usual way (custom ``forward``, eval mode, non-default BatchNorm statistics), each symmetry
checked against the model's own output in float64."""

from __future__ import annotations

import warnings

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch import nn

import paramsym as ps
from helpers import assert_exact_symmetries, randomize_statistics_
from paramsym.nn.zoo import ZOO, available_zoo
from paramsym.symmetry.graph import analyse
from paramsym.symmetry.graph.trace import TraceError, trace_forward


@pytest.fixture(autouse=True, scope="module")
def _float64():
    """The models here are built and checked in float64 (restored after the module)."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(previous)


def found_names(model, x, **kwargs):
    return [(s.name, s.group) for s in ps.symmetries(model, example_input=x, **kwargs)]


class ConvNet(nn.Module):
    """conv → [norm] → act → conv(groups) → [norm] → act → [residual] → pool → linear."""

    def __init__(self, dims, c1, c2, kernel, activation, norm, residual, groups, bias):
        super().__init__()
        conv = nn.Conv1d if dims == 1 else nn.Conv2d
        batch_norm = nn.BatchNorm1d if dims == 1 else nn.BatchNorm2d
        if residual or groups == "depthwise":
            c2 = c1
        if groups == 2 and (c1 % 2 or c2 % 2):
            groups = 1
        self.conv1 = conv(2, c1, kernel, padding=kernel // 2, bias=bias)
        self.conv2 = conv(
            c1,
            c2,
            kernel,
            padding=kernel // 2,
            groups=c1 if groups == "depthwise" else groups,
            bias=bias,
        )

        def make_norm(c):
            if norm == "batch":
                return batch_norm(c)
            if norm == "group" and c % 2 == 0:
                return nn.GroupNorm(2, c)
            return nn.Identity()

        self.norm1, self.norm2 = make_norm(c1), make_norm(c2)
        self.act = ps.nn.get_activation(activation).make_module()
        self.residual = residual
        self.fc = nn.Linear(c2, 3)

    def forward(self, x):
        h = self.act(self.norm1(self.conv1(x)))
        z = self.norm2(self.conv2(h))
        h = self.act(h + z) if self.residual else self.act(z)
        return self.fc(h.flatten(2).mean(-1))


@given(
    dims=st.sampled_from([1, 2]),
    c1=st.integers(1, 5),
    c2=st.integers(1, 5),
    kernel=st.sampled_from([1, 3]),
    activation=st.sampled_from(["relu", "leaky_relu", "tanh", "identity", "gelu"]),
    norm=st.sampled_from(["none", "batch", "group"]),
    residual=st.booleans(),
    groups=st.sampled_from([1, 2, "depthwise"]),
    bias=st.booleans(),
    seed=st.integers(0, 99),
)
def test_every_exact_symmetry_of_a_conv_net_keeps_its_output(
    dims, c1, c2, kernel, activation, norm, residual, groups, bias, seed
):
    generator = torch.Generator().manual_seed(seed)
    model = ConvNet(dims, c1, c2, kernel, activation, norm, residual, groups, bias).eval()
    randomize_statistics_(model, generator)
    x = torch.randn((4, 2, 5) if dims == 1 else (4, 2, 5, 5), generator=generator)
    found = ps.symmetries(model, example_input=x)
    assert_exact_symmetries(model, x, found)
    # the first hidden layer has its permutations (a pointwise σ and a norm between), unless
    # a grouped convolution reads it (then only within-group ones, not expressible as slots)
    # (GroupNorm(2, c) keeps permutations within its two groups of c/2)
    within = c1 // 2 if isinstance(model.norm1, nn.GroupNorm) else c1
    if model.conv2.groups == 1 or model.conv2.groups == c1:
        assert any(s.name.startswith("permutation[conv1") for s in found) == (within > 1)


def test_cnn_catalogue_from_the_issue():
    model = ZOO["cnn"].build()
    x = ZOO["cnn"].example_input(torch.Generator().manual_seed(0))
    assert found_names(model, x) == [
        ("rescaling[conv1->conv2]", "(R>0)^8"),
        ("permutation[conv1->conv2]", "S_8"),
        ("rescaling[conv2->fc]", "(R>0)^8"),
        ("permutation[conv2->fc]", "S_8"),
    ]


def test_batchnorm_cnn_moves_running_statistics_and_marks_eps_approximate():
    model = ZOO["cnn-bn"].build()
    x = ZOO["cnn-bn"].example_input(torch.Generator().manual_seed(0))
    found = {s.name: s for s in ps.symmetries(model, example_input=x)}
    assert list(found) == [
        "norm_scaling[conv1->bn1]",
        "permutation[conv1->conv2]",
        "rescaling[bn1->conv2]",
        "norm_scaling[conv2->bn2]",
        "permutation[conv2->fc]",
        "rescaling[bn2->fc]",
        # exact in evaluation mode, the statistics fixed (tests/test_audit_small_models.py)
        "batchnorm_scaling[conv1->bn1]",
        "batchnorm_shift[conv1->bn1]",
        "batchnorm_scaling[conv2->bn2]",
        "batchnorm_shift[conv2->bn2]",
    ]
    permutation = found["permutation[conv1->conv2]"]
    assert permutation.buffer_names == {"bn1.running_mean", "bn1.running_var"}
    assert "bn1.running_mean" not in permutation.parameter_names
    scaling = found["norm_scaling[conv1->bn1]"]
    assert not scaling.exact
    assert "eps=1e-05" in " ".join(scaling.notes)
    powers = {slot.name: slot.power for slot in scaling.slots}
    assert powers == {
        "conv1.weight": 1.0,
        "conv1.bias": 1.0,
        "bn1.running_mean": 1.0,
        "bn1.running_var": 2.0,
    }
    assert_exact_symmetries(model, x, list(found.values()))
    # with eps = 0 the BatchNorm invariance is exact (the statistics scale with the input)
    for bn in (model.bn1, model.bn2):
        bn.eps = 0.0
    exact = ps.symmetries(model, example_input=x)
    assert all(s.exact for s in exact)
    assert_exact_symmetries(model, x, exact)


def test_running_statistics_must_be_given_to_symmetries_that_move_them():
    model = ZOO["cnn-bn"].build()
    x = ZOO["cnn-bn"].example_input(torch.Generator().manual_seed(0))
    permutation = next(
        s for s in ps.symmetries(model, example_input=x) if s.name.startswith("permutation")
    )
    with pytest.raises(ps.MissingParameterError, match=r"bn1\.running_mean"):
        permutation.act(ps.params_of(model), permutation.identity())


def test_tanh_conv1d_has_sign_flips_and_relu_layer_rescaling():
    model = ZOO["cnn1d-tanh"].build()
    x = ZOO["cnn1d-tanh"].example_input(torch.Generator().manual_seed(0))
    assert found_names(model, x) == [
        ("rescaling[conv1->conv2]", "(R>0)^8"),
        ("permutation[conv1->conv2]", "S_8"),
        ("permutation[conv2->fc]", "S_8"),
        ("sign_flip[conv2->fc]", "(Z_2)^8"),
    ]


def test_residual_mlp_stream_gets_gl_and_the_inner_layer_keeps_its_own():
    model = ZOO["residual-mlp"].build()
    x = ZOO["residual-mlp"].example_input(torch.Generator().manual_seed(0))
    found = ps.symmetries(model, example_input=x)
    assert [(s.name, s.group) for s in found] == [
        ("GL[inp,f2->f1,out]", "GL(8)"),
        ("permutation[inp,f2->f1,out]", "S_8"),
        ("sign_flip[inp,f2->f1,out]", "(Z_2)^8"),
        ("rescaling[f1->f2]", "(R>0)^16"),
        ("permutation[f1->f2]", "S_16"),
        ("bias_shift[inp]", "R^8"),
        ("span_reader[inp]", "R^64"),
        ("linear_shift[f2->out]", "R^8"),  # f2's bias reaches out through the residual add
        ("unread[f2->out]", "R^85"),  # (8 − 3) directions of f2's 16 + 1 columns out ignores
    ]
    assert_exact_symmetries(model, x, found)


def test_resnet_stream_permutation_is_shared_by_every_block_of_a_stage():
    entry = ZOO["resnet18-tiny"]
    model, x = entry.build(), entry.example_input(torch.Generator().manual_seed(0))
    found = ps.symmetries(model, example_input=x)
    assert_exact_symmetries(model, x, found)
    streams = [s for s in found if s.name.startswith("permutation[") and "," in s.name]
    assert len(streams) == 4  # one residual stream per stage
    last = streams[-1]
    touched = set(last.parameter_names) | last.buffer_names
    for name in ("layer4.0.conv2.weight", "layer4.0.downsample.0.weight", "layer4.1.conv2.weight",
                 "layer4.1.conv1.weight", "fc.weight", "layer4.1.bn2.running_var"):  # fmt: skip
        assert name in touched
    inner = [s for s in found if s.name == "permutation[layer3.0.conv1->layer3.0.conv2]"]
    assert len(inner) == 1
    assert inner[0].width == 8


def test_sequential_mlps_get_the_same_catalogue_from_the_graph():
    for activation in ("relu", "leaky_relu", "identity", "tanh", "sigmoid", "gelu"):
        model = ps.mlp([4, 5, 5, 3], activation=activation, dtype=torch.float64)
        x = torch.randn(6, 4)
        by_layers = [(s.name, s.group, s.exact) for s in ps.symmetries(model)]
        by_graph = [(s.name, s.group, s.exact) for s in ps.symmetries(model, example_input=x)]
        # a linear network (identity) also has the affine shifts the graph's stream analysis
        # finds: b_0 + δ with b_2 − W_2 δ (and the next pair), which the layer path does not
        shifts = [t for t in by_graph if t[0].startswith("linear_shift")]
        assert len(shifts) == (2 if activation == "identity" else 0), activation
        assert [t for t in by_graph if t not in shifts] == by_layers, activation


def test_softmax_cross_entropy_adds_the_last_layer_translation():
    model = ps.mlp([4, 5, 3], activation="relu", dtype=torch.float64)
    x = torch.randn(6, 4)
    found = ps.symmetries(model, example_input=x, loss_fn=nn.CrossEntropyLoss())
    assert found[-1].name == "translation[2]"
    assert found[-1].preserves == "loss"


def test_reused_layers_and_tied_weights_tie_permutations_and_block_the_rest():
    """One Linear applied twice: its rows and columns serve two feature spaces each, so a
    permutation or a rescaling must act on all of them alike (one element): the shared map
    becomes D W D⁻¹ with b ↦ D b, the same in both calls (ReLU commutes with D > 0). A tied
    weight read once as rows and once as columns (below) would need D = D⁻¹: no rescaling."""

    class Twice(nn.Module):
        def __init__(self):
            super().__init__()
            self.inp, self.shared, self.out = nn.Linear(3, 4), nn.Linear(4, 4), nn.Linear(4, 2)

        def forward(self, x):
            h = torch.relu(self.shared(torch.relu(self.inp(x))))
            return self.out(torch.relu(self.shared(h)))

    model = Twice()
    x = torch.randn(5, 3)
    found = ps.symmetries(model, example_input=x)
    assert [(s.name, s.group) for s in found] == [
        ("rescaling[inp,shared->shared,out]", "(R>0)^4"),
        ("permutation[inp,shared->shared,out]", "S_4"),
    ]
    assert_exact_symmetries(model, x, found)

    class TiedAutoencoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.enc = nn.Linear(6, 4)
            self.mid = nn.Linear(4, 4)

        def forward(self, x):
            h = torch.relu(self.mid(torch.relu(self.enc(x))))
            return nn.functional.linear(h, self.enc.weight.T)

    model = TiedAutoencoder()
    x = torch.randn(5, 6)
    found = ps.symmetries(model, example_input=x)
    assert_exact_symmetries(model, x, found)
    # the encoder's rows are the decoder's columns: a permutation of the 4 code units moves
    # both consistently; a rescaling would scale one use by c and the other by 1/c
    assert [s.name for s in found] == ["permutation[enc,mid->mid,enc]"]


def test_untraceable_forward_falls_back_with_the_reason():
    class Branchy(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))

        def forward(self, x):
            if x.sum() > 0:  # data-dependent Python control flow
                return self.body(x)
            return -self.body(x)

    x = torch.ones(2, 3)
    with pytest.warns(ps.UnanalysedModuleWarning, match="could not trace the forward of 'Branchy'"):
        found = ps.symmetries(Branchy(), example_input=x)
    assert [s.name for s in found] == ["rescaling[body.0->body.2]", "permutation[body.0->body.2]"]
    with pytest.raises(ps.UnsupportedModuleError, match="Branchy"):
        ps.symmetries(Branchy(), example_input=x, strict=True)


def test_custom_forward_without_example_input_is_a_clear_error():
    model = ZOO["residual-mlp"].build()
    with pytest.raises(ps.InvalidArgumentError, match="example_input"):
        ps.symmetries(model)


def test_unknown_op_on_a_parameter_is_reported_and_never_moved():
    class Odd(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(3, 4), nn.Linear(4, 2)

        def forward(self, x):
            return self.b(torch.relu(self.a(x)) * torch.cumsum(self.a.bias, 0))

    x = torch.randn(5, 3)
    with pytest.warns(ps.UnanalysedModuleWarning, match=r"a\.bias.*cumsum"):
        found = ps.symmetries(Odd(), example_input=x)
    assert all("a.bias" not in s.parameter_names for s in found)
    with pytest.raises(ps.UnsupportedModuleError, match="cumsum"):
        ps.symmetries(Odd(), example_input=x, strict=True)


def first_tensor(out):
    """The first tensor of a tuple or a Hugging Face ModelOutput."""
    if isinstance(out, tuple):
        return out[0]
    return getattr(out, "last_hidden_state", out)


@pytest.mark.parametrize("name", [n for n in ZOO if n in available_zoo()])
def test_every_zoo_model_keeps_its_output_under_every_exact_symmetry(name):
    entry = ZOO[name]
    model, x = entry.build(), entry.example_input(torch.Generator().manual_seed(0))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ps.UnanalysedModuleWarning)
        found = ps.symmetries(model, example_input=x)
    assert_exact_symmetries(model, x, found, select=first_tensor)


@pytest.mark.parametrize("name", [n for n in ZOO if n in available_zoo()])
def test_both_tracers_give_the_same_symmetries(name):
    """make_fx (tried first, faster) and torch.export (the fallback) see the same graph."""
    entry = ZOO[name]
    model, x = entry.build(), entry.example_input(torch.Generator().manual_seed(0))

    def summary(tracer):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ps.UnanalysedModuleWarning)
            analysis = analyse(model, x, tracers=(tracer,))
        found = [
            (s.name, s.group, tuple(sorted(s.parameter_names)), tuple(sorted(s.buffer_names)))
            for s in analysis.symmetries
        ]
        return found, sorted(analysis.unexplained)

    assert summary("make_fx") == summary("export")


def test_a_tensor_constant_in_the_forward_falls_back_to_export():
    class Scaled(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(3, 4), nn.Linear(4, 2)
            self.scale = torch.tensor([1.0, 2.0])  # a plain attribute, not a buffer

        def forward(self, x):
            return self.b(torch.relu(self.a(x))) * self.scale

    model, x = Scaled(), torch.randn(5, 3)
    assert trace_forward(model, x).tracer == "export"
    with pytest.raises(TraceError, match="FakeTensor"):
        trace_forward(model, x, tracers=("make_fx",))
    assert [s.name for s in ps.symmetries(model, example_input=x)] == [
        "rescaling[a->b]",
        "permutation[a->b]",
    ]


@pytest.mark.parametrize("name", ["gpt", "gpt-packed"])
def test_gpt_style_attention_has_per_head_qk_vo_and_head_permutations(name):
    entry = ZOO[name]
    model, x = entry.build(), entry.example_input(torch.Generator().manual_seed(0))
    found = {s.name: s for s in ps.symmetries(model, example_input=x)}
    for layer in (0, 1):
        for head in (0, 1):
            qk = found[f"attention_QK[h.{layer}.attn.head{head}]"]
            vo = found[f"attention_VO[h.{layer}.attn.head{head}]"]
            assert (qk.group, vo.group) == ("GL(8)", "GL(8)")
            assert f"permutation[h.{layer}.attn.head{head}.QK]" in found
        assert found[f"head_permutation[h.{layer}.attn]"].group == "S_2"
        assert found[f"permutation[h.{layer}.mlp.fc->h.{layer}.mlp.proj]"].group == "S_64"
    stream = [s for s in found.values() if s.name.startswith("permutation[wte")]
    assert len(stream) == 1
    assert {"wte.weight", "wpe.weight", "h.1.mlp.proj.weight", "lm_head.weight"} <= set(
        stream[0].parameter_names
    )
    # the keys move by g⁻ᵀ: the query rows get power +1, the key rows −1
    qk = found["attention_QK[h.0.attn.head1]"]
    powers = {(s.name, s.offset): s.power for s in qk.slots}
    if name == "gpt":
        assert powers[("h.0.attn.q_proj.weight", 8)] == 1.0
        assert powers[("h.0.attn.k_proj.weight", 8)] == -1.0
    else:
        assert powers[("h.0.attn.c_attn.weight", 8)] == 1.0
        assert powers[("h.0.attn.c_attn.weight", 24)] == -1.0
    assert_exact_symmetries(model, x, list(found.values()))


def test_hugging_face_bert_from_the_issue_lists_the_attention_symmetries():
    transformers = pytest.importorskip("transformers")
    config = transformers.BertConfig(
        num_hidden_layers=1,
        hidden_size=16,
        num_attention_heads=2,
        intermediate_size=32,
        vocab_size=32,
        max_position_embeddings=16,
    )
    model = transformers.BertModel(config, add_pooling_layer=False).eval()
    ids = torch.randint(0, 32, (2, 8), generator=torch.Generator().manual_seed(0))
    found = {s.name: s for s in ps.symmetries(model, example_input=ids)}
    prefix = "encoder.layer.0.attention.self"
    for head in (0, 1):
        assert found[f"attention_QK[{prefix}.head{head}]"].group == "GL(8)"
        assert found[f"attention_VO[{prefix}.head{head}]"].group == "GL(8)"
    assert found[f"head_permutation[{prefix}]"].group == "S_2"
    mlp = "permutation[encoder.layer.0.intermediate.dense->encoder.layer.0.output.dense]"
    assert found[mlp].group == "S_32"
    assert_exact_symmetries(model, ids, list(found.values()), select=first_tensor)


@pytest.mark.parametrize(("cell", "sign"), [("lstm", True), ("gru", True)])
@pytest.mark.parametrize("layers", [1, 2])
def test_recurrent_hidden_units_permute_across_gates(cell, sign, layers):
    torch.manual_seed(0)
    model = ps.nn.zoo.LSTMClassifier(cell=cell, num_layers=layers).eval()
    x = torch.randn(3, 5, 4)
    found = ps.symmetries(model, example_input=x)
    names = [s.name for s in found]
    assert [n for n in names if "fc" in n] == ["permutation[rnn->rnn,fc]", "sign_flip[rnn->rnn,fc]"]
    assert len([n for n in names if n.startswith("permutation")]) == layers
    assert len([n for n in names if n.startswith("sign_flip")]) == layers * sign
    permutation = found[0]
    gates = 4 if cell == "lstm" else 3
    rows = [s for s in permutation.slots if s.name == "rnn.weight_ih_l0"]
    assert sorted(s.offset for s in rows) == [8 * k for k in range(gates)]
    assert_exact_symmetries(model, x, found)


def test_recurrent_layers_with_a_given_initial_state_or_both_directions_are_blocked():
    class WithState(nn.Module):
        def __init__(self, bidirectional=False):
            super().__init__()
            self.rnn = nn.LSTM(4, 6, batch_first=True, bidirectional=bidirectional)
            self.fc = nn.Linear(12 if bidirectional else 6, 2)
            self.given = not bidirectional

        def forward(self, x):
            if self.given:
                h0 = torch.ones(1, x.shape[0], 6)
                out, _ = self.rnn(x, (h0, h0))
            else:
                out, _ = self.rnn(x)
            return self.fc(out[:, -1])

    x = torch.randn(2, 5, 4)
    both = ["rnn_l0", "rnn_l0_reverse"]
    for model, sites in ((WithState(), ["rnn_l0"]), (WithState(bidirectional=True), both)):
        # the hidden units are blocked; the two biases still enter as a sum
        found = [s.name for s in ps.symmetries(model.eval(), example_input=x)]
        assert found == [f"recurrent_bias[{site}]" for site in sites]


class PositionEmbeddedEncoder(nn.Module):
    """A ViT as timm writes it: patches projected, a class token concatenated, a learned
    position embedding (1, tokens, width) added to the stream, a pre-norm MLP block, the
    class token read by the head."""

    def __init__(self, width: int = 8, patches: int = 5) -> None:
        super().__init__()
        self.patch = nn.Linear(12, width)
        self.cls_token = nn.Parameter(torch.randn(1, 1, width))
        self.pos_embed = nn.Parameter(torch.randn(1, patches + 1, width))
        self.norm = nn.LayerNorm(width)
        self.fc1, self.fc2 = nn.Linear(width, 16), nn.Linear(16, width)
        self.head = nn.Linear(width, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.patch(x)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1)
        x = x + self.pos_embed
        x = x + self.fc2(torch.relu(self.fc1(self.norm(x))))
        return self.head(x[:, 0])


def test_a_learned_position_embedding_moves_with_the_stream():
    """The position embedding varies along the tokens, where the stream has no features: it
    is read on its feature axis only, so the stream permutation carries it (with the class
    token) instead of reporting it unexplained."""
    torch.manual_seed(0)
    model = PositionEmbeddedEncoder().double()
    x = torch.randn(2, 5, 12, dtype=torch.float64)
    found = ps.symmetries(model, example_input=x, strict=True)  # nothing left unexplained
    (stream,) = [s for s in found if isinstance(s, ps.symmetry.NeuronPermutation)
                 and "pos_embed" in s.parameter_names]  # fmt: skip
    assert {"cls_token", "patch.weight", "head.weight"} <= set(stream.parameter_names)
    assert stream.exact
    assert_exact_symmetries(model, x, found, tol=1e-12)
    # the same permutation leaving the position embedding in place changes the output
    state = ps.params_of(model)
    g = stream.sample(generator=torch.Generator().manual_seed(1), non_identity=True)
    moved = {**stream.act(state, g), "pos_embed": state["pos_embed"]}
    reference = ps.functional_call(model, state, x)
    assert (ps.functional_call(model, moved, x) - reference).norm() > 1e-3 * reference.norm()
