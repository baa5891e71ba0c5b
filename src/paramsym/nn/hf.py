"""Tiny Hugging Face models built from configs (nothing is downloaded), for the test zoo.

``transformers`` is an optional need: it is imported when a builder is called, and a missing
install raises :class:`~paramsym.errors.InvalidArgumentError` with the command to fix it.
"""

from __future__ import annotations

from typing import Any

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
