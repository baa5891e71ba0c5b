"""The models of ``catalogue-completeness``: one small model per architecture the library
supports, built as users have them, and the same model inside a user's module.

Hugging Face models come from small configs (nothing downloaded) with every other setting at
the class's default (``use_cache`` on, the default attention kernel, tied embeddings where the
class ties them), weights moved off their initialisation by ``0.1·randn`` (norm weights at 1 and
biases at 0 would hide rescalings and translations), in float64 and evaluation mode. Learned
position tables have exactly the example's sequence length of rows, so that every row is
reached and nothing is flat only because the data never use it. A parallel block (Phi,
GPT-NeoX, Falcon) applies its first MLP to the token's embedding alone, a function on the V
tokens whose parameters are flat beyond the V·d values it takes, which is a degeneracy of the
finite input set, not a symmetry: those MLPs are narrow here (width d/2: 76 parameters
against V·d = 192 values at d = 8), as in ``tests/test_audit_decoders.py``. The other models
are the zoo's (:mod:`paramsym.nn.zoo`) and the papers' MLPs (:func:`paramsym.mlp`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from paramsym.nn.builders import mlp
from paramsym.nn.zoo import ZOO, randomize_norm_layers

SEQUENCE = 8
"""Tokens per example sequence (and rows of every learned position table)."""
VOCAB = 24
"""Vocabulary of the token models."""
F64 = torch.float64


@dataclass(frozen=True)
class Architecture:
    """One model of the experiment.

    Attributes:
        name: short name, e.g. ``"llama-mqa"``.
        kind: ``"decoder"``, ``"encoder"``, ``"vision"``, ``"cnn"``, ``"rnn"`` or ``"mlp"``.
        smooth: every activation is smooth (no ReLU): at a random point, flat directions of
            the point or the data are not expected.
        build: ``build(width, seed) -> (model, example_input)``.
        needs_transformers: built with Hugging Face transformers.
    """

    name: str
    kind: str
    smooth: bool
    build: Callable[[int, int], tuple[nn.Module, Any]]
    needs_transformers: bool = True


class Wrapped(nn.Module):
    """A user's module around a model: ``forward(x)`` calls the inner model as users do
    (``self.backbone(input_ids=x).last_hidden_state`` for Hugging Face token models, the
    cache left at its default; the first output field otherwise)."""

    def __init__(self, backbone: nn.Module, key: str | None) -> None:
        super().__init__()
        self.backbone, self.key = backbone, key

    def forward(self, x: Tensor) -> Tensor:
        out = self.backbone(**{self.key: x}) if self.key else self.backbone(x)
        if isinstance(out, tuple) and not hasattr(out, "keys"):
            return out[0]
        return out[0] if hasattr(out, "keys") else out


def wrapped(model: nn.Module, example: Any) -> tuple[nn.Module, Tensor]:
    """``(Wrapped(model), x)``: the model inside a user's module, and its tensor input."""
    if isinstance(example, dict):
        (key, value), *rest = example.items()
        assert not rest, "wrapped models take one input"
        return Wrapped(model, key).eval(), value
    return Wrapped(model, None).eval(), example


def _hf(config_name: str, model_name: str, seed: int, **options: Any) -> nn.Module:
    import transformers

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        config = getattr(transformers, config_name)(**options)
        model = getattr(transformers, model_name)(config).to(F64).eval()
        with torch.no_grad():
            for p in model.parameters():
                p.add_(0.1 * torch.randn_like(p))
    return model


def _ids(seed: int, vocab: int = VOCAB) -> dict[str, Tensor]:
    generator = torch.Generator().manual_seed(seed + 1)
    return {"input_ids": torch.randint(0, vocab, (2, SEQUENCE), generator=generator)}


def _pixels(seed: int, side: int) -> dict[str, Tensor]:
    generator = torch.Generator().manual_seed(seed + 1)
    return {"pixel_values": torch.randn(2, 3, side, side, generator=generator, dtype=F64)}


def _decoder(model_name: str, **extra: Any) -> Callable[[int, int], tuple[nn.Module, Any]]:
    """A one-block decoder of ``width``; an ``extra`` value that is callable is called with
    the width (Gemma's ``head_dim``, 256 by default whatever the width: its q_proj alone
    would be 2 × 256 wide, P ≈ 20k, and the dense audit minutes and gigabytes)."""

    def build(width: int, seed: int) -> tuple[nn.Module, Any]:
        options = {
            "hidden_size": width,
            "intermediate_size": 3 * width // 2,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "vocab_size": VOCAB,
            "max_position_embeddings": SEQUENCE,
            **{k: v(width) if callable(v) else v for k, v in extra.items()},
        }
        return _hf(f"{model_name}Config", f"{model_name}Model", seed, **options), _ids(seed)

    return build


def _gpt2(lm_head: bool) -> Callable[[int, int], tuple[nn.Module, Any]]:
    def build(width: int, seed: int) -> tuple[nn.Module, Any]:
        options = {
            "n_embd": width,
            "n_layer": 1,
            "n_head": 2,
            "vocab_size": VOCAB,
            "n_positions": SEQUENCE,
            "bos_token_id": VOCAB - 1,
            "eos_token_id": VOCAB - 1,
        }
        name = "GPT2LMHeadModel" if lm_head else "GPT2Model"
        return _hf("GPT2Config", name, seed, **options), _ids(seed)

    return build


def _with(
    config_name: str, model_name: str, options: Callable[[int], dict[str, Any]], pixels: int = 0
) -> Callable[[int, int], tuple[nn.Module, Any]]:
    def build(width: int, seed: int) -> tuple[nn.Module, Any]:
        model = _hf(config_name, model_name, seed, **options(width))
        return model, (_pixels(seed, pixels) if pixels else _ids(seed))

    return build


def _encoder(width: int, **extra: Any) -> dict[str, Any]:
    return {
        "hidden_size": width,
        "num_attention_heads": 2,
        "intermediate_size": 3 * width // 2,
        "num_hidden_layers": 1,
        "vocab_size": VOCAB,
        "max_position_embeddings": SEQUENCE,
        **extra,
    }


def _zoo(name: str) -> Callable[[int, int], tuple[nn.Module, Any]]:
    def build(width: int, seed: int) -> tuple[nn.Module, Any]:
        entry = ZOO[name]
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = entry.build().to(F64).eval()
        x = entry.example_input(torch.Generator().manual_seed(seed + 1))
        return model, (x.to(F64) if x.is_floating_point() else x)

    return build


def _mlp(activation: str) -> Callable[[int, int], tuple[nn.Module, Any]]:
    def build(width: int, seed: int) -> tuple[nn.Module, Any]:
        model = mlp([4, width, width, 3], activation=activation, dtype=F64, seed=seed)
        randomize_norm_layers(model)
        x = torch.randn(2, 4, generator=torch.Generator().manual_seed(seed + 1), dtype=F64)
        return model.eval(), x

    return build


def _opt(w: int) -> dict[str, Any]:
    return {"hidden_size": w, "ffn_dim": 3 * w // 2, "num_hidden_layers": 1,
            "num_attention_heads": 2, "vocab_size": VOCAB, "max_position_embeddings": SEQUENCE,
            "word_embed_proj_dim": w}  # fmt: skip


def _bloom(w: int) -> dict[str, Any]:
    return {"hidden_size": w, "n_layer": 1, "n_head": 2, "vocab_size": VOCAB}


def _falcon(w: int) -> dict[str, Any]:
    return {"hidden_size": w, "num_attention_heads": 2, "num_hidden_layers": 1,
            "vocab_size": VOCAB, "multi_query": True, "ffn_hidden_size": w // 2}  # fmt: skip


def _gpt_neo(w: int) -> dict[str, Any]:
    return {"hidden_size": w, "num_heads": 2, "num_layers": 1, "vocab_size": VOCAB,
            "max_position_embeddings": SEQUENCE, "attention_types": [[["global"], 1]],
            "bos_token_id": VOCAB - 1, "eos_token_id": VOCAB - 1}  # fmt: skip


def _gpt_neox(w: int) -> dict[str, Any]:
    return {"hidden_size": w, "num_attention_heads": 2, "num_hidden_layers": 1,
            "intermediate_size": w // 2, "vocab_size": VOCAB,
            "max_position_embeddings": SEQUENCE}  # fmt: skip


def _bert(w: int) -> dict[str, Any]:
    return _encoder(w, type_vocab_size=1)


def _factorised(w: int) -> dict[str, Any]:  # ALBERT, ELECTRA: embeddings narrower than hidden
    return _encoder(w, embedding_size=w // 2, type_vocab_size=1)


def _distilbert(w: int) -> dict[str, Any]:
    return {"dim": w, "n_heads": 2, "hidden_dim": 3 * w // 2, "n_layers": 1,
            "vocab_size": VOCAB, "max_position_embeddings": SEQUENCE}  # fmt: skip


def _t5(w: int) -> dict[str, Any]:
    return {"d_model": w, "d_kv": w // 2, "d_ff": 3 * w // 2, "num_layers": 1, "num_heads": 2,
            "vocab_size": VOCAB, "relative_attention_num_buckets": 8}  # fmt: skip


def _vit(w: int) -> dict[str, Any]:
    return {"hidden_size": w, "num_attention_heads": 2, "intermediate_size": 3 * w // 2,
            "num_hidden_layers": 1, "image_size": 8, "patch_size": 4}  # fmt: skip


def _swin(w: int) -> dict[str, Any]:
    return {"image_size": 8, "patch_size": 2, "embed_dim": w // 2, "depths": [1],
            "num_heads": [2], "window_size": 2}  # fmt: skip


_A = Architecture
ARCHITECTURES: dict[str, Architecture] = {
    a.name: a
    for a in (
        _A("llama", "decoder", True, _decoder("Llama", num_key_value_heads=2)),
        _A("llama-mqa", "decoder", True, _decoder("Llama", num_key_value_heads=1)),
        _A("mistral", "decoder", True, _decoder("Mistral", num_key_value_heads=1)),
        _A("qwen2", "decoder", True, _decoder("Qwen2", num_key_value_heads=1)),
        _A(
            "gemma",
            "decoder",
            True,
            _decoder("Gemma", num_key_value_heads=1, head_dim=lambda w: w // 2),
        ),
        _A(
            "phi",
            "decoder",
            True,
            _decoder("Phi", partial_rotary_factor=0.5, intermediate_size=lambda w: w // 2),
        ),
        _A(
            "phi3",
            "decoder",
            True,
            _decoder("Phi3", num_key_value_heads=1, pad_token_id=VOCAB - 1, eos_token_id=VOCAB - 1),
        ),
        _A("gpt2", "decoder", True, _gpt2(lm_head=False)),
        _A("gpt2-lm-tied", "decoder", True, _gpt2(lm_head=True)),
        _A("opt", "decoder", False, _with("OPTConfig", "OPTModel", _opt)),  # ReLU
        _A("bloom", "decoder", True, _with("BloomConfig", "BloomModel", _bloom)),
        _A("falcon-mqa", "decoder", True, _with("FalconConfig", "FalconModel", _falcon)),
        _A("gpt-neo", "decoder", True, _with("GPTNeoConfig", "GPTNeoModel", _gpt_neo)),
        _A("gpt-neox", "decoder", True, _with("GPTNeoXConfig", "GPTNeoXModel", _gpt_neox)),
        _A("bert", "encoder", True, _with("BertConfig", "BertModel", _bert)),
        _A("albert", "encoder", True, _with("AlbertConfig", "AlbertModel", _factorised)),
        _A("electra", "encoder", True, _with("ElectraConfig", "ElectraModel", _factorised)),
        _A(
            "distilbert", "encoder", True, _with("DistilBertConfig", "DistilBertModel", _distilbert)
        ),
        _A("t5-encoder", "encoder", False, _with("T5Config", "T5EncoderModel", _t5)),  # ReLU
        _A("vit", "vision", True, _with("ViTConfig", "ViTModel", _vit, pixels=8)),
        _A("swin", "vision", True, _with("SwinConfig", "SwinModel", _swin, pixels=8)),
        _A("cnn-bn", "cnn", False, _zoo("cnn-bn"), needs_transformers=False),
        _A("resnet-block", "cnn", False, _zoo("resnet-block"), needs_transformers=False),
        _A("lstm", "rnn", True, _zoo("lstm"), needs_transformers=False),
        _A("gru", "rnn", True, _zoo("gru"), needs_transformers=False),
        _A("residual-mlp", "mlp", False, _zoo("residual-mlp"), needs_transformers=False),
        _A("mlp-tanh", "mlp", True, _mlp("tanh"), needs_transformers=False),
        _A("mlp-relu", "mlp", False, _mlp("relu"), needs_transformers=False),
    )
}
"""Every architecture of the experiment, by name."""
