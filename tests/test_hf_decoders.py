"""Symmetries of Hugging Face decoders (and encoders) as users hand them over (issue 28).

Models from small configs with their default settings (``use_cache=True``, default attention
kernel; :mod:`hf_models`), float64, called with a dict. Every exact symmetry is checked by an
oracle independent of detection: three non-identity elements act on the weights and the
output may change by rounding only. The groups that are not symmetries are planted by hand
and must fail the same check.
"""

from __future__ import annotations

import re
import warnings

import pytest
import torch

import paramsym as ps
from paramsym.core.calls import CACHE_NOTE
from paramsym.core.precision import KeepFloat64
from paramsym.symmetry import (
    HeadPermutation,
    QueryKeyGL,
    RotaryQueryKey,
    StreamTranslation,
    Symmetry,
    ValueOutputGL,
)
from paramsym.symmetry.base import Slot
from paramsym.teleportation import TeleportDriftWarning

F64 = torch.float64
transformers = pytest.importorskip("transformers")

from hf_models import KINDS, build, example_input, first_output, state_of  # noqa: E402

EXPECTED = {  # exact symmetries found: (class, Lie-algebra dimension) -> how many
    "llama": {("HeadPermutation", 0): 3, ("NeuronPermutation", 0): 3, ("PositiveScaling", 32): 2,
              ("PositiveScaling", 48): 1, ("RotaryQueryKey", 8): 2, ("SignFlip", 0): 3,
              ("ValueOutputGL", 64): 2},
    "gemma": {("HeadPermutation", 0): 3, ("NeuronPermutation", 0): 3, ("PositiveScaling", 48): 1,
              ("RotaryQueryKey", 8): 2, ("SignFlip", 0): 3, ("ValueOutputGL", 64): 2,
              ("OffsetNormScaling", 32): 2},  # (1 + γ) norms against their readers
    "phi": {("HeadPermutation", 0): 1, ("NeuronPermutation", 0): 9, ("PositiveScaling", 32): 1,
            ("QueryKeyGL", 16): 4, ("RotaryQueryKey", 4): 4, ("SignFlip", 0): 8,
            ("ValueOutputGL", 64): 4},
    "gpt2": {("HeadPermutation", 0): 1, ("NeuronPermutation", 0): 9, ("PositiveScaling", 32): 2,
             ("QueryKeyGL", 64): 4, ("SignFlip", 0): 8, ("ValueOutputGL", 64): 4},
    "gpt2-lm": {("HeadPermutation", 0): 1, ("NeuronPermutation", 0): 10,
                ("PositiveScaling", 32): 2, ("QueryKeyGL", 64): 4, ("SignFlip", 0): 8,
                ("ValueOutputGL", 64): 4},
    "opt": {("HeadPermutation", 0): 1, ("NeuronPermutation", 0): 9, ("PositiveScaling", 32): 2,
            ("PositiveScaling", 48): 1, ("QueryKeyGL", 64): 4, ("SignFlip", 0): 8,
            ("ValueOutputGL", 64): 4},
    "bloom": {("NeuronPermutation", 0): 9, ("PositiveScaling", 32): 2, ("QueryKeyGL", 64): 4,
              ("SignFlip", 0): 8, ("ValueOutputGL", 64): 4},
    "t5": {("HeadPermutation", 0): 1, ("NeuronPermutation", 0): 9, ("PositiveScaling", 32): 2,
           ("PositiveScaling", 48): 1, ("QueryKeyGL", 64): 4, ("SignFlip", 0): 8,
           ("ValueOutputGL", 64): 4},
    "swin": {("HeadPermutation", 0): 1, ("NeuronPermutation", 0): 9, ("PositiveScaling", 16): 1,
             ("QueryKeyGL", 16): 4, ("SignFlip", 0): 8, ("ValueOutputGL", 16): 4},
}  # fmt: skip
EXPECTED["mistral"] = EXPECTED["qwen2"] = EXPECTED["llama"]
TRANSLATIONS = {  # streams only LayerNorms read: every write may add t·1 (notes 005 §4)
    "phi": [146], "gpt2": [290], "gpt2-lm": [226], "opt": [212], "bloom": [64, 163],
    "swin": [13],  # the patch convolution (3 · 2 · 2 + 1), read only by the embeddings' norm
}  # fmt: skip
for _kind, _dims in TRANSLATIONS.items():  # GPT-2: wte 64 + wpe 64 + (32 + 1) + (128 + 1)
    EXPECTED[_kind].update({("StreamTranslation", d): 1 for d in _dims})
ABSORBED = {  # translations the next map absorbs (notes 006 §3): value biases (d_v per head)
    # and LayerNorm shifts into the readers' biases (BiasAbsorption), the norm readers' rows
    # (NormReaderTranslation: the outputs of every map reading a LayerNorm), key biases (d_k, or
    # the unrotated half under Phi's partial RoPE), token + position tables (ParameterTranslation)
    "phi": {("BiasAbsorption", 8): 4, ("BiasAbsorption", 32): 1,
            ("NormReaderTranslation", 144): 1, ("ParameterTranslation", 4): 4,
            ("ParameterTranslation", 32): 1},  # Phi's parallel block: b_dense + t, b_fc2 − t
    "gpt2": {("BiasAbsorption", 8): 4, ("BiasAbsorption", 32): 2,
             ("NormReaderTranslation", 96): 1, ("NormReaderTranslation", 128): 1,
             ("ParameterTranslation", 8): 4, ("ParameterTranslation", 32): 1},
    "opt": {("BiasAbsorption", 8): 4, ("BiasAbsorption", 32): 2,
            ("NormReaderTranslation", 48): 1, ("NormReaderTranslation", 96): 1,
            ("ParameterTranslation", 8): 4, ("ParameterTranslation", 32): 1},
    "swin": {("BiasAbsorption", 4): 4, ("BiasAbsorption", 16): 1,
             ("NormReaderTranslation", 64): 1, ("ParameterTranslation", 4): 4},
}  # fmt: skip
# tied embeddings (GPT-2's LM head) and BLOOM (no position table): no token + position sum
ABSORBED["gpt2-lm"] = ABSORBED["bloom"] = {
    k: v for k, v in ABSORBED["gpt2"].items() if k != ("ParameterTranslation", 32)
}
for _kind, _absorbed in ABSORBED.items():
    EXPECTED[_kind].update(_absorbed)
# BLOOM: the embedding norm's (γ, β), the table following; its β also writes into the stream (163)
EXPECTED["bloom"][("EmbeddingNormAffine", 64)] = 1
# T5 and Swin: one constant per head (4) added to the relative-position table; Swin also: its
# first norm read through the windows' (no-op) pad and views (rescaling 16, reader rows 48 = q,
# k, v, β 16), and the stream after the embeddings' norm that only norms read (its β 1, o_proj
# 16 + 1, fc2 64 + 1: 83)
EXPECTED["t5"][("ParameterTranslation", 4)] = 1
EXPECTED["swin"].update({("PositiveScaling", 16): 2, ("NormReaderTranslation", 48): 1,
                         ("BiasAbsorption", 16): 2, ("ParameterTranslation", 4): 5,
                         ("StreamTranslation", 83): 1})  # fmt: skip
TAKES_CACHE = set(KINDS) - {"swin"}  # T5EncoderModel takes use_cache through its config too


def _change(model: torch.nn.Module, symmetry: Symmetry, x: dict, draws: int = 3) -> float:
    """Largest relative output change over ``draws`` non-identity elements (the oracle), with
    the model's casts to float32 kept in float64 (BLOOM's softmax runs in float32 and moves by
    1e-8 under a key-bias shift that is exact in exact arithmetic)."""
    state = state_of(model)
    with KeepFloat64():
        reference = first_output(model, state, x)
    worst = 0.0
    for seed in range(draws):
        generator = torch.Generator().manual_seed(seed)
        g = symmetry.sample(scale=0.5, generator=generator, dtype=torch.float64)
        if symmetry.discrete:
            while torch.equal(g, symmetry.identity(dtype=g.dtype)):
                g = symmetry.sample(generator=generator, dtype=torch.float64)
        with KeepFloat64():
            moved = first_output(model, symmetry.act(state, g), x)
        worst = max(worst, float((moved - reference).norm() / reference.norm()))
    return worst


def _detect(kind: str) -> tuple[torch.nn.Module, dict, list[Symmetry]]:
    model, x = build(kind), example_input(kind)
    return model, x, ps.symmetries(model, example_input=x)


@pytest.mark.parametrize("kind", KINDS)
def test_groups_found_and_exact(kind: str) -> None:
    model, x, found = _detect(kind)
    counts: dict[tuple[str, int], int] = {}
    for s in found:
        if s.exact:
            key = (type(s).__name__, s.dim)
            counts[key] = counts.get(key, 0) + 1
    assert counts == EXPECTED[kind]
    assert (CACHE_NOTE in found.notes) == (kind in TAKES_CACHE)
    exact = [s for s in found if s.exact]
    changes = {s.name: _change(model, s, x) for s in exact}
    assert max(changes.values()) < 1e-10, changes


def _llama_qk(found: list[Symmetry]) -> RotaryQueryKey:
    return next(s for s in found if isinstance(s, RotaryQueryKey))


def test_rotary_pairing_is_read_from_rotate_half() -> None:
    model, x = build("llama"), example_input("llama")
    qk = _llama_qk(ps.symmetries(model, example_input=x))
    assert qk.pairs == tuple((j, j + 4) for j in range(4))  # head_dim 8: j with j + d/2
    names = {s.name for s in qk.slots}
    assert names == {"layers.0.self_attn.q_proj.weight", "layers.0.self_attn.k_proj.weight"}
    # the planted wrong pairing (adjacent coordinates) and a general GL break the model
    adjacent = RotaryQueryKey(8, [(0, 1), (2, 3), (4, 5), (6, 7)], qk.slots[:2], qk.slots[2:])
    adjacent.slots = qk.slots
    assert _change(model, adjacent, x) > 1e-3
    general = QueryKeyGL(8, [s for s in qk.slots if s.power > 0],
                         [s for s in qk.slots if s.power < 0])  # fmt: skip
    assert _change(model, general, x) > 1e-3


def test_grouped_query_attention_shares_one_map_per_key_head() -> None:
    model, x = build("llama"), example_input("llama")
    found = ps.symmetries(model, example_input=x)
    qk = _llama_qk(found)
    queries = [s for s in qk.slots if s.power > 0]
    assert [(s.offset, qk.width) for s in queries] == [(0, 8), (8, 8)]  # query heads 0 and 1
    # one map per query head (query head 0 only, its key head unchanged for head 1) breaks it
    alone = RotaryQueryKey(8, qk.pairs, queries[:1], [s for s in qk.slots if s.power < 0])
    assert _change(model, alone, x) > 1e-3
    heads = [s for s in found if isinstance(s, HeadPermutation)]
    assert sorted(s.name for s in heads) == [
        "head_permutation[layers.0.self_attn.kv_head0]",
        "head_permutation[layers.0.self_attn.kv_head1]",
        "head_permutation[layers.0.self_attn]",
    ]
    groups = next(s for s in heads if s.name.endswith("self_attn]"))
    assert groups.width == 2  # whole key/value groups with their two query heads each
    # a query head moved to the other group breaks the model
    q_rows = Slot("layers.0.self_attn.q_proj.weight", 0, 1.0, 8, 8)
    o_cols = Slot("layers.0.self_attn.o_proj.weight", 1, 1.0, 8, 8)
    across = HeadPermutation(2, [q_rows, o_cols], (), site="across")  # query heads 1 and 2
    assert _change(model, across, x, draws=1) > 1e-3


@pytest.mark.parametrize(
    ("kind", "table"),
    [
        ("t5", "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"),
        ("swin", "relative_position_bias_table"),
    ],
)
def test_head_permutations_move_position_bias_tables(kind: str, table: str) -> None:
    model, x = build(kind), example_input(kind)
    found = ps.symmetries(model, example_input=x)
    (heads,) = [s for s in found if isinstance(s, HeadPermutation)]
    assert any(table in s.name for s in heads.slots)
    assert _change(model, heads, x) < 1e-10
    planted = HeadPermutation(heads.width, [s for s in heads.slots if table not in s.name], ())
    assert _change(model, planted, x) > 1e-3


def test_bloom_alibi_slopes_forbid_head_permutations() -> None:
    _, _, found = _detect("bloom")
    assert not any(isinstance(s, HeadPermutation) for s in found)


def test_bloom_heads_are_read_from_its_interleaved_packed_projection() -> None:
    """BLOOM's ``query_key_value`` holds each head's q, k and v side by side (rows h·3D + c·D
    for chunk c, viewed as (H, 3, D)) and runs attention with the heads merged into the batch
    (``baddbmm`` with the ALiBi bias, ``bmm``): per-head GL on the strided rows."""
    model, x = build("bloom"), example_input("bloom")
    found = ps.symmetries(model, example_input=x)
    qkv = "h.0.self_attention.query_key_value.weight"
    d = 8
    for kind, chunk in ((QueryKeyGL, 0), (ValueOutputGL, 2)):
        maps = sorted((s for s in found if type(s) is kind), key=lambda s: s.name)
        rows = [[t.offset for t in s.slots if t.name == qkv and t.power > 0] for s in maps]
        assert rows == [[(3 * h + chunk) * d] for h in range(4)], kind.__name__
    # the chunks-first layout (q of head 1 at rows D..2D, its key at H·D + D) breaks the model
    bias = qkv.replace("weight", "bias")
    queries = [Slot(qkv, 0, 1.0, d), Slot(bias, 0, 1.0, d)]
    chunks_first = QueryKeyGL(d, queries, [Slot(qkv, 0, -1.0, 5 * d), Slot(bias, 0, -1.0, 5 * d)])
    assert _change(model, chunks_first, x) > 1e-3


def test_gpt_neox_heads_sliced_out_of_a_packed_projection() -> None:
    """GPT-NeoX (Pythia) views its packed ``query_key_value`` as (…, H, 3D) and chunks each
    head's run into q, k and v: a slice of head-split features, read per head. Every group of
    attention is found (partial rotary: 4 of 8 coordinates rotated) and each is exact."""
    config = transformers.GPTNeoXConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=4,
        vocab_size=64,
        rotary_pct=0.5,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = transformers.GPTNeoXModel(config).double().eval()
        with torch.no_grad():
            for p in model.parameters():
                p.add_(0.1 * torch.randn_like(p))
    x = {"input_ids": torch.randint(0, 64, (2, 8), generator=torch.Generator().manual_seed(1))}
    found = ps.symmetries(model, example_input=x)
    kinds = [(type(s).__name__, s.dim) for s in found if s.exact and s.dim]
    # the absorbed translations: value biases (8 per head) and each norm's β (32) into biases,
    # the maps reading the two norms (96 = q, k, v rows; 64 = the MLP's), the unrotated half of
    # each key bias (4), and the attention's and the MLP's output biases, added into the stream
    # in one sum (the parallel residual: 32)
    assert sorted(set(kinds)) == [("BiasAbsorption", 8), ("BiasAbsorption", 32),
                                  ("NormReaderTranslation", 64), ("NormReaderTranslation", 96),
                                  ("ParameterTranslation", 4), ("ParameterTranslation", 32),
                                  ("PositiveScaling", 32),
                                  ("QueryKeyGL", 16), ("RotaryQueryKey", 4),
                                  ("StreamTranslation", 162), ("ValueOutputGL", 64)]  # fmt: skip
    assert sum(isinstance(s, HeadPermutation) for s in found) == 1
    for s in [s for s in found if s.exact]:
        assert _change(model, s, x, draws=2) < 1e-10, s.name


def test_float32_and_batch_encoding() -> None:
    model, x = build("llama", torch.float32), example_input("llama")
    encoding = transformers.BatchEncoding({**x, "attention_mask": torch.ones_like(x["input_ids"])})
    found = ps.symmetries(model, example_input=encoding)
    assert sum(isinstance(s, RotaryQueryKey) for s in found) == 2
    state = state_of(model)
    reference = first_output(model, state, encoding)
    for s in [s for s in found if s.exact]:
        g = s.sample(scale=0.5, generator=torch.Generator().manual_seed(0), dtype=torch.float32)
        moved = first_output(model, s.act(state, g), encoding)
        assert float((moved - reference).norm() / reference.norm()) < 1e-5, s.name


def test_bad_input_and_training_mode() -> None:
    model = build("llama")
    with pytest.raises(ps.InvalidArgumentError, match="rejects example_input"):
        ps.symmetries(model, example_input={"input_idz": torch.zeros(2, 8, dtype=torch.long)})
    gpt2 = build("gpt2").train()
    with pytest.warns(ps.TrainingModeWarning, match="training mode with dropout"):
        found = ps.symmetries(gpt2, example_input=example_input("gpt2"))
    assert found  # found on the evaluation-mode function, not an empty list


def test_analyses_take_the_same_model_and_input() -> None:
    model, x = build("llama"), example_input("llama")
    found = ps.symmetries(model, example_input=x)
    continuous = [s for s in found if s.exact and not s.discrete]
    target = torch.randn(2, 8, 32, generator=torch.Generator().manual_seed(3), dtype=torch.float64)

    def loss(output: object, y: torch.Tensor) -> torch.Tensor:
        return ((output.last_hidden_state - y) ** 2).mean()  # type: ignore[attr-defined]

    qk = _llama_qk(found)
    assert ps.orbit_dimension(model, qk, x=x) == qk.dim
    assert ps.conserved_quantities(model, qk).shape == (qk.dim,)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TeleportDriftWarning)
        result = ps.teleport(model, loss, (x, target), symmetries=continuous)
    assert result.grad_norm_after > result.grad_norm_before
    assert abs(result.loss_after - result.loss_before) < 1e-8 * result.loss_before


class HandWrittenAttention(torch.nn.Module):
    """Self-attention written by hand, as in many research codebases: no fused kernel."""

    def __init__(self, width: int = 8, heads: int = 2, d_k: int = 4, causal: bool = True) -> None:
        super().__init__()
        self.heads, self.d_k, self.causal = heads, d_k, causal
        self.q = torch.nn.Linear(width, heads * d_k)
        self.k = torch.nn.Linear(width, heads * d_k)
        self.v = torch.nn.Linear(width, heads * d_k)
        self.o = torch.nn.Linear(heads * d_k, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape

        def split(y: torch.Tensor) -> torch.Tensor:
            if self.heads == 1:
                return y
            return y.view(b, t, self.heads, self.d_k).transpose(1, 2)

        q, k, v = split(self.q(x)), split(self.k(x)), split(self.v(x))
        scores = q @ k.transpose(-2, -1) / self.d_k**0.5
        if self.causal:
            mask = torch.ones(t, t, dtype=torch.bool).triu(1)
            scores = scores.masked_fill(mask, float("-inf"))
        out = torch.softmax(scores, dim=-1) @ v
        if self.heads > 1:
            out = out.transpose(1, 2).reshape(b, t, -1)
        return self.o(out)


@pytest.mark.parametrize(
    ("heads", "d_k", "causal"), [(2, 4, True), (2, 4, False), (1, 8, True), (1, 1, False)]
)
def test_attention_written_by_hand_gets_the_groups_of_sdpa(heads, d_k, causal) -> None:
    torch.manual_seed(0)
    model = HandWrittenAttention(heads=heads, d_k=d_k, causal=causal).double()
    x = torch.randn(2, 5, 8, dtype=torch.float64)
    found = ps.symmetries(model, example_input=x)
    kinds = sorted(type(s).__name__ for s in found if s.exact and not s.discrete)
    # per head: the query-key and value-output maps, the key bias flat on its own
    # (ParameterTranslation) and the value bias absorbed into the output bias (BiasAbsorption)
    per_head = ["BiasAbsorption", "ParameterTranslation", "QueryKeyGL", "ValueOutputGL"]
    assert kinds == sorted(per_head * heads)
    assert all(s.dim == d_k * d_k for s in found if isinstance(s, QueryKeyGL))
    assert sum(isinstance(s, HeadPermutation) for s in found) == (heads > 1)
    reference = model(x)
    for s in found:
        g = s.sample(scale=0.5, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
        moved = ps.functional_call(model, s.act(ps.params_of(model), g), x)
        assert torch.allclose(moved, reference, atol=1e-12), s.name


@pytest.mark.parametrize("kind", ["gpt2", "llama", "phi"])
def test_eager_attention_kernel_gets_the_groups_of_sdpa(kind: str) -> None:
    model, x = build(kind), example_input(kind)
    model.set_attn_implementation("eager")
    counts: dict[tuple[str, int], int] = {}
    for s in ps.symmetries(model, example_input=x):
        if s.exact:
            counts[(type(s).__name__, s.dim)] = counts.get((type(s).__name__, s.dim), 0) + 1
    assert counts == EXPECTED[kind]


def test_stream_translation_tangent_matches_the_action_and_ties_are_left_out() -> None:
    model, x = build("gpt2-lm"), example_input("gpt2-lm")
    (translation,) = [s for s in ps.symmetries(model, example_input=x) if s.dim and s.affine
                      and s.name.startswith("mean_translation")]  # fmt: skip
    names = translation.parameter_names
    assert "transformer.wte.weight" not in names  # tied to the logits: translation would show
    assert {"transformer.wpe.weight", "transformer.h.0.mlp.c_proj.bias"} <= set(names)
    params = ps.params_of(model)
    xi = torch.randn(translation.dim, generator=torch.Generator().manual_seed(0), dtype=F64)
    closed = translation.tangent(params, xi)
    generic = Symmetry.tangent(translation, params, xi)  # forward-mode AD through act
    assert all(torch.allclose(closed[k], generic[k], atol=1e-14) for k in params)
    moved = translation.act(params, translation.exp(xi))
    assert all(torch.allclose(moved[k] - params[k], closed[k], atol=1e-14) for k in params)


class PackedAttention(torch.nn.Module):
    """Attention written the way timm's ``vision_transformer.Attention`` is: one packed qkv
    projection read as (3, heads, head_dim) by one reshape, permute and unbind."""

    def __init__(self, dim: int = 16, heads: int = 4) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.qkv = torch.nn.Linear(dim, dim * 3)
        self.proj = torch.nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, c = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v)
        return self.proj(out.transpose(1, 2).reshape(b, n, c))


def test_packed_qkv_split_by_one_view_gets_every_head_group() -> None:
    torch.manual_seed(0)
    model = PackedAttention().double()
    x = torch.randn(2, 5, 16, dtype=F64)
    found = ps.symmetries(model, example_input=x)
    families = ("attention_QK", "attention_VO", "key_bias", "value_bias")
    assert sorted(s.name for s in found if s.dim) == sorted(
        f"{family}[head{i}]" for family in families for i in range(4)
    )
    (heads,) = [s for s in found if isinstance(s, HeadPermutation)]
    assert heads.name == "head_permutation[attention]"
    reference = model(x)
    for s in found:
        g = s.sample(scale=0.5, generator=torch.Generator().manual_seed(1), dtype=F64)
        moved = ps.functional_call(model, s.act(ps.params_of(model), g), x)
        assert torch.allclose(moved, reference, atol=1e-12), s.name


@pytest.mark.parametrize("kind", ["llama", "phi", "gpt2", "swin"])
def test_orbits_and_conserved_quantities_of_every_continuous_group(kind: str) -> None:
    """At a generic point every exact continuous group's orbit has its full dimension; the
    linear ones give their conserved quantities, the translations by fixed directions their
    linear charges ⟨θ, w_k⟩, and the shifts by what they read are refused by name."""
    model, x, found = _detect(kind)
    continuous = [s for s in found if s.exact and s.dim and s.dim <= 64]
    assert continuous
    for s in continuous:
        assert ps.orbit_dimension(model, s, x=x) == s.dim, s.name
        if s.linear:
            assert ps.conserved_quantities(model, s).numel() > 0
    translations = [s for s in found if s.dim and s.translation]
    for s in translations:
        assert ps.conserved_quantities(model, s).numel() == s.dim, s.name
    assert any(isinstance(s, StreamTranslation) for s in translations) == (kind in TRANSLATIONS)
    refused = [s for s in found if s.dim and not s.linear and not s.translation]
    for s in refused:
        with pytest.raises(ps.InvalidArgumentError, match=re.escape(s.name)):
            ps.conserved_quantities(model, s)


def test_a_bias_table_shared_by_every_block_makes_one_head_permutation() -> None:
    """T5 computes its relative position bias once, in block 0, and every block adds it: the
    heads of all blocks permute together, with the table, or not at all."""
    from paramsym.nn.hf import hf_example_input, hf_tiny

    model, x = hf_tiny("t5", layers=2), hf_example_input("t5")
    found = ps.symmetries(model, example_input=x)
    (heads,) = [s for s in found if isinstance(s, HeadPermutation)]
    names = set(heads.parameter_names)
    assert {"encoder.block.0.layer.0.SelfAttention.q.weight",
            "encoder.block.1.layer.0.SelfAttention.q.weight"} <= names  # fmt: skip
    assert _change(model, heads, x) < 1e-10
    block_0 = [s for s in heads.slots if "block.1" not in s.name]
    assert _change(model, HeadPermutation(heads.width, block_0, ()), x) > 1e-3
