"""Helpers of the ``linear-discovery`` and ``symmetry-count`` experiments: the zoo's models,
their derived dimensions, and the data-dependent counts (batch size, activation region)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import paramsym as ps
from paramsym.discovery import discover_symmetries
from paramsym.experiments.discovery.count import (
    RegionSampler,
    output_rotations,
    patterns,
    predicted_full,
    predicted_pairs,
    predicted_region,
)
from paramsym.experiments.discovery.zoo import mlp_expected
from paramsym.experiments.discovery.zoo_models import (
    PerHeadAttention,
    SelfAttention,
    WAsymLinear,
    wasym_mlp,
)

F64 = torch.float64
MSE = nn.MSELoss()


pytestmark = pytest.mark.usefixtures("one_thread")


def test_fused_and_per_head_attention_compute_the_same_function():
    torch.manual_seed(0)
    d_model, heads, d_k, d_v = 4, 2, 3, 2
    fused = SelfAttention(d_model, heads, d_k, d_v).to(F64)
    split = PerHeadAttention(d_model, heads, d_k, d_v).to(F64)
    q, k, v = fused.qkv.weight.detach().split([heads * d_k, heads * d_k, heads * d_v])
    with torch.no_grad():
        for i, head in enumerate(split.heads):
            head.query.weight.copy_(q[i * d_k : (i + 1) * d_k])
            head.key.weight.copy_(k[i * d_k : (i + 1) * d_k])
            head.value.weight.copy_(v[i * d_v : (i + 1) * d_v])
        split.out.weight.copy_(fused.out.weight)
    x = torch.randn(5, 3, d_model, dtype=F64)
    torch.testing.assert_close(fused(x), split(x), rtol=0, atol=1e-13)
    # and both are softmax(QKᵀ/√d_k)V W_Oᵀ for head 0 alone when head 1's values are zero
    with torch.no_grad():
        split.heads[1].value.weight.zero_()
    head = split.heads[0]
    scores = head.query(x) @ head.key(x).transpose(1, 2) / d_k**0.5
    reference = torch.softmax(scores, -1) @ head.value(x) @ split.out.weight[:, :d_v].T
    torch.testing.assert_close(split(x), reference, rtol=0, atol=1e-13)


def test_wasym_layer_pins_entries_and_trains_the_rest():
    layer = WAsymLinear(5, 4, 2, 3.0, torch.Generator().manual_seed(1))
    assert layer.weight.numel() == 4 * (5 - 2)
    assert [n for n, _ in layer.named_parameters()] == ["weight", "bias"]
    weight = layer.fixed.scatter(0, layer.free, layer.weight.detach()).view(4, 5)
    x = torch.randn(7, 5, dtype=F64)
    torch.testing.assert_close(layer(x), x @ weight.T + layer.bias.detach(), rtol=0, atol=1e-14)
    pinned = torch.ones(20, dtype=torch.bool)
    pinned[layer.free] = False
    assert int(pinned.view(4, 5).sum(dim=1).min()) == 2  # two per row
    assert bool((layer.fixed[pinned] != 0).all())
    before = layer.fixed.clone()
    layer.reset_parameters()
    torch.testing.assert_close(layer.fixed, before)  # re-initialising keeps the pins


def test_wasym_network_has_no_symmetry_and_released_has_the_rescalings():
    def batch(generator):
        return torch.randn(16, 2, generator=generator, dtype=F64), torch.randn(
            16, 1, generator=generator, dtype=F64
        )

    pinned = discover_symmetries(wasym_mlp((2, 3, 1), 1, 1.0, 0), MSE, batch, "full")
    released = discover_symmetries(wasym_mlp((2, 3, 1), 0, 1.0, 0), MSE, batch, "full")
    assert pinned.determined
    assert pinned.dim == 0
    assert released.determined
    assert released.dim == 3


@pytest.mark.parametrize(
    ("widths", "activation", "bias", "ce", "ansatz", "p", "expected"),
    [
        ((3, 4, 2), "linear", False, False, "full", 20, 16),
        ((3, 4, 4, 2), "linear", True, False, "layer_pairs", 46, 32),
        ((3, 5, 4, 2), "relu", True, False, "layer_pairs", 54, 9),
        ((3, 5, 4, 2), "tanh", True, False, "full", 54, 0),
        ((3, 4, 3), "relu", True, True, "layer_pairs", 31, 7),
        ((3, 4, 3), "relu", True, True, "full", 31, 4 + 5 * 31),
    ],
)
def test_mlp_expected(widths, activation, bias, ce, ansatz, p, expected):
    assert mlp_expected(widths, activation, bias, ce, ansatz, p)[0] == expected


def test_attention_discovery_finds_the_per_head_groups():
    torch.manual_seed(0)
    model = PerHeadAttention(2, 2, 1, 1).to(F64)  # P = 3·2·2 + 2·2 = 16

    def batch(generator):
        x = torch.randn(8, 3, 2, generator=generator, dtype=F64)
        return x, torch.randn(8, 3, 2, generator=generator, dtype=F64)

    result = discover_symmetries(model, MSE, batch, "full")
    assert result.determined
    assert result.dim == 2 * (1 + 1)


def test_counts_on_a_fixed_batch():
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(2, 4, generator=g, dtype=F64), torch.randn(2, 5, generator=g, dtype=F64)
    assert output_rotations(y) == 3 * 2 // 2  # so(5 − 2)
    counts = predicted_pairs((4, 6, 5), "relu", x, y)
    assert counts == {"independent": 6, "input_term": 6 + 4 * 2, "derived": 6 + 8 + 3}
    # gl(P): P·h·(n + 1 − rank[X; 1]) on a 4-6-1 net (P = 37)
    assert predicted_full((4, 6, 1), "tanh", x, 37) == 37 * 6 * (5 - 2)


def test_region_count_of_hand_made_patterns():
    n, h = 2, 4
    weight = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [0.0, 0.0]], dtype=F64)
    bias = torch.tensor([0.0, 0.0, 0.0, -1.0], dtype=F64)  # unit 3 dead everywhere
    center = {"0.weight": weight, "0.bias": bias}
    x = torch.tensor([[1.0, -1.0], [-1.0, 1.0], [2.0, 1.0]], dtype=F64)
    active = patterns(center, x)
    assert active.T.tolist() == [[True, False, True], [True, False, True],
                                 [False, True, True], [False, False, False]]  # fmt: skip
    y = torch.randn(3, 1, dtype=F64)
    count = predicted_region(center, x, y)
    # units 0, 1 share a pattern (2), one dead unit: h + d + 2d(d − 1) + 2d(h − d) + 2
    assert count["dead"] == 1
    assert count["shared_patterns"] == 2
    assert count["predicted"] == 4 + 1 + 0 + 2 * 3 + 2 + n * (n - 2)
    # a single point: h² + d² + n(n − 1) (+ so(o − 1) = 1 for o = 3)
    single = predicted_region(center, x[2:], torch.randn(1, 3, dtype=F64))
    assert single["predicted"] == h * h + 1 + n * (n - 1) + 1


def test_region_sampler_keeps_the_patterns_and_discovery_finds_the_count():
    model = ps.mlp([3, 4, 2], "relu", seed=2, dtype=F64)
    center = ps.params_of(model)
    with torch.no_grad():
        center["0.bias"][0] = -5.0  # a dead unit on the batch
    g = torch.Generator().manual_seed(3)
    batch = (torch.randn(2, 3, generator=g, dtype=F64), torch.randn(2, 2, generator=g, dtype=F64))
    sampler = RegionSampler(center, batch[0])
    for _ in range(20):
        drawn = sampler(g)
        assert torch.equal(patterns(drawn, batch[0]), patterns(center, batch[0]))
        assert not torch.equal(drawn["2.weight"], center["2.weight"])
    result = discover_symmetries(model, MSE, batch, data_dependent=True, theta=sampler)
    assert result.determined
    assert result.dim == predicted_region(center, *batch)["predicted"]
    assert sampler.fallbacks == 0
