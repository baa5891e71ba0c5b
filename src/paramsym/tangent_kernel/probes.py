"""Inputs drawn like a user's example, for analyses that need many samples (the audit).

A rank of the parameter Jacobian says something about the *function* only when the inputs reach
every parameter: every row of a token embedding, every unit that some input activates. A user
hands over one small batch; :func:`draw_like` draws as many samples as an analysis needs from
the same kind of input:

* floating tensors: Gaussian with the example's mean and standard deviation (per tensor);
* token ids (an integer tensor named ``input_ids``, or an integer tensor given alone): uniform
  over the vocabulary of the embedding that reads them (:func:`vocabulary`), so every token
  occurs;
* attention masks (``attention_mask``): all ones, as a batch without padding;
* any other integer or boolean tensor (``token_type_ids``, ``position_ids``): rows of the example,
  drawn with replacement.

>>> import torch
>>> x = {"input_ids": torch.tensor([[1, 2, 3]]), "attention_mask": torch.ones(1, 3)}
>>> drawn = draw_like(x, 4, torch.Generator().manual_seed(0), vocabulary=10)
>>> drawn["input_ids"].shape, bool(drawn["attention_mask"].eq(1).all())
(torch.Size([4, 3]), True)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor, nn

from paramsym.core.batches import Inputs, as_inputs
from paramsym.errors import InvalidArgumentError

_TOKEN_KEYS = ("input_ids", "decoder_input_ids")
_MASK_KEYS = ("attention_mask", "decoder_attention_mask")


def vocabulary(model: nn.Module) -> int | None:
    """The number of rows of the embedding that reads a model's token ids: the table a module's
    ``get_input_embeddings()`` returns (Hugging Face models, at any depth of a user's module),
    else the model's only ``nn.Embedding``; ``None`` when neither says."""
    for module in model.modules():
        getter = getattr(module, "get_input_embeddings", None)
        if callable(getter):
            try:
                table = getter()
            except (NotImplementedError, AttributeError):
                continue
            if isinstance(table, nn.Embedding):
                return int(table.num_embeddings)
    tables = [m for m in model.modules() if isinstance(m, nn.Embedding)]
    return int(tables[0].num_embeddings) if len(tables) == 1 else None


def _draw_tensor(
    name: str | None,
    t: Tensor,
    count: int,
    generator: torch.Generator,
    vocab: int | None,
    alone: bool,
) -> Tensor:
    shape = (count, *t.shape[1:])
    if name in _MASK_KEYS:
        return torch.ones(shape, dtype=t.dtype, device=t.device)
    if t.is_floating_point():
        flat = t.detach().double()
        mean = float(flat.mean())
        std = float(flat.std()) if flat.numel() > 1 else 1.0
        noise = torch.randn(shape, generator=generator, dtype=torch.float64)
        return (mean + (std if std > 0 else 1.0) * noise).to(dtype=t.dtype, device=t.device)
    if (name in _TOKEN_KEYS or alone) and t.dtype not in (torch.bool, torch.uint8):
        high = vocab if vocab is not None else int(t.max()) + 1
        return torch.randint(0, high, shape, generator=generator).to(t.device, t.dtype)
    rows = torch.randint(0, t.shape[0], (count,), generator=generator)
    return t[rows.to(t.device)]


def draw_like(
    example: Any, count: int, generator: torch.Generator, *, vocabulary: int | None = None
) -> Inputs:
    """``count`` samples of the kind of ``example`` (a tensor ``(b, ...)`` or a mapping of
    tensors with the batch axis first), drawn from ``generator`` as the module docstring says.
    ``vocabulary``: the number of distinct token ids (default: one more than the largest id in
    the example, which leaves the tokens above it out)."""
    if count < 1:
        raise InvalidArgumentError(f"draw_like: count must be at least 1, got {count}")
    x = as_inputs(
        dict(example) if isinstance(example, Mapping) else example, "audit", "example_input"
    )
    if isinstance(x, Tensor):
        return _draw_tensor(None, x, count, generator, vocabulary, alone=True)
    return {
        name: _draw_tensor(name, t, count, generator, vocabulary, alone=len(x) == 1)
        for name, t in x.items()
    }
