"""Attention variants of Hugging Face decoders (issue 44): every grouped-query ratio and fused
projections.

* **Grouped-query and multi-query attention.** ``heads`` query heads share ``kv_heads``
  key/value heads (G = heads / kv_heads query heads each; ``kv_heads = 1`` is multi-query
  attention, Gemma-2B, Falcon): one query–key map (the commutant of RoPE's rotations,
  :class:`~paramsym.symmetry.RotaryQueryKey`) and one value–output map per key/value head,
  acting on its G query heads alike; the key/value groups permuted whole, and each group's
  query heads among themselves.
* **Phi-3** reads q, k and v off one ``qkv_proj`` and gate and up off one ``gate_up_proj``,
  and rotates every coordinate through ``x[..., :d]`` and an empty ``x[..., d:]``.

Every group is checked by an oracle independent of detection (sampled elements act on the
float64 weights and ``last_hidden_state`` may change by rounding only; a group planted wrong
must change it), and the catalogue against the functional-dimension yardstick (notes 006 §1):
the flat directions P − rank J of ``last_hidden_state`` at a generic point are exactly the
span of the exact continuous symmetries' tangents.
"""

from __future__ import annotations

import warnings
from typing import Any

import pytest
import torch
from torch import nn
from torch.nn import functional
from torch.nn.attention import SDPBackend, sdpa_kernel

import paramsym as ps
from paramsym.curvature import tangent_matrix
from paramsym.errors import UnanalysedModuleWarning, UnsupportedModuleError
from paramsym.nn.hf import hf_example_input, hf_tiny
from paramsym.symmetry import (
    HeadPermutation,
    QueryKeyGL,
    RotaryQueryKey,
    Symmetry,
    ValueOutputGL,
)
from paramsym.symmetry.base import Slot
from paramsym.symmetry.discrete import NeuronPermutation

transformers = pytest.importorskip("transformers")

F64 = torch.float64
WIDTH = 16


def _state(model: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach() for k, v in model.named_parameters()}


def _output(model: nn.Module, state: dict[str, torch.Tensor], x: Any) -> torch.Tensor:
    """``last_hidden_state`` (batch, seq, width) at ``state``, cache off; a plain module's
    output tensor."""
    if isinstance(x, dict):
        out = torch.func.functional_call(model, state, (), {**x, "use_cache": False})
        return out.last_hidden_state
    return torch.func.functional_call(model, state, (x,))


def _change(model: nn.Module, symmetry: Symmetry, x: Any, draws: int = 2) -> float:
    """Largest relative change of the output over ``draws`` non-identity elements."""
    state = _state(model)
    with torch.no_grad():
        reference = _output(model, state, x)
    worst = 0.0
    for seed in range(draws):
        generator = torch.Generator().manual_seed(seed)
        g = symmetry.sample(scale=0.5, generator=generator, dtype=F64)
        if symmetry.discrete:
            while torch.equal(g, symmetry.identity(dtype=g.dtype)):
                g = symmetry.sample(generator=generator, dtype=F64)
        with torch.no_grad():
            moved = _output(model, symmetry.act(state, g), x)
        worst = max(worst, float((moved - reference).norm() / reference.norm()))
    return worst


def _attention(found: list[Symmetry]) -> list[Symmetry]:
    kinds = (RotaryQueryKey, QueryKeyGL, ValueOutputGL, HeadPermutation)
    return [s for s in found if isinstance(s, kinds)]


def _phi3(width: int = WIDTH, heads: int = 2, kv_heads: int = 2, vocab: int = 64) -> nn.Module:
    """``transformers.Phi3Model`` from a tiny config (feed-forward 3·width/2, one layer),
    weights moved off their initialisation by 0.1·randn, float64, eval mode."""
    config = transformers.Phi3Config(
        hidden_size=width,
        intermediate_size=3 * width // 2,
        num_hidden_layers=1,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        vocab_size=vocab,
        max_position_embeddings=64,
        pad_token_id=None,  # a padding row gets no gradient: flat to autograd, not a symmetry
        bos_token_id=0,
        eos_token_id=0,
    )
    return _perturbed(transformers.Phi3Model(config))


def _perturbed(model: nn.Module, seed: int = 0) -> nn.Module:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = model.to(F64).eval()
        with torch.no_grad():
            for p in model.parameters():
                p.add_(0.1 * torch.randn_like(p))
    return model


# -- grouped-query and multi-query attention -------------------------------------------------

RATIOS = [(2, 1), (4, 1), (4, 2)]
CASES = [(kind, h, kv) for kind in ("llama", "mistral", "qwen2", "gemma") for h, kv in RATIOS]
CASES += [("llama", 2, 2), ("llama", 4, 4)]


def _expected(heads: int, kv_heads: int) -> dict[tuple[str, int], int]:
    """The attention groups of one layer: per key/value head one rotary query–key map (d/2
    scaled rotations) and one GL(d) value–output map; head permutations of the key/value
    groups (when there are several) and of each group's query heads (when G > 1)."""
    d, group = WIDTH // heads, heads // kv_heads
    expected = {("RotaryQueryKey", d): kv_heads, ("ValueOutputGL", d * d): kv_heads}
    permutations = (kv_heads if group > 1 else 0) + (1 if kv_heads > 1 else 0)
    expected[("HeadPermutation", 0)] = permutations
    return expected


@pytest.mark.parametrize(("kind", "heads", "kv_heads"), CASES)
def test_every_grouped_query_ratio_gets_its_groups(kind: str, heads: int, kv_heads: int) -> None:
    model = hf_tiny(kind, width=WIDTH, heads=heads, kv_heads=kv_heads)
    x = hf_example_input(kind)
    found = _attention(ps.symmetries(model, example_input=x))
    counts: dict[tuple[str, int], int] = {}
    for s in found:
        assert s.exact, s.name
        counts[(type(s).__name__, s.dim)] = counts.get((type(s).__name__, s.dim), 0) + 1
    assert counts == _expected(heads, kv_heads)
    group, d = heads // kv_heads, WIDTH // heads
    for s in found:
        if isinstance(s, (RotaryQueryKey, ValueOutputGL)):  # one map for the G query heads
            queries = [t for t in s.slots if t.name.endswith(("q_proj.weight", "o_proj.weight"))]
            assert len(queries) == group, s.name
            starts = sorted(t.offset or 0 for t in queries)
            assert starts == [starts[0] + i * d for i in range(group)], s.name
    changes = {s.name: _change(model, s, x) for s in found}
    assert max(changes.values()) < 1e-7, changes  # HF's RMSNorm runs in float32


def _llama_mqa() -> tuple[nn.Module, dict[str, torch.Tensor], list[Symmetry]]:
    model = hf_tiny("llama", width=WIDTH, heads=2, kv_heads=1)
    x = hf_example_input("llama")
    return model, x, ps.symmetries(model, example_input=x)


def test_multi_query_maps_are_shared_by_every_query_head() -> None:
    """Multi-query attention (one key/value head): a query–key or value–output map of one
    query head alone, or a query head moved without its output columns, breaks the model."""
    model, x, found = _llama_mqa()
    qk = next(s for s in found if isinstance(s, RotaryQueryKey))
    vo = next(s for s in found if isinstance(s, ValueOutputGL))
    assert qk.name == "attention_QK_rotary[layers.0.self_attn.kv_head0]"
    queries = [s for s in qk.slots if s.power > 0]
    keys = [s for s in qk.slots if s.power < 0]
    assert [(s.name, s.offset) for s in queries] == [
        ("layers.0.self_attn.q_proj.weight", 0),
        ("layers.0.self_attn.q_proj.weight", 8),
    ]
    assert [s.name for s in keys] == ["layers.0.self_attn.k_proj.weight"]
    assert _change(model, qk, x) < 1e-7
    alone = RotaryQueryKey(8, qk.pairs, queries[:1], keys)
    assert _change(model, alone, x) > 1e-3
    values = [s for s in vo.slots if s.power > 0]
    columns = [s for s in vo.slots if s.power < 0]
    assert len(columns) == 2  # both query heads' columns of o_proj
    assert _change(model, ValueOutputGL(8, values, columns[:1]), x) > 1e-3
    (heads,) = [s for s in found if isinstance(s, HeadPermutation)]
    assert heads.width == 2
    assert {s.name for s in heads.slots} == {
        "layers.0.self_attn.q_proj.weight",
        "layers.0.self_attn.o_proj.weight",
    }
    q_rows = next(s for s in heads.slots if "q_proj" in s.name)
    assert _change(model, HeadPermutation(2, [q_rows], ()), x, draws=1) > 1e-3


class _MultiQuery(nn.Module):
    """Multi-query attention written three ways: ``sdpa`` with ``enable_gqa=True`` on one
    key/value head, ``matmul`` broadcasting that head over the query heads, and the key split
    by ``unsqueeze`` instead of a view. Input (batch, seq, width)."""

    def __init__(self, width: int = 8, heads: int = 2, how: str = "sdpa") -> None:
        super().__init__()
        self.heads, self.d, self.how = heads, width // heads, how
        self.q = nn.Linear(width, width)
        self.k = nn.Linear(width, self.d)
        self.v = nn.Linear(width, self.d)
        self.o = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q = self.q(x).view(b, t, self.heads, self.d).transpose(1, 2)
        if self.how == "unsqueeze":
            k, v = self.k(x).unsqueeze(2).transpose(1, 2), self.v(x).unsqueeze(2).transpose(1, 2)
        else:
            k = self.k(x).view(b, t, 1, self.d).transpose(1, 2)
            v = self.v(x).view(b, t, 1, self.d).transpose(1, 2)
        if self.how == "matmul":
            scores = (q @ k.transpose(-1, -2)) / self.d**0.5
            out = scores.softmax(-1) @ v
        else:
            out = functional.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        return self.o(out.transpose(1, 2).reshape(b, t, -1))


@pytest.mark.parametrize("how", ["sdpa", "matmul", "unsqueeze"])
def test_multi_query_written_by_hand(how: str) -> None:
    model = _perturbed(_MultiQuery(how=how))
    x = torch.randn(2, 5, 8, generator=torch.Generator().manual_seed(0), dtype=F64)
    found = _attention(ps.symmetries(model, example_input=x))
    assert sorted((type(s).__name__, s.dim) for s in found) == [
        ("HeadPermutation", 0),
        ("QueryKeyGL", 16),
        ("ValueOutputGL", 16),
    ]
    for s in found:
        assert _change(model, s, x) < 1e-10, s.name


# -- Phi-3: fused qkv_proj and gate_up_proj --------------------------------------------------

PHI3_EXPECTED = {  # exact symmetries of a one-layer Phi-3, 2 query heads of 8 coordinates
    2: {("HeadPermutation", 0): 1, ("NeuronPermutation", 0): 3, ("PositiveScaling", 16): 2,
        ("PositiveScaling", 24): 1, ("RotaryQueryKey", 8): 2, ("SignFlip", 0): 3,
        ("ValueOutputGL", 64): 2},
    1: {("HeadPermutation", 0): 1, ("NeuronPermutation", 0): 2, ("PositiveScaling", 16): 2,
        ("PositiveScaling", 24): 1, ("RotaryQueryKey", 8): 1, ("SignFlip", 0): 2,
        ("ValueOutputGL", 64): 1},
}  # fmt: skip


@pytest.mark.parametrize("kv_heads", [2, 1])
def test_phi3_fused_projections(kv_heads: int) -> None:
    model = _phi3(kv_heads=kv_heads)
    x = hf_example_input("llama")
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnanalysedModuleWarning)
        found = ps.symmetries(model, example_input=x)
    exact = [s for s in found if s.exact]
    counts: dict[tuple[str, int], int] = {}
    for s in exact:
        counts[(type(s).__name__, s.dim)] = counts.get((type(s).__name__, s.dim), 0) + 1
    assert counts == PHI3_EXPECTED[kv_heads]
    qkv, gate_up = "layers.0.self_attn.qkv_proj.weight", "layers.0.mlp.gate_up_proj.weight"
    qk = next(s for s in exact if isinstance(s, RotaryQueryKey))
    assert qk.pairs == tuple((j, j + 4) for j in range(4))  # every coordinate rotated
    rows = sorted((s.offset, s.power) for s in qk.slots)
    queries = [(0, 1.0), (8, 1.0)][: 3 - kv_heads]  # one key/value head: both query heads
    assert rows == sorted([*queries, (16, -1.0)])
    assert {s.name for s in qk.slots} == {qkv}
    mlp = next(s for s in exact if s.name.startswith("permutation[layers.0.mlp"))
    assert sorted((s.name, s.offset) for s in mlp.slots if s.name == gate_up) == [
        (gate_up, 0),  # the gate rows and the up rows move together
        (gate_up, 24),
    ]
    changes = {s.name: _change(model, s, x) for s in exact}
    assert max(changes.values()) < 1e-7, changes
    # a permutation of the gate rows alone (the up rows left) breaks the model
    gate_only = NeuronPermutation(24, [Slot(gate_up, 0, 1.0, 0, 1)], ())
    assert _change(model, gate_only, x, draws=1) > 1e-3


def test_a_failing_rule_is_reported_not_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    """A rule that fails on a layout it does not foresee is the library's warning (or its
    error with ``strict=True``) naming the module's parameters, never a raw exception."""
    from paramsym.symmetry.graph import walk

    def broken(walk_: Any, call: Any) -> Any:
        raise ValueError("range() arg 3 must not be zero")

    monkeypatch.setitem(walk.RULES, "slice", broken)
    model, x = _phi3(), hf_example_input("llama")
    with pytest.warns(UnanalysedModuleWarning, match="qkv_proj.*the symmetry rule of slice"):
        found = ps.symmetries(model, example_input=x)
    assert not any("self_attn" in s.name for s in _attention(found))
    with pytest.raises(UnsupportedModuleError, match=r"the symmetry rule of slice .* failed"):
        ps.symmetries(_phi3(), example_input=x, strict=True)


# -- the functional-dimension yardstick ------------------------------------------------------


def _flat_and_named(model: nn.Module, vocab: int) -> tuple[int, int, float]:
    """(P − rank J, rank of the exact continuous symmetries' tangents, the gap at the rank):
    J the Jacobian of ``last_hidden_state`` on sequences of 8 tokens that hold every token of
    the vocabulary, about 1.6 rows per parameter."""
    state = _state(model)
    size = sum(t.numel() for t in state.values())
    width = model.config.hidden_size
    sequences = -(-8 * size // (5 * 8 * width))
    generator = torch.Generator().manual_seed(3)
    ids = torch.randint(0, vocab, (sequences, 8), generator=generator)
    ids.view(-1)[:vocab] = torch.arange(vocab)

    def output(p: dict[str, torch.Tensor]) -> torch.Tensor:
        return _output(model, p, {"input_ids": ids}).reshape(-1)

    with sdpa_kernel(SDPBackend.MATH):  # the flash CPU kernel's backward has no vmap rule
        jacobian = torch.func.jacrev(output)(state)
    rows = torch.cat([jacobian[k].reshape(-1, state[k].numel()) for k in state], dim=1)
    values = torch.linalg.svdvals(rows)
    values = values / values[0]
    ratios = values[:-1] / values[1:].clamp_min(1e-300)
    ratios[values[:-1] < 1e-12] = 0.0  # the widest drop from a genuine singular value
    rank = int(torch.argmax(ratios)) + 1
    found = ps.symmetries(model, example_input={"input_ids": ids[:2]})
    tangents = [tangent_matrix(s, state) for s in found if s.dim > 0 and s.exact]
    named = int(torch.linalg.matrix_rank(torch.cat(tangents)))
    return size - rank, named, float(ratios[rank - 1])


@pytest.mark.parametrize("kind", ["llama", "phi3"])
def test_multi_query_catalogue_names_every_flat_direction(kind: str) -> None:
    """Width 8, 2 query heads and one key/value head, vocabulary 16: the flat directions are
    the norms' rescalings (2 × 8), the rotary query–key map (4), the value–output GL (16) and
    the MLP's rescalings (12), 48 in all."""
    options = {"hidden_size": 8, "intermediate_size": 12, "num_hidden_layers": 1,
               "num_attention_heads": 2, "num_key_value_heads": 1, "vocab_size": 16,
               "max_position_embeddings": 16}  # fmt: skip
    if kind == "llama":
        model = _perturbed(transformers.LlamaModel(transformers.LlamaConfig(**options)))
    else:
        model = _phi3(width=8, heads=2, kv_heads=1, vocab=16)
    flat, named, gap = _flat_and_named(model, vocab=16)
    assert gap > 1e3  # the rank is decided
    assert flat == named == 48


def test_falcon_multi_query_heads_split_off_one_packed_projection() -> None:
    """Falcon's multi-query layout views ``query_key_value`` as (…, H + 2, D) and splits the
    head axis into H query heads, one key and one value head: whole heads kept, and the
    groups of multi-query attention found on the packed rows."""
    config = transformers.FalconConfig(
        hidden_size=WIDTH,
        num_hidden_layers=1,
        num_attention_heads=2,
        vocab_size=64,
        multi_query=True,
        new_decoder_architecture=False,
        bos_token_id=0,
        eos_token_id=0,
    )
    model = _perturbed(transformers.FalconModel(config))
    x = hf_example_input("llama")
    found = _attention(ps.symmetries(model, example_input=x))
    assert sorted((type(s).__name__, s.dim) for s in found) == [
        ("HeadPermutation", 0),
        ("RotaryQueryKey", 8),
        ("ValueOutputGL", 64),
    ]
    packed = "h.0.self_attention.query_key_value.weight"
    qk = next(s for s in found if isinstance(s, RotaryQueryKey))
    assert sorted((s.offset, s.power) for s in qk.slots if s.name == packed) == [
        (0, 1.0),  # query heads 0 and 1, then the key head at rows 2·8
        (8, 1.0),
        (16, -1.0),
    ]
    changes = {s.name: _change(model, s, x) for s in found}
    assert max(changes.values()) < 1e-10, changes
