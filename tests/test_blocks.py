"""Attention, low-rank and RBF symmetries, found inside transformers (Ex. 1.2.10-1.2.13)."""

from __future__ import annotations

import warnings

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch import nn

import paramsym as ps
from helpers import params_relative_error, randomize_, relative_error

TOL = 1e-10


def random_element(s, seed, scale=0.5):
    return s.sample(scale=scale, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def check_every_symmetry(model, x, found, seed=0):
    """Each symmetry, and the product of all continuous ones, leaves the output unchanged."""
    theta = ps.params_of(model)
    with torch.no_grad():
        reference = model(x)
    for i, s in enumerate(found):
        # A random permutation may be the identity: draw until the weights really move.
        tries = (s.act(theta, random_element(s, seed + i + 1000 * t)) for t in range(20))
        moved = next(m for m in tries if params_relative_error(m, theta) > 1e-6)
        assert relative_error(ps.functional_call(model, moved, x), reference) <= TOL, s.name
    continuous = [s for s in found if s.dim and s.preserves == "function"]
    product = ps.ProductSymmetry(continuous)
    moved = product.act(theta, random_element(product, seed))
    assert relative_error(ps.functional_call(model, moved, x), reference) <= TOL


@given(
    st.integers(1, 4),
    st.integers(1, 4),
    st.integers(1, 4),
    st.booleans(),
    st.booleans(),
    st.integers(0, 999),
)
def test_library_attention_symmetries(heads, d_k, d_v, bias, causal, seed):
    torch.manual_seed(seed)
    attention = ps.nn.MultiHeadAttention(6, heads, d_k, d_v, bias=bias, causal=causal).double()
    randomize_(attention, torch.Generator().manual_seed(seed))
    found = ps.symmetries(attention)
    names = [s.name for s in found]
    assert names[:2] == ["attention_QK[attention.head0]", "attention_VO[attention.head0]"]
    assert len([n for n in names if n.startswith("attention_QK")]) == heads
    assert ("head_permutation[attention]" in names) == (heads > 1)
    assert found[0].group == f"GL({d_k})"
    assert found[1].group == f"GL({d_v})"
    x = torch.randn(2, 5, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))
    check_every_symmetry(attention, x, found, seed)


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"bias": False},
        {"add_bias_kv": True},
        {"kdim": 3, "vdim": 5},
        {"add_bias_kv": True, "kdim": 3, "vdim": 5},
    ],
)
def test_torch_multihead_attention_symmetries(options):
    torch.manual_seed(0)
    attention = nn.MultiheadAttention(8, 4, batch_first=True, **options).double().eval()
    randomize_(attention, torch.Generator().manual_seed(1))
    found = ps.symmetries(attention)
    assert len(found) == 2 * 4 + 1
    kdim, vdim = options.get("kdim", 8), options.get("vdim", 8)
    q = torch.randn(2, 5, 8, dtype=torch.float64)
    k = torch.randn(2, 7, kdim, dtype=torch.float64)
    v = torch.randn(2, 7, vdim, dtype=torch.float64)

    class Wrapper(nn.Module):  # one input, the attention output only
        def __init__(self):
            super().__init__()
            self.attention = attention

        def forward(self, q):
            return self.attention(q, k, v, need_weights=False)[0]

    wrapper = Wrapper()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        found = ps.symmetries(wrapper)  # the wrapper holds no parameters of its own
    check_every_symmetry(wrapper, q, found)


def test_per_head_symmetries_form_a_direct_product_but_not_with_head_permutations():
    attention = ps.nn.MultiHeadAttention(8, 4)
    found = ps.symmetries(attention)
    per_head = [s for s in found if s.dim]
    assert ps.ProductSymmetry(per_head).dim == 4 * (2 * 2 * 2)
    permutation = next(s for s in found if s.name.startswith("head_permutation"))
    with pytest.raises(ps.InvalidArgumentError, match="not a direct product"):
        ps.ProductSymmetry([per_head[0], permutation])


def test_head_permutation_moves_whole_heads():
    attention = ps.nn.MultiHeadAttention(4, 2, d_k=3, d_v=1).double()
    permutation = next(s for s in ps.symmetries(attention) if s.name.startswith("head_perm"))
    theta = ps.params_of(attention)
    moved = permutation.act(theta, torch.tensor([1, 0]))
    assert torch.equal(moved["q_proj.weight"][:3], theta["q_proj.weight"][3:])
    assert torch.equal(moved["v_proj.bias"], theta["v_proj.bias"].flip(0))
    assert torch.equal(moved["out_proj.weight"][:, 0], theta["out_proj.weight"][:, 1])


def test_tiny_transformer_symmetries_leave_the_logits_unchanged():
    torch.manual_seed(0)
    model = ps.nn.TinyTransformer(
        vocab_size=11, d_model=8, num_heads=2, num_layers=2, d_ff=12, d_k=3, d_v=5
    ).double()
    randomize_(model, torch.Generator().manual_seed(0), std=0.4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # every part of the library's transformer is analysed
        found = ps.symmetries(model, loss_fn=nn.CrossEntropyLoss())
    names = [s.name for s in found]
    for block in ("blocks.0", "blocks.1"):
        assert f"attention_QK[{block}.attention.head1]" in names
        assert f"attention_VO[{block}.attention.head0]" in names
        assert f"head_permutation[{block}.attention]" in names
        assert f"permutation[{block}.mlp.0->{block}.mlp.2]" in names  # GELU hidden layer
    assert names[-1] == "translation[head]"
    tokens = torch.randint(0, 11, (3, 6), generator=torch.Generator().manual_seed(1))
    check_every_symmetry(model, tokens, [s for s in found if s.preserves == "function"])
    translation = found[-1]
    theta = ps.params_of(model)
    moved = translation.act(theta, random_element(translation, 1))
    targets = torch.randint(0, 11, (3 * 6,), generator=torch.Generator().manual_seed(2))

    def loss(p):
        return nn.functional.cross_entropy(
            ps.functional_call(model, p, tokens).reshape(-1, 11), targets
        )

    assert relative_error(loss(moved), loss(theta)) <= TOL


def test_two_block_transformer_built_from_torch_modules():
    """The issue's acceptance case: a transformer from torch modules, with a custom forward."""

    class Classifier(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(13, 16)
            layer = nn.TransformerEncoderLayer(
                16, 4, dim_feedforward=24, dropout=0.0, batch_first=True
            )
            self.encoder = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
            self.head = nn.Linear(16, 5)

        def forward(self, tokens):
            return self.head(self.encoder(self.embed(tokens)).mean(dim=1))

    torch.manual_seed(0)
    model = Classifier().double().eval()
    with pytest.warns(ps.UnanalysedModuleWarning) as record:
        found = ps.symmetries(model)
    message = str(record[0].message)
    assert "'embed' (Embedding)" in message
    assert "'head' (Linear)" in message
    assert "'Classifier' (the model)" in message
    names = [s.name for s in found]
    for layer in ("encoder.layers.0", "encoder.layers.1"):
        assert f"attention_QK[{layer}.self_attn.head3]" in names
        assert f"attention_VO[{layer}.self_attn.head0]" in names
        assert f"head_permutation[{layer}.self_attn]" in names
        assert f"rescaling[{layer}.linear1->{layer}.linear2]" in names  # ReLU feed-forward
        assert f"permutation[{layer}.linear1->{layer}.linear2]" in names
    tokens = torch.randint(0, 13, (4, 7), generator=torch.Generator().manual_seed(3))
    check_every_symmetry(model, tokens, found)


def test_low_rank_update_gl_r():
    torch.manual_seed(0)
    layer = ps.nn.LoRALinear(6, 5, rank=3).double()
    randomize_(layer, torch.Generator().manual_seed(0))
    (s,) = ps.symmetries(layer)
    assert (s.name, s.group, s.dim) == ("low_rank_GL[lora]", "GL(3)", 9)
    assert not layer.weight.requires_grad  # the base weight is frozen, as in LoRA
    x = torch.randn(4, 6, dtype=torch.float64)
    check_every_symmetry(layer, x, [s])
    model = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), ps.nn.LoRALinear(6, 5, rank=2))
    found = [t.name for t in ps.symmetries(model)]
    assert found == [
        "low_rank_GL[2]"
    ]  # the LoRA layer ends the chain: the tanh layer before it has none


@given(
    st.integers(1, 4),
    st.integers(1, 6),
    st.sampled_from(["gaussian", "inverse_quadratic", "multiquadric"]),
)
def test_rbf_network_permutations(n, k, basis):
    network = ps.nn.RBFNetwork(n, k, out_features=2, basis=basis, dtype=torch.float64)
    with torch.no_grad():
        network.widths.uniform_(0.5, 2.0)
    (s,) = ps.symmetries(network)
    assert (s.name, s.group, s.dim) == ("rbf_permutation[rbf]", f"S_{k}", 0)
    x = torch.randn(7, n, dtype=torch.float64)
    theta = ps.params_of(network)
    permutation = torch.randperm(k, generator=torch.Generator().manual_seed(k))
    moved = s.act(theta, permutation)
    assert relative_error(ps.functional_call(network, moved, x), network(x)) <= 1e-13
    assert torch.equal(moved["centers"], theta["centers"][permutation])


def test_custom_block_hook_and_registration():
    class Scaled(nn.Module):
        """y = W2 (c * W1 x): a block with a learned scalar between two weights."""

        def __init__(self):
            super().__init__()
            self.first = nn.Linear(3, 4, bias=False)
            self.second = nn.Linear(4, 2, bias=False)

        def forward(self, x):
            return self.second(self.first(x))

        def paramsym_symmetries(self, prefix):
            return [ps.HiddenGL(4, [f"{prefix}first.weight"], [f"{prefix}second.weight"])]

    model = nn.Sequential(Scaled().double())
    (s,) = ps.symmetries(model)
    assert s.name == "GL[0.first->0.second]"
    check_every_symmetry(model, torch.randn(5, 3, dtype=torch.float64), [s])

    class Twice(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = nn.Linear(2, 2)

        def forward(self, x):
            return self.inner(x) * 2

    ps.register_block(Twice, lambda module, prefix, context: [])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert ps.symmetries(Twice()) == []
