"""Hugging Face models as users build them: small configs (nothing downloaded), every other
setting the library's default (``use_cache=True`` for decoders, the default attention
kernel), called with a dict input and returning a ``ModelOutput``.

The models are :func:`paramsym.nn.hf.hf_tiny` at its default sizes (width 32, one layer, 4
heads, 2 key/value heads): weights moved off their initialisation (norm weights at 1, biases
at 0 would hide rescalings and translations), evaluation mode.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from paramsym.nn.hf import HF_KINDS, HF_VOCAB, hf_example_input, hf_tiny

VOCAB, SEQ = HF_VOCAB, 8
KINDS = HF_KINDS


def build(kind: str, dtype: torch.dtype = torch.float64, seed: int = 0) -> nn.Module:
    """The model ``kind`` with default settings, weights perturbed, in ``dtype``, eval mode."""
    return hf_tiny(kind, dtype=dtype, seed=seed)


def example_input(kind: str, dtype: torch.dtype = torch.float64) -> dict[str, torch.Tensor]:
    return hf_example_input(kind, dtype=dtype, sequence=SEQ, seed=1)


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


def regression_case(
    kind: str, dtype: torch.dtype = torch.float64
) -> tuple[nn.Module, Any, tuple[Any, torch.Tensor]]:
    """(model, loss_fn, batch) for the model ``kind`` in ``dtype``: the mean squared error of
    its first output field against a fixed random target."""
    from paramsym.core.params import functional_call, params_of

    model = build(kind, dtype=dtype)
    x = example_input(kind, dtype=dtype)
    out = functional_call(model, params_of(model), x)
    first = out[0] if isinstance(out, tuple) else next(iter(out.values()))
    generator = torch.Generator().manual_seed(11)
    target = torch.randn(first.shape, generator=generator, dtype=dtype)
    return model, lambda output, y: ((output[0] - y) ** 2).mean(), (x, target)
