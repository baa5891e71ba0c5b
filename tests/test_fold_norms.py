"""``ps.fold_norms``: norm weights folded into their readers, and the residual-stream
orthogonal group it opens on RMSNorm decoders (notes 005 §4; issue 28, part 3).

Hugging Face models from small configs with default settings, float64. The orthogonal group
is checked by an oracle independent of detection (acting with random orthogonal matrices and
comparing logits), and shown absent before the fold.
"""

from __future__ import annotations

import pytest
import torch

import paramsym as ps
from paramsym.symmetry import HiddenOrthogonal

transformers = pytest.importorskip("transformers")

F64 = torch.float64


def _llama_lm(tied: bool) -> torch.nn.Module:
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=64, tie_word_embeddings=tied,
    )  # fmt: skip
    model = transformers.LlamaForCausalLM(config).to(F64).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    return model


def _ids() -> dict[str, torch.Tensor]:
    return {"input_ids": torch.randint(0, 64, (2, 8), generator=torch.Generator().manual_seed(1))}


def _logits(model: torch.nn.Module, params: dict[str, torch.Tensor] | None = None) -> torch.Tensor:
    with torch.no_grad():
        return ps.functional_call(model, params or ps.params_of(model), _ids()).logits


def test_folding_llama_opens_the_stream_rotations() -> None:
    model = _llama_lm(tied=False)
    before = {k: v.clone() for k, v in ps.params_of(model).items()}
    folded = ps.fold_norms(model, _ids())
    assert all(torch.equal(before[k], v) for k, v in ps.params_of(model).items())  # untouched
    report = folded.paramsym_fold
    assert sorted(report.folded) == [
        "model.layers.0.input_layernorm", "model.layers.0.post_attention_layernorm",
        "model.layers.1.input_layernorm", "model.layers.1.post_attention_layernorm",
        "model.norm",
    ]  # fmt: skip
    assert report.folded["model.norm"] == ["lm_head.weight"]
    # LlamaRMSNorm computes in float32; the folded norm in float64: they differ by ~1e-7
    assert 0 < report.output_change < 1e-6
    assert isinstance(folded.model.norm, ps.FoldedNorm)
    (stream,) = [s for s in ps.symmetries(folded, example_input=_ids())
                 if isinstance(s, HiddenOrthogonal)]  # fmt: skip
    assert stream.exact
    assert stream.dim == 32 * 31 // 2
    assert "model.embed_tokens.weight" in stream.parameter_names
    reference = _logits(folded)
    for seed in range(3):
        q = stream.sample(scale=1.0, generator=torch.Generator().manual_seed(seed), dtype=F64)
        moved = _logits(folded, stream.act(ps.params_of(folded), q))
        assert float((moved - reference).norm() / reference.norm()) < 1e-12
    # the same rotation of the model before the fold changes it (the norm weights are in
    # the way): the group is opened by the rewrite, not there all along
    q = stream.sample(scale=1.0, generator=torch.Generator().manual_seed(0), dtype=F64)
    moved = _logits(model, stream.act(ps.params_of(model), q))
    original = _logits(model)
    assert float((moved - original).norm() / original.norm()) > 1e-2


def test_tied_embeddings_keep_the_final_norm_and_have_no_stream_rotation() -> None:
    model = _llama_lm(tied=True)
    folded = ps.fold_norms(model, _ids())
    assert "model.norm" in folded.paramsym_fold.skipped
    assert not any(isinstance(s, HiddenOrthogonal) for s in
                   ps.symmetries(folded, example_input=_ids(), verify=False))  # fmt: skip


def test_layernorm_weight_and_bias_fold_exactly_into_gpt2() -> None:
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_embd=32, n_layer=1, n_head=4, vocab_size=64, n_positions=64)
    model = transformers.GPT2LMHeadModel(config).to(F64).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    folded = ps.fold_norms(model, _ids())
    report = folded.paramsym_fold
    assert report.folded == {
        "transformer.h.0.ln_1": ["transformer.h.0.attn.c_attn.weight"],
        "transformer.h.0.ln_2": ["transformer.h.0.mlp.c_fc.weight"],
    }
    assert "transformer.ln_f" in report.skipped  # read by the tied head: kept
    assert report.output_change < 1e-13
    assert torch.allclose(_logits(folded), _logits(model), atol=1e-12)


def _untied_layernorm_lm(kind: str) -> torch.nn.Module:
    """GPT-2 or OPT with its LM head untied from the embeddings (LayerNorm decoders)."""
    torch.manual_seed(0)
    if kind == "gpt2":
        config = transformers.GPT2Config(
            n_embd=32, n_layer=2, n_head=4, vocab_size=64, n_positions=16,
            tie_word_embeddings=False, bos_token_id=63, eos_token_id=63,
        )  # fmt: skip
        model = transformers.GPT2LMHeadModel(config)
    else:
        config = transformers.OPTConfig(
            hidden_size=32, num_hidden_layers=2, ffn_dim=64, num_attention_heads=4,
            vocab_size=64, max_position_embeddings=16, word_embed_proj_dim=32,
            tie_word_embeddings=False,
        )  # fmt: skip
        model = transformers.OPTForCausalLM(config)
    model = model.to(F64).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    return model


@pytest.mark.parametrize("kind", ["gpt2", "opt"])
def test_centering_turns_layernorms_into_rmsnorms_and_opens_the_stream_rotations(kind) -> None:
    """SliceGPT's computational invariance: the mean projected out of every write into the
    stream (an element of the stream translation group), every LayerNorm on it then computes
    an RMSNorm, folded; the stream gets its O(d), checked by acting with random rotations."""
    model = _untied_layernorm_lm(kind)
    folded = ps.fold_norms(model, _ids(), add_bias=True)
    report = folded.paramsym_fold
    assert len(report.centered) == 1
    assert report.centered[0].startswith("mean_translation[")
    assert report.output_change < 1e-13
    assert not report.skipped
    norms = [m for m in folded.modules() if isinstance(m, ps.FoldedNorm)]
    assert len(norms) == 5
    assert all(m.kind == "rms" for m in norms)
    assert torch.allclose(_logits(folded), _logits(model), atol=1e-12)
    (stream,) = [s for s in ps.symmetries(folded, example_input=_ids())
                 if isinstance(s, HiddenOrthogonal)]  # fmt: skip
    assert stream.exact
    assert stream.dim == 32 * 31 // 2
    reference = _logits(folded)
    for seed in range(3):
        q = stream.sample(scale=1.0, generator=torch.Generator().manual_seed(seed), dtype=F64)
        moved = _logits(folded, stream.act(ps.params_of(folded), q))
        assert float((moved - reference).norm() / reference.norm()) < 1e-12
    # folded without centering, the LayerNorms stay LayerNorms and no rotation is offered
    plain = ps.fold_norms(model, _ids(), center=False, add_bias=True)
    assert {m.kind for m in plain.modules() if isinstance(m, ps.FoldedNorm)} == {"layer"}
    assert not any(isinstance(s, HiddenOrthogonal) for s in
                   ps.symmetries(plain, example_input=_ids(), verify=False))  # fmt: skip


def test_a_head_without_bias_keeps_the_final_layernorm_unless_asked() -> None:
    folded = ps.fold_norms(_untied_layernorm_lm("gpt2"), _ids())
    assert "add_bias=True" in folded.paramsym_fold.skipped["transformer.ln_f"]
    assert folded.lm_head.bias is None


def test_a_stream_with_a_tied_writer_is_not_centered() -> None:
    """GPT-2 with its head tied to the embedding: the embedding writes into the stream but is
    left out of the translations (the head would see them), so no translation of the other
    writers makes the stream mean-free: centering is refused by name and not done."""
    from paramsym.symmetry.translation import StreamTranslation

    model = _untied_layernorm_lm("gpt2")
    model.config.tie_word_embeddings = True
    model.tie_weights()
    (translation,) = [s for s in ps.symmetries(model, example_input=_ids())
                      if isinstance(s, StreamTranslation)]  # fmt: skip
    assert not translation.closed
    with pytest.raises(ps.InvalidArgumentError, match="mean-free"):
        translation.centering(ps.params_of(model))
    assert ps.fold_norms(model, _ids()).paramsym_fold.centered == []


def test_fold_norms_needs_an_input_the_model_takes() -> None:
    with pytest.raises(ps.InvalidArgumentError, match="rejects example_input"):
        ps.fold_norms(_llama_lm(tied=False), {"input_idz": torch.zeros(2, 8, dtype=torch.long)})
