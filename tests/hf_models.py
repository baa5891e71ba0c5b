"""Hugging Face models as users build them: small configs (nothing downloaded), every other
setting the library's default (``use_cache=True`` for decoders, the default attention
kernel), called with a dict input and returning a ``ModelOutput``.

Weights are moved off their initialisation (norm weights at 1, biases at 0 would hide
rescalings and translations), and models are in evaluation mode.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

VOCAB, SEQ = 64, 8

_DECODER = {
    "hidden_size": 32,
    "intermediate_size": 48,
    "num_hidden_layers": 1,
    "num_attention_heads": 4,
    "vocab_size": VOCAB,
    "max_position_embeddings": 64,
}
_GQA = {**_DECODER, "num_key_value_heads": 2}


def _config(kind: str) -> tuple[str, str, dict[str, Any]]:
    """(config class, model class, config keywords) of architecture ``kind``."""
    return {
        "llama": ("LlamaConfig", "LlamaModel", _GQA),
        "mistral": ("MistralConfig", "MistralModel", _GQA),
        "qwen2": ("Qwen2Config", "Qwen2Model", _GQA),
        "gemma": ("GemmaConfig", "GemmaModel", {**_GQA, "head_dim": 8}),
        "phi": ("PhiConfig", "PhiModel", {**_DECODER, "partial_rotary_factor": 0.5}),
        "gpt2": ("GPT2Config", "GPT2Model", {"n_embd": 32, "n_layer": 1, "n_head": 4,
                                             "vocab_size": VOCAB, "n_positions": 64}),
        "gpt2-lm": ("GPT2Config", "GPT2LMHeadModel", {"n_embd": 32, "n_layer": 1, "n_head": 4,
                                                      "vocab_size": VOCAB, "n_positions": 64}),
        "opt": ("OPTConfig", "OPTModel", {"hidden_size": 32, "ffn_dim": 48, "num_hidden_layers": 1,
                                          "num_attention_heads": 4, "vocab_size": VOCAB,
                                          "max_position_embeddings": 64,
                                          "word_embed_proj_dim": 32}),
        "bloom": ("BloomConfig", "BloomModel", {"hidden_size": 32, "n_layer": 1, "n_head": 4,
                                                "vocab_size": VOCAB}),
        "t5": ("T5Config", "T5EncoderModel", {"d_model": 32, "d_kv": 8, "d_ff": 48, "num_layers": 1,
                                              "num_heads": 4, "vocab_size": VOCAB}),
        "swin": ("SwinConfig", "SwinModel", {"image_size": 16, "patch_size": 2, "embed_dim": 16,
                                             "depths": [1], "num_heads": [4], "window_size": 4}),
    }[kind]  # fmt: skip


KINDS = ("llama", "mistral", "qwen2", "gemma", "phi", "gpt2", "gpt2-lm", "opt", "bloom", "t5",
         "swin")  # fmt: skip


def build(kind: str, dtype: torch.dtype = torch.float64, seed: int = 0) -> nn.Module:
    """The model ``kind`` with default settings, weights perturbed, in ``dtype``, eval mode."""
    import transformers

    config_name, model_name, options = _config(kind)
    torch.manual_seed(seed)
    config = getattr(transformers, config_name)(**options)
    if hasattr(config, "bos_token_id") and kind.startswith("gpt2"):
        config.bos_token_id = config.eos_token_id = VOCAB - 1
    model = getattr(transformers, model_name)(config).to(dtype).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    return model


def example_input(kind: str, dtype: torch.dtype = torch.float64) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    if kind == "swin":
        return {"pixel_values": torch.randn(2, 3, 16, 16, generator=generator, dtype=dtype)}
    return {"input_ids": torch.randint(0, VOCAB, (2, SEQ), generator=generator)}


def first_output(model: nn.Module, state: dict[str, torch.Tensor], x: dict[str, Any]) -> Any:
    """The first field of the ``ModelOutput`` (``last_hidden_state`` or ``logits``), computed
    at ``state`` with the cache off."""
    from paramsym.core.calls import call_arguments
    from paramsym.core.params import stateless_call

    args, kwargs = call_arguments(model, x)
    with torch.no_grad():
        return stateless_call(model, state, args, kwargs)[0]


def state_of(model: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach() for k, v in [*model.named_parameters(), *model.named_buffers()]}
