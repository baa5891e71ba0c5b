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
* any other integer input that an embedding reads (``token_type_ids``): uniform over that table's
  rows (:func:`index_ranges`), so every row is used; an input the model never receives leaves
  its table's other rows unused (BERT without ``token_type_ids`` reads row 0 of the token-type
  table only: pass them in the example to reach the rest);
* any other integer or boolean tensor (``position_ids`` that feed a rotary embedding): rows of
  the example, drawn with replacement.

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
from torch.overrides import TorchFunctionMode

from paramsym.core.batches import Inputs, as_inputs, tensors
from paramsym.core.calls import call_arguments
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


_LOOKUPS = (torch.nn.functional.embedding, torch.embedding)


class _Lookups(TorchFunctionMode):
    """Records, for each of ``watched`` (integer tensors), the fewest rows of a table it indexes."""

    def __init__(self, watched: dict[int, str | None]) -> None:
        super().__init__()
        self.watched = watched
        self.rows: dict[str | None, int] = {}

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if func in _LOOKUPS and len(args) >= 2:
            indices, table = (args[0], args[1]) if func is _LOOKUPS[0] else (args[1], args[0])
            key = _storage(indices)
            if key in self.watched and isinstance(table, Tensor) and table.ndim == 2:
                name = self.watched[key]
                rows = int(table.shape[0])
                self.rows[name] = min(rows, self.rows.get(name, rows))
        return func(*args, **kwargs)


def _storage(t: Any) -> int | None:
    if not isinstance(t, Tensor) or t.is_floating_point() or t.numel() == 0:
        return None
    return int(t.untyped_storage().data_ptr())


def index_ranges(model: nn.Module, example: Any) -> dict[str | None, int]:
    """Input name (``None`` for a tensor given alone) -> the rows of the embedding table that
    it indexes (the fewest, where several read it), for the example's integer inputs that reach
    an embedding lookup as they are (or through a view). Found by one forward on ``example``
    that watches ``torch.nn.functional.embedding``; inputs no lookup reads are left out.

    >>> import torch
    >>> index_ranges(torch.nn.Embedding(5, 2), torch.tensor([[1, 2]]))
    {None: 5}
    """
    x = as_inputs(
        dict(example) if isinstance(example, Mapping) else example, "audit", "example_input"
    )
    named = x.items() if isinstance(x, dict) else [(None, x)]
    watched = {
        key: name
        for name, t in named
        if (key := _storage(t)) is not None and t.dtype not in (torch.bool, torch.uint8)
    }
    if not watched or not tensors(x):
        return {}
    args, kwargs = call_arguments(model, x, "audit")
    mode = _Lookups(watched)
    with torch.no_grad(), mode:
        model(*args, **kwargs)
    return mode.rows


def _draw_tensor(
    name: str | None,
    t: Tensor,
    count: int,
    generator: torch.Generator,
    vocab: int | None,
    alone: bool,
    rows: int | None = None,
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
    if rows is not None and t.dtype not in (torch.bool, torch.uint8):
        return torch.randint(0, rows, shape, generator=generator).to(t.device, t.dtype)
    picked = torch.randint(0, t.shape[0], (count,), generator=generator)
    return t[picked.to(t.device)]


def draw_like(
    example: Any,
    count: int,
    generator: torch.Generator,
    *,
    vocabulary: int | None = None,
    ranges: Mapping[str | None, int] | None = None,
) -> Inputs:
    """``count`` samples of the kind of ``example`` (a tensor ``(b, ...)`` or a mapping of
    tensors with the batch axis first), drawn from ``generator`` as the module docstring says.
    ``vocabulary``: the number of distinct token ids (default: one more than the largest id in
    the example, which leaves the tokens above it out). ``ranges``: input name -> the rows of
    the table it indexes (:func:`index_ranges`), for the integer inputs other than token ids."""
    if count < 1:
        raise InvalidArgumentError(f"draw_like: count must be at least 1, got {count}")
    x = as_inputs(
        dict(example) if isinstance(example, Mapping) else example, "audit", "example_input"
    )
    ranges = ranges or {}
    if isinstance(x, Tensor):
        return _draw_tensor(None, x, count, generator, vocabulary, True, ranges.get(None))
    return {
        name: _draw_tensor(name, t, count, generator, vocabulary, len(x) == 1, ranges.get(name))
        for name, t in x.items()
    }
