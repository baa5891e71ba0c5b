"""The completeness audit on encoders and vision transformers: BERT, ALBERT, ELECTRA, DistilBERT,
the T5 encoder, Swin and ViT, direct and inside a user's module, name every flat direction.

Each model is built small (width 8, two heads, one block, a vocabulary of at most 64 tokens,
as many positions as the example has, so every position is reached) in float64 and audited at
one point. What the catalogue leaves unnamed must be unreached, on the tensors the test names:
T5's relative-position buckets no pair of the 6 positions uses; inside a user's module that
returns the hidden states only, the pooler the forward never calls and the token-type rows it
never looks up (the wrapper passes no ``token_type_ids``).

Oracles for the families the audit found here: each one's action keeps every output of the
model to 1e-12 under several random group elements (float32 casts kept in float64), goes back
with the inverse element, and has a closed-form tangent equal to the generic forward-mode one;
removed from the catalogue, the audit reports exactly the dimensions only it names, carried by
its own tensors.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn

import paramsym as ps
from paramsym.core.params import functional_call, params_of
from paramsym.core.precision import KeepFloat64
from paramsym.nn.hf import hf_example_input, hf_tiny
from paramsym.symmetry.absorption import BiasAbsorption
from paramsym.symmetry.base import Symmetry
from paramsym.tangent_kernel.completeness import every_output
from paramsym.tangent_kernel.probes import index_ranges

transformers = pytest.importorskip("transformers")

F64 = torch.float64
SEQUENCE = 6
VOCAB = 24
HIDDEN = {"hidden_size": 8, "num_attention_heads": 2, "intermediate_size": 12,
          "vocab_size": VOCAB, "max_position_embeddings": SEQUENCE,
          "num_hidden_layers": 1}  # fmt: skip


DISTIL = {"dim": 8, "n_heads": 2, "hidden_dim": 12, "n_layers": 1, "vocab_size": VOCAB,
          "max_position_embeddings": SEQUENCE}  # fmt: skip


def _perturbed(model: nn.Module) -> nn.Module:
    """Off the initialisation (norm weights at 1 and biases at 0 would hide families)."""
    generator = torch.Generator().manual_seed(0)
    model = model.to(F64).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn(p.shape, generator=generator, dtype=F64))
    return model


def _encoder(config: str, model: str, types: bool, **options: object) -> tuple[nn.Module, dict]:
    torch.manual_seed(0)
    built = getattr(transformers, model)(getattr(transformers, config)(**options))
    generator = torch.Generator().manual_seed(1)
    x = {"input_ids": torch.randint(0, VOCAB, (2, SEQUENCE), generator=generator)}
    if types:  # as a tokenizer gives them for single sentences; the audit draws both types
        x["token_type_ids"] = torch.zeros(2, SEQUENCE, dtype=torch.long)
    return _perturbed(built), x


def _vit() -> tuple[nn.Module, dict]:
    torch.manual_seed(0)
    config = transformers.ViTConfig(hidden_size=8, num_attention_heads=2, intermediate_size=12,
                                    image_size=8, patch_size=4, num_channels=3,
                                    num_hidden_layers=1)  # fmt: skip
    pixels = torch.randn(2, 3, 8, 8, generator=torch.Generator().manual_seed(1), dtype=F64)
    return _perturbed(transformers.ViTModel(config)), {"pixel_values": pixels}


BUILDERS = {
    "bert": lambda: _encoder("BertConfig", "BertModel", True, type_vocab_size=2, **HIDDEN),
    "albert": lambda: _encoder("AlbertConfig", "AlbertModel", True, embedding_size=6, **HIDDEN),
    "electra": lambda: _encoder("ElectraConfig", "ElectraModel", True, embedding_size=6, **HIDDEN),
    "distilbert": lambda: _encoder("DistilBertConfig", "DistilBertModel", False, **DISTIL),
    "t5": lambda: (hf_tiny("t5", width=8, heads=2), hf_example_input("t5", sequence=SEQUENCE)),
    "swin": lambda: (hf_tiny("swin", width=8, heads=2), hf_example_input("swin")),
    "vit": _vit,
}
ROWS = {"vit": 2000}
"""Rows per half of the data where the default (P) leaves the half's rank short of the whole's:
a ViT on 8×8 images has 48 outputs per image, few of them independent."""

T5_BUCKETS = "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"
UNREACHED = {"t5": {T5_BUCKETS}}
"""Directly: the 32 buckets × 2 heads of T5's table that no pair of 6 positions uses (21 pairs
of relative positions −5..5 hit 11 buckets per head; 42 entries unreached)."""
WRAPPED_UNREACHED = {
    "bert": {"pooler.dense.weight", "pooler.dense.bias", "embeddings.token_type_embeddings.weight"},
    "albert": {"pooler.weight", "pooler.bias", "embeddings.token_type_embeddings.weight"},
    "electra": {"embeddings.token_type_embeddings.weight"},
    "t5": {T5_BUCKETS},
    "vit": {"pooler.dense.weight", "pooler.dense.bias"},
}
"""Inside a module returning the hidden states: the pooler no output reads, the token-type row
that no ``token_type_ids`` selects (the wrapper passes none, so the model uses type 0)."""


class Backbone(nn.Module):
    """A user's module: the Hugging Face model inside, one tensor in, the hidden states out."""

    def __init__(self, backbone: nn.Module, key: str) -> None:
        super().__init__()
        self.backbone, self.key = backbone, key

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.backbone(**{self.key: x}).last_hidden_state


class _Lazy(dict[str, Any]):
    """A model's entry made on first use (each test worker builds and audits only the models
    of the tests it runs)."""

    def __init__(self, make: Callable[[str], Any]) -> None:
        super().__init__()
        self.make = make

    def __missing__(self, name: str) -> Any:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self[name] = self.make(name)
        return self[name]


def _build(name: str) -> tuple[nn.Module, dict, list[Symmetry]]:
    model, x = BUILDERS[name]()
    return model, x, ps.symmetries(model, example_input=x)


@pytest.fixture(scope="module")
def built() -> _Lazy:
    return _Lazy(_build)


@pytest.fixture(scope="module")
def audits(built: _Lazy) -> _Lazy:
    def audit(name: str) -> ps.AuditReport:
        model, x, catalogue = built[name]
        return ps.audit(model, x, catalogue=catalogue, points=1, rows=ROWS.get(name))

    return _Lazy(audit)


@pytest.mark.parametrize("name", list(BUILDERS))
def test_the_catalogue_names_every_flat_direction_that_inputs_reach(
    name: str, audits: _Lazy
) -> None:
    report = audits[name]
    assert report.flat > 0
    assert report.not_flat == []
    assert report.determined, report.ranks
    assert report.missing - report.unreached == 0, report.carriers
    assert set(report.carriers) == UNREACHED.get(name, set())
    if name in UNREACHED:
        assert report.unreached == 42
        assert not report.complete
    else:
        assert report.complete
        assert report.named == report.flat


@pytest.mark.parametrize("name", list(BUILDERS))
def test_inside_a_users_module_only_what_the_forward_never_uses_is_missing(
    name: str, built: _Lazy
) -> None:
    model, x, _ = built[name]
    key = "pixel_values" if "pixel_values" in x else "input_ids"
    wrapped = Backbone(model, key).eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = ps.audit(wrapped, x[key], points=1, rows=ROWS.get(name))
    expected = {f"backbone.{t}" for t in WRAPPED_UNREACHED.get(name, set())}
    assert report.determined
    assert report.not_flat == []
    assert report.missing - report.unreached == 0, report.carriers
    # the unread token-type row overlaps the named token-type sum a little, which spreads a
    # fraction of a dimension onto the other tables (the missing directions are orthogonal to
    # the named ones)
    assert {k for k, v in report.carriers.items() if v >= 1.0} == expected
    assert expected <= set(report.unreached_parameters)
    assert report.complete == (not expected)


def test_token_types_are_drawn_over_their_table() -> None:
    model, x = BUILDERS["bert"]()
    assert index_ranges(model, x) == {"input_ids": VOCAB, "token_type_ids": 2}
    assert index_ranges(model, {"input_ids": x["input_ids"]}) == {"input_ids": VOCAB}


def test_bert_counts_its_eps_rescalings_as_approximate_symmetries(audits: _Lazy) -> None:
    """BERT's LayerNorms have eps = 1e-12, so the rescalings of their inputs change the function
    by less than the audit resolves: counted, and said so."""
    report = audits["bert"]
    assert len(report.approximate) == 3
    assert all(n.startswith(("rescaling[", "norm_scaling[")) for n in report.approximate)
    assert not set(report.approximate) & set(report.left_out)


# -- the families ------------------------------------------------------------------------------

FAMILIES = [
    ("bert", "norm_shift[encoder.layer.0.attention.output.LayerNorm]"),  # β into a residual
    ("bert", "norm_reader[encoder.layer.0.output.LayerNorm]"),  # the pooler reads token 0
    ("bert", "mean_translation[encoder.layer.0.attention.output.dense]"),  # Post-LN stream
    ("distilbert", "norm_shift[embeddings.LayerNorm]"),
    ("electra", "bias_shift[embeddings_project]"),
    ("electra", "span_reader[embeddings_project]"),
    ("electra", "stream_shear[embeddings_project]"),
    ("electra", "norm_rotation[embeddings.word_embeddings,…,embeddings.position_embeddings]"),
    ("albert", "span_reader[encoder.embedding_hidden_mapping_in]"),
    ("albert", "norm_rotation[embeddings.word_embeddings,…,embeddings.position_embeddings]"),
    ("vit", "parameter_sum[embeddings]"),
    ("vit", "parameter_sum[embeddings.patch_embeddings.projection,embeddings]"),
    ("t5", "score_bias[encoder.block.0.layer.0.SelfAttention.relative_attention_bias]"),
    ("swin", "score_bias[encoder.layers.0.blocks.0.attention.relative_position_bias]"),
    ("swin", "mean_translation[embeddings.norm,…,encoder.layers.0.blocks.0.mlp.fc2]"),
]


def _outputs(model: nn.Module, params: dict, x: dict) -> torch.Tensor:
    with KeepFloat64(), torch.no_grad():
        return every_output(functional_call(model, params, x))


@pytest.mark.parametrize(("name", "family"), FAMILIES)
def test_each_new_family_keeps_every_output(name: str, family: str, built: _Lazy) -> None:
    model, x, catalogue = built[name]
    s = next(s for s in catalogue if s.name == family)
    assert s.exact
    assert s.dim > 0
    params = params_of(model)
    before = _outputs(model, params, x)
    generator = torch.Generator().manual_seed(0)
    for _ in range(3):
        g = s.sample(scale=0.5, generator=generator, dtype=F64)
        after = _outputs(model, s.act(params, g), x)
        assert (after - before).abs().max() <= 1e-12 * before.abs().max(), s.name
        back = s.act(s.act(params, g), s.inverse(g))
        assert all(torch.allclose(back[k], params[k], atol=1e-12) for k in params), s.name
    xi = torch.randn(s.dim, generator=generator, dtype=F64)
    closed, generic = s.tangent(params, xi), Symmetry.tangent(s, params, xi)
    assert all(torch.allclose(closed[k], generic[k], atol=1e-12) for k in params), s.name
    moved = {k for k in params if closed[k].abs().max() > 0}
    assert moved
    assert moved <= set(s.parameter_names)


REMOVED = [
    # (model, family prefix, flat dimensions only it names)
    ("bert", "norm_shift", 16),  # β of the embedding and attention norms, d each
    ("bert", "norm_reader[encoder.layer.0.output.LayerNorm]", 8),
    # the attention output's rows (8) and bias (1): the Post-LN stream its norm alone reads
    ("bert", "mean_translation[encoder.layer.0.attention.output.dense]", 9),
    # 8, but δ ∝ 1 is a shear along (the projection's norm reader)ᵀ with its readers' span
    # translation and the stream's mean translation
    ("electra", "bias_shift", 7),
    # query, key, value: 8 outputs × (8 − 5) each, 3 of them also shears of the projection
    ("electra", "span_reader", 69),
    # 8 shears: w ⊥ the projection's range (2) are span translations, w along its norm
    # reader (1) is that reader's
    ("electra", "stream_shear", 5),
    ("electra", "norm_rotation", 10),  # O(5): the 6-wide embeddings' norm
    # (cls, pos[0]) and (bias, pos[1:]), 8 each; c ∝ 1 is the stream's mean translation in both
    ("vit", "parameter_sum", 14),
    ("t5", "score_bias", 2),
    ("swin", "score_bias", 2),
    # the embedding norm's β (1), o_proj (4 + 1) and fc2 (16 + 1) write the last stream
    ("swin", "mean_translation[embeddings.norm", 23),
]


@pytest.mark.parametrize(("name", "family", "dimension"), REMOVED)
def test_a_removed_family_is_reported_missing_on_its_tensors(
    name: str, family: str, dimension: int, built: _Lazy, audits: _Lazy
) -> None:
    model, x, catalogue = built[name]
    removed = [s for s in catalogue if s.name.startswith(family)]
    kept = [s for s in catalogue if s not in removed]
    report = ps.audit(model, x, catalogue=kept, points=1, rows=ROWS.get(name))
    assert report.missing - audits[name].missing == dimension
    own = {n for s in removed for n in (*s.parameter_names, *s.reads)}
    new = {k: v - audits[name].carriers.get(k, 0.0) for k, v in report.carriers.items()}
    assert sum(v for k, v in new.items() if k in own) >= 0.75 * dimension
    assert max(new, key=new.__getitem__) in own
    if family == "norm_shift":  # Post-LN: each norm's β also taken back by a residual's bias
        assert all(isinstance(s, BiasAbsorption) and s.partners for s in removed)


@pytest.mark.parametrize("kind", ["albert", "electra"])
def test_heads_averaging_values_of_a_narrow_stream_give_a_span_reader(kind: str) -> None:
    """Embeddings of 4 projected to 8: the first block's stream lies in a 3-dimensional affine
    subspace, so does each head's value (4 wide) and each head's attention average (softmax
    rows sum to one); the output projection reads the merged heads, which miss one direction
    per head: ``span_reader`` through the attention (catalogue-completeness found these 6
    directions missing on both models)."""
    prefix = "Albert" if kind == "albert" else "Electra"
    config, name = f"{prefix}Config", f"{prefix}Model"
    # eps = 1e-5: with the default 1e-12 the norms' rescalings are flat to about 1e-8, at the
    # rank's gap (the experiment reports those ranks as not determined)
    model, x = _encoder(config, name, True, embedding_size=4, layer_norm_eps=1e-5, **HIDDEN)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        catalogue = ps.symmetries(model, example_input=x)
    (s,) = [s for s in catalogue if s.name.startswith("span_reader") and "attention" in s.name
            and s.name.endswith(".attention]")]  # fmt: skip
    assert s.exact
    assert s.dim == 8 * 2  # the projection's 8 outputs × one missing direction per head
    params = params_of(model)
    before = _outputs(model, params, x)
    generator = torch.Generator().manual_seed(0)
    for _ in range(3):
        g = s.sample(scale=0.5, generator=generator, dtype=F64)
        after = _outputs(model, s.act(params, g), x)
        assert (after - before).abs().max() <= 1e-12 * before.abs().max(), s.name
    report = ps.audit(model, x, catalogue=catalogue, points=1)
    assert report.not_flat == []
    assert report.determined
    assert report.missing == 0, report.carriers
