"""``ps.untie``: tied parameters get their own copies, the function is unchanged, a Hugging Face
model saves both tensors and loads back untied in stock transformers (issue 45)."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

import paramsym as ps

transformers = pytest.importorskip("transformers")


class TiedLM(nn.Module):
    """A user's tied language model: the head reads the token table."""

    def __init__(self) -> None:
        super().__init__()
        self.embed, self.body = nn.Embedding(11, 6), nn.Linear(6, 6)
        self.head = nn.Linear(6, 11, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(torch.tanh(self.body(self.embed(ids))))


def _gpt2_lm() -> nn.Module:
    config = transformers.GPT2Config(n_layer=1, n_embd=8, n_head=2, vocab_size=16,
                                     n_positions=8, bos_token_id=15, eos_token_id=15)  # fmt: skip
    torch.manual_seed(0)
    return transformers.GPT2LMHeadModel(config).double().eval()


def test_a_tied_head_gets_its_own_copy_and_computes_the_same() -> None:
    model = TiedLM().double()
    ids = torch.randint(0, 11, (3, 4))
    untied = ps.untie(model)
    assert untied.paramsym_untie.untied == {"head.weight": "embed.weight"}
    assert untied.head.weight is not untied.embed.weight
    assert model.head.weight is model.embed.weight  # the given model is unchanged
    assert torch.equal(untied(ids), model(ids))
    with torch.no_grad():
        untied.head.weight.mul_(2.0)
    assert torch.equal(untied.embed.weight, model.embed.weight)


def test_a_reused_module_is_a_shared_layer_not_a_tie() -> None:
    shared = nn.Linear(4, 4)
    model = nn.Sequential(shared, nn.Tanh(), shared)
    untied = ps.untie(model)
    assert untied.paramsym_untie.untied == {}
    assert untied[0] is untied[2]
    assert "no parameter" in str(untied.paramsym_untie)


def test_untying_opens_the_stream_rotation_of_a_tied_gpt2() -> None:
    model = _gpt2_lm()
    x = {"input_ids": torch.randint(0, 16, (2, 6))}
    untied = ps.untie(model)
    assert untied.config.tie_word_embeddings is False
    assert untied.paramsym_untie.config == ["tie_word_embeddings"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        folded = [ps.fold_norms(m, x, add_bias=True) for m in (model, untied)]
        found = [ps.symmetries(m, example_input=x) for m in folded]

    def streams(catalogue: list) -> list[str]:
        return [s.name for s in catalogue if isinstance(s, ps.HiddenOrthogonal)
                and all(t.offset is None for t in s.slots)]  # fmt: skip

    assert streams(found[0]) == []
    assert len(streams(found[1])) == 1


def test_an_untied_hugging_face_model_saves_and_loads_untied(tmp_path) -> None:
    model = ps.untie(_gpt2_lm())
    with torch.no_grad():
        model.lm_head.weight.add_(0.25)  # what a stream rotation does: the copies differ
    model.save_pretrained(tmp_path)
    loaded = transformers.GPT2LMHeadModel.from_pretrained(tmp_path).double().eval()
    assert loaded.lm_head.weight is not loaded.transformer.wte.weight
    ids = torch.randint(0, 16, (2, 6))
    assert torch.equal(loaded(ids).logits, model(ids).logits)
