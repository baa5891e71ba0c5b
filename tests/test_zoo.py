"""The model zoo: every entry builds, runs in float64, and keeps its documented layout."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from paramsym.errors import InvalidArgumentError
from paramsym.nn import hf, zoo
from paramsym.nn.zoo import ZOO, available_zoo, resnet18, zoo_model

# Output shape of each entry on its example input (raw HF entries: of last_hidden_state).
EXPECTED_SHAPES = {
    "cnn": (2, 3),
    "cnn-bn": (2, 3),
    "cnn1d-tanh": (2, 3),
    "resnet-block": (2, 3),
    "resnet18-tiny": (2, 10),
    "residual-mlp": (2, 3),
    "gpt": (2, 8, 32),
    "gpt-packed": (2, 8, 32),
    "lstm": (2, 3),
    "gru": (2, 3),
    "lstm-raw": (2, 5, 8),
    "hf-gpt2": (2, 8, 16),
    "hf-gpt2-hidden": (2, 8, 16),
    "hf-bert": (2, 8, 16),
    "hf-bert-hidden": (2, 8, 16),
}

# Parameter names each entry must have (torchvision / nanoGPT / Hugging Face layout).
EXPECTED_NAMES = {
    "cnn": {"conv1.weight", "conv2.bias", "fc.weight"},
    "cnn-bn": {"conv1.weight", "bn1.weight", "bn2.bias", "fc.bias"},
    "cnn1d-tanh": {"conv1.weight", "conv2.weight", "fc.weight"},
    "resnet-block": {"conv1.weight", "bn1.weight", "block.conv1.weight", "block.bn2.bias"},
    "resnet18-tiny": {
        "conv1.weight",
        "layer1.0.conv1.weight",
        "layer1.1.bn2.weight",
        "layer2.0.downsample.0.weight",
        "layer2.0.downsample.1.bias",
        "layer4.1.conv2.weight",
        "fc.weight",
    },
    "residual-mlp": {"inp.weight", "f1.weight", "f2.bias", "out.weight"},
    "gpt": {
        "wte.weight",
        "wpe.weight",
        "h.0.ln_1.weight",
        "h.0.attn.q_proj.weight",
        "h.1.attn.out_proj.bias",
        "h.1.mlp.fc.weight",
        "h.1.mlp.proj.bias",
        "ln_f.weight",
        "lm_head.weight",
    },
    "gpt-packed": {"h.0.attn.c_attn.weight", "h.0.attn.c_attn.bias", "h.1.attn.out_proj.weight"},
    "lstm": {"rnn.weight_ih_l0", "rnn.weight_hh_l0", "rnn.bias_ih_l0", "fc.weight"},
    "gru": {"rnn.weight_ih_l0", "rnn.bias_hh_l0", "fc.bias"},
    "lstm-raw": {"weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0"},
    "hf-gpt2": {"wte.weight", "h.0.attn.c_attn.weight", "h.0.mlp.c_fc.weight", "ln_f.bias"},
    "hf-gpt2-hidden": {"model.wte.weight", "model.h.0.attn.c_proj.weight"},
    "hf-bert": {
        "embeddings.word_embeddings.weight",
        "encoder.layer.0.attention.self.query.weight",
        "encoder.layer.0.output.LayerNorm.bias",
        "pooler.dense.weight",
    },
    "hf-bert-hidden": {"model.encoder.layer.0.intermediate.dense.weight"},
}

NEEDS_TRANSFORMERS = {name for name, entry in ZOO.items() if "transformers" in entry.needs}


@pytest.fixture
def float64():
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(previous)


def _tensor_output(name: str, output):
    if name == "lstm-raw":
        out, (h, c) = output
        assert h.shape == c.shape == (1, 2, 8)
        return out
    if name in ("hf-gpt2", "hf-bert"):
        if name == "hf-bert":
            assert output.pooler_output.shape == (2, 16)
        return output.last_hidden_state
    return output


def test_registry_is_complete():
    assert set(ZOO) == set(EXPECTED_SHAPES) == set(EXPECTED_NAMES)
    for name, entry in ZOO.items():
        assert entry.name == name
        assert entry.description
    assert set(available_zoo()) >= set(ZOO) - NEEDS_TRANSFORMERS


@pytest.mark.parametrize("name", sorted(ZOO))
def test_entry_builds_and_runs(name, float64):
    entry = zoo_model(name)
    if entry.needs:
        for package in entry.needs:
            pytest.importorskip(package)
    torch.manual_seed(0)
    model = entry.build()
    assert not model.training
    assert all(not m.training for m in model.modules())
    assert all(p.dtype == torch.float64 for p in model.parameters())
    x = entry.example_input(torch.Generator().manual_seed(0))
    assert torch.equal(x, entry.example_input(torch.Generator().manual_seed(0)))
    assert x.dtype in (torch.int64, torch.float64)
    with torch.no_grad():
        out = _tensor_output(name, model(x))
        again = _tensor_output(name, model(x))
    assert out.shape == EXPECTED_SHAPES[name]
    assert out.dtype == torch.float64
    assert torch.isfinite(out).all()
    assert torch.equal(out, again)
    names = {n for n, _ in model.named_parameters()}
    assert EXPECTED_NAMES[name] <= names, EXPECTED_NAMES[name] - names


def test_language_models_take_token_ids():
    for name in ("gpt", "gpt-packed", *sorted(NEEDS_TRANSFORMERS)):
        assert zoo_model(name).example_input(torch.Generator()).dtype == torch.int64


def test_builds_are_fresh_and_norms_randomized():
    entry = zoo_model("cnn-bn")
    torch.manual_seed(0)
    a = entry.build()
    torch.manual_seed(1)
    b = entry.build()
    assert a is not b
    assert not torch.equal(a.conv1.weight, b.conv1.weight)
    # Non-default BatchNorm statistics and affine parameters (so forgotten buffers show).
    assert not torch.allclose(a.bn1.running_var, torch.ones_like(a.bn1.running_var))
    assert not torch.allclose(a.bn1.running_mean, torch.zeros_like(a.bn1.running_mean))
    assert not torch.allclose(a.bn1.weight, torch.ones_like(a.bn1.weight))
    assert (a.bn1.running_var > 0).all()


def test_unknown_name():
    with pytest.raises(InvalidArgumentError, match=r"known: .*resnet18-tiny"):
        zoo_model("resnet-9000")


def test_resnet18_parameter_count_matches_torchvision():
    torch.manual_seed(0)
    model = resnet18(num_classes=1000)
    assert sum(p.numel() for p in model.parameters()) == 11_689_512
    names = [n for n, _ in model.named_parameters()]
    assert names[:3] == ["conv1.weight", "bn1.weight", "bn1.bias"]
    assert names[-2:] == ["fc.weight", "fc.bias"]
    assert "layer1.0.downsample.0.weight" not in names
    assert "layer3.0.downsample.1.weight" in names
    assert len([n for n in names if n.endswith("conv1.weight")]) == 1 + 8
    assert model.conv1.kernel_size == (7, 7)
    assert isinstance(model.maxpool, nn.MaxPool2d)


def test_resnet_small_stem_and_validation():
    model = zoo.ResNet(layers=(1, 1), widths=(4, 6), small_stem=True, num_classes=2)
    assert model.conv1.kernel_size == (3, 3)
    assert isinstance(model.maxpool, nn.Identity)
    assert not hasattr(model, "layer3")
    assert model(torch.randn(1, 3, 8, 8)).shape == (1, 2)
    with pytest.raises(InvalidArgumentError, match="layers and widths"):
        zoo.ResNet(layers=(2, 2), widths=(4, 8, 16))


def test_simple_cnn_options():
    model = zoo.SimpleCNN(dims=1, activation=("relu", "tanh"), channels=(5, 6), input_size=10)
    assert isinstance(model.act1, nn.ReLU)
    assert isinstance(model.act2, nn.Tanh)
    assert isinstance(model.bn1, nn.Identity)
    assert model(torch.randn(2, 3, 10)).shape == (2, 3)
    with pytest.raises(InvalidArgumentError, match="dims"):
        zoo.SimpleCNN(dims=3)
    with pytest.raises(InvalidArgumentError, match="activation"):
        zoo.SimpleCNN(activation="no-such-activation")
    with pytest.raises(InvalidArgumentError, match="pair"):
        zoo.SimpleCNN(activation=("relu", "tanh", "relu"))


def test_gpt_packed_and_separate_compute_the_same_function(float64):
    torch.manual_seed(0)
    separate = zoo.GPTStyle().eval()
    packed = zoo.GPTStyle(packed_qkv=True).eval()
    state = {k: v for k, v in separate.state_dict().items() if ".attn." not in k}
    for i, block in enumerate(separate.h):
        attn = block.attn
        state[f"h.{i}.attn.c_attn.weight"] = torch.cat(
            [attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight]
        )
        state[f"h.{i}.attn.c_attn.bias"] = torch.cat(
            [attn.q_proj.bias, attn.k_proj.bias, attn.v_proj.bias]
        )
        state[f"h.{i}.attn.out_proj.weight"] = attn.out_proj.weight
        state[f"h.{i}.attn.out_proj.bias"] = attn.out_proj.bias
    packed.load_state_dict(state)
    ids = torch.randint(0, 32, (2, 8), generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(packed(ids), separate(ids))
    # Causal: the first positions do not see later tokens.
    changed = ids.clone()
    changed[:, -1] = (changed[:, -1] + 1) % 32
    torch.testing.assert_close(separate(changed)[:, :-1], separate(ids)[:, :-1])


def test_residual_mlp_forward_matches_formula(float64):
    model = zoo.ResidualMLP()
    x = torch.randn(3, 4)
    h = model.inp(x)
    expected = model.out(h + model.f2(torch.relu(model.f1(h))))
    torch.testing.assert_close(model(x), expected)


def test_hf_last_hidden_matches_raw(float64):
    pytest.importorskip("transformers")
    torch.manual_seed(0)
    raw = hf.hf_gpt2()
    wrapped = hf.HFLastHidden(raw)
    ids = torch.randint(0, 32, (2, 8), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(wrapped(ids), raw(ids).last_hidden_state)
    bert = hf.hf_bert(pooler=False)
    assert not any(n.startswith("pooler") for n, _ in bert.named_parameters())
