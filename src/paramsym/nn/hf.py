"""Tiny Hugging Face models built from configs (nothing is downloaded): GPT-2 and BERT for the
test zoo (:func:`hf_gpt2`, :func:`hf_bert`), and one model of each architecture family of
:data:`HF_KINDS` as users have it (:func:`hf_tiny`, :func:`hf_example_input`).

``transformers`` is an optional need: it is imported when a builder is called, and a missing
install raises :class:`~paramsym.errors.InvalidArgumentError` with the command to fix it.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from paramsym.errors import InvalidArgumentError


def _hf_model(kind: str, attn_implementation: str | None, pooler: bool, **config: Any) -> Any:
    """``transformers.{kind}Model({kind}Config(**config))``, imported here (an optional need)."""
    try:
        import transformers
    except ImportError as err:
        raise InvalidArgumentError(
            f"zoo model hf_{kind.lower()} needs Hugging Face transformers: pip install transformers"
        ) from err
    if attn_implementation is not None:
        config["attn_implementation"] = attn_implementation
    config_object = getattr(transformers, f"{kind}Config")(**config)
    options = {} if kind == "GPT2" else {"add_pooling_layer": pooler}
    return getattr(transformers, f"{kind}Model")(config_object, **options)


class HFLastHidden(nn.Module):
    """Wraps a Hugging Face base model so that ``forward(input_ids)`` returns the tensor
    ``model(input_ids=input_ids).last_hidden_state`` (batch, seq, width) instead of a
    ``ModelOutput``. The wrapped model is ``self.model`` (parameter names gain ``model.``)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: Tensor) -> Tensor:
        return self.model(input_ids=input_ids).last_hidden_state


def hf_gpt2(
    *,
    layers: int = 1,
    width: int = 16,
    heads: int = 2,
    vocab: int = 32,
    positions: int = 16,
    last_hidden_state: bool = False,
    attn_implementation: str | None = None,
) -> nn.Module:
    """``transformers.GPT2Model`` from a tiny ``GPT2Config``: dropout 0, ``use_cache=False`` (with
    the cache on, the forward also returns a ``DynamicCache``, which ``torch.export`` refuses),
    eval mode. Returns a ``ModelOutput`` unless ``last_hidden_state`` (then :class:`HFLastHidden`).
    ``attn_implementation``: ``"eager"`` or ``"sdpa"`` (transformers' default)."""
    model = _hf_model(
        "GPT2",
        attn_implementation,
        False,
        n_layer=layers,
        n_embd=width,
        n_head=heads,
        vocab_size=vocab,
        n_positions=positions,
        **dict.fromkeys(("resid_pdrop", "embd_pdrop", "attn_pdrop"), 0.0),
        use_cache=False,
        bos_token_id=vocab - 1,
        eos_token_id=vocab - 1,
    )
    return (HFLastHidden(model) if last_hidden_state else model).eval()


def hf_bert(
    *,
    layers: int = 1,
    width: int = 16,
    heads: int = 2,
    vocab: int = 32,
    positions: int = 16,
    intermediate: int = 32,
    pooler: bool = True,
    last_hidden_state: bool = False,
    attn_implementation: str | None = None,
) -> nn.Module:
    """``transformers.BertModel`` from a tiny ``BertConfig``: dropout 0, eval mode, with the
    pooler unless ``pooler=False``. Returns a ``ModelOutput`` (``last_hidden_state``,
    ``pooler_output``) unless ``last_hidden_state`` (then :class:`HFLastHidden`)."""
    model = _hf_model(
        "Bert",
        attn_implementation,
        pooler,
        num_hidden_layers=layers,
        hidden_size=width,
        num_attention_heads=heads,
        vocab_size=vocab,
        max_position_embeddings=positions,
        intermediate_size=intermediate,
        **dict.fromkeys(("hidden_dropout_prob", "attention_probs_dropout_prob"), 0.0),
    )
    return (HFLastHidden(model) if last_hidden_state else model).eval()


# -- the architecture families of issue 28 -------------------------------------------------------

HF_KINDS = (
    "llama",
    "mistral",
    "qwen2",
    "gemma",
    "phi",
    "gpt2",
    "gpt2-lm",
    "opt",
    "bloom",
    "t5",
    "swin",
)
"""Architectures :func:`hf_tiny` builds: RoPE decoders with grouped-query attention (Llama,
Mistral, Qwen2, Gemma), Phi (partial rotary), GPT-2 (base model and LM head), OPT, BLOOM
(ALiBi), the T5 encoder and Swin."""

HF_VOCAB = 64
"""Vocabulary of the token models :func:`hf_tiny` builds."""

HF_IMAGE_SIZE = 16
"""Side of Swin's square input images."""

_HF_CLASSES = {
    "llama": ("LlamaConfig", "LlamaModel"),
    "mistral": ("MistralConfig", "MistralModel"),
    "qwen2": ("Qwen2Config", "Qwen2Model"),
    "gemma": ("GemmaConfig", "GemmaModel"),
    "phi": ("PhiConfig", "PhiModel"),
    "gpt2": ("GPT2Config", "GPT2Model"),
    "gpt2-lm": ("GPT2Config", "GPT2LMHeadModel"),
    "opt": ("OPTConfig", "OPTModel"),
    "bloom": ("BloomConfig", "BloomModel"),
    "t5": ("T5Config", "T5EncoderModel"),
    "swin": ("SwinConfig", "SwinModel"),
}
_GROUPED_QUERY = ("llama", "mistral", "qwen2", "gemma")


def _hf_kind(kind: str) -> str:
    if kind not in _HF_CLASSES:
        raise InvalidArgumentError(f"hf_tiny: unknown kind {kind!r}; known: {', '.join(HF_KINDS)}")
    return kind


def hf_tiny_config(
    kind: str, *, width: int = 32, layers: int = 1, heads: int = 4, kv_heads: int = 2
) -> tuple[str, str, dict[str, Any]]:
    """(config class, model class, config keywords) of :func:`hf_tiny`'s model ``kind``: only
    the sizes are set, every other setting is the class's default.

    Decoders and T5: hidden size ``width``, ``heads`` heads of ``width // heads`` coordinates,
    feed-forward width ``3·width/2`` (GPT-2 and BLOOM: their default 4·width), ``layers``
    blocks, vocabulary :data:`HF_VOCAB`, 64 positions; Llama, Mistral, Qwen2 and Gemma with
    ``kv_heads`` key/value heads, Phi with ``partial_rotary_factor=0.5``. Swin: one stage of
    ``layers`` blocks (the second one shifted) on 16×16 images, patches 2×2, windows 4×4,
    embedding ``width // 2``. GPT-2's begin/end-of-text token is the last of the vocabulary.

    >>> hf_tiny_config("gemma")[2]["head_dim"]
    8
    """
    _hf_kind(kind)
    embed = width // 2 if kind == "swin" else width
    if min(width, layers, heads, kv_heads) < 1 or embed % heads:
        raise InvalidArgumentError(
            f"hf_tiny({kind!r}): width {width} (Swin: its embedding width // 2) must split into "
            f"{heads} heads, and every size must be positive"
        )
    if kind in _GROUPED_QUERY and heads % kv_heads:
        raise InvalidArgumentError(
            f"hf_tiny({kind!r}): {heads} query heads do not split into {kv_heads} key/value groups"
        )
    head_dim, ffn = width // heads, 3 * width // 2
    decoder = {
        "hidden_size": width,
        "intermediate_size": ffn,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "vocab_size": HF_VOCAB,
        "max_position_embeddings": 64,
    }
    gpt2 = {"n_embd": width, "n_layer": layers, "n_head": heads, "vocab_size": HF_VOCAB,
            "n_positions": 64, "bos_token_id": HF_VOCAB - 1,
            "eos_token_id": HF_VOCAB - 1}  # fmt: skip
    every: dict[str, dict[str, Any]] = {
        "llama": {**decoder, "num_key_value_heads": kv_heads},
        "mistral": {**decoder, "num_key_value_heads": kv_heads},
        "qwen2": {**decoder, "num_key_value_heads": kv_heads},
        "gemma": {**decoder, "num_key_value_heads": kv_heads, "head_dim": head_dim},
        "phi": {**decoder, "partial_rotary_factor": 0.5},
        "gpt2": gpt2,
        "gpt2-lm": gpt2,
        "opt": {"hidden_size": width, "ffn_dim": ffn, "num_hidden_layers": layers,
                "num_attention_heads": heads, "vocab_size": HF_VOCAB,
                "max_position_embeddings": 64, "word_embed_proj_dim": width},
        "bloom": {"hidden_size": width, "n_layer": layers, "n_head": heads,
                  "vocab_size": HF_VOCAB},
        "t5": {"d_model": width, "d_kv": head_dim, "d_ff": ffn, "num_layers": layers,
               "num_heads": heads, "vocab_size": HF_VOCAB},
        "swin": {"image_size": HF_IMAGE_SIZE, "patch_size": 2, "embed_dim": embed,
                 "depths": [layers], "num_heads": [heads], "window_size": 4},
    }  # fmt: skip
    return (*_HF_CLASSES[kind], every[kind])


def hf_tiny(
    kind: str,
    *,
    dtype: torch.dtype = torch.float64,
    seed: int = 0,
    width: int = 32,
    layers: int = 1,
    heads: int = 4,
    kv_heads: int = 2,
) -> nn.Module:
    """A small Hugging Face model of architecture ``kind`` (one of :data:`HF_KINDS`) as users
    have it: built from :func:`hf_tiny_config` (nothing is downloaded), every other setting the
    library's default (``use_cache=True`` for decoders, the default attention kernel), called
    with a dict (:func:`hf_example_input`) and returning a ``ModelOutput``.

    The weights are moved off their initialisation by ``0.1·randn`` (norm weights at 1 and
    biases at 0 would hide rescalings and translations); initialisation and perturbation are
    drawn from ``torch.manual_seed(seed)`` without touching the global random state. The model
    is in ``dtype`` and in evaluation mode. Raises :class:`~paramsym.errors.InvalidArgumentError`
    for an unknown kind, sizes that do not split into heads, and when ``transformers`` is not
    installed.
    """
    config_name, model_name, options = hf_tiny_config(
        kind, width=width, layers=layers, heads=heads, kv_heads=kv_heads
    )
    try:
        import transformers
    except ImportError as err:
        raise InvalidArgumentError(
            f"hf_tiny({kind!r}) needs Hugging Face transformers: pip install transformers"
        ) from err
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        config = getattr(transformers, config_name)(**options)
        model = getattr(transformers, model_name)(config).to(dtype).eval()
        with torch.no_grad():
            for p in model.parameters():
                p.add_(0.1 * torch.randn_like(p))
    return model


def hf_example_input(
    kind: str,
    *,
    dtype: torch.dtype = torch.float64,
    batch: int = 2,
    sequence: int = 8,
    seed: int = 1,
) -> dict[str, Tensor]:
    """An input of :func:`hf_tiny`'s model ``kind``: ``{"input_ids": (batch, sequence)}`` of
    tokens below :data:`HF_VOCAB`, or for Swin ``{"pixel_values": (batch, 3, 16, 16)}``
    standard normal in ``dtype``; drawn from ``torch.Generator().manual_seed(seed)``.

    >>> hf_example_input("gpt2")["input_ids"].shape
    torch.Size([2, 8])
    """
    generator = torch.Generator().manual_seed(seed)
    if _hf_kind(kind) == "swin":
        size = (batch, 3, HF_IMAGE_SIZE, HF_IMAGE_SIZE)
        return {"pixel_values": torch.randn(size, generator=generator, dtype=dtype)}
    return {"input_ids": torch.randint(0, HF_VOCAB, (batch, sequence), generator=generator)}
