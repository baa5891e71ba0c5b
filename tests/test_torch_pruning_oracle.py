"""The Torch-Pruning oracle (tests/oracles/torch_pruning_groups.py) on models with known groups."""

from __future__ import annotations

import pytest
import torch
from torch import nn

pytest.importorskip("torch_pruning")

from oracles.torch_pruning_groups import coupled_channel_groups


def g(*pairs: tuple[str, int]) -> frozenset[tuple[str, int]]:
    return frozenset(pairs)


def out_(name: str, bias: bool = True) -> list[tuple[str, int]]:
    return [(f"{name}.weight", 0)] + ([(f"{name}.bias", 0)] if bias else [])


def test_mlp_two_hidden_groups_and_boundary():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 3))
    res = coupled_channel_groups(model, torch.randn(2, 4))
    assert res.groups == [
        g(*out_("0"), ("2.weight", 1)),
        g(*out_("2"), ("4.weight", 1)),
    ]
    assert res.exact == res.groups
    assert not res.unmapped
    assert not res.caveats
    assert res.uncovered == ()
    # Torch-Pruning reports the last Linear's out-channels as a group of its own (unmarked); the
    # input probe shows the first Linear's in-columns. Both are dropped as boundary groups.
    boundary = {(r.params, r.touches_input, r.touches_output) for r in res.boundary}
    assert boundary == {
        (g(*out_("4")), False, True),
        (g(("0.weight", 1)), True, False),
    }
    assert res.build_seconds > 0


def test_cnn_with_batchnorm_and_flatten():
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 8, 3),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.Conv2d(8, 8, 3),
        nn.ReLU(),
        nn.Flatten(),
        nn.Linear(8 * 4 * 4, 5),
    )
    res = coupled_channel_groups(model, torch.randn(2, 3, 8, 8))
    first = g(*out_("0"), *out_("1"), ("3.weight", 1))
    second = g(*out_("3"), ("6.weight", 1))
    assert res.groups == [first, second]
    assert res.exact == [first]
    # The flatten makes each conv channel a block of 16 columns of the Linear.
    assert res.caveats[second] == ("6.weight[1]: 128 indices for 8 channels (blocked: flatten)",)
    assert [r.params for r in res.boundary if r.touches_output] == [g(*out_("6"))]


class _ResidualNet(nn.Module):
    """stem conv, then x + bn2(conv2(relu(bn1(conv1(x))))), then pool and Linear."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.conv1 = nn.Conv2d(8, 8, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(8)
        self.fc = nn.Linear(8, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        x = x + self.bn2(self.conv2(torch.relu(self.bn1(self.conv1(x)))))
        return self.fc(torch.relu(x).mean(dim=(2, 3)))


def test_residual_stream_group():
    torch.manual_seed(0)
    model = _ResidualNet().train()
    res = coupled_channel_groups(model, torch.randn(2, 3, 6, 6))
    stream = g(
        *out_("stem"),
        ("conv1.weight", 1),
        *out_("conv2", bias=False),
        *out_("bn2"),
        ("fc.weight", 1),
    )
    inner = g(*out_("conv1", bias=False), *out_("bn1"), ("conv2.weight", 1))
    assert sorted(res.groups, key=len) == [inner, stream]
    assert res.exact == res.groups
    # Torch-Pruning's tracer calls model.eval(); the oracle restores the flags.
    assert all(m.training for m in model.modules())


def test_residual_on_the_raw_input_is_not_a_symmetry():
    class InputResidual(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = nn.Linear(4, 4)
            self.b = nn.Linear(4, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.b(x + torch.relu(self.a(x)))

    res = coupled_channel_groups(InputResidual(), torch.randn(2, 4))
    assert res.groups == []
    [inp] = [r for r in res.boundary if r.touches_input]
    assert inp.params == g(*out_("a"), ("a.weight", 1), ("b.weight", 1))


def test_depthwise_and_transposed_conv_axes():
    model = nn.Sequential(
        nn.Conv2d(3, 8, 1),
        nn.Conv2d(8, 8, 3, groups=8),
        nn.ConvTranspose2d(8, 4, 2),
        nn.ReLU(),
        nn.Conv2d(4, 2, 1),
    )
    res = coupled_channel_groups(model, torch.randn(2, 3, 6, 6))
    assert res.groups == [
        g(*out_("0"), *out_("1"), ("2.weight", 0)),  # depthwise: in = out; transposed in: axis 0
        g(("2.weight", 1), ("2.bias", 0), ("4.weight", 1)),  # transposed out: axis 1
    ]


def test_grouped_conv_is_flagged_unmapped():
    model = nn.Sequential(
        nn.Conv2d(3, 8, 1), nn.ReLU(), nn.Conv2d(8, 8, 3, groups=2), nn.ReLU(), nn.Conv2d(8, 2, 1)
    )
    res = coupled_channel_groups(model, torch.randn(2, 3, 6, 6))
    assert res.groups == [g(*out_("0")), g(("4.weight", 1))]
    assert res.unmapped == {
        g(*out_("0")): ("2: Conv2d(groups=2) in-channels",),
        g(("4.weight", 1)): ("2: Conv2d(groups=2) out-channels",),
    }
    assert res.exact == []
    assert set(res.uncovered) == {"2.weight", "2.bias"}


def test_concat_members_are_partial():
    class Cat(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = nn.Linear(4, 3)
            self.b = nn.Linear(4, 5)
            self.c = nn.Linear(8, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.c(torch.relu(torch.cat([self.a(x), self.b(x)], dim=-1)))

    res = coupled_channel_groups(Cat(), torch.randn(2, 4))
    ga, gb = g(*out_("a"), ("c.weight", 1)), g(*out_("b"), ("c.weight", 1))
    assert res.groups == [ga, gb]
    assert res.caveats == {
        ga: ("c.weight[1]: partial (3 of 8 indices)",),
        gb: ("c.weight[1]: partial (5 of 8 indices)",),
    }


def test_embedding_layernorm_and_unwrapped_parameter():
    class Emb(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.e = nn.Embedding(10, 6)
            self.ln = nn.LayerNorm(6)
            self.scale = nn.Parameter(torch.ones(6))
            self.fc = nn.Linear(6, 2)

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            return self.fc((self.ln(self.e(ids)) * self.scale).mean(dim=1))

    res = coupled_channel_groups(Emb(), torch.randint(0, 10, (2, 5)))
    group = g(("e.weight", 1), *out_("ln"), ("scale", 0), ("fc.weight", 1))
    assert res.groups == [group]
    assert res.caveats[group] == ("scale: unwrapped parameter, axis guessed by Torch-Pruning",)
    assert any("Unwrapped parameters detected" in w for w in res.warnings)


def test_lstm():
    """LSTM hidden units are gate-blocked: flagged unmapped; input columns map to axis 1."""

    class LSTMHead(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.proj = nn.Linear(3, 4)
            self.lstm = nn.LSTM(4, 6, batch_first=True)
            self.fc = nn.Linear(6, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc(self.lstm(self.proj(x))[0])

    res = coupled_channel_groups(LSTMHead(), torch.randn(2, 5, 3))
    into = g(*out_("proj"), ("lstm.weight_ih_l0", 1))
    hidden = g(("fc.weight", 1))
    assert res.groups == [hidden, into]
    assert res.unmapped == {
        hidden: ("lstm: LSTM hidden units (gate-blocked rows, weight_hh columns)",)
    }
    assert set(res.uncovered) == {"lstm.weight_hh_l0", "lstm.bias_ih_l0", "lstm.bias_hh_l0"}

    # A bare LSTM: Torch-Pruning treats the fused RNN op as element-wise, which ties the input
    # columns to the returned h_n/c_n (over-coupling); the hidden group touches the output.
    bare = coupled_channel_groups(nn.LSTM(4, 6, batch_first=True), torch.randn(2, 5, 4))
    assert bare.groups == []
    assert {(r.params, r.touches_input, r.touches_output) for r in bare.records} == {
        (g(), False, True),
        (g(("weight_ih_l0", 1)), True, True),
    }


def test_tiny_bert():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.BertConfig(
        num_hidden_layers=1,
        hidden_size=16,
        num_attention_heads=2,
        intermediate_size=32,
        vocab_size=32,
        max_position_embeddings=16,
    )
    model = transformers.BertModel(config).eval()
    ids = torch.randint(0, 32, (2, 7))
    res = coupled_channel_groups(model, {"input_ids": ids, "attention_mask": torch.ones_like(ids)})
    layer = "encoder.layer.0."
    attention = g(
        *out_(layer + "attention.self.query"),
        *out_(layer + "attention.self.key"),
        *out_(layer + "attention.self.value"),
        (layer + "attention.output.dense.weight", 1),
    )
    ffn = g(*out_(layer + "intermediate.dense"), (layer + "output.dense.weight", 1))
    # Torch-Pruning ties q, k and v into one group: over-coupled (q/k and v/o are separate
    # symmetries, per head).
    assert res.groups == [attention, ffn]
    assert res.exact == res.groups
    assert res.uncovered == ()
    # The residual stream (embeddings, every LayerNorm, the attention and FFN output rows, every
    # input column that reads it) ends in last_hidden_state, and the pooler ends in
    # pooler_output: both touch the output, so neither is a symmetry of the bare BertModel.
    stream, pooler = sorted((r for r in res.boundary), key=lambda r: -len(r.params))
    assert stream.touches_output
    assert ("embeddings.word_embeddings.weight", 1) in stream.params
    assert (layer + "output.LayerNorm.weight", 0) in stream.params
    assert ("pooler.dense.weight", 1) in stream.params
    assert len(stream.params) == 18
    assert pooler.params == g(*out_("pooler.dense"))
